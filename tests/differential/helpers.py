"""Small helpers to provoke an error on a broker and read back what it answered."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pika
from pika.adapters.blocking_connection import BlockingChannel

from tests.support.brokers import BrokerUnderTest


def settle(conn: pika.BlockingConnection, seconds: float) -> None:
    """Process events for the whole of ``seconds`` (pika returns early otherwise)."""
    import time

    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        conn.process_data_events(min(left, 0.05))


@contextmanager
def connect(broker: BrokerUnderTest, **kwargs: Any) -> Iterator[pika.BlockingConnection]:
    conn = pika.BlockingConnection(broker.pika_params(**kwargs))
    try:
        yield conn
    finally:
        if conn.is_open:
            conn.close()


def channel_error(
    broker: BrokerUnderTest,
    action: Callable[[BlockingChannel], Any],
    setup: Callable[[BlockingChannel], Any] | None = None,
) -> tuple[int, str]:
    """Run ``action`` on a fresh channel; return the channel.close code and text."""
    with connect(broker) as conn:
        if setup is not None:
            setup(conn.channel())
        ch = conn.channel()
        try:
            action(ch)
            # asynchronous methods (publish, ack) fail later: make a round trip
            ch.queue_declare(queue="", exclusive=True, auto_delete=True)
        except pika.exceptions.ChannelClosedByBroker as exc:
            return exc.reply_code, exc.reply_text
        raise AssertionError("the broker did not close the channel")


def connection_error(
    broker: BrokerUnderTest, action: Callable[[BlockingChannel], Any]
) -> tuple[int, str]:
    """Run ``action``; return the connection.close code and text."""
    conn = pika.BlockingConnection(broker.pika_params())
    try:
        ch = conn.channel()
        action(ch)
        ch.queue_declare(queue="", exclusive=True, auto_delete=True)
    except pika.exceptions.ConnectionClosedByBroker as exc:
        return exc.reply_code, exc.reply_text
    except pika.exceptions.ChannelClosedByBroker as exc:
        raise AssertionError(f"channel closed instead: {exc.reply_code} {exc.reply_text}") from exc
    finally:
        if conn.is_open:
            conn.close()
    raise AssertionError("the broker did not close the connection")


def death_times_checked(headers: dict[str, Any], slack: float = 120.0) -> dict[str, Any]:
    """``headers`` with each x-death entry's ``time`` checked and replaced by ``"<now>"``.

    The time is the broker's clock (seconds, AMQP timestamp): it must be a timestamp
    (pika gives a datetime) within ``slack`` seconds of this machine's clock, which both
    brokers here share."""
    import datetime

    out = dict(headers)
    if not isinstance(headers.get("x-death"), list):
        return out
    deaths = []
    for death in headers.get("x-death", []):
        death = dict(death)
        t = death.get("time")
        assert isinstance(t, datetime.datetime), f"x-death time is {t!r}"
        now = datetime.datetime.now(datetime.UTC)
        assert abs((now - t).total_seconds()) < slack, f"x-death time {t} is not now ({now})"
        death["time"] = "<now>"
        deaths.append(death)
    if "x-death" in headers:
        out["x-death"] = deaths
    return out
