"""``loopback_users``, RabbitMQ's key: users who may log in only from the local host
(guest by default). A connection from one of the machine's own non-loopback addresses is
refused for them, over AMQP and on the management API, with RabbitMQ's answers; the
configuration file sets the list as rabbitmq.conf does (a list, "none", or a table of
name = true/false)."""

from __future__ import annotations

import base64
import json
import socket
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pika
import pytest
from pika.exceptions import ProbableAuthenticationError

from leveret.server.config import Config, ConfigError
from tests.support.brokers import BrokerUnderTest, start_leveret


def external_address() -> str | None:
    """An address of this machine that is not loopback, if it has one."""
    try:
        infos = socket.getaddrinfo(socket.gethostname(), None, socket.AF_INET)
    except OSError:
        infos = []
    addresses = {i[4][0] for i in infos}
    probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        probe.connect(("192.0.2.1", 9))  # no packet is sent: only the route is looked up
        addresses.add(probe.getsockname()[0])
    except OSError:
        pass
    finally:
        probe.close()
    for address in sorted(addresses):
        if not address.startswith("127."):
            return address
    return None


ADDRESS = external_address()
needs_address = pytest.mark.skipif(ADDRESS is None, reason="no non-loopback address here")


def amqp_login(address: str, port: int, user: str, password: str) -> str:
    try:
        pika.BlockingConnection(
            pika.ConnectionParameters(
                address, port, credentials=pika.PlainCredentials(user, password)
            )
        ).close()
        return "ok"
    except ProbableAuthenticationError as exc:
        return str(exc)


def api_login(address: str, port: int, user: str, password: str) -> tuple[int, bytes]:
    req = urllib.request.Request(f"http://{address}:{port}/api/whoami")
    token = base64.b64encode(f"{user}:{password}".encode()).decode()
    req.add_header("Authorization", f"Basic {token}")
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, b""
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


@pytest.fixture
def open_leveret(tmp_path: Path) -> Iterator[BrokerUnderTest]:
    """A Leveret listening on every address, with the default loopback_users."""
    broker = start_leveret(extra=["--bind", "0.0.0.0"])
    yield broker
    broker.stop()


@needs_address
@pytest.mark.rabbitmq
def test_guest_only_from_localhost_as_rabbitmq(
    open_leveret: BrokerUnderTest, rabbitmq: BrokerUnderTest
) -> None:
    assert ADDRESS is not None
    answers = []
    for broker, http_port in (
        (open_leveret, open_leveret.http_port),
        (rabbitmq, rabbitmq.http_port),
    ):
        answers.append(
            (
                amqp_login(ADDRESS, broker.port, "guest", "guest"),
                amqp_login("127.0.0.1", broker.port, "guest", "guest"),
                api_login(ADDRESS, http_port, "guest", "guest"),
                api_login("127.0.0.1", http_port, "guest", "guest")[0],
            )
        )
    assert answers[0] == answers[1]
    assert answers[0][2] == (
        401,
        b'{"error":"not_authorised","reason":"User can only log in via localhost"}',
    )


@needs_address
@pytest.mark.parametrize(
    ("setting", "guest_outside"),
    [
        ('loopback_users = "none"', "ok"),
        ("loopback_users = []", "ok"),
        ('loopback_users = ["guest"]', "refused"),
        ("[loopback_users]\nguest = false", "ok"),
        ("[loopback_users]\nguest = true", "refused"),
    ],
)
def test_config_file_sets_loopback_users(tmp_path: Path, setting: str, guest_outside: str) -> None:
    assert ADDRESS is not None
    config = tmp_path / "leveret.toml"
    config.write_text(setting + "\n")
    broker = start_leveret(extra=["--bind", "0.0.0.0", "--config", str(config)])
    try:
        answer = amqp_login(ADDRESS, broker.port, "guest", "guest")
        assert ("ok" if answer == "ok" else "refused") == guest_outside
        status = api_login(ADDRESS, broker.http_port, "guest", "guest")[0]
        assert status == (200 if guest_outside == "ok" else 401)
    finally:
        broker.stop()


def test_loopback_users_values(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    for text, expected in [
        ('loopback_users = "none"', ()),
        ('loopback_users = ["a", "b"]', ("a", "b")),
        ("[loopback_users]\na = true\nb = false", ("a",)),
    ]:
        path.write_text(text)
        assert Config.load(path, env={}).loopback_users == expected
    assert Config.load(None, env={}).loopback_users == ("guest",)
    assert Config.load(None, env={"LEVERET_LOOPBACK_USERS": "x, y"}).loopback_users == ("x", "y")
    path.write_text("loopback_users = 3")
    with pytest.raises(ConfigError, match="invalid value for 'loopback_users'"):
        Config.load(path, env={})


def test_node_name_is_configurable() -> None:
    """rabbit@<host> by default; node_name (LEVERET_NODE_NAME) names it otherwise."""
    broker = start_leveret(env={"LEVERET_NODE_NAME": "rabbit@elsewhere"})
    try:
        req = urllib.request.Request(f"http://127.0.0.1:{broker.http_port}/api/overview")
        req.add_header("Authorization", "Basic " + base64.b64encode(b"guest:guest").decode())
        with urllib.request.urlopen(req, timeout=10) as r:
            assert json.loads(r.read())["node"] == "rabbit@elsewhere"
    finally:
        broker.stop()
