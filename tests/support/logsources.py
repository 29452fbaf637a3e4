"""What the log-source tests share: a receiver bound to the log exchange before anything
is sent, and the messages it got, with their properties, as a ``receive-logs`` sees them."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pika
import pytest

# bounds a hang; not a measurement
WAIT = 60.0


@dataclass
class Got:
    """One message the receiver got: its routing key, properties and decoded record."""

    routing_key: str
    properties: pika.BasicProperties
    record: dict[str, Any]


class Bound:
    """An exclusive queue bound to ``exchange`` (declared as emit-log declares it, or of
    ``exchange_type``), read with basic.get."""

    def __init__(
        self, url: str, exchange: str = "logs", exchange_type: str = "fanout", key: str = "#"
    ) -> None:
        self.conn = pika.BlockingConnection(pika.URLParameters(url))
        self.ch = self.conn.channel()
        self.ch.exchange_declare(exchange, exchange_type)
        self.queue = self.ch.queue_declare("", exclusive=True).method.queue
        self.ch.queue_bind(self.queue, exchange, "" if exchange_type == "fanout" else key)

    def take(self, n: int, wait: float = WAIT) -> list[Got]:
        """``n`` messages (AssertionError naming how many came if fewer do in time)."""
        out: list[Got] = []
        deadline = time.monotonic() + wait
        while len(out) < n:
            method, props, body = self.ch.basic_get(self.queue, auto_ack=True)
            if method is None:
                assert time.monotonic() < deadline, f"got {len(out)} of {n}: {out}"
                self.conn.sleep(0.05)
                continue
            out.append(Got(method.routing_key, props, json.loads(body)))
        return out

    def none_more(self, settle: float = 0.5) -> None:
        """Nothing else arrives within ``settle`` seconds."""
        self.conn.sleep(settle)
        method, _, body = self.ch.basic_get(self.queue, auto_ack=True)
        assert method is None, body

    def close(self) -> None:
        if self.conn.is_open:
            self.conn.close()


@pytest.fixture
def bound(broker: Any) -> Iterator[Bound]:
    """A ``Bound`` on the module's ``broker`` (an in-process ``leveret.Broker``), closed
    after the test. A module uses it by importing it."""
    b = Bound(broker.url)
    yield b
    b.close()


def assert_like_emit_log(got: Got) -> None:
    """The properties ``leveret emit-log`` publishes a record with."""
    p = got.properties
    assert p.content_type == "application/json"
    assert p.delivery_mode == 1
    assert p.message_id
    assert p.headers is None and p.timestamp is None and p.app_id is None


def metric(text: str, name: str, **labels: str) -> float:
    """One sample of a Prometheus text exposition."""
    want = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        head, _, value = line.rpartition(" ")
        if head == name or (head.startswith(name + "{") and head[len(name) + 1 : -1] == want):
            return float(value)
    raise AssertionError(f"no {name}{{{want}}} in the metrics")
