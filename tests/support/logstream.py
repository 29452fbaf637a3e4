"""The Logs view's stream, ``GET /api/logs/stream``, read over a plain socket as slowly as a
test wants: its server-sent events' data, one batch (a JSON object) at a time."""

from __future__ import annotations

import base64
import json
import socket
import time
from collections.abc import Iterator
from typing import Any


class LogStream:
    """One ``GET`` of ``path`` (``/api/logs/stream?...``) as guest; ``headers`` are extra
    request lines; ``rcvbuf`` shrinks the socket's receive buffer (a slow reader)."""

    def __init__(
        self, host: str, port: int, path: str, headers: str = "", rcvbuf: int | None = None
    ) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if rcvbuf:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        self.sock.connect((host, port))
        auth = base64.b64encode(b"guest:guest").decode()
        request = f"GET {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Basic {auth}\r\n"
        self.sock.sendall(f"{request}{headers}\r\n".encode())
        self.buf = b""

    def batches_until(self, until: float) -> Iterator[dict[str, Any]]:
        """The batches that arrive until the monotonic clock reads ``until`` or the server
        closes the stream."""
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

    def close(self) -> None:
        self.sock.close()
