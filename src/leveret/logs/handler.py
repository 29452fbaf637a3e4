"""``AMQPHandler``: stdlib ``logging`` records, broadcast as log records.

Two lines give an application broadcast logs::

    from leveret.logs import AMQPHandler
    logging.getLogger().addHandler(AMQPHandler("amqp://guest:guest@localhost:5672/"))

``emit()`` only encodes the record and hands it, in one non-blocking pipe write, to a
shipper process (``leveret.logs.shipper``) that publishes in batches with confirms and
reconnects with backoff while the broker is away. Its buffer is bounded: when it is full
the oldest record is dropped and counted (``stats.dropped``). A process of its own, not a
thread, because a publishing thread in the application's interpreter makes the
application's threads wait for the GIL (benchmarks/logs.py measured calls over 1 ms).
``process=False`` publishes from a thread instead, for interpreters that cannot start a
child; then records from pika's own loggers are not shipped.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import traceback

from leveret.logs.amqp import DEFAULT_EXCHANGE, DEFAULT_URL, ExchangeType, Urls, routing_key
from leveret.logs.publisher import Publisher, PublisherStats
from leveret.logs.record import (
    DEFAULT_FACILITY,
    HOST,
    Record,
    check_facility,
    rfc3339,
    severity_for_level,
)
from leveret.logs.shipper import ShipperClient
from leveret.logs.superstream import RouteBy, SuperStreamRoute

# Attributes every LogRecord has; anything else on a record came from ``extra=``.
_STANDARD = frozenset(logging.makeLogRecord({}).__dict__) | {"message", "asctime", "taskName"}


class AMQPHandler(logging.Handler):
    """A ``logging.Handler`` that publishes records to an exchange, never blocking the
    application. ``flush()`` and ``close()`` wait for the broker's confirms up to
    ``timeout`` seconds. ``url`` may be several (a list, or one string separated by commas):
    the nodes of a cluster, the next one tried whenever a connection is lost (records in
    flight then are sent again: receivers drop such a copy by its message id).

    With ``super_stream``, ``exchange`` names a super stream (made beforehand, e.g. with
    :func:`~leveret.logs.superstream.declare_super_stream`) and the handler's records all go
    to the one partition its ``app`` (``route_by="app"``) or this host's name (``"host"``)
    hashes to, found through the management API (``management_url``), so one app's records
    keep their order in one partition (see :mod:`leveret.logs.superstream`)."""

    def __init__(
        self,
        url: Urls = DEFAULT_URL,
        exchange: str = DEFAULT_EXCHANGE,
        exchange_type: str = ExchangeType.fanout,
        *,
        level: int | str = logging.NOTSET,
        facility: str = DEFAULT_FACILITY,
        app: str | None = None,
        persistent: bool = False,
        durable_exchange: bool = False,
        capacity: int = 100_000,
        timeout: float = 5.0,
        process: bool = True,
        super_stream: bool = False,
        route_by: str = RouteBy.app,
        management_url: str | None = None,
    ) -> None:
        super().__init__(level)
        self.exchange_type = str(ExchangeType(exchange_type))
        self.facility = check_facility(facility)
        self.app = app or os.path.basename(sys.argv[0] or "python") or "python"
        self.persistent = persistent
        self.timeout = timeout
        self._keys = {
            s: routing_key(self.exchange_type, s, self.facility)
            for s in ("debug", "info", "warning", "error", "critical")
        }
        route = None
        if super_stream:
            by = RouteBy(route_by)  # ValueError for anything but app or host
            route = SuperStreamRoute(self.app if by == RouteBy.app else HOST, management_url)
        self._local = threading.local()
        self._publisher: Publisher | ShipperClient
        self._thread_id: int | None = None
        if process:
            self._publisher = ShipperClient(
                url,
                exchange,
                self.exchange_type,
                durable_exchange=durable_exchange,
                capacity=capacity,
                timeout=timeout,
                super_stream=route,
            )
        else:
            publisher = Publisher(
                url,
                exchange,
                self.exchange_type,
                durable_exchange=durable_exchange,
                capacity=capacity,
                overflow="drop-oldest",
                reconnect=True,
                name="leveret-logs-handler",
                super_stream=route,
            )
            publisher.start()
            self._thread_id = publisher.thread_id
            self._publisher = publisher

    @property
    def stats(self) -> PublisherStats:
        """Accepted, confirmed, dropped and buffered counts, and the last connection error."""
        return self._publisher.stats

    def emit(self, record: logging.LogRecord) -> None:
        # Never ship what the handler's own machinery logs: anything logged while this
        # thread is already inside emit and, with a publishing thread, pika (from the I/O
        # thread, its resolver thread, and at debug level from inside put()). That would
        # feed the handler from inside itself, endlessly while the broker is away.
        if getattr(self._local, "busy", False) or (
            self._thread_id is not None
            and (record.name.startswith("pika") or record.thread == self._thread_id)
        ):
            return
        self._local.busy = True
        try:
            severity = severity_for_level(record.levelno)
            extra = {k: v for k, v in record.__dict__.items() if k not in _STANDARD}
            body = Record(
                ts=rfc3339(record.created),
                severity=severity,
                facility=self.facility,
                host=HOST,
                app=self.app,
                pid=record.process or os.getpid(),
                message=record.getMessage(),
                logger=record.name,
                exc=self._exc_text(record),
                extra=extra or None,
            ).to_json()
            self._publisher.put(self._keys[severity], body, self.persistent)
        except RecursionError:
            raise
        except Exception:
            self.handleError(record)
        finally:
            self._local.busy = False

    def _exc_text(self, record: logging.LogRecord) -> str | None:
        text = record.exc_text
        if record.exc_info and not text:
            text = "".join(traceback.format_exception(*record.exc_info)).rstrip()
        if record.stack_info:
            text = f"{text}\n{record.stack_info}" if text else record.stack_info
        return text or None

    def flush(self) -> None:
        """Wait (up to ``timeout``) until every record emitted so far is confirmed."""
        self._publisher.flush(self.timeout)

    def close(self) -> None:
        """Flush, disconnect and stop the shipper process (or thread)."""
        try:
            self._publisher.close(self.timeout)
        finally:
            super().close()

    def __repr__(self) -> str:
        level = logging.getLevelName(self.level)
        return f"<{type(self).__name__} {self._publisher.exchange!r} ({level})>"
