"""A raw, blocking client of RabbitMQ's stream protocol for tests: frames in and out as
they are, to check what unmodified clients would not show (codes, frame order, credit)."""

from __future__ import annotations

import socket
import ssl
import struct
import time

from leveret.protocol.stream import events as ev
from leveret.protocol.stream.frames import encode_client, frame

_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")


class RawStreamClient:
    def __init__(
        self, host: str, port: int, timeout: float = 10, context: ssl.SSLContext | None = None
    ) -> None:
        sock = socket.create_connection((host, port), timeout=timeout)
        self.sock = sock if context is None else context.wrap_socket(sock, server_hostname=host)
        self.buf = bytearray()
        self.correlation = 0
        self.mechanisms: list[str] = []
        self.tune: tuple[int, int] = (0, 0)  # the server's frame_max and heartbeat
        self.open_properties: dict[str, str] = {}

    def next_id(self) -> int:
        self.correlation += 1
        return self.correlation

    def send(self, event: ev.Event) -> None:
        self.sock.sendall(encode_client(event))

    def send_raw(self, key: int, body: bytes) -> None:
        self.sock.sendall(frame(key, body))

    def frame(self, timeout: float | None = None) -> tuple[int, bytes] | None:
        """The next frame's key and the bytes after its version; None on timeout."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            if len(self.buf) >= 4:
                (size,) = _U32.unpack_from(self.buf)
                if len(self.buf) >= 4 + size:
                    body = bytes(self.buf[4 : 4 + size])
                    del self.buf[: 4 + size]
                    return _U16.unpack_from(body)[0], body[4:]
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                self.sock.settimeout(left)
            try:
                data = self.sock.recv(1 << 20)
            except TimeoutError:
                return None
            if not data:
                raise EOFError("the broker closed the connection")
            self.buf += data

    def response(self, key: int) -> tuple[int, bytes]:
        """The response to ``key`` (other frames in between are skipped): its code and
        the bytes after the code. Route and Partitions are answered under their own key
        (RabbitMQ 3.10.8)."""
        want = key if key in (0x18, 0x19) else key | 0x8000
        while True:
            got = self.frame(timeout=10)
            assert got is not None, f"no response to {key:#x}"
            k, body = got
            if k == want:
                return _U16.unpack_from(body, 4)[0], body[6:]

    def request(self, event: ev.Event, key: int) -> tuple[int, bytes]:
        self.send(event)
        return self.response(key)

    def handshake(
        self,
        user: str = "guest",
        password: str = "guest",
        vhost: str = "/",
        mechanism: str = "PLAIN",
        properties: dict[str, str] | None = None,
        response: bytes | None = None,
    ) -> int:
        """Up to open; the first response code that is not OK, or 1. The mechanisms the
        server offered are kept in ``mechanisms``. ``properties``: the client's peer
        properties; ``response``: the SASL bytes, instead of PLAIN's of user and password."""
        self.request(ev.PeerProperties(self.next_id(), properties or {}), 0x11)
        code, rest = self.request(ev.SaslHandshake(self.next_id()), 0x12)
        count = struct.unpack_from(">I", rest)[0]
        self.mechanisms, pos = [], 4
        for _ in range(count):
            n = struct.unpack_from(">H", rest, pos)[0]
            self.mechanisms.append(rest[pos + 2 : pos + 2 + n].decode())
            pos += 2 + n
        data = f"\0{user}\0{password}".encode() if mechanism == "PLAIN" else b""
        if response is not None:
            data = response
        code, _ = self.request(ev.SaslAuthenticate(self.next_id(), mechanism, data), 0x13)
        if code != 1:
            return code
        got = self.frame(timeout=10)
        assert got is not None and got[0] == 0x14, got
        self.tune = struct.unpack_from(">II", got[1])
        self.send(ev.Tune(self.tune[0], 0))
        code, rest = self.request(ev.Open(self.next_id(), vhost), 0x15)
        if rest:
            (count,) = struct.unpack_from(">I", rest)
            pos = 4
            for _ in range(count):
                items = []
                for _ in range(2):
                    (n,) = struct.unpack_from(">H", rest, pos)
                    items.append(rest[pos + 2 : pos + 2 + n].decode())
                    pos += 2 + n
                self.open_properties[items[0]] = items[1]
        return code

    def close(self) -> None:
        self.sock.close()
