"""A publisher blocked by a resource alarm keeps its connection: the broker stops reading
it and pauses its heartbeat monitor (rabbit_reader), so it is not closed for missed
heartbeats however long the alarm lasts, and nothing it sent is lost. The same scenario on
Leveret and on a RabbitMQ node of the test's own."""

from __future__ import annotations

import contextlib
import shutil
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pika
import pytest

from tests.support import rabbitmq
from tests.support.brokers import BrokerUnderTest, start_leveret
from tests.support.tmpfs import small_tmpfs

HEARTBEAT = 2  # seconds: the monitor would close a silent connection after 2 of them
BODY = b"x" * 4096


@dataclass
class AlarmBroker:
    broker: BrokerUnderTest
    raise_alarm: Callable[[], None]  # make the next publishes hit an alarm
    clear_alarm: Callable[[], None]  # called after the queue was emptied


@contextlib.contextmanager
def memory_alarm_broker(kind: str) -> Iterator[AlarmBroker]:
    """A broker of the test's own whose alarm the test can bring about and end.

    The configuration lives here only, so it can follow the alarms' implementation.
    RabbitMQ's memory alarm is moved live with ``rabbitmqctl set_vm_memory_high_watermark``.
    Leveret's memory watermark is set at start (and its queues page rather than grow), so
    the alarm here is its disk alarm: the data directory on a 96 MiB tmpfs, the default
    50 MB disk_free_limit, and a file that leaves 30 MB free raises it."""
    if kind == "leveret":
        with small_tmpfs("96m") as disk:
            filler = disk / "filler"

            def fill() -> None:
                with open(filler, "wb") as f:
                    f.write(b"\0" * (shutil.disk_usage(disk).free - 30_000_000))

            broker = start_leveret(data_dir=disk / "data")
            try:
                yield AlarmBroker(broker, fill, lambda: filler.unlink())
            finally:
                broker.stop()
        return
    if not rabbitmq.installed():
        pytest.skip("RabbitMQ is not installed here")
    node = rabbitmq.RabbitNode().start()
    try:
        yield AlarmBroker(
            BrokerUnderTest("rabbitmq", node.host, node.port),
            lambda: node.ctl("set_vm_memory_high_watermark", "absolute", "1"),
            lambda: node.ctl("set_vm_memory_high_watermark", "0.4"),
        )
    finally:
        node.close()


@pytest.mark.parametrize("kind", ["leveret", "rabbitmq"])
def test_a_blocked_publisher_keeps_its_connection_and_its_messages(kind: str) -> None:
    with memory_alarm_broker(kind) as setup:
        b = setup.broker
        admin = pika.BlockingConnection(b.pika_params())
        admin.channel().queue_declare("flood")
        pub = pika.BlockingConnection(b.pika_params(heartbeat=HEARTBEAT))
        events: list[str] = []
        pub.add_on_connection_blocked_callback(lambda *a: events.append("blocked"))
        pub.add_on_connection_unblocked_callback(lambda *a: events.append("unblocked"))
        ch = pub.channel()
        setup.raise_alarm()
        published = 0
        deadline = time.monotonic() + 120
        while "blocked" not in events and time.monotonic() < deadline:
            ch.basic_publish("", "flood", BODY)
            published += 1
            if published % 50 == 0:
                pub.process_data_events(0)
        assert events == ["blocked"], f"not blocked after {published} publishes"
        # a few more, sent into the broker's unread socket: they must not be lost
        for _ in range(20):
            ch.basic_publish("", "flood", BODY)
            published += 1
        # blocked for three times the span after which silence closes a connection
        quiet_until = time.monotonic() + 3 * 2 * HEARTBEAT
        while time.monotonic() < quiet_until:
            pub.process_data_events(0.2)
        assert pub.is_open and events == ["blocked"]
        drained = 0
        drain = admin.channel()
        setup.clear_alarm()
        deadline = time.monotonic() + 60
        while "unblocked" not in events and time.monotonic() < deadline:
            drained += drain.queue_purge("flood").method.message_count
            pub.process_data_events(0.2)
        assert events == ["blocked", "unblocked"]
        # everything the publisher sent while blocked was read after all
        ch.queue_declare("flood", passive=True)  # a round trip behind the last publish
        drained += drain.queue_purge("flood").method.message_count
        assert drained == published
        assert pub.is_open
        pub.close()
        admin.close()
