"""Direct reply-to (amq.rabbitmq.reply-to), which FastStream's request/reply uses, on
RabbitMQ 3.10.8 (127.0.0.1:5672) and on an in-process Leveret.
Run: PYTHONPATH=src python direct_reply_to.py"""
import pika
import leveret

RT = "amq.rabbitmq.reply-to"


def attempt(label, fn):
    try:
        print(f"  {label}: {fn()}")
    except Exception as e:
        print(f"  {label}: {e!r}")


def run(url):
    conn = pika.BlockingConnection(pika.URLParameters(url))
    ch = conn.channel()
    attempt("queue.declare passive", lambda: ch.queue_declare(RT, passive=True).method)
    ch = conn.channel()
    attempt("queue.declare", lambda: ch.queue_declare(RT).method)
    ch = conn.channel()
    ch.basic_publish("", "nowhere", b"x", pika.BasicProperties(reply_to=RT))
    attempt("publish reply_to=RT with no reply consumer, then any method",
            lambda: ch.exchange_declare("amq.direct", passive=True) and "channel open")
    ch = conn.channel()
    got = []
    attempt("basic.consume RT no_ack", lambda: ch.basic_consume(
        RT, lambda c, m, p, b: got.append(b), auto_ack=True))
    srv = conn.channel()  # a server answering to reply_to
    q = srv.queue_declare("", exclusive=True).method.queue
    seen = []

    def answer(c, m, p, b):
        seen.append(p.reply_to)
        c.basic_publish("", p.reply_to, b"answer:" + b)

    srv.basic_consume(q, answer, auto_ack=True)
    attempt("publish request reply_to=RT", lambda: ch.basic_publish(
        "", q, b"req", pika.BasicProperties(reply_to=RT)))
    for _ in range(20):
        conn.process_data_events(0.1)
        if got:
            break
    print(f"  server saw reply_to: {seen}; reply received: {got}")
    ch2 = conn.channel()
    attempt("basic.consume RT with acks", lambda: ch2.basic_consume(
        RT, lambda *a: None, auto_ack=False))
    try:
        conn.close()
    except Exception:
        pass


print("RabbitMQ 3.10.8:")
run("amqp://guest:guest@127.0.0.1:5672/%2F")
with leveret.Broker() as b:
    print("Leveret:")
    run(b.url)
