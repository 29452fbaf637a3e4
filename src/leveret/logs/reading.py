"""How a message becomes a log record: the one definition every reader uses.

``leveret receive-logs`` (its file and its terminal), the dashboard's Logs view and the
lake's Spark parser (:mod:`leveret.spark.logparse`, which does the same in bulk, in Arrow,
and is tested against this module message for message) read a message so:

- **The broker's events** (exchange ``amq.rabbitmq.event``: an empty body, the event in the
  routing key, its details in headers) are records of facility ``broker``: host the
  ``node`` header, severity ``warning`` for a failed login and ``info`` otherwise, a
  one-line message (``queue.created name=orders vhost=/ by guest``), every header in
  ``extra``.
- **A JSON record**: a body with content type ``application/json``, or one whose first
  character (after spaces) is ``{``, is a record when it is a JSON object whose fields
  have their types: ``message`` a string (required); ``ts`` an ISO-8601 time (Arrow's
  grammar: ``2024-05-01T12:00:00.123456Z``, a space for the ``T``, an offset such as
  ``+02:00``, or a bare date); ``severity`` one of the severities or their aliases, any
  case; ``pid`` an integer; ``facility``, ``host``, ``app``, ``logger``, ``exc`` strings;
  any of them null or absent; ``extra`` any JSON. Other fields are ignored.
- **Plain text**: any other UTF-8 body (the tutorial's ``emit_log.py`` sends such). Its text
  is the message; its severity is the routing key's when that names one, else its
  ``severity: message`` prefix, else ``info``; a ``facility.severity`` key gives the
  facility. A line of the broker's own log (exchange ``amq.rabbitmq.log``, RabbitMQ's
  ``log.exchange``) is facility ``broker``, host its ``node`` header, and its
  ``2026-11-28 23:18:31.040518+00:00 [info] <logger> `` prefix gives the time and the
  logger, not the message.
- **Malformed**: a JSON body that is not such a record, or a body that is not UTF-8, is kept
  whole as :class:`Malformed` (its text, or ``base64:`` and its base64): never dropped,
  never turned into an invented record.

**A record's time** is its own ``ts`` when it has one (the line's time for the broker's
log). Otherwise it is the message's time, the same for every reader:

1. the ``timestamp`` property, when the producer set it (whole seconds);
2. else the ``timestamp_in_ms`` header: the broker's arrival time in milliseconds, which
   RabbitMQ 3.12+ and Leveret add with ``message_interceptors.incoming.
   set_header_timestamp`` (``leveret up`` turns it on) and which RabbitMQ's event exchange
   puts on its events; a ``timestamp`` property of the same second is the same time;
3. else the broker's arrival time as the transport tells it (a stream chunk's timestamp,
   what the lake reads);
4. else the time the reader received the message.
"""

from __future__ import annotations

import base64
import json
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from leveret.logs.record import (
    ALIASES,
    BROKER_EVENT_EXCHANGE,
    BROKER_LOG_EXCHANGE,
    DEFAULT_FACILITY,
    SEVERITIES,
    Record,
    severity_prefix,
)

JSON_CONTENT_TYPE = "application/json"
BROKER_FACILITY = "broker"
#: The header of the broker's arrival time (ms): RabbitMQ's message interceptor
#: ``set_header_timestamp`` and its event exchange both set it.
TIMESTAMP_HEADER = "timestamp_in_ms"
#: The header a stream's consumers get with each message: not part of an event.
STREAM_OFFSET_HEADER = "x-stream-offset"
#: Events that report a failure; the others are info.
EVENT_SEVERITY = {"user.authentication.failure": "warning"}
#: The microseconds since the epoch a time may have: years 1 to 9999, as RFC 3339 and the
#: readers of the lake (Python's datetime, pandas, Spark) take them.
MIN_US = -62135596800_000_000
MAX_US = 253402300799_999_999


@dataclass(frozen=True, slots=True)
class Envelope:
    """What a reader knows of a message besides its body."""

    routing_key: str = ""
    exchange: str = ""
    content_type: str | None = None
    headers: Mapping[str, Any] | None = None
    #: the AMQP ``timestamp`` property: whole seconds since the epoch
    timestamp: int | None = None
    #: the broker's arrival time (ms) when the transport carries it: a stream chunk's
    arrival_ms: int | None = None


@dataclass(frozen=True, slots=True)
class Malformed:
    """A body no reader can take for a record, kept whole: its UTF-8 text, or ``base64:``
    and its base64. ``ts`` is the message's time."""

    ts: str
    body: str

    def to_dict(self) -> dict[str, Any]:
        """As the lake keeps it: the time and the ``_corrupt`` body."""
        return {"ts": self.ts, "_corrupt": self.body}

    def to_json(self) -> bytes:
        return json.dumps(self.to_dict(), ensure_ascii=False, separators=(",", ":")).encode()


Entry = Record | Malformed


# ------------------------------------------------------------------------ words
def severity_word(word: str | None) -> str | None:
    """A severity word normalised (``WARN`` -> ``warning``); None if it is not one."""
    if word is None:
        return None
    w = word.strip().lower()
    w = ALIASES.get(w, w)
    return w if w in SEVERITIES else None


def key_parts(key: str) -> tuple[str | None, str]:
    """(severity, facility) a routing key names: ``error`` or ``kern.error``; the severity
    is None when the key names none."""
    facility, _, last = key.rpartition(".")
    return severity_word(last), facility or DEFAULT_FACILITY


# ------------------------------------------------------------------------ times
#: Arrow's ISO-8601 timestamps (what the lake's parser takes): a date, then optionally
#: ``T`` or a space and hours, minutes, seconds and up to six decimals, and a zone.
_ISO = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})"
    r"(?:[T ](\d{2})(?::(\d{2})(?::(\d{2})(?:\.(\d{1,6}))?)?)?"
    r"(Z|[+-]\d{2}(?::?\d{2})?)?)?"
)
_MONTH_DAYS = (31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)


def _leap(year: int) -> bool:
    return year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)


def _days_from_civil(y: int, m: int, d: int) -> int:
    # days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's algorithm)
    y -= m <= 2
    era = y // 400
    yoe = y - era * 400
    doy = (153 * (m + (-3 if m > 2 else 9)) + 2) // 5 + d - 1
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    return era * 146097 + doe - 719468


def _civil_from_days(z: int) -> tuple[int, int, int]:
    z += 719468
    era = z // 146097
    doe = z - era * 146097
    yoe = (doe - doe // 1460 + doe // 36524 - doe // 146096) // 365
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    d = doy - (153 * mp + 2) // 5 + 1
    m = mp + (3 if mp < 10 else -9)
    return yoe + era * 400 + (m <= 2), m, d


def parse_time(text: str) -> int | None:
    """An ISO-8601 time as microseconds since the epoch, by Arrow's grammar (what the lake
    accepts); None when it is not one."""
    m = _ISO.fullmatch(text)
    if m is None:
        return None
    year, month, day = int(m[1]), int(m[2]), int(m[3])
    if not 1 <= month <= 12:
        return None
    last = 29 if month == 2 and _leap(year) else _MONTH_DAYS[month - 1]
    if not 1 <= day <= last:
        return None
    hour, minute, second = int(m[4] or 0), int(m[5] or 0), int(m[6] or 0)
    if hour > 23 or minute > 59 or second > 59:
        return None
    micros = int((m[7] or "").ljust(6, "0"))
    offset = 0
    zone = m[8]
    if zone and zone != "Z":
        digits = zone[1:].replace(":", "")
        oh, om = int(digits[:2]), int(digits[2:] or 0)
        if oh > 23 or om > 59:
            return None
        offset = (oh * 60 + om) * 60 * (1 if zone[0] == "+" else -1)
    seconds = _days_from_civil(year, month, day) * 86400 + hour * 3600 + minute * 60 + second
    us = (seconds - offset) * 1_000_000 + micros
    return us if MIN_US <= us <= MAX_US else None


def format_time(micros: int) -> str:
    """Microseconds since the epoch as RFC 3339 in UTC: ``2024-05-01T12:00:00.123456Z``."""
    days, rest = divmod(micros, 86_400_000_000)
    y, mo, d = _civil_from_days(days)
    seconds, us = divmod(rest, 1_000_000)
    h, rem = divmod(seconds, 3600)
    mi, s = divmod(rem, 60)
    return f"{y:04d}-{mo:02d}-{d:02d}T{h:02d}:{mi:02d}:{s:02d}.{us:06d}Z"


def header_ms(headers: Mapping[str, Any] | None) -> int | None:
    """The ``timestamp_in_ms`` header as milliseconds: an integer, or its decimal text (as
    the lake's header columns carry it); None when absent or not a time."""
    if not headers:
        return None
    value = headers.get(TIMESTAMP_HEADER)
    if isinstance(value, bytes):
        value = value.decode("ascii", "replace")
    if isinstance(value, str) and re.fullmatch(r"-?\d{1,18}", value):
        value = int(value)
    if isinstance(value, int) and not isinstance(value, bool) and MIN_US <= value * 1000 <= MAX_US:
        return value
    return None


def message_time(envelope: Envelope, received_us: int) -> int:
    """The message's time in microseconds (see the module docstring)."""
    header = header_ms(envelope.headers)
    stamp = envelope.timestamp
    if stamp is not None and not MIN_US <= stamp * 1_000_000 <= MAX_US:
        stamp = None  # not a time a record can have
    if stamp is not None and (header is None or header // 1000 != stamp):
        return stamp * 1_000_000
    if header is not None:
        return header * 1000
    if envelope.arrival_ms is not None:
        return envelope.arrival_ms * 1000
    return received_us


# ------------------------------------------------------------------------ the broker's
def event_message(key: str, headers: Mapping[str, str | None]) -> str:
    """One line for a broker event: what happened, to what, and who did it
    (``queue.created name=orders vhost=/ by guest``)."""
    words = [key]
    for field in ("name", "source_name", "destination_name", "vhost"):
        value = headers.get(field)
        if value is not None:
            words.append(f"{field}={value}")
    who = headers.get("user_who_performed_action") or headers.get("user")
    if who is None and key.startswith("user.authentication."):
        who = headers.get("name")  # the user who logged in, or tried to
    if who:
        words.append(f"by {who}")
    peer = headers.get("peer_host")
    if peer and key.startswith(("user.authentication.", "connection.")):
        words.append(f"from {peer}")
    return " ".join(words)


def header_text(value: Any) -> str | None:
    """A header value as text: bytes as UTF-8, booleans as ``true``/``false``, tables and
    arrays as their repr (the lake's header columns hold text)."""
    if value is None:
        return None
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).decode("utf-8", "replace")
    if isinstance(value, bool):
        return "true" if value else "false"
    if hasattr(value, "isoformat"):
        return str(value.isoformat())
    return str(value)


def event_extra(headers: Mapping[str, str | None]) -> str:
    """An event's headers as the JSON object the lake's ``extra`` keeps."""
    kept = {k: v for k, v in headers.items() if k != STREAM_OFFSET_HEADER}
    return json.dumps(kept, ensure_ascii=False, separators=(",", ":"))


def event_time(headers: Mapping[str, str | None], fallback: int) -> int:
    ms = header_ms(headers)
    return fallback if ms is None else ms * 1000


#: A line of the broker's own log: RabbitMQ's text format, which Leveret's writes too.
_LOG_LINE = re.compile(
    r"(\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}(?:\.\d{1,6})?(?:Z|[+-]\d{2}:\d{2})?)"
    r" \[[a-z]+\] <([^>\n]*)> ?"
)


def broker_log_line(text: str) -> tuple[int | None, str | None, str]:
    """(time in µs, logger, message) of a body of the broker's log exchange: the time and
    the ``<logger>`` of its first line, and its lines without that prefix (a multi-line
    message repeats it on each) and without the newline that ends it. A body that is not
    in that format is its own message."""
    lines = text.rstrip("\n").split("\n")
    first = _LOG_LINE.match(lines[0])
    if first is None:
        return None, None, text
    prefix = first.group(0)
    out = [line[len(prefix) :] if line.startswith(prefix) else line for line in lines]
    return parse_time(first.group(1)), first.group(2), "\n".join(out)


# ------------------------------------------------------------------------ reading
_RECORD_STRINGS = ("severity", "facility", "host", "app", "message", "logger", "exc")
_RECORD_FIELDS = frozenset((*_RECORD_STRINGS, "ts", "pid"))
_INT64 = (-(2**63), 2**63 - 1)


class _Duplicate(ValueError):
    pass


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    doc: dict[str, Any] = {}
    for key, value in pairs:
        if key in doc and key in _RECORD_FIELDS:
            raise _Duplicate(key)  # the lake's parser refuses a field given twice
        doc[key] = value
    return doc


def _no_constant(name: str) -> Any:
    raise ValueError(name)  # NaN and Infinity are not JSON


def _json_record(text: str, key: tuple[str | None, str], fallback: int) -> Record | None:
    try:
        doc = json.loads(text, object_pairs_hook=_pairs, parse_constant=_no_constant)
    except (ValueError, RecursionError):
        return None
    if not isinstance(doc, dict):
        return None
    for name in _RECORD_STRINGS:
        value = doc.get(name)
        if value is not None and not isinstance(value, str):
            return None
    message = doc.get("message")
    if message is None:
        return None
    pid = doc.get("pid")
    if pid is not None and (
        not isinstance(pid, int) or isinstance(pid, bool) or not _INT64[0] <= pid <= _INT64[1]
    ):
        return None
    raw_ts = doc.get("ts")
    if raw_ts is None:
        ts = fallback
    elif isinstance(raw_ts, str):
        parsed = parse_time(raw_ts)
        if parsed is None:
            return None
        ts = parsed
    else:
        return None
    key_severity, key_facility = key
    given = doc.get("severity")
    if given is not None:
        severity = severity_word(given)
        if severity is None:
            return None
    else:
        severity = key_severity or "info"
    facility = doc.get("facility")
    return Record(
        ts=format_time(ts),
        severity=severity,
        facility=key_facility if facility is None else facility,
        host=doc.get("host") or "",
        app=doc.get("app") or "",
        pid=pid or 0,
        message=message,
        logger=doc.get("logger"),
        exc=doc.get("exc"),
        extra=doc.get("extra"),
    )


def _is_json(body: bytes, content_type: str | None) -> bool:
    if content_type == JSON_CONTENT_TYPE:
        return True
    if body[:1] in (b" ", b"\t", b"\n", b"\r"):
        body = body.lstrip()
    return body[:1] == b"{"


def read(body: bytes, envelope: Envelope, received: float | None = None) -> Entry:
    """The record (or the malformed body) a message carries; ``received``: when the reader
    got it (seconds since the epoch; now by default), the time of last resort."""
    received_us = int((time.time() if received is None else received) * 1_000_000)
    fallback = message_time(envelope, received_us)
    if envelope.exchange == BROKER_EVENT_EXCHANGE:
        headers = {str(k): header_text(v) for k, v in (envelope.headers or {}).items()}
        key = envelope.routing_key
        return Record(
            ts=format_time(event_time(headers, fallback)),
            severity=EVENT_SEVERITY.get(key, "info"),
            facility=BROKER_FACILITY,
            host=headers.get("node") or "",
            app="",
            pid=0,
            message=event_message(key, headers),
            extra=json.loads(event_extra(headers)),
        )
    body = bytes(body)
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        return Malformed(format_time(fallback), "base64:" + base64.b64encode(body).decode())
    severity, facility = key_parts(envelope.routing_key)
    from_broker = envelope.exchange == BROKER_LOG_EXCHANGE
    if from_broker:
        facility = BROKER_FACILITY
    if _is_json(body, envelope.content_type):
        if not text.strip():
            return Malformed(format_time(fallback), text)
        record = _json_record(text, (severity, facility), fallback)
        return record if record is not None else Malformed(format_time(fallback), text)
    severity = severity or severity_prefix(text) or "info"
    host, logger, message, ts = "", None, text, fallback
    if from_broker:
        node = (envelope.headers or {}).get("node")
        host = header_text(node) or ""
        line_ts, logger, message = broker_log_line(text)
        if line_ts is not None:
            ts = line_ts
    return Record(
        ts=format_time(ts),
        severity=severity,
        facility=facility,
        host=host,
        app="",
        pid=0,
        message=message,
        logger=logger,
    )
