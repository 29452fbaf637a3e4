"""The ``/management`` link pair of an AMQP 1.0 connection, frame by frame: the sans-IO
client connection of the protocol package drives a broker's Amqp10Session in memory.

What is pinned is RabbitMQ 4.2's rabbit_amqp_session (v4.2.9): the attach clauses and
check_paired, incoming_mgmt_link_transfer's checks and their texts, 8 credits for requests
granted again once 4 are used, the responses' flow control on the client's credit
(handle_outgoing_mgmt_link_flow_control), maybe_detach_mgmt_link."""

from __future__ import annotations

from typing import Any

import pytest

from leveret.broker.amqp10_session import Amqp10Session
from leveret.broker.broker import BrokerCore
from leveret.broker.ports import Endpoint
from leveret.protocol.amqp10 import definitions as d
from leveret.protocol.amqp10 import events as ev
from leveret.protocol.amqp10 import types as t
from leveret.protocol.amqp10.client import ClientConnection
from leveret.protocol.amqp10.server import ServerConnection
from leveret.protocol.amqp10.types import Symbol, Value
from tests.broker.fakes import new_broker

NULL: Value = ("null", None)
PAIRED = {Symbol("paired"): True}


class _Edge:
    def schedule(self) -> None:
        pass

    def start_heartbeats(self, interval: int, send_every: float | None = None) -> None:
        pass

    def opened(self) -> None:
        pass

    def after_flush(self, callback: Any) -> None:
        callback()

    def later(self, delay: float, callback: Any) -> None:
        callback()

    def force_close(self, reason: str) -> None:
        pass


class Wire:
    """A client connection and a broker's session joined in memory."""

    def __init__(self, broker: BrokerCore, user: str = "guest", password: str = "guest") -> None:
        self.broker = broker
        self.server = ServerConnection(131072)
        endpoint: Endpoint[ServerConnection, Any] = Endpoint(self.server, _Edge(), ("PLAIN",))
        self.session = Amqp10Session(
            broker, endpoint, ("127.0.0.1", 50000), ("127.0.0.1", 5672), None, 131072, 60
        )
        self.client = ClientConnection()
        self.client.send_sasl_header()
        self.pump()
        self.client.send_sasl_init("PLAIN", f"\0{user}\0{password}".encode())
        self.pump()
        self.client.send_amqp_header()
        self.pump()
        self.client.send_open("client")
        self.pump()
        self.channel = self.client.send_begin(incoming_window=1000)
        self.pump()

    def pump(self) -> list[Any]:
        """Bytes both ways until neither side has any; the client's events."""
        events: list[Any] = []
        while True:
            data = self.client.data_to_send()
            if data:
                self.server.receive_data(data)
            while not isinstance(event := self.server.next_event(), ev.NeedData):
                self.session.handle(event)
            back = self.server.data_to_send()
            if back:
                self.client.receive_data(back)
            while not isinstance(event := self.client.next_event(), ev.NeedData):
                events.append(event)
            if not data and not back:
                return events

    def attach(
        self,
        name: str,
        receive: bool,
        properties: dict[Any, Any] | None = PAIRED,
        **fields: Any,
    ) -> tuple[int, list[Any]]:
        """The client's half of a pair (``receive``: the responses' link)."""
        if receive:
            fields.setdefault("source", d.Source("/management"))
            fields.setdefault("target", d.Target("/management"))
        else:
            fields.setdefault("source", d.Source("/management"))
            fields.setdefault("target", d.Target("/management"))
            fields.setdefault("snd_settle_mode", d.SenderSettleMode.SETTLED)
            fields.setdefault("initial_delivery_count", 0)
        handle = self.client.send_attach(
            self.channel, name=name, role=receive, properties=properties, **fields
        )
        return handle, self.pump()

    def pair(self, name: str = "pair") -> tuple[int, int]:
        sender, _ = self.attach(name, False)
        receiver, _ = self.attach(name, True)
        return sender, receiver

    def request(
        self, sender: int, method: str, to: str, body: Value = NULL, settled: bool = True
    ) -> list[Any]:
        props = ("list", [("string", to), NULL, ("string", to), ("string", method),
                          ("string", "$me")])  # fmt: skip
        payload = t.section(t.PROPERTIES, props) + t.section(t.AMQP_VALUE, body)
        self.client.send_transfer(self.channel, sender, payload, to.encode(), settled)
        return self.pump()


def responses(events: list[Any]) -> list[tuple[str, Any]]:
    out = []
    for e in events:
        if isinstance(e, ev.TransferReceived):
            sections = dict(t.sections(e.payload))
            out.append((sections[t.PROPERTIES][1][3][1], sections[t.AMQP_VALUE]))
    return out


def ended(events: list[Any]) -> d.Error | None:
    for e in events:
        if isinstance(e, ev.EndReceived):
            return e.error
    raise AssertionError(f"the session did not end: {events}")


@pytest.fixture
def wire() -> Wire:
    return Wire(new_broker())


def test_a_pair_answers_under_the_clients_credit(wire: Wire) -> None:
    sender, events = wire.attach("pair", False)
    attach = next(e for e in events if isinstance(e, ev.AttachReceived)).attach
    assert attach.role is True and attach.snd_settle_mode == d.SenderSettleMode.SETTLED
    assert attach.properties == PAIRED and attach.rcv_settle_mode == d.ReceiverSettleMode.FIRST
    credit = next(e for e in events if isinstance(e, ev.FlowReceived))
    assert credit.handle == sender
    assert wire.client.link(wire.channel, sender).credit == 8
    receiver, events = wire.attach("pair", True)
    attach = next(e for e in events if isinstance(e, ev.AttachReceived)).attach
    assert attach.role is False and attach.initial_delivery_count == 0
    wire.client.grant_credit(wire.channel, receiver, 1)
    assert responses(wire.request(sender, "PUT", "/queues/q", ("map", []))) == [
        ("201", _queue_map(wire, "q"))
    ]


def _queue_map(wire: Wire, name: str) -> Value:
    q = wire.broker.vhosts["/"].queues[name]
    return (
        "map",
        [
            (("string", "leader"), ("string", wire.broker.node_name)),
            (("string", "message_count"), ("ulong", 0)),
            (("string", "consumer_count"), ("uint", 0)),
            (("string", "name"), ("string", q.name)),
            (("string", "vhost"), ("string", "/")),
            (("string", "durable"), ("bool", True)),
            (("string", "auto_delete"), ("bool", False)),
            (("string", "exclusive"), ("bool", False)),
            (("string", "type"), ("string", "classic")),
            (
                ("string", "arguments"),
                ("map", [(("string", "x-queue-type"), ("string", "classic"))]),
            ),
            (("string", "replicas"), ("array", [("string", wire.broker.node_name)])),
        ],
    )


def test_request_credit_comes_back_once_half_is_used(wire: Wire) -> None:
    sender, receiver = wire.pair()
    wire.client.grant_credit(wire.channel, receiver, 20)
    seen = []
    for _ in range(6):
        wire.request(sender, "GET", "/queues/none")
        seen.append(wire.client.link(wire.channel, sender).credit)
    # 8 at first; one a request; back to 8 when 4 are left (maybe_grant_mgmt_link_credit)
    assert seen == [7, 6, 5, 8, 7, 6]


def test_no_credit_for_the_response_ends_the_session(wire: Wire) -> None:
    # management_SUITE drain: credit given, then drained; the request finds none
    sender, receiver = wire.pair()
    wire.client.grant_credit(wire.channel, receiver, 2)
    wire.pump()
    wire.client.grant_credit(wire.channel, receiver, 3, drain=True)
    events = wire.pump()
    flow = next(e for e in events if isinstance(e, ev.FlowReceived))
    assert flow.drain and wire.client.link(wire.channel, receiver).credit == 0
    assert ended(wire.request(sender, "DELETE", "/queues/q1")) == d.Error(
        d.PRECONDITION_FAILED,
        "insufficient credit (0) for management link from RabbitMQ to client",
    )


def test_an_echo_on_the_responses_link_is_answered(wire: Wire) -> None:
    _, receiver = wire.pair()
    wire.client.grant_credit(wire.channel, receiver, 5, echo=True)
    flows = [e for e in wire.pump() if isinstance(e, ev.FlowReceived)]
    assert [(f.handle, f.available) for f in flows] == [(receiver, 0)]


def test_half_a_pair_takes_no_request(wire: Wire) -> None:
    sender, _ = wire.attach("half", False)
    assert ended(wire.request(sender, "GET", "/queues/q")) == d.Error(
        d.PRECONDITION_FAILED, "received transfer on half open management link pair"
    )


def test_an_unsettled_request_ends_the_session(wire: Wire) -> None:
    # `true = Settled` in incoming_mgmt_link_transfer: RabbitMQ's session crashes
    sender, receiver = wire.pair()
    wire.client.grant_credit(wire.channel, receiver, 1)
    error = ended(wire.request(sender, "GET", "/queues/q", settled=False))
    assert error is not None and error.condition == d.INTERNAL_ERROR


def test_a_refused_permission_ends_the_session() -> None:
    broker = new_broker()
    broker.add_user("u", "p")
    broker.set_permissions("u", "/", "^$", ".*", ".*")
    wire = Wire(broker, "u", "p")
    sender, receiver = wire.pair()
    wire.client.grant_credit(wire.channel, receiver, 1)
    assert ended(wire.request(sender, "PUT", "/queues/q", ("map", []))) == d.Error(
        d.UNAUTHORIZED_ACCESS, "configure access to queue 'q' in vhost '/' refused for user 'u'"
    )
    assert "q" not in broker.vhosts["/"].queues


@pytest.mark.parametrize(
    ("receive", "properties"),
    [
        (False, None),
        (True, None),
        (False, {Symbol("paired"): False}),
        (True, {Symbol("paired"): 1}),
    ],
)
def test_a_half_must_say_it_is_paired(
    wire: Wire, receive: bool, properties: dict[Any, Any] | None
) -> None:
    # check_paired: the symbol paired, boolean true
    _, events = wire.attach("p", receive, properties)
    attach = next(e for e in events if isinstance(e, ev.AttachReceived)).attach
    detach = next(e for e in events if isinstance(e, ev.DetachReceived))
    # Figure 2.33, as RabbitMQ answers: a null terminus on the broker's side
    assert (attach.source is None) is receive and (attach.target is None) is (not receive)
    assert detach.error == d.Error(
        d.INVALID_FIELD, "Link property 'paired' is not set to boolean value 'true'"
    )


def test_the_same_half_twice_is_refused(wire: Wire) -> None:
    wire.attach("p", False)
    _, events = wire.attach("p", False)
    detach = next(e for e in events if isinstance(e, ev.DetachReceived))
    assert detach.error is not None and detach.error.condition == d.PRECONDITION_FAILED


def test_an_unsettled_sender_to_management_is_no_pair(wire: Wire) -> None:
    # RabbitMQ's management clause takes a sender in snd-settle-mode settled only; the
    # others are publishers, and /management is no address of theirs
    _, events = wire.attach("p", False, snd_settle_mode=d.SenderSettleMode.UNSETTLED)
    detach = next(e for e in events if isinstance(e, ev.DetachReceived))
    assert detach.error is not None and detach.error.condition == d.INVALID_FIELD
    assert not wire.session.link_pairs


def test_either_half_first_and_detached_in_either_order(wire: Wire) -> None:
    # management_SUITE link_attach_order, multiple_link_pairs
    r1, _ = wire.attach("one", True)
    s1, _ = wire.attach("one", False)
    s2, r2 = wire.pair("two")
    for receiver in (r1, r2):
        wire.client.grant_credit(wire.channel, receiver, 1)
    assert responses(wire.request(s1, "PUT", "/queues/q", ("map", [])))[0][0] == "201"
    assert responses(wire.request(s2, "DELETE", "/queues/q"))[0][0] == "200"
    assert len(wire.session.link_pairs[wire.channel].pairs) == 2
    for handle in (s1, r1, r2, s2):
        wire.client.send_detach(wire.channel, handle, True)
        events = wire.pump()
        assert any(isinstance(e, ev.DetachReceived) and e.error is None for e in events)
    assert not wire.session.link_pairs  # the server's state is gone with them


def test_the_connections_exclusive_queues_go_with_it(wire: Wire) -> None:
    sender, receiver = wire.pair()
    wire.client.grant_credit(wire.channel, receiver, 1)
    body = ("map", [(("string", "exclusive"), ("bool", True))])
    assert responses(wire.request(sender, "PUT", "/queues/mine", body))[0][0] == "201"
    queues = wire.broker.vhosts["/"].queues
    assert queues["mine"].exclusive_owner is wire.session and queues["mine"].durable
    wire.session.close()
    assert "mine" not in queues
