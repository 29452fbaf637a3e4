"""The emitter behind ``leveret emit-log``: each message becomes one record, published with
confirms; a full buffer makes the caller wait rather than lose records."""

from __future__ import annotations

from dataclasses import dataclass

from leveret.logs.amqp import (
    DEFAULT_EXCHANGE,
    DEFAULT_URL,
    ExchangeType,
    LogsError,
    Urls,
    routing_key,
)
from leveret.logs.publisher import Publisher
from leveret.logs.record import (
    DEFAULT_FACILITY,
    HOST,
    PID,
    Record,
    check_facility,
    normalize_severity,
    rfc3339,
    split_severity_prefix,
)
from leveret.logs.superstream import RouteBy, SuperStreamRoute


@dataclass(frozen=True, slots=True)
class EmitResult:
    """How many records were handed over, and what the broker said about them."""

    sent: int
    confirmed: int
    nacked: int
    unconfirmed: int = 0  # in flight on a node that went away (see Publisher)

    @property
    def ok(self) -> bool:
        return self.confirmed == self.sent and not self.nacked


class Emitter:
    """Sends messages as records of one facility. Connects on creation (LogsError if it
    cannot); ``close()`` waits for every confirm. Given several URLs (one cluster's nodes)
    it moves on to the next when a connection is lost; what was in flight then is not sent
    again but counted as unconfirmed.

    With a ``severity`` every record has it and a message is sent as it is. Without one
    (``None``) a message may name its own in the tutorial's ``severity: message`` form, as
    receivers and the lake read plain text: ``"error: disk full"`` is sent as severity
    ``error`` with the message ``disk full``; a message without the prefix is ``info``.

    With ``super_stream``, ``exchange`` names a super stream (which must exist) and every
    record goes to the partition its app's name (``route_by="app"``) or its host's
    (``"host"``) hashes to, as :mod:`leveret.logs.superstream` says; the partitions are
    read from the management API (``management_url``: see
    :class:`~leveret.logs.superstream.ManagementApi`)."""

    def __init__(
        self,
        url: Urls = DEFAULT_URL,
        exchange: str = DEFAULT_EXCHANGE,
        exchange_type: str = ExchangeType.fanout,
        *,
        severity: str | None = None,
        facility: str = DEFAULT_FACILITY,
        app: str = "emit-log",
        persistent: bool = False,
        durable_exchange: bool = False,
        connect_timeout: float = 30.0,
        super_stream: bool = False,
        route_by: str = RouteBy.app,
        management_url: str | None = None,
    ) -> None:
        try:
            self.severity = normalize_severity(severity) if severity is not None else None
            self.facility = check_facility(facility)
        except ValueError as exc:
            raise LogsError(str(exc)) from None
        self.app = app
        self.persistent = persistent
        self._exchange_type = str(exchange_type)
        self._keys: dict[str, str] = {}
        route = None
        if super_stream:
            try:
                by = RouteBy(route_by)
            except ValueError:
                raise LogsError(f"route by {route_by!r}: use app or host") from None
            route = SuperStreamRoute(app if by == RouteBy.app else HOST, management_url)
        self._publisher = Publisher(
            url,
            exchange,
            exchange_type,
            durable_exchange=durable_exchange,
            capacity=10_000,
            overflow="block",
            reconnect=False,
            name="leveret-emit-log",
            super_stream=route,
        )
        self._publisher.start(wait=connect_timeout)
        self._result: EmitResult | None = None

    def send(self, message: str) -> None:
        """Queue one record (waits while the buffer is full; LogsError if the connection
        was lost)."""
        severity = self.severity
        if severity is None:
            named, message = split_severity_prefix(message)
            severity = named or "info"
        key = self._keys.get(severity)
        if key is None:
            key = self._keys[severity] = routing_key(self._exchange_type, severity, self.facility)
        record = Record(
            ts=rfc3339(),
            severity=severity,
            facility=self.facility,
            host=HOST,
            app=self.app,
            pid=PID,
            message=message,
        )
        self._publisher.put(key, record.to_json(), self.persistent)

    def close(self, timeout: float | None = None) -> EmitResult:
        """Wait for the broker to confirm everything sent, then disconnect."""
        if self._result is None:
            self._publisher.close(timeout)
            stats = self._publisher.stats
            self._result = EmitResult(
                stats.accepted, stats.confirmed, stats.nacked, stats.unconfirmed
            )
        return self._result

    @property
    def error(self) -> LogsError | None:
        """What ended the connection early, if anything did."""
        return self._publisher.error
