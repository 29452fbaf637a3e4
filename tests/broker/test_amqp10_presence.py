"""How an AMQP 1.0 connection's sessions register with the broker in RabbitMQ 3.10.8's
plugin's shape (a direct connection and its channel per session), through the hooks the
session calls; the events they tell, in RabbitMQ's order, and the errors they answer.
tests/differential/test_amqp10_*.py show the same over sockets beside RabbitMQ."""

from __future__ import annotations

from typing import Any

import pytest

from leveret.broker import amqp10_presence as presence
from leveret.broker import events as ev
from leveret.broker.amqp10_common import LinkSession
from leveret.broker.amqp10_links import PublisherLink
from leveret.broker.broker import BrokerCore
from leveret.protocol.amqp10 import definitions as d
from tests.broker.fakes import new_broker


class Owner:
    """An AMQP 1.0 connection open on vhost '/' as guest, as the hooks see it."""

    def __init__(self, broker: BrokerCore) -> None:
        self.broker = broker
        self.id = broker.next_connection_id()
        self.user = broker.users.users["guest"]
        self.vhost = "/"
        self.registered = False
        self.peer = ("127.0.0.1", 50000)
        self.local = ("127.0.0.1", 5672)
        self.auth_mechanism = "PLAIN"
        self.transport_details: dict[str, Any] = {}
        self.sessions: dict[int, LinkSession] = {}
        self.ended: list[tuple[int, d.Error]] = []

    name = "127.0.0.1:50000 -> 127.0.0.1:5672"
    username = "guest"
    channel_count = 0

    def force_close(self, reason: str) -> None:
        raise AssertionError("not registered: nobody closes it so")

    def end_session(self, channel: int, error: d.Error) -> None:
        self.ended.append((channel, error))
        presence.ended(self, self.sessions.pop(channel))


@pytest.fixture
def setup() -> tuple[BrokerCore, Owner, list[ev.BrokerEvent]]:
    broker = new_broker()
    seen: list[ev.BrokerEvent] = []
    broker.observers.subscribe(seen.append)
    return broker, Owner(broker), seen


def kinds(seen: list[ev.BrokerEvent]) -> list[tuple[str, str]]:
    return [(type(e).__name__, type(getattr(e, "connection", getattr(e, "channel", e))).__name__)
            for e in seen]  # fmt: skip


def begin(owner: Owner, channel: int = 0) -> LinkSession:
    session = LinkSession(channel)
    assert presence.begin(owner, session) is None
    owner.sessions[channel] = session
    return session


def test_a_session_opens_a_direct_connection_and_its_channel(setup: Any) -> None:
    broker, owner, seen = setup
    session = begin(owner)
    direct = presence.direct_of(session)
    assert direct is not None and broker.connections == {direct.id: direct}
    assert (direct.name, direct.vhost, direct.username, direct.channel_count) == (
        owner.name,
        "/",
        "guest",
        1,
    )
    assert kinds(seen) == [
        ("UserAuthenticated", "DirectConnection"),
        ("ConnectionOpened", "DirectConnection"),
        ("ConnectionAuthorized", "DirectConnection"),
        ("ChannelOpened", "BackingChannel"),
    ]
    assert broker.open_connections(vhost="/") == broker.open_connections(user="guest") == 1
    seen.clear()
    presence.ended(owner, owner.sessions.pop(0))
    assert broker.connections == {}
    assert kinds(seen) == [
        ("ChannelClosed", "BackingChannel"),
        ("ConnectionClosed", "DirectConnection"),
    ]


def test_the_limits_count_sessions_and_refuse_at_begin(setup: Any) -> None:
    broker, owner, seen = setup
    refused = d.Error(
        d.UNAUTHORIZED_ACCESS, "Access for user 'guest' was refused: insufficient permissions"
    )
    broker.vhosts["/"].set_limits({"max-connections": 1})
    begin(owner)
    seen.clear()
    assert presence.begin(owner, LinkSession(1)) == refused
    assert seen == []  # the vhost's limit comes before the login
    broker.vhosts["/"].set_limits({})
    broker.set_user_limit("guest", "max-connections", 1)
    seen.clear()
    assert presence.begin(owner, LinkSession(1)) == refused
    assert kinds(seen) == [("UserAuthenticated", "DirectConnection")]
    assert len(broker.connections) == 1


def test_an_attach_opens_and_closes_channel_2(setup: Any) -> None:
    _broker, owner, seen = setup
    session = begin(owner)
    seen.clear()
    with presence.attaching(owner, session, 0):
        session.publishers[0] = PublisherLink(0, 0, "p", "/queues/q", None, "q", False, 10)
    assert [(type(e).__name__, e.channel.number) for e in seen] == [
        ("ChannelOpened", 2),
        ("ChannelClosed", 2),
    ]
    assert session.figures.confirm_mode  # an unsettled publisher


def test_closing_the_direct_connection_ends_the_session(setup: Any) -> None:
    _broker, owner, seen = setup
    session = begin(owner)
    direct = presence.direct_of(session)
    assert direct is not None
    seen.clear()
    direct.force_close("bye é")
    ((channel, error),) = owner.ended
    assert (channel, error.condition) == (0, d.INTERNAL_ERROR)
    assert error.description == (
        "{shutdown,{connection_closing,{server_initiated_close,320,[98,121,101,32,195,169]}}}"
    )
    assert kinds(seen) == [  # the connection first, then its channel
        ("ConnectionClosed", "DirectConnection"),
        ("ChannelClosed", "BackingChannel"),
    ]
    direct.force_close("again")
    assert len(owner.ended) == 1


def test_the_reader_tells_of_its_close_unless_registered(setup: Any) -> None:
    _broker, owner, seen = setup
    presence.closing(owner)
    assert kinds(seen) == [("ConnectionClosed", "Owner")]
    owner.registered = True
    presence.closing(owner)
    assert len(seen) == 1


def test_a_registered_connection_closed_by_the_broker() -> None:
    assert presence.forced('say "hi"') == d.Error(
        d.INTERNAL_ERROR, 'Connection forced: "say \\"hi\\""'
    )
