"""``leveret emit-log 'error: disk full'``: the tutorial's ``severity: message`` convention,
as receivers and the lake read plain text, is kept by emit-log too: severity ``error``,
message ``disk full``, routed by that severity (it was sent as ``info`` with the prefix in
its text)."""

from __future__ import annotations

import subprocess
import sys
import uuid

import pika
import pytest

import leveret
from leveret.logs.reading import Envelope, read
from leveret.logs.record import Record


def _emit(url: str, *args: str, stdin: str | None = None) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "leveret.cli.main", "emit-log", "--url", url, *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr


def _received(url: str, exchange: str, kind: str, keys: list[str]) -> tuple[object, str]:
    conn = pika.BlockingConnection(pika.URLParameters(url))
    ch = conn.channel()
    ch.exchange_declare(exchange, kind)
    queue = ch.queue_declare("", exclusive=True).method.queue
    for key in keys:
        ch.queue_bind(queue, exchange, key)
    return conn, queue


def _drain(conn: object, queue: str) -> list[tuple[str, Record]]:
    ch = conn.channel()  # type: ignore[attr-defined]
    out = []
    while True:
        method, props, body = ch.basic_get(queue, auto_ack=True)
        if method is None:
            return out
        record = read(body, Envelope(content_type=props.content_type))
        assert isinstance(record, Record)
        out.append((method.routing_key, record))


@pytest.fixture(scope="module")
def url() -> object:
    with leveret.Broker() as broker:
        yield broker.url


def test_a_severity_prefix_is_the_records_severity(url: str) -> None:
    exchange = f"logs-{uuid.uuid4().hex[:8]}"
    conn, queue = _received(url, exchange, "fanout", [""])
    try:
        _emit(url, "-x", exchange, "error: disk full", "WARN:low memory", "no prefix here")
        _emit(url, "-x", exchange, stdin="critical: on fire\nnote: error: not a prefix\n")
        got = [(r.severity, r.message) for _, r in _drain(conn, queue)]
    finally:
        conn.close()  # type: ignore[attr-defined]
    assert got == [
        ("error", "disk full"),
        ("warning", "low memory"),
        ("info", "no prefix here"),
        ("critical", "on fire"),
        ("info", "note: error: not a prefix"),
    ]


def test_the_prefix_routes_by_its_severity_and_an_explicit_severity_wins(url: str) -> None:
    exchange = f"logs-{uuid.uuid4().hex[:8]}"
    conn, queue = _received(url, exchange, "direct", ["error", "warning"])
    try:
        _emit(url, "-x", exchange, "--type", "direct", "error: disk full", "info: not routed")
        _emit(url, "-x", exchange, "--type", "direct", "--severity", "warning", "error: as is")
        got = [(key, r.severity, r.message) for key, r in _drain(conn, queue)]
    finally:
        conn.close()  # type: ignore[attr-defined]
    assert got == [("error", "error", "disk full"), ("warning", "warning", "error: as is")]
