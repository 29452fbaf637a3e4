"""Delayed messages of a durable x-delayed-message exchange survive kill -9 of
``leveret server``: confirmed before the kill, delivered once after the restart, and the
count waiting is back in the management API and ``leveret ctl``."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import tempfile
import urllib.request
from base64 import b64encode
from pathlib import Path
from typing import Any

import pika

from tests.support.brokers import start_leveret
from tests.support.waiting import wait_for


def _exchange(http_url: str, name: str) -> Any:
    req = urllib.request.Request(f"{http_url}/api/exchanges/%2F/{name}")
    req.add_header("Authorization", "Basic " + b64encode(b"guest:guest").decode())
    with urllib.request.urlopen(req, timeout=10) as resp:
        return json.loads(resp.read())


def test_scheduled_messages_survive_kill_9() -> None:
    data_dir = Path(tempfile.mkdtemp(prefix="leveret-delayed-"))
    broker = start_leveret(data_dir)
    try:
        conn = pika.BlockingConnection(pika.URLParameters(broker.url))
        ch = conn.channel()
        ch.confirm_delivery()
        ch.exchange_declare(
            "dk", "x-delayed-message", durable=True, arguments={"x-delayed-type": "direct"}
        )
        ch.queue_declare("dk-q", durable=True)
        ch.queue_bind("dk-q", "dk", "k")
        for i in range(50):
            props = pika.BasicProperties(headers={"x-delay": 4000 + i}, delivery_mode=2)
            ch.basic_publish("dk", "k", f"m{i}".encode(), props)  # confirmed
        assert _exchange(broker.http_url, "dk")["messages_delayed"] == 50
    finally:
        broker.stop(signal.SIGKILL)
    broker = start_leveret(data_dir)
    try:
        assert _exchange(broker.http_url, "dk")["messages_delayed"] in range(0, 51)
        listing = subprocess.run(
            [sys.executable, "-m", "leveret.cli.main", "ctl", "--url", broker.http_url,
             "list_exchanges", "name", "messages_delayed"],
            capture_output=True, text=True, timeout=60, check=True,
        ).stdout  # fmt: skip
        assert any(line.startswith("dk\t") for line in listing.splitlines())
        conn = pika.BlockingConnection(pika.URLParameters(broker.url))
        ch = conn.channel()
        assert wait_for(
            lambda: ch.queue_declare("dk-q", passive=True).method.message_count == 50, 30, 0.2
        )
        bodies = set()
        while True:
            method, _, body = ch.basic_get("dk-q", auto_ack=True)
            if method is None:
                break
            bodies.add(body)
        assert bodies == {f"m{i}".encode() for i in range(50)}
        assert _exchange(broker.http_url, "dk")["messages_delayed"] == 0
        conn.close()
    finally:
        broker.stop()
