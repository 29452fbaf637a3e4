"""Fuzzing a live broker: Hypothesis strategies for AMQP sessions that start valid and are
then mutated (frames, method arguments, field tables, content headers, heartbeats, how the
bytes are cut into sends), and the witnesses every case is checked against: a Leveret of
the test's own whose log must stay free of tracebacks, a consumer connection with
messages waiting and a durable queue of persistent messages that must stay untouched.

Used by tests/server/test_fuzz_amqp.py, tests/server/test_fuzz_amqp10.py and
tests/management/test_fuzz_api.py. The in-suite runs are small and derandomized;
``LEVERET_FUZZ_EXAMPLES`` (and ``LEVERET_FUZZ_SECONDS``) turn them into a campaign that
records every distinct failure instead of stopping at the first (see :class:`Campaign`)."""

from __future__ import annotations

import functools
import inspect
import itertools
import json
import os
import socket
import struct
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis import strategies as st
from pamqp import commands

from tests.support.brokers import BrokerUnderTest, start_leveret
from tests.support.mgmt import Api
from tests.support.rawclient import PROTOCOL_HEADER, RawClient

C = commands
FRAME_END = 0xCE

# ------------------------------------------------------------------ the campaign knobs
CAMPAIGN_EXAMPLES = int(os.environ.get("LEVERET_FUZZ_EXAMPLES", "0"))
CAMPAIGN_SECONDS = float(os.environ.get("LEVERET_FUZZ_SECONDS", "3600"))
CAMPAIGN_DIR = Path(os.environ.get("LEVERET_FUZZ_DIR", "fuzz-campaign"))


def in_suite_settings(examples: int, *also: HealthCheck) -> settings:
    """Hypothesis settings of an in-suite fuzzing run: ``examples`` cases, the same ones on
    every run (derandomized, no example database), no deadline (a broker under load may be
    slow to answer), and the health checks that big, slow cases trip (and ``also``) off."""
    return settings(
        max_examples=examples,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, *also],
    )


# ---------------------------------------------------------------- the client's methods
@dataclass(frozen=True)
class MethodSpec:
    name: str
    index: int
    fields: tuple[tuple[str, str], ...]  # (name, AMQP type)


def _client_methods() -> list[MethodSpec]:
    out = []
    for cname in ("Connection", "Channel", "Exchange", "Queue", "Basic", "Tx", "Confirm"):
        cls = getattr(C, cname)
        for _, m in inspect.getmembers(cls, inspect.isclass):
            if hasattr(m, "index") and hasattr(m, "__slots__"):
                out.append(
                    MethodSpec(m.name, m.index, tuple((s, m.amqp_type(s)) for s in m.__slots__))
                )
    out.append(
        MethodSpec(
            "Access.Request",
            0x001E000A,
            (
                ("realm", "shortstr"),
                ("exclusive", "bit"),
                ("passive", "bit"),
                ("active", "bit"),
                ("write", "bit"),
                ("read", "bit"),
            ),
        )
    )
    return sorted(out, key=lambda s: s.name)


METHODS = {s.name: s for s in _client_methods()}
# What a client sends once the connection is open (server-only ones too, now and then).
CHANNEL_METHODS = [
    "Exchange.Declare",
    "Exchange.Delete",
    "Exchange.Bind",
    "Exchange.Unbind",
    "Queue.Declare",
    "Queue.Bind",
    "Queue.Unbind",
    "Queue.Purge",
    "Queue.Delete",
    "Basic.Qos",
    "Basic.Consume",
    "Basic.Cancel",
    "Basic.Get",
    "Basic.Ack",
    "Basic.Nack",
    "Basic.Reject",
    "Basic.Recover",
    "Basic.RecoverAsync",
    "Channel.Flow",
    "Channel.FlowOk",
    "Channel.Close",
    "Channel.CloseOk",
    "Channel.Open",
    "Tx.Select",
    "Tx.Commit",
    "Tx.Rollback",
    "Confirm.Select",
    "Access.Request",
]
OTHER_METHODS = sorted(set(METHODS) - set(CHANNEL_METHODS))

NAMES = [
    "fz-q",
    "fz-x",
    "fz-q2",
    "fz-x2",
    "",
    "amq.direct",
    "amq.fanout",
    "amq.topic",
    "amq.headers",
    "amq.default",
    "amq.rabbitmq.trace",
    "amq.gen-x",
    "fz-\u00e9",
    "fz\r\n",
    "x" * 255,
    "fz-stream",
    "witness",
    "fz-dlx",
]
# The queue arguments both fuzzers (AMQP 0-9-1 tables, the management API's bodies) try.
QUEUE_ARGUMENT_KEYS = [
    "x-message-ttl",
    "x-expires",
    "x-max-length",
    "x-max-length-bytes",
    "x-overflow",
    "x-dead-letter-exchange",
    "x-dead-letter-routing-key",
    "x-max-priority",
    "x-queue-mode",
    "x-queue-type",
]
# and the other table keys RabbitMQ reads somewhere
ARGUMENT_KEYS = [
    *QUEUE_ARGUMENT_KEYS,
    "x-queue-version",
    "x-single-active-consumer",
    "alternate-exchange",
    "x-match",
    "x-priority",
    "x-cancel-on-ha-failover",
    "x-stream-offset",
    "x-max-age",
    "x-stream-max-segment-size-bytes",
    "x-quorum-initial-group-size",
    "capabilities",
    "publisher_confirms",
    "consumer_cancel_notify",
    "connection.blocked",
    "authentication_failure_close",
    "basic.nack",
    "product",
    "x-credit",
    "BCC",
    "CC",
]
STRING_VALUES = [
    b"",
    b"fz-x",
    b"fz-q",
    b"stream",
    b"classic",
    b"quorum",
    b"lazy",
    b"default",
    b"drop-head",
    b"reject-publish",
    b"reject-publish-dlx",
    b"all",
    b"any",
    b"first",
    b"last",
    b"next",
    b"1D",
    b"10s",
    b"\xff\xfe",
    b"amq.direct",
    "\u00e9\u4e2d".encode(),
]


# --------------------------------------------------------------------- encoding
def shortstr(data: bytes) -> bytes:
    return bytes([len(data) & 0xFF]) + data[:255]


def longstr(data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + data


@functools.cache
def text_bytes() -> st.SearchStrategy[bytes]:
    return st.one_of(
        st.sampled_from(STRING_VALUES),
        st.binary(max_size=24),
        st.text(max_size=12).map(lambda t: t.encode("utf-8", "surrogatepass")),
    )


@functools.cache
def name_bytes() -> st.SearchStrategy[bytes]:
    return st.one_of(st.sampled_from(NAMES).map(str.encode), st.binary(max_size=20))


INT_FORMATS = {
    "b": ">b",
    "B": ">B",
    "s": ">h",
    "u": ">H",
    "I": ">i",
    "i": ">I",
    "l": ">q",
    "L": ">Q",
    "T": ">Q",
}
INT_RANGES = {
    "b": (-128, 127),
    "B": (0, 255),
    "s": (-(2**15), 2**15 - 1),
    "u": (0, 2**16 - 1),
    "I": (-(2**31), 2**31 - 1),
    "i": (0, 2**32 - 1),
    "l": (-(2**63), 2**63 - 1),
    "L": (0, 2**64 - 1),
    "T": (0, 2**64 - 1),
}


@functools.cache
def _int_value(tag: str) -> st.SearchStrategy[bytes]:
    lo, hi = INT_RANGES[tag]
    fmt = INT_FORMATS[tag]
    edges = [v for v in (0, 1, -1, 5, 255, 1000, lo, hi) if lo <= v <= hi]
    ints = st.one_of(st.integers(lo, hi), st.sampled_from(edges))
    return ints.map(lambda v: tag.encode() + struct.pack(fmt, v))


@functools.cache
def field_value(depth: int = 2) -> st.SearchStrategy[bytes]:
    scalars = [
        st.sampled_from([b"t\x00", b"t\x01", b"t\x07"]),
        *[_int_value(tag) for tag in INT_FORMATS],
        st.floats(width=32, allow_nan=True).map(lambda f: b"f" + struct.pack(">f", f)),
        st.floats(allow_nan=True).map(lambda f: b"d" + struct.pack(">d", f)),
        st.tuples(st.integers(0, 255), st.integers(-(2**31), 2**31 - 1)).map(
            lambda t: b"D" + struct.pack(">Bi", *t)
        ),
        text_bytes().map(lambda b: b"S" + longstr(b)),
        st.binary(max_size=16).map(lambda b: b"x" + longstr(b)),
        st.just(b"V"),
    ]  # tags no parser knows come from the frame-level mutations
    if depth <= 0:
        return st.one_of(scalars)
    return st.one_of(
        *scalars,
        st.lists(field_value(depth - 1), max_size=4).map(
            lambda items: b"A" + longstr(b"".join(items))
        ),
        field_table(depth - 1).map(lambda t: b"F" + t),
    )


@functools.cache
def field_table(depth: int = 2) -> st.SearchStrategy[bytes]:
    keys = st.one_of(st.sampled_from(ARGUMENT_KEYS).map(str.encode), st.binary(max_size=10))
    entries = st.lists(st.tuples(keys, field_value(depth)), max_size=5)
    return entries.map(lambda es: longstr(b"".join(shortstr(k) + v for k, v in es)))


def encode_fields(spec: MethodSpec, values: dict[str, Any]) -> bytes:
    """A method payload: class and method ids, then the fields, bits packed."""
    out = [struct.pack(">I", spec.index)]
    bits: list[bool] = []

    def flush() -> None:
        if bits:
            byte = sum(1 << i for i, b in enumerate(bits[:8]) if b)
            out.append(bytes([byte]))
            bits.clear()

    for name, kind in spec.fields:
        value = values[name]
        if kind == "bit":
            bits.append(bool(value))
            if len(bits) == 8:
                flush()
            continue
        flush()
        if kind == "octet":
            out.append(struct.pack(">B", value & 0xFF))
        elif kind == "short":
            out.append(struct.pack(">H", value & 0xFFFF))
        elif kind == "long":
            out.append(struct.pack(">I", value & 0xFFFFFFFF))
        elif kind in ("longlong", "timestamp"):
            out.append(struct.pack(">Q", value & 0xFFFFFFFFFFFFFFFF))
        elif kind == "shortstr":
            out.append(shortstr(value))
        elif kind == "longstr":
            out.append(longstr(value))
        elif kind == "table":
            out.append(value)
        else:  # pragma: no cover - pamqp's spec has no other types
            raise AssertionError(kind)
    flush()
    return b"".join(out)


@functools.cache
def field_strategy(name: str, kind: str) -> st.SearchStrategy[Any]:
    if kind == "bit":
        return st.booleans()
    if kind == "octet":
        return st.integers(0, 255)
    if kind == "short":
        if name in ("reply_code",):
            return st.sampled_from([200, 311, 320, 404, 406, 501, 0, 65535])
        return st.one_of(st.sampled_from([0, 1, 2, 10, 65535]), st.integers(0, 65535))
    if kind == "long":
        return st.one_of(st.sampled_from([0, 1, 4096, 131072, 2**31]), st.integers(0, 2**32 - 1))
    if kind in ("longlong", "timestamp"):
        return st.one_of(st.sampled_from([0, 1, 2, 3, 2**63, 2**64 - 1]), st.integers(0, 2**64 - 1))
    if kind == "shortstr":
        if name in ("exchange", "queue", "source", "destination"):
            return name_bytes()
        if name == "exchange_type":
            return st.sampled_from([b"direct", b"fanout", b"topic", b"headers", b"x-nope", b""])
        if name == "consumer_tag":
            return st.sampled_from([b"", b"ct", b"ct2", b"amq.ctag-x"])
        if name == "routing_key":
            return st.one_of(
                st.sampled_from([b"", b"fz-q", b"a.b", b"#", b"*.x"]), st.binary(max_size=12)
            )
        return text_bytes()
    if kind == "longstr":
        return st.binary(max_size=32)
    if kind == "table":
        return field_table()
    raise AssertionError(kind)  # pragma: no cover


@functools.cache
def method_payload(spec_name: str) -> st.SearchStrategy[bytes]:
    spec = METHODS[spec_name]
    if not spec.fields:
        return st.just(encode_fields(spec, {}))
    return st.fixed_dictionaries({n: field_strategy(n, k) for n, k in spec.fields}).map(
        lambda values: encode_fields(spec, values)
    )


# ----------------------------------------------------------------------- frames
@dataclass
class Frame:
    kind: int
    channel: int
    payload: bytes
    end: int = FRAME_END
    size: int | None = None  # what the size field says, when it lies

    def encode(self) -> bytes:
        size = len(self.payload) if self.size is None else self.size & 0xFFFFFFFF
        return (
            struct.pack(">BHI", self.kind & 0xFF, self.channel & 0xFFFF, size)
            + self.payload
            + bytes([self.end & 0xFF])
        )


@dataclass
class Raw:
    """Bytes outside any frame (the protocol header, or garbage)."""

    data: bytes

    def encode(self) -> bytes:
        return self.data


Piece = Frame | Raw


def method(channel: int, payload: bytes) -> Frame:
    return Frame(1, channel, payload)


PROPERTY_TYPES = [
    "shortstr",
    "shortstr",
    "table",
    "octet",
    "octet",
    "shortstr",
    "shortstr",
    "shortstr",
    "shortstr",
    "timestamp",
    "shortstr",
    "shortstr",
    "shortstr",
    "shortstr",
]  # content-type ... cluster-id, flag bits 15 down to 2

# Strategies are made once: making one per draw costs more than the draw.
_OCTET = st.integers(0, 255)
_SHORT = st.integers(0, 0xFFFF)
_LONGLONG = st.integers(0, 2**64 - 1)
_SMALL = st.integers(0, 2**16)
_BOOL = st.booleans()


@functools.cache
def _index(n: int) -> st.SearchStrategy[int]:
    return st.integers(0, n - 1)


def pick(draw: Any, options: list[Any] | tuple[Any, ...]) -> Any:
    """One of ``options`` (repeat an option to make it likelier)."""
    return options[draw(_index(len(options)))]


def below(draw: Any, n: int) -> int:
    """An integer in [0, n)."""
    return int(draw(_SMALL)) % n if n > 2**16 else int(draw(_index(n)))


def content_header(draw: Any, channel: int, body_size: int) -> Frame:
    """basic's content header: property flags and values, now and then a lying body
    size, a flags word with the continuation bit, a weight or another class."""
    flags = draw(_SHORT) & ~0x3
    flags = pick(draw, (flags, 0, 0x1000, 0x2000, 0x0100, 0x9000, flags | 1))
    values = []
    for bit, kind in enumerate(PROPERTY_TYPES):
        if not flags & (1 << (15 - bit)):
            continue
        if kind == "shortstr":
            if bit == 8:  # expiration
                values.append(
                    shortstr(
                        pick(draw, (b"0", b"1", b"100", b"-1", b"x", b"", b"99999999999999999999"))
                    )
                )
            elif bit == 11:  # user-id
                values.append(shortstr(pick(draw, (b"guest", b"other", b""))))
            else:
                values.append(shortstr(draw(text_bytes())))
        elif kind == "octet":
            values.append(bytes([draw(_OCTET)]))
        elif kind == "table":
            values.append(draw(field_table()))
        else:
            values.append(struct.pack(">Q", draw(_LONGLONG)))
    if flags & 1:
        values.append(struct.pack(">H", draw(_SHORT)))
    cls = pick(draw, (60, 60, 60, 10, 0))
    weight = pick(draw, (0, 0, 0, 1))
    size = pick(draw, (body_size,) * 6 + (body_size + 1, max(0, body_size - 1), 2**63))
    payload = struct.pack(">HHQH", cls, weight, size, flags) + b"".join(values)
    return Frame(2, channel, payload)


_BODY = st.one_of(st.binary(max_size=64), st.integers(0, 270_000).map(lambda n: b"b" * n))


def publish(draw: Any, channel: int, frame_max: int) -> list[Piece]:
    values = {
        "ticket": 0,
        "exchange": pick(
            draw, (b"", b"", b"amq.direct", b"fz-x", b"amq.default", b"amq.topic", b"nope")
        ),
        "routing_key": pick(draw, (b"fz-q", b"fz-q2", b"fz-stream", b"", b"a.b")),
        "mandatory": draw(_BOOL),
        "immediate": pick(draw, (False,) * 20 + (True,)),
    }
    out: list[Piece] = [method(channel, encode_fields(METHODS["Basic.Publish"], values))]
    body = draw(_BODY)
    out.append(content_header(draw, channel, len(body)))
    chunk = max(1, (frame_max or 131072) - 8)
    chunk = pick(draw, (chunk, chunk, max(1, chunk // 3), chunk + 1))
    for start in range(0, len(body), chunk):
        out.append(Frame(3, channel, body[start : start + chunk]))
    return out


_CLIENT_PROPERTIES = st.one_of(
    st.just(longstr(b"")),
    field_table(),
    st.just(
        longstr(
            shortstr(b"capabilities")
            + b"F"
            + longstr(
                shortstr(b"connection.blocked")
                + b"t\x01"
                + shortstr(b"authentication_failure_close")
                + b"t\x01"
            )
        )
    ),
)
_CHANNELS = st.lists(
    st.sampled_from([1, 2, 3] * 6 + [2047, 65535, 0]), min_size=1, max_size=3, unique=True
)
_OPS = st.lists(
    st.sampled_from(["method"] * 6 + ["sane"] * 10 + ["publish"] * 6 + ["heartbeat", "other"]),
    min_size=1,
    max_size=16,
)
_EMPTY_TABLE = longstr(b"")


def sane(draw: Any) -> tuple[str, dict[str, Any]]:
    """A method with arguments a broker accepts (mostly), so sessions get to consumers,
    deliveries, acknowledgements, transactions and confirms."""
    queue = pick(draw, (b"fz-q", b"fz-q2", b"fz-stream", b""))
    exchange = pick(draw, (b"fz-x", b"amq.direct", b"amq.fanout", b"amq.headers"))
    args = pick(
        draw,
        (_EMPTY_TABLE,) * 3
        + (
            longstr(shortstr(b"x-max-length") + b"I" + struct.pack(">i", 2)),
            longstr(shortstr(b"x-message-ttl") + b"I" + struct.pack(">i", 0)),
            longstr(shortstr(b"x-max-priority") + b"b" + b"\x05"),
            longstr(shortstr(b"x-dead-letter-exchange") + b"S" + longstr(b"fz-x")),
            longstr(shortstr(b"x-queue-type") + b"S" + longstr(b"stream")),
            longstr(
                shortstr(b"x-overflow")
                + b"S"
                + longstr(b"reject-publish")
                + shortstr(b"x-max-length")
                + b"I"
                + struct.pack(">i", 1)
            ),
        ),
    )
    tag = pick(draw, (1, 1, 2, 3, 0, 99))
    consumer_tag = pick(draw, (b"ct", b"ct2", b""))
    return pick(
        draw,
        (
            (
                "Queue.Declare",
                {
                    "ticket": 0,
                    "queue": queue,
                    "passive": False,
                    "durable": pick(draw, (False, True)),
                    "exclusive": False,
                    "auto_delete": False,
                    "nowait": False,
                    "arguments": args,
                },
            ),
            (
                "Exchange.Declare",
                {
                    "ticket": 0,
                    "exchange": b"fz-x",
                    "exchange_type": pick(draw, (b"direct", b"fanout", b"topic")),
                    "passive": False,
                    "durable": False,
                    "auto_delete": False,
                    "internal": False,
                    "nowait": False,
                    "arguments": _EMPTY_TABLE,
                },
            ),
            (
                "Queue.Bind",
                {
                    "ticket": 0,
                    "queue": queue,
                    "exchange": exchange,
                    "routing_key": pick(draw, (b"fz-q", b"#", b"")),
                    "nowait": False,
                    "arguments": _EMPTY_TABLE,
                },
            ),
            (
                "Basic.Consume",
                {
                    "ticket": 0,
                    "queue": queue,
                    "consumer_tag": consumer_tag,
                    "no_local": False,
                    "no_ack": draw(_BOOL),
                    "exclusive": False,
                    "nowait": False,
                    "arguments": pick(
                        draw,
                        (
                            _EMPTY_TABLE,
                            longstr(shortstr(b"x-stream-offset") + b"S" + longstr(b"first")),
                        ),
                    ),
                },
            ),
            (
                "Basic.Qos",
                {
                    "prefetch_size": 0,
                    "prefetch_count": pick(draw, (0, 1, 2)),
                    "global_": draw(_BOOL),
                },
            ),
            ("Basic.Get", {"ticket": 0, "queue": queue, "no_ack": draw(_BOOL)}),
            ("Basic.Ack", {"delivery_tag": tag, "multiple": draw(_BOOL)}),
            ("Basic.Nack", {"delivery_tag": tag, "multiple": draw(_BOOL), "requeue": draw(_BOOL)}),
            ("Basic.Reject", {"delivery_tag": tag, "requeue": draw(_BOOL)}),
            ("Basic.Cancel", {"consumer_tag": consumer_tag, "nowait": False}),
            ("Basic.Recover", {"requeue": True}),
            ("Confirm.Select", {"nowait": False}),
            ("Tx.Select", {}),
            ("Tx.Commit", {}),
            ("Tx.Rollback", {}),
            ("Queue.Purge", {"ticket": 0, "queue": queue, "nowait": False}),
            (
                "Queue.Delete",
                {
                    "ticket": 0,
                    "queue": queue,
                    "if_unused": draw(_BOOL),
                    "if_empty": draw(_BOOL),
                    "nowait": False,
                },
            ),
        ),
    )


@st.composite
def sessions(draw: Any) -> list[Piece]:
    """A valid session: header, handshake, channels, methods, publishes, heartbeats, a
    close; each part drawn from the whole of what a client may say."""
    pieces: list[Piece] = [Raw(PROTOCOL_HEADER)]
    client_properties = draw(_CLIENT_PROPERTIES)
    mechanism = pick(draw, (b"PLAIN",) * 16 + (b"AMQPLAIN", b"AMQPLAIN", b"EXTERNAL", b""))
    response = pick(
        draw, (b"\x00guest\x00guest",) * 20 + (b"\x00guest\x00wrong", b"", b"\x00\x00", b"guest")
    )
    if mechanism == b"AMQPLAIN":
        response = (
            shortstr(b"LOGIN")
            + b"S"
            + longstr(b"guest")
            + shortstr(b"PASSWORD")
            + b"S"
            + longstr(b"guest")
        )
    pieces.append(
        method(
            0,
            struct.pack(">I", METHODS["Connection.StartOk"].index)
            + client_properties
            + shortstr(mechanism)
            + longstr(response)
            + shortstr(b"en_US"),
        )
    )
    # what RabbitMQ accepts, mostly (it ends the connection on 0 or too much)
    channel_max = pick(draw, (2047,) * 6 + (1, 3, 3, 0, 65535))
    frame_max = pick(draw, (131072,) * 6 + (4096, 8192, 8192, 0, 100, 2**32 - 1))
    heartbeat = pick(draw, (0,) * 6 + (1, 60, 65535))
    pieces.append(
        method(
            0,
            encode_fields(
                METHODS["Connection.TuneOk"],
                {"channel_max": channel_max, "frame_max": frame_max, "heartbeat": heartbeat},
            ),
        )
    )
    vhost = pick(draw, (b"/",) * 20 + (b"witness", b"nope", b""))
    pieces.append(
        method(
            0,
            encode_fields(
                METHODS["Connection.Open"],
                {"virtual_host": vhost, "capabilities": b"", "insist": False},
            ),
        )
    )
    channels = draw(_CHANNELS)
    for ch in channels:
        pieces.append(method(ch, encode_fields(METHODS["Channel.Open"], {"out_of_band": b""})))
    for op in draw(_OPS):
        ch = pick(draw, channels)
        if op == "method":
            name = pick(draw, CHANNEL_METHODS)
            pieces.append(method(ch, draw(method_payload(name))))
        elif op == "sane":
            name, values = sane(draw)
            pieces.append(method(ch, encode_fields(METHODS[name], values)))
        elif op == "publish":
            pieces.extend(publish(draw, ch, frame_max))
        elif op == "heartbeat":
            pieces.append(Frame(8, pick(draw, (0, 0, 0, ch)), pick(draw, (b"", b"", b"x"))))
        else:
            name = pick(draw, OTHER_METHODS)
            pieces.append(method(pick(draw, (0, ch)), draw(method_payload(name))))
    if draw(_BOOL):
        pieces.append(
            method(
                0,
                encode_fields(
                    METHODS["Connection.Close"],
                    {"reply_code": 200, "reply_text": b"bye", "class_id": 0, "method_id": 0},
                ),
            )
        )
    return pieces


MUTATIONS = [
    "type",
    "channel",
    "size",
    "end",
    "truncate",
    "extend",
    "flip",
    "drop",
    "dup",
    "swap",
    "garbage",
    "heartbeat",
]
_GARBAGE = st.binary(min_size=1, max_size=16)
_EXTRA = st.binary(min_size=1, max_size=8)


def mutate(draw: Any, pieces: list[Piece]) -> list[Piece]:
    pieces = [
        Frame(p.kind, p.channel, p.payload, p.end, p.size) if isinstance(p, Frame) else Raw(p.data)
        for p in pieces
    ]
    for _ in range(pick(draw, (0, 0, 0, 1, 1, 2, 3))):
        if not pieces:
            break
        i = below(draw, len(pieces))
        what = pick(draw, MUTATIONS)
        p = pieces[i]
        if what == "drop":
            del pieces[i]
        elif what == "dup":
            pieces.insert(i, p)
        elif what == "swap" and i + 1 < len(pieces):
            pieces[i], pieces[i + 1] = pieces[i + 1], pieces[i]
        elif what == "garbage":
            pieces.insert(i, Raw(draw(_GARBAGE)))
        elif what == "heartbeat":
            pieces.insert(i, Frame(8, pick(draw, (0, 1)), b""))
        elif isinstance(p, Raw):
            data = bytearray(p.data)
            if data:
                data[below(draw, len(data))] ^= 1 + draw(_OCTET) % 255
            pieces[i] = Raw(bytes(data))
        elif what == "type":
            p.kind = pick(draw, (1, 2, 3, 4, 8, 0, 9, 65, 206, 255))
        elif what == "channel":
            p.channel = pick(draw, (0, 1, 2, 3, 4, 2047, 2048, 65535))
        elif what == "size":
            n = len(p.payload)
            p.size = pick(draw, (n - 2, n - 1, n + 1, n + 2, 0, 2**31, 2**32 - 1, 131073))
        elif what == "end":
            p.end = (FRAME_END + 1 + draw(_OCTET) % 255) % 256
        elif what == "truncate" and p.payload:
            p.payload = p.payload[: below(draw, len(p.payload))]
        elif what == "extend":
            p.payload += draw(_EXTRA)
        elif what == "flip" and p.payload:
            data = bytearray(p.payload)
            data[below(draw, len(data))] ^= 1 + draw(_OCTET) % 255
            p.payload = bytes(data)
    return pieces


@st.composite
def fuzz_cases(draw: Any) -> list[bytes]:
    """A mutated session cut into the sends that carry it."""
    data = b"".join(p.encode() for p in mutate(draw, draw(sessions())))
    if len(data) < 2:
        return [data]
    cuts = sorted({1 + below(draw, len(data) - 1) for _ in range(pick(draw, (0, 0, 1, 2, 6)))})
    bounds = [0, *cuts, len(data)]
    return [data[a:b] for a, b in itertools.pairwise(bounds)]


# ------------------------------------------------------------------ running a case
def run_amqp_case(broker: BrokerUnderTest, chunks: list[bytes], timeout: float = 5.0) -> str:
    """Send ``chunks`` on a connection of its own, half-close, read until the broker
    ends the connection. Returns "eof", "reset" or "timeout"."""
    sock = socket.create_connection((broker.host, broker.port), timeout=timeout)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        try:
            for chunk in chunks:
                sock.sendall(chunk)
            sock.shutdown(socket.SHUT_WR)
        except OSError:  # the broker ended the connection before all was sent
            return "reset"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if not sock.recv(65536):
                    return "eof"
            except TimeoutError:
                break
            except ConnectionResetError:
                return "reset"
        return "timeout"
    finally:
        sock.close()


class LogWatch:
    """The new lines of a broker's captured log since the last look."""

    def __init__(self, broker: BrokerUnderTest) -> None:
        self.broker = broker
        self.seen = len(broker.log)

    def problems(self) -> list[str]:
        """The lines since the last look, when one of them shows a traceback or an
        error inside the broker (none otherwise)."""
        lines = self.broker.log[self.seen :]
        self.seen += len(lines)
        bad = any(
            "Traceback" in line
            or "[CRITICAL]" in line
            # RabbitMQ logs a client's fault at error too ("Error on AMQP connection ...":
            # a refused login); any other error line is the broker's own
            or ("[ERROR]" in line and "Error on AMQP connection" not in line)
            for line in lines
        )
        return lines if bad else []


# ------------------------------------------------------------------- the witnesses
WITNESS_VHOST = "witness"
WITNESS_USER = "witness"
WITNESS_PASSWORD = "witness-pw"
WAITING = 5  # messages waiting for the witness consumer (one delivered, unacked)
DURABLE = 5  # persistent messages in the durable witness queue


class Witness:
    """Another connection, opened before the fuzzing: a consumer (prefetch 1) with
    messages waiting, and a durable queue of persistent messages. Neither may notice
    anything that happens on other connections."""

    def __init__(self, broker: BrokerUnderTest) -> None:
        self.broker = broker
        api = Api(broker.http_url)
        assert api.put(f"/api/vhosts/{WITNESS_VHOST}") in (201, 204)
        assert api.put(
            f"/api/users/{WITNESS_USER}", {"password": WITNESS_PASSWORD, "tags": ""}
        ) in (201, 204)
        assert api.put(
            f"/api/permissions/{WITNESS_VHOST}/{WITNESS_USER}",
            {"configure": ".*", "write": ".*", "read": ".*"},
        ) in (201, 204)
        # guest created the vhost and so may use it: the fuzzed connections may not
        api.delete(f"/api/permissions/{WITNESS_VHOST}/guest")
        self.c = RawClient(broker.host, broker.port)
        self.c.handshake(WITNESS_USER, WITNESS_PASSWORD, vhost=WITNESS_VHOST)
        self.c.open_channel(1)
        c = self.c
        c.send_method(1, C.Queue.Declare(queue="witness-durable", durable=True))
        c.expect(C.Queue.DeclareOk)
        c.send_method(1, C.Queue.Declare(queue="witness-waiting"))
        c.expect(C.Queue.DeclareOk)
        for i in range(DURABLE):
            self.publish("witness-durable", f"durable {i}".encode(), 2)
        for i in range(WAITING):
            self.publish("witness-waiting", f"waiting {i}".encode(), 1)
        c.send_method(1, C.Basic.Qos(prefetch_count=1))
        c.expect(C.Basic.QosOk)
        c.send_method(1, C.Basic.Consume(queue="witness-waiting", consumer_tag="witness"))
        c.expect(C.Basic.ConsumeOk)
        deliver = c.expect(C.Basic.Deliver)
        self.delivery_tag = deliver.delivery_tag
        assert self._content() == b"waiting 0"
        self.check()

    def publish(self, queue: str, body: bytes, mode: int) -> None:
        from pamqp import body as pbody
        from pamqp import frame, header

        self.c.send(
            frame.marshal(C.Basic.Publish(exchange="", routing_key=queue), 1)
            + frame.marshal(
                header.ContentHeader(0, len(body), C.Basic.Properties(delivery_mode=mode)), 1
            )
            + frame.marshal(pbody.ContentBody(body), 1)
        )

    def counts(self, queue: str) -> tuple[int, int]:
        self.c.send_method(1, C.Queue.Declare(queue=queue, passive=True))
        got = self.c.recv_frame()
        assert got is not None, "the witness connection was closed"
        _, ok = got
        assert isinstance(ok, C.Queue.DeclareOk), f"the witness got {ok!r}"
        return ok.message_count, ok.consumer_count

    def check(self) -> None:
        """The consumer is still consuming, nothing more was delivered to it, and both
        queues hold what they held."""
        assert self.broker.process is None or self.broker.process.poll() is None, "the broker died"
        assert self.counts("witness-waiting") == (WAITING - 1, 1)
        assert self.counts("witness-durable") == (DURABLE, 0)
        assert not self.c.buf, f"the witness got unexpected frames: {self.c.buf!r}"

    def deliverable(self) -> None:
        """Every message still arrives, intact: the waiting ones to the consumer, the
        durable ones to basic.get (requeued, so they stay)."""
        c = self.c
        bodies = []
        tag = self.delivery_tag
        for _ in range(WAITING - 1):
            c.send_method(1, C.Basic.Ack(delivery_tag=tag))
            deliver = c.expect(C.Basic.Deliver)
            tag = deliver.delivery_tag
            bodies.append(self._content())
        assert bodies == [f"waiting {i}".encode() for i in range(1, WAITING)]
        got = []
        tags = []
        for _ in range(DURABLE):
            c.send_method(1, C.Basic.Get(queue="witness-durable"))
            ok = c.expect(C.Basic.GetOk)
            tags.append(ok.delivery_tag)
            got.append(self._content())
        assert got == [f"durable {i}".encode() for i in range(DURABLE)]
        for t in tags:
            c.send_method(1, C.Basic.Reject(delivery_tag=t, requeue=True))
        assert self.counts("witness-durable")[0] == DURABLE

    def _content(self) -> bytes:
        from pamqp import body as pbody
        from pamqp import header

        head = self.c.expect(header.ContentHeader)
        data = b""
        while len(data) < head.body_size:
            data += self.c.expect(pbody.ContentBody).value
        return data

    def close(self) -> None:
        self.c.close()


def durable_after_restart(broker: BrokerUnderTest) -> BrokerUnderTest:
    """Stop the broker and start it again on its data directory: the durable witness
    queue comes back with all its messages. Returns the new broker."""
    assert broker.stop() == 0 or broker.process is None or broker.process.returncode in (0, -15)
    again = start_leveret(broker.data_dir, extra=["--log-level", "warning"])
    c = RawClient(again.host, again.port)
    try:
        c.handshake(WITNESS_USER, WITNESS_PASSWORD, vhost=WITNESS_VHOST)
        c.open_channel(1)
        c.send_method(1, C.Queue.Declare(queue="witness-durable", passive=True))
        ok = c.expect(C.Queue.DeclareOk)
        assert ok.message_count == DURABLE
    finally:
        c.close()
    return again


# ------------------------------------------------------------------- the campaign
@dataclass
class Failure:
    signature: str
    detail: str
    example: Any
    count: int = 1


@dataclass
class Campaign:
    """A long run that records every distinct failure (by its signature: the last frame
    of a traceback, or what the check said) and carries on, restarting the broker when
    it has to, instead of stopping at the first as Hypothesis does."""

    name: str
    cases: int = 0
    started: float = field(default_factory=time.monotonic)
    failures: dict[str, Failure] = field(default_factory=dict)

    def over(self) -> bool:
        return (
            self.cases >= CAMPAIGN_EXAMPLES or time.monotonic() - self.started >= CAMPAIGN_SECONDS
        )

    def record(self, signature: str, detail: str, example: Any, size: int) -> None:
        old = self.failures.get(signature)
        if old is None:
            self.failures[signature] = Failure(signature, detail, example)
            self.save()
        else:
            old.count += 1
            if size < _size(old.example):  # keep the smallest example seen
                old.example = example
                old.detail = detail

    def drive(self, cases: st.SearchStrategy[Any], check: Callable[[Any], None]) -> None:
        """Draw cases from ``cases`` (5,000 a round, each round with a seed of its own) and
        ``check`` each, until the campaign is over; the record is saved every 5,000 cases."""

        def one(case: Any) -> None:
            if self.over():
                return
            self.cases += 1
            check(case)
            if self.cases % 5000 == 0:
                self.save()

        for round_ in itertools.count():
            if self.over():
                break
            run: Any = settings(
                max_examples=5000,
                deadline=None,
                database=None,
                phases=[Phase.generate],
                suppress_health_check=list(HealthCheck),
            )(given(cases)(one))
            seed(round_)(run)()

    def save(self) -> None:
        CAMPAIGN_DIR.mkdir(parents=True, exist_ok=True)
        path = CAMPAIGN_DIR / f"{self.name}.json"
        path.write_text(
            json.dumps(
                {
                    "cases": self.cases,
                    "seconds": round(time.monotonic() - self.started, 1),
                    "failures": [
                        {
                            "signature": f.signature,
                            "count": f.count,
                            "detail": f.detail,
                            "example": _jsonable(f.example),
                        }
                        for f in self.failures.values()
                    ],
                },
                indent=2,
                ensure_ascii=False,
            )
        )


def _size(example: Any) -> int:
    return len(json.dumps(_jsonable(example)))


def _jsonable(example: Any) -> Any:
    if isinstance(example, bytes):
        return example.hex()
    if isinstance(example, (list, tuple)):
        return [_jsonable(e) for e in example]
    if isinstance(example, dict):
        return {str(k): _jsonable(v) for k, v in example.items()}
    return example


def signature_of(lines: list[str], fallback: str) -> str:
    """A traceback's last 'File ...' line and its exception line, or ``fallback``."""
    files = [line.strip() for line in lines if line.strip().startswith("File ")]
    errors = [
        line.strip()
        for line in lines
        if line and not line.startswith((" ", "\t", "Traceback")) and ":" in line
    ]
    if files:
        return f"{files[-1]} | {errors[-1][:120] if errors else ''}"
    return fallback


def describe_exception(exc: BaseException) -> str:
    return "".join(traceback.format_exception_only(type(exc), exc)).strip()


def harm(watch: LogWatch, witness: Witness) -> tuple[str, str] | None:
    """What a case did to the broker, as (signature, detail): errors in its log, else a
    witness that lost or garbled its messages; None if neither."""
    problems = watch.problems()
    if problems:
        return signature_of(problems, "error in the log"), "".join(problems[-40:])
    try:
        witness.check()
    except (AssertionError, OSError) as exc:
        return f"witness: {describe_exception(exc)}", describe_exception(exc)
    return None


def fresh_broker() -> BrokerUnderTest:
    """A Leveret of the fuzzing's own; warnings and worse in its log."""
    return start_leveret(extra=["--log-level", "warning"])
