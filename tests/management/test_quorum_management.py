"""What the management API and ``ctl list_queues`` show of a quorum queue, compared with
RabbitMQ field by field."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pika
import pytest

from tests.support.mgmt import QUEUE_RATES, Site, q
from tests.support.waiting import STATS_WAIT, wait_for

pytestmark = pytest.mark.rabbitmq

# The broker's own figures (memory, timings) and what RabbitMQ measures of its Erlang
# processes, which Leveret has no such thing to measure of.
VOLATILE = {
    "memory",
    "node",
    "leader",
    "members",
    "online",
    "open_files",
    "garbage_collection",
    "reductions",
    "reductions_details",
    "messages_ram",
    "message_bytes_ram",
} | QUEUE_RATES
RABBITMQ_ONLY = {"garbage_collection", "reductions", "reductions_details"}
# Figures Leveret does not measure for a quorum queue, so leaves out rather than invent:
# the queue process's memory (Leveret has no process per queue) and the consumers'
# capacity (measured for classic queues only)
NOT_MEASURED = {"memory", "consumer_capacity", "consumer_utilisation"}


def scenario(site: Site) -> tuple[pika.BlockingConnection, Any]:
    """A quorum queue with ready, unacknowledged and dead-lettered (at-least-once, no
    route) messages, and a consumer."""
    b = site.broker
    conn = pika.BlockingConnection(
        pika.ConnectionParameters(b.host, b.port, virtual_host=site.vhost)
    )
    ch = conn.channel()
    ch.exchange_declare("t-nowhere", "fanout", durable=True)
    ch.queue_declare(
        "t-qq",
        durable=True,
        arguments={
            "x-queue-type": "quorum",
            "x-max-length": 100,
            "x-overflow": "reject-publish",
            "x-dead-letter-exchange": "t-nowhere",
            "x-dead-letter-strategy": "at-least-once",
        },
    )
    ch.confirm_delivery()
    for i in range(6):
        ch.basic_publish(
            "", "t-qq", f"message {i}".encode(), pika.BasicProperties(delivery_mode=1 + i % 2)
        )
    m = ch.basic_get("t-qq")[0]
    ch.basic_reject(m.delivery_tag, requeue=False)  # stays, dead-lettered, no route
    ch.basic_get("t-qq")  # unacknowledged
    ch.basic_qos(prefetch_count=1)
    ch.basic_consume("t-qq", lambda *a: None, consumer_tag="c1")  # one more unacked
    return conn, ch


@pytest.fixture
def sites(leveret_site: Site, rabbitmq_site: Site) -> Iterator[tuple[Site, Site]]:
    conns = [scenario(leveret_site)[0], scenario(rabbitmq_site)[0]]
    try:
        yield leveret_site, rabbitmq_site
    finally:
        for conn in conns:
            conn.close()


def shown(site: Site, path: str) -> dict[str, Any]:
    item = site.api.get(path)
    if isinstance(item, list):
        item = next(i for i in item if i["name"] == "t-qq")
    item = dict(item)
    item["vhost"] = "VHOST"
    for d in item.get("consumer_details", []):
        d["channel_details"] = {}
        d["queue"]["vhost"] = "VHOST"
    return item


def test_queue_fields_match(sites: tuple[Site, Site]) -> None:
    lev, rmq = sites
    for path in (f"/api/queues/{q('{v}')}", f"/api/queues/{q('{v}')}/t-qq"):
        ours = shown(lev, path.replace(q("{v}"), q(lev.vhost)))

        def differences(path: str = path, ours: dict[str, Any] = ours) -> list[Any]:
            # RabbitMQ's quorum queue figures arrive with its 5-second tick
            theirs = shown(rmq, path.replace(q("{v}"), q(rmq.vhost)))
            out: list[Any] = []
            if set(ours) - set(theirs):
                out.append(("fields RabbitMQ does not have", set(ours) - set(theirs)))
            missing = set(theirs) - set(ours) - RABBITMQ_ONLY - NOT_MEASURED
            if missing:
                out.append(("fields missing", missing))
            for key in sorted(set(ours) & set(theirs) - VOLATILE):
                if ours[key] != theirs[key]:
                    out.append((key, ours[key], theirs[key]))
            return out

        assert wait_for(lambda d=differences: not d(), timeout=STATS_WAIT), differences()
    assert ours["type"] == "quorum"
    assert (
        ours["messages"],
        ours["messages_ready"],
        ours["messages_unacknowledged"],
        ours["messages_dlx"],
    ) == (6, 3, 2, 1)
    assert ours["leader"] == ours["node"] and ours["members"] == ours["online"] == [ours["node"]]


def test_ctl_list_queues_shows_the_type_and_members(sites: tuple[Site, Site]) -> None:
    def rows(site: Site) -> list[list[str]]:
        out = site.ctl(
            "list_queues",
            "-p",
            site.vhost,
            "--no-table-headers",
            "name",
            "type",
            "leader",
            "members",
            "online",
            "messages_ready",
        ).stdout
        node = site.api.get("/api/overview")["node"]
        return sorted(
            line.replace(node, "NODE").split("\t")
            for line in out.splitlines()
            if line.startswith("t-qq")
        )

    lev, rmq = sites
    assert rows(lev) == [["t-qq", "quorum", "NODE", "[NODE]", "[NODE]", "3"]]
    assert wait_for(lambda: rows(rmq) == rows(lev), timeout=STATS_WAIT), (rows(rmq), rows(lev))
