"""The syslog parser and TCP framer (sans-IO): literal messages from RFC 5424 and RFC 3164,
Hypothesis round trips, and fuzzing: whatever the bytes, a message or a SyslogError, never
another exception; however a stream is cut into reads, the same frames."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from leveret.protocol.syslog import (
    FACILITIES,
    SEVERITIES,
    Refused,
    SDElement,
    StreamFramer,
    SyslogError,
    SyslogMessage,
    parse,
)

NOW = datetime(2026, 1, 1, 0, 0, 30, tzinfo=UTC)


# ------------------------------------------------------------------ literal vectors
def test_rfc5424_examples() -> None:
    # RFC 5424 6.5, example 1 (with its BOM) and example 3
    m = parse(
        b"<34>1 2003-10-11T22:14:15.003Z mymachine.example.com su - ID47 - "
        b"\xef\xbb\xbf'su root' failed for lonvick on /dev/pts/8"
    )
    assert (m.facility_name, m.severity_name, m.version) == ("auth", "crit", 1)
    assert m.timestamp == datetime(2003, 10, 11, 22, 14, 15, 3000, tzinfo=UTC)
    assert (m.hostname, m.app_name, m.procid, m.msgid) == (
        "mymachine.example.com",
        "su",
        None,
        "ID47",
    )
    assert m.message == "'su root' failed for lonvick on /dev/pts/8"
    m = parse(
        b"<165>1 2003-10-11T22:14:15.003Z mymachine.example.com evntslog - ID47 [exampleSDID@32473 "
        b'iut="3" eventSource="Application" eventID="1011"] An application event log entry...'
    )
    assert m.structured_data == (
        SDElement(
            "exampleSDID@32473",
            (("iut", "3"), ("eventSource", "Application"), ("eventID", "1011")),
        ),
    )
    assert (m.facility_name, m.severity_name) == ("local4", "notice")
    # example 2: an offset, and microseconds
    m = parse(b"<165>1 2003-08-24T05:14:15.000003-07:00 192.0.2.1 myproc 8710 - - %% It's time")
    assert m.timestamp == datetime(2003, 8, 24, 12, 14, 15, 3, tzinfo=UTC)
    assert (m.procid, m.message) == ("8710", "%% It's time")


def test_rfc5424_sd_escapes_and_no_msg() -> None:
    m = parse(b'<13>1 - - - - - [a b="x\\"y\\]z\\\\w\\n"][c]')
    assert m.structured_data == (SDElement("a", (("b", 'x"y]z\\w\\n'),)), SDElement("c"))
    assert m.message == "" and m.timestamp is None and m.hostname is None


def test_rfc3164_examples() -> None:
    m = parse(b"<34>Oct 11 22:14:15 mymachine su: 'su root' failed", now=NOW, tz=UTC)
    assert (m.hostname, m.app_name, m.procid, m.version) == ("mymachine", "su", None, 0)
    # October read on the first of January: last year's
    assert m.timestamp == datetime(2025, 10, 11, 22, 14, 15, tzinfo=UTC)
    assert m.message == "'su root' failed"
    m = parse(b"<13>Jan  1 00:00:10 host cron[123]: run", now=NOW, tz=timezone(timedelta(hours=2)))
    # in the zone given: 2026-01-01 00:00:10 +02:00; "now" there is 02:00:30 the same day
    assert m.timestamp == datetime(2025, 12, 31, 22, 0, 10, tzinfo=UTC)
    assert (m.app_name, m.procid, m.message) == ("cron", "123", "run")
    m = parse(b"<13>Jan  1 00:00:10 myapp[7]: no host", now=NOW, tz=UTC)
    assert (m.hostname, m.app_name, m.procid) == (None, "myapp", "7")
    m = parse(b"<13>2026-01-01T00:00:00Z host tag: rfc3339 in a BSD message")
    assert m.timestamp == datetime(2026, 1, 1, tzinfo=UTC) and m.app_name == "tag"
    # no TIMESTAMP: RFC 3164 4.3.2, all of it is the MSG
    m = parse(b"<13>just text: no header")
    assert (m.timestamp, m.hostname, m.app_name, m.message) == (
        None,
        None,
        None,
        "just text: no header",
    )
    # a word that is not followed by ':' is the content's, not a tag
    m = parse(b"<13>Jan  1 00:00:10 host plain words", now=NOW, tz=UTC)
    assert (m.app_name, m.message) == (None, "plain words")


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"", "empty message"),
        (b"hello", "no PRI"),
        (b"<>1 -", "invalid PRI"),
        (b"<012>x", "invalid PRI"),
        (b"<192>x", "invalid PRI <192>"),
        (b"<13>2 - - - - - -", "unsupported syslog VERSION 2"),
        (b"<13>1 -", "header ends before its HOSTNAME"),
        (b"<13>1 2024-01-01 h a p m -", "not an RFC 3339 time"),
        (b"<13>1 2024-02-30T00:00:00Z h a p m -", "not a valid date"),
        (b"<13>1 - h\x01 a p m -", "not printable US-ASCII"),
        (b"<13>1 - h " + b"a" * 49 + b" p m -", "APP-NAME is 49 characters long"),
        (b"<13>1 - h a p m x", "neither '-' nor '[...]'"),
        (b"<13>1 - h a p m [id", "not closed"),
        (b'<13>1 - h a p m [id k="v]', "no closing quote"),
        (b"<13>1 - h a p m [id k=v]", 'not followed by ="value"'),
        (b'<13>1 - h a p m [id k="v"]x', "not followed by a space"),
        (b"<13>Feb 30 00:00:00 h t: m", "not a valid date"),
    ],
)
def test_malformed_messages_say_why(data: bytes, reason: str) -> None:
    with pytest.raises(SyslogError) as info:
        parse(data, now=NOW, tz=UTC)
    assert reason in info.value.reason


# ----------------------------------------------------------------------- properties
PRINT = st.text(st.characters(min_codepoint=33, max_codepoint=126), min_size=1)
HEADER = PRINT.filter(lambda s: s != "-")
SD_NAME = st.text(
    st.characters(min_codepoint=33, max_codepoint=126, blacklist_characters='= ]"'),
    min_size=1,
    max_size=32,
)


@st.composite
def rfc5424(draw: st.DrawFn) -> tuple[bytes, SyslogMessage]:
    facility = draw(st.integers(0, 23))
    severity = draw(st.integers(0, 7))
    stamp = draw(
        st.none()
        | st.datetimes(
            min_value=datetime(1971, 1, 1), max_value=datetime(9998, 1, 1), timezones=st.just(UTC)
        )
    )
    hostname = draw(st.none() | HEADER.map(lambda s: s[:255]))
    app = draw(st.none() | HEADER.map(lambda s: s[:48]))
    procid = draw(st.none() | HEADER.map(lambda s: s[:128]))
    msgid = draw(st.none() | HEADER.map(lambda s: s[:32]))
    sd = tuple(
        SDElement(i, tuple(draw(st.lists(st.tuples(SD_NAME, st.text()), max_size=3))))
        for i in draw(st.lists(SD_NAME, max_size=3))
    )
    text = draw(st.text().map(lambda t: t.rstrip("\r\n\x00")))
    out = f"<{facility * 8 + severity}>1 ".encode()
    out += (
        stamp.isoformat(timespec="microseconds").replace("+00:00", "Z") if stamp else "-"
    ).encode()
    for v in (hostname, app, procid, msgid):
        out += b" " + (v or "-").encode()
    if sd:
        out += b" "
        for e in sd:
            out += b"[" + e.id.encode()
            for k, v in e.params:
                escaped = v.replace("\\", "\\\\").replace('"', '\\"').replace("]", "\\]")
                out += b" " + k.encode() + b'="' + escaped.encode() + b'"'
            out += b"]"
    else:
        out += b" -"
    if text or draw(st.booleans()):
        out += b" " + text.encode()
    expected = SyslogMessage(facility, severity, stamp, hostname, app, procid, msgid, sd, text, 1)
    return out, expected


@given(rfc5424())
def test_rfc5424_round_trip(case: tuple[bytes, SyslogMessage]) -> None:
    data, expected = case
    assert parse(data) == expected


@given(
    st.integers(0, 191),
    st.datetimes(min_value=datetime(2000, 1, 1), max_value=datetime(2100, 1, 1)),
    st.from_regex(r"[a-z][a-z0-9.-]{0,20}", fullmatch=True),
    st.from_regex(r"[A-Za-z][A-Za-z0-9_/-]{0,30}", fullmatch=True),
    st.none() | st.integers(1, 4_000_000),
    st.text().map(lambda t: t.rstrip("\r\n\x00")),
)
def test_rfc3164_round_trip(
    pri: int, when: datetime, host: str, tag: str, pid: int | None, text: str
) -> None:
    stamp = when.strftime("%b ") + f"{when.day:2d}" + when.strftime(" %H:%M:%S")
    data = f"<{pri}>{stamp} {host} {tag}{f'[{pid}]' if pid else ''}: {text}".encode()
    now = when.replace(tzinfo=UTC) + timedelta(days=10)
    m = parse(data, now=now, tz=UTC)
    assert (m.facility, m.severity) == divmod(pri, 8)
    assert m.timestamp == when.replace(microsecond=0, tzinfo=UTC)
    assert (m.hostname, m.app_name, m.procid, m.message) == (
        host,
        tag,
        str(pid) if pid else None,
        text,
    )
    assert m.facility_name == FACILITIES[pri // 8] and m.severity_name == SEVERITIES[pri % 8]


@given(st.binary(max_size=400))
def test_any_bytes_give_a_message_or_a_reason(data: bytes) -> None:
    try:
        parse(data, now=NOW)
    except SyslogError as exc:
        assert exc.reason
    for prefix in (b"<13>1 ", b"<13>", b"<13>1 - h a p m ["):
        try:
            parse(prefix + data, now=NOW)
        except SyslogError as exc:
            assert exc.reason


# --------------------------------------------------------------------------- framing
FRAMES = st.lists(
    st.binary(min_size=1, max_size=200).filter(lambda b: b.strip(b" \t\r\n\x0b\x0c") != b""),
    max_size=8,
)


def _stream(frames: list[bytes], counted: list[bool]) -> tuple[bytes, list[bytes]]:
    out = b""
    want = []
    for frame, octets in zip(frames, counted, strict=False):
        if octets or b"\n" in frame or frame[:1] in b"\r" or frame.endswith(b"\r"):
            out += str(len(frame)).encode() + b" " + frame
        elif frame[:1].isdigit():
            # a line that starts with digits and a space would be read as a frame header
            out += str(len(frame)).encode() + b" " + frame
        else:
            out += frame + b"\n"
        want.append(frame)
    return out, want


@given(FRAMES, st.lists(st.booleans(), min_size=8, max_size=8), st.data())
def test_frames_survive_any_cut_of_the_stream(
    frames: list[bytes], counted: list[bool], data: st.DataObject
) -> None:
    stream, want = _stream(frames, counted)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=6)))
    framer = StreamFramer()
    got: list[bytes | Refused] = []
    start = 0
    for cut in [*cuts, len(stream)]:
        got += framer.feed(stream[start:cut])
        start = cut
    got += framer.close()
    assert got == want


@given(st.binary(max_size=600), st.lists(st.integers(0, 600), max_size=5))
def test_any_stream_frames_without_error(stream: bytes, cuts: list[int]) -> None:
    framer = StreamFramer(max_size=100)
    start = 0
    out: list[bytes | Refused] = []
    for cut in [*sorted(c for c in cuts if c <= len(stream)), len(stream)]:
        out += framer.feed(stream[start:cut])
        start = cut
    out += framer.close()
    for item in out:
        assert isinstance(item, Refused) or len(item) <= 100


def test_oversized_frames_are_refused_and_the_stream_goes_on() -> None:
    framer = StreamFramer(max_size=10)
    out = framer.feed(b"20 " + b"x" * 20 + b"5 hello" + b"y" * 30)
    assert out[0] == Refused("octet-counted frame of 20 octets is over the limit of 10", 20)
    assert out[1] == b"hello"
    assert out[2].reason.startswith("line of more than 10 octets")  # type: ignore[union-attr]
    assert framer.feed(b"yyy\nok\n") == [b"ok"]
    assert framer.feed(b"9 cut") == []
    (cut,) = framer.close()
    assert isinstance(cut, Refused) and "3 of 9 octets" in cut.reason
