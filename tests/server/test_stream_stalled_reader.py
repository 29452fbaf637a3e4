"""A stream subscriber that stops reading its socket costs the broker no memory: with
credit for every chunk of a 24 MiB stream, what waits in the broker for it stays within
the transport's high-water mark and one chunk, and most of the stream is never read from
disk for it."""

from __future__ import annotations

import base64
import json
import socket
import time
import urllib.request
from pathlib import Path
from typing import Any

import pika

import leveret
from leveret.protocol.stream import events as ev
from tests.support.streamclient import RawStreamClient


def stream_connections(broker: leveret.Broker) -> list[dict[str, Any]]:
    request = urllib.request.Request(
        broker.management_url.rstrip("/") + "/api/stream/connections",
        headers={"Authorization": "Basic " + base64.b64encode(b"guest:guest").decode()},
    )
    with urllib.request.urlopen(request, timeout=10) as reply:
        result: list[dict[str, Any]] = json.load(reply)
    return result


def test_a_stalled_subscriber_holds_no_more_than_one_chunk(tmp_path: Path) -> None:
    body = b"x" * 8192
    with leveret.Broker(data_dir=tmp_path, management=True) as broker:
        conn = pika.BlockingConnection(pika.URLParameters(broker.url))
        ch = conn.channel()
        ch.queue_declare("big", durable=True, arguments={"x-queue-type": "stream"})
        ch.confirm_delivery()
        for _ in range(3072):  # 24 MiB
            ch.basic_publish("", "big", body)
        conn.close()
        client = RawStreamClient(broker.host, broker.stream_port)
        try:
            # a small receive buffer, and nothing read after the subscribe answer
            client.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
            assert client.handshake() == 1
            sub = ev.Subscribe(client.next_id(), 1, "big", 1, 0, 1000, {})
            assert client.request(sub, 0x07)[0] == 1
            time.sleep(2)  # the broker sends what the socket takes, then waits
            (first,) = stream_connections(broker)
            time.sleep(1)
            (later,) = stream_connections(broker)
        finally:
            client.close()
    assert later["send_pend"] <= 4 * 1024 * 1024 + 600 * 1024
    assert later["send_oct"] == first["send_oct"]  # nothing more once it stalled
    assert later["send_oct"] < 12 * 1024 * 1024  # well short of the 24 MiB it had credit for
