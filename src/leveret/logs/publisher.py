"""A publisher with confirms that runs on a thread of its own.

Callers ``put`` encoded records into a bounded buffer and go on; a background thread owns
one pika ``SelectConnection`` and publishes from the buffer with publisher confirms, keeping
a window of unconfirmed records in flight. The same engine serves both producers:

- ``emit-log`` blocks in ``put`` while the buffer is full (back-pressure: nothing is lost)
  and treats a lost connection as the end;
- the logging handler must never block: when the buffer is full the oldest record is
  dropped and counted, and a lost connection is retried with exponential backoff. Records
  in flight when a connection dies go back to the front of the buffer and are sent again.

Given several URLs (the nodes of a cluster), a lost connection moves on to the next one.
The handler sends its records in flight again there (at-least-once: a receiver drops the
copy by message id). ``emit-log`` does not: the node that went away may or may not have
stored them, so they are counted as ``unconfirmed`` and the rest of the input goes on
through the next node; every record it reports confirmed is in the broker exactly once.

To a super stream (``super_stream``, see :mod:`leveret.logs.superstream`), the exchange is
the super stream's, which must exist (it is checked with a passive declare, never
declared), and every record goes with the binding key of the one partition the route
picks, found again on each connection before it opens.

Threading: the buffer and the counters are guarded by ``_lock``; everything pika touches
runs on the I/O thread, which callers reach only through ``add_callback_threadsafe``.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import os
import threading
import time
import uuid
from collections import OrderedDict, deque
from dataclasses import dataclass
from typing import Any, Literal

import pika
import pika.spec
from pika.adapters.select_connection import IOLoop

from leveret.logs.amqp import (
    ExchangeType,
    LogsError,
    Urls,
    describe,
    parameters,
    redact,
    shown,
    split_urls,
)
from leveret.logs.record import CONTENT_TYPE
from leveret.logs.superstream import SuperStreamRoute

Overflow = Literal["block", "drop-oldest"]

# The longest stretch (seconds) the I/O thread publishes before it returns to the ioloop,
# where select() releases the GIL to the application's threads.
_SLICE = 0.0005

# (routing key, body, persistent, message id)
_Item = tuple[str, bytes, bool, str]


@dataclass(frozen=True, slots=True)
class PublisherStats:
    """Counters since the publisher was made. ``confirmed`` records are the broker's."""

    accepted: int
    confirmed: int
    nacked: int
    dropped: int
    buffered: int
    in_flight: int
    connected: bool
    reconnects: int
    last_error: str | None
    unconfirmed: int = 0  # in flight on a node that went away, not sent again
    node: str | None = None  # the URL it is connected to (password hidden), if it is


class Publisher:
    """Publishes records to one exchange from a background thread, with confirms."""

    def __init__(
        self,
        url: Urls,
        exchange: str,
        exchange_type: str = ExchangeType.fanout,
        *,
        durable_exchange: bool = False,
        capacity: int = 100_000,
        overflow: Overflow = "block",
        reconnect: bool = True,
        max_in_flight: int = 2_000,
        chunk: int = 50,
        backoff_max: float = 30.0,
        name: str = "leveret-logs-publisher",
        super_stream: SuperStreamRoute | None = None,
    ) -> None:
        if capacity < 1 or max_in_flight < 1 or chunk < 1:
            raise ValueError("capacity, max_in_flight and chunk must be positive")
        self.urls = split_urls(url)  # LogsError for a bad URL, before any thread starts
        self.url = self.urls[0]  # the node in use
        self.exchange = exchange
        self.exchange_type = str(exchange_type)
        self.durable_exchange = durable_exchange
        self.super_stream = super_stream
        self._partition_key: str | None = None  # the routing key to the super stream's partition
        self._partition_cluster: str | None = None  # whose management API told it
        self._params = [parameters(u) for u in self.urls]
        self._index = 0
        self._capacity = capacity
        self._overflow = overflow
        self._reconnect = reconnect
        self._max_in_flight = max_in_flight
        self._chunk = chunk
        self._backoff_max = backoff_max

        self._lock = threading.Lock()
        self._space = threading.Condition(self._lock)  # a blocked put waits for room
        self._settled = threading.Condition(self._lock)  # flush waits for confirms
        self._buf: deque[_Item] = deque()
        self._idle = False  # the I/O thread waits for a wake-up on the next put
        self._accepted = 0
        self._confirmed = 0
        self._nacked = 0
        self._dropped = 0
        self._unconfirmed = 0
        self._error: LogsError | None = None  # fatal: the publisher has stopped
        self._last_error: LogsError | None = None
        self._stopped = False
        self._ready = threading.Event()  # first outcome: connected, or failed for good

        # message ids let a receiver drop the copy it already wrote when a record is
        # redelivered after a connection loss
        self._id_prefix = f"{uuid.uuid4().hex[:12]}-{os.getpid()}-"
        self._ids = itertools.count(1)

        # I/O thread state
        self._ioloop = IOLoop()
        self._conn: Any = None
        self._channel: Any = None
        self._connected = False
        self._closing = False
        self._tag = 0
        self._in_flight: OrderedDict[int, _Item] = OrderedDict()
        self._attempts = 0
        self._reconnects = 0
        self._ever_connected = False
        self._retry_timer: Any = None
        self._drain_timer: Any = None
        self._channel_error: LogsError | None = None
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    # ------------------------------------------------------------------ caller side

    @property
    def thread_id(self) -> int | None:
        """The I/O thread's ident, so a logging handler can ignore its own thread."""
        return self._thread.ident

    def start(self, wait: float | None = None) -> None:
        """Start the I/O thread. With ``wait``, return once connected, and raise LogsError
        if the first connection fails for good (or does not succeed within ``wait``)."""
        self._thread.start()
        if wait is None:
            return
        if not self._ready.wait(wait):
            self.close(0)
            raise LogsError(f"cannot connect to {self._shown()}: timed out")
        if self._error is not None:
            self._thread.join(5)
            raise self._error

    def put(self, routing_key: str, body: bytes, persistent: bool = False) -> None:
        """Queue one record. In ``block`` mode, wait for room; raise LogsError once the
        publisher has failed for good. In ``drop-oldest`` mode, never wait."""
        item = (routing_key, body, persistent, f"{self._id_prefix}{next(self._ids)}")
        with self._lock:
            if self._error is not None:
                raise self._error
            if len(self._buf) >= self._capacity:
                if self._overflow == "drop-oldest":
                    self._buf.popleft()
                    self._dropped += 1
                else:
                    while len(self._buf) >= self._capacity and self._error is None:
                        self._space.wait(1.0)
                    if self._error is not None:
                        raise self._error
            self._buf.append(item)
            self._accepted += 1
            wake = self._idle
            self._idle = False
        if wake:
            self._ioloop.add_callback_threadsafe(self._drain)

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every record put so far is confirmed, nacked or dropped. False on
        timeout or when the publisher has failed."""
        with self._lock:
            target = self._accepted
            return self._settled.wait_for(
                lambda: (
                    self._error is not None
                    or self._confirmed + self._nacked + self._dropped + self._unconfirmed >= target
                ),
                timeout,
            ) and (self._error is None)

    def close(self, timeout: float | None = None) -> bool:
        """Flush (up to ``timeout``), close the connection and stop the thread. True when
        everything put was settled."""
        started = self._thread.ident is not None
        done = self.flush(timeout) if started else self._accepted == 0
        with self._lock:
            if self._stopped:
                return done
            self._stopped = True
        if started:
            self._ioloop.add_callback_threadsafe(self._shutdown)
            self._thread.join(10 if timeout is None else max(timeout, 1.0))
        return done

    @property
    def error(self) -> LogsError | None:
        """The failure that stopped the publisher, if one did."""
        return self._error

    @property
    def stats(self) -> PublisherStats:
        with self._lock:
            return PublisherStats(
                accepted=self._accepted,
                confirmed=self._confirmed,
                nacked=self._nacked,
                dropped=self._dropped,
                buffered=len(self._buf),
                in_flight=len(self._in_flight),
                connected=self._connected,
                reconnects=self._reconnects,
                last_error=str(self._last_error) if self._last_error else None,
                unconfirmed=self._unconfirmed,
                node=redact(self.url) if self._connected else None,
            )

    def _shown(self) -> str:
        return shown(self.urls)

    # ------------------------------------------------------------------ I/O thread

    def _run(self) -> None:
        try:
            self._connect()
            self._ioloop.start()
        except BaseException as exc:  # never leave a caller waiting on a dead thread
            self._fail(LogsError(f"log publisher stopped: {exc!r}"))
        finally:
            self._ready.set()
            with contextlib.suppress(Exception):
                self._ioloop.close()

    def _connect(self) -> None:
        self._retry_timer = None
        if self._closing:
            self._ioloop.stop()
            return
        self._channel_error = None
        self.url = self.urls[self._index]
        if self.super_stream is not None:
            # the partition, before the connection (a blocking HTTP request: this thread
            # has nothing else to do until it is connected)
            try:
                self._partition_key, self._partition_cluster = self.super_stream.binding_key(
                    self.url, self.exchange
                )
            except LogsError as exc:
                # as a failed connection, from the loop (this may run before it starts)
                self._retry_timer = self._ioloop.call_later(0, functools.partial(self._lost, exc))
                return
        self._conn = pika.SelectConnection(
            self._params[self._index],
            on_open_callback=self._on_open,
            on_open_error_callback=self._on_open_error,
            on_close_callback=self._on_closed,
            custom_ioloop=self._ioloop,
        )

    def _on_open(self, conn: Any) -> None:
        theirs = self._partition_cluster
        if theirs is not None:
            # the management API must be this broker's (another one may answer on the
            # default port of the same host): both name the same cluster
            props = getattr(conn, "server_properties", None) or {}
            mine = props.get("cluster_name")
            mine = mine.decode() if isinstance(mine, bytes) else mine
            if mine is not None and mine != theirs:
                self._channel_error = LogsError(
                    f"the management API the partitions of super stream {self.exchange!r} "
                    f"were read from belongs to cluster {theirs!r}, not to {mine!r} at "
                    f"{shown([self.url])}: give the broker's with --management-url"
                )
                conn.close()
                return
        conn.channel(on_open_callback=self._on_channel_open)

    def _on_channel_open(self, channel: Any) -> None:
        self._channel = channel
        channel.add_on_close_callback(self._on_channel_closed)
        channel.exchange_declare(
            exchange=self.exchange,
            exchange_type=self.exchange_type,
            durable=self.durable_exchange,
            # a super stream is made with its partitions (declare_super_stream), never here
            passive=self.super_stream is not None,
            callback=lambda _frame: channel.confirm_delivery(
                ack_nack_callback=self._on_confirm, callback=lambda _f: self._on_ready()
            ),
        )

    def _on_ready(self) -> None:
        self._tag = 0
        self._connected = True
        if self._ever_connected:
            self._reconnects += 1
        self._ever_connected = True
        self._attempts = 0
        self._ready.set()
        self._drain()

    def _on_channel_closed(self, channel: Any, reason: BaseException) -> None:
        self._channel = None
        if self._closing:
            return
        # a channel error (406 on declare, 404, ...) ends this connection: start over
        self._channel_error = describe(reason, self.url)
        conn = self._conn
        if conn is not None and conn.is_open:
            conn.close()

    def _on_open_error(self, conn: Any, exc: BaseException) -> None:
        self._lost(describe(exc, self.url))

    def _on_closed(self, conn: Any, reason: BaseException) -> None:
        self._lost(self._channel_error or describe(reason, self.url))

    def _lost(self, err: LogsError) -> None:
        self._conn = None
        self._channel = None
        self._connected = False
        failover = len(self._params) > 1
        with self._lock:
            if not self._closing:
                self._last_error = err
            if self._in_flight and self._reconnect:
                # what was in flight goes back to the front, in order, to be sent again
                self._buf.extendleft(reversed(self._in_flight.values()))
                self._in_flight.clear()
                if self._overflow == "drop-oldest":
                    while len(self._buf) > self._capacity:
                        self._buf.popleft()
                        self._dropped += 1
                    self._settled.notify_all()
            elif self._in_flight and failover:
                # whether the node that went away stored them is unknown: not sent again
                # (that could store them twice), counted as unconfirmed
                self._unconfirmed += len(self._in_flight)
                self._in_flight.clear()
                self._settled.notify_all()
        if self._closing:
            self._ioloop.stop()
            return
        if not self._reconnect and (not failover or self._attempts + 1 >= 2 * len(self._params)):
            # one broker, or every node of the list failed twice in a row
            self._fail(err if not failover else LogsError(f"{err} (and every other node)"))
            self._ioloop.stop()
            return
        self._index = (self._index + 1) % len(self._params)
        if self._reconnect:
            delay = min(self._backoff_max, 0.1 * 2 ** min(self._attempts // len(self._params), 20))
        else:
            delay = 0.0 if self._attempts < len(self._params) else 0.5
        self._attempts += 1
        self._retry_timer = self._ioloop.call_later(delay, self._connect)

    def _fail(self, err: LogsError) -> None:
        with self._lock:
            self._error = err
            self._last_error = err
            self._space.notify_all()
            self._settled.notify_all()
        self._ready.set()

    def _drain(self) -> None:
        channel = self._channel
        if not self._connected or channel is None:
            return  # _on_ready drains once connected
        room = self._max_in_flight - len(self._in_flight)
        if room <= 0:
            return  # _on_confirm drains when the window opens
        with self._lock:
            n = min(room, self._chunk, len(self._buf))
            items = [self._buf.popleft() for _ in range(n)]
            more = bool(self._buf)
            if not more:
                self._idle = True
            if n:
                self._space.notify_all()
        persistent = pika.spec.PERSISTENT_DELIVERY_MODE
        transient = pika.spec.TRANSIENT_DELIVERY_MODE
        deadline = time.perf_counter() + _SLICE
        fixed = self._partition_key
        for i, item in enumerate(items):
            key, body, durable, message_id = item
            if fixed is not None:
                key = fixed
            self._tag += 1
            self._in_flight[self._tag] = item
            channel.basic_publish(
                self.exchange,
                key,
                body,
                pika.BasicProperties(
                    content_type=CONTENT_TYPE,
                    delivery_mode=persistent if durable else transient,
                    message_id=message_id,
                ),
            )
            if time.perf_counter() > deadline and i + 1 < len(items):
                # Hand the rest back: the application's threads wait for the GIL while
                # this one holds it, so the I/O thread works in short slices.
                rest = items[i + 1 :]
                with self._lock:
                    self._buf.extendleft(reversed(rest))
                    self._idle = False
                more = True
                break
        if more and len(self._in_flight) < self._max_in_flight:
            self._schedule_drain()

    def _schedule_drain(self) -> None:
        # Back to the ioloop between slices, so frames go out, confirms come in, and the
        # GIL is released in select() (idling there longer between slices measured worse
        # for the application's latency, not better). One pending drain at a time.
        if self._drain_timer is None:
            self._drain_timer = self._ioloop.call_later(0, self._scheduled_drain)

    def _scheduled_drain(self) -> None:
        self._drain_timer = None
        self._drain()

    def _on_confirm(self, frame: Any) -> None:
        method = frame.method
        tag: int = method.delivery_tag
        ack = isinstance(method, pika.spec.Basic.Ack)
        settled = 0
        if method.multiple:
            while self._in_flight:
                first = next(iter(self._in_flight))
                if first > tag:
                    break
                self._in_flight.popitem(last=False)
                settled += 1
        elif self._in_flight.pop(tag, None) is not None:
            settled = 1
        with self._lock:
            if ack:
                self._confirmed += settled
            else:
                self._nacked += settled
            self._settled.notify_all()
            pending = not self._idle
        if pending:
            self._schedule_drain()

    def _shutdown(self) -> None:
        self._closing = True
        if self._retry_timer is not None:
            self._ioloop.remove_timeout(self._retry_timer)
            self._retry_timer = None
        conn = self._conn
        if conn is not None and not (conn.is_closing or conn.is_closed):
            try:
                conn.close()
                return  # _on_closed stops the loop
            except Exception:
                pass
        self._ioloop.stop()
