"""The consistent-hash exchange (rabbitmq_consistent_hash_exchange, shipped with RabbitMQ
3.10.8): the same scenario on Leveret and on a RabbitMQ node of the test's own with the
plugin enabled. Keys must land in the same queues on both: Leveret reproduces RabbitMQ's
ring, Erlang's phash2 and the jump hash's exs1024 draws."""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pika
import pika.exceptions
import pytest

import leveret
from tests.support import rabbitmq

Scenario = Callable[[pika.adapters.blocking_connection.BlockingChannel], Any]


@pytest.fixture(scope="module")
def urls() -> Iterator[dict[str, str]]:
    if not rabbitmq.installed():
        pytest.skip("RabbitMQ is not installed here")
    node = rabbitmq.RabbitNode(plugins=["rabbitmq_consistent_hash_exchange"]).start()
    try:
        with leveret.Broker() as b:
            yield {"leveret": b.url, "rabbitmq": node.url}
    finally:
        node.close()


def on_both(urls: dict[str, str], scenario: Scenario) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, url in urls.items():
        conn = pika.BlockingConnection(pika.URLParameters(url))
        try:
            out[name] = scenario(conn.channel())
        finally:
            conn.close()
    return out


def drain(ch: Any, queues: list[str]) -> dict[str, str]:
    """Which queue each message (its body names its key) went to."""
    where: dict[str, str] = {}
    for q in queues:
        while True:
            m, _p, body = ch.basic_get(q, auto_ack=True)
            if m is None:
                break
            where[body.decode()] = q
    return where


def setup(
    ch: Any, x: str, weights: dict[str, str], arguments: dict[str, Any] | None = None
) -> None:
    ch.exchange_declare(x, "x-consistent-hash", auto_delete=True, arguments=arguments)
    for q, w in weights.items():
        ch.queue_declare(q, exclusive=True)
        ch.queue_bind(q, x, w)


KEYS = [f"key-{i}" for i in range(400)] + ["", "a", "order.42", "ü-key", "x" * 200]


def test_routing_keys_land_in_the_same_queues(urls: dict[str, str]) -> None:
    weights = {"chx-a": "1", "chx-b": "2", "chx-c": "5", "chx-d": "3"}

    def scenario(ch: Any) -> dict[str, Any]:
        setup(ch, "chx-rk", weights)
        for k in KEYS:
            ch.basic_publish("chx-rk", k, k.encode())
        first = drain(ch, list(weights))
        # a queue bound later takes keys only for itself (jump hash: the new buckets)
        ch.queue_declare("chx-e", exclusive=True)
        ch.queue_bind("chx-e", "chx-rk", "4")
        for k in KEYS:
            ch.basic_publish("chx-rk", k, k.encode())
        second = drain(ch, [*weights, "chx-e"])
        # unbinding a queue in the middle renumbers the buckets after it, as RabbitMQ's
        # ring does: keys move among the others too
        ch.queue_unbind("chx-b", "chx-rk", "2")
        for k in KEYS:
            ch.basic_publish("chx-rk", k, k.encode())
        third = drain(ch, [*weights, "chx-e"])
        return {"first": first, "second": second, "third": third}

    got = on_both(urls, scenario)
    assert got["leveret"] == got["rabbitmq"]
    first, second = got["leveret"]["first"], got["leveret"]["second"]
    assert len(first) == len(KEYS) and len(set(first.values())) == 4
    moved = [k for k in KEYS if first[k] != second[k]]
    assert moved and all(second[k] == "chx-e" for k in moved)
    # the shares follow the weights (1:2:5:3:4 of 15 buckets), loosely
    share = sum(1 for q in second.values() if q == "chx-c") / len(KEYS)
    assert 0.2 < share < 0.45


def test_hash_header_and_hash_property(urls: dict[str, str]) -> None:
    weights = {"chx-h1": "10", "chx-h2": "10", "chx-h3": "10"}

    def scenario(ch: Any) -> dict[str, Any]:
        setup(ch, "chx-hdr", weights, {"hash-header": "hash-on"})
        for i in range(150):
            value: Any = f"h-{i}" if i % 3 else i  # strings and integers
            props = pika.BasicProperties(headers={"hash-on": value})
            ch.basic_publish("chx-hdr", "same", f"hdr-{i}".encode(), props)
        ch.basic_publish("chx-hdr", "same", b"no-header")
        by_header = drain(ch, list(weights))
        ch.exchange_delete("chx-hdr")
        setup(ch, "chx-prop", weights, {"hash-property": "message_id"})
        for i in range(150):
            props = pika.BasicProperties(message_id=f"m-{i}")
            ch.basic_publish("chx-prop", "same", f"mid-{i}".encode(), props)
        by_property = drain(ch, list(weights))
        ch.exchange_delete("chx-prop")
        setup(ch, "chx-ts", weights, {"hash-property": "timestamp"})
        for i in range(60):
            props = pika.BasicProperties(timestamp=1_700_000_000 + i)
            ch.basic_publish("chx-ts", "same", f"ts-{i}".encode(), props)
        by_timestamp = drain(ch, list(weights))
        return {"header": by_header, "property": by_property, "timestamp": by_timestamp}

    got = on_both(urls, scenario)
    assert got["leveret"] == got["rabbitmq"]
    for spread in got["leveret"].values():
        assert len(set(spread.values())) == 3


class F32(float):
    """A header value sent as a 32-bit float ('f'); a plain float goes as a double ('d')."""


@pytest.fixture
def float_headers(monkeypatch: pytest.MonkeyPatch) -> None:
    """pika encodes no floats in tables: these tests send them as 'f' and 'd'."""
    original = pika.data.encode_value

    def encode_value(pieces: list[bytes], value: Any) -> int:
        if isinstance(value, float):
            tag, layout = (b"f", ">f") if isinstance(value, F32) else (b"d", ">d")
            pieces.append(tag + struct.pack(layout, value))
            return len(pieces[-1])
        return int(original(pieces, value))

    monkeypatch.setattr(pika.data, "encode_value", encode_value)


def typed_value(i: int) -> Any:
    """Header values of every field type RabbitMQ decodes, nested ones too."""
    kind = i % 8
    if kind == 0:
        return F32(i / 8 - 7)
    if kind == 1:
        return i * -1.1e10
    if kind == 2:
        return Decimal(i) / 100
    if kind == 3:
        return Decimal(-i) / 1000  # sent signed; RabbitMQ reads the value unsigned
    if kind == 4:
        return {"n": i, "f": F32(0.5), "inner": {"s": f"t-{i}", "d": i / 3}, "e": {}, "a": []}
    if kind == 5:
        return [i, f"a-{i}", -i * 0.25, [], {}, None, True, [F32(i), Decimal(i) / 10]]
    if kind == 6:
        return datetime(2023, 11, 14, tzinfo=UTC) + timedelta(seconds=i)
    return [{"k": i % 256, "b": bytes([i % 256])}, False]


TYPED = [typed_value(i) for i in range(240)] + [
    0.0,
    -0.0,
    F32(-0.0),
    F32(3.4e38),
    1e300,
    -5e-324,
    Decimal(0),
    {},
    [],
    [[]],
    None,
    True,
    False,
    b"",
    1 << 62,
]


def test_hash_header_of_every_field_type(urls: dict[str, str], float_headers: None) -> None:
    weights = {"chx-t1": "10", "chx-t2": "10", "chx-t3": "10"}

    def scenario(ch: Any) -> dict[str, str]:
        setup(ch, "chx-typed", weights, {"hash-header": "hash-on"})
        for i, value in enumerate(TYPED):
            props = pika.BasicProperties(headers={"hash-on": value})
            ch.basic_publish("chx-typed", "same", f"typed-{i}".encode(), props)
        return drain(ch, list(weights))

    got = on_both(urls, scenario)
    assert got["leveret"] == got["rabbitmq"]
    assert len(got["leveret"]) == len(TYPED)
    assert len(set(got["leveret"].values())) == 3


def test_refusals(urls: dict[str, str]) -> None:
    def scenario(ch: Any) -> list[tuple[int, str]]:
        out = []
        conn = ch.connection
        attempts: list[Callable[[Any], Any]] = [
            lambda c: (
                c.queue_declare("chx-r", exclusive=True),
                c.exchange_declare("chx-r", "x-consistent-hash", auto_delete=True),
                c.queue_bind("chx-r", "chx-r", "abc"),
            ),
            lambda c: c.queue_bind("chx-r", "chx-r", "0"),
            lambda c: c.queue_bind("chx-r", "chx-r", "-3"),
            lambda c: c.exchange_declare(
                "chx-r2",
                "x-consistent-hash",
                arguments={"hash-header": "h", "hash-property": "message_id"},
            ),
            lambda c: c.exchange_declare(
                "chx-r3", "x-consistent-hash", arguments={"hash-property": "app_id"}
            ),
        ]
        for attempt in attempts:
            try:
                attempt(ch)
                out.append((200, ""))
            except pika.exceptions.ChannelClosedByBroker as exc:
                out.append((exc.reply_code, exc.reply_text))
                ch = conn.channel()
                if out[0][0] != 200:
                    ch.queue_declare("chx-r", exclusive=True)
        return out

    got = on_both(urls, scenario)
    assert got["leveret"] == got["rabbitmq"]
    assert got["leveret"][0][0] == 406
