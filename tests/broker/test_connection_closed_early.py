"""An AMQP 0-9-1 connection that ends before its start-ok (a TCP probe, a protocol header
and no more, a wrong header) is told of and counted as rabbit_reader does for every
connection it read: ``connection.closed`` (name, pid, node, empty client properties) and
the node's connection_closed, not connection_created. No socket: a Session over a
BrokerCore with the event exchange and the management statistics attached."""

from __future__ import annotations

from typing import Any

import pytest

from leveret.broker.broker import BrokerCore
from leveret.broker.ports import Endpoint
from leveret.broker.session import Session
from leveret.management.stats import Stats
from tests.broker.fakes import RecordingOutput, plain, recorded_events

PEER = ("127.0.0.1", 40123)
LOCAL = ("127.0.0.1", 5672)


@pytest.fixture
def stats(domain: BrokerCore) -> Stats:
    return Stats(domain)


@pytest.fixture
def events(domain: BrokerCore, monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, list]]:
    return recorded_events(domain, monkeypatch)


def socket_session(domain: BrokerCore, port: int = PEER[1]) -> Session:
    """The session of an accepted socket (what the AMQP edge makes as it greets one)."""
    endpoint: Any = Endpoint(None, None)
    return Session(domain, RecordingOutput(), ("127.0.0.1", port), LOCAL, None, endpoint)


def test_a_socket_that_never_sent_start_ok_is_told_of_as_it_ends(
    domain: BrokerCore, events: list[tuple[str, list]], stats: Stats
) -> None:
    s = socket_session(domain)
    assert domain.connections == {}  # not listed: it never got to start-ok
    s.close()
    s.close()  # once
    assert events == [
        (
            "connection.closed",
            [
                ("client_properties", []),
                ("node", "rabbit@domain-test"),
                ("pid", "<rabbit@domain-test.1.1.0>"),
                ("name", "127.0.0.1:40123 -> 127.0.0.1:5672"),
                ("timestamp_in_ms", 0),
            ],
        )
    ]
    assert stats.churn["connections_closed"] == 1
    assert stats.churn["connections_opened"] == 0
    assert domain.connections == {}


def test_each_has_a_pid_of_its_own(domain: BrokerCore, events: list[tuple[str, list]]) -> None:
    opened = socket_session(domain, 40001)
    assert opened.authenticate("PLAIN", plain("guest", "guest"), {}) is None
    early = [socket_session(domain, 40002 + i) for i in range(2)]
    for s in early:
        s.close()
    opened.close()
    pids = [dict(headers)["pid"] for key, headers in events if key == "connection.closed"]
    assert len(pids) == 3 and len(set(pids)) == 3


def test_a_refused_login_is_told_of_with_its_client_properties(
    domain: BrokerCore, events: list[tuple[str, list]], stats: Stats
) -> None:
    s = socket_session(domain)
    assert s.authenticate("PLAIN", plain("guest", "wrong"), {"product": "p"}) is not None
    s.close()
    assert [k for k, _ in events] == ["user.authentication.failure", "connection.closed"]
    assert dict(events[1][1])["client_properties"] != []
    assert stats.churn["connections_closed"] == 1
    assert stats.churn["connections_opened"] == 0


def test_an_in_process_session_without_a_socket_is_not(
    domain: BrokerCore, events: list[tuple[str, list]], stats: Stats
) -> None:
    Session(domain, RecordingOutput()).close()
    assert events == []
    assert stats.churn["connections_closed"] == 0
