"""Message counters and rates for the management API: live totals read from the broker,
and a rolling window of samples in memory from which rates are computed.

Counters of objects that go away (closed connections and channels, deleted queues) are
folded into retired totals when they go, so overview and vhost totals never go back."""

from __future__ import annotations

import time
from collections import Counter, deque
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from leveret.broker.amqp10_presence import DirectConnection
from leveret.broker.amqp10_session import Amqp10Session
from leveret.broker.channel import (
    ACK,
    DELIVER,
    DELIVER_ACK,
    DROPPED,
    GET,
    GET_ACK,
    GET_EMPTY,
    REDELIVER,
    RETURNED,
)
from leveret.broker.events import (
    BrokerEvent,
    ChannelClosed,
    ChannelOpened,
    ConnectionAuthorized,
    ConnectionClosed,
    QueueCreated,
    QueueDeclared,
    QueueDeclaredNew,
    QueueDeleted,
    VhostDeleted,
)
from leveret.broker.session import Session
from leveret.broker.stream_session import StreamSession

if TYPE_CHECKING:
    from leveret.broker.broker import BrokerCore
    from leveret.broker.channel import Channel
    from leveret.broker.exchanges import Exchange
    from leveret.broker.queues import Queue

# How often the window takes a sample, and how long it keeps them (RabbitMQ's "basic"
# retention keeps 600 s).
SAMPLE_INTERVAL = 1.0
KEEP_SECONDS = 600
# Rates are measured over the last few seconds of samples, as RabbitMQ's 5 s increment.
RATE_SPAN = 5.0

# What RabbitMQ 3.10's overview and vhosts show, in its order.
MESSAGE_STATS = (
    "publish",
    "confirm",
    "return_unroutable",
    "drop_unroutable",
    "get",
    "get_no_ack",
    "deliver",
    "deliver_no_ack",
    "redeliver",
    "ack",
    "deliver_get",
    "get_empty",
)
# A vhost's (and the overview's) two groups of message_stats, each shown once its
# rabbit_mgmt_metrics_collector table has the vhost's row: what channels published (a
# channel_exchange_metrics row, made by a publish), then what they delivered, fetched,
# acknowledged (a channel_queue_metrics row).
PUBLISH_GROUP = MESSAGE_STATS[:4]
DELIVER_GROUP = MESSAGE_STATS[4:]
# The overview's queue_metrics rates (vhost_msg_rates), there once a queue has been.
DISK_RATES = ("disk_reads", "disk_writes")
# A queue's and a channel's delivery figures, shown once something went out.
DELIVERY_STATS = (
    "ack",
    "deliver",
    "deliver_get",
    "deliver_no_ack",
    "get",
    "get_empty",
    "get_no_ack",
    "redeliver",
)
QUEUE_STATS = ("publish", *DELIVERY_STATS)
# A channel's publishing figures, shown once it published.
CHANNEL_PUBLISH_STATS = ("confirm", "drop_unroutable", "publish", "return_unroutable")
EXCHANGE_STATS = ("publish_in", "publish_out")
LENGTHS = ("messages", "messages_ready", "messages_unacknowledged")
# What the overview's churn_rates count: RabbitMQ's name -> the counter's here
CHURN_RATES = {
    "channel_closed": "channels_closed",
    "channel_created": "channels_opened",
    "connection_closed": "connections_closed",
    "connection_created": "connections_opened",
    "queue_created": "queues_created",
    "queue_declared": "queues_declared",
    "queue_deleted": "queues_deleted",
}
CHURN = tuple(CHURN_RATES.values())
# A vhost's connection traffic, in bytes (rabbit_mgmt_metrics_collector's
# vhost_stats_coarse_conn_stats: each connection's increments summed per vhost, a closed
# connection's kept).
TRAFFIC = ("recv_oct", "send_oct")


class Window:
    """Timestamped samples of one value (a cumulative counter or a gauge)."""

    __slots__ = ("samples",)

    def __init__(self, keep: int) -> None:
        self.samples: deque[tuple[float, float]] = deque(maxlen=keep)

    def add(self, t: float, value: float) -> None:
        self.samples.append((t, value))

    def rate(self, span: float = RATE_SPAN) -> float:
        """Change per second over the last ``span`` seconds of samples."""
        s = self.samples
        if len(s) < 2:
            return 0.0
        t1, v1 = s[-1]
        base_t, base_v = s[-2]
        for t, v in reversed(s):
            if t1 - t > span:
                break
            base_t, base_v = t, v
        if t1 <= base_t:
            return 0.0
        return round((v1 - base_v) / (t1 - base_t), 2)

    def details(self, age: float | None = None, incr: float | None = None) -> dict[str, Any]:
        """RabbitMQ's ``*_details`` object; with ``age``/``incr``, also ``samples``
        (newest first), ``avg_rate`` and ``avg``, as the ``msg_rates_age`` and
        ``lengths_age`` query parameters ask."""
        out: dict[str, Any] = {"rate": self.rate()}
        if age is None or not self.samples:
            return out
        step = max(incr or SAMPLE_INTERVAL, SAMPLE_INTERVAL)
        now = self.samples[-1][0]
        picked: list[tuple[float, float]] = []
        next_t = now
        for t, v in reversed(self.samples):
            if now - t > age:
                break
            if t <= next_t + 1e-6:
                picked.append((t, v))
                next_t = t - step
        out["samples"] = [{"sample": v, "timestamp": int(t * 1000)} for t, v in picked]
        if len(picked) >= 2:
            (t_new, v_new), (t_old, v_old) = picked[0], picked[-1]
            out["avg_rate"] = round((v_new - v_old) / (t_new - t_old), 2) if t_new > t_old else 0.0
        else:
            out["avg_rate"] = 0.0
        out["avg"] = round(sum(v for _, v in picked) / len(picked), 2) if picked else 0.0
        return out


class Windows:
    """One :class:`Window` per named value."""

    __slots__ = ("keep", "windows")

    def __init__(self, keep: int) -> None:
        self.keep = keep
        self.windows: dict[str, Window] = {}

    def add(self, t: float, values: dict[str, float]) -> None:
        for key, value in values.items():
            w = self.windows.get(key)
            if w is None:
                w = self.windows[key] = Window(self.keep)
            w.add(t, value)

    def details(self, key: str, age: float | None = None, incr: float | None = None) -> Any:
        w = self.windows.get(key)
        if w is None:
            return {"rate": 0.0}
        return w.details(age, incr)


def queue_counters(q: Queue) -> dict[str, float]:
    return {
        "publish": q.published,
        "ack": q.acked,
        "deliver": q.delivered,
        "deliver_get": q.delivered + q.delivered_no_ack + q.got + q.got_no_ack,
        "deliver_no_ack": q.delivered_no_ack,
        "get": q.got,
        "get_empty": q.got_empty,
        "get_no_ack": q.got_no_ack,
        "redeliver": q.redelivered_count,
    }


def channel_counters(ch: Channel) -> dict[str, float]:
    deliver, deliver_no_ack = ch.total(DELIVER_ACK), ch.total(DELIVER)
    get, get_no_ack = ch.total(GET_ACK), ch.total(GET)
    return {
        "publish": ch.published,
        "confirm": ch.confirmed,
        "return_unroutable": ch.exchange_total(RETURNED),
        "drop_unroutable": ch.exchange_total(DROPPED),
        "ack": ch.total(ACK),
        "deliver": deliver,
        "deliver_get": deliver + deliver_no_ack + get + get_no_ack,
        "deliver_no_ack": deliver_no_ack,
        "get": get,
        "get_empty": ch.total(GET_EMPTY),
        "get_no_ack": get_no_ack,
        "redeliver": ch.total(REDELIVER),
    }


def exchange_counters(x: Exchange) -> dict[str, float]:
    return {"publish_in": x.published_in, "publish_out": x.published_out}


def session_counters(s: Session) -> dict[str, float]:
    """What a connection's publishers did, counted where they publish."""
    return {
        "publish": s.recv_publish,
        "confirm": session_confirms(s),
        "return_unroutable": s.returned_unroutable,
        "drop_unroutable": s.dropped_unroutable,
    }


def direct_counters(d: DirectConnection) -> dict[str, float]:
    """What an AMQP 1.0 session published, counted where it publishes (its channel)."""
    f = d.session.figures
    return {
        "publish": f.publish,
        "confirm": f.confirm,
        "return_unroutable": 0,
        "drop_unroutable": f.drop_unroutable,
    }


def amqp10_channel_counters(d: DirectConnection) -> dict[str, float]:
    """An AMQP 1.0 session's channel's figures (RabbitMQ 3.10.8's plugin): what it
    published (:func:`direct_counters`), then what it delivered."""
    f = d.session.figures
    return direct_counters(d) | {
        "ack": f.ack,
        "deliver": f.deliver,
        "deliver_get": f.deliver,
        "deliver_no_ack": 0,
        "get": 0,
        "get_empty": 0,
        "get_no_ack": 0,
        "redeliver": f.redeliver,
    }


def queue_lengths(q: Queue) -> dict[str, float]:
    ready = q.message_count
    return {
        # with the dead letters a quorum queue still holds (at-least-once)
        "messages": ready + q.unacked + q.dead_lettered_figures[0],
        "messages_ready": ready,
        "messages_unacknowledged": q.unacked,
    }


def session_confirms(s: Session) -> int:
    return s.closed_channel_confirms + sum(ch.confirmed for ch in s.channels.values())


class Stats:
    """Totals and rate windows for the overview, each vhost, queue and channel."""

    def __init__(self, broker: BrokerCore, interval: float = SAMPLE_INTERVAL) -> None:
        self.broker = broker
        self.interval = interval
        keep = max(2, int(KEEP_SECONDS / interval))
        self.keep = keep
        # Counters of what is gone, overall and per vhost.
        self.retired: Counter[str] = Counter()
        self.vhost_retired: dict[str, Counter[str]] = {}
        # The vhosts that have had a queue since they were made: RabbitMQ's collector has
        # their vhost_msg_stats row (each queue's queue_coarse_metrics feed it) from then.
        self.vhost_queued: set[str] = set()
        # Bytes of the closed connections of each vhost.
        self.vhost_traffic_retired: dict[str, Counter[str]] = {}
        self.overview = Windows(keep)
        self.vhosts: dict[str, Windows] = {}
        self.queues: dict[Queue, Windows] = {}
        # AMQP 0-9-1 channels, and AMQP 1.0 sessions' channels (RabbitMQ 3.10.8's plugin)
        self.channels: dict[object, Windows] = {}
        self.exchanges: dict[Exchange, Windows] = {}
        # AMQP (0-9-1 and, RabbitMQ 4.2's, 1.0) and stream-protocol connections' traffic
        self.connections: dict[Session | StreamSession | Amqp10Session, Windows] = {}
        # Churn, for the Prometheus counters.
        self.churn: Counter[str] = Counter()
        self.churn_windows = Windows(keep)
        self.started = time.time()
        self._last_sample: float | None = None
        broker.observers.subscribe(self._event)

    # ----------------------------------------------------------------- events
    def _event(self, event: BrokerEvent) -> None:
        match event:
            case VhostDeleted(vhost=vhost):
                # a vhost made again under the same name starts from zero, as in RabbitMQ
                self.vhost_retired.pop(vhost.name, None)
                self.vhost_traffic_retired.pop(vhost.name, None)
                self.vhosts.pop(vhost.name, None)
                self.vhost_queued.discard(vhost.name)
            case QueueCreated(queue=queue):
                self.vhost_queued.add(queue.vhost)
            case QueueDeclaredNew():
                self.churn["queues_created"] += 1
            case QueueDeleted(queue=queue):
                self.churn["queues_deleted"] += 1
                counters = queue_counters(queue)
                del counters["publish"]  # publishes are counted where they arrive
                self._retire(queue.vhost, counters)
                self.queues.pop(queue, None)
            case ChannelOpened():
                self.churn["channels_opened"] += 1
            case ChannelClosed():
                self.churn["channels_closed"] += 1
            case QueueDeclared():
                self.churn["queues_declared"] += 1
            case ConnectionAuthorized():
                # rabbit_core_metrics:connection_created: as the connection opens on its
                # vhost (not at login: a refused login or vhost is not created, though
                # its reader's end counts as closed)
                self.churn["connections_opened"] += 1
            case ConnectionClosed(connection=connection):
                self.churn["connections_closed"] += 1
                if isinstance(connection, (Session, StreamSession, Amqp10Session)):
                    self._retire_traffic(connection)
                if isinstance(connection, Session) and connection.vhost:
                    self._retire(connection.vhost, session_counters(connection))
                elif isinstance(connection, DirectConnection):
                    self._retire(connection.vhost, direct_counters(connection))

    def count_publish(self, vhost: str, confirmed: bool = False, returned: bool = False) -> None:
        """A message published through the API (no AMQP session counts it); RabbitMQ's
        API publishes on a channel in confirm mode with mandatory set."""
        self._retire(
            vhost,
            {"publish": 1, "confirm": int(confirmed), "return_unroutable": int(returned)},
        )

    def had_queue(self, vhost: str) -> bool:
        """Whether a queue has been in the vhost since it was made (RabbitMQ shows its
        message counts from then on, and zeros after its last queue went)."""
        v = self.broker.vhosts.get(vhost)
        return vhost in self.vhost_queued or (v is not None and bool(v.queues))

    def _retire(self, vhost: str, counters: dict[str, float]) -> None:
        # A connection can go after its vhost did: its counts still add to the broker's.
        per_vhost = (
            self.vhost_retired.setdefault(vhost, Counter())
            if vhost in self.broker.vhosts
            else Counter()
        )
        for key, value in counters.items():
            self.retired[key] += int(value)
            per_vhost[key] += int(value)

    def _retire_traffic(self, c: Session | StreamSession | Amqp10Session) -> None:
        """A closed connection's bytes stay in its vhost's total, as RabbitMQ's collector
        adds a connection's last increment when it goes and keeps the sum."""
        if c.traffic is None or not c.vhost or c.vhost not in self.broker.vhosts:
            return
        kept = self.vhost_traffic_retired.setdefault(c.vhost, Counter())
        kept["recv_oct"] += c.traffic.recv_oct
        kept["send_oct"] += c.traffic.send_oct

    # ------------------------------------------------------------------ totals
    def traffic_connections(self) -> Iterator[Session | StreamSession | Amqp10Session]:
        """The connections whose sockets' bytes count in their vhost's: AMQP 0-9-1 and
        stream-protocol ones, and RabbitMQ 4.2's AMQP 1.0 ones (3.10.8's AMQP 1.0 reader
        reports no traffic; its sessions' direct connections have no socket)."""
        yield from self.sessions()
        yield from self.stream_sessions()
        for a in self.amqp10():
            if isinstance(a, Amqp10Session):
                yield a

    def vhost_traffic(self, vhost: str) -> dict[str, int] | None:
        """A vhost's connections' bytes received and sent, closed ones' included; None
        while no connection has been in it (RabbitMQ shows no recv_oct/send_oct then)."""
        out: Counter[str] = Counter()
        seen = vhost in self.vhost_traffic_retired
        out.update(self.vhost_traffic_retired.get(vhost, Counter()))
        for c in self.traffic_connections():
            if c.vhost == vhost and c.traffic is not None:
                seen = True
                out["recv_oct"] += c.traffic.recv_oct
                out["send_oct"] += c.traffic.send_oct
        return {key: out[key] for key in TRAFFIC} if seen else None

    def sessions(self) -> Iterator[Session]:
        for s in list(self.broker.connections.values()):
            if isinstance(s, Session) and s.user is not None and s.vhost and not s.closed:
                yield s

    def stream_sessions(self) -> Iterator[StreamSession]:
        """Stream-protocol connections past Open (the broker tracks them from there)."""
        for s in list(self.broker.connections.values()):
            if isinstance(s, StreamSession) and not s.closed:
                yield s

    def amqp10(self) -> Iterator[DirectConnection | Amqp10Session]:
        """AMQP 1.0 connections as /api/connections lists them: each session's direct
        connection (RabbitMQ 3.10.8's plugin), or each open connection (RabbitMQ 4.2)."""
        for c in list(self.broker.connections.values()):
            if isinstance(c, (DirectConnection, Amqp10Session)) and not c.closed:
                yield c

    def amqp10_channels(self) -> Iterator[DirectConnection]:
        """The AMQP 1.0 sessions' direct connections, whose channel 1 is a channel."""
        for c in self.amqp10():
            if isinstance(c, DirectConnection):
                yield c

    def totals(self, vhost: str | None = None) -> dict[str, int]:
        """Cumulative message counters, of one vhost or of the whole broker."""
        out: Counter[str] = Counter()
        out.update(self.retired if vhost is None else self.vhost_retired.get(vhost, Counter()))
        for s in self.sessions():
            if vhost is None or s.vhost == vhost:
                out.update(session_counters(s))
        for d in self.amqp10_channels():
            if vhost is None or d.vhost == vhost:
                out.update(direct_counters(d))
        vhosts = self.broker.vhosts.values() if vhost is None else [self.broker.vhosts[vhost]]
        for v in vhosts:
            for q in v.queues.values():
                for key, value in queue_counters(q).items():
                    if key != "publish":  # publishes are counted where they arrive
                        out[key] += int(value)
        return {key: out.get(key, 0) for key in MESSAGE_STATS}

    def lengths(self, vhost: str | None = None) -> dict[str, int]:
        out = dict.fromkeys(LENGTHS, 0)
        vhosts = self.broker.vhosts.values() if vhost is None else [self.broker.vhosts[vhost]]
        for v in vhosts:
            for q in v.queues.values():
                for key, value in queue_lengths(q).items():
                    out[key] += int(value)
        return out

    # ---------------------------------------------------------------- sampling
    def _new_windows(self, keep: int) -> Windows:
        """Windows for something that appeared since the last sample: it had nothing then,
        so its first rates span the same time as everyone else's."""
        w = Windows(keep)
        if self._last_sample is not None:
            w.add(self._last_sample, dict.fromkeys((*MESSAGE_STATS, *LENGTHS, *TRAFFIC), 0))
        return w

    def sample(self, now: float | None = None) -> None:
        """Take one sample of everything; called every ``interval`` seconds. One pass
        over sessions and queues gathers every vhost's figures and the overview's."""
        t = time.time() if now is None else now
        per_vhost: dict[str, Counter[str]] = {
            name: Counter(self.vhost_retired.get(name, Counter()))
            + Counter(self.vhost_traffic_retired.get(name, Counter()))
            for name in self.broker.vhosts
        }
        live_channels: set[object] = set()
        live_sessions: set[Session | StreamSession | Amqp10Session] = set()

        def traffic(s: Session | StreamSession | Amqp10Session) -> None:
            """A connection's bytes in and out, AMQP's or the stream protocol's alike."""
            if s.traffic is not None:
                live_sessions.add(s)
                sw = self.connections.get(s)
                if sw is None:
                    sw = self.connections[s] = self._new_windows(min(self.keep, 120))
                sw.add(t, {"recv_oct": s.traffic.recv_oct, "send_oct": s.traffic.send_oct})
                figures = per_vhost.get(s.vhost)
                if figures is not None:
                    figures["recv_oct"] += s.traffic.recv_oct
                    figures["send_oct"] += s.traffic.send_oct

        for s in self.sessions():
            traffic(s)
            figures = per_vhost.get(s.vhost)
            if figures is not None:
                figures.update(session_counters(s))
            for ch in s.channels.values():
                live_channels.add(ch)
                cw = self.channels.get(ch)
                if cw is None:
                    cw = self.channels[ch] = self._new_windows(min(self.keep, 120))
                cw.add(t, channel_counters(ch))
        for ss in self.stream_sessions():
            traffic(ss)
        for a in self.amqp10():
            if isinstance(a, Amqp10Session):  # RabbitMQ 4.2's: a network connection
                traffic(a)
                continue
            figures = per_vhost.get(a.vhost)
            if figures is not None:
                figures.update(direct_counters(a))
            live_channels.add(a.channel)
            cw = self.channels.get(a.channel)
            if cw is None:
                cw = self.channels[a.channel] = self._new_windows(min(self.keep, 120))
            cw.add(t, amqp10_channel_counters(a))
        live_queues: set[Queue] = set()
        live_exchanges: set[Exchange] = set()
        for name, v in self.broker.vhosts.items():
            figures = per_vhost[name]
            for x in v.exchanges.values():
                if x.published_in:
                    live_exchanges.add(x)
                    xw = self.exchanges.get(x)
                    if xw is None:
                        xw = self.exchanges[x] = self._new_windows(min(self.keep, 120))
                    xw.add(t, exchange_counters(x))
            for q in v.queues.values():
                live_queues.add(q)
                counters = queue_counters(q)
                lengths = queue_lengths(q)
                for key, value in counters.items():
                    if key != "publish":  # publishes are counted where they arrive
                        figures[key] += int(value)
                for key, value in lengths.items():
                    figures[key] += int(value)
                qw = self.queues.get(q)
                if qw is None:
                    qw = self.queues[q] = self._new_windows(min(self.keep, 120))
                qw.add(t, {**counters, **lengths})
        # The whole broker: everything retired (deleted vhosts' too) plus what is live.
        overview: Counter[str] = Counter(self.retired)
        for name, figures in per_vhost.items():
            retired = self.vhost_retired.get(name)
            for key, value in figures.items():
                overview[key] += value - (retired.get(key, 0) if retired else 0)
            w = self.vhosts.get(name)
            if w is None:
                w = self.vhosts[name] = self._new_windows(self.keep)
            w.add(t, {key: figures.get(key, 0) for key in (*MESSAGE_STATS, *LENGTHS, *TRAFFIC)})
        # (Leveret counts no queue's disk reads and writes: its overview's are zeros)
        self.overview.add(
            t, {key: overview.get(key, 0) for key in (*MESSAGE_STATS, *DISK_RATES, *LENGTHS)}
        )
        self.churn_windows.add(t, {key: self.churn[key] for key in CHURN})
        for gone_vhost in [n for n in self.vhosts if n not in self.broker.vhosts]:
            del self.vhosts[gone_vhost]
        for q in [q for q in self.queues if q not in live_queues]:
            del self.queues[q]
        for gone_channel in [c for c in self.channels if c not in live_channels]:
            del self.channels[gone_channel]
        for x in [x for x in self.exchanges if x not in live_exchanges]:
            del self.exchanges[x]
        for gone in [c for c in self.connections if c not in live_sessions]:
            del self.connections[gone]
        self._last_sample = t

    # ------------------------------------------------------------------ shapes
    def message_stats(
        self,
        totals: Mapping[str, float],
        windows: Windows | None,
        keys: tuple[str, ...] = MESSAGE_STATS,
        age: float | None = None,
        incr: float | None = None,
    ) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key in keys:
            out[key] = int(totals.get(key, 0))
            out[f"{key}_details"] = (
                windows.details(key, age, incr) if windows is not None else {"rate": 0.0}
            )
        return out

    def shown_stats(self, totals: Mapping[str, float]) -> tuple[str, ...]:
        """The message_stats keys RabbitMQ shows for a vhost (or the overview) with these
        totals: the publishing group once anything was published, the delivery group once
        anything was delivered, fetched (or not: get_empty), acknowledged."""
        keys: tuple[str, ...] = ()
        if any(totals.get(key, 0) for key in PUBLISH_GROUP):
            keys += PUBLISH_GROUP
        if any(totals.get(key, 0) for key in DELIVER_GROUP):
            keys += DELIVER_GROUP
        return keys

    def churn_rates(self) -> dict[str, Any]:
        """The overview's churn_rates: each count, and its rate as *_details."""
        out: dict[str, Any] = {}
        for name, key in sorted(CHURN_RATES.items()):
            out[name] = self.churn[key]
            out[f"{name}_details"] = self.churn_windows.details(key)
        return out

    def length_details(
        self,
        lengths: Mapping[str, float],
        windows: Windows | None,
        age: float | None = None,
        incr: float | None = None,
    ) -> dict[str, Any]:
        return self.message_stats(lengths, windows, LENGTHS, age, incr)
