"""The syslog listener: RFC 5424 and RFC 3164 over UDP and TCP (RFC 6587's octet counting
or newline framing) on one port, each message published into the log system's exchange as
a record (see :mod:`leveret.server.log_intake`).

Parsing and framing are the protocol layer's (:mod:`leveret.protocol.syslog`); this module
does the I/O and maps a message onto a record:

========================  ===============================================================
record                    from
========================  ===============================================================
ts                        TIMESTAMP (RFC 3164: local zone, nearest year), else arrival
severity                  emerg/alert/crit -> critical, err -> error, warning -> warning,
                          notice/info -> info, debug -> debug
facility                  the facility's name (kern, user, ..., local7)
host                      HOSTNAME, else the sender's address
app                       APP-NAME / TAG
pid                       PROCID / TAG[pid] when it is a number, else 0
message                   MSG
extra                     syslog_severity (its name), syslog_facility (its number), msgid,
                          procid (when not a number), structured_data {SD-ID: {name: value}}
========================  ===============================================================

A message that cannot be read is refused: counted, logged (rate-limited), and the stream
goes on (a TCP connection stays open, as rsyslog's and syslog-ng's do). While the broker
has a resource alarm, TCP connections are not read (the sender waits, as an AMQP publisher
is blocked); UDP cannot be held back, and its datagrams go on being published."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, cast

from leveret.logs.record import Record, check_facility
from leveret.protocol.syslog import (
    MAX_MESSAGE,
    Refused,
    StreamFramer,
    SyslogError,
    SyslogMessage,
    parse,
)
from leveret.protocol.syslog.message import FACILITIES
from leveret.server.listen import ListenError
from leveret.server.log_intake import LogIntake, internal_actor

log = logging.getLogger(__name__)

SOURCE = "syslog"
#: syslog severity (0-7) -> the log system's severity
SEVERITY = ("critical", "critical", "critical", "error", "warning", "info", "info", "debug")
_ALARM_RECHECK = 0.2  # seconds between two looks at a resource alarm while reading is paused
# every facility name is one word of a topic routing key
assert all(check_facility(f) for f in FACILITIES)


def _utc(when: datetime) -> str:
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def record_of(msg: SyslogMessage, peer: str, arrival: float) -> Record:
    """The log record a syslog message becomes (see the module's table)."""
    extra: dict[str, Any] = {
        "syslog_severity": msg.severity_name,
        "syslog_facility": msg.facility,
    }
    if msg.msgid is not None:
        extra["msgid"] = msg.msgid
    pid = 0
    if msg.procid is not None:
        if msg.procid.isdigit() and len(msg.procid) < 10:
            pid = int(msg.procid)
        else:
            extra["procid"] = msg.procid
    if msg.structured_data:
        sd: dict[str, dict[str, Any]] = {}
        for element in msg.structured_data:
            params: dict[str, Any] = sd.setdefault(element.id, {})
            for name, value in element.params:
                if name in params:  # a name that repeats keeps every value, in order
                    before = params[name]
                    params[name] = [*before, value] if isinstance(before, list) else [before, value]
                else:
                    params[name] = value
        extra["structured_data"] = sd
    ts = msg.timestamp
    return Record(
        ts=_utc(ts) if ts is not None else _utc(datetime.fromtimestamp(arrival, UTC)),
        severity=SEVERITY[msg.severity],
        facility=msg.facility_name,
        host=msg.hostname if msg.hostname is not None else peer,
        app=msg.app_name or "",
        pid=pid,
        message=msg.message,
        extra=extra,
    )


class SyslogSink:
    """Reads one message's bytes and publishes its record (what UDP and TCP share)."""

    def __init__(self, intake: LogIntake, max_size: int = MAX_MESSAGE) -> None:
        self.intake = intake
        self.max_size = max_size
        self.actor = internal_actor(intake.vhost)

    def take(self, data: bytes, peer: str) -> None:
        intake = self.intake
        intake.received(SOURCE)
        if len(data) > self.max_size:
            intake.refuse(SOURCE, f"message of {len(data)} octets is over {self.max_size}", peer)
            return
        try:
            record = record_of(parse(data), peer, time.time())
        except SyslogError as exc:
            intake.refuse(SOURCE, exc.reason, peer)
            return
        try:
            intake.publish(SOURCE, [record], self.actor)
        except Exception as exc:  # the vhost is gone, the exchange cannot be declared
            reason = getattr(exc, "reply_text", None) or str(exc)
            intake.refuse(SOURCE, f"cannot publish: {reason}", peer)

    def refused(self, frame: Refused, peer: str) -> None:
        self.intake.received(SOURCE)
        self.intake.refuse(SOURCE, frame.reason, peer)


class _Datagrams(asyncio.DatagramProtocol):
    def __init__(self, sink: SyslogSink) -> None:
        self.sink = sink

    def datagram_received(self, data: bytes, addr: Any) -> None:
        self.sink.take(data, str(addr[0]))

    def error_received(self, exc: Exception) -> None:  # ICMP errors: nothing to answer
        log.debug("syslog UDP: %s", exc)


class _Stream(asyncio.Protocol):
    """One TCP sender: frames in, records out; paused while the broker is in alarm."""

    def __init__(self, sink: SyslogSink, blocked: Callable[[], bool], open_: set[_Stream]) -> None:
        self.sink = sink
        self.blocked = blocked
        self.open = open_
        self.framer = StreamFramer(sink.max_size)
        self.peer = ""
        self.transport: asyncio.Transport | None = None
        self._recheck: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is no subclass
        self.open.add(self)
        peer = transport.get_extra_info("peername")
        self.peer = str(peer[0]) if peer else ""

    def data_received(self, data: bytes) -> None:
        self._take(self.framer.feed(data))
        if self.blocked():
            self._pause()

    def eof_received(self) -> bool | None:
        self._take(self.framer.close())
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        self.open.discard(self)
        if self._recheck is not None:
            self._recheck.cancel()
        self._take(self.framer.close())

    def _take(self, frames: list[bytes | Refused]) -> None:
        sink, peer = self.sink, self.peer
        for frame in frames:
            if isinstance(frame, Refused):
                sink.refused(frame, peer)
            else:
                sink.take(frame, peer)

    def _pause(self) -> None:
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        transport.pause_reading()
        self._recheck = asyncio.get_running_loop().call_later(_ALARM_RECHECK, self._resume)

    def _resume(self) -> None:
        self._recheck = None
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        if self.blocked():
            self._recheck = asyncio.get_running_loop().call_later(_ALARM_RECHECK, self._resume)
        else:
            transport.resume_reading()


UDP_RECEIVE_BUFFER = 4 * 1024 * 1024


def _grow_receive_buffer(transport: asyncio.BaseTransport) -> None:
    """A UDP sender has no flow control: datagrams that arrive while the loop is busy
    wait in the socket's receive buffer, and past it the kernel drops them. Ask for 4 MiB
    (the kernel caps it at net.core.rmem_max; rsyslog's imudp asks the same way)."""
    sock = transport.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, UDP_RECEIVE_BUFFER)


class SyslogListener:
    """UDP and TCP on one port (0: a free port that both have)."""

    def __init__(self, intake: LogIntake, blocked: Callable[[], bool]) -> None:
        self.sink = SyslogSink(intake)
        self.blocked = blocked
        self.host = ""
        self.port = 0
        self._server: asyncio.base_events.Server | None = None
        self._udp: asyncio.DatagramTransport | None = None
        self._open: set[_Stream] = set()

    async def start(self, bind: str, port: int) -> tuple[str, int]:
        """Listen on ``bind``:``port``; the address bound (ListenError when it cannot)."""
        loop = asyncio.get_running_loop()
        host: str | None = bind if bind not in ("", "::") else None
        # a free port must be free for both: TCP picks one, UDP may find it taken
        for attempt in range(20):
            try:
                server = await loop.create_server(
                    lambda: _Stream(self.sink, self.blocked, self._open),
                    host=host,
                    port=port,
                    reuse_address=True,
                    backlog=1024,
                )
            except OSError as exc:
                raise ListenError("syslog", bind, port, exc) from exc
            bound = int(server.sockets[0].getsockname()[1])
            family = server.sockets[0].family
            try:
                transport, _ = await loop.create_datagram_endpoint(
                    lambda: _Datagrams(self.sink),
                    local_addr=(bind if host is not None else "::" if family == socket.AF_INET6
                                else "0.0.0.0", bound),
                    family=family,
                )  # fmt: skip
            except OSError as exc:
                server.close()
                await server.wait_closed()
                if port == 0 and attempt < 19:
                    continue
                raise ListenError("syslog", bind, bound, exc) from exc
            _grow_receive_buffer(transport)
            self._server = server
            self._udp = transport
            self.host = str(server.sockets[0].getsockname()[0])
            self.port = bound
            return self.host, bound
        raise AssertionError("unreachable")  # pragma: no cover

    def close(self) -> None:
        if self._server is not None:
            self._server.close()
        if self._udp is not None:
            self._udp.close()
        for stream in list(self._open):
            if stream.transport is not None:
                stream.transport.close()  # what it sent so far is read first

    async def wait_closed(self) -> None:
        if self._server is not None:
            await self._server.wait_closed()
