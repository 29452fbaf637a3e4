"""Message bodies to typed log records, in Arrow, thousands at a time.

The bodies of a block arrive back to back, each followed by a newline, which is what
pyarrow's JSON reader takes: it parses the whole block in C++ against the record's schema
(:data:`RECORD_JSON`), typed, in one call. A block with a malformed record in it fails as a
whole; it is then cut in halves, each parsed again, until the records that fail are alone:
those land in ``_corrupt``, the rest are parsed in bulk as before (a handful of parses per
malformed record). So whether a record is good is decided by the same parser whatever
block it came in.

A body is a record when it is a JSON object (content type ``application/json`` or a body
starting with ``{``) whose fields have their types: ``message`` a string (required),
``ts`` an ISO-8601 time, ``severity`` one of the severities (any case, ``WARN``-style
aliases), ``pid`` an integer, the others strings; ``extra`` any JSON, kept as its JSON
text; other fields are ignored. Any other JSON, or a body that is not UTF-8, is malformed
and goes to ``_corrupt`` (its text, or ``base64:`` and its base64 when it is not UTF-8)
with every other record column NULL: never dropped. A UTF-8 body that is not JSON is plain
text from another producer (the tutorial's ``emit_log.py``): its text is the message, its
severity comes from the routing key when that names one, else from a ``severity: message``
prefix, else ``info``. A record without ``ts`` (and plain text, and malformed bodies) gets
the message's time: its timestamp property set by the producer, else its
``timestamp_in_ms`` header (the broker's arrival time), else the stream chunk's timestamp
(the broker's arrival time too), else the time it was parsed. These rules are
:mod:`leveret.logs.reading`'s, which every other reader uses; the tests hold the two
parsers to the same records, message for message.

The broker's events (exchange ``amq.rabbitmq.event``: empty bodies, the event in the routing
key, its details in headers) are records of their own, built from the headers (only when a
batch has any): facility ``broker``, host the ``node`` header, severity ``warning`` for a
failed login and ``info`` otherwise, a one-line message (``queue.created name=orders
vhost=/ by guest``), ``ts`` from ``timestamp_in_ms``, and every header in ``extra``. A
line of the broker's own log (``amq.rabbitmq.log``) takes its time and logger from its
``2026-11-28 23:18:31.040518+00:00 [info] <logger>`` prefix, which its message loses.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj

from leveret.logs.reading import (
    BROKER_FACILITY,
    EVENT_SEVERITY,
    JSON_CONTENT_TYPE,
    MAX_US,
    MIN_US,
    TIMESTAMP_HEADER,
    broker_log_line,
    event_extra,
    event_message,
    event_time,
    header_ms,
    header_text,
    key_parts,
    severity_word,
)
from leveret.logs.record import BROKER_EVENT_EXCHANGE, BROKER_LOG_EXCHANGE, severity_prefix
from leveret.spark.frames import U8, Mask, gather, string_array
from leveret.spark.schema import DEFAULT_KEEP, LOG_ARROW_SCHEMA, RECORD_COLUMNS
from leveret.spark.wire import Positions

#: A record's JSON fields as the reader types them (``extra`` is taken separately).
RECORD_JSON = pa.schema(
    [
        ("ts", pa.timestamp("us", tz="UTC")),
        ("severity", pa.string()),
        ("facility", pa.string()),
        ("host", pa.string()),
        ("app", pa.string()),
        ("pid", pa.int64()),
        ("message", pa.string()),
        ("logger", pa.string()),
        ("exc", pa.string()),
    ]
)
_PARSE = pj.ParseOptions(explicit_schema=RECORD_JSON, unexpected_field_behavior="ignore")
_PARSE_MULTILINE = pj.ParseOptions(
    explicit_schema=RECORD_JSON, unexpected_field_behavior="ignore", newlines_in_values=True
)
_NEWLINE = 10
_BRACE = ord("{")
_SPACES = np.array([9, 10, 13, 32], np.uint8)
_TS = pa.timestamp("us", tz="UTC")
_EMPTY = RECORD_JSON.empty_table()


@dataclass(frozen=True, slots=True)
class Bodies:
    """``n`` bodies back to back in ``data``, each followed by a newline: body ``i`` is
    ``data[offsets[i] : offsets[i + 1] - 1]``."""

    data: U8
    offsets: Positions

    @classmethod
    def of(cls, array: pa.Array) -> Bodies:
        """From a binary (or string) Arrow array; nulls as empty bodies."""
        values = [b"" if v is None else v for v in array.cast(pa.binary()).to_pylist()]
        return cls.join(values)

    @classmethod
    def join(cls, values: Sequence[bytes]) -> Bodies:
        offsets = np.zeros(len(values) + 1, np.int64)
        np.cumsum([len(v) + 1 for v in values], out=offsets[1:])
        blob = b"\n".join([*values, b""])
        return cls(np.frombuffer(blob, np.uint8), offsets)

    def __len__(self) -> int:
        return len(self.offsets) - 1

    @property
    def starts(self) -> Positions:
        return self.offsets[:-1]

    @property
    def lengths(self) -> Positions:
        return self.offsets[1:] - self.offsets[:-1] - 1

    def subset(self, rows: Positions) -> Bodies:
        if len(rows) == len(self):
            return self
        data, offsets = gather(self.data, self.starts[rows], self.lengths[rows], extra=1)
        return Bodies(data, offsets)

    def text(self, rows: Positions) -> pa.Array:
        data, offsets = gather(self.data, self.starts[rows], self.lengths[rows])
        return string_array(data, offsets)

    def view(self) -> pa.Array:
        """Every body (with its newline) as a string array, without copying."""
        return pa.StringArray.from_buffers(
            len(self), pa.py_buffer(self.offsets.astype(np.int32)), pa.py_buffer(self.data)
        )

    def raw(self, i: int) -> bytes:
        return bytes(self.data[int(self.offsets[i]) : int(self.offsets[i + 1]) - 1])


@dataclass(frozen=True, slots=True)
class Messages:
    """What the parser needs of ``n`` messages."""

    routing_key: pa.Array  # string
    content_type: pa.Array  # string
    timestamp: Positions  # seconds since the epoch, where ``has_timestamp``
    has_timestamp: Mask
    bodies: Bodies
    # per message, the ``node`` header of a record of the broker's own log (published to
    # amq.rabbitmq.log), NULL for other messages; None: no message is one
    broker_node: pa.Array | None = None
    # the headers of the broker's events (published to amq.rabbitmq.event) by message
    # index; None: no message is one
    broker_event: Mapping[int, Mapping[str, str | None]] | None = None
    # per message, its ``timestamp_in_ms`` header (ms) where ``has_header_ms``; None: no
    # message has one
    header_ms: Positions | None = None
    has_header_ms: Mask | None = None
    # per message, the broker's arrival time (ms) as the transport tells it (a stream
    # chunk's timestamp); None: the transport does not
    arrival_ms: Positions | None = None

    def times(self, now_us: int) -> Positions:
        """Per message, its time in µs (:func:`leveret.logs.reading.message_time`)."""
        n = len(self.bodies)
        out = np.full(n, now_us, np.int64)
        if self.arrival_ms is not None:
            out = self.arrival_ms.astype(np.int64) * 1000
        # a timestamp property past year 9999 is not a time a record can have
        stamp = self.has_timestamp & (self.timestamp <= MAX_US // 1_000_000)
        stamp &= self.timestamp >= MIN_US // 1_000_000
        if self.header_ms is not None and self.has_header_ms is not None:
            there = self.has_header_ms
            out = np.where(there, self.header_ms * 1000, out)
            # a timestamp property of the same second is the broker's too
            stamp = stamp & ~(there & (np.floor_divide(self.header_ms, 1000) == self.timestamp))
        return np.where(stamp, self.timestamp * 1_000_000, out)


def header_times(values: Sequence[Any]) -> tuple[Positions | None, Mask | None]:
    """Per message, its ``timestamp_in_ms`` header (``values``: each message's, None when
    it has none) as ms and where it is one; (None, None) when no message has one."""
    if all(v is None for v in values):
        return None, None
    ms = [header_ms({TIMESTAMP_HEADER: v}) if v is not None else None for v in values]
    there = np.array([m is not None for m in ms], np.bool_)
    if not there.any():
        return None, None
    return np.array([m or 0 for m in ms], np.int64), there


# ----------------------------------------------------------------------------- JSON
def _parse_json(blob: U8, n: int) -> pa.Table | None:
    """``n`` newline-terminated JSON records as a table, or None when any fails."""
    if n == 0:
        return RECORD_JSON.empty_table()
    raw = pa.py_buffer(blob)
    multiline = int(np.count_nonzero(blob == _NEWLINE)) != n
    try:
        table = pj.read_json(
            pa.BufferReader(raw),
            read_options=pj.ReadOptions(use_threads=False, block_size=max(len(blob), 1 << 16)),
            parse_options=_PARSE_MULTILINE if multiline else _PARSE,
        )
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
        return None
    return table if table.num_rows == n else None


def parse_json_blocks(bodies: Bodies) -> tuple[list[pa.Table], Mask]:
    """Parse every body; the tables of the good ones (in order) and which were good. A
    failing range is halved until the failing records stand alone."""
    n = len(bodies)
    good = np.ones(n, np.bool_)
    tables: list[pa.Table] = []
    offsets = bodies.offsets
    stack = [(0, n)]
    while stack:
        lo, hi = stack.pop()
        table = _parse_json(bodies.data[int(offsets[lo]) : int(offsets[hi])], hi - lo)
        if table is not None:
            tables.append(table)
        elif hi - lo == 1:
            good[lo] = False
        else:
            mid = (lo + hi) // 2
            stack.append((mid, hi))  # popped after the first half: order is kept
            stack.append((lo, mid))
    return tables, good


# ----------------------------------------------------------------------------- records
def _key_columns(keys: pa.Array) -> tuple[pa.Array, pa.Array]:
    """Per message, the severity (NULL when the key names none) and facility of its
    routing key, computed once per distinct key."""
    encoded = pc.dictionary_encode(keys.fill_null(""))
    words = [key_parts(k) for k in encoded.dictionary.to_pylist()]
    severity = pa.array([w[0] for w in words], pa.string())
    facility = pa.array([w[1] for w in words], pa.string())
    return severity.take(encoded.indices), facility.take(encoded.indices)


def _normalise(severity: pa.Array) -> tuple[pa.Array, Mask]:
    """Severities normalised, and where a given one is not a severity."""
    encoded = pc.dictionary_encode(severity)
    words = encoded.dictionary.to_pylist()
    normalised = [severity_word(w) for w in words]
    if normalised == words:  # already as they should be: nothing to map
        return severity, np.zeros(len(severity), np.bool_)
    out = pa.array(normalised, pa.string()).take(encoded.indices)
    if out.null_count == severity.null_count:
        return out, np.zeros(len(severity), np.bool_)
    unknown = np.asarray(pc.and_(out.is_null(), severity.is_valid()).fill_null(False))
    return out, unknown


def _extra(raw: bytes) -> str | None:
    value = json.loads(raw).get("extra")
    if value is None:
        return None
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _nulls(n: int, kind: pa.DataType | None = None) -> pa.Array:
    return pa.nulls(n, kind or pa.string())


def parse(
    msgs: Messages,
    keep: Mapping[str, pa.Array],
    schema: pa.Schema = LOG_ARROW_SCHEMA,
    now: float | None = None,
) -> pa.RecordBatch:
    """Log records of ``msgs`` (see the module docstring), with the ``keep`` columns
    beside them, as one batch of ``schema``. Rows come grouped (records, plain texts,
    malformed), not in message order."""
    bodies = msgs.bodies
    n = len(bodies)
    now_us = int((time.time() if now is None else now) * 1_000_000)
    lengths = bodies.lengths
    starts = bodies.starts
    data = bodies.data

    # UTF-8: the whole block at once (a newline cannot complete a broken sequence)
    whole = pa.StringArray.from_buffers(
        1, pa.py_buffer(np.array([0, len(data)], np.int32)), pa.py_buffer(data)
    )
    try:
        whole.validate(full=True)
        utf8 = np.ones(n, np.bool_)
    except pa.ArrowInvalid:
        utf8 = np.array([_is_utf8(bodies.raw(i)) for i in range(n)], np.bool_)

    # which bodies are JSON: the content type, or a first character (after spaces) "{"
    first = np.where(lengths > 0, data[np.minimum(starts, max(len(data) - 1, 0))], 0)
    spaced = np.flatnonzero(np.isin(first, _SPACES) & (lengths > 0))
    for i in spaced:
        stripped = bodies.raw(int(i)).lstrip()
        first[i] = stripped[0] if stripped else 0
    is_json = np.asarray(pc.equal(msgs.content_type, JSON_CONTENT_TYPE).fill_null(False))
    is_json = (is_json | (first == _BRACE)) & utf8

    # a JSON body of nothing but spaces yields no row at all: malformed without parsing,
    # so that every body parsed yields at least one row (and a block that yields as many
    # rows as it has bodies yields one per body)
    blank = is_json & (first == 0)
    event_rows = np.zeros(0, np.int64)
    if msgs.broker_event:
        # the broker's events: their headers make the record, their (empty) bodies nothing
        event_rows = np.array(sorted(msgs.broker_event), np.int64)
        not_event = np.ones(n, np.bool_)
        not_event[event_rows] = False
        is_json &= not_event
        blank &= not_event
        utf8 |= ~not_event
    json_rows = np.flatnonzero(is_json & ~blank)
    plain_rows = np.flatnonzero(~is_json & utf8)
    if len(event_rows):
        plain_rows = np.setdiff1d(plain_rows, event_rows, assume_unique=True)
    binary_rows = np.flatnonzero(~utf8)

    key_severity, key_facility = _key_columns(msgs.routing_key)
    text_host: pa.Array | None = None
    if msgs.broker_node is not None and msgs.broker_node.null_count < n:
        # the broker's own log: facility broker, host its node
        from_broker = msgs.broker_node.is_valid()
        key_facility = pc.if_else(from_broker, pa.scalar(BROKER_FACILITY), key_facility)
        text_host = msgs.broker_node.fill_null("")
    fallback = msgs.times(now_us)

    # JSON records, parsed in bulk
    json_bodies = bodies.subset(json_rows)
    tables, parsed = parse_json_blocks(json_bodies)
    table = tables[0] if len(tables) == 1 else pa.concat_tables(tables or [_EMPTY])
    table = table.combine_chunks()
    parsed_rows = json_rows[parsed]
    severity, unknown = _normalise(table.column("severity").combine_chunks())
    message = table.column("message").combine_chunks()
    ok = ~unknown
    given_ts = table.column("ts").combine_chunks()
    if given_ts.null_count < len(given_ts):
        # Arrow takes years 0 and 10000 (an offset past 9999-12-31): no reader can
        micros = given_ts.cast(pa.int64())
        ok &= np.asarray(
            pc.and_(pc.greater_equal(micros, MIN_US), pc.less_equal(micros, MAX_US)).fill_null(True)
        )
    if message.null_count:
        ok &= np.asarray(message.is_valid())
    good_rows = parsed_rows[ok]
    bad_json = np.concatenate([np.flatnonzero(blank), json_rows[~parsed], parsed_rows[~ok]])
    if not ok.all():
        table = table.filter(pa.array(ok))
        severity = severity.filter(pa.array(ok))

    groups: list[dict[str, pa.Array]] = []
    g = len(good_rows)
    if g:
        col = {name: table.column(name).combine_chunks() for name in RECORD_JSON.names}
        ts = _or(col["ts"], lambda: pa.array(fallback[good_rows], _TS))
        extra = _nulls(g)
        good_json = np.flatnonzero(parsed)[ok]  # the good ones among the JSON bodies
        if _contains(json_bodies.data, b'"extra"'):
            view = json_bodies.view()
            has_extra = np.asarray(pc.match_substring(view, '"extra"').fill_null(False))
            wanted = np.flatnonzero(has_extra[good_json])
            if len(wanted):
                values: list[str | None] = [None] * g
                for i in wanted:
                    values[i] = _extra(json_bodies.raw(int(good_json[i])))
                extra = pa.array(values, pa.string())
        groups.append(
            {
                "ts": ts,
                "severity": _or(
                    severity,
                    lambda: pc.coalesce(key_severity.take(good_rows), pa.scalar("info")),
                ),
                "facility": _or(col["facility"], lambda: key_facility.take(good_rows)),
                "host": _or(col["host"], lambda: pa.scalar("")),
                "app": _or(col["app"], lambda: pa.scalar("")),
                "pid": _or(col["pid"], lambda: pa.scalar(0, pa.int64())),
                "message": col["message"],
                "logger": col["logger"],
                "exc": col["exc"],
                "extra": extra,
                "_corrupt": _nulls(g),
            }
        )
    p = len(plain_rows)
    if p:
        text = bodies.text(plain_rows)
        named = key_severity.take(plain_rows)
        if named.null_count:
            prefixed = pa.array([severity_prefix(t) for t in text.to_pylist()], pa.string())
            named = pc.coalesce(named, prefixed, pa.scalar("info"))
        plain_ts = fallback[plain_rows]
        logger = _nulls(p)
        if text_host is not None and msgs.broker_node is not None:
            text, logger, plain_ts = _broker_lines(
                text, msgs.broker_node.take(pa.array(plain_rows)), plain_ts
            )
        groups.append(
            {
                "ts": pa.array(plain_ts, _TS),
                "severity": named,
                "facility": key_facility.take(plain_rows),
                "host": pa.repeat("", p) if text_host is None else text_host.take(plain_rows),
                "app": pa.repeat("", p),
                "pid": pa.array(np.zeros(p, np.int64)),
                "message": text,
                "logger": logger,
                "exc": _nulls(p),
                "extra": _nulls(p),
                "_corrupt": _nulls(p),
            }
        )
    if len(event_rows):
        assert msgs.broker_event is not None
        keys = msgs.routing_key.take(pa.array(event_rows)).fill_null("").to_pylist()
        groups.append(_event_group(msgs.broker_event, event_rows, keys, fallback))
    corrupt_rows = np.concatenate([bad_json, binary_rows]).astype(np.int64)
    c = len(corrupt_rows)
    if c:
        corrupt = bodies.text(bad_json).to_pylist() + [
            "base64:" + base64.b64encode(bodies.raw(int(i))).decode() for i in binary_rows
        ]
        groups.append(
            {
                "ts": pa.array(fallback[corrupt_rows], _TS),
                **{name: _nulls(c) for name in ("severity", "facility", "host", "app")},
                "pid": _nulls(c, pa.int64()),
                **{name: _nulls(c) for name in ("message", "logger", "exc", "extra")},
                "_corrupt": pa.array(corrupt, pa.string()),
            }
        )
    order = np.concatenate([good_rows, plain_rows, event_rows, corrupt_rows]).astype(np.int64)
    in_order = g == n  # every body a good record: the rows are in message order
    columns: dict[str, pa.Array] = {}
    for name in RECORD_COLUMNS:
        if name == "date":
            continue
        parts = [grp[name] for grp in groups]
        kind = schema.field(name).type
        column = parts[0] if len(parts) == 1 else pa.concat_arrays(parts) if parts else None
        if column is None:
            column = pa.nulls(0, kind)
        columns[name] = column if column.type == kind else column.cast(kind)
    columns["date"] = pc.cast(columns["ts"], pa.date32())
    indices = None if in_order else pa.array(order)
    arrays = []
    for field in schema:
        if field.name in columns:
            arrays.append(columns[field.name])
        else:
            column = keep[field.name]
            if indices is not None:
                column = column.take(indices)
            arrays.append(column if column.type == field.type else column.cast(field.type))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def _broker_lines(
    text: pa.Array, node: pa.Array, ts: Positions
) -> tuple[pa.Array, pa.Array, Positions]:
    """The broker's own log lines among plain texts (``node`` valid): their message, logger
    and time from RabbitMQ's line format; the other texts as they are."""
    texts = text.to_pylist()
    loggers: list[str | None] = [None] * len(texts)
    ts = ts.copy()
    for i in np.flatnonzero(np.asarray(node.is_valid())):
        at, loggers[i], texts[i] = broker_log_line(texts[i])
        if at is not None:
            ts[i] = at
    return pa.array(texts, pa.string()), pa.array(loggers, pa.string()), ts


def _event_group(
    events: Mapping[int, Mapping[str, str | None]],
    rows: Positions,
    keys: list[str],
    fallback: Positions,
) -> dict[str, pa.Array]:
    """The broker's events (rows ``rows``, by their headers) as records: facility broker,
    host the ``node`` header, the headers kept whole in ``extra`` (a JSON object)."""
    heads = [events[int(i)] for i in rows]
    e = len(rows)
    return {
        "ts": pa.array(
            [event_time(h, int(fallback[i])) for h, i in zip(heads, rows, strict=True)], _TS
        ),
        "severity": pa.array([EVENT_SEVERITY.get(k, "info") for k in keys], pa.string()),
        "facility": pa.repeat(BROKER_FACILITY, e),
        "host": pa.array([h.get("node") or "" for h in heads], pa.string()),
        "app": pa.repeat("", e),
        "pid": pa.array(np.zeros(e, np.int64)),
        "message": pa.array(
            [event_message(k, h) for k, h in zip(keys, heads, strict=True)], pa.string()
        ),
        "logger": _nulls(e),
        "exc": _nulls(e),
        "extra": pa.array([event_extra(h) for h in heads], pa.string()),
        "_corrupt": _nulls(e),
    }


def _or(values: pa.Array, fallback: Callable[[], Any]) -> pa.Array:
    """``values`` with its NULLs filled from ``fallback()`` (called only when needed)."""
    return values if values.null_count == 0 else pc.coalesce(values, fallback())


def _contains(data: U8, needle: bytes) -> bool:
    whole = pa.StringArray.from_buffers(
        1, pa.py_buffer(np.array([0, len(data)], np.int32)), pa.py_buffer(data)
    )
    return bool(pc.match_substring(whole, needle.decode())[0].as_py())


def _is_utf8(raw: bytes) -> bool:
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


# ----------------------------------------------------------------------------- Spark
def log_batch(
    msgs: Messages,
    exchange: pa.Array,
    node_of: Callable[[int], str | None],
    headers_of: Callable[[int], Mapping[str, Any] | None],
    kept: Mapping[str, pa.Array],
) -> pa.RecordBatch:
    """The log records (``LOG_ARROW_SCHEMA``) of ``msgs`` after the ``kept`` columns
    (``DEFAULT_KEEP``), each message published to the ``exchange`` of its row: those of the
    broker's own log and events known by their ``node`` header and their headers
    (``node_of``, ``headers_of``: see :func:`broker_nodes` and :func:`broker_events`)."""
    assert tuple(kept) == DEFAULT_KEEP
    msgs = dataclasses.replace(
        msgs,
        broker_node=broker_nodes(exchange, node_of),
        broker_event=broker_events(exchange, headers_of),
    )
    return parse(msgs, kept, LOG_ARROW_SCHEMA)


def broker_nodes(exchange: pa.Array, node_of: Callable[[int], str | None]) -> pa.Array | None:
    """Per message, the ``node`` header (``node_of(i)``; "" when it has none) of those
    published to the broker's log exchange (``amq.rabbitmq.log``), NULL for the others;
    None when no message was."""
    from_broker = pc.equal(exchange, BROKER_LOG_EXCHANGE).fill_null(False)
    if not pc.any(from_broker).as_py():
        return None
    flags = from_broker.to_pylist()
    return pa.array([(node_of(i) or "") if f else None for i, f in enumerate(flags)], pa.string())


def _broker_nodes(exchange: pa.Array | None, headers: pa.Array | None) -> pa.Array | None:
    if exchange is None:
        return None
    rows = headers.to_pylist() if headers is not None else [None] * len(exchange)

    def node_of(i: int) -> str | None:
        row = rows[i]
        return dict(row).get("node") if row else None

    return broker_nodes(exchange, node_of)


def broker_events(
    exchange: pa.Array, headers_of: Callable[[int], Mapping[str, Any] | None]
) -> dict[int, dict[str, str | None]] | None:
    """The headers (``headers_of(i)``, values as text) of the messages published to the
    broker's event exchange (``amq.rabbitmq.event``) by index; None when none was (one
    vectorised comparison: the others cost nothing)."""
    from_events = pc.equal(exchange, BROKER_EVENT_EXCHANGE).fill_null(False)
    if not pc.any(from_events).as_py():
        return None
    out: dict[int, dict[str, str | None]] = {}
    for i in np.flatnonzero(np.asarray(from_events)):
        headers = headers_of(int(i)) or {}
        out[int(i)] = {str(k): header_text(v) for k, v in headers.items()}
    return out


def _broker_events(
    exchange: pa.Array | None, headers: pa.Array | None
) -> dict[int, dict[str, str | None]] | None:
    if exchange is None:
        return None

    def headers_of(i: int) -> Mapping[str, Any] | None:
        row = headers[i].as_py() if headers is not None else None
        return dict(row) if row else None

    return broker_events(exchange, headers_of)


def records_from_messages(
    batches: Iterator[pa.RecordBatch], keep: Sequence[str], schema: pa.Schema
) -> Iterator[pa.RecordBatch]:
    """Batches of ``format("amqp")`` message rows as log records (``mapInArrow``)."""
    for batch in batches:
        if batch.num_rows == 0:
            continue
        cols = {name: batch.column(name) for name in batch.schema.names}
        ts = cols["timestamp"]
        has_ts = np.asarray(ts.is_valid())
        seconds = (
            np.asarray(pc.divide(ts.cast(pa.int64()), 1_000_000).fill_null(0)).astype(np.int64)
            if len(ts)
            else np.zeros(0, np.int64)
        )
        headers = cols.get("headers")
        stamps: tuple[Positions | None, Mask | None] = (None, None)
        if headers is not None and headers.null_count < len(headers):
            stamps = header_times(pc.map_lookup(headers, TIMESTAMP_HEADER, "first").to_pylist())
        msgs = Messages(
            broker_node=_broker_nodes(cols.get("exchange"), headers),
            broker_event=_broker_events(cols.get("exchange"), headers),
            routing_key=cols["routing_key"],
            content_type=cols["content_type"],
            timestamp=seconds,
            has_timestamp=has_ts,
            bodies=Bodies.of(cols["body"]),
            header_ms=stamps[0],
            has_header_ms=stamps[1],
        )
        yield parse(msgs, {name: cols[name] for name in keep}, schema)


__all__ = [
    "DEFAULT_KEEP",
    "RECORD_JSON",
    "Bodies",
    "Messages",
    "broker_events",
    "broker_nodes",
    "parse",
    "records_from_messages",
]
