"""A blocking client of RabbitMQ's stream protocol (port 5552), just what the Spark source
needs: the handshake, Metadata, Subscribe with credit, and the Deliver frames, each one
osiris chunk. Frames are encoded with the sans-IO codec of :mod:`leveret.protocol.stream`
(a codec: no broker, no sockets); the socket is here. Nothing here is kept in an object
Spark pickles.

Which host to read from
-----------------------
RabbitMQ's Metadata names each stream's leader and replicas by the host its node
advertises, by default the machine's hostname (``advertised_host``), which a client may not
be able to resolve, or which may be the name of the very node the URL points at. The rule
here is pragmatic: a single-node broker, or a stream with a member advertised under the URL's
own host (or under a name that resolves to the same address), is read through the URL's
host; otherwise the first member whose advertised host resolves; else the URL's host.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import socket
import ssl
import struct
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeVar

from leveret.logs.amqp import LogsError, parameters, redact
from leveret.protocol.stream import chunk
from leveret.protocol.stream import events as ev
from leveret.protocol.stream.encode import CHUNK_AT, decode_reply, delivered_to
from leveret.protocol.stream.frames import FrameError, encode_client
from leveret.protocol.stream.spec import Code, OffsetType
from leveret.spark.client import AmqpSourceError, urls_of

log = logging.getLogger(__name__)
R = TypeVar("R")

DEFAULT_STREAM_PORT = 5552
DEFAULT_STREAM_TLS_PORT = 5551
_U32 = struct.Struct(">I")
_CONNECT_TIMEOUT = 10.0
_RECV = 1 << 20


@dataclass(frozen=True, slots=True)
class Target:
    """Where and as whom to connect, from an ``amqp://`` or ``amqps://`` URL and the stream
    port. Pickled into Spark's tasks: an ``amqps://`` target keeps its URL and makes the TLS
    context (from the URL's ``ssl_options``, as the AMQP 0-9-1 reader does) per connection."""

    host: str
    port: int
    vhost: str
    user: str
    password: str
    shown: str  # the URL without its password, for messages
    url: str = ""  # the URL (TLS settings), when ``tls``
    tls: bool = False

    @classmethod
    def of(cls, url: str, stream_port: int | None = None) -> Target:
        """The target of one URL; ``stream_port`` None: 5552, or 5551 for ``amqps://``."""
        try:
            params = parameters(url)
        except LogsError as exc:
            raise AmqpSourceError(str(exc)) from None
        tls = params.ssl_options is not None
        creds = params.credentials
        return cls(
            params.host,
            stream_port or (DEFAULT_STREAM_TLS_PORT if tls else DEFAULT_STREAM_PORT),
            params.virtual_host,
            creds.username,
            creds.password,
            redact(url),
            url if tls else "",
            tls,
        )

    def at(self, host: str, port: int) -> Target:
        """The same credentials (and TLS settings) at another node."""
        return dataclasses.replace(self, host=host, port=port)

    def wrap(self, sock: socket.socket) -> socket.socket:
        """``sock`` through TLS when the URL is ``amqps://``: the server verified as the
        AMQP 0-9-1 reader verifies it (the URL's ``server_hostname``, else the host)."""
        if not self.tls:
            return sock
        tls = parameters(self.url).ssl_options
        assert tls is not None
        wrapped: socket.socket = tls.context.wrap_socket(
            sock, server_hostname=tls.server_hostname or self.host
        )
        return wrapped


def targets_of(
    url: str, stream_port: int | None = None, members: Sequence[tuple[str, int]] = ()
) -> list[Target]:
    """The targets of an option's URLs (several separated by commas: one cluster's nodes),
    then the stream's ``members`` (host and stream port as Metadata advertised them) that
    the URLs do not name: where to read when the URLs' nodes are gone."""
    out = [Target.of(u, stream_port) for u in urls_of(url)]
    seen = {(t.host, t.port) for t in out}
    for host, port in members:
        if (host, port) not in seen:
            seen.add((host, port))
            out.append(out[0].at(host, port))
    return out


def _code_text(code: int) -> str:
    try:
        return Code(code).name
    except ValueError:
        return f"code {code}"


class StreamClient:
    """One connection, opened (handshake done) on construction."""

    def __init__(self, target: Target, timeout: float = _CONNECT_TIMEOUT) -> None:
        self.target = target
        self.host = target.host
        self.timeout = timeout
        self._buf = bytearray()
        self._pos = 0
        self._correlation = 0
        self.server_properties: dict[str, str] = {}
        #: the stream's leader and replicas (host, stream port), once Metadata named them
        self.members: list[tuple[str, int]] = []
        where = f"{self.host}:{target.port}"
        try:
            raw = socket.create_connection((self.host, target.port), timeout)
        except OSError as exc:
            raise AmqpSourceError(
                f"cannot connect to the stream port {where} of {target.shown}: {exc}",
                transient=True,
            ) from None
        raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with contextlib.suppress(OSError):
            raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
        try:
            self.sock = target.wrap(raw)
        except (OSError, ssl.SSLError, ValueError) as exc:
            raw.close()
            raise AmqpSourceError(
                f"TLS with the stream port {where} of {target.shown} failed: {exc}",
                transient=not isinstance(exc, ssl.SSLCertVerificationError | ValueError),
            ) from None
        try:
            self._handshake()
        except BaseException:
            self.close()
            raise

    # ------------------------------------------------------------------ frames
    def _next_id(self) -> int:
        self._correlation += 1
        return self._correlation

    def send(self, event: ev.Event) -> None:
        try:
            self.sock.sendall(encode_client(event))
        except OSError as exc:
            raise self._lost(exc) from None

    def _lost(self, exc: BaseException | str) -> AmqpSourceError:
        return AmqpSourceError(
            f"stream connection to {self.host}:{self.target.port} ({self.target.shown}) "
            f"lost: {exc}",
            transient=True,
        )

    def frame(self, timeout: float | None) -> bytes | None:
        """The next frame (key, version and fields, without its size), or None when none
        came within ``timeout`` seconds."""
        deadline = None if timeout is None else time.monotonic() + timeout
        buf = self._buf
        while True:
            have = len(buf) - self._pos
            if have >= 4:
                (size,) = _U32.unpack_from(buf, self._pos)
                if have >= 4 + size:
                    start = self._pos + 4
                    out = bytes(buf[start : start + size])
                    self._pos = start + size
                    if self._pos == len(buf):
                        buf.clear()
                        self._pos = 0
                    return out
                want = 4 + size - have
            else:
                want = 4 - have
            if self._pos:
                del buf[: self._pos]
                self._pos = 0
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                self.sock.settimeout(left)
            else:
                self.sock.settimeout(None)
            try:
                data = self.sock.recv(max(_RECV, want))
            except TimeoutError:
                return None
            except OSError as exc:
                raise self._lost(exc) from None
            if not data:
                raise self._lost("the broker closed the connection")
            buf += data

    def _reply(
        self, kind: type[R], correlation_id: int | None, deadline: float, what: str | None
    ) -> R | None:
        """The next reply of type ``kind`` (answering ``correlation_id``, when given), or
        None when none came before ``deadline``; the server's other frames (heartbeats,
        metadata updates) are passed over. With ``what``, the broker's close during it
        is an error."""
        while True:
            left = deadline - time.monotonic()
            got = self.frame(max(left, 0.0)) if left > 0 else None
            if got is None:
                return None
            try:
                reply = decode_reply(got)
            except FrameError as exc:
                raise AmqpSourceError(
                    f"{self.target.shown}: a stream frame from the broker does not parse: {exc}"
                ) from None
            if what is not None and isinstance(reply, ev.Close):
                raise AmqpSourceError(f"{self.target.shown}: the broker closed the stream "
                                      f"connection during {what}")  # fmt: skip
            if isinstance(reply, kind) and (
                correlation_id is None or getattr(reply, "correlation_id", None) == correlation_id
            ):
                return reply

    def _response(self, kind: type[R], correlation_id: int | None, what: str) -> R:
        """The response of type ``kind`` to the request ``correlation_id``."""
        got = self._reply(kind, correlation_id, time.monotonic() + self.timeout, what)
        if got is None:
            raise self._lost(f"no answer to {what} within {self.timeout:g}s")
        return got

    def _request(self, event: ev.Event, kind: type[R], what: str) -> R:
        self.send(event)
        return self._response(kind, getattr(event, "correlation_id", None), what)

    def _handshake(self) -> None:
        t = self.target
        properties = ev.PeerProperties(self._next_id(), {"product": "leveret-spark"})
        peer = self._request(properties, ev.PeerPropertiesResponse, "peer properties")
        self.server_properties = peer.properties
        self._request(ev.SaslHandshake(self._next_id()), ev.SaslHandshakeResponse,
                      "SASL handshake")  # fmt: skip
        plain = b"\0" + t.user.encode() + b"\0" + t.password.encode()
        auth = ev.SaslAuthenticate(self._next_id(), "PLAIN", plain)
        code = self._request(auth, ev.SaslAuthenticateResponse, "authentication").code
        if code != Code.OK:
            raise AmqpSourceError(
                f"{t.shown} (stream port {t.port}): ACCESS_REFUSED - login refused "
                f"({_code_text(code)})"
            )
        tune = self._response(ev.Tune, None, "tune")
        self.send(ev.Tune(tune.frame_max, 0))  # no heartbeats: a reader is never idle long
        code = self._request(ev.Open(self._next_id(), t.vhost), ev.OpenResponse, "open").code
        if code != Code.OK:
            raise AmqpSourceError(
                f"{t.shown} (stream port {t.port}): cannot open vhost {t.vhost!r} "
                f"({_code_text(code)})"
            )

    # ------------------------------------------------------------------ commands
    def metadata(self, stream: str) -> tuple[dict[int, tuple[str, int]], int, list[int]]:
        """The brokers (reference -> host, port), and the stream's code and members
        (leader first). AmqpSourceError when the stream does not exist."""
        request = ev.Metadata(self._next_id(), (stream,))
        self.send(request)
        deadline = time.monotonic() + self.timeout
        reply = self._reply(ev.MetadataResponse, request.correlation_id, deadline, None)
        if reply is None or not reply.streams:
            raise self._lost("no answer to metadata")
        brokers = {ref: (host, port) for ref, host, port in reply.brokers}
        _name, code, leader, replicas = reply.streams[0]  # one stream asked, one answered
        if code == Code.STREAM_DOES_NOT_EXIST:
            raise AmqpSourceError(
                f"stream {stream!r} does not exist on {self.target.shown} (stream port "
                f"{self.target.port}): NOT_FOUND - no stream {stream!r} in vhost "
                f"{self.target.vhost!r}"
            )
        if code != Code.OK:
            raise AmqpSourceError(
                f"stream {stream!r} on {self.target.shown}: {_code_text(code)}",
                transient=code == Code.STREAM_NOT_AVAILABLE,
            )
        return brokers, code, [leader, *replicas]

    def partitions(self, super_stream: str) -> list[str]:
        """The partitions of ``super_stream`` in order (the Partitions command, which
        RabbitMQ answers from 3.9 on: without the response bit before 3.13). AmqpSourceError
        when there is no such super stream, or when the broker refuses the command."""
        request = ev.Partitions(self._next_id(), super_stream)
        reply = self._request(request, ev.PartitionsResponse, "partitions")
        if reply.code == Code.STREAM_DOES_NOT_EXIST:
            raise AmqpSourceError(
                f"super stream {super_stream!r} does not exist on {self.target.shown}: no "
                f"exchange {super_stream!r} in vhost {self.target.vhost!r}"
            )
        if reply.code != Code.OK:
            raise AmqpSourceError(
                f"cannot list the partitions of super stream {super_stream!r} on "
                f"{self.target.shown}: {_code_text(reply.code)}"
            )
        return list(dict.fromkeys(reply.streams))  # RabbitMQ lists a stream bound twice twice

    def route(self, routing_key: str, super_stream: str) -> list[str]:
        """The partitions ``super_stream`` routes ``routing_key`` to (the Route command)."""
        request = ev.Route(self._next_id(), routing_key, super_stream)
        reply = self._request(request, ev.RouteResponse, "route")
        if reply.code == Code.STREAM_DOES_NOT_EXIST:
            raise AmqpSourceError(
                f"super stream {super_stream!r} does not exist on {self.target.shown}"
            )
        if reply.code != Code.OK:
            raise AmqpSourceError(
                f"cannot route in super stream {super_stream!r} on {self.target.shown}: "
                f"{_code_text(reply.code)}"
            )
        return list(reply.streams)

    def subscribe(
        self, subscription: int, stream: str, offset_type: int, offset: int, credit: int
    ) -> None:
        request = ev.Subscribe(self._next_id(), subscription, stream, offset_type, offset,
                               credit, {})  # fmt: skip
        code = self._request(request, ev.Response, f"subscribe to {stream!r}").code
        if code != Code.OK:
            raise AmqpSourceError(
                f"cannot read stream {stream!r} on {self.target.shown}: {_code_text(code)}",
                transient=code == Code.STREAM_NOT_AVAILABLE,
            )

    def unsubscribe(self, subscription: int) -> None:
        self._request(ev.Unsubscribe(self._next_id(), subscription), ev.Response, "unsubscribe")

    def credit(self, subscription: int, chunks: int) -> None:
        self.send(ev.Credit(subscription, chunks))

    def chunk(self, subscription: int, timeout: float) -> bytes | None:
        """The next Deliver frame of ``subscription`` (the chunk starts at byte 5), or None
        when none came in time."""
        deadline = time.monotonic() + timeout
        while True:
            got = self.frame(max(deadline - time.monotonic(), 0.0))
            if got is None:
                return None
            to = delivered_to(got)  # a chunk is walked in place, not decoded here
            if to >= 0:
                if to == subscription:
                    return got
                continue
            try:
                reply = decode_reply(got)
            except FrameError:
                continue
            if isinstance(reply, ev.Close):
                raise self._lost("the broker closed the connection")
            if isinstance(reply, ev.MetadataUpdate):
                raise self._lost("the stream moved or was deleted (metadata update)")
            # heartbeats, credit errors of stale subscriptions: nothing to do

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()


def _addresses(host: str) -> set[str]:
    try:
        return {str(a[4][0]) for a in socket.getaddrinfo(host, None)}
    except OSError:
        return set()


def pick_host(
    url_host: str, brokers: dict[int, tuple[str, int]], members: list[int]
) -> tuple[str, int] | None:
    """The member to read from, or None for the node the URL names (see the module)."""
    if len(brokers) <= 1:
        return None
    hosts = [brokers[m] for m in members if m in brokers]
    mine = _addresses(url_host)
    for host, _port in hosts:
        if host == url_host or (mine and _addresses(host) & mine):
            return None
    for host, port in hosts:
        if _addresses(host):
            return host, port
    return None


def open_for(target: Target, stream: str, timeout: float = _CONNECT_TIMEOUT) -> StreamClient:
    """A connection to a node that holds ``stream`` (checked with Metadata)."""
    client = StreamClient(target, timeout)
    try:
        brokers, _, members = client.metadata(stream)
        other = pick_host(target.host, brokers, members)
    except BaseException:
        client.close()
        raise
    where = [brokers[m] for m in members if m in brokers]
    if other is not None:
        client.close()
        host, port = other
        client = StreamClient(target.at(host, port), timeout)
    client.members = where
    return client


def open_any(
    targets: list[Target], stream: str, node: int = 0, timeout: float = _CONNECT_TIMEOUT
) -> tuple[StreamClient, int]:
    """A connection for ``stream`` through the first of ``targets`` (one cluster's nodes)
    that answers, starting with the one at ``node``; and the index of that one."""
    for i in range(len(targets)):
        at = (node + i) % len(targets)
        try:
            return open_for(targets[at], stream, timeout), at
        except AmqpSourceError as exc:
            if not exc.transient or i == len(targets) - 1:
                raise
            log.info("%s; trying the next node", exc)
    raise AmqpSourceError("no broker URL given")


def chunk_bounds(frame: bytes) -> tuple[int, int, int]:
    """A Deliver frame's chunk: (type, first offset, records)."""
    magic, ctype, _entries, records, _ts, _epoch, first = chunk.HEADER.unpack_from(frame, CHUNK_AT)[
        :7
    ]
    if magic >> 4 != chunk.MAGIC:  # osiris 0x50 (RabbitMQ 3.10) or 0x51
        raise AmqpSourceError(f"a Deliver frame holds no osiris chunk (first byte {magic:#x})")
    return ctype, first, records


def probe(
    target: Target, stream: str, offset_type: int, offset: int = 0, *, wait: float = 1.0,
    client: StreamClient | None = None, subscription: int = 0,
) -> tuple[int, int] | None:  # fmt: skip
    """The first user chunk delivered from a position: (first offset, records), or None
    when nothing came within ``wait`` seconds (an empty stream)."""
    own = client is None
    c = open_for(target, stream) if client is None else client
    try:
        c.subscribe(subscription, stream, offset_type, offset, 1)
        try:
            deadline = time.monotonic() + wait
            while True:
                got = c.chunk(subscription, max(deadline - time.monotonic(), 0.0))
                if got is None:
                    return None
                ctype, first, records = chunk_bounds(got)
                if ctype == 0:
                    return first, records
                c.credit(subscription, 1)
        finally:
            if not own:
                c.unsubscribe(subscription)
    finally:
        if own:
            c.close()


class TailProbe:
    """The driver's held connection for finding a stream's committed end: each call
    subscribes at ``last`` (the last committed chunk), reads that chunk's header (its first
    offset plus its record count is the end) and unsubscribes. A lost connection is opened
    again, on the next node of ``targets`` if need be. Dropped when pickled."""

    def __init__(
        self, targets: list[Target], stream: str, client: StreamClient | None = None
    ) -> None:
        self.targets = targets
        self.stream = stream
        self._client = client
        self._node = 0
        self._sub = 0

    def __getstate__(self) -> dict[str, object]:
        return {"targets": self.targets, "stream": self.stream, "_client": None, "_node": 0,
                "_sub": 0}  # fmt: skip

    def __setstate__(self, state: dict[str, object]) -> None:
        self.__dict__.update(state)

    def _at(self, offset_type: int, offset: int, wait: float) -> tuple[int, int] | None:
        for attempt in range(len(self.targets) + 1):
            if self._client is None:
                self._client, self._node = open_any(self.targets, self.stream, self._node)
            self._sub = (self._sub + 1) % 256
            try:
                return probe(self._client.target, self.stream, offset_type, offset, wait=wait,
                             client=self._client, subscription=self._sub)  # fmt: skip
            except AmqpSourceError as exc:
                self.close()
                self._node += 1
                if not exc.transient or attempt == len(self.targets):
                    raise
        raise AssertionError("unreachable")

    def tail(self, wait: float) -> int:
        got = self._at(OffsetType.LAST, 0, wait)
        return 0 if got is None else got[0] + got[1]

    def head(self, wait: float) -> int | None:
        got = self._at(OffsetType.FIRST, 0, wait)
        return None if got is None else got[0]

    def at_time(self, ms: int, wait: float) -> int | None:
        got = self._at(OffsetType.TIMESTAMP, ms, wait)
        return None if got is None else got[0]

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None


def port_answers(host: str, port: int, timeout: float = 2.0) -> bool:
    try:
        with socket.create_connection((host, port), timeout):
            return True
    except OSError:
        return False


__all__ = [
    "DEFAULT_STREAM_PORT",
    "DEFAULT_STREAM_TLS_PORT",
    "StreamClient",
    "TailProbe",
    "Target",
    "chunk_bounds",
    "open_any",
    "open_for",
    "pick_host",
    "port_answers",
    "probe",
    "targets_of",
]
