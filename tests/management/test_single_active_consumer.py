"""Single active consumer (``x-single-active-consumer``) on both brokers: activation in
subscription order, takeover on cancel, channel close and connection loss, what the
management API shows of it, and the exclusive consumers it refuses."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pika
import pytest

from tests.differential.helpers import settle
from tests.support.mgmt import Site, q, site_of
from tests.support.waiting import STATS_WAIT, wait_for


@pytest.fixture(params=["leveret", "rabbitmq"])
def site(request: pytest.FixtureRequest) -> Iterator[Site]:
    yield from site_of(request, "sac")


def activity(site: Site, queue: str) -> tuple[Any, dict[str, tuple[bool, str]]]:
    """The queue's single active consumer's tag (RabbitMQ names the field
    single_active_consumer_tag for classic queues, single_active_consumer_ctag for quorum
    queues), and each consumer's (active, status)."""
    info = site.api.get(f"/api/queues/{q(site.vhost)}/{q(queue)}")
    key = (
        "single_active_consumer_ctag"
        if info.get("type") == "quorum"
        else "single_active_consumer_tag"
    )
    consumers = {
        c["consumer_tag"]: (c["active"], c["activity_status"])
        for c in site.api.get(f"/api/consumers/{q(site.vhost)}")
        if c["queue"]["name"] == queue
    }
    return info.get(key, "missing"), consumers


def shows(site: Site, queue: str, expected: tuple[Any, dict[str, tuple[bool, str]]]) -> Any:
    """Wait until management shows ``expected`` (RabbitMQ's figures lag by seconds)."""
    return wait_for(lambda: activity(site, queue) == expected, timeout=STATS_WAIT) or activity(
        site, queue
    )


@pytest.mark.parametrize("queue_type", ["classic", "quorum"])
def test_takeover_in_subscription_order(site: Site, queue_type: str) -> None:
    name = f"t-sac-{queue_type}"
    a, b = site.connect(), site.connect()
    try:
        ch1, ch2, ch3 = a.channel(), a.channel(), b.channel()
        ch1.queue_declare(
            name,
            durable=True,
            arguments={"x-single-active-consumer": True, "x-queue-type": queue_type},
        )
        got: dict[str, list[bytes]] = {"c1": [], "c2": [], "c3": []}
        tags: dict[str, list[int]] = {"c1": [], "c2": [], "c3": []}

        def on(tag: str) -> Any:
            def cb(c: Any, m: Any, p: Any, body: bytes) -> None:
                got[tag].append(body)
                tags[tag].append(m.delivery_tag)

            return cb

        for ch in (ch1, ch2, ch3):
            ch.basic_qos(prefetch_count=10)
        ch1.basic_consume(name, on("c1"), consumer_tag="c1")
        ch2.basic_consume(name, on("c2"), consumer_tag="c2")
        ch3.basic_consume(name, on("c3"), consumer_tag="c3")
        pub = a.channel()
        pub.confirm_delivery()
        for i in range(3):
            pub.basic_publish("", name, f"m{i}".encode())
        settle(a, 0.3)
        settle(b, 0.1)
        assert got == {"c1": [b"m0", b"m1", b"m2"], "c2": [], "c3": []}
        assert (
            shows(
                site,
                name,
                (
                    "c1",
                    {
                        "c1": (True, "single_active"),
                        "c2": (False, "waiting"),
                        "c3": (False, "waiting"),
                    },
                ),
            )
            is True
        )
        # cancel: the next in subscription order takes over; c1's unacked stay with it
        ch1.basic_cancel("c1")
        pub.basic_publish("", name, b"m3")
        settle(a, 0.3)
        assert got["c2"] == [b"m3"]
        assert (
            shows(site, name, ("c2", {"c2": (True, "single_active"), "c3": (False, "waiting")}))
            is True
        )
        # channel close: the next (on another connection) takes over, and gets what the
        # closed channel had not acked
        ch2.close()
        settle(b, 0.5)
        assert got["c3"] == [b"m3"]
        ch1.basic_ack(tags["c1"][-1], multiple=True)
        # connection loss: nobody is left
        b.close()
        assert shows(site, name, (None, {})) is True
        ch4 = a.channel()
        ch4.basic_consume(name, on("c1"), consumer_tag="c4")
        assert shows(site, name, ("c4", {"c4": (True, "single_active")})) is True
        ch4.queue_delete(name)
    finally:
        for conn in (a, b):
            if conn.is_open:
                conn.close()


def test_exclusive_consumers_are_refused_by_classic_queues(site: Site) -> None:
    name = "t-sac-x-classic"
    conn = site.connect()
    try:
        ch = conn.channel()
        ch.queue_declare(name, durable=True, arguments={"x-single-active-consumer": True})
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
            ch.basic_consume(name, lambda *a: None, exclusive=True)
        assert (info.value.reply_code, info.value.reply_text) == (
            403,
            f"ACCESS_REFUSED - queue '{name}' in vhost '{site.vhost}' in exclusive use",
        )
        conn.channel().queue_delete(name)
    finally:
        conn.close()


def test_quorum_queues_ignore_the_exclusive_flag(site: Site) -> None:
    """rabbit_quorum_queue takes exclusive consumers as any other (and shows the flag)."""
    name = "t-sac-x-quorum"
    conn = site.connect()
    try:
        ch = conn.channel()
        ch.queue_declare(
            name,
            durable=True,
            arguments={"x-single-active-consumer": True, "x-queue-type": "quorum"},
        )
        ch.basic_consume(name, lambda *a: None, consumer_tag="c1")
        ch.basic_consume(name, lambda *a: None, exclusive=True, consumer_tag="c2")
        assert (
            shows(site, name, ("c1", {"c1": (True, "single_active"), "c2": (False, "waiting")}))
            is True
        )
        exclusive = {
            c["consumer_tag"]: c["exclusive"]
            for c in site.api.get(f"/api/consumers/{q(site.vhost)}")
        }
        assert exclusive == {"c1": False, "c2": True}
        ch.queue_delete(name)
    finally:
        conn.close()
