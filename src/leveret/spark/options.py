"""The options of ``format("amqp")``: Spark hands them over as strings (keys in any case);
they are checked here once, on the driver, with errors that name the option."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeVar

from leveret.spark.client import AmqpSourceError

DEFAULT_URL = "amqp://guest:guest@localhost:5672/"
#: Deliveries in flight to a stream reader: large, so that the broker never waits for
#: credit and a block read off the socket holds thousands (65535 is AMQP's limit).
DEFAULT_PREFETCH = 20_000

T = TypeVar("T")


def _get(options: Mapping[str, str], key: str) -> str | None:
    # Spark passes a case-insensitive dict; a plain dict (tests, direct use) may not be
    lowered = {k.lower(): v for k, v in options.items()}
    value = lowered.get(key.lower())
    return None if value is None else str(value)


def _parsed(
    options: Mapping[str, str], key: str, convert: Callable[[str], T], what: str
) -> tuple[str, T] | None:
    """The option as given and as ``convert`` reads it; None when it is absent or empty.
    A ValueError of ``convert`` is the option's error: ``… is not {what}``."""
    raw = _get(options, key)
    if raw is None or raw == "":
        return None
    try:
        return raw, convert(raw)
    except ValueError:
        raise AmqpSourceError(f"option {key}: {raw!r} is not {what}") from None


def _int(options: Mapping[str, str], key: str, default: int | None, minimum: int = 0) -> int | None:
    found = _parsed(options, key, int, "a whole number")
    if found is None:
        return default
    value = found[1]
    if value < minimum:
        raise AmqpSourceError(f"option {key}: must be at least {minimum}, got {value}")
    return value


def _float(options: Mapping[str, str], key: str, default: float) -> float:
    found = _parsed(options, key, float, "a number")
    if found is None:
        return default
    raw, value = found
    if value <= 0:
        raise AmqpSourceError(f"option {key}: must be positive, got {raw}")
    return value


def _truth(raw: str) -> bool:
    v = raw.strip().lower()
    if v in ("true", "1", "yes"):
        return True
    if v in ("false", "0", "no"):
        return False
    raise ValueError(raw)


def _bool(options: Mapping[str, str], key: str, default: bool) -> bool:
    found = _parsed(options, key, _truth, "true or false")
    return default if found is None else found[1]


def checkpoint_position(offset: Mapping[str, Any], kind: str, name: str | None, key: str) -> int:
    """The position a streaming source's checkpoint holds, ``{kind: name, key: n}``:
    AmqpSourceError when it is another queue's or stream's."""
    held = offset.get(kind)
    if held != name:
        raise AmqpSourceError(
            f"the checkpoint holds offsets of {kind} {held!r}, not "
            f"{name!r}; use a new checkpoint location for another {kind}"
        )
    return int(offset[key])


@dataclass(frozen=True, slots=True)
class Position:
    """Where reading starts or ends: ``earliest``, ``latest``, an offset, or a time."""

    kind: str  # "earliest" | "latest" | "offset" | "time"
    offset: int = 0
    time: datetime | None = None


def parse_position(key: str, raw: str | None, default: str) -> Position:
    value = (raw or default).strip()
    low = value.lower()
    if low in ("earliest", "first"):
        return Position("earliest")
    if low in ("latest", "last", "next"):
        return Position("latest")
    try:
        n = int(value)
    except ValueError:
        pass
    else:
        if n < 0:
            raise AmqpSourceError(f"option {key}: an offset cannot be negative ({value})")
        return Position("offset", offset=n)
    try:
        when = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise AmqpSourceError(
            f"option {key}: {value!r} is not earliest, latest, an offset or an ISO-8601 time"
        ) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return Position("time", time=when)


@dataclass(frozen=True, slots=True)
class ReadOptions:
    """Options of the readers (batch and streaming)."""

    url: str
    stream: str | None
    queue: str | None
    starting: Position
    ending: Position
    max_records_per_trigger: int | None
    min_partitions: int
    max_records_per_partition: int
    prefetch: int
    fail_on_data_loss: bool
    probe_timeout: float
    stall_timeout: float
    wal_location: str | None
    checkpoint_location: str | None
    records: bool = False  # rows are parsed log records, not messages
    #: how executors read a stream: ``amqp`` (AMQP 0-9-1 consumers), ``stream`` (RabbitMQ's
    #: stream protocol, whole chunks) or ``auto`` (the default: ``stream`` when the stream
    #: port answers and holds the stream, else ``amqp``; settled once on the driver)
    protocol: str = "auto"
    #: the stream protocol's port; None: 5552, or 5551 (TLS) for ``amqps://`` URLs
    stream_port: int | None = None
    #: the stream's leader and replicas (host, stream port) as the driver's Metadata named
    #: them: executors fall back to them when the URLs' nodes do not answer
    stream_members: tuple[tuple[str, int], ...] = ()
    #: a super stream: every partition read, offsets kept per partition (see
    #: :mod:`leveret.spark.superstream`)
    super_stream: str | None = None
    #: where the partitions are read from when the stream port cannot tell them
    management_url: str | None = None

    @property
    def source(self) -> str:
        return self.stream or self.queue or self.super_stream or ""

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> ReadOptions:
        url = _get(options, "url") or os.environ.get("LEVERET_URL") or DEFAULT_URL
        stream = _get(options, "stream") or None
        queue = _get(options, "queue") or None
        super_stream = _get(options, "superStream") or None
        if [bool(stream), bool(queue), bool(super_stream)].count(True) != 1:
            raise AmqpSourceError(
                "format('amqp') needs exactly one of the options stream (a stream queue, "
                "replayable: exactly-once), superStream (every partition of a super stream, "
                "exactly-once) or queue (a classic queue: at-least-once)"
            )
        records = (_get(options, "records") or "").strip().lower()
        if records not in ("", "log", "messages"):
            raise AmqpSourceError(
                f"option records: {records!r} is not log (rows are parsed log records) or "
                "messages (the default: one row per message)"
            )
        protocol = (_get(options, "protocol") or "auto").strip().lower()
        if protocol not in ("amqp", "stream", "auto"):
            raise AmqpSourceError(
                f"option protocol: {protocol!r} is not amqp (AMQP 0-9-1 consumers), stream "
                "(RabbitMQ's stream protocol, see streamPort) or auto (stream when its port "
                "answers, else amqp)"
            )
        return cls(
            url=url,
            stream=stream,
            queue=queue,
            starting=parse_position(
                "startingOffsets", _get(options, "startingOffsets"), "earliest"
            ),
            ending=parse_position("endingOffsets", _get(options, "endingOffsets"), "latest"),
            max_records_per_trigger=_int(options, "maxRecordsPerTrigger", None, 1),
            min_partitions=_int(options, "minPartitions", 2, 1) or 2,
            max_records_per_partition=_int(options, "maxRecordsPerPartition", 100_000, 1)
            or 100_000,
            prefetch=_int(options, "prefetch", DEFAULT_PREFETCH, 1) or DEFAULT_PREFETCH,
            fail_on_data_loss=_bool(options, "failOnDataLoss", True),
            probe_timeout=_float(options, "probeTimeout", 1.0),
            stall_timeout=_float(options, "stallTimeout", 60.0),
            wal_location=_get(options, "walLocation") or None,
            checkpoint_location=_get(options, "checkpointLocation") or None,
            records=records == "log",
            protocol=protocol,
            stream_port=_int(options, "streamPort", None, 1),
            super_stream=super_stream,
            management_url=_get(options, "managementUrl") or None,
        )


@dataclass(frozen=True, slots=True)
class WriteOptions:
    """Options of the writers: where rows go and which columns make which parts."""

    url: str
    exchange: str
    routing_key: str | None
    routing_key_column: str | None
    body_column: str
    headers_column: str | None
    property_columns: tuple[tuple[str, str], ...]  # (property, column)
    persistent: bool
    mandatory: bool
    confirm_window: int

    @classmethod
    def parse(cls, options: Mapping[str, str], columns: list[str]) -> WriteOptions:
        from leveret.spark.schema import PROPERTY_COLUMNS

        url = _get(options, "url") or os.environ.get("LEVERET_URL") or DEFAULT_URL
        exchange = _get(options, "exchange") or ""
        routing_key = _get(options, "routingKey")
        key_col = _get(options, "routingKeyColumn")
        if key_col is None and routing_key is None and "routing_key" in columns:
            key_col = "routing_key"
        body_col = _get(options, "bodyColumn") or "body"
        headers_col = _get(options, "headersColumn")
        if headers_col is None and "headers" in columns:
            headers_col = "headers"
        props: list[tuple[str, str]] = []
        for prop in PROPERTY_COLUMNS:
            col = _get(options, f"property.{prop}")
            if col is None and prop in columns:
                col = prop
            if col is not None:
                props.append((prop, col))
        wanted = [c for c in (key_col, body_col, headers_col) if c] + [c for _, c in props]
        missing = [c for c in wanted if c not in columns]
        if missing:
            raise AmqpSourceError(f"format('amqp') writer: no column {missing[0]!r} in {columns}")
        if key_col is None and routing_key is None and not exchange:
            raise AmqpSourceError(
                "format('amqp') writer: give the option exchange, or a routing key "
                "(routingKey, routingKeyColumn or a routing_key column) for the default exchange"
            )
        return cls(
            url=url,
            exchange=exchange,
            routing_key=routing_key,
            routing_key_column=key_col,
            body_column=body_col,
            headers_column=headers_col,
            property_columns=tuple(props),
            persistent=_bool(options, "persistent", False),
            mandatory=_bool(options, "mandatory", False),
            confirm_window=_int(options, "confirmWindow", 1000, 1) or 1000,
        )
