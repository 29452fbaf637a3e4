"""The events a stream-protocol connection tells of (rabbit_stream_reader's, on
amq.rabbitmq.event): which of its logins, opens and ends are told of, and the headers
each carries, in order, as the event exchange encodes them. No socket: a StreamSession
over a BrokerCore with the event exchange attached."""

from __future__ import annotations

from typing import Any

import pytest

from leveret.broker.broker import BrokerCore
from leveret.broker.stream_session import StreamSession
from leveret.protocol.stream.spec import Code
from tests.broker.fakes import recorded_events, stream_endpoint

PEER = ("127.0.0.1", 40123)
LOCAL = ("127.0.0.1", 5552)
OPENED_AND_CLOSED = ["user.authentication.success", "connection.created", "connection.closed"]


class Output:
    def send(self, data: bytes) -> None:
        pass

    def send_chunk(self, subscription_id: int, chunk: Any) -> None:
        pass

    def writable(self) -> bool:
        return True

    def force_close(self, reason: str) -> None:
        pass


# the client properties a=1 and b=2 as an event renders each
PEER_A = '{<<"a">>,longstr,<<"1">>}'
PEER_B = '{<<"b">>,longstr,<<"2">>}'


@pytest.fixture
def broker() -> BrokerCore:
    b = BrokerCore(node_name="rabbit@test")
    b.add_vhost("/")
    b.add_user("guest", "guest", ["administrator"])
    b.set_permissions("guest", "/", ".*", ".*", ".*")
    return b


@pytest.fixture
def events(broker: BrokerCore, monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, list]]:
    return recorded_events(broker, monkeypatch)


def session(broker: BrokerCore, properties: dict[str, str] | None = None) -> StreamSession:
    endpoint = stream_endpoint(Output(), ("AMQPLAIN", "PLAIN"))
    s = StreamSession(broker, endpoint, PEER, ("h", 5552), LOCAL)
    s.peer_properties(properties if properties is not None else {"b": "2", "a": "1"})
    return s


def keys(events: list[tuple[str, list]]) -> list[str]:
    return [k for k, _ in events]


def test_opened_and_closed(broker: BrokerCore, events: list[tuple[str, list]]) -> None:
    s = session(broker, {"product": "p", "connection_name": "mine"})
    assert s.authenticate("PLAIN", b"\0guest\0guest") == Code.OK
    s.frame_max, s.heartbeat = 1048576, 60
    assert s.open("/") == Code.OK
    s.close()
    assert keys(events) == OPENED_AND_CLOSED
    success = events[0][1]
    assert success == [
        ("ssl", False),
        ("auth_mechanism", "PLAIN"),
        ("protocol", "stream"),
        ("peer_port", 40123),
        ("peer_host", "{127,0,0,1}"),
        ("connection_name", "127.0.0.1:40123 -> 127.0.0.1:5552"),
        ("host", "{127,0,0,1}"),
        ("name", "guest"),
        ("connection_type", "network"),
        ("timestamp_in_ms", 0),
    ]
    created = events[1][1]
    names = [k for k, _ in created]
    # rabbit_stream_reader's ?CREATION_EVENT_KEYS, last first; the client's name last
    assert names == [
        "user_who_performed_action", "node", "connected_at", "client_properties",
        "channel_max", "frame_max", "timeout", "protocol", "vhost", "user", "protocol",
        "ssl_hash", "ssl_cipher", "ssl_key_exchange", "ssl_protocol", "auth_mechanism",
        "peer_cert_validity", "peer_cert_issuer", "peer_cert_subject", "ssl", "peer_host",
        "host", "peer_port", "port", "name", "pid", "user_provided_name", "timestamp_in_ms",
    ]  # fmt: skip
    values = dict(created)
    assert values["protocol"] == "stream" and values["user_provided_name"] == "mine"
    assert (values["timeout"], values["frame_max"], values["channel_max"]) == (60, 1048576, 0)
    # a map in rabbit_stream_reader: in key order
    assert values["client_properties"] == [
        '{<<"connection_name">>,longstr,<<"mine">>}',
        '{<<"product">>,longstr,<<"p">>}',
    ]
    closed = events[2][1]
    assert [k for k, _ in closed] == [
        "client_properties", "node", "pid", "name", "user_provided_name", "timestamp_in_ms",
    ]  # fmt: skip


def failure(events: list[tuple[str, list]]) -> dict[str, Any]:
    assert keys(events)[0] == "user.authentication.failure"
    return dict(events[0][1])


def error(headers: dict[str, Any]) -> str:
    return "".join(chr(c) for c in headers["error"])


@pytest.mark.parametrize(
    ("response", "name", "why"),
    [
        (b"\0guest\0wrong", "guest", "user 'guest' - invalid credentials"),
        (b"\0nobody\0pw", "nobody", "user 'nobody' - invalid credentials"),
        (b"\0guest\0", "guest", "user 'guest' attempted to log in with a blank password"),
    ],
)
def test_refused_credentials_are_told_of(
    broker: BrokerCore, events: list[tuple[str, list]], response: bytes, name: str, why: str
) -> None:
    s = session(broker)
    assert s.authenticate("PLAIN", response) == Code.AUTHENTICATION_FAILURE
    s.close()
    assert keys(events) == ["user.authentication.failure", "connection.closed"]
    headers = failure(events)
    assert headers["name"] == name and error(headers).startswith(why)
    assert [k for k, _ in events[0][1]][:2] == ["error", "ssl"]
    # a stream connection's peer properties, in key order
    assert dict(events[1][1])["client_properties"] == [PEER_A, PEER_B]


def test_unreadable_plain_bytes_are_told_of_without_a_name(
    broker: BrokerCore, events: list[tuple[str, list]]
) -> None:
    s = session(broker)
    assert s.authenticate("PLAIN", b"\0guest") == Code.SASL_ERROR
    headers = failure(events)
    assert "name" not in headers
    assert error(headers) == "response <<0,103,117,101,115,116>> invalid"


def test_what_is_refused_untold(broker: BrokerCore, events: list[tuple[str, list]]) -> None:
    """An unknown mechanism, a loopback user from elsewhere and a refused vhost: only the
    connection's end is told of (after the login's success, for the vhost)."""
    s = session(broker)
    assert s.authenticate("NOPE", b"") == Code.SASL_MECHANISM_NOT_SUPPORTED
    s.close()
    assert keys(events) == ["connection.closed"]
    events.clear()
    s = StreamSession(
        broker, stream_endpoint(Output(), ("PLAIN",)), ("10.0.0.9", 1), ("h", 5552), LOCAL
    )
    assert s.authenticate("PLAIN", b"\0guest\0guest") == Code.SASL_AUTHENTICATION_FAILURE_LOOPBACK
    s.close()
    assert keys(events) == ["connection.closed"]
    assert dict(events[0][1])["client_properties"] == []
    events.clear()
    s = session(broker)
    assert s.authenticate("PLAIN", b"\0guest\0guest") == Code.OK
    assert s.open("nowhere") == Code.VIRTUAL_HOST_ACCESS_FAILURE
    s.close()
    assert keys(events) == ["user.authentication.success", "connection.closed"]


def test_an_amqp_connection_is_told_of_as_before(
    broker: BrokerCore, events: list[tuple[str, list]]
) -> None:
    """The protocol {0,9,1}, type network, and its client properties as they came."""
    from leveret.broker.session import Session

    class AmqpOutput:
        def __getattr__(self, name: str) -> Any:
            return lambda *a, **k: None

    s = Session(broker, AmqpOutput(), PEER, ("127.0.0.1", 5672))  # type: ignore[arg-type]
    assert s.authenticate("PLAIN", b"\0guest\0guest", {"b": "2", "a": "1"}) is None
    assert s.open_vhost("/") is None
    s.close()
    assert keys(events) == OPENED_AND_CLOSED
    assert dict(events[0][1])["protocol"] == "{0,9,1}"
    created = events[1][1]
    assert [k for k, _ in created][-2:] == ["type", "timestamp_in_ms"]
    assert [k for k, _ in created].count("protocol") == 1
    assert dict(created)["client_properties"] == [PEER_B, PEER_A]


def test_long_unreadable_bytes_are_printed_as_io_lib_breaks_them(
    broker: BrokerCore, events: list[tuple[str, list]]
) -> None:
    s = session(broker)
    assert s.authenticate("PLAIN", bytes([0] + [97] * 23)) == Code.SASL_ERROR
    assert error(failure(events)) == (
        "response <<0" + ",97" * 22 + ",\n" + " " * 11 + "97>> invalid"
    )  # as RabbitMQ's rabbit_misc:format prints it (erl 13)
