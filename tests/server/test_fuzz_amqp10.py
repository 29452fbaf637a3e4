"""Fuzzed AMQP 1.0 input against a live Leveret in RabbitMQ 4.2 mode: a valid SASL PLAIN
login, open, begin and attaches, then drawn frames (every performative with drawn fields,
bodies with bytes flipped, cut short or made up, frame headers with wrong sizes, offsets,
types and channels), the whole cut into sends anywhere.

After every case the broker is up, its log holds no traceback or error of its own, a
witness AMQP 0-9-1 connection opened before the fuzzing has noticed nothing, and the
fuzzed connection was ended by the broker (a malformed frame ends that connection, as
RabbitMQ's reader does, and nothing else). 150 derandomized cases in the suite."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from leveret.protocol.amqp10 import definitions as d
from leveret.protocol.amqp10 import performatives as p
from leveret.protocol.amqp10.frames import (
    AMQP_HEADER,
    FRAME_SASL,
    SASL_HEADER,
    frame,
    performative_frame,
)
from leveret.protocol.amqp10.types import Symbol
from tests.support.brokers import BrokerUnderTest, start_leveret
from tests.support.fuzzing import LogWatch, Witness, in_suite_settings, run_amqp_case

EXAMPLES = 150


def _handshake() -> bytes:
    """SASL PLAIN as guest, open for vhost /, a session, a sender to /queues/fuzz and a
    receiver from it with credit: sent at once, as a pipelining client would."""
    return b"".join((
        SASL_HEADER,
        performative_frame(0, p.SaslInit(Symbol("PLAIN"), b"\0guest\0guest", None), FRAME_SASL),
        AMQP_HEADER,
        performative_frame(0, p.Open("fuzz", "vhost:/", 65536, 16, None, None, None, None,
                                     None, None)),
        performative_frame(0, p.Begin(None, 0, 100, 100, None, None, None, None)),
        performative_frame(0, p.Attach("out", 0, False, None, None, d.Source(),
                                       d.Target(address="/queues/fuzz"), None, None, 0, None,
                                       None, None, None)),
        performative_frame(0, p.Attach("in", 1, True, None, None,
                                       d.Source(address="/queues/fuzz"), d.Target(), None,
                                       None, None, None, None, None, None)),
        performative_frame(0, p.Flow(0, 100, 0, 100, 1, 0, 10, None, None, None, None)),
    ))  # fmt: skip


HANDSHAKE = _handshake()
_uint = st.one_of(st.integers(0, 3), st.integers(0, 2**32 - 1))
_small = st.integers(0, 3)
_bool = st.one_of(st.none(), st.booleans())
_error = st.one_of(
    st.none(), st.builds(d.Error, st.sampled_from([d.INTERNAL_ERROR, d.NOT_FOUND]), st.text())
)


@st.composite
def performatives(draw: Any) -> bytes:
    """One well-formed performative frame with drawn fields, on channel 0 or another."""
    kind = draw(st.sampled_from(["transfer", "flow", "disposition", "attach", "detach",
                                 "begin", "end", "close", "open"]))  # fmt: skip
    if kind == "transfer":
        perf: Any = p.Transfer(draw(_small), draw(st.one_of(st.none(), _uint)),
                               draw(st.one_of(st.none(), st.binary(max_size=40))),
                               draw(st.one_of(st.none(), _uint)), draw(_bool), draw(_bool),
                               None, None, None, draw(_bool), None)  # fmt: skip
        body = performative_frame(0, perf)[8:] + draw(st.binary(max_size=200))
        return frame(draw(_small), body)
    if kind == "flow":
        perf = p.Flow(
            draw(st.one_of(st.none(), _uint)),
            draw(_uint),
            draw(_uint),
            draw(_uint),
            draw(st.one_of(st.none(), _small)),
            draw(st.one_of(st.none(), _uint)),
            draw(st.one_of(st.none(), _uint)),
            None,
            draw(_bool),
            draw(_bool),
            None,
        )
    elif kind == "disposition":
        state = draw(st.sampled_from([None, d.ACCEPTED, d.RELEASED, d.Rejected(None),
                                      d.Modified(True, True, None)]))  # fmt: skip
        perf = p.Disposition(draw(st.booleans()), draw(_uint), draw(st.one_of(st.none(), _uint)),
                             draw(_bool), state, None)  # fmt: skip
    elif kind == "attach":
        perf = p.Attach(draw(st.text(max_size=20)), draw(_small), draw(st.booleans()), None,
                        None, d.Source(address=draw(st.text(max_size=30))),
                        d.Target(address=draw(st.text(max_size=30))), None, None,
                        draw(st.one_of(st.none(), _uint)), None, None, None, None)  # fmt: skip
    elif kind == "detach":
        perf = p.Detach(draw(_small), draw(_bool), draw(_error))
    elif kind == "begin":
        perf = p.Begin(draw(st.one_of(st.none(), _small)), draw(_uint), draw(_uint),
                       draw(_uint), None, None, None, None)  # fmt: skip
    elif kind == "end":
        perf = p.End(draw(_error))
    elif kind == "close":
        perf = p.Close(draw(_error))
    else:
        perf = p.Open("again", None, None, None, None, None, None, None, None, None)
    return performative_frame(draw(_small), perf)


@st.composite
def mutated(draw: Any, whole: bytes) -> bytes:
    """A frame spoilt: bytes flipped, cut short, a wrong size, offset or type."""
    how = draw(st.sampled_from(["flip", "cut", "size", "doff", "type", "garbage"]))
    raw = bytearray(whole)
    if how == "flip" and len(raw) > 8:
        for _ in range(draw(st.integers(1, 4))):
            i = draw(st.integers(8, len(raw) - 1))
            raw[i] = draw(st.integers(0, 255))
    elif how == "cut":
        raw = raw[: draw(st.integers(0, len(raw) - 1))]
    elif how == "size":
        raw[0:4] = draw(st.sampled_from([0, 7, 8, len(raw) + 1, 2**31, 2**32 - 1])).to_bytes(
            4, "big"
        )
    elif how == "doff":
        raw[4] = draw(st.sampled_from([0, 1, 3, 255]))
    elif how == "type":
        raw[5] = draw(st.sampled_from([1, 2, 0x41, 255]))
    else:
        raw = bytearray(draw(st.binary(min_size=1, max_size=64)))
    return bytes(raw)


@st.composite
def cases(draw: Any) -> list[bytes]:
    frames = []
    for _ in range(draw(st.integers(1, 6))):
        f = draw(performatives())
        frames.append(draw(mutated(f)) if draw(st.booleans()) else f)
    data = HANDSHAKE + b"".join(frames)
    cuts = sorted(set(draw(st.lists(st.integers(1, len(data) - 1), max_size=4))))
    return [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)], strict=True)]


class Target:
    def __init__(self) -> None:
        self.broker: BrokerUnderTest = start_leveret(
            extra=["--log-level", "warning", "--rabbitmq-version", "4.2"]
        )
        self.witness = Witness(self.broker)
        self.watch = LogWatch(self.broker)

    def stop(self) -> None:
        self.witness.close()
        self.broker.stop()


@pytest.fixture(scope="module")
def target() -> Iterator[Target]:
    t = Target()
    yield t
    t.stop()


@in_suite_settings(EXAMPLES)
@given(case=cases())
def test_fuzzed_amqp10_connections_end_alone(target: Target, case: list[bytes]) -> None:
    outcome = run_amqp_case(target.broker, case, timeout=5.0)
    problems = target.watch.problems()
    assert not problems, "".join(problems[-40:])
    target.witness.check()
    assert outcome in ("eof", "reset")


def test_the_witness_messages_are_all_deliverable(target: Target) -> None:
    target.witness.check()
    target.witness.deliverable()
