"""The Logs view's stream (/api/logs/stream) opens with the recent past of the ``logs``
stream, then live records, each once; and it picks up a ``logs`` exchange that appears (or
is declared again) after the view opened. An in-process broker per test."""

from __future__ import annotations

import base64
import json
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pika
import pytest

import leveret
from leveret.management.logsview import HISTORY


class Stream:
    """``GET /api/logs/stream`` over a plain socket."""

    def __init__(self, broker: leveret.Broker, exchange: str = "logs") -> None:
        u = urlparse(broker.management_url)
        assert u.hostname is not None and u.port is not None
        self.sock = socket.create_connection((u.hostname, u.port))
        auth = base64.b64encode(b"guest:guest").decode()
        self.sock.sendall(
            f"GET /api/logs/stream?vhost=%2F&exchange={exchange} HTTP/1.1\r\nHost: x\r\n"
            f"Authorization: Basic {auth}\r\n\r\n".encode()
        )
        self.buf = b""

    def batches(self, seconds: float) -> Iterator[dict[str, Any]]:
        until = time.monotonic() + seconds
        self.sock.settimeout(0.5)
        while time.monotonic() < until:
            try:
                chunk = self.sock.recv(65536)
            except TimeoutError:
                continue
            if not chunk:
                return
            self.buf += chunk
            while b"\n\n" in self.buf:
                event, self.buf = self.buf.split(b"\n\n", 1)
                for line in event.split(b"\n"):
                    if line.startswith(b"data: "):
                        yield json.loads(line[6:])

    def messages_until(self, last: str, seconds: float = 60) -> list[str]:
        got: list[str] = []
        for batch in self.batches(seconds):
            got += [r["message"] for r in batch["records"]]
            if last in got:
                return got
        raise AssertionError(f"{last!r} never came; got {got[-5:]}")

    def wait_status(self, status: str, seconds: float = 30) -> dict[str, Any]:
        for batch in self.batches(seconds):
            if batch["status"] == status:
                return batch
        raise AssertionError(f"the view never was {status}")

    def close(self) -> None:
        self.sock.close()


def emit(broker: leveret.Broker, lines: list[str], *args: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "leveret.cli.main", "emit-log", "--url", broker.url, *args],
        input="".join(f"{line}\n" for line in lines),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[leveret.Broker]:
    with leveret.Broker(management=True, data_dir=tmp_path / "data") as b:
        yield b


def _channel(broker: leveret.Broker) -> tuple[Any, Any]:
    conn = pika.BlockingConnection(pika.URLParameters(broker.url))
    return conn, conn.channel()


def test_the_view_opens_with_the_streams_recent_records_then_live_ones(
    broker: leveret.Broker,
) -> None:
    conn, ch = _channel(broker)
    ch.exchange_declare("logs", "fanout")
    ch.queue_declare("logs", durable=True, arguments={"x-queue-type": "stream"})
    ch.queue_bind("logs", "logs")
    conn.close()
    old = [f"old {i}" for i in range(HISTORY + 100)]
    emit(broker, old)
    stream = Stream(broker)
    try:
        history = stream.messages_until(old[-1])
        # bounded: the last HISTORY records, in order, each once
        assert history == old[-HISTORY:]
        emit(broker, ["new 0", "new 1"])
        live = stream.messages_until("new 1")
        assert live == ["new 0", "new 1"]
    finally:
        stream.close()


def test_an_exchange_that_appears_after_the_view_opened_is_picked_up(
    broker: leveret.Broker,
) -> None:
    stream = Stream(broker)
    try:
        waiting = stream.wait_status("waiting")
        assert "no exchange 'logs'" in str(waiting["error"])
        conn, ch = _channel(broker)
        ch.exchange_declare("logs", "fanout")  # as the first emit-log or receiver would
        stream.wait_status("live")
        emit(broker, ["first"])
        assert stream.messages_until("first") == ["first"]
        # deleted and declared again, of another type: waited for and bound anew
        ch.exchange_delete("logs")
        assert "'logs'" in str(stream.wait_status("waiting")["error"])
        ch.exchange_declare("logs", "direct")
        conn.close()
        stream.wait_status("live")
        emit(broker, ["second"], "--type", "direct", "--severity", "error")
        assert stream.messages_until("second") == ["second"]
    finally:
        stream.close()
