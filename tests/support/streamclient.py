"""A raw, blocking client of RabbitMQ's stream protocol for tests: frames in and out as
they are, to check what unmodified clients would not show (codes, frame order, credit)."""

from __future__ import annotations

import socket
import ssl
import struct
import time
from typing import TypeVar

from leveret.protocol.stream import events as ev
from leveret.protocol.stream.encode import decode_reply
from leveret.protocol.stream.frames import encode_client, frame

_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")
R = TypeVar("R")


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

    def whole_frame(self, timeout: float | None = None) -> bytes | None:
        """The next frame, without its size prefix; None on timeout."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            if len(self.buf) >= 4:
                (size,) = _U32.unpack_from(self.buf)
                if len(self.buf) >= 4 + size:
                    body = bytes(self.buf[4 : 4 + size])
                    del self.buf[: 4 + size]
                    return body
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

    def frame(self, timeout: float | None = None) -> tuple[int, bytes] | None:
        """The next frame's key and the bytes after its version; None on timeout."""
        body = self.whole_frame(timeout)
        return None if body is None else (_U16.unpack_from(body)[0], body[4:])

    def reply(self, kind: type[R], timeout: float = 10) -> R:
        """The next server frame of type ``kind``, decoded (others are skipped)."""
        while True:
            body = self.whole_frame(timeout)
            assert body is not None, f"no {kind.__name__}"
            got = decode_reply(body)
            if isinstance(got, kind):
                return got

    def response(self, key: int) -> tuple[int, bytes]:
        """The response to ``key`` (other frames in between are skipped): its code and
        the bytes after the code. RabbitMQ 3.10.8 answers Route and Partitions under their
        own key, RabbitMQ 3.13 with the response bit: both are taken."""
        want = {key | 0x8000, key} if key in (0x18, 0x19) else {key | 0x8000}
        while True:
            body = self.whole_frame(timeout=10)
            assert body is not None, f"no response to {key:#x}"
            if _U16.unpack_from(body)[0] in want:
                got = decode_reply(body)
                assert not isinstance(got, ev.UnknownFrame), got
                return got.code, body[10:]  # type: ignore[union-attr]

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
        self.send(ev.PeerProperties(self.next_id(), properties or {}))
        self.reply(ev.PeerPropertiesResponse)
        self.send(ev.SaslHandshake(self.next_id()))
        self.mechanisms = list(self.reply(ev.SaslHandshakeResponse).mechanisms)
        data = f"\0{user}\0{password}".encode() if mechanism == "PLAIN" else b""
        if response is not None:
            data = response
        self.send(ev.SaslAuthenticate(self.next_id(), mechanism, data))
        code = self.reply(ev.SaslAuthenticateResponse).code
        if code != 1:
            return code
        tune = decode_reply(self.whole_frame(timeout=10) or b"")
        assert isinstance(tune, ev.Tune), tune
        self.tune = (tune.frame_max, tune.heartbeat)
        self.send(ev.Tune(self.tune[0], 0))
        self.send(ev.Open(self.next_id(), vhost))
        opened = self.reply(ev.OpenResponse)
        self.open_properties.update(opened.properties)
        return opened.code

    def close(self) -> None:
        self.sock.close()
