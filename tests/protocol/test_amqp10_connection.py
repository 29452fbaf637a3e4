"""AMQP 1.0 connections in memory: the client role drives the server role (SASL, open,
begin, links both ways, credit, settled and unsettled transfers, multi-frame deliveries,
dispositions, detach with an error, end, close), the peer's protocol errors as RabbitMQ 4
names them, and a fuzz of the frame parser (events or NEED_DATA, never an exception)."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from leveret.protocol.amqp10 import frames
from leveret.protocol.amqp10.client import ClientConnection
from leveret.protocol.amqp10.definitions import (
    ACCEPTED,
    DECODE_ERROR,
    FRAME_SIZE_TOO_SMALL,
    FRAMING_ERROR,
    ILLEGAL_STATE,
    NOT_FOUND,
    TRANSFER_LIMIT_EXCEEDED,
    UNATTACHED_HANDLE,
    WINDOW_VIOLATION,
    Error,
    Modified,
    SaslCode,
    Source,
    Target,
)
from leveret.protocol.amqp10.events import (
    AmqpHeaderReceived,
    AttachReceived,
    BeginReceived,
    CloseReceived,
    ConnectionFailed,
    DetachReceived,
    DispositionReceived,
    EndReceived,
    FlowReceived,
    LinkFailed,
    NeedData,
    OpenReceived,
    SaslHeaderReceived,
    SaslInitReceived,
    SaslMechanismsReceived,
    SaslOutcomeReceived,
    SessionFailed,
    TransferReceived,
    UnsupportedProtocol,
)
from leveret.protocol.amqp10.performatives import Flow, Open, Transfer
from leveret.protocol.amqp10.server import ServerConnection
from leveret.protocol.amqp10.states import State
from tests.support.tiers import examples

Events = list[tuple[str, Any]]


class Pair:
    """A client and a server connection wired together; the server answers as a broker
    would (credit 170, window 400); the test answers for the client."""

    def __init__(self, max_frame_size: int = frames.DEFAULT_MAX_FRAME_SIZE) -> None:
        self.server = ServerConnection()
        self.client = ClientConnection(max_frame_size=max_frame_size)
        self.stored: list[bytes] = []
        self.refuse: str | None = None

    def pump(self) -> Events:
        s, c = self.server, self.client
        events: Events = []
        for _ in range(100):
            moved = False
            if data := c.data_to_send():
                s.receive_data(data)
                moved = True
            while not isinstance(e := s.next_event(), NeedData):
                events.append(("S", e))
                self.answer(e)
            if data := s.data_to_send():
                c.receive_data(data)
                moved = True
            while not isinstance(e := c.next_event(), NeedData):
                events.append(("C", e))
                if isinstance(e, SaslMechanismsReceived):
                    c.send_sasl_init("PLAIN", b"\x00guest\x00guest")
                elif isinstance(e, SaslOutcomeReceived) and e.code == 0:
                    c.send_amqp_header()
                elif isinstance(e, AmqpHeaderReceived):
                    c.send_open("client", hostname="vhost:/")
            if not moved:
                return events
        raise AssertionError("no quiet point")

    def answer(self, e: Any) -> None:
        s = self.server
        if isinstance(e, SaslHeaderReceived):
            s.send_sasl_mechanisms(("PLAIN", "ANONYMOUS"))
        elif isinstance(e, SaslInitReceived):
            ok = e.initial_response == b"\x00guest\x00guest"
            s.send_sasl_outcome(SaslCode.OK if ok else SaslCode.AUTH)
        elif isinstance(e, AmqpHeaderReceived):
            s.send_amqp_header()
        elif isinstance(e, OpenReceived):
            s.send_open("rabbit@leveret", properties={"product": "Leveret"})
        elif isinstance(e, BeginReceived):
            s.send_begin(e.channel, incoming_window=400, handle_max=255)
        elif isinstance(e, AttachReceived):
            a = e.attach
            if self.refuse is not None:
                s.send_attach(e.channel, e.handle, source=None, target=None)
                s.send_detach(e.channel, e.handle, True, Error(NOT_FOUND, self.refuse))
                return
            s.send_attach(e.channel, e.handle, source=a.source, target=a.target)
            if s.link(e.channel, e.handle).role:
                s.grant_credit(e.channel, e.handle, 170)
        elif isinstance(e, TransferReceived):
            self.stored.append(e.payload)
            if not e.settled:
                s.send_disposition(e.channel, True, e.delivery_id, state=ACCEPTED)
        elif isinstance(e, FlowReceived) and e.handle is not None and e.credit:
            while self.stored and s.link(e.channel, e.handle).credit:
                s.send_transfer(e.channel, e.handle, self.stored.pop(0), b"t")
            if e.drain:
                s.drained(e.channel, e.handle)
        elif isinstance(e, DetachReceived):
            if not e.complete:
                s.send_detach(e.channel, e.handle, e.closed)
        elif isinstance(e, EndReceived) and e.complete:
            pass
        elif isinstance(e, EndReceived | SessionFailed):
            s.send_end(e.channel, e.error if isinstance(e, SessionFailed) else None)
        elif isinstance(e, LinkFailed):
            s.send_detach(e.channel, e.handle, True, e.error)
        elif isinstance(e, CloseReceived):
            s.send_close()
        elif isinstance(e, ConnectionFailed):
            if e.reply:
                s.send_close(e.error)
            else:
                s.drop()

    def open(self) -> Events:
        self.client.send_sasl_header()
        return self.pump()

    def session(self) -> int:
        self.open()
        channel = self.client.send_begin(incoming_window=1000)
        self.pump()
        return channel


def kinds(events: Events) -> list[tuple[str, str]]:
    return [(side, type(e).__name__) for side, e in events]


def test_sasl_plain_open_and_close() -> None:
    pair = Pair()
    events = pair.open()
    assert kinds(events) == [
        ("S", "SaslHeaderReceived"),
        ("C", "SaslMechanismsReceived"),
        ("S", "SaslInitReceived"),
        ("C", "SaslOutcomeReceived"),
        ("S", "AmqpHeaderReceived"),
        ("C", "AmqpHeaderReceived"),
        ("S", "OpenReceived"),
        ("C", "OpenReceived"),
    ]
    assert events[1][1].mechanisms == ("PLAIN", "ANONYMOUS")
    assert events[2][1].mechanism == "PLAIN"
    server_open = events[7][1].open
    assert server_open.properties == {"product": "Leveret"}
    assert (server_open.max_frame_size, server_open.channel_max) == (131072, 63)
    assert pair.server.state is State.OPEN and pair.client.state is State.OPEN
    pair.client.send_close()
    assert kinds(pair.pump()) == [("S", "CloseReceived"), ("C", "CloseReceived")]
    assert pair.server.closed and pair.client.closed


def test_failed_sasl_ends_the_connection() -> None:
    pair = Pair()
    pair.client.send_sasl_header()
    pair.server.receive_data(pair.client.data_to_send())
    assert isinstance(pair.server.next_event(), SaslHeaderReceived)
    pair.server.send_sasl_mechanisms(("PLAIN",))
    pair.client.receive_data(pair.server.data_to_send())
    assert isinstance(pair.client.next_event(), SaslMechanismsReceived)
    pair.client.send_sasl_init("PLAIN", b"\x00guest\x00wrong")
    events = pair.pump()
    assert events[-1][1] == SaslOutcomeReceived(SaslCode.AUTH, None)
    assert pair.server.closed and pair.client.closed


def test_a_header_without_sasl_is_refused_with_the_sasl_header() -> None:
    server = ServerConnection()
    server.receive_data(frames.AMQP_HEADER)
    assert server.next_event() == UnsupportedProtocol(frames.AMQP_HEADER)
    server.refuse()
    assert server.data_to_send() == frames.SASL_HEADER
    assert server.closed


def test_publish_settled_and_unsettled_and_multi_frame() -> None:
    pair = Pair()
    channel = pair.session()
    client = pair.client
    handle = client.send_attach(
        channel, name="pub", role=False, source=Source(), target=Target("/queues/q")
    )
    events = pair.pump()
    flows = [e for side, e in events if isinstance(e, FlowReceived)]
    assert flows[-1].credit == 170
    big = bytes(range(256)) * 2000  # 512,000 bytes: four 131,072-byte frames
    ids = [
        client.send_transfer(channel, handle, b"one", b"1"),
        client.send_transfer(channel, handle, b"two", b"2", settled=True),
        client.send_transfer(channel, handle, big, b"3"),
    ]
    assert ids == [0, 1, 2]
    events = pair.pump()
    transfers = [e for side, e in events if isinstance(e, TransferReceived)]
    assert [(t.delivery_id, t.settled, t.payload) for t in transfers] == [
        (0, False, b"one"),
        (1, True, b"two"),
        (2, False, big),
    ]
    dispositions = [e for side, e in events if isinstance(e, DispositionReceived)]
    assert [(d.first, d.last, d.settled, d.state) for d in dispositions] == [
        (0, 0, True, ACCEPTED),
        (2, 2, True, ACCEPTED),
    ]
    assert client.link(channel, handle).credit == 167
    assert pair.server.link(channel, handle).delivery_count == 3
    # six transfer frames (four for the big one) came out of the server's window
    assert pair.server.session(channel).incoming_window == 400 - 6


def test_consume_with_credit_drain_and_modified_disposition() -> None:
    pair = Pair()
    pair.stored = [b"a", b"b", b"c"]
    channel = pair.session()
    client = pair.client
    handle = client.send_attach(
        channel, name="sub", role=True, source=Source("/queues/q"), target=Target()
    )
    pair.pump()
    client.grant_credit(channel, handle, 2)
    events = pair.pump()
    got = [e for side, e in events if isinstance(e, TransferReceived)]
    assert [(t.delivery_id, t.payload) for t in got] == [(0, b"a"), (1, b"b")]
    assert client.link(channel, handle).credit == 0
    client.send_disposition(channel, True, 0, 1, True, Modified(True, False, {"x-k": 1}))
    events = pair.pump()
    (disposition,) = [e for side, e in events if isinstance(e, DispositionReceived)]
    assert (disposition.first, disposition.last) == (0, 1)
    assert disposition.state == Modified(True, False, {"x-k": 1})
    # drain 5: one message, then the rest of the credit is given back
    client.grant_credit(channel, handle, 5, drain=True)
    events = pair.pump()
    got = [e for side, e in events if isinstance(e, TransferReceived)]
    assert [t.payload for t in got] == [b"c"]
    flows = [e for side, e in events if side == "C" and isinstance(e, FlowReceived)]
    assert flows[-1].drain and flows[-1].delivery_count == 7
    assert client.link(channel, handle).credit == 0


def test_refused_link_detach_with_error_end_and_close() -> None:
    pair = Pair()
    channel = pair.session()
    pair.refuse = "no queue 'nope' in vhost '/'"
    pair.client.send_attach(channel, name="x", role=True, source=Source("/queues/nope"))
    events = pair.pump()
    detach = [e for side, e in events if isinstance(e, DetachReceived)]
    assert detach[0].error == Error(NOT_FOUND, "no queue 'nope' in vhost '/'")
    pair.client.send_detach(channel, detach[0].handle, True)
    pair.client.send_end(channel)
    events = pair.pump()
    assert ("S", "EndReceived") in kinds(events) and ("C", "EndReceived") in kinds(events)
    assert pair.server.sessions() == [] and pair.client.sessions() == []


def attached_sender() -> tuple[Pair, int, int]:
    """A pair with a session and a sending link to /queues/q attached: the pair, the
    session's channel and the link's handle."""
    pair = Pair()
    channel = pair.session()
    handle = pair.client.send_attach(channel, name="p", role=False, target=Target("/queues/q"))
    pair.pump()
    return pair, channel, handle


def test_a_window_violation_ends_the_session() -> None:
    pair, channel, handle = attached_sender()
    client = pair.client
    pair.server.session(channel).incoming_window = 0  # as if the broker shut it
    client.send_transfer(channel, handle, b"x", b"1", settled=True)
    events = pair.pump()
    failed = [e for side, e in events if isinstance(e, SessionFailed)]
    assert failed[0].error == Error(
        WINDOW_VIOLATION, "incoming window violation (tolerated excess tranfers: 0)"
    )
    (end,) = [e for side, e in events if side == "C" and isinstance(e, EndReceived)]
    assert end.error == failed[0].error


def test_transfers_past_the_credit_detach_the_link() -> None:
    pair, channel, handle = attached_sender()
    client = pair.client
    pair.server.link(channel, handle).credit = 0
    client.send_transfer(channel, handle, b"x", b"1", settled=True)
    events = pair.pump()
    (failed,) = [e for side, e in events if isinstance(e, LinkFailed)]
    assert failed.error == Error(TRANSFER_LIMIT_EXCEEDED)
    (detach,) = [e for side, e in events if side == "C" and isinstance(e, DetachReceived)]
    assert detach.closed and detach.error == Error(TRANSFER_LIMIT_EXCEEDED)


def test_frames_on_an_unattached_handle_end_the_session() -> None:
    pair = Pair()
    channel = pair.session()
    pair.server.receive_data(frames.performative_frame(channel, Flow(0, 10, 0, 10, handle=9)))
    event = pair.server.next_event()
    assert event == SessionFailed(channel, Error(UNATTACHED_HANDLE, "Unattached link handle: 9"))
    pair.server.receive_data(frames.performative_frame(channel, Transfer(4, 0, b"", 0, True)))
    # (the owner has not answered: the session still reads; a transfer counts the window)
    assert isinstance(pair.server.next_event(), SessionFailed)


def test_connection_errors_as_rabbitmq_names_them() -> None:
    pair = Pair()
    pair.open()
    server = pair.server
    server.receive_data(frames.pack_head(131073, 2, 0, 0))
    failed = server.next_event()
    assert failed == ConnectionFailed(
        Error(FRAMING_ERROR, "frame size (131073 bytes) > maximum frame size (131072 bytes)"),
        reply=True,
    )
    server.send_close(failed.error)
    assert server.state is State.CLOSE_SENT

    pair = Pair()
    pair.open()
    pair.server.receive_data(frames.frame(0, b"\x00\x53\x11\xc0\x02\x01\xff"))
    failed = pair.server.next_event()
    assert isinstance(failed, ConnectionFailed) and failed.error.condition == DECODE_ERROR

    pair = Pair()
    pair.open()
    pair.server.receive_data(frames.frame(64, b"\x00\x53\x17\x45"))
    assert pair.server.next_event() == ConnectionFailed(
        Error(FRAMING_ERROR, "channel number (64) exceeds maximum channel number (63)"), True
    )


def test_a_max_frame_size_below_512_is_refused() -> None:
    server = ServerConnection()
    client = ClientConnection()
    client.send_sasl_header()
    server.receive_data(client.data_to_send())
    server.next_event()
    server.send_sasl_mechanisms(("ANONYMOUS",))
    server.receive_data(frames.performative_frame(0, frames_sasl_init(), frames.FRAME_SASL))
    server.next_event()
    server.send_sasl_outcome(SaslCode.OK)
    server.receive_data(frames.AMQP_HEADER + frames.performative_frame(0, Open("c", None, 511)))
    assert isinstance(server.next_event(), AmqpHeaderReceived)
    server.send_amqp_header()
    failed = server.next_event()
    assert failed == ConnectionFailed(
        Error(FRAME_SIZE_TOO_SMALL, "max_frame_size (511) < minimum maximum frame size (512)"),
        reply=False,  # RabbitMQ refuses before its open: the socket just closes
    )


def frames_sasl_init() -> Any:
    from leveret.protocol.amqp10.performatives import SaslInit

    return SaslInit("ANONYMOUS", b"")


def test_heartbeats_are_read_and_written() -> None:
    pair = Pair()
    pair.open()
    pair.server.receive_data(frames.HEARTBEAT * 3)
    assert isinstance(pair.server.next_event(), NeedData)
    pair.server.send_heartbeat()
    assert pair.server.data_to_send() == frames.HEARTBEAT


def test_a_closed_window_holds_transfers_back_until_a_flow() -> None:
    pair = Pair()
    pair.stored = [b"a", b"b", b"c"]
    channel = pair.session()
    client = pair.client
    client.session(channel).incoming_window = 0
    handle = client.send_attach(channel, name="sub", role=True, source=Source("/queues/q"))
    pair.pump()
    client.grant_credit(channel, handle, 10)
    events = pair.pump()
    assert not [e for side, e in events if isinstance(e, TransferReceived)]
    assert len(pair.server.session(channel).blocked) == 3
    client.send_session_flow(channel, 2)
    events = pair.pump()
    assert [e.payload for side, e in events if isinstance(e, TransferReceived)] == [b"a", b"b"]


# --------------------------------------------------------------------- fuzzing
_CONDITIONS = {DECODE_ERROR, FRAMING_ERROR, FRAME_SIZE_TOO_SMALL, "amqp:not-allowed",
               "amqp:illegal-state"}  # fmt: skip


@given(st.binary(max_size=400), st.integers(0, 3))
@settings(max_examples=examples(400))
def test_any_bytes_give_events_never_exceptions(data: bytes, stage: int) -> None:
    pair = Pair()
    if stage >= 2:
        pair.session()
    elif stage == 1:
        pair.open()
    server = pair.server
    server.receive_data(data if stage else b"AMQP\x03\x01\x00\x00" + data)
    for _ in range(200):
        event = server.next_event()
        if isinstance(event, NeedData):
            return
        if isinstance(event, ConnectionFailed):
            assert event.error.condition in _CONDITIONS
            return
        pair.answer(event)
    raise AssertionError("too many events from 400 bytes")


@given(st.binary(min_size=1, max_size=60), st.integers(0, 2))
@settings(max_examples=examples(300))
def test_well_framed_garbage_gives_events_never_exceptions(body: bytes, channel: int) -> None:
    pair = Pair()
    pair.session()
    server = pair.server
    server.receive_data(frames.frame(channel, b"\x00\x53" + body))
    for _ in range(20):
        event = server.next_event()
        if isinstance(event, NeedData | ConnectionFailed):
            return
        pair.answer(event)


def test_a_second_open_ends_the_connection() -> None:
    """An open after the open is the peer breaking the protocol: the connection fails with
    illegal-state (found by tests/server/test_fuzz_amqp10.py), never an exception."""
    from leveret.protocol.amqp10.events import ConnectionFailed

    pair = Pair()
    pair.open()
    second = Open("client", None, None, None, None, None, None, None, None, None)
    pair.server.receive_data(frames.performative_frame(0, second))
    event = pair.server.next_event()
    assert isinstance(event, ConnectionFailed)
    assert event.error.condition == ILLEGAL_STATE
