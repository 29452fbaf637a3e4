"""Syslog, sans-IO: RFC 5424 and RFC 3164 messages (:mod:`.message`) and RFC 6587's TCP
framings (:mod:`.framing`). Bytes in, messages out; no project imports, no sockets."""

from __future__ import annotations

from leveret.protocol.syslog.framing import MAX_MESSAGE, Frame, Refused, StreamFramer
from leveret.protocol.syslog.message import (
    FACILITIES,
    SEVERITIES,
    SDElement,
    SyslogError,
    SyslogMessage,
    parse,
)

__all__ = [
    "FACILITIES",
    "MAX_MESSAGE",
    "SEVERITIES",
    "Frame",
    "Refused",
    "SDElement",
    "StreamFramer",
    "SyslogError",
    "SyslogMessage",
    "parse",
]
