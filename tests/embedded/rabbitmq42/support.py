"""What the RabbitMQ 4.2 mode tests share: a broker in either mode, a pika channel on it,
and the management API's answers (status and JSON) as an HTTP client sees them.

There is no RabbitMQ 4 on this machine: each test pins a 4.2 behaviour to RabbitMQ's
source or documentation at tag v4.2.9 (cited in its docstring), and runs the same scenario
on the default mode, which behaves as RabbitMQ 3.10.8 (the differential tests compare that
mode with the RabbitMQ 3.10.8 running here)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from base64 import b64encode
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pika

import leveret

MODES = ("3.10.8", "4.2")


@contextmanager
def broker(version: str, **settings: Any) -> Iterator[leveret.Broker]:
    with leveret.Broker(rabbitmq_version=version, **settings) as b:
        yield b


@contextmanager
def channel(b: leveret.Broker, url: str | None = None) -> Iterator[Any]:
    conn = pika.BlockingConnection(pika.URLParameters(url or b.url))
    try:
        yield conn.channel()
    finally:
        if conn.is_open:
            conn.close()


def api(
    b: leveret.Broker, method: str, path: str, body: Any = None, user: str = "guest"
) -> tuple[int, Any]:
    """The status and the JSON body (None when empty) of one management API request."""
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(b.management_url + path, data=data, method=method)
    req.add_header("Authorization", "Basic " + b64encode(f"{user}:{user}".encode()).decode())
    req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            raw = resp.read()
            return resp.status, json.loads(raw) if raw else None
    except urllib.error.HTTPError as exc:
        raw = exc.read()
        return exc.code, json.loads(raw) if raw else None
