"""The AMQP 1.0 hot paths' readers against the general codec: value for value, and the
general decoder's errors for whatever the fast reader declines."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from leveret.protocol.amqp10 import frames
from leveret.protocol.amqp10.performatives import (
    PERFORMATIVES,
    Transfer,
    decode_performative,
    encode_performative,
    read_transfer,
)
from leveret.protocol.amqp10.types import DecodeError
from tests.support.tiers import examples

_uint = st.integers(0, 0xFFFF_FFFF)
_opt = st.none


def _general(body: bytes) -> tuple[Any, ...] | DecodeError:
    try:
        t, end = decode_performative(body, 0, PERFORMATIVES)
    except DecodeError as exc:
        return exc
    except ValueError as exc:
        # the general decoder's own refusal of, e.g., a char descriptor beyond U+10FFFF
        # (chr() raises): whatever it refuses, the fast reader leaves to it
        return DecodeError(str(exc))
    if not isinstance(t, Transfer):
        return DecodeError("not a transfer")
    return t, end


def _agrees(body: bytes) -> tuple[Any, ...] | None:
    """read_transfer's answer, checked against the general decoder's."""
    fast = read_transfer(body)
    general = _general(body)
    if fast is None:
        return None
    assert not isinstance(general, DecodeError), (body, general)
    t, end = general
    assert t.rcv_settle_mode is None and t.state is None
    assert t.resume is None and t.aborted is None and t.batchable is None
    assert fast == (
        t.handle, t.delivery_id, t.delivery_tag, t.message_format, t.settled, t.more, end
    )  # fmt: skip
    for value, general_value in zip(fast, (t.handle, t.delivery_id, t.delivery_tag), strict=False):
        assert type(value) is type(general_value)
    return fast


_transfers = st.builds(
    Transfer, _uint, _opt() | _uint, _opt() | st.binary(max_size=40), _opt() | _uint,
    _opt() | st.booleans(), _opt() | st.booleans(),
)  # fmt: skip


@given(_transfers, st.binary(max_size=20))
@settings(max_examples=examples(400))
def test_read_transfer_equals_the_general_decoder(t: Transfer, payload: bytes) -> None:
    """Transfers as the general encoder writes them: read, and read the same."""
    raw = encode_performative(t)
    fast = _agrees(raw + payload)
    assert fast is not None
    assert fast[-1] == len(raw)


@given(
    _uint, _opt() | _uint, _opt() | st.binary(max_size=40), _opt() | _uint,
    _opt() | st.booleans(), st.booleans(), st.binary(max_size=20),
)  # fmt: skip
@settings(max_examples=examples(300))
def test_read_transfer_reads_the_delivery_paths_encoding(
    handle: int,
    delivery_id: int | None,
    tag: bytes | None,
    fmt: int | None,
    settled: bool | None,
    more: bool,
    payload: bytes,
) -> None:
    raw = frames.transfer_fields(handle, delivery_id, tag, fmt, settled, more)
    _agrees(raw + payload)


@given(st.binary(max_size=30), st.binary(max_size=30))
@settings(max_examples=examples(600))
def test_read_transfer_declines_what_the_general_decoder_refuses(
    fields: bytes, tail: bytes
) -> None:
    """Arbitrary bytes after a transfer's list8 head: whatever the fast reader returns,
    the general decoder returns too; it declines everything the general one refuses."""
    body = b"\x00\x53\x14\xc0" + bytes((len(fields) + 1,)) + fields + tail
    _agrees(body)
    _agrees(b"\x00\x53\x14\xc0" + fields + tail)


@given(_transfers, st.data())
@settings(max_examples=examples(300))
def test_read_transfer_on_mutated_transfers(t: Transfer, data: st.DataObject) -> None:
    """One byte of a well-formed transfer changed: the two readers still agree."""
    raw = bytearray(encode_performative(t) + b"payload")
    at = data.draw(st.integers(0, len(raw) - 1))
    raw[at] = data.draw(st.integers(0, 255))
    _agrees(bytes(raw))


def test_the_official_clients_transfer_takes_the_fast_path() -> None:
    # rabbitmq-amqp-python-client (Qpid Proton): handle, delivery-id, tag, format
    body = b"\x00\x53\x14\xc0\x08\x04\x43\x52\x01\xa0\x012\x43" + b"\x00\x53\x75\xa0\x01x"
    assert _agrees(body) == (0, 1, b"2", 0, None, None, 13)


def test_transfers_beyond_more_and_malformed_ones_take_the_general_path() -> None:
    with_state = encode_performative(Transfer(0, 1, b"t", 0, False, False, 0))
    assert read_transfer(with_state) is None
    assert decode_performative(with_state)[0].rcv_settle_mode == 0
    for bad in (
        b"\x00\x53\x14\xc0\x03\x01\xa1\x00",  # a handle that is a string
        b"\x00\x53\x14\xc0\x02\x01\x40",  # a null handle
        b"\x00\x53\x14\xc0\x05\x02\x43",  # a list shorter than its count
        b"\x00\x53\x14\xc0\x04\x02\x43\x43\x43",  # a size that does not match
    ):
        assert read_transfer(bad) is None
        assert isinstance(_general(bad), DecodeError)
