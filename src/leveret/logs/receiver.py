"""Receiving records: declare the exchange and a queue, bind it, and hand each delivery to
a sink, acking only what the sink has flushed.

Acks are batched: ``basic_ack(tag, multiple=True)`` after each flush, which happens every
``prefetch // 2`` records and whenever the queue goes quiet. With ``queue`` and ``durable``
a named durable queue keeps records while the receiver is away, and a lost connection is
retried with backoff (on the next node, given a cluster's URLs). A record written whose
ack did not reach the broker before a connection died comes back redelivered, and a log
handler whose node died before confirming a record publishes it again; such a copy is
recognised by its message id (the ids of the latest records written are remembered) and is
not written twice.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pika
import pika.exceptions

from leveret.logs.amqp import ExchangeType, LogsError, describe, parameters, split_urls
from leveret.logs.reading import Envelope, read
from leveret.logs.record import SEVERITIES
from leveret.logs.sinks import Sink

# How long a quiet queue waits before the sink is flushed and the batch acked.
_QUIET = 0.05
# A busy queue is flushed and acked at least this often (seconds) ...
_MAX_DELAY = 0.25


@dataclass(frozen=True, slots=True)
class Subscription:
    """What to receive and through which queue. ``url`` may name several brokers (the
    nodes of a cluster): a lost connection is retried on the next one."""

    url: str | tuple[str, ...]
    exchange: str
    exchange_type: str = ExchangeType.fanout
    binding_keys: tuple[str, ...] = ()
    queue: str | None = None
    durable: bool = False
    durable_exchange: bool = False
    prefetch: int = 1000
    queue_type: str | None = None  # x-queue-type of a named queue: classic, quorum

    @property
    def urls(self) -> list[str]:
        return split_urls(self.url)

    def bindings(self) -> tuple[str, ...]:
        """The binding keys to use: given ones, or everything the exchange type routes."""
        if self.exchange_type == ExchangeType.fanout:
            return ("",)
        if self.binding_keys:
            return self.binding_keys
        return SEVERITIES if self.exchange_type == ExchangeType.direct else ("#",)


class _Lost(Exception):
    """The connection went away while consuming."""

    def __init__(self, error: LogsError) -> None:
        super().__init__(str(error))
        self.error = error


def receive(
    sub: Subscription,
    sink: Sink,
    *,
    on_ready: Callable[[str], None] | None = None,
    on_lost: Callable[[LogsError, float], None] | None = None,
    stop: threading.Event | None = None,
) -> int:
    """Consume until ``stop`` is set or KeyboardInterrupt; return how many records were
    written. The first connection failing raises LogsError; later transient failures are
    retried with backoff (reported through ``on_lost``). OSError from the sink propagates:
    what it could not write is not acked."""
    urls = sub.urls
    params = [parameters(u) for u in urls]
    nodes = len(urls)
    state = _State(sub, sink)
    attempts = 0
    index = 0
    while True:
        url = urls[index]
        try:
            conn = pika.BlockingConnection(params[index])
        except Exception as exc:
            err = describe(exc, url)
            if not err.transient or (not state.connected_once and attempts + 1 >= nodes):
                raise err from None
            index = (index + 1) % nodes
            # the other nodes at once, then the whole list again with backoff
            delay = 0.0 if attempts + 1 < nodes else _backoff(attempts // nodes)
            attempts += 1
            if on_lost is not None and delay:
                on_lost(err, delay)
            _sleep(delay, stop)
            if stop is not None and stop.is_set():
                return state.written
            continue
        state.url = url
        try:
            queue = state.subscribe(conn)
            attempts = 0
            if on_ready is not None:
                on_ready(queue)
            state.consume(conn, queue, stop)
            state.finish(conn)
            return state.written
        except KeyboardInterrupt:
            state.finish(conn)
            raise
        except _Lost as lost:
            state.lost()
            err = lost.error
        except OSError:
            _close(conn)  # the sink failed (a full disk): what it lost is not acked
            raise
        except Exception as exc:
            state.lost()
            _close(conn)
            err = describe(exc, url)
            if not err.transient:
                raise err from None
        if not err.transient:
            raise err
        index = (index + 1) % nodes  # another node of the cluster, if there is one
        delay = 0.0 if nodes > 1 and attempts < nodes else _backoff(attempts // nodes)
        attempts += 1
        if on_lost is not None:
            on_lost(err, delay)
        _sleep(delay, stop)
        if stop is not None and stop.is_set():
            return state.written


class _State:
    """What survives a reconnect: the sink, the count, and the ids written but not acked."""

    def __init__(self, sub: Subscription, sink: Sink) -> None:
        self.sub = sub
        self.sink = sink
        self.url = sub.urls[0]  # the node in use
        self.written = 0
        self.connected_once = False
        self.channel: Any = None
        self.pending_tag = 0
        self.pending = 0
        # Ids of the latest records written. An ack has no reply: one sent just before a
        # connection died may never have been processed, so a redelivered record may
        # already be in the sink even though it was acked.
        self.recent: deque[str] = deque()
        self.recent_ids: set[str] = set()
        self.remember = max(10_000, 4 * sub.prefetch)

    def subscribe(self, conn: Any) -> str:
        sub = self.sub
        ch = conn.channel()
        ch.exchange_declare(
            exchange=sub.exchange, exchange_type=str(sub.exchange_type),
            durable=sub.durable_exchange,
        )  # fmt: skip
        if sub.queue:
            queue = sub.queue
            arguments = {"x-queue-type": sub.queue_type} if sub.queue_type else None
            ch.queue_declare(queue=queue, durable=sub.durable, arguments=arguments)
        else:
            queue = ch.queue_declare(queue="", exclusive=True).method.queue
        for key in sub.bindings():
            ch.queue_bind(queue=queue, exchange=sub.exchange, routing_key=key)
        ch.basic_qos(prefetch_count=sub.prefetch)
        self.channel = ch
        self.pending_tag = self.pending = 0
        self.connected_once = True
        return queue

    def consume(self, conn: Any, queue: str, stop: threading.Event | None) -> None:
        ch = self.channel
        batch = max(1, self.sub.prefetch // 2)
        last_flush = time.monotonic()
        try:
            for method, props, body in ch.consume(queue, inactivity_timeout=_QUIET):
                if method is None:
                    if self.pending:
                        self.flush_and_ack()
                    last_flush = time.monotonic()
                    if stop is not None and stop.is_set():
                        return
                    continue
                message_id = props.message_id
                # a copy of a record already written: redelivered after a lost ack, or
                # published again by a handler whose node went away before confirming it
                if message_id is None or message_id not in self.recent_ids:
                    envelope = Envelope(
                        routing_key=method.routing_key,
                        exchange=method.exchange,
                        content_type=props.content_type,
                        headers=props.headers,
                        timestamp=props.timestamp,
                    )
                    self.sink.write(read(body, envelope))
                    self.written += 1
                    if message_id:
                        self.recent.append(message_id)
                        self.recent_ids.add(message_id)
                        if len(self.recent) > self.remember:
                            self.recent_ids.discard(self.recent.popleft())
                self.pending_tag = method.delivery_tag
                self.pending += 1
                if self.pending >= batch or time.monotonic() - last_flush > _MAX_DELAY:
                    self.flush_and_ack()
                    last_flush = time.monotonic()
        except pika.exceptions.AMQPConnectionError as exc:
            raise _Lost(describe(exc, self.url)) from None
        except pika.exceptions.ChannelClosedByBroker as exc:
            raise LogsError(exc.reply_text, transient=exc.reply_code == 320) from None
        # the generator ends when the broker cancels the consumer (the queue was deleted)
        raise _Lost(LogsError(f"the broker cancelled the subscription to queue {queue!r}",
                              transient=bool(self.sub.queue)))  # fmt: skip

    def flush_and_ack(self) -> None:
        self.sink.flush()  # OSError (a full disk) propagates: nothing of it is acked
        self.channel.basic_ack(self.pending_tag, multiple=True)
        self.pending = 0

    def finish(self, conn: Any) -> None:
        """A clean stop: flush, ack what was written, close the connection (an exclusive
        queue goes with it)."""
        try:
            self.sink.flush()
            if self.pending and self.channel is not None and conn.is_open:
                # if this fails, the records go back to a durable queue and come again
                with contextlib.suppress(Exception):
                    self.channel.basic_ack(self.pending_tag, multiple=True)
                self.pending = 0
        finally:
            _close(conn)

    def lost(self) -> None:
        # What was written will come back redelivered and is recognised then; flush so
        # that it is written for good.
        self.sink.flush()
        self.pending = 0
        self.channel = None


def _close(conn: Any) -> None:
    with contextlib.suppress(Exception):
        if conn.is_open:
            conn.close()


def _backoff(attempts: int) -> float:
    return float(min(10.0, 0.2 * 2 ** min(attempts, 10)))


def _sleep(seconds: float, stop: threading.Event | None) -> None:
    if stop is not None:
        stop.wait(seconds)
    else:
        time.sleep(seconds)
