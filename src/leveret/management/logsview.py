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
- Its queue holds at most ``QUEUE_LIMIT`` records (``x-max-length``, drop-head): past it the
  broker drops the oldest as the newest come, so a burst the view cannot keep up with shows
  its first records, then its newest, down to the last one; what was dropped is counted
  (the queue's own count, read in the broker's process) and shown. Publishers are never
  refused, blocked or flow-controlled on the view's account.
- The queue is declared first and bound to the exchange the moment the exchange is
  declared (the broker tells the view while it handles the declaration, before the
  declaring client can publish): a view open before ``emit-log`` declared ``logs`` shows
  the very record that declared it.
- A view opens with the recent past: when a stream queue is bound to the exchange (``logs``,
  which ``leveret up`` and the lake ingest declare, first), the tap reads its last
  ``HISTORY`` records once, then goes on with the live records (a record that is in both,
  published as the tap bound its queue, is shown once, by its ``message_id``).
- The tap checks every ``EXCHANGE_CHECK`` seconds that the exchange it is bound to still
  exists; one deleted (and declared again, perhaps of another type) is waited for and, as
  above, bound anew as it is declared.
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

from leveret.broker import operations
from leveret.broker.events import API_ACTOR, BrokerEvent, ExchangeCreated
from leveret.broker.operations import Actor, BindingRequest
from leveret.broker.queues import ClassicQueue, StreamQueue
from leveret.logs.amqp import PROPERTY_NAMES
from leveret.logs.reading import Envelope, read
from leveret.logs.record import BROKER_EVENT_EXCHANGE, SEVERITIES
from leveret.management.context import mgmt
from leveret.management.httputil import bad_request, credentials, current_user
from leveret.protocol.errors import AMQPError

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

#: What a tap binds with to take everything an exchange routes, by its type: one binding
#: for fanout (the key is ignored) and topic (``#``), the severities for direct (what
#: ``receive-logs`` binds with), and for another type all of those (as the lake ingest
#: binds: a queue gets a message once however many of its bindings match). Each binding is
#: an event (``binding.created``) that ``leveret up`` files in the lake: no more than needed.
BINDING_KEYS = ("#", *SEVERITIES)
_KEYS_BY_TYPE = {"fanout": ("#",), "topic": ("#",), "direct": SEVERITIES}


def binding_keys(exchange_type: str | None) -> tuple[str, ...]:
    return _KEYS_BY_TYPE.get(exchange_type or "", BINDING_KEYS)


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
    body: bytes,
    routing_key: str,
    exchange: str,
    redelivered: bool,
    props: Any,
    seq: int,
    arrival_ms: int | None = None,
) -> bytes:
    """One delivery as the JSON the browser gets: the record as every reader reads it
    (:func:`leveret.logs.reading.read`: a record, a broker event, plain text, or a malformed
    body kept whole as ``_corrupt``) and the message's own fields. ``arrival_ms``: the
    broker's arrival time when the tap knows it (a stream chunk's, for the history)."""
    content_type = getattr(props, "content_type", None)
    stamp: Any = getattr(props, "timestamp", None)
    epoch = int(stamp.timestamp()) if stamp is not None and hasattr(stamp, "timestamp") else None
    headers = getattr(props, "headers", None)
    envelope = Envelope(routing_key, exchange, content_type, headers, epoch, arrival_ms)
    doc: dict[str, Any] = read(body, envelope).to_dict()
    cut = False
    for key in ("message", "exc", "_corrupt"):
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
    doc["_plain"] = not (
        exchange == BROKER_EVENT_EXCHANGE or content_type == "application/json" or body[:1] == b"{"
    )
    return json.dumps(doc, ensure_ascii=False, separators=(",", ":"), default=str).encode()


@dataclass(frozen=True, slots=True)
class History:
    """The stream a view opens with: its name, the offsets it holds (first, end) and the
    broker's arrival time of the chunk that holds an offset (ms), what the lake reads as
    a record's time when the message carries none."""

    stream: str
    first: int
    end: int
    arrival_ms: Callable[[int], int | None]


def _arrival(queue: StreamQueue) -> Callable[[int], int | None]:
    def arrival(offset: int) -> int | None:
        ref = queue.chunk_at(offset)
        return None if ref is None or ref.first > offset else int(ref.timestamp)

    return arrival


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
        history: Callable[[], History | None] | None = None,
        dropped: Callable[[str], int] | None = None,
        exchange_type: Callable[[], str | None] | None = None,
    ) -> None:
        self.url = url
        # the exchange's type, as the broker has it now (None: unknown)
        self._exchange_type = exchange_type or (lambda: None)
        # how many records the broker dropped from the head of the tap's queue
        self._dropped_in = dropped or (lambda queue: 0)
        # the stream bound to the exchange, if any
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
        self.broker_dropped = 0  # dropped from the tap's queues, all connections
        self._dropped_before = 0  # of the queues of connections gone
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

    def _count_dropped(self) -> None:
        """What the broker dropped from the head of the tap's queue since the last look."""
        if self.queue is None:
            return
        total = self._dropped_before + self._dropped_in(self.queue)
        if total > self.broker_dropped:
            self._count_live("unseen", total - self.broker_dropped)
            self.broker_dropped = total

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
            ch = await conn.channel()
            # the queue first, bound the moment the exchange is declared (LogsView.bind_new):
            # the record published with the declaration is the view's too
            ok = await ch.queue_declare(
                "", exclusive=True, auto_delete=True, arguments={"x-max-length": QUEUE_LIMIT}
            )
            queue = ok.queue
            assert queue is not None
            self.queue = queue
            await ch.basic_qos(prefetch_count=PREFETCH)
            self._last_tag = self._acked_tag = 0
            consuming = False
            while not self._closing.is_set():
                if not await self._wait_for_exchange(conn):
                    return
                for key in binding_keys(self._exchange_type()):
                    await ch.queue_bind(queue, self.exchange, routing_key=key)
                if not self._history_taken:
                    # after the bind: what is published from now on is in the tap's queue
                    self._history_taken = True
                    await self._take_history(conn)
                if not consuming:
                    await ch.basic_consume(queue, self._on_message, no_ack=False)
                    consuming = True
                self._set_status("live", None)
                await self._live(ch, queue)
        finally:
            if self.queue is not None:
                self._count_dropped()
                self._dropped_before = self.broker_dropped
            self.queue = None
            with contextlib.suppress(Exception):
                await asyncio.wait_for(conn.close(), 5)

    async def _live(self, ch: aiormq.abc.AbstractChannel, queue: str) -> None:
        """Ack what was shown and count what the queue dropped, each interval, until the
        tap closes or its exchange is deleted (its queue, and the consumer, stay: the view
        binds it again the moment the exchange is declared again)."""
        checked = time.monotonic()
        while not self._closing.is_set():
            if ch.is_closed:
                closing = ch.closing
                raise ConnectionError(describe(closing.exception()))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._closing.wait(), ACK_INTERVAL)
            if self._closing.is_set():
                return
            self._count_dropped()
            if self._last_tag > self._acked_tag:
                tag = self._last_tag
                await ch.basic_ack(tag, multiple=True)
                self._acked_tag = tag
            if time.monotonic() - checked >= EXCHANGE_CHECK:
                checked = time.monotonic()
                if not await self._exchange_exists(ch.connection):
                    self._set_status(
                        "waiting", f"exchange '{self.exchange}' in vhost '{self.vhost}' was deleted"
                    )
                    return

    async def _wait_for_exchange(self, conn: aiormq.abc.AbstractConnection) -> bool:
        """Until the exchange exists, check every second; False when the tap closes."""
        while not self._closing.is_set():
            if await self._exchange_exists(conn):
                return True
            if self.status != "waiting" or "was deleted" not in str(self.error):
                self._set_status(
                    "waiting", f"no exchange '{self.exchange}' in vhost '{self.vhost}' yet"
                )
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._closing.wait(), 1.0)
        return False

    async def _exchange_exists(self, conn: aiormq.abc.AbstractConnection) -> bool:
        """A passive declare on a channel of its own (a refusal closes that channel, not
        the one the tap consumes on)."""
        import aiormq

        ch = await conn.channel()
        try:
            await ch.exchange_declare(self.exchange, passive=True)
        except aiormq.exceptions.ChannelNotFoundEntity:
            return False
        with contextlib.suppress(Exception):
            await ch.close()
        return True

    async def _take_history(self, conn: aiormq.abc.AbstractConnection) -> None:
        """The last ``HISTORY`` records of the stream bound to the exchange, read once on a
        channel of their own (a user who may not read the stream just gets none)."""
        source = self._history_source() if self._history_source is not None else None
        if source is None:
            return
        stream, first, end = source.stream, source.first, source.end
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
            self._show(message, count=False, arrival_ms=source.arrival_ms(offset))

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

    def _show(
        self, message: aiormq.abc.DeliveredMessage, count: bool, arrival_ms: int | None = None
    ) -> None:
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
                arrival_ms,
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
        management.broker.observers.subscribe(self._observe)

    def _observe(self, event: BrokerEvent) -> None:
        if isinstance(event, ExchangeCreated) and self.taps:
            self.bind_new(event.exchange.vhost, event.exchange.name)

    def bind_new(self, vhost_name: str, exchange: str) -> None:
        """Bind the waiting taps' queues to an exchange as it is declared, before the
        declaring client can publish to it (the broker tells its observers while it
        handles the declaration): a view open before ``emit-log`` declared ``logs`` shows
        the record ``emit-log`` publishes right after. As the user of each tap, with the
        rights they have (what they may not bind, the tap's own bind refuses later)."""
        broker = self.management.broker
        vhost = broker.vhosts.get(vhost_name)
        x = vhost.exchanges.get(exchange) if vhost is not None else None
        if vhost is None or x is None:
            return
        for tap in list(self.taps.values()):
            queue = vhost.queues.get(tap.queue or "")
            if tap.vhost != vhost_name or tap.exchange != exchange or queue is None:
                continue
            actor = Actor(
                tap.username,
                broker.users.permission(tap.username, vhost_name),
                connection=queue.exclusive_owner,
            )
            who = API_ACTOR.set(tap.username)  # the bindings' events name the tap's user
            try:
                for key in binding_keys(x.type_name):
                    request = BindingRequest(exchange, "queue", queue.name, key)
                    operations.bind(vhost, actor, request)
            except AMQPError as exc:
                log.debug("logs view: cannot bind %s to %s: %s", queue.name, exchange, exc)
            finally:
                API_ACTOR.reset(who)

    def exchange_type(self, vhost_name: str, exchange: str) -> str | None:
        vhost = self.management.broker.vhosts.get(vhost_name)
        x = vhost.exchanges.get(exchange) if vhost is not None else None
        return x.type_name if x is not None else None

    def dropped(self, vhost_name: str, queue_name: str) -> int:
        """How many records the broker dropped from the head of a tap's queue."""
        vhost = self.management.broker.vhosts.get(vhost_name)
        queue = vhost.queues.get(queue_name) if vhost is not None else None
        return queue.dropped_head if isinstance(queue, ClassicQueue) else 0

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
                lambda queue: self.dropped(vhost, queue),
                lambda: self.exchange_type(vhost, exchange),
            )
            self.taps[key] = tap
            tap.start()
        else:
            tap.url = url  # the password the user logged in with last
        return tap

    def history_source(self, vhost: str, exchange: str) -> History | None:
        """The stream queue bound to ``exchange`` that a view opens with: ``logs`` when it
        is bound there, else the first by name."""
        v = self.management.broker.vhosts.get(vhost)
        x = v.exchanges.get(exchange) if v is not None else None
        if v is None or x is None:
            return None
        bound = {b.destination.name for b in x.bindings.values() if b.destination.kind == "queue"}
        for name in sorted(bound, key=lambda n: (n != HISTORY_STREAM, n)):
            q = v.queues.get(name)
            if isinstance(q, StreamQueue):
                return History(name, int(q.log.first), int(q.log.next_offset), _arrival(q))
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
