"""The AMQP 1.0 type codec, performatives and framing: literal byte vectors (from the
OASIS spec's encodings and from what python-qpid-proton 0.40's client sent to a Leveret
server here), Hypothesis round trips of the type codec and of every performative."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from leveret.protocol.amqp10 import frames
from leveret.protocol.amqp10.definitions import (
    ACCEPTED,
    Accepted,
    Error,
    Modified,
    Received,
    Rejected,
    Released,
    Source,
    Target,
)
from leveret.protocol.amqp10.performatives import (
    PERFORMATIVES,
    SASL_FRAMES,
    Attach,
    Begin,
    Close,
    Detach,
    Disposition,
    End,
    Flow,
    Open,
    SaslInit,
    SaslMechanisms,
    SaslOutcome,
    Transfer,
    decode_performative,
    encode_performative,
)
from leveret.protocol.amqp10.types import (
    Array,
    DecodeError,
    Described,
    Symbol,
    Timestamp,
    decode,
    decode_plain,
    encode,
    encode_plain,
)
from tests.support.tiers import examples


# ------------------------------------------------------------ type vectors (OASIS 1.6)
def test_primitive_encodings_from_the_spec() -> None:
    assert encode(("null", None)) == b"\x40"
    assert encode(("uint", 0)) == b"\x43"  # uint0
    assert encode(("uint", 5)) == b"\x52\x05"  # smalluint
    assert encode(("uint", 0x1_0000)) == b"\x70\x00\x01\x00\x00"
    assert encode(("ulong", 0)) == b"\x44"
    assert encode(("ulong", 0x14)) == b"\x53\x14"  # smallulong: every descriptor
    assert encode(("long", -1)) == b"\x55\xff"  # smalllong
    assert encode(("int", 1000)) == b"\x71\x00\x00\x03\xe8"
    assert encode(("string", "a")) == b"\xa1\x01a"  # str8-utf8
    assert encode(("symbol", "PLAIN")) == b"\xa3\x05PLAIN"  # sym8
    assert encode(("binary", b"\x01" * 300))[:5] == b"\xb0\x00\x00\x01\x2c"  # vbin32
    assert encode(("list", [])) == b"\x45"  # list0
    assert encode(("timestamp", 1)) == b"\x83" + (1).to_bytes(8, "big")
    for raw, value in [
        (b"\x41", ("bool", True)),
        (b"\x42", ("bool", False)),
        (b"\x56\x01", ("bool", True)),
        (b"\x60\x01\x00", ("ushort", 256)),
        (b"\x98" + bytes(16), ("uuid", bytes(16))),
        (b"\x74\x00\x00\x00\x01", ("decimal32", b"\x00\x00\x00\x01")),
    ]:
        assert decode(raw) == (value, len(raw))


def test_arrays_of_one_constructor() -> None:
    # what Leveret's sasl-mechanisms carries, and proton reads as @<symbol>[:PLAIN, ...]
    raw = b"\xe0\x18\x02\xb3\x00\x00\x00\x05PLAIN\x00\x00\x00\x09ANONYMOUS"
    assert decode(raw) == (("array", [("symbol", "PLAIN"), ("symbol", "ANONYMOUS")]), len(raw))
    assert encode(("array", [("symbol", "PLAIN"), ("symbol", "ANONYMOUS")])) == raw
    assert decode_plain(raw)[0] == Array("symbol", (Symbol("PLAIN"), Symbol("ANONYMOUS")))
    ints = b"\xe0\x09\x02\x70\x00\x00\x00\x01\x00\x00\x00\x02"
    assert decode(ints) == (("array", [("uint", 1), ("uint", 2)]), len(ints))
    assert decode(b"\xe0\x02\x00\x40") == (("array", []), 4)


def test_plain_view() -> None:
    assert encode_plain(Symbol("x")) == b"\xa3\x01x"
    assert encode_plain({"k": 1}) == b"\xc1\x06\x02\xa1\x01k\x55\x01"
    assert decode_plain(b"\x00\xa3\x05PLAIN\x45") == (Described("PLAIN", []), 9)
    assert decode_plain(b"\x83" + (7).to_bytes(8, "big"))[0] == Timestamp(7)
    u = uuid.uuid4()
    assert decode_plain(encode_plain(u))[0] == u


def test_truncated_or_unknown_values_raise_decode_error_only() -> None:
    for raw in (b"", b"\xa1\x05ab", b"\xc0\x05\x03\x43", b"\xff", b"\x00", b"\xd0\x00"):
        for decoder in (decode, decode_plain):
            try:
                decoder(raw)
            except DecodeError:
                pass
            else:
                raise AssertionError(f"{raw!r} decoded")


# ------------------------------------------------------------ frame vectors (proton)
PROTON_SASL_INIT = b"\x00\x00\x00$\x02\x01\x00\x00\x00SA\xc0\x17\x02\xa3\tANONYMOUS\xa0\tanonymous"
PROTON_OPEN = (
    b"\x00\x00\x00G\x02\x00\x00\x00\x00S\x10\xc0:\x04\xa1$7d43bd74-639d-4cc3-92c1-f28f515299e3"
    b"\xa1\t127.0.0.1p\x00\x00\x80\x00`\x7f\xff"
)
PROTON_BEGIN = (
    b"\x00\x00\x00\x1f\x02\x00\x00\x00\x00S\x11\xc0\x12\x05@Cp\x7f\xff\xff\xffp\x7f\xff\xff\xff"
    b"p\x7f\xff\xff\xff"
)
PROTON_ATTACH = (
    b"\x00\x00\x00p\x02\x00\x00\x00\x00S\x12\xc0c\x0b\xa127d43bd74-639d-4cc3-92c1-f28f515299e3"
    b"-/queues/benchCBP\x02P\x00\x00S(\xc0\x06\x05@C@CB\x00S)\xc0\x14\x05\xa1\r/queues/bench"
    b"C@CB@@CD"
)
MESSAGE = b"\x00SpE\x00SsE\x00Sw\xa0@" + b"x" * 64
PROTON_TRANSFER = b"\x00\x00\x00b\x02\x00\x00\x00\x00S\x14\xc0\x08\x04CR\x01\xa0\x012C" + MESSAGE


def body(frame: bytes, frame_type: int = 0) -> bytes:
    size, doff, ftype, channel = frames.unpack_head(frame)
    assert (size, doff, ftype, channel) == (len(frame), 2, frame_type, 0)
    return frame[8:]


def test_what_protons_client_sends() -> None:
    assert decode_performative(body(PROTON_SASL_INIT, 1), 0, SASL_FRAMES)[0] == SaslInit(
        "ANONYMOUS", b"anonymous"
    )
    open_ = decode_performative(body(PROTON_OPEN))[0]
    assert open_ == Open("7d43bd74-639d-4cc3-92c1-f28f515299e3", "127.0.0.1", 32768, 32767)
    assert decode_performative(body(PROTON_BEGIN))[0] == Begin(
        None, 0, 0x7FFF_FFFF, 0x7FFF_FFFF, 0x7FFF_FFFF
    )
    attach = decode_performative(body(PROTON_ATTACH))[0]
    assert attach == Attach(
        "7d43bd74-639d-4cc3-92c1-f28f515299e3-/queues/bench",
        0,
        False,
        2,
        0,
        Source(None, 0, None, 0, False),
        Target("/queues/bench", 0, None, 0, False),
        None,
        None,
        0,
        0,
    )
    transfer, end = decode_performative(body(PROTON_TRANSFER))
    assert transfer == Transfer(0, 1, b"2", 0)
    assert body(PROTON_TRANSFER)[end:] == MESSAGE


def test_what_leveret_sends() -> None:
    mechanisms = frames.performative_frame(
        0, SaslMechanisms(("PLAIN", "ANONYMOUS")), frames.FRAME_SASL
    )
    assert mechanisms == (
        b"\x00\x00\x00\x28\x02\x01\x00\x00\x00\x53\x40\xc0\x1b\x01"
        b"\xe0\x18\x02\xb3\x00\x00\x00\x05PLAIN\x00\x00\x00\x09ANONYMOUS"
    )
    assert frames.performative_frame(0, SaslOutcome(0), frames.FRAME_SASL) == (
        b"\x00\x00\x00\x10\x02\x01\x00\x00\x00SD\xc0\x03\x01P\x00"
    )
    assert frames.performative_frame(0, Close()) == b"\x00\x00\x00\x0c\x02\x00\x00\x00\x00S\x18E"
    assert frames.HEARTBEAT == b"\x00\x00\x00\x08\x02\x00\x00\x00"
    # a disposition accepting delivery 0, as RabbitMQ and Proton write it
    assert encode_performative(Disposition(True, 0, None, True, ACCEPTED)) == (
        b"\x00S\x15\xc0\x0b\x05\x56\x01C@\x56\x01\x00S$E"
    )
    # the delivery path's transfer: handle, delivery-id, tag, format, settled
    (frame,) = frames.transfer_frames(0, 0, 1, b"2", MESSAGE, 131072, settled=None)
    assert frame == PROTON_TRANSFER


def test_protocol_headers() -> None:
    assert frames.detect(b"AMQP\x03\x01\x00\x00") is frames.Protocol.SASL
    assert frames.detect(b"AMQP\x00\x01\x00\x00") is frames.Protocol.AMQP
    assert frames.detect(b"AMQP\x00\x00\x09\x01") is frames.Protocol.AMQP_0_9_1
    assert frames.detect(b"GET / HT") is frames.Protocol.OTHER


@given(st.binary(max_size=3000), st.integers(512, 4096), st.booleans())
def test_multi_frame_transfers_carry_the_payload_within_the_frame_size(
    payload: bytes, max_frame: int, settled: bool
) -> None:
    pieces = frames.transfer_frames(3, 7, 9, b"tag", payload, max_frame, settled or None)
    got = b""
    for index, frame in enumerate(pieces):
        size, doff, _ftype, channel = frames.unpack_head(frame)
        assert size == len(frame) <= max_frame and channel == 3 and doff == 2
        transfer, end = decode_performative(frame[8:])
        assert transfer.handle == 7
        assert bool(transfer.more) == (index < len(pieces) - 1)
        if index == 0:
            assert (transfer.delivery_id, transfer.delivery_tag) == (9, b"tag")
        got += frame[8 + end :]
    assert got == payload


# ------------------------------------------------------------------ round trips
_scalars = st.one_of(
    st.none().map(lambda _: ("null", None)),
    st.booleans().map(lambda b: ("bool", b)),
    st.integers(0, 255).map(lambda i: ("ubyte", i)),
    st.integers(0, 0xFFFF).map(lambda i: ("ushort", i)),
    st.integers(0, 0xFFFF_FFFF).map(lambda i: ("uint", i)),
    st.integers(0, 2**64 - 1).map(lambda i: ("ulong", i)),
    st.integers(-(2**7), 2**7 - 1).map(lambda i: ("byte", i)),
    st.integers(-(2**15), 2**15 - 1).map(lambda i: ("short", i)),
    st.integers(-(2**31), 2**31 - 1).map(lambda i: ("int", i)),
    st.integers(-(2**63), 2**63 - 1).map(lambda i: ("long", i)),
    st.floats(allow_nan=False, width=32).map(lambda f: ("float", f)),
    st.floats(allow_nan=False).map(lambda f: ("double", f)),
    st.integers(-(2**63), 2**63 - 1).map(lambda i: ("timestamp", i)),
    st.binary(max_size=300).map(lambda b: ("binary", b)),
    st.text(max_size=300).map(lambda s: ("string", s)),
    st.text("abcxyz:-", max_size=20).map(lambda s: ("symbol", s)),
    st.binary(min_size=16, max_size=16).map(lambda b: ("uuid", b)),
)
_arrays = st.one_of(
    st.lists(st.integers(0, 0xFFFF_FFFF), max_size=5).map(
        lambda xs: ("array", [("uint", x) for x in xs])
    ),
    st.lists(st.text("abc", max_size=5), min_size=1, max_size=5).map(
        lambda xs: ("array", [("symbol", x) for x in xs])
    ),
)
_values = st.recursive(
    st.one_of(_scalars, _arrays),
    lambda inner: st.one_of(
        st.lists(inner, max_size=4).map(lambda xs: ("list", xs)),
        st.lists(st.tuples(_scalars, inner), max_size=4).map(lambda kv: ("map", kv)),
        st.tuples(st.integers(0, 255).map(lambda i: ("ulong", i)), inner).map(
            lambda dv: ("described", dv)
        ),
    ),
    max_leaves=12,
)


def _normal(value: Any) -> Any:
    """A tagged value as decoding gives it back (an empty list is list0)."""
    kind, v = value
    if kind in ("list", "array"):
        return (kind, [_normal(x) for x in v])
    if kind == "map":
        return (kind, [(_normal(k), _normal(x)) for k, x in v])
    if kind == "described":
        return (kind, (_normal(v[0]), _normal(v[1])))
    return value


@given(_values)
def test_tagged_values_round_trip(value: Any) -> None:
    raw = encode(value)
    assert decode(raw) == (_normal(value), len(raw))
    decode_plain(raw)  # the plain view reads everything the tagged one writes


_uint = st.integers(0, 0xFFFF_FFFF)
_sym = st.text("abcdefgh:-", min_size=1, max_size=8)
_syms = st.none() | st.lists(_sym, min_size=1, max_size=3).map(tuple)
_fields = st.none() | st.dictionaries(_sym, st.integers(-5, 5) | st.text(max_size=5), max_size=3)
_error = st.builds(Error, _sym, st.none() | st.text(max_size=20), _fields)
_state = (
    st.sampled_from([None, Accepted(), Released()])
    | st.builds(Rejected, st.none() | _error)
    | st.builds(Modified, st.none() | st.booleans(), st.none() | st.booleans(), _fields)
)
_opt = st.none
_performatives = st.one_of(
    st.builds(
        Open, st.text(min_size=1, max_size=10), _opt() | st.text(max_size=10), _opt() | _uint,
        _opt() | st.integers(0, 0xFFFF), _opt() | _uint, _syms, _syms, _syms, _syms, _fields,
    ),
    st.builds(
        Begin, _opt() | st.integers(0, 0xFFFF), _uint, _uint, _uint, _opt() | _uint, _syms,
        _syms, _fields,
    ),
    st.builds(
        Attach, st.text(min_size=1, max_size=10), _uint, st.booleans(),
        _opt() | st.integers(0, 2), _opt() | st.integers(0, 1),
        _opt() | st.builds(Source, _opt() | st.text(max_size=10), filter=_fields, outcomes=_syms),
        _opt() | st.builds(Target, _opt() | st.text(max_size=10), capabilities=_syms),
        initial_delivery_count=_opt() | _uint, max_message_size=_opt() | st.integers(0, 2**64 - 1),
        properties=_fields,
    ),
    st.builds(
        Flow, _opt() | _uint, _uint, _uint, _uint, _opt() | _uint, _opt() | _uint,
        _opt() | _uint, _opt() | _uint, _opt() | st.booleans(), _opt() | st.booleans(), _fields,
    ),
    st.builds(
        Transfer, _uint, _opt() | _uint, _opt() | st.binary(max_size=32), _opt() | _uint,
        _opt() | st.booleans(), _opt() | st.booleans(), _opt() | st.integers(0, 1), _state,
        _opt() | st.booleans(), _opt() | st.booleans(), _opt() | st.booleans(),
    ),
    st.builds(
        Disposition, st.booleans(), _uint, _opt() | _uint, _opt() | st.booleans(), _state,
        _opt() | st.booleans(),
    ),
    st.builds(Detach, _uint, _opt() | st.booleans(), _opt() | _error),
    st.builds(End, _opt() | _error),
    st.builds(Close, _opt() | _error),
    st.builds(Received, _uint, st.integers(0, 2**64 - 1)).map(
        lambda r: Disposition(True, 1, state=r)
    ),
)  # fmt: skip


@given(_performatives)
@settings(max_examples=examples(300))
def test_every_performative_round_trips(performative: Any) -> None:
    raw = encode_performative(performative)
    assert decode_performative(raw + b"payload", 0, PERFORMATIVES) == (performative, len(raw))


def test_wrong_field_types_and_missing_mandatory_fields_are_decode_errors() -> None:
    bad = [
        b"\x00\x53\x14\xc0\x03\x01\xa1\x00",  # transfer whose handle is a string
        b"\x00\x53\x10\x45",  # open without its container-id
        b"\x00\x53\x99\x45",  # no such performative
        b"\x00\x53\x14\xc0\x05\x02\x43",  # a list shorter than its count
        b"\xa1\x01x",  # not described
    ]
    for raw in bad:
        try:
            decode_performative(raw)
        except DecodeError:
            continue
        raise AssertionError(f"{raw!r} decoded")


@given(
    st.integers(0, 65535),
    st.booleans(),
    st.integers(0, 2**32 - 1),
    st.one_of(st.none(), st.integers(0, 2**32 - 1)),
    st.sampled_from(["accepted", "released"]),
)
def test_a_settled_disposition_is_written_as_the_codec_writes_it(
    channel: int, role: bool, first: int, last: int | None, outcome: str
) -> None:
    """The hot path's frame is the general encoder's, byte for byte."""
    from leveret.protocol.amqp10.definitions import RELEASED

    state = ACCEPTED if outcome == "accepted" else RELEASED
    assert frames.settled_disposition_frame(
        channel, role, first, last, frames.OUTCOME_BYTES[outcome]
    ) == frames.performative_frame(channel, Disposition(role, first, last, True, state, None))


def test_an_array_of_empty_elements_cannot_claim_more_than_its_bytes() -> None:
    """0xF0 with a count of 2**32 - 1 nulls (constructor 0x40, elements of no bytes) in a
    dozen bytes: refused as a decode error, never expanded (found by mutating transfers:
    the broker ran out of memory); a char beyond U+10FFFF is a decode error too."""
    from leveret.protocol.amqp10.types import DecodeError, decode

    bomb = b"\xf0\x00\x00\x00\x05\xff\xff\xff\xff\x40"
    with pytest.raises(DecodeError):
        decode(bomb, 0)
    assert decode(b"\xe0\x03\x02\x40", 0)[0] == ("array", [("null", None), ("null", None)])
    with pytest.raises(DecodeError):
        decode_plain(b"\x73\xff\xff\xff\xff", 0)
    with pytest.raises(DecodeError):
        decode_performative(b"\x00\x53\x14\xc0\x06\x01\xf0\x00\x00\x00\x05\xff\xff\xff\xff\x40")
