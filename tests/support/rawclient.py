"""A bare AMQP client on a socket, for sending what no well-behaved client would."""

from __future__ import annotations

import contextlib
import socket
import struct
from typing import Any

from pamqp import commands, frame
from pamqp.base import Frame

PROTOCOL_HEADER = b"AMQP\x00\x00\x09\x01"


def end_early(port: int, data: bytes, linger: float = 0.5, host: str = "127.0.0.1") -> None:
    """A TCP connection that sends ``data`` (perhaps nothing), reads what comes back for
    up to ``linger`` seconds, and ends: a TCP probe, a handshake given up."""
    with socket.create_connection((host, port), timeout=5) as s:
        if data:
            s.sendall(data)
            s.settimeout(linger)
            with contextlib.suppress(TimeoutError):
                s.recv(4096)


class RawClient:
    def __init__(self, host: str, port: int, timeout: float = 5.0) -> None:
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.buf = b""

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> RawClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def send_method(self, channel: int, method: Frame) -> None:
        self.send(frame.marshal(method, channel))

    def call(self, channel: int, method: Frame, reply: type[Frame]) -> Any:
        """Send ``method`` and read up to its ``reply``, which is returned."""
        self.send_method(channel, method)
        return self.expect(reply)

    def send_unchecked(self, channel: int, method: Frame) -> None:
        """Send ``method`` without pamqp's validation (names with CR/LF or non-ASCII
        characters, which pamqp refuses and brokers accept)."""
        self.send(marshal_unchecked(method, channel))

    def recv_frame(self) -> tuple[int, Any] | None:
        """The next frame, or None when the peer closed the socket."""
        while True:
            if len(self.buf) >= 7:
                (size,) = struct.unpack(">I", self.buf[3:7])
                if len(self.buf) >= size + 8:
                    used, channel, value = frame.unmarshal(self.buf)
                    self.buf = self.buf[used:]
                    return channel, value
            try:
                chunk = self.sock.recv(65536)
            except (ConnectionResetError, TimeoutError):
                return None
            if not chunk:
                return None
            self.buf += chunk

    def recv_bytes(self) -> bytes:
        data = self.buf
        try:
            while True:
                chunk = self.sock.recv(65536)
                if not chunk:
                    break
                data += chunk
        except (ConnectionResetError, TimeoutError):
            pass
        return data

    def expect(self, cls: type[Frame]) -> Any:
        while True:
            got = self.recv_frame()
            if got is None:
                raise AssertionError(f"connection closed while waiting for {cls.__name__}")
            _, value = got
            if isinstance(value, cls):
                return value
            if (
                not isinstance(value, (commands.Connection.Blocked,))
                and value.__class__.__name__ != "Heartbeat"
            ):
                raise AssertionError(f"expected {cls.__name__}, got {value!r}")

    def handshake(
        self,
        user: str = "guest",
        password: str = "guest",
        vhost: str = "/",
        heartbeat: int = 0,
        capabilities: dict[str, Any] | None = None,
    ) -> Any:
        self.send(PROTOCOL_HEADER)
        start = self.expect(commands.Connection.Start)
        caps = {"authentication_failure_close": True, "consumer_cancel_notify": True}
        if capabilities is not None:
            caps = capabilities
        self.send_method(
            0,
            commands.Connection.StartOk(
                client_properties={"product": "rawclient", "capabilities": caps},
                mechanism="PLAIN",
                response=f"\0{user}\0{password}",
                locale="en_US",
            ),
        )
        tune = self.expect(commands.Connection.Tune)
        self.send_method(
            0,
            commands.Connection.TuneOk(
                channel_max=tune.channel_max, frame_max=tune.frame_max, heartbeat=heartbeat
            ),
        )
        self.send_method(0, commands.Connection.Open(virtual_host=vhost))
        self.expect(commands.Connection.OpenOk)
        return start, tune

    def open_channel(self, channel: int = 1) -> None:
        self.send_method(channel, commands.Channel.Open())
        self.expect(commands.Channel.OpenOk)

    def next_close(self) -> tuple[str, int, str, int, int] | None:
        """Read until a channel.close or connection.close (or EOF)."""
        while True:
            got = self.recv_frame()
            if got is None:
                return None
            _, value = got
            if isinstance(value, commands.Connection.Close | commands.Channel.Close):
                kind = "connection" if isinstance(value, commands.Connection.Close) else "channel"
                return (kind, value.reply_code, value.reply_text, value.class_id, value.method_id)


def marshal_unchecked(method: Frame, channel: int) -> bytes:
    """A method frame as pamqp marshals it, its field validation skipped."""
    cls = type(method)
    saved = cls.__dict__.get("validate")
    cls.validate = lambda self: None  # type: ignore[method-assign]
    try:
        return frame.marshal(method, channel)
    finally:
        if saved is None:
            del cls.validate
        else:
            cls.validate = saved  # type: ignore[method-assign]
