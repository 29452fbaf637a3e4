"""The AMQP side of ``format("amqp")``: connecting with plain errors, finding a stream's
ends, and publishing with confirms, with pika. The read of a stream's offset range, the hot
path, is :mod:`leveret.spark.reader` on a consumer of its own (pika was measured as that
read's bound).

Every function opens its own connection and closes it before returning: nothing here is
kept in an object Spark pickles.

Finding the ends of a stream
----------------------------
RabbitMQ 3.10.8 has no AMQP 0-9-1 method that tells a stream's offsets: ``queue.declare-ok``
always says 0 messages. So:

- **the tail** (the offset the next message will get): a *passive* declare with the
  argument ``x-stream-offsets``. Leveret (its ``connection.start`` says ``product:
  Leveret``) answers with the committed end in ``message_count``. RabbitMQ ignores the
  argument, and the count it reports for a stream is not the end (it lags by seconds and
  counts more than the messages), so there the tail is found by consuming from
  ``x-stream-offset: last``, which starts at the first message of the last
  committed chunk: the highest offset delivered until the consumer goes quiet, plus one, is
  the tail. Nothing arriving within the probe time means an empty stream. Anything below
  the true tail is a safe answer (the rest comes in the next batch), so the probe stops at a
  deadline even while publishers keep appending.
- **the head** (the first offset still stored, which retention moves): the first offset
  delivered to a consumer at ``x-stream-offset: first``.
- **an offset for a time**: the first offset delivered to a consumer at
  ``x-stream-offset: <timestamp>``.

Consumers on a stream are never cancelled through pika's ``basic_cancel`` or channel close:
pika rejects the deliveries it still buffers, and brokers answer a reject on a stream with
540 NOT_IMPLEMENTED. They are dropped by closing the connection instead.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import pika
import pika.exceptions

from leveret.logs.amqp import LogsError, describe, parameters, redact, split_urls

log = logging.getLogger(__name__)

#: Leveret's extension argument: a passive declare of a stream with it reports the end.
END_EXTENSION_ARG = "x-stream-offsets"

_CONNECT_TIMEOUT = 10.0


class AmqpSourceError(RuntimeError):
    """A failure of the amqp data source, worded for a person. ``transient`` ones (the
    broker went away) may pass on a retry."""

    def __init__(self, message: str, *, transient: bool = False) -> None:
        super().__init__(message)
        self.transient = transient


@dataclass
class RangeProgress:
    """How a read of an offset range is getting on: when it last got a message and how
    often it has retried since. A read that gets nothing for ``stall_timeout`` seconds
    fails; until then a transient error is retried after a growing pause (a broker
    restart during a read costs time, not data). Offsets below the stream's head, dropped
    by retention before they were read, are data loss."""

    stream: str
    shown: str  # the broker, as errors name it
    start: int
    end: int
    stall_timeout: float
    fail_on_data_loss: bool
    log: logging.Logger
    last: float = field(default_factory=time.monotonic)  # when a message last came
    attempt: int = 0  # retries since

    def moved(self) -> None:
        """A message came."""
        self.last = time.monotonic()
        self.attempt = 0

    def stalled(self) -> bool:
        return time.monotonic() - self.last > self.stall_timeout

    def check(self, next_offset: int) -> None:
        """Nothing came this time: the read fails once it has stalled."""
        if self.stalled():
            raise AmqpSourceError(
                f"stream {self.stream!r} on {self.shown}: no message at offset "
                f"{next_offset} within {self.stall_timeout:g}s (range {self.start}..{self.end})"
            )

    def retry(self, exc: AmqpSourceError, next_offset: int) -> bool:
        """Whether to read again from ``next_offset`` after ``exc`` (having paused); False:
        the read fails with it."""
        if not exc.transient or self.stalled():
            return False
        self.attempt += 1
        self.log.warning("stream %r: %s; retrying from offset %d", self.stream, exc, next_offset)
        time.sleep(min(0.2 * 2**self.attempt, 5.0))
        return True

    def lost(self, wanted: int, got: int) -> None:
        """The first offset read is ``got``, past the ``wanted`` one: retention dropped
        those between. An error, or a warning without ``fail_on_data_loss``."""
        text = (
            f"stream {self.stream!r}: offsets {wanted}..{got - 1} are no longer stored "
            "(retention dropped them before they were read)"
        )
        if self.fail_on_data_loss:
            raise AmqpSourceError(text + "; set failOnDataLoss=false to skip them")
        self.log.warning("%s; skipping them", text)


def error_from(exc: BaseException, url: str, what: str = "") -> AmqpSourceError:
    """pika's failure as one sentence, prefixed with what was being done."""
    if (
        isinstance(exc, pika.exceptions.ChannelClosedByBroker)
        and exc.reply_code == 406
        and "invalid arg 'x-stream-offset'" in exc.reply_text
    ):
        return AmqpSourceError(
            f"{what}: the queue is not a stream ({exc.reply_text}); use the queue option "
            "for classic queues"
        )
    err: LogsError = exc if isinstance(exc, LogsError) else describe(exc, url)
    text = f"{what}: {err}" if what else str(err)
    return AmqpSourceError(text, transient=err.transient)


def urls_of(url: str) -> list[str]:
    """The broker URLs of an option (several separated by commas: one cluster's nodes)."""
    try:
        return split_urls(url)
    except LogsError as exc:
        raise AmqpSourceError(str(exc)) from None


def connect(url: str, *, heartbeat: int | None = None) -> Any:
    """A ``pika.BlockingConnection`` to the first of the URLs that answers, or
    AmqpSourceError (the last node's failure)."""
    urls = urls_of(url)
    for i, one in enumerate(urls):
        try:
            return _connect(one, heartbeat)
        except AmqpSourceError as exc:
            if not exc.transient or i == len(urls) - 1:
                raise
            log.info("%s; trying the next node", exc)
    raise AssertionError("unreachable")


def _connect(url: str, heartbeat: int | None) -> Any:
    try:
        overrides: dict[str, object] = {
            "connection_attempts": 1,
            "socket_timeout": _CONNECT_TIMEOUT,
            "blocked_connection_timeout": 300,
        }
        if heartbeat is not None:
            overrides["heartbeat"] = heartbeat
        params = parameters(url, **overrides)
        return pika.BlockingConnection(params)
    except LogsError as exc:
        raise AmqpSourceError(str(exc)) from None
    except Exception as exc:  # pika raises many unrelated types for a failed connect
        raise error_from(exc, url) from None


def close_quietly(conn: Any) -> None:
    """Drop a connection without cancelling its consumers (see the module docstring)."""
    if conn is None:
        return
    try:
        impl = conn._impl  # pika's async connection: closing it cancels nothing
        if impl.is_open:
            impl.close()
        deadline = time.monotonic() + 2.0
        while not conn.is_closed and time.monotonic() < deadline:
            conn.process_data_events(0.05)
    except Exception:  # closing is best effort: the socket goes away with us anyway
        log.debug("error while closing an AMQP connection", exc_info=True)


@contextlib.contextmanager
def connected(url: str, what: str) -> Iterator[Any]:
    """A connection for the block, dropped after it; a failure in the block other than
    AmqpSourceError becomes one, prefixed with ``what`` (``error_from``)."""
    conn = connect(url)
    try:
        yield conn
    except AmqpSourceError:
        raise
    except Exception as exc:
        raise error_from(exc, url, what) from None
    finally:
        close_quietly(conn)


def check_queue(conn: Any, url: str, name: str, kind: str = "stream") -> int:
    """Passive-declare ``name``; its message count, or AmqpSourceError (NOT_FOUND, …)."""
    try:
        ch = conn.channel()
        ok = ch.queue_declare(name, passive=True, arguments={END_EXTENSION_ARG: True})
        count = int(ok.method.message_count)
        ch.close()
        return count
    except pika.exceptions.ChannelClosedByBroker as exc:
        if exc.reply_code == 404:
            raise AmqpSourceError(
                f"{kind} {name!r} does not exist on {redact(url)} ({exc.reply_text})"
            ) from None
        raise error_from(exc, url, f"cannot use {kind} {name!r}") from None
    except Exception as exc:
        raise error_from(exc, url, f"cannot use {kind} {name!r}") from None


@dataclass
class _Probe:
    offsets: list[int] = field(default_factory=list)
    last_at: float = 0.0
    not_a_stream: bool = False


#: How long a probe for every offset waits after the last delivery, and in all, in seconds.
_PROBE_IDLE = 0.1
_PROBE_DEADLINE = 2.0


def _probe(url: str, stream: str, spec: object, *, first_only: bool, wait: float) -> list[int]:
    """Offsets delivered to a consumer at ``x-stream-offset: spec``: only the first one, or
    everything until the consumer has been quiet for ``_PROBE_IDLE`` seconds (at most
    ``_PROBE_DEADLINE``). ``wait`` bounds the wait for the first delivery (an empty stream
    delivers nothing)."""
    with connected(url, f"cannot read stream {stream!r}") as conn:
        check_queue(conn, url, stream)
        probe = _Probe()
        ch = conn.channel()
        ch.basic_qos(prefetch_count=1 if first_only else 2000)

        def on_message(ch_: Any, method: Any, props: Any, body: bytes) -> None:
            headers = props.headers or {}
            if "x-stream-offset" not in headers:
                probe.not_a_stream = True
                return
            probe.offsets.append(int(headers["x-stream-offset"]))
            probe.last_at = time.monotonic()
            if not first_only and len(probe.offsets) % 500 == 0:
                ch_.basic_ack(method.delivery_tag, multiple=True)

        ch.basic_consume(stream, on_message, arguments={"x-stream-offset": spec})
        started = time.monotonic()
        while True:
            conn.process_data_events(0.02)
            now = time.monotonic()
            if probe.not_a_stream:
                raise AmqpSourceError(
                    f"queue {stream!r} on {redact(url)} is not a stream "
                    "(its deliveries carry no x-stream-offset); use the queue option for "
                    "classic queues"
                )
            if not probe.offsets:
                if now - started >= wait:
                    return []
                continue
            if first_only:
                return probe.offsets[:1]
            if now - probe.last_at >= _PROBE_IDLE or now - started >= _PROBE_DEADLINE:
                return probe.offsets


def is_leveret(conn: Any) -> bool:
    """Whether the broker is Leveret (its ``connection.start`` names the product)."""
    props = getattr(conn._impl, "server_properties", None) or {}
    product = props.get("product")
    if isinstance(product, bytes):
        product = product.decode("utf-8", "replace")
    return product == "Leveret"


def stream_tail(url: str, stream: str, *, wait: float = 1.0) -> int:
    """The offset the next message of ``stream`` will get (a lower bound of it while
    publishers append): Leveret's extension, else a probe from ``last``."""
    conn = connect(url)
    try:
        count = check_queue(conn, url, stream)
        leveret = is_leveret(conn)
    finally:
        close_quietly(conn)
    if leveret:
        # RabbitMQ's own message_count for a stream is neither the end nor up to date
        # (it lags by seconds and counts more than the messages), so only Leveret's is used
        return count
    offsets = _probe(url, stream, "last", first_only=False, wait=wait)
    return max(offsets) + 1 if offsets else 0


def stream_head(url: str, stream: str, *, wait: float = 1.0) -> int | None:
    """The first offset still stored in ``stream``; None when it is empty."""
    offsets = _probe(url, stream, "first", first_only=True, wait=wait)
    return offsets[0] if offsets else None


def offset_at(url: str, stream: str, when: datetime, *, wait: float = 1.0) -> int | None:
    """The first offset at or after ``when``; None if nothing is that recent yet."""
    offsets = _probe(url, stream, when.astimezone(UTC), first_only=True, wait=wait)
    return offsets[0] if offsets else None


# ------------------------------------------------------------------------- publishing
@dataclass(frozen=True, slots=True)
class Outgoing:
    """One message to publish."""

    exchange: str
    routing_key: str
    body: bytes
    properties: Any  # pika.BasicProperties


@dataclass
class _PublishState:
    items: Iterator[Outgoing]
    window: int
    mandatory: bool
    channel: Any = None
    next_tag: int = 1
    outstanding: set[int] = field(default_factory=set)
    sent: int = 0
    exhausted: bool = False
    error: AmqpSourceError | None = None
    returned: str | None = None
    row_error: BaseException | None = None


def publish(
    url: str,
    items: Iterable[Outgoing],
    *,
    window: int = 1000,
    mandatory: bool = False,
    on_ready: Callable[[], None] | None = None,
) -> int:
    """Publish every item with publisher confirms, keeping up to ``window`` unconfirmed;
    returns how many the broker confirmed. AmqpSourceError on a nack, a returned message
    (``mandatory``), or a lost connection: the caller (a Spark task) fails, and Spark's
    retry publishes the partition again (at-least-once). Of several URLs, the first that
    accepts a connection is used."""
    urls = urls_of(url)
    stream = iter(items)
    for i, one in enumerate(urls):
        state = _PublishState(stream, window, mandatory)
        try:
            return _publish(one, state, on_ready)
        except AmqpSourceError as exc:
            if not exc.transient or state.sent or i == len(urls) - 1:
                raise
            log.info("%s; trying the next node", exc)
    raise AssertionError("unreachable")


def _publish(url: str, state: _PublishState, on_ready: Callable[[], None] | None) -> int:
    try:
        params = parameters(url, connection_attempts=1, socket_timeout=_CONNECT_TIMEOUT)
    except LogsError as exc:
        raise AmqpSourceError(str(exc)) from None

    def fail(err: AmqpSourceError) -> None:
        if state.error is None:
            state.error = err
        if conn.is_open:
            conn.close()
        elif not conn.is_closing:
            conn.ioloop.stop()

    def pump() -> None:
        ch = state.channel
        if state.error is not None or ch is None or not ch.is_open:
            return
        while not state.exhausted and len(state.outstanding) < state.window:
            try:
                item = next(state.items)
            except StopIteration:
                state.exhausted = True
                break
            except Exception as exc:  # the rows' own iterator failed: stop, re-raise after
                state.row_error = exc
                fail(AmqpSourceError(f"reading the rows to publish failed: {exc}"))
                return
            ch.basic_publish(
                item.exchange, item.routing_key, item.body, item.properties, state.mandatory
            )
            state.outstanding.add(state.next_tag)
            state.next_tag += 1
            state.sent += 1
        if state.exhausted and not state.outstanding:
            conn.close()

    def on_confirm(frame: Any) -> None:
        m = frame.method
        tags = (
            {t for t in state.outstanding if t <= m.delivery_tag}
            if m.multiple
            else {m.delivery_tag}
        )
        if isinstance(m, pika.spec.Basic.Nack):
            fail(AmqpSourceError(f"the broker refused {len(tags)} message(s) (basic.nack)"))
            return
        if state.returned is not None:
            fail(AmqpSourceError(state.returned))
            return
        state.outstanding -= tags
        if len(state.outstanding) <= state.window // 2 or state.exhausted:
            pump()

    def on_return(_ch: Any, method: Any, _props: Any, _body: bytes) -> None:
        state.returned = (
            f"a message to exchange {method.exchange!r} with routing key "
            f"{method.routing_key!r} was returned: {method.reply_code} {method.reply_text}"
        )

    def on_channel(ch: Any) -> None:
        state.channel = ch
        ch.add_on_close_callback(on_channel_closed)
        ch.add_on_return_callback(on_return)
        ch.confirm_delivery(on_confirm, callback=lambda _f: ready())

    def ready() -> None:
        if on_ready is not None:
            on_ready()
        pump()

    def on_channel_closed(_ch: Any, reason: BaseException) -> None:
        if not (state.exhausted and not state.outstanding):
            fail(error_from(reason, url, "publishing"))

    def on_open(c: Any) -> None:
        c.channel(on_open_callback=on_channel)

    def on_open_error(_c: Any, exc: BaseException) -> None:
        state.error = error_from(exc, url)
        conn.ioloop.stop()

    def on_closed(_c: Any, reason: BaseException) -> None:
        if state.error is None and (state.outstanding or not state.exhausted):
            state.error = error_from(reason, url, "publishing")
        conn.ioloop.stop()

    conn = pika.SelectConnection(
        params,
        on_open_callback=on_open,
        on_open_error_callback=on_open_error,
        on_close_callback=on_closed,
    )
    conn.ioloop.start()
    if state.row_error is not None:
        raise state.row_error
    if state.error is not None:
        raise state.error
    return state.sent
