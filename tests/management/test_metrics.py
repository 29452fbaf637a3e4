"""/metrics in Prometheus's text format with rabbitmq_prometheus's metric names."""

from __future__ import annotations

import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support.brokers import BrokerUnderTest, ensure_rabbitmq_plugin
from tests.support.mgmt import Site


def scrape(url: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    with urllib.request.urlopen(url, timeout=10) as resp:
        assert resp.headers["Content-Type"].startswith("text/plain")
        text = resp.read().decode()
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out.setdefault(sample.name, []).append((sample.labels, sample.value))
    return out


def test_metrics_names_and_values(leveret_site: Site) -> None:
    site = leveret_site
    b = site.broker
    conn = site.connect()
    ch = conn.channel()
    ch.queue_declare("metered")
    for _ in range(5):
        ch.basic_publish("", "metered", b"m")
    conn.process_data_events(0.2)
    try:
        metrics = scrape(b.metrics_url)
        for name in (
            "rabbitmq_connections",
            "rabbitmq_channels",
            "rabbitmq_queues",
            "rabbitmq_consumers",
            "rabbitmq_queue_messages_ready",
            "rabbitmq_queue_messages_unacked",
            "rabbitmq_queue_messages",
            "rabbitmq_global_messages_received_total",
            "rabbitmq_global_messages_confirmed_total",
            "rabbitmq_global_messages_delivered_total",
            "rabbitmq_global_messages_acknowledged_total",
            "rabbitmq_connections_opened_total",
            "rabbitmq_build_info",
            "rabbitmq_identity_info",
            "rabbitmq_queue_messages_published_total",
        ):
            assert name in metrics, name
        assert metrics["rabbitmq_connections"][0][1] >= 1
        assert metrics["rabbitmq_queue_messages_ready"][0][1] >= 5
        assert metrics["rabbitmq_global_messages_received_total"][0][0] == {"protocol": "amqp091"}
        assert metrics["rabbitmq_global_messages_received_total"][0][1] >= 5
        assert metrics["rabbitmq_build_info"][0][0]["rabbitmq_version"] == "3.10.8"

        per_object = scrape(b.metrics_url + "/per-object")
        mine = {"vhost": site.vhost, "queue": "metered"}
        assert (mine, 5.0) in per_object["rabbitmq_queue_messages_ready"]
        assert (mine, 5.0) in per_object["rabbitmq_queue_messages_published_total"]
    finally:
        conn.close()


def families(url: str) -> dict[str, str]:
    """Metric family name (with _total for counters) -> type."""
    with urllib.request.urlopen(url, timeout=10) as resp:
        text = resp.read().decode()
    out = {}
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ", 3)
            out[name] = kind
    return out


@pytest.mark.rabbitmq
def test_metric_names_are_rabbitmq_prometheus_names(
    leveret: BrokerUnderTest, rabbitmq: BrokerUnderTest
) -> None:
    """Every family Leveret exposes is one rabbitmq_prometheus exposes, of the same type."""
    if not ensure_rabbitmq_plugin("rabbitmq_prometheus", 15692):
        pytest.fail("RabbitMQ's prometheus plugin could not be enabled")
    ours = families(leveret.metrics_url)
    theirs = families("http://127.0.0.1:15692/metrics")
    assert len(ours) >= 20
    missing = {name for name in ours if name not in theirs}
    assert missing == set()
    assert {name: kind for name, kind in ours.items() if theirs[name] != kind} == {}
