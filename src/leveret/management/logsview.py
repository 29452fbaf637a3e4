"""The dashboard's Logs view: the records of a logs exchange, live, pushed to browsers.

A *tap* is an AMQP client of the broker's own AMQP port (aiormq over a socket, in the
broker's event loop), logged in as the dashboard's user: it declares a server-named exclusive
queue, binds it to the exchange as ``leveret receive-logs`` does, and consumes. Browsers read
``GET /api/logs/stream`` (Server-Sent Events); every page of one user on one exchange shares
one tap. A tap exists only while a page is open (and ``LINGER`` seconds after the last one
closes), so a broker nobody watches pays nothing.

Why it can never slow the broker:

- The tap takes at most ``PREFETCH`` records per ``ACK_INTERVAL`` (prefetch plus one
  ``basic.ack(multiple)`` per interval): the work done in the broker's event loop for the view
  is capped at ``MAX_RATE`` records/s, whatever the publish rate.
- Its queue has no length limit, so the broker routes into it on its cheapest path (a plain
  append; a limit with drop-head costs about twice as much per message, measured), and the
  tap bounds it itself: each interval it asks how many records wait (a passive declare) and,
  past ``QUEUE_LIMIT``, purges them, counting what ``purge-ok`` says went; the records that
  come next are the newest. Publishers are never refused, blocked or flow-controlled on the
  view's account; the queue holds at most ``QUEUE_LIMIT`` records plus what arrives within
  one interval. Bursts up to ``QUEUE_LIMIT`` are shown whole, at ``MAX_RATE``.
- A view opens with the recent past: when a stream queue is bound to the exchange (``logs``,
  which ``leveret up`` and the lake ingest declare, first), the tap reads its last
  ``HISTORY`` records once, then goes on with the live records (a record that is in both,
  published as the tap bound its queue, is shown once, by its ``message_id``).
- An exchange that appears only after the view opened is picked up: the tap waits for it,
  and checks every ``EXCHANGE_CHECK`` seconds that the exchange it is bound to still exists;
  one deleted (and declared again, perhaps of another type) is waited for and bound anew.
- Each browser has its own bounded buffer (``CLIENT_BUFFER`` records, ``CLIENT_BUFFER_BYTES``);
  a browser that reads slowly loses the oldest records of its buffer, counted and shown, and
  never holds up the tap or another browser.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import socket
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from aiohttp import web

from leveret.broker.queues import StreamQueue
from leveret.logs.amqp import PROPERTY_NAMES
from leveret.logs.record import SEVERITIES, Record
from leveret.management.context import mgmt
from leveret.management.httputil import bad_request, credentials, current_user

if TYPE_CHECKING:
    import aiormq.abc

    from leveret.management.context import Management

log = logging.getLogger(__name__)

QUEUE_LIMIT = 1000
PREFETCH = 50
ACK_INTERVAL = 0.25
MAX_RATE = int(PREFETCH / ACK_INTERVAL)
RECENT = 500
RECENT_BYTES = 2 * 1024 * 1024
CLIENT_BUFFER = 2000
CLIENT_BUFFER_BYTES = 4 * 1024 * 1024
#: a record's text fields are cut to this for the view (a log line is rarely longer)
MAX_FIELD_CHARS = 16 * 1024
#: the kernel's send buffer for one browser's stream (no autotuning to megabytes)
SEND_BUFFER = 256 * 1024
BATCH_INTERVAL = 0.2
IDLE_BATCH_INTERVAL = 1.0
LINGER = 10.0
LIVE_MINUTES = 60
MAX_BACKOFF = 10.0
#: the recent records of the exchange's stream a view opens with
HISTORY = 200
HISTORY_TIMEOUT = 5.0
#: the stream read first for history (the one the lake ingest reads)
HISTORY_STREAM = "logs"
EXCHANGE_CHECK = 1.0

#: What a tap binds with, as the lake ingest does: everything, whatever the exchange's type
#: (fanout ignores the key, topic matches ``#``, direct matches a severity).
BINDING_KEYS = ("#", *SEVERITIES)

# the headers and the timestamp are shown apart; nobody sets cluster_id
_PROPERTIES = tuple(n for n in PROPERTY_NAMES if n not in ("headers", "timestamp", "cluster_id"))


def _jsonable(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return str(value)


def record_of(
    body: bytes, routing_key: str, exchange: str, redelivered: bool, props: Any, seq: int
) -> bytes:
    """One delivery as the JSON the browser gets: the record's fields (as
    :meth:`Record.from_body` reads them, plain text included) and the message's."""
    content_type = getattr(props, "content_type", None)
    stamp: Any = getattr(props, "timestamp", None)
    epoch = int(stamp.timestamp()) if stamp is not None and hasattr(stamp, "timestamp") else None
    record = Record.from_body(body, content_type, routing_key, epoch)
    doc: dict[str, Any] = record.to_dict()
    cut = False
    for key in ("message", "exc"):
        value = doc.get(key)
        if isinstance(value, str) and len(value) > MAX_FIELD_CHARS:
            doc[key] = value[:MAX_FIELD_CHARS]
            cut = True
    if "extra" in doc:
        extra = json.dumps(doc["extra"], default=str)
        if len(extra) > MAX_FIELD_CHARS:
            doc["extra"] = {"_cut": extra[:MAX_FIELD_CHARS]}
            cut = True
    if cut:
        doc["_cut"] = True  # the view shows a cut record; the message itself is untouched
    properties: dict[str, Any] = {}
    for name in _PROPERTIES:
        value = getattr(props, name, None)
        if value not in (None, ""):
            properties[name] = _jsonable(value)
    if epoch is not None:
        properties["timestamp"] = epoch
    headers = getattr(props, "headers", None)
    if headers:
        properties["headers"] = _jsonable(headers)
    doc["_seq"] = seq
    doc["_received"] = int(time.time() * 1000)
    doc["_message"] = {
        "exchange": exchange,
        "routing_key": routing_key,
        "redelivered": redelivered,
        "payload_bytes": len(body),
        "properties": properties,
    }
    doc["_plain"] = not (content_type == "application/json" or body[:1] == b"{")
    return json.dumps(doc, ensure_ascii=False, separators=(",", ":"), default=str).encode()


# ------------------------------------------------------------------ subscribers
class Ring:
    """Encoded records, newest last, bounded by count and bytes: the oldest go first."""

    def __init__(self, count: int, size: int) -> None:
        self.count = count
        self.size = size
        self.items: deque[bytes] = deque()
        self.bytes = 0
        self.dropped = 0

    def push(self, record: bytes) -> None:
        self.items.append(record)
        self.bytes += len(record)
        while len(self.items) > self.count or (self.bytes > self.size and len(self.items) > 1):
            self.bytes -= len(self.items.popleft())
            self.dropped += 1

    def take(self) -> list[bytes]:
        out = list(self.items)
        self.items.clear()
        self.bytes = 0
        return out

    def __iter__(self) -> Iterator[bytes]:
        return iter(self.items)


@dataclass(eq=False)
class Subscriber:
    """One browser: a bounded buffer of encoded records, the oldest dropped first."""

    buffer: Ring = field(default_factory=lambda: Ring(CLIENT_BUFFER, CLIENT_BUFFER_BYTES))
    broker_dropped_base: int = 0
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    closed: bool = False

    @property
    def dropped(self) -> int:
        return self.buffer.dropped

    def offer(self, record: bytes) -> None:
        self.buffer.push(record)
        self.wake.set()

    def take(self) -> list[bytes]:
        self.wake.clear()
        return self.buffer.take()

    def close(self) -> None:
        self.closed = True
        self.wake.set()


# --------------------------------------------------------------------------- tap
class Tap:
    """One consumer of ``exchange`` in ``vhost`` as ``username``, shared by that user's pages."""

    def __init__(
        self,
        url: str,
        vhost: str,
        exchange: str,
        username: str,
        on_idle: Callable[[Tap], None],
        history: Callable[[], tuple[str, int, int] | None] | None = None,
    ) -> None:
        self.url = url
        # (stream, first offset, end offset) of a stream bound to the exchange, if any
        self._history_source = history
        self._history_taken = False
        self._history_ids: set[str] = set()
        self.vhost = vhost
        self.exchange = exchange
        self.username = username
        self._on_idle = on_idle
        self.subscribers: set[Subscriber] = set()
        self.recent = Ring(RECENT, RECENT_BYTES)
        self.status = "connecting"
        self.error: str | None = None
        self.queue: str | None = None
        self.received = 0
        self.broker_dropped = 0  # purged from the tap's queue, all connections
        self._seq = 0
        self._last_tag = 0
        self._acked_tag = 0
        self._closing = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._linger: asyncio.TimerHandle | None = None
        self._closer: asyncio.Task[None] | None = None
        # live counts per minute (epoch minute -> severity -> n); "unseen" for queue drops
        self.minutes: dict[int, dict[str, int]] = {}
        self.started = time.time()

    # -------------------------------------------------------------- lifecycle
    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    def subscribe(self) -> Subscriber:
        if self._linger is not None:
            self._linger.cancel()
            self._linger = None
        sub = Subscriber(broker_dropped_base=self.dropped_by_broker)
        for record in self.recent:
            sub.offer(record)
        sub.buffer.dropped = 0
        self.subscribers.add(sub)
        return sub

    def unsubscribe(self, sub: Subscriber) -> None:
        self.subscribers.discard(sub)
        if not self.subscribers and not self._closing.is_set():
            loop = asyncio.get_running_loop()
            self._linger = loop.call_later(LINGER, self._idle)

    def _idle(self) -> None:
        self._linger = None
        if not self.subscribers:
            self._on_idle(self)
            self._closer = asyncio.get_running_loop().create_task(self.close())

    async def close(self) -> None:
        self._closing.set()
        for sub in list(self.subscribers):
            sub.close()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task

    @property
    def dropped_by_broker(self) -> int:
        return self.broker_dropped

    # -------------------------------------------------------------- consuming
    async def _run(self) -> None:
        backoff = 0.5
        while not self._closing.is_set():
            started = time.monotonic()
            try:
                await self._consume()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # a lost connection, a refusal: shown, then retried
                self._set_status("error", describe(exc))
                log.debug("logs view tap %s/%s: %s", self.vhost, self.exchange, exc)
            if time.monotonic() - started > 30:
                backoff = 0.5
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._closing.wait(), backoff)
            backoff = min(backoff * 2, MAX_BACKOFF)

    async def _consume(self) -> None:
        import aiormq

        conn = await aiormq.connect(
            self.url,
            client_properties={"connection_name": f"leveret dashboard logs view ({self.username})"},
        )
        try:
            ch = await self._exchange_channel(conn)
            if ch is None:
                return
            ok = await ch.queue_declare("", exclusive=True, auto_delete=True)
            queue = ok.queue
            assert queue is not None
            for key in BINDING_KEYS:
                await ch.queue_bind(queue, self.exchange, routing_key=key)
            await ch.basic_qos(prefetch_count=PREFETCH)
            self._last_tag = self._acked_tag = 0
            self.queue = queue
            if not self._history_taken:
                # after the bind: what is published from now on is in the tap's queue
                self._history_taken = True
                await self._take_history(conn)
            await ch.basic_consume(queue, self._on_message, no_ack=False)
            self._set_status("live", None)
            checked = time.monotonic()
            while not self._closing.is_set():
                if ch.is_closed:
                    closing = ch.closing
                    raise ConnectionError(describe(closing.exception()))
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._closing.wait(), ACK_INTERVAL)
                if self._closing.is_set():
                    break
                if time.monotonic() - checked >= EXCHANGE_CHECK:
                    checked = time.monotonic()
                    if not await self._exchange_exists(ch):
                        # deleted: its bindings went with it; wait for it to be declared again
                        self._set_status(
                            "waiting",
                            f"exchange '{self.exchange}' in vhost '{self.vhost}' was deleted",
                        )
                        return
                # drop what waits beyond the limit first, so that the credit the ack
                # returns goes to the newest records
                waiting = (await ch.queue_declare(queue, passive=True)).message_count or 0
                if waiting > QUEUE_LIMIT:
                    purged = (await ch.queue_purge(queue)).message_count or 0
                    self.broker_dropped += purged
                    self._count_live("unseen", purged)
                if self._last_tag > self._acked_tag:
                    tag = self._last_tag
                    await ch.basic_ack(tag, multiple=True)
                    self._acked_tag = tag
        finally:
            self.queue = None
            with contextlib.suppress(Exception):
                await asyncio.wait_for(conn.close(), 5)

    async def _exchange_channel(self, conn: aiormq.abc.AbstractConnection) -> Any:
        """A channel on which the exchange exists; until it does, check every second (a
        refused passive declare closes its channel) rather than guess its type."""
        import aiormq

        while not self._closing.is_set():
            ch = await conn.channel()
            try:
                await ch.exchange_declare(self.exchange, passive=True)
                return ch
            except aiormq.exceptions.ChannelNotFoundEntity:
                self._set_status(
                    "waiting", f"no exchange '{self.exchange}' in vhost '{self.vhost}' yet"
                )
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._closing.wait(), 1.0)
        return None

    async def _exchange_exists(self, ch: aiormq.abc.AbstractChannel) -> bool:
        """A passive declare on the tap's channel (a refusal closes it: the tap then
        starts over, waiting for the exchange)."""
        import aiormq

        try:
            await ch.exchange_declare(self.exchange, passive=True)
        except aiormq.exceptions.ChannelNotFoundEntity:
            return False
        return True

    async def _take_history(self, conn: aiormq.abc.AbstractConnection) -> None:
        """The last ``HISTORY`` records of the stream bound to the exchange, read once on a
        channel of their own (a user who may not read the stream just gets none)."""
        source = self._history_source() if self._history_source is not None else None
        if source is None:
            return
        stream, first, end = source
        start = max(first, end - HISTORY)
        if start >= end:
            return
        got: list[tuple[int, aiormq.abc.DeliveredMessage]] = []
        done = asyncio.Event()

        async def on_message(message: aiormq.abc.DeliveredMessage) -> None:
            headers = getattr(message.header.properties, "headers", None) or {}
            offset = headers.get("x-stream-offset")
            if not isinstance(offset, int) or offset >= end:
                done.set()
                return
            got.append((offset, message))
            if offset >= end - 1:
                done.set()

        try:
            ch = await conn.channel()
            await ch.basic_qos(prefetch_count=HISTORY)
            await ch.basic_consume(
                stream, on_message, no_ack=False, arguments={"x-stream-offset": start}
            )
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(done.wait(), HISTORY_TIMEOUT)
            with contextlib.suppress(Exception):
                await asyncio.wait_for(ch.close(), 5)
        except Exception as exc:  # no right to read it, or it went: no history, still live
            log.debug("logs view history from %s/%s: %s", self.vhost, stream, exc)
        seen: set[int] = set()
        for offset, message in sorted(got, key=lambda item: item[0]):
            if offset in seen:
                continue
            seen.add(offset)
            message_id = getattr(message.header.properties, "message_id", None)
            if message_id:
                self._history_ids.add(str(message_id))
            self._show(message, count=False)

    async def _on_message(self, message: aiormq.abc.DeliveredMessage) -> None:
        delivery = message.delivery
        tag = getattr(delivery, "delivery_tag", None) or 0
        if tag > self._last_tag:
            self._last_tag = tag
        if self._history_ids:
            # the first live records may be the history's last (published as the tap
            # bound): each is shown once; past them the set is not needed any more
            message_id = getattr(message.header.properties, "message_id", None)
            if message_id is not None and str(message_id) in self._history_ids:
                return
            self._history_ids.clear()
        self.received += 1
        self._show(message, count=True)

    def _show(self, message: aiormq.abc.DeliveredMessage, count: bool) -> None:
        delivery = message.delivery
        self._seq += 1
        routing_key = str(getattr(delivery, "routing_key", "") or "")
        try:
            record = record_of(
                message.body,
                routing_key,
                str(getattr(delivery, "exchange", "") or ""),
                bool(getattr(delivery, "redelivered", False)),
                message.header.properties,
                self._seq,
            )
        except Exception:  # a body no reader can show is logged, never breaks the tap
            log.exception("logs view: cannot show a delivery")
            return
        if count:
            self._count_live(_severity_of(record))
        self.recent.push(record)
        for sub in self.subscribers:
            sub.offer(record)

    def _count_live(self, severity: str, n: int = 1) -> None:
        minute = int(time.time() // 60)
        counts = self.minutes.get(minute)
        if counts is None:
            counts = self.minutes[minute] = {}
            for old in [m for m in self.minutes if m <= minute - LIVE_MINUTES]:
                del self.minutes[old]
        counts[severity] = counts.get(severity, 0) + n

    def _set_status(self, status: str, error: str | None) -> None:
        self.status, self.error = status, error
        for sub in self.subscribers:
            sub.wake.set()

    def live(self) -> dict[str, Any]:
        """Records per minute by severity as the tap received them, and those the queue
        dropped ("unseen"), for the minutes it has been running."""
        return {
            "since": int(self.started * 1000),
            "minutes": [
                {"minute": minute * 60_000, **counts}
                for minute, counts in sorted(self.minutes.items())
            ],
            "received": self.received,
            "dropped_by_broker": self.dropped_by_broker,
        }


def _severity_of(record: bytes) -> str:
    # the severity is the second field of every record document (see Record.to_dict)
    start = record.find(b'"severity":"')
    if start < 0:
        return "info"
    start += 12
    end = record.find(b'"', start)
    word = record[start:end].decode("utf-8", "replace").lower()
    return word if word in SEVERITIES else "info"


def describe(exc: BaseException | None) -> str:
    """One line for an AMQP failure, as a receiver prints it."""
    if exc is None:
        return "connection closed"
    args = getattr(exc, "args", ())
    frame = args[0] if args else None
    text = getattr(frame, "reply_text", None)
    if text:
        return str(text)
    text = str(exc).strip()
    return text or type(exc).__name__


# ---------------------------------------------------------------------- the view
class LogsView:
    """The taps of one management app, keyed by (user, vhost, exchange)."""

    def __init__(self, management: Management) -> None:
        self.management = management
        self.taps: dict[tuple[str, str, str], Tap] = {}

    def amqp_address(self) -> tuple[str, int]:
        for listener in self.management.listeners:
            if listener.get("protocol") == "amqp":
                host = str(listener["ip_address"])
                if host in ("0.0.0.0", ""):
                    host = "127.0.0.1"
                elif host == "::":
                    host = "::1"
                return host, int(listener["port"])
        server = self.management.server
        return "127.0.0.1", int(server.port)

    def tap(self, username: str, password: str, vhost: str, exchange: str) -> Tap:
        key = (username, vhost, exchange)
        host, port = self.amqp_address()
        netloc = f"[{host}]" if ":" in host else host
        url = (
            f"amqp://{quote(username, safe='')}:{quote(password, safe='')}@{netloc}:{port}/"
            f"{quote(vhost, safe='')}"
        )
        tap = self.taps.get(key)
        if tap is None:
            tap = Tap(
                url,
                vhost,
                exchange,
                username,
                self._forget,
                lambda: self.history_source(vhost, exchange),
            )
            self.taps[key] = tap
            tap.start()
        else:
            tap.url = url  # the password the user logged in with last
        return tap

    def history_source(self, vhost: str, exchange: str) -> tuple[str, int, int] | None:
        """(name, first offset, end offset) of the stream queue bound to ``exchange`` that
        a view opens with: ``logs`` when it is bound there, else the first by name."""
        v = self.management.broker.vhosts.get(vhost)
        x = v.exchanges.get(exchange) if v is not None else None
        if v is None or x is None:
            return None
        bound = {b.destination.name for b in x.bindings.values() if b.destination.kind == "queue"}
        for name in sorted(bound, key=lambda n: (n != HISTORY_STREAM, n)):
            q = v.queues.get(name)
            if isinstance(q, StreamQueue):
                return name, int(q.log.first), int(q.log.next_offset)
        return None

    def _forget(self, tap: Tap) -> None:
        key = (tap.username, tap.vhost, tap.exchange)
        if self.taps.get(key) is tap:
            del self.taps[key]

    async def close(self) -> None:
        taps = list(self.taps.values())
        self.taps.clear()
        for tap in taps:
            await tap.close()


LOGS_VIEW: web.AppKey[LogsView] = web.AppKey("logs_view", LogsView)


def _batch(tap: Tap, sub: Subscriber, records: list[bytes]) -> bytes:
    head = {
        "status": tap.status,
        "error": tap.error,
        "queue": tap.queue,
        "max_rate": MAX_RATE,
        "dropped": {
            "broker": tap.dropped_by_broker - sub.broker_dropped_base,
            "server": sub.dropped,
        },
    }
    meta = json.dumps(head, separators=(",", ":")).encode()
    return b"data: " + meta[:-1] + b',"records":[' + b",".join(records) + b"]}\n\n"


async def stream(request: web.Request) -> web.StreamResponse:
    """``GET /api/logs/stream?vhost=/&exchange=logs``: Server-Sent Events, one ``data:``
    line per batch: ``{"status", "error", "dropped": {"broker", "server"}, "records": [...]}``."""
    m = mgmt(request)
    vhost = request.query.get("vhost", "/")
    exchange = request.query.get("exchange", "logs")
    if not exchange:
        raise bad_request("exchange must not be empty")
    m.vhost(request, vhost)
    creds = credentials(request)
    assert creds is not None  # the middleware let the request in
    view = request.app[LOGS_VIEW]
    tap = view.tap(current_user(request).name, creds[1], vhost, exchange)
    sub = tap.subscribe()
    resp = web.StreamResponse(
        headers={
            "Content-Type": "text/event-stream",
            "Cache-Control": "no-cache",
            "X-Accel-Buffering": "no",
        }
    )
    sock = request.transport.get_extra_info("socket") if request.transport else None
    if sock is not None:
        with contextlib.suppress(OSError, AttributeError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SEND_BUFFER)
    try:
        await resp.prepare(request)
        await resp.write(b"retry: 2000\n\n")
        last_sent = 0.0
        while not sub.closed:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(sub.wake.wait(), IDLE_BATCH_INTERVAL)
            if sub.closed:
                break
            records = sub.take()
            now = time.monotonic()
            if records or now - last_sent >= IDLE_BATCH_INTERVAL:
                await resp.write(_batch(tap, sub, records))
                last_sent = now
            await asyncio.sleep(BATCH_INTERVAL)
    except ConnectionResetError:
        pass
    finally:
        tap.unsubscribe(sub)
    return resp


async def live(request: web.Request) -> dict[str, Any] | None:
    """The live counts of this user's tap on (vhost, exchange), if one is running."""
    view = request.app[LOGS_VIEW]
    vhost = request.query.get("vhost", "/")
    exchange = request.query.get("exchange", "logs")
    tap = view.taps.get((current_user(request).name, vhost, exchange))
    return tap.live() if tap is not None else None


def setup(app: web.Application, management: Management) -> None:
    view = LogsView(management)
    app[LOGS_VIEW] = view

    async def on_shutdown(_: web.Application) -> None:
        await view.close()

    app.on_shutdown.append(on_shutdown)
    app.router.add_get("/api/logs/stream", stream)
