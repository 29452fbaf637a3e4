"""The log record: one JSON document per record, and the severities.

A record is ``{"ts", "severity", "facility", "host", "app", "pid", "message"}`` plus the
optional ``logger``, ``exc`` and ``extra``. ``ts`` is RFC 3339 in UTC with a ``Z``. On the
wire its content type is ``application/json``. How a delivery (a record, plain text from
another producer, a broker event) becomes a record is :mod:`leveret.logs.reading`.
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
    # syslog's and RabbitMQ's own levels (the routing keys of its log exchange)
    "notice": "info",
    "alert": "critical",
    "emerg": "critical",
    "emergency": "critical",
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
    #: any JSON value (an object, from the logging handler's extra fields)
    extra: Any = None

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
        if self.extra is not None:
            doc["extra"] = self.extra
        return doc

    def to_json(self) -> bytes:
        """The record as one line of compact UTF-8 JSON (no newline)."""
        return json.dumps(
            self.to_dict(), ensure_ascii=False, separators=(",", ":"), default=_json_default
        ).encode()


#: ``error: disk full``: a severity word (or alias) and a colon at the start of a text (the
#: tutorial's convention), and the spaces after it.
SEVERITY_PREFIX = re.compile(
    r"\s*(" + "|".join(sorted((*SEVERITIES, *ALIASES), key=len, reverse=True)) + r")\s*:\s*",
    re.IGNORECASE,
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
