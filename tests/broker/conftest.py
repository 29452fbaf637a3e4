"""Fixtures for the domain tests: a broker of the test's own (nothing shared between
tests, so they run in any order and in parallel), a client connection and a channel."""

from __future__ import annotations

import pytest

from leveret.broker.broker import BrokerCore
from tests.broker.fakes import Client, ClientChannel, new_broker


@pytest.fixture
def domain() -> BrokerCore:
    return new_broker()


@pytest.fixture
def client(domain: BrokerCore) -> Client:
    return Client(domain)


@pytest.fixture
def ch(client: Client) -> ClientChannel:
    return client.channel()
