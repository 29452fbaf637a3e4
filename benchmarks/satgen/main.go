// Command satgen is the compiled load generator of benchmarks/saturation.py: one producer
// and N consumers on the unmodified amqp091-go client (Debian's
// golang-github-rabbitmq-amqp091-go-dev, built offline in GOPATH mode), each role on its
// own connection, all in one process so that one monotonic clock times a message from its
// publish to its delivery.
//
// The producer either saturates (publishes as fast as its confirm window allows, or as
// fast as the socket takes them without confirms) or keeps a fixed rate. Every body starts
// with the nanoseconds since the generator started, taken just before the publish call.
//
// Output on stdout, one JSON object per line: {"phase":"measuring"} when the measured
// window starts, {"phase":"done"} when it ends, then the result. Latencies are those of
// the deliveries and confirms that arrive inside the window.
package main

import (
	"encoding/binary"
	"encoding/json"
	"flag"
	"fmt"
	"math/bits"
	"os"
	"sort"
	"sync/atomic"
	"syscall"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// ---------------------------------------------------------------- histogram

// subBits sub-buckets per power of two: values are kept within 1/256 (0.4 %).
const subBits = 8
const subCount = 1 << subBits

// histogram of nanosecond values, log-linear (HdrHistogram's layout, much simplified).
type histogram struct {
	counts []uint64
	total  uint64
	max    int64
}

func newHistogram() *histogram {
	return &histogram{counts: make([]uint64, 64*subCount)}
}

func bucketOf(v int64) int {
	if v < subCount {
		if v < 0 {
			return 0
		}
		return int(v)
	}
	shift := bits.Len64(uint64(v)) - subBits - 1
	return (shift+1)*subCount + int(v>>uint(shift)) - subCount
}

// valueOf is the highest value a bucket holds.
func valueOf(b int) int64 {
	if b < subCount {
		return int64(b)
	}
	shift := b/subCount - 1
	sub := int64(b%subCount + subCount)
	return ((sub + 1) << uint(shift)) - 1
}

func (h *histogram) record(v int64) {
	h.counts[bucketOf(v)]++
	h.total++
	if v > h.max {
		h.max = v
	}
}

func (h *histogram) merge(o *histogram) {
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.total += o.total
	if o.max > h.max {
		h.max = o.max
	}
}

func (h *histogram) percentile(q float64) int64 {
	if h.total == 0 {
		return -1
	}
	rank := uint64(q*float64(h.total) + 0.5)
	if rank < 1 {
		rank = 1
	}
	var seen uint64
	for b, c := range h.counts {
		seen += c
		if seen >= rank {
			v := valueOf(b)
			if v > h.max {
				v = h.max
			}
			return v
		}
	}
	return h.max
}

func (h *histogram) summary() map[string]interface{} {
	return map[string]interface{}{
		"count": h.total,
		"p50":   h.percentile(0.50),
		"p99":   h.percentile(0.99),
		"p999":  h.percentile(0.999),
		"max":   h.max,
	}
}

// ------------------------------------------------------------------- config

type config struct {
	url         string
	topology    string // "fanout" or "queue"
	name        string
	consumers   int
	prefetch    int
	noAck       bool
	ackEvery    int
	confirm     int // confirm window; 0: no confirms
	rate        float64
	persistent  bool
	size        int
	warmup      time.Duration
	measure     time.Duration
	cleanupWait time.Duration
}

var start = time.Now()

// now is nanoseconds since the generator started (monotonic).
func now() int64 { return int64(time.Since(start)) }

// the measured window, in now() units; set once the warm-up is over
var windowFrom, windowTo atomic.Int64

func inWindow(t int64) bool {
	from := windowFrom.Load()
	return from > 0 && t >= from && t < windowTo.Load()
}

func emit(v interface{}) {
	out, err := json.Marshal(v)
	if err != nil {
		fail("marshal: %v", err)
	}
	fmt.Println(string(out))
}

func fail(format string, args ...interface{}) {
	fmt.Fprintf(os.Stderr, "satgen: "+format+"\n", args...)
	os.Exit(2)
}

func check(err error, what string) {
	if err != nil {
		fail("%s: %v", what, err)
	}
}

// ----------------------------------------------------------------- consumer

type consumer struct {
	conn      *amqp.Connection
	ch        *amqp.Channel
	queue     string
	delivered atomic.Int64 // inside the window
	latency   *histogram
	done      chan struct{}
}

func startConsumer(cfg *config, exchange string, stop <-chan struct{}) *consumer {
	conn, err := amqp.Dial(cfg.url)
	check(err, "consumer dial")
	ch, err := conn.Channel()
	check(err, "consumer channel")
	c := &consumer{conn: conn, ch: ch, latency: newHistogram(), done: make(chan struct{})}
	if cfg.topology == "fanout" {
		q, err := ch.QueueDeclare("", false, false, true, false, nil)
		check(err, "queue.declare")
		check(ch.QueueBind(q.Name, "", exchange, false, nil), "queue.bind")
		c.queue = q.Name
	} else {
		c.queue = cfg.name
	}
	if !cfg.noAck && cfg.prefetch > 0 {
		check(ch.Qos(cfg.prefetch, 0, false), "basic.qos")
	}
	deliveries, err := ch.Consume(c.queue, "", cfg.noAck, false, false, false, nil)
	check(err, "basic.consume")
	go c.run(cfg, deliveries, stop)
	return c
}

func (c *consumer) run(cfg *config, deliveries <-chan amqp.Delivery, stop <-chan struct{}) {
	defer close(c.done)
	unacked := 0
	for {
		select {
		case <-stop:
			return
		case d, ok := <-deliveries:
			if !ok {
				return
			}
			t := now()
			if inWindow(t) {
				c.delivered.Add(1)
				if len(d.Body) >= 8 {
					sent := int64(binary.BigEndian.Uint64(d.Body))
					c.latency.record(t - sent)
				}
			}
			if !cfg.noAck {
				unacked++
				if unacked >= cfg.ackEvery {
					if err := d.Ack(cfg.ackEvery > 1); err != nil {
						return
					}
					unacked = 0
				}
			}
		}
	}
}

// ----------------------------------------------------------------- producer

type producer struct {
	published atomic.Int64 // inside the window
	confirmed atomic.Int64
	nacked    atomic.Int64
	latency   *histogram // publish to confirm
}

func (p *producer) run(cfg *config, ch *amqp.Channel, exchange, key string, stop <-chan struct{}) {
	body := make([]byte, cfg.size)
	for i := 8; i < len(body); i++ {
		body[i] = byte('a' + i%26)
	}
	msg := amqp.Publishing{Body: body}
	if cfg.persistent {
		msg.DeliveryMode = amqp.Persistent
	}
	var window chan struct{}
	var sent []int64
	confirmsDone := make(chan struct{})
	if cfg.confirm > 0 {
		check(ch.Confirm(false), "confirm.select")
		window = make(chan struct{}, cfg.confirm)
		sent = make([]int64, cfg.confirm*4)
		confirms := ch.NotifyPublish(make(chan amqp.Confirmation, cfg.confirm*2))
		go func() {
			defer close(confirmsDone)
			for c := range confirms {
				t := now()
				if inWindow(t) {
					p.confirmed.Add(1)
					p.latency.record(t - sent[c.DeliveryTag%uint64(len(sent))])
					if !c.Ack {
						p.nacked.Add(1)
					}
				}
				<-window
			}
		}()
	} else {
		close(confirmsDone)
	}
	var interval int64
	if cfg.rate > 0 {
		interval = int64(1e9 / cfg.rate)
	}
	next := now()
	var seq uint64
	for {
		select {
		case <-stop:
			return
		default:
		}
		if window != nil {
			select {
			case window <- struct{}{}:
			case <-stop:
				return
			}
		}
		if interval > 0 {
			if wait := next - now(); wait > 0 {
				time.Sleep(time.Duration(wait))
			}
			next += interval
		}
		seq++
		t := now()
		if sent != nil {
			sent[seq%uint64(len(sent))] = t
		}
		binary.BigEndian.PutUint64(body, uint64(t))
		if err := ch.Publish(exchange, key, false, false, msg); err != nil {
			select {
			case <-stop:
				return
			default:
				fail("basic.publish: %v", err)
			}
		}
		if inWindow(t) {
			p.published.Add(1)
		}
	}
}

// cpuNanos is the user and system CPU time of this process so far.
func cpuNanos() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return -1
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

// --------------------------------------------------------------------- main

func main() {
	cfg := &config{}
	flag.StringVar(&cfg.url, "url", "amqp://guest:guest@127.0.0.1:5672/", "broker URL")
	flag.StringVar(&cfg.topology, "topology", "fanout", "fanout: a fanout exchange, one "+
		"exclusive queue per consumer; queue: one durable queue through the default exchange")
	flag.StringVar(&cfg.name, "name", "satgen", "exchange or queue name")
	flag.IntVar(&cfg.consumers, "consumers", 2, "consumers")
	flag.IntVar(&cfg.prefetch, "prefetch", 100, "basic.qos prefetch of acking consumers")
	flag.BoolVar(&cfg.noAck, "no-ack", false, "consumers consume with no_ack")
	flag.IntVar(&cfg.ackEvery, "ack-every", 1, "ack every N deliveries (multiple when N > 1)")
	flag.IntVar(&cfg.confirm, "confirm", 0, "publisher confirm window (0: no confirms)")
	flag.Float64Var(&cfg.rate, "rate", 0, "messages per second (0: as fast as possible)")
	flag.BoolVar(&cfg.persistent, "persistent", false, "delivery_mode 2")
	flag.IntVar(&cfg.size, "size", 100, "body bytes (at least 8)")
	warmup := flag.Float64("warmup", 2, "seconds before the measured window")
	seconds := flag.Float64("seconds", 10, "seconds measured")
	flag.Parse()
	if cfg.size < 8 {
		cfg.size = 8
	}
	if cfg.ackEvery < 1 {
		cfg.ackEvery = 1
	}
	cfg.warmup = time.Duration(*warmup * float64(time.Second))
	cfg.measure = time.Duration(*seconds * float64(time.Second))

	// setup: topology, then the consumers, then the producer
	setupConn, err := amqp.Dial(cfg.url)
	check(err, "dial")
	setup, err := setupConn.Channel()
	check(err, "channel")
	exchange, key := cfg.name, ""
	if cfg.topology == "fanout" {
		check(setup.ExchangeDeclare(cfg.name, "fanout", false, true, false, false, nil),
			"exchange.declare")
	} else {
		_, err := setup.QueueDeclare(cfg.name, true, false, false, false, nil)
		check(err, "queue.declare")
		exchange, key = "", cfg.name
	}
	stop := make(chan struct{})
	consumers := make([]*consumer, cfg.consumers)
	for i := range consumers {
		consumers[i] = startConsumer(cfg, cfg.name, stop)
	}
	pconn, err := amqp.Dial(cfg.url)
	check(err, "producer dial")
	pch, err := pconn.Channel()
	check(err, "producer channel")
	p := &producer{latency: newHistogram()}
	go p.run(cfg, pch, exchange, key, stop)

	time.Sleep(cfg.warmup)
	from := now()
	windowTo.Store(from + int64(cfg.measure))
	windowFrom.Store(from)
	emit(map[string]string{"phase": "measuring"})
	time.Sleep(cfg.measure)
	emit(map[string]string{"phase": "done"})
	close(stop)
	seconds_ := float64(cfg.measure) / 1e9

	deliveries := newHistogram()
	perConsumer := make([]float64, len(consumers))
	for i, c := range consumers {
		<-c.done
		deliveries.merge(c.latency)
		perConsumer[i] = float64(c.delivered.Load()) / seconds_
	}
	sort.Float64s(perConsumer)
	result := map[string]interface{}{
		"seconds":          seconds_,
		"published_per_s":  float64(p.published.Load()) / seconds_,
		"confirmed_per_s":  float64(p.confirmed.Load()) / seconds_,
		"nacked":           p.nacked.Load(),
		"delivered_per_s":  perConsumer,
		"deliver_latency":  deliveries.summary(),
		"confirm_latency":  p.latency.summary(),
		"consumers":        cfg.consumers,
		"confirm_window":   cfg.confirm,
		"rate":             cfg.rate,
		"topology":         cfg.topology,
		"persistent":       cfg.persistent,
		"generator_cpu_ns": cpuNanos(),
	}
	emit(result)

	// cleanup: the durable queue goes; the others go with their connections. A producer
	// blocked in a write (the broker does not read it) must not hold the exit up.
	time.AfterFunc(20*time.Second, func() {
		fmt.Fprintln(os.Stderr, "satgen: cleanup timed out")
		os.Exit(3)
	})
	pconn.Close()
	for _, c := range consumers {
		c.conn.Close()
	}
	if cfg.topology == "queue" {
		if _, err := setup.QueueDelete(cfg.name, false, false, false); err != nil {
			fmt.Fprintf(os.Stderr, "satgen: queue.delete: %v\n", err)
		}
	}
	setupConn.Close()
}
