"""``/metrics`` in Prometheus text format, with rabbitmq_prometheus's metric names.

``/metrics`` gives aggregated values (rabbitmq_prometheus's default) and
``/metrics/per-object`` adds one sample per queue, labelled with ``vhost`` and ``queue``."""

from __future__ import annotations

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

from leveret.broker.broker import COMPATIBLE_VERSION

if TYPE_CHECKING:
    from leveret.management.context import Management

QUEUE_GAUGES = (
    ("rabbitmq_queue_messages_ready", "Messages ready to be delivered to consumers"),
    ("rabbitmq_queue_messages_unacked", "Messages delivered to consumers but not yet acknowledged"),
    ("rabbitmq_queue_messages", "Sum of ready and unacknowledged messages - total queue depth"),
    ("rabbitmq_queue_consumers", "Consumers on a queue"),
)

GLOBAL_COUNTERS = (
    ("received", "publish", "Total number of messages received from publishers"),
    ("confirmed", "confirm", "Total number of messages confirmed to publishers"),
    ("delivered", "deliver_get", "Total number of messages delivered to consumers"),
    ("acknowledged", "ack", "Total number of messages acknowledged by consumers"),
    ("redelivered", "redeliver", "Total number of messages redelivered to consumers"),
)


class BrokerCollector(Collector):
    """Reads the broker at scrape time."""

    def __init__(self, management: Management, per_object: bool = False) -> None:
        self.m = management
        self.per_object = per_object

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
        info.add_metric([COMPATIBLE_VERSION, COMPATIBLE_VERSION, "Leveret"], 1)
        yield info
        ident = UnknownMetricFamily(
            "rabbitmq_identity_info",
            "RabbitMQ node & cluster identity info",
            labels=["rabbitmq_node", "rabbitmq_cluster"],
        )
        ident.add_metric([node, broker.cluster_name], 1)
        yield ident

        sessions = list(stats.sessions())
        queues = [q for v in broker.vhosts.values() for q in v.queues.values()]
        consumers = sum(len(q.consumers) for q in queues)
        for name, doc, value in (
            ("rabbitmq_connections", "Connections currently open", len(sessions)),
            (
                "rabbitmq_channels",
                "Channels currently open",
                sum(len(s.channels) for s in sessions),
            ),
            ("rabbitmq_consumers", "Consumers currently connected", consumers),
            ("rabbitmq_queues", "Queues available", len(queues)),
            ("rabbitmq_global_consumers", "Current number of consumers", consumers),
            (
                "rabbitmq_global_publishers",
                "Current number of publishers",
                sum(1 for s in sessions if s.recv_publish),
            ),
        ):
            yield GaugeMetricFamily(name, doc, value=value)

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
            ("rabbitmq_queues_created_total", "Total number of queues created", "queues_created"),
            ("rabbitmq_queues_deleted_total", "Total number of queues deleted", "queues_deleted"),
        ):
            yield CounterMetricFamily(name, doc, value=stats.churn[key])

        totals = stats.totals()
        for short, key, doc in GLOBAL_COUNTERS:
            c = CounterMetricFamily(
                f"rabbitmq_global_messages_{short}_total", doc, labels=["protocol"]
            )
            c.add_metric(["amqp091"], totals.get(key, 0))
            yield c

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
            values = [ready, q.unacked, ready + q.unacked, len(q.consumers), q.published]
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

        res = m.server.resources
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
