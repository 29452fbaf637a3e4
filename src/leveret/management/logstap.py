"""The dashboard Logs view's tap: one AMQP client of the broker's own AMQP port (aiormq over
a socket, in the broker's event loop), logged in as the dashboard's user, consuming a logs
exchange for every page of that user on it (see :mod:`leveret.management.logsview` for why
it can never slow the broker)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from leveret.logs.record import SEVERITIES
from leveret.management.logsfeed import Ring, Subscriber, record_of, severity_of

if TYPE_CHECKING:
    import aiormq.abc

log = logging.getLogger(__name__)

QUEUE_LIMIT = 1000
PREFETCH = 50
ACK_INTERVAL = 0.25
MAX_RATE = int(PREFETCH / ACK_INTERVAL)
RECENT = 500
RECENT_BYTES = 2 * 1024 * 1024
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


@dataclass(frozen=True, slots=True)
class History:
    """The stream a view opens with: its name, the offsets it holds (first, end) and the
    broker's arrival time of the chunk that holds an offset (ms), what the lake reads as
    a record's time when the message carries none."""

    stream: str
    first: int
    end: int
    arrival_ms: Callable[[int], int | None]


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
            self._count_live(severity_of(record))
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
