"""AMQP 1.0 on both brokers, for differential tests: the ``amqp10`` fixture and a
python-qpid-proton ``BlockingConnection`` helper.

The reference broker speaks AMQP 1.0 through its ``rabbitmq_amqp1_0`` plugin (3.10.8's),
on the AMQP port as RabbitMQ 4 does, chosen by the protocol header (``AMQP 3 1 0 0`` for
SASL). scripts/test enables the plugin before any test runs; the fixture enables it too
when a test runs outside scripts/test. Leveret serves AMQP 1.0 on its AMQP port as well,
with the plugin of the same name enabled: the fixture's Leveret runs with it (one for the
session, beside the 0-9-1 tests' own).

Addresses are RabbitMQ 3.x's (v1), which RabbitMQ 4 still accepts:
``/exchange/X/key``, ``/amq/queue/Q`` (a queue that exists), ``/queue/Q`` (declared by
the link), ``/topic/key`` (amq.topic).
"""

from __future__ import annotations

import contextlib
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from proton import Endpoint
from proton._utils import Fetcher  # not exported by proton.utils
from proton.utils import BlockingConnection, BlockingReceiver, BlockingSender

from tests.conftest import IN_CI
from tests.support.brokers import BrokerUnderTest, start_leveret
from tests.support.rabbitmq import debian_script
from tests.support.waiting import wait_for

# The protocol header that opens AMQP 1.0's SASL layer (protocol id 3); a broker that
# speaks AMQP 1.0 answers it with the same eight bytes.
SASL_HEADER = b"AMQP\x03\x01\x00\x00"


@dataclass(frozen=True)
class Amqp10Broker:
    """Where a test reaches one broker over AMQP 1.0, and its v1 addresses."""

    broker: BrokerUnderTest
    user: str = "guest"
    password: str = "guest"

    @property
    def name(self) -> str:
        return self.broker.name

    @property
    def url(self) -> str:
        """amqp://user:password@host:port, for a client that logs in with SASL PLAIN."""
        return self.url_as(self.user, self.password)

    def url_as(self, user: str, password: str) -> str:
        return (
            f"amqp://{quote(user, safe='')}:{quote(password, safe='')}"
            f"@{self.broker.host}:{self.broker.port}"
        )

    @staticmethod
    def queue(name: str) -> str:
        """A queue that exists (3.x's ``/amq/queue/Q``)."""
        return f"/amq/queue/{name}"

    @staticmethod
    def declared_queue(name: str) -> str:
        """A queue the link declares if need be (3.x's ``/queue/Q``)."""
        return f"/queue/{name}"

    @staticmethod
    def exchange(name: str, key: str = "") -> str:
        return f"/exchange/{name}/{key}" if key else f"/exchange/{name}"

    @staticmethod
    def topic(key: str) -> str:
        """amq.topic with this routing key."""
        return f"/topic/{key}"


def speaks_amqp10(host: str, port: int, timeout: float = 5.0) -> bool:
    """Whether the broker answers AMQP 1.0's SASL protocol header with its own."""
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            sock.sendall(SASL_HEADER)
            got = b""
            while len(got) < len(SASL_HEADER):
                chunk = sock.recv(len(SASL_HEADER) - len(got))
                if not chunk:
                    break
                got += chunk
    except OSError:
        return False
    return got == SASL_HEADER


def ensure_rabbitmq_amqp10(broker: BrokerUnderTest, timeout: float = 60) -> bool:
    """The reference broker's AMQP 1.0 (its rabbitmq_amqp1_0 plugin), enabled if need be."""
    if speaks_amqp10(broker.host, broker.port):
        return True
    plugins = debian_script("rabbitmq-plugins")
    if plugins is None:
        return False
    subprocess.run(
        [plugins, "enable", "rabbitmq_amqp1_0"], check=False, capture_output=True, timeout=120
    )
    return wait_for(lambda: speaks_amqp10(broker.host, broker.port), timeout, 0.5)


PLUGIN = "rabbitmq_amqp1_0"


@pytest.fixture(scope="session")
def leveret_amqp10() -> Iterator[BrokerUnderTest]:
    """A Leveret with AMQP 1.0 on its AMQP port (its rabbitmq_amqp1_0 plugin enabled)."""
    broker = start_leveret(Path(tempfile.mkdtemp(prefix="leveret-amqp10-")), ["--plugins", PLUGIN])
    yield broker
    broker.stop()


@pytest.fixture
def amqp10(request: pytest.FixtureRequest, broker: BrokerUnderTest) -> Amqp10Broker:
    """The broker under test (Leveret, then RabbitMQ) over AMQP 1.0, its plugin enabled.
    Set up a test's queues through ``amqp10.broker``: on Leveret it is not ``broker``."""
    if broker.name == "leveret":
        return Amqp10Broker(request.getfixturevalue("leveret_amqp10"))
    if not ensure_rabbitmq_amqp10(broker):
        if IN_CI:
            pytest.fail("RabbitMQ's rabbitmq_amqp1_0 plugin could not be enabled")
        pytest.skip("RabbitMQ's rabbitmq_amqp1_0 plugin is not available")
    return Amqp10Broker(broker)


@contextmanager
def connect(
    target: Amqp10Broker,
    user: str | None = None,
    password: str | None = None,
    timeout: float = 10,
) -> Iterator[BlockingConnection]:
    """A proton ``BlockingConnection`` logged in with SASL PLAIN (only: RabbitMQ 3.10.8's
    plugin also offers ANONYMOUS, which proton would otherwise take), closed at the end."""
    url = target.url_as(user or target.user, target.password if password is None else password)
    conn = BlockingConnection(url, timeout=timeout, allowed_mechs="PLAIN")
    try:
        yield conn
    finally:
        conn.close()


# --------------------------------------------------------- sessions of one's choosing
ACTIVE = Endpoint.REMOTE_ACTIVE
CLOSED = Endpoint.REMOTE_CLOSED


class Amqp10Client:
    """One AMQP 1.0 connection to ``vhost`` (the open's hostname ``vhost:<name>``, as
    RabbitMQ reads it), logged in with SASL PLAIN."""

    def __init__(
        self, host: str, port: int, vhost: str, user: str = "guest", password: str = "guest"
    ) -> None:
        self.blocking = BlockingConnection(
            f"amqp://{user}:{password}@{host}:{port}",
            allowed_mechs="PLAIN",
            virtual_host=f"vhost:{vhost}",
            timeout=30,
        )
        self.conn = self.blocking.conn

    def session(self, wait: bool = True) -> Any:
        """A new session, begun (and, with ``wait``, answered: begun or refused)."""
        session = self.conn.session()
        session.open()
        if wait:
            self.wait(lambda: bool(session.state & (ACTIVE | CLOSED)) or self.closed)
        return session

    def sender(self, session: Any, address: str) -> BlockingSender:
        return BlockingSender(
            self.blocking, self.blocking.container.create_sender(session, address)
        )

    def receiver(self, session: Any, address: str, credit: int) -> BlockingReceiver:
        fetcher = Fetcher(self.blocking, credit)
        link = self.blocking.container.create_receiver(session, address, handler=fetcher)
        return BlockingReceiver(self.blocking, link, fetcher, credit=credit)

    @property
    def closed(self) -> bool:
        """The broker closed the connection."""
        return bool(self.conn.state & CLOSED)

    def wait(self, condition: Any, timeout: float = 30) -> None:
        """Run the connection until ``condition()`` holds."""
        try:
            self.blocking.wait(condition, timeout=timeout)
        except Exception:
            if not condition():
                raise

    def pump(self, seconds: float = 0.3) -> None:
        """Let frames in flight go both ways for a moment."""
        with contextlib.suppress(Exception):  # its timeout: the moment passed
            self.blocking.wait(lambda: False, timeout=seconds)

    def close(self) -> None:
        with contextlib.suppress(Exception):  # already closed by the broker
            self.blocking.close()
