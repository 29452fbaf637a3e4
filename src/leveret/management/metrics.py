"""``/metrics`` in Prometheus text format, with rabbitmq_prometheus's metric names.

``/metrics`` gives aggregated values (rabbitmq_prometheus's default) and
``/metrics/per-object`` adds one sample per queue, labelled with ``vhost`` and ``queue``."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import TYPE_CHECKING

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    Metric,
    UnknownMetricFamily,
)
from prometheus_client.registry import Collector
from prometheus_client.samples import Sample

from leveret.broker import channel as counter  # a channel's counters, by index
from leveret.broker.amqp10_presence import DirectConnection
from leveret.broker.amqp10_session import Amqp10Session
from leveret.server.resources import file_descriptors, sockets_limit

if TYPE_CHECKING:
    from leveret.broker.ports import ConnectionInfo
    from leveret.broker.session import Session
    from leveret.broker.stream_session import StreamSession
    from leveret.management.context import Management

LOG_SOURCE_COUNTERS = (
    ("received", "Log records received by a log source (syslog, otlp), readable or not"),
    ("published", "Log records a log source published into the log exchange"),
    ("refused", "Log records a log source refused (malformed, or refused by the broker)"),
)
QUEUE_GAUGES = (
    ("rabbitmq_queue_messages_ready", "Messages ready to be delivered to consumers"),
    ("rabbitmq_queue_messages_unacked", "Messages delivered to consumers but not yet acknowledged"),
    ("rabbitmq_queue_messages", "Sum of ready and unacknowledged messages - total queue depth"),
    ("rabbitmq_queue_consumers", "Consumers on a queue"),
)

# rabbit_core_metrics' auth_attempt_metrics, in the order of their rows: the family name's
# infix and its help
AUTH_ATTEMPT_COUNTERS = (
    ("", "Total number of authorization attempts"),
    ("_succeeded", "Total number of successful authentication attempts"),
    ("_failed", "Total number of failed authentication attempts"),
)
# the protocols prometheus_rabbitmq_core_metrics_collector:is_protocol/1 labels
LABELLED_PROTOCOLS = frozenset(("amqp091", "amqp10", "mqtt", "http"))

GLOBAL_COUNTERS = (
    ("received", "publish", "Total number of messages received from publishers"),
    ("confirmed", "confirm", "Total number of messages confirmed to publishers"),
    ("delivered", "deliver_get", "Total number of messages delivered to consumers"),
    ("acknowledged", "ack", "Total number of messages acknowledged by consumers"),
    ("redelivered", "redeliver", "Total number of messages redelivered to consumers"),
)

# The stream protocol's figures in the rabbitmq_global_messages_* families: the family's
# short name -> the broker's stream counter.
STREAM_GLOBAL = {"received": "messages_received", "confirmed": "messages_confirmed"}

# rabbit_stream_metrics' protocol counters (rabbitmq_global_stream_error_*_total).
STREAM_ERRORS = tuple(
    (name, f"Total number of commands {doc}")
    for name, doc in (
        ("stream_does_not_exist", "rejected with stream does not exist error"),
        ("subscription_id_already_exists", "failed with subscription id already exists"),
        ("subscription_id_does_not_exist", "failed with subscription id does not exist"),
        ("stream_already_exists", "failed with stream already exists"),
        ("stream_not_available", "failed with stream not available"),
        ("sasl_mechanism_not_supported", "failed with sasl mechanism not supported"),
        ("authentication_failure", "failed with authentication failure"),
        ("sasl_error", "failed with sasl error"),
        ("sasl_challenge", "failed with sasl challenge"),
        (
            "sasl_authentication_failure_loopback",
            "failed with sasl authentication failure loopback",
        ),
        ("vhost_access_failure", "failed with vhost access failure"),
        ("unknown_frame", "failed with unknown frame"),
        ("frame_too_large", "failed with frame too large"),
        ("internal_error", "failed with internal error"),
        ("access_refused", "failed with access refused"),
        ("precondition_failed", "failed with precondition failed"),
        ("publisher_does_not_exist", "failed with publisher does not exist"),
    )
)


class BrokerCollector(Collector):
    """Reads the broker at scrape time."""

    def __init__(self, management: Management, per_object: bool = False) -> None:
        self.m = management
        self.per_object = per_object

    def channel_families(
        self, sessions: list[Session], directs: list[DirectConnection]
    ) -> Iterator[Metric]:
        """rabbitmq_prometheus's channel series: per channel (and per exchange or queue
        it used) with ``/metrics/per-object``, summed otherwise."""
        per = self.per_object
        gauges = [
            GaugeMetricFamily(name, doc, labels=["channel"] if per else [])
            for name, doc in CHANNEL_GAUGES
        ]
        by_exchange = [
            (
                i,
                CounterMetricFamily(
                    name, doc, labels=["channel", "vhost", "exchange"] if per else []
                ),
            )
            for i, name, doc in CHANNEL_EXCHANGE_COUNTERS
        ]
        by_queue = [
            (i, CounterMetricFamily(name, doc, labels=["channel", "vhost", "queue"] if per else []))
            for i, name, doc in CHANNEL_QUEUE_COUNTERS
        ]
        gauge_sums = [0] * len(gauges)
        exchange_sums = [0] * len(by_exchange)
        queue_sums = [0] * len(by_queue)
        for s in sessions:
            for number, ch in sorted(s.channels.items()):
                label = pid(s, number)
                values = [
                    len(ch.consumers),
                    len(ch.unacked),
                    ch.unconfirmed,
                    len(ch.tx_publishes),
                    ch.acks_uncommitted,
                    ch.global_prefetch,
                ]
                for k, (gauge, value) in enumerate(zip(gauges, values, strict=True)):
                    if per:
                        gauge.add_metric([label], value)
                    gauge_sums[k] += value
                for exchange, counts in ch.by_exchange.items():
                    for k, (i, xc) in enumerate(by_exchange):
                        if per:
                            xc.add_metric([label, s.vhost, exchange], counts[i])
                        exchange_sums[k] += counts[i]
                for queue, counts in ch.by_queue.items():
                    if queue.deleted:
                        continue
                    for k, (i, qc) in enumerate(by_queue):
                        if per:
                            qc.add_metric([label, queue.vhost, queue.name], counts[i])
                        queue_sums[k] += counts[i]
        for d in directs:  # an AMQP 1.0 session's channel (RabbitMQ 3.10.8's plugin)
            session = d.session
            values = [len(session.consumers), len(session.unsettled), len(session.confirms)]
            for k, (gauge, value) in enumerate(zip(gauges, [*values, 0, 0, 0], strict=True)):
                if per:
                    gauge.add_metric([pid(d, d.channel.number)], value)
                gauge_sums[k] += value
        if not per:
            for gauge, value in zip(gauges, gauge_sums, strict=True):
                gauge.add_metric([], value)
            for (_, xc), value in zip(by_exchange, exchange_sums, strict=True):
                xc.add_metric([], value)
            for (_, qc), value in zip(by_queue, queue_sums, strict=True):
                qc.add_metric([], value)
        yield from gauges
        yield from (f for _, f in by_exchange)
        yield from (f for _, f in by_queue)

    def connection_families(
        self, sessions: list[Session | StreamSession | Amqp10Session]
    ) -> Iterator[Metric]:
        """rabbitmq_prometheus's connection series (labelled "channel" with the
        connection's pid, as RabbitMQ labels them), from what the server counted on each
        socket."""
        per = self.per_object
        labels = ["channel"] if per else []
        counters = [
            CounterMetricFamily(name, doc, labels=labels)
            for name, doc in (
                (
                    "rabbitmq_connection_incoming_bytes_total",
                    "Total number of bytes received on a connection",
                ),
                (
                    "rabbitmq_connection_outgoing_bytes_total",
                    "Total number of bytes sent on a connection",
                ),
                (
                    "rabbitmq_connection_incoming_packets_total",
                    "Total number of packets received on a connection",
                ),
                (
                    "rabbitmq_connection_outgoing_packets_total",
                    "Total number of packets sent on a connection",
                ),
            )
        ]
        gauges = [
            GaugeMetricFamily(name, doc, labels=labels)
            for name, doc in (
                (
                    "rabbitmq_connection_pending_packets",
                    "Number of packets waiting to be sent on a connection",
                ),
                ("rabbitmq_connection_channels", "Channels on a connection"),
            )
        ]
        families: list[CounterMetricFamily | GaugeMetricFamily] = [*counters, *gauges]
        sums = [0] * len(families)
        for s in sessions:
            t = s.traffic
            if t is None:
                continue
            values = [t.recv_oct, t.send_oct, t.recv_cnt, t.send_cnt, t.pending(), s.channel_count]
            for k, (family, value) in enumerate(zip(families, values, strict=True)):
                if per:
                    family.add_metric([pid(s)], value)
                sums[k] += value
        if not per:
            for family, value in zip(families, sums, strict=True):
                family.add_metric([], value)
        yield from families

    def log_source_families(self) -> Iterator[Metric]:
        """Leveret's own (``leveret_`` names: RabbitMQ has no such sources): the records
        each log source in use has received, published and refused. Syslog is in use
        while it listens (the operator turned it on); OTLP, on by default, once it has
        received something. Until then the families are left out, and /metrics has only
        rabbitmq_prometheus's names."""
        server = self.m.server
        counts = server.log_intake.counts
        on = [s for s, used in (("syslog", server.syslog is not None),
                                ("otlp", counts["otlp"].received > 0)) if used]  # fmt: skip
        if not on:
            return
        for what, doc in LOG_SOURCE_COUNTERS:
            c = CounterMetricFamily(
                f"leveret_log_source_records_{what}_total", doc, labels=["source"]
            )
            for source in on:
                c.add_metric([source], getattr(counts[source], what))
            yield c

    def auth_attempt_families(self) -> Iterator[Metric]:
        """rabbit_core_metrics' auth_attempt_metrics, by protocol; per object also its
        auth_attempt_detailed_metrics, labelled with what each names (of address, user
        and protocol, those not empty)."""
        attempts = self.m.broker.auth_attempts
        for index, (short, doc) in enumerate(AUTH_ATTEMPT_COUNTERS):
            c = CounterMetricFamily(
                f"rabbitmq_auth_attempts{short}_total", doc, labels=["protocol"]
            )
            for protocol, row in attempts.by_protocol.items():
                # the collector's label/1 names only the protocols it knows (is_protocol):
                # the stream protocol's row goes out without a label
                labels = {"protocol": protocol} if protocol in LABELLED_PROTOCOLS else {}
                c.samples.append(Sample(f"rabbitmq_auth_attempts{short}_total", labels, row[index]))
            yield c
        if not self.per_object:  # the same sums: RabbitMQ leaves them out
            return
        for index, (short, doc) in enumerate(AUTH_ATTEMPT_COUNTERS):
            c = CounterMetricFamily(
                f"rabbitmq_auth_attempts_detailed{short}_total",
                doc.replace("authentication", "authorization") + " with source info",
            )
            for (address, user, protocol), row in attempts.by_source.items():
                named = {"remote_address": address, "username": user, "protocol": protocol}
                labels = {k: v for k, v in named.items() if v}
                c.samples.append(
                    Sample(f"rabbitmq_auth_attempts_detailed{short}_total", labels, row[index])
                )
            yield c

    def collect(self) -> Iterator[Metric]:
        m = self.m
        broker = m.broker
        stats = m.stats
        node = broker.node_name
        info = UnknownMetricFamily(
            "rabbitmq_build_info",
            "RabbitMQ & Erlang/OTP version info",
            labels=["rabbitmq_version", "prometheus_plugin_version", "product"],
        )
        version = broker.compat.version
        info.add_metric([version, version, "Leveret"], 1)
        yield info
        ident = UnknownMetricFamily(
            "rabbitmq_identity_info",
            "RabbitMQ node & cluster identity info",
            labels=["rabbitmq_node", "rabbitmq_cluster"],
        )
        ident.add_metric([node, broker.cluster_name], 1)
        yield ident

        sessions = list(stats.sessions())
        streams = list(stats.stream_sessions())
        # AMQP 1.0: each session's direct connection (RabbitMQ 3.10.8's plugin; sockets of
        # no figures) or each connection (RabbitMQ 4.2)
        amqp10 = list(stats.amqp10())
        directs = [c for c in amqp10 if isinstance(c, DirectConnection)]
        natives = [c for c in amqp10 if isinstance(c, Amqp10Session)]
        queues = [q for v in broker.vhosts.values() for q in v.queues.values()]
        consumers = sum(len(q.consumers) for q in queues)
        # a stream-protocol subscription is a consumer of its stream, as RabbitMQ counts it
        subscribers: Counter[object] = Counter(
            sub.queue for s in streams for sub in s.subscriptions.values()
        )
        stream_consumers = sum(subscribers.values())
        for name, doc, value in (
            (
                "rabbitmq_connections",
                "Connections currently open",
                len(sessions) + len(streams) + len(amqp10),
            ),
            (
                "rabbitmq_channels",
                "Channels currently open",
                sum(len(s.channels) for s in sessions) + len(directs),
            ),
            ("rabbitmq_consumers", "Consumers currently connected", consumers + stream_consumers),
            ("rabbitmq_queues", "Queues available", len(queues)),
        ):
            yield GaugeMetricFamily(name, doc, value=value)
        for name, doc, amqp, stream in (
            (
                "rabbitmq_global_consumers",
                "Current number of consumers",
                consumers,
                stream_consumers,
            ),
            (
                # as rabbit_global_counters: channels that have published, while open;
                # the stream protocol's declared publishers
                "rabbitmq_global_publishers",
                "Current number of publishers",
                sum(1 for s in sessions for ch in s.channels.values() if ch.published)
                + sum(1 for d in directs if d.session.figures.publish),
                sum(len(s.publishers) for s in streams),
            ),
        ):
            gauge = GaugeMetricFamily(name, doc, labels=["protocol"])
            gauge.add_metric(["amqp091"], amqp)
            gauge.add_metric(["stream"], stream)
            yield gauge

        for name, doc, key in (
            (
                "rabbitmq_connections_opened_total",
                "Total number of connections opened",
                "connections_opened",
            ),
            (
                "rabbitmq_connections_closed_total",
                "Total number of connections closed or terminated",
                "connections_closed",
            ),
            (
                "rabbitmq_channels_opened_total",
                "Total number of channels opened",
                "channels_opened",
            ),
            (
                "rabbitmq_channels_closed_total",
                "Total number of channels closed",
                "channels_closed",
            ),
            (
                "rabbitmq_queues_declared_total",
                "Total number of queues declared",
                "queues_declared",
            ),
            ("rabbitmq_queues_created_total", "Total number of queues created", "queues_created"),
            ("rabbitmq_queues_deleted_total", "Total number of queues deleted", "queues_deleted"),
        ):
            yield CounterMetricFamily(name, doc, value=stats.churn[key])

        totals = stats.totals()
        counted = broker.stream_counters
        for short, key, doc in GLOBAL_COUNTERS:
            c = CounterMetricFamily(
                f"rabbitmq_global_messages_{short}_total", doc, labels=["protocol"]
            )
            c.add_metric(["amqp091"], totals.get(key, 0))
            if short in STREAM_GLOBAL:
                c.add_metric(["stream"], counted[STREAM_GLOBAL[short]])
            yield c
        for code_name, doc in STREAM_ERRORS:
            c = CounterMetricFamily(
                f"rabbitmq_global_stream_error_{code_name}_total", doc, labels=["protocol"]
            )
            c.add_metric(["stream"], counted[f"stream_error_{code_name}"])
            yield c
        yield from self.log_source_families()
        yield from self.auth_attempt_families()

        labels = ["vhost", "queue"] if self.per_object else []
        families = {name: GaugeMetricFamily(name, doc, labels=labels) for name, doc in QUEUE_GAUGES}
        published = CounterMetricFamily(
            "rabbitmq_queue_messages_published_total",
            "Total number of messages published to queues",
            labels=labels,
        )
        sums = [0, 0, 0, 0, 0]
        for q in queues:
            ready = q.message_count
            readers = len(q.consumers) + subscribers[q]
            values = [ready, q.unacked, ready + q.unacked, readers, q.published]
            if self.per_object:
                for (name, _), value in zip(QUEUE_GAUGES, values, strict=False):
                    families[name].add_metric([q.vhost, q.name], value)
                published.add_metric([q.vhost, q.name], q.published)
            else:
                sums = [a + b for a, b in zip(sums, values, strict=True)]
        if not self.per_object:
            for (name, _), value in zip(QUEUE_GAUGES, sums, strict=False):
                families[name].add_metric([], value)
            published.add_metric([], sums[4])
        yield from families.values()
        yield published
        yield from self.channel_families(sessions, directs)
        yield from self.connection_families([*sessions, *streams, *natives])

        res = m.server.resources
        fd_used, fd_total = file_descriptors()
        for name, text, value in (
            ("rabbitmq_process_open_fds", "Open file descriptors", fd_used),
            (
                "rabbitmq_process_open_tcp_sockets",
                "Open TCP sockets",
                len(m.server.state.connections),
            ),
            ("rabbitmq_process_max_fds", "Open file descriptors limit", fd_total),
            ("rabbitmq_process_max_tcp_sockets", "Open TCP sockets limit", sockets_limit(fd_total)),
        ):
            yield GaugeMetricFamily(name, text, value=value)
        yield GaugeMetricFamily(
            "rabbitmq_process_resident_memory_bytes",
            "Memory used in bytes",
            value=res.mem_used,
        )
        yield GaugeMetricFamily(
            "rabbitmq_resident_memory_limit_bytes",
            "Memory high watermark in bytes",
            value=res.mem_limit,
        )
        if res.disk_free is not None:
            yield GaugeMetricFamily(
                "rabbitmq_disk_space_available_bytes",
                "Disk space available in bytes",
                value=res.disk_free,
            )
            yield GaugeMetricFamily(
                "rabbitmq_disk_space_available_limit_bytes",
                "Free disk space low watermark in bytes",
                value=res.disk_free_limit,
            )
        yield UnknownMetricFamily(
            "rabbitmq_alarms_free_disk_space_watermark",
            "is 1 if free disk space watermark alarm is in effect",
            value=1 if res.disk_alarm else 0,
        )
        yield UnknownMetricFamily(
            "rabbitmq_alarms_memory_used_watermark",
            "is 1 if VM memory watermark alarm is in effect",
            value=1 if res.mem_alarm else 0,
        )


def pid(session: ConnectionInfo, number: int = 0) -> str:
    """The label naming a channel (or, number 0, a connection), shaped as the Erlang pid
    RabbitMQ labels them with."""
    return f"<0.{session.id}.{number}>"


CHANNEL_GAUGES = (
    ("rabbitmq_channel_consumers", "Consumers on a channel"),
    ("rabbitmq_channel_messages_unacked", "Delivered but not yet acknowledged messages"),
    ("rabbitmq_channel_messages_unconfirmed", "Published but not yet confirmed messages"),
    (
        "rabbitmq_channel_messages_uncommitted",
        "Messages received in a transaction but not yet committed",
    ),
    (
        "rabbitmq_channel_acks_uncommitted",
        "Message acknowledgements in a transaction not yet committed",
    ),
    (
        "rabbitmq_channel_prefetch",
        "Total limit of unacknowledged messages for all consumers on a channel",
    ),
)
CHANNEL_EXCHANGE_COUNTERS = (
    (
        counter.PUBLISHED,
        "rabbitmq_channel_messages_published_total",
        "Total number of messages published into an exchange on a channel",
    ),
    (
        counter.CONFIRMED,
        "rabbitmq_channel_messages_confirmed_total",
        "Total number of messages published into an exchange and confirmed on the channel",
    ),
    (
        counter.RETURNED,
        "rabbitmq_channel_messages_unroutable_returned_total",
        "Total number of messages published as mandatory into an exchange and returned to "
        "the publisher as unroutable",
    ),
    (
        counter.DROPPED,
        "rabbitmq_channel_messages_unroutable_dropped_total",
        "Total number of messages published as non-mandatory into an exchange and dropped "
        "as unroutable",
    ),
)
CHANNEL_QUEUE_COUNTERS = (
    (
        counter.GET_ACK,
        "rabbitmq_channel_get_ack_total",
        "Total number of messages fetched with basic.get in manual acknowledgement mode",
    ),
    (
        counter.GET,
        "rabbitmq_channel_get_total",
        "Total number of messages fetched with basic.get in automatic acknowledgement mode",
    ),
    (
        counter.DELIVER_ACK,
        "rabbitmq_channel_messages_delivered_ack_total",
        "Total number of messages delivered to consumers in manual acknowledgement mode",
    ),
    (
        counter.DELIVER,
        "rabbitmq_channel_messages_delivered_total",
        "Total number of messages delivered to consumers in automatic acknowledgement mode",
    ),
    (
        counter.REDELIVER,
        "rabbitmq_channel_messages_redelivered_total",
        "Total number of messages redelivered to consumers",
    ),
    (
        counter.ACK,
        "rabbitmq_channel_messages_acked_total",
        "Total number of messages acknowledged by consumers",
    ),
    (
        counter.GET_EMPTY,
        "rabbitmq_channel_get_empty_total",
        "Total number of times basic.get operations fetched no message",
    ),
)


def make_metrics_app(management: Management) -> web.Application:
    aggregated = CollectorRegistry(auto_describe=False)
    aggregated.register(BrokerCollector(management))
    per_object = CollectorRegistry(auto_describe=False)
    per_object.register(BrokerCollector(management, per_object=True))

    def handler(registry: CollectorRegistry):  # type: ignore[no-untyped-def]
        async def serve(request: web.Request) -> web.Response:
            body = generate_latest(registry)
            return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

        return serve

    app = web.Application()
    app.router.add_get("/metrics", handler(aggregated))
    app.router.add_get("/metrics/per-object", handler(per_object))
    return app
