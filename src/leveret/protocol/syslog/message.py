"""One syslog message, RFC 5424 or RFC 3164 (BSD syslog), parsed from its bytes.

:func:`parse` takes the bytes of one message (a UDP datagram, or one frame of a TCP
stream: see :mod:`leveret.protocol.syslog.framing`) and returns a :class:`SyslogMessage`
or raises :class:`SyslogError` with a reason a person can act on. It never raises anything
else, whatever the bytes (the fuzz tests hold it to that).

Which format: after ``<PRI>``, a ``1`` and a space is RFC 5424's VERSION; anything else is
read as RFC 3164. RFC 5424 is read strictly (its ABNF: field lengths, printable US-ASCII
header fields, RFC 3339 time, well-formed STRUCTURED-DATA). RFC 3164 describes what was
seen on the wire rather than prescribing it, so it is read as rsyslog and syslog-ng read
it: ``Mmm dd hh:mm:ss`` (or an RFC 3339 time), then a HOSTNAME unless the next word is
already the TAG (it ends with ``:`` or holds a ``[``), then ``TAG[PID]:``. A message without
a ``<PRI>`` is refused (a relay would add ``<13>``; a receiver that did so could not tell a
syslog message from anything else sent to its port).

RFC 3164's time has no year and no zone. The zone is the ``tz`` given (the receiver's local
zone by default, as rsyslog and syslog-ng assume); the year is the one, among last year,
this year and next year, that puts the time nearest to ``now`` (so a December message read
on the first of January is last year's, as rsyslog decides it).

No project imports and no I/O."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone, tzinfo

#: Facility names by number, as Python's ``SysLogHandler`` and syslog.h name them (12-15
#: have no name in syslog.h; these are the ones Python and rsyslog's docs use).
FACILITIES: tuple[str, ...] = (
    "kern", "user", "mail", "daemon", "auth", "syslog", "lpr", "news",
    "uucp", "cron", "authpriv", "ftp", "ntp", "security", "console", "solaris-cron",
    "local0", "local1", "local2", "local3", "local4", "local5", "local6", "local7",
)  # fmt: skip
#: Severity names by number (RFC 5424, table 2, as syslog.h names them).
SEVERITIES: tuple[str, ...] = (
    "emerg", "alert", "crit", "err", "warning", "notice", "info", "debug",
)  # fmt: skip

NILVALUE = "-"
_BOM = b"\xef\xbb\xbf"
_MONTHS = {
    m: i + 1
    for i, m in enumerate(
        ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
    )
}
_PRI = re.compile(rb"<(0|[1-9][0-9]{0,2})>")
# RFC 5424 6.2.3: FULL-DATE "T" FULL-TIME, TIME-SECFRAC of at most six digits, Z or offset
_RFC3339 = re.compile(
    r"([0-9]{4})-([0-9]{2})-([0-9]{2})T([0-9]{2}):([0-9]{2}):([0-9]{2})(\.[0-9]{1,6})?"
    r"(Z|[+-][0-9]{2}:[0-9]{2})\Z"
)
# RFC 3164 4.1.2: Mmm dd hh:mm:ss, the day padded with a space
_BSD_TIME = re.compile(rb"([A-Z][a-z]{2}) ([ 0-9][0-9]) ([0-9]{2}):([0-9]{2}):([0-9]{2}) ")
_RFC3339_PREFIX = re.compile(rb"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:.]+(?:Z|[+-][0-9]{2}:[0-9]{2}) ")
# a VERSION other than 1 before what reads as RFC 5424's TIMESTAMP (NILVALUE or a date)
_OTHER_VERSION = re.compile(rb"([1-9][0-9]{0,2}) (?:- |[0-9]{4}-[0-9]{2}-[0-9]{2}T)")
# RFC 5424 6: header field lengths
_LIMITS = {"HOSTNAME": 255, "APP-NAME": 48, "PROCID": 128, "MSGID": 32}
_SD_NAME_MAX = 32


class SyslogError(ValueError):
    """A message that cannot be read; ``reason`` says why, in a sentence fit for a log."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True, slots=True)
class SDElement:
    """One STRUCTURED-DATA element: its SD-ID and its parameters in the order sent (a
    name may repeat, RFC 5424 6.3.3)."""

    id: str
    params: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class SyslogMessage:
    """What a syslog message says. ``version`` is 1 for RFC 5424 and 0 for RFC 3164. A
    field the message leaves out (RFC 5424's NILVALUE, or no such part in RFC 3164) is
    None; ``timestamp`` is timezone-aware."""

    facility: int
    severity: int
    timestamp: datetime | None
    hostname: str | None
    app_name: str | None
    procid: str | None
    msgid: str | None
    structured_data: tuple[SDElement, ...]
    message: str
    version: int

    @property
    def facility_name(self) -> str:
        return FACILITIES[self.facility]

    @property
    def severity_name(self) -> str:
        return SEVERITIES[self.severity]


def parse(data: bytes, *, now: datetime | None = None, tz: tzinfo | None = None) -> SyslogMessage:
    """One message. ``now`` (aware; the present by default) and ``tz`` (the local zone by
    default) place an RFC 3164 time, which has neither year nor zone."""
    m = _PRI.match(data)
    if m is None:
        if not data:
            raise SyslogError("empty message")
        if data[:1] == b"<":
            raise SyslogError("invalid PRI: expected <0> to <191> at the start")
        raise SyslogError("no PRI: a syslog message starts with <0> to <191>")
    pri = int(m.group(1))
    if pri > 191:
        raise SyslogError(f"invalid PRI <{pri}>: the largest is <191> (local7.debug)")
    facility, severity = divmod(pri, 8)
    rest = data[m.end() :]
    if rest[:2] == b"1 ":
        return _parse_5424(facility, severity, rest[2:])
    other = _OTHER_VERSION.match(rest)
    if other is not None:
        raise SyslogError(f"unsupported syslog VERSION {other.group(1).decode()} (only 1)")
    return _parse_3164(facility, severity, rest, now, tz)


# ------------------------------------------------------------------------- RFC 5424
def _parse_5424(facility: int, severity: int, rest: bytes) -> SyslogMessage:
    fields: list[str | None] = []
    pos = 0
    names = ("TIMESTAMP", "HOSTNAME", "APP-NAME", "PROCID", "MSGID", "STRUCTURED-DATA")
    for i, name in enumerate(names[:-1]):
        end = rest.find(b" ", pos)
        if end < 0:  # each field is followed by a space and the next one
            raise SyslogError(f"RFC 5424 header ends before its {names[i + 1]}")
        token = rest[pos:end]
        pos = end + 1
        if not token:
            raise SyslogError(f"RFC 5424 {name} is empty (two spaces in the header)")
        if any(b < 33 or b > 126 for b in token):
            raise SyslogError(f"RFC 5424 {name} has a character that is not printable US-ASCII")
        text = token.decode("ascii")
        limit = _LIMITS.get(name)
        if limit is not None and len(text) > limit:
            raise SyslogError(f"RFC 5424 {name} is {len(text)} characters long (at most {limit})")
        fields.append(None if text == NILVALUE else text)
    stamp, hostname, app_name, procid, msgid = fields
    timestamp = None if stamp is None else _rfc3339(stamp, "RFC 5424 TIMESTAMP")
    sd, pos = _structured_data(rest, pos)
    if pos < len(rest):
        if rest[pos : pos + 1] != b" ":
            raise SyslogError("RFC 5424 STRUCTURED-DATA is not followed by a space")
        pos += 1
    body = rest[pos:]
    if body.startswith(_BOM):
        body = body[len(_BOM) :]
    return SyslogMessage(
        facility, severity, timestamp, hostname, app_name, procid, msgid, sd, _text(body), 1
    )


def _rfc3339(text: str, what: str) -> datetime:
    m = _RFC3339.match(text)
    if m is None:
        raise SyslogError(f"{what} {text!r} is not an RFC 3339 time (2024-05-01T12:00:00Z)")
    year, month, day, hour, minute, second = (int(m.group(i)) for i in range(1, 7))
    frac = m.group(7)
    micro = int((frac[1:] + "000000")[:6]) if frac else 0
    zone = m.group(8)
    try:
        if zone == "Z":
            offset = timedelta(0)
        else:
            hours, minutes = int(zone[1:3]), int(zone[4:6])
            if hours > 23 or minutes > 59:
                raise ValueError(zone)
            offset = timedelta(hours=hours, minutes=minutes) * (-1 if zone[0] == "-" else 1)
        return datetime(year, month, day, hour, minute, second, micro, timezone(offset))
    except ValueError:
        raise SyslogError(f"{what} {text!r} is not a valid date and time") from None


def _structured_data(data: bytes, pos: int) -> tuple[tuple[SDElement, ...], int]:
    """STRUCTURED-DATA from ``pos``: the elements and where they end."""
    if data[pos : pos + 1] == b"-":
        return (), pos + 1
    if data[pos : pos + 1] != b"[":
        raise SyslogError("RFC 5424 STRUCTURED-DATA is neither '-' nor '[...]'")
    elements: list[SDElement] = []
    n = len(data)
    while pos < n and data[pos : pos + 1] == b"[":
        pos += 1
        sd_id, pos = _sd_name(data, pos, "SD-ID")
        params: list[tuple[str, str]] = []
        while True:
            if pos >= n:
                raise SyslogError(f"RFC 5424 SD-ELEMENT [{sd_id} is not closed with ']'")
            c = data[pos : pos + 1]
            if c == b"]":
                pos += 1
                break
            if c != b" ":
                raise SyslogError(f"RFC 5424 SD-ELEMENT [{sd_id}: expected ' ' or ']'")
            pos += 1
            name, pos = _sd_name(data, pos, "PARAM-NAME")
            if data[pos : pos + 2] != b'="':
                raise SyslogError(f'RFC 5424 SD-PARAM {name} is not followed by ="value"')
            pos += 2
            value, pos = _param_value(data, pos, name)
            params.append((name, value))
        elements.append(SDElement(sd_id, tuple(params)))
    return tuple(elements), pos


def _sd_name(data: bytes, pos: int, what: str) -> tuple[str, int]:
    """SD-NAME: 1 to 32 printable US-ASCII characters but '=', ' ', ']' and '"'."""
    start = pos
    n = len(data)
    while pos < n:
        b = data[pos]
        if b < 33 or b > 126 or b in b'= ]"':
            break
        pos += 1
    if pos == start:
        raise SyslogError(f"RFC 5424 {what} is empty or starts with a character it cannot hold")
    if pos - start > _SD_NAME_MAX:
        raise SyslogError(f"RFC 5424 {what} is {pos - start} characters long (at most 32)")
    return data[start:pos].decode("ascii"), pos


def _param_value(data: bytes, pos: int, name: str) -> tuple[str, int]:
    """PARAM-VALUE up to its closing quote; ``\\"``, ``\\\\`` and ``\\]`` are escapes, a
    backslash before anything else is itself (RFC 5424 6.3.3)."""
    out = bytearray()
    n = len(data)
    while pos < n:
        b = data[pos]
        if b == 0x5C and pos + 1 < n and data[pos + 1] in b'"\\]':
            out.append(data[pos + 1])
            pos += 2
            continue
        if b == 0x22:
            try:
                return out.decode("utf-8"), pos + 1
            except UnicodeDecodeError:
                raise SyslogError(f"RFC 5424 SD-PARAM {name} is not UTF-8") from None
        out.append(b)
        pos += 1
    raise SyslogError(f"RFC 5424 SD-PARAM {name} has no closing quote")


# ------------------------------------------------------------------------- RFC 3164
def _parse_3164(
    facility: int, severity: int, rest: bytes, now: datetime | None, tz: tzinfo | None
) -> SyslogMessage:
    timestamp: datetime | None = None
    m = _BSD_TIME.match(rest)
    if m is not None:
        timestamp = _bsd_time(m, now, tz)
        rest = rest[m.end() :]
    else:
        m3339 = _RFC3339_PREFIX.match(rest)
        if m3339 is None:
            # RFC 3164 4.3.2: no valid TIMESTAMP, so no HEADER: all of it is the MSG
            return SyslogMessage(
                facility, severity, None, None, None, None, None, (), _text(rest), 0
            )
        timestamp = _rfc3339(rest[: m3339.end() - 1].decode("ascii"), "TIMESTAMP")
        rest = rest[m3339.end() :]
    hostname: str | None = None
    word_end = rest.find(b" ")
    word = rest if word_end < 0 else rest[:word_end]
    if word and not word.endswith(b":") and b"[" not in word and word_end >= 0:
        hostname = word.decode("utf-8", "replace")
        rest = rest[word_end + 1 :]
    app_name, procid, rest = _tag(rest)
    return SyslogMessage(
        facility, severity, timestamp, hostname, app_name, procid, None, (), _text(rest), 0
    )


def _tag(rest: bytes) -> tuple[str | None, str | None, bytes]:
    """``TAG[PID]: `` or ``TAG: `` at the start of the MSG: (tag, pid, the rest). A word
    followed by neither is the content's, not a tag."""
    i = 0
    n = min(len(rest), 256)
    while i < n and rest[i] not in b":[ ":
        i += 1
    if i == 0 or i >= len(rest):
        return None, None, rest
    tag = rest[:i].decode("utf-8", "replace")
    pid: str | None = None
    j = i
    if rest[j : j + 1] == b"[":
        close = rest.find(b"]", j, j + 130)
        if close < 0:
            return None, None, rest
        pid = rest[j + 1 : close].decode("utf-8", "replace")
        j = close + 1
    if rest[j : j + 1] != b":":
        return None, None, rest
    j += 1
    if rest[j : j + 1] == b" ":
        j += 1
    return tag, pid, rest[j:]


def _bsd_time(m: re.Match[bytes], now: datetime | None, tz: tzinfo | None) -> datetime:
    month = _MONTHS.get(m.group(1).decode("ascii"))
    if month is None:
        raise SyslogError(f"RFC 3164 TIMESTAMP has no month {m.group(1).decode('ascii')!r}")
    day = int(m.group(2).strip() or "0")
    hour, minute, second = int(m.group(3)), int(m.group(4)), int(m.group(5))
    if now is None:
        now = datetime.now(UTC)
    here = now.astimezone(tz)  # tz None: the local zone
    best: datetime | None = None
    for year in (here.year - 1, here.year, here.year + 1):
        try:
            naive = datetime(year, month, day, hour, minute, second)
        except ValueError:
            continue
        # without tz, astimezone() reads the naive time as local, with that date's DST
        candidate = naive.replace(tzinfo=tz) if tz is not None else naive.astimezone()
        if best is None or abs(candidate - here) < abs(best - here):
            best = candidate
    if best is None:
        stamp = m.group(0).decode("ascii").strip()
        raise SyslogError(f"RFC 3164 TIMESTAMP {stamp!r} is not a valid date and time")
    return best


def _text(body: bytes) -> str:
    """The MSG as text: UTF-8 (RFC 5424 without a BOM allows other encodings; bytes that
    are not UTF-8 become U+FFFD rather than refusing the message), without the line end
    or NUL some senders put after a datagram."""
    return body.rstrip(b"\r\n\x00").decode("utf-8", "replace")
