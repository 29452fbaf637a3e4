"""The log record: one JSON document per record, and how a delivery becomes a record.

A record is ``{"ts", "severity", "facility", "host", "app", "pid", "message"}`` plus the
optional ``logger``, ``exc`` and ``extra``. ``ts`` is RFC 3339 in UTC with a ``Z``. On the
wire its content type is ``application/json``; a plain-text body from another producer (the
tutorial's ``emit_log.py``) is accepted too and becomes a record whose message is the text.
"""

from __future__ import annotations

import json
import os
import re
import socket
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

CONTENT_TYPE = "application/json"

#: The severities, lowest first: Python's logging levels, as the tutorial's routing keys.
#: This module owns them (and their aliases and the ``severity: message`` convention):
#: emitters, receivers, the Spark parser and the dashboard all read them from here.
SEVERITIES: tuple[str, ...] = ("debug", "info", "warning", "error", "critical")
ALIASES: Mapping[str, str] = {
    "warn": "warning",
    "err": "error",
    "crit": "critical",
    "fatal": "critical",
}
_ALIASES = ALIASES
#: The severities the reports and the dashboard count as errors.
ERROR_SEVERITIES: tuple[str, ...] = ("error", "critical")

DEFAULT_FACILITY = "user"

#: Where a broker publishes its own log lines (RabbitMQ's ``log.exchange``; the routing key
#: is the severity) and its events (``rabbitmq_event_exchange``): what ``leveret up`` binds
#: into the lake, and the records the parser files under facility ``broker``.
BROKER_LOG_EXCHANGE = "amq.rabbitmq.log"
BROKER_EVENT_EXCHANGE = "amq.rabbitmq.event"

HOST = socket.gethostname()
PID = os.getpid()


def normalize_severity(value: str) -> str:
    """``"WARN"`` -> ``"warning"``; ValueError for anything that is not a severity."""
    v = value.strip().lower()
    v = _ALIASES.get(v, v)
    if v not in SEVERITIES:
        raise ValueError(f"unknown severity {value!r}; use one of {', '.join(SEVERITIES)}")
    return v


def check_facility(value: str) -> str:
    """A facility is one word of a topic routing key: not empty, no dots, no wildcards."""
    if not value or any(c in value for c in ".*#") or len(value) > 200:
        raise ValueError(
            f"invalid facility {value!r}: one word, without '.', '*' or '#' (e.g. kern, auth)"
        )
    return value


def severity_for_level(levelno: int) -> str:
    """The severity of a ``logging`` level number (custom levels round up)."""
    if levelno <= 10:
        return "debug"
    if levelno <= 20:
        return "info"
    if levelno <= 30:
        return "warning"
    if levelno <= 40:
        return "error"
    return "critical"


def rfc3339(epoch: float | None = None) -> str:
    """``2024-05-01T12:00:00.123456Z``: RFC 3339, UTC, microseconds."""
    t = time.time() if epoch is None else epoch
    return datetime.fromtimestamp(t, UTC).isoformat(timespec="microseconds")[:-6] + "Z"


def _json_default(value: object) -> str:
    # extra fields come from applications: anything JSON cannot encode is shown as its repr
    return repr(value)


@dataclass(frozen=True, slots=True)
class Record:
    """One log record, as it travels between emitters and receivers."""

    ts: str
    severity: str
    facility: str
    host: str
    app: str
    pid: int
    message: str
    logger: str | None = None
    exc: str | None = None
    extra: Mapping[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "ts": self.ts,
            "severity": self.severity,
            "facility": self.facility,
            "host": self.host,
            "app": self.app,
            "pid": self.pid,
            "message": self.message,
        }
        if self.logger is not None:
            doc["logger"] = self.logger
        if self.exc is not None:
            doc["exc"] = self.exc
        if self.extra:
            doc["extra"] = dict(self.extra)
        return doc

    def to_json(self) -> bytes:
        """The record as one line of compact UTF-8 JSON (no newline)."""
        return json.dumps(
            self.to_dict(), ensure_ascii=False, separators=(",", ":"), default=_json_default
        ).encode()

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any], routing_key: str = "") -> Record:
        """A record from a decoded document; missing or mistyped fields get defaults."""
        key_severity, key_facility = _from_routing_key(routing_key)
        extra = doc.get("extra")
        pid = doc.get("pid")
        return cls(
            ts=_str(doc.get("ts")) or rfc3339(),
            severity=_str(doc.get("severity")) or key_severity,
            facility=_str(doc.get("facility")) or key_facility,
            host=_str(doc.get("host")),
            app=_str(doc.get("app")),
            pid=pid if isinstance(pid, int) and not isinstance(pid, bool) else 0,
            message=_str(doc.get("message")),
            logger=_opt_str(doc.get("logger")),
            exc=_opt_str(doc.get("exc")),
            extra=extra if isinstance(extra, dict) and extra else None,
        )

    @classmethod
    def from_body(
        cls,
        body: bytes,
        content_type: str | None = None,
        routing_key: str = "",
        timestamp: int | None = None,
    ) -> Record:
        """The record a delivery carries. A JSON object with a ``message`` is a record; any
        other body is plain text from another producer: its text is the message; the
        severity comes from the routing key when it names one (``error``, ``kern.error``),
        else from the text's ``severity: message`` prefix (the tutorial's convention,
        ``error: disk full on /var``), else it is ``info``; a ``facility.severity`` key
        gives the facility."""
        if content_type == CONTENT_TYPE or body[:1] == b"{":
            try:
                doc = json.loads(body)
            except ValueError:
                doc = None
            if isinstance(doc, dict) and "message" in doc:
                return cls.from_dict(doc, routing_key)
        text = body.decode("utf-8", "replace")
        severity, facility = _from_routing_key(routing_key)
        if not _names_severity(routing_key):
            severity = severity_prefix(text) or severity
        return cls(
            ts=rfc3339(float(timestamp)) if timestamp is not None else rfc3339(),
            severity=severity,
            facility=facility,
            host="",
            app="",
            pid=0,
            message=text,
        )


def _str(value: object) -> str:
    return value if isinstance(value, str) else ""


def _opt_str(value: object) -> str | None:
    return value if isinstance(value, str) else None


#: ``error: disk full``: a severity word (or alias) and a colon at the start of a text (the
#: tutorial's convention), and the spaces after it.
SEVERITY_PREFIX = re.compile(
    r"\s*(debug|info|warning|warn|error|err|critical|crit|fatal)\s*:\s*", re.IGNORECASE
)


def severity_prefix(text: str) -> str | None:
    """The severity a plain-text message names in its ``severity: message`` prefix."""
    m = SEVERITY_PREFIX.match(text)
    if m is None:
        return None
    word = m.group(1).lower()
    return _ALIASES.get(word, word)


def split_severity_prefix(text: str) -> tuple[str | None, str]:
    """``"error: disk full"`` -> ``("error", "disk full")``; a text without the prefix is
    ``(None, text)``."""
    m = SEVERITY_PREFIX.match(text)
    if m is None:
        return None, text
    word = m.group(1).lower()
    return _ALIASES.get(word, word), text[m.end() :]


def _names_severity(key: str) -> bool:
    word = key.rpartition(".")[2].lower()
    return _ALIASES.get(word, word) in SEVERITIES


def _from_routing_key(key: str) -> tuple[str, str]:
    """(severity, facility) read from a routing key: ``error`` (direct) or ``kern.error``
    (topic); ``info`` and the default facility when the key says nothing."""
    if not key:
        return "info", DEFAULT_FACILITY
    facility, _, severity = key.rpartition(".")
    severity = _ALIASES.get(severity.lower(), severity.lower())
    if severity not in SEVERITIES:
        return "info", facility or DEFAULT_FACILITY
    return severity, facility or DEFAULT_FACILITY
