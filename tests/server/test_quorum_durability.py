"""A quorum queue's confirmed messages survive ``kill -9`` of the broker, under load, and
what was delivered but not acknowledged comes back first, its delivery count raised (as
RabbitMQ's rabbit_fifo returns a lost consumer's messages)."""

from __future__ import annotations

import signal
import threading
import time
from pathlib import Path

import pika
import pytest

from tests.support.brokers import BrokerUnderTest, start_leveret

QUORUM = {"x-queue-type": "quorum"}


def publish_until_killed(
    broker: BrokerUnderTest, queue: str, start: int, confirmed: list[int], stop: threading.Event
) -> None:
    """Publish numbered persistent messages with confirms, one batch of 50 in flight at
    a time, recording each number once its batch is confirmed."""
    try:
        conn = pika.BlockingConnection(broker.pika_params())
        ch = conn.channel()
        ch.confirm_delivery()
        i = start
        while not stop.is_set():
            batch = list(range(i, i + 50))
            for n in batch:
                ch.basic_publish(
                    "",
                    queue,
                    str(n).encode(),
                    pika.BasicProperties(delivery_mode=2),
                    mandatory=False,
                )
            confirmed.extend(batch)  # pika's publish returns once the broker acked it
            i += 50
    except (pika.exceptions.AMQPError, OSError):
        return  # the broker went away mid-batch: that batch was not confirmed


def drain(broker: BrokerUnderTest, queue: str) -> list[tuple[int, bool, int | None]]:
    conn = pika.BlockingConnection(broker.pika_params())
    ch = conn.channel()
    out = []
    while True:
        m, p, b = ch.basic_get(queue, auto_ack=True)
        if m is None:
            break
        out.append((int(b), m.redelivered, (p.headers or {}).get("x-delivery-count")))
    conn.close()
    return out


@pytest.mark.parametrize("rounds", [3])
def test_kill_9_under_confirmed_load_loses_nothing_confirmed(tmp_path: Path, rounds: int) -> None:
    data = tmp_path / "data"
    confirmed: list[int] = []
    broker = start_leveret(data)
    try:
        conn = pika.BlockingConnection(broker.pika_params())
        conn.channel().queue_declare("crash", durable=True, arguments=QUORUM)
        conn.close()
        for r in range(rounds):
            stop = threading.Event()
            t = threading.Thread(
                target=publish_until_killed, args=(broker, "crash", r * 1_000_000, confirmed, stop)
            )
            t.start()
            # let the load build up (no assertion on time: only when the kill lands)
            t.join(1.5)
            broker.stop(signal.SIGKILL)
            stop.set()
            t.join(30)
            broker = start_leveret(data)
        got = drain(broker, "crash")
    finally:
        broker.stop()
    numbers = [n for n, _r, _c in got]
    assert confirmed, "nothing was confirmed before the kills"
    print(f"confirmed {len(confirmed)}, recovered {len(numbers)}")
    missing = set(confirmed) - set(numbers)
    assert not missing, f"{len(missing)} confirmed messages lost, e.g. {sorted(missing)[:5]}"
    assert len(numbers) == len(set(numbers)), "a message came back twice"
    # never delivered: neither redelivered nor counted
    assert all(not r and c == 0 for _n, r, c in got)


def test_unacked_deliveries_come_back_first_after_kill_9(tmp_path: Path) -> None:
    data = tmp_path / "data"
    broker = start_leveret(data)
    try:
        conn = pika.BlockingConnection(broker.pika_params())
        ch = conn.channel()
        ch.queue_declare("q", durable=True, arguments=QUORUM)
        ch.confirm_delivery()
        for i in range(6):
            ch.basic_publish("", "q", str(i).encode())
        ch.basic_ack(ch.basic_get("q")[0].delivery_tag)  # 0: gone
        ch.basic_get("q")  # 1: out
        m2 = ch.basic_get("q")[0]
        ch.basic_nack(m2.delivery_tag, requeue=True)  # 2: to the back, count 1
        ch.basic_get("q")  # 3: out
        ch.queue_declare("q", passive=True)  # a round trip: everything above was handled
        time.sleep(0.3)  # and written (the server syncs at every batch and tick)
        broker.stop(signal.SIGKILL)
        broker = start_leveret(data)
        got = drain(broker, "q")
    finally:
        broker.stop()
    assert got == [(1, True, 1), (3, True, 1), (4, False, 0), (5, False, 0), (2, True, 1)]
