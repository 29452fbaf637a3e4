"""amqp10_message.parse's shortcut for a payload whose sections before the body are the
last payload's (publishers repeat them): the same Parsed as parsing it afresh, field for
field, and the same errors."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from leveret.broker import amqp10_message
from leveret.broker.amqp10_message import Amqp10Error, Parsed
from leveret.protocol.amqp10 import types
from tests.broker.test_amqp10_roundtrip import _amqp10_payload
from tests.support.tiers import examples

_FIELDS = (
    "to", "subject", "cc", "user_id", "durable", "properties", "body", "annotations",
    "annotations_raw", "bare", "header",
)  # fmt: skip


def _view(parsed: Parsed) -> tuple[Any, ...]:
    error = parsed.cc_error
    return (
        tuple(getattr(parsed, name) for name in _FIELDS),
        None if error is None else (error.condition, error.description),
    )


def _outcome(payload: bytes) -> Any:
    try:
        return _view(amqp10_message.parse(payload))
    except Amqp10Error as exc:
        return ("error", exc.condition, exc.description, exc.ends_session)


def _cold(payload: bytes) -> Any:
    amqp10_message._last = None
    return _outcome(payload)


def _body_at(payload: bytes) -> int:
    try:
        return amqp10_message.read_sections(payload).body_at
    except Amqp10Error:
        return -1


@given(_amqp10_payload(), _amqp10_payload(), st.binary(max_size=8))
@settings(max_examples=examples(300))
def test_a_repeated_prefix_parses_as_afresh(first: tuple, second: tuple, junk: bytes) -> None:
    a, b = first[0], second[0]
    candidates = [b, a, a + junk]
    at_a, at_b = _body_at(a), _body_at(b)
    if at_a >= 0 and at_b >= 0:
        # a's sections before the body with b's body (and the other way round)
        candidates += [a[:at_a] + b[at_b:], b[:at_b] + a[at_a:], a[:at_a] + junk + b[at_b:]]
        candidates.append(a[:at_a] + types.section(0x75, ("binary", junk)))
        candidates.append(a[:at_a] + types.section(0x77, ("string", "v")))
    candidates.append(a[: max(at_a, 0)])  # no body: an error either way
    for payload in candidates:
        expected = _cold(payload)
        for warm in (a, b, payload):
            _cold(warm)  # the shortcut now holds warm's prefix (when it has one)
            assert _outcome(payload) == expected, (warm, payload)


def test_the_shortcut_is_taken_for_a_repeated_prefix() -> None:
    head = types.section(0x70, ("list", [("bool", True)])) + types.section(
        0x73, ("list", [("null", None), ("null", None), ("string", "q")])
    )
    amqp10_message._last = None
    amqp10_message.parse(head + types.section(0x75, ("binary", b"one")))
    assert amqp10_message._last is not None and amqp10_message._last[0] == head
    parsed = amqp10_message.parse(head + types.section(0x75, ("binary", b"two")))
    assert parsed.body == b"two" and parsed.to == "q" and parsed.durable
