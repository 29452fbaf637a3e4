"""Fixtures for the end-to-end tests: each test gets a vhost and a user of its own
on Leveret and, for differential tests, on RabbitMQ."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.brokers import BrokerUnderTest
from tests.mgmt import Site, make_site, rabbitmq_with_management


@pytest.fixture
def leveret_site(leveret: BrokerUnderTest) -> Iterator[Site]:
    yield from make_site(leveret)


@pytest.fixture
def rabbitmq_site(rabbitmq: BrokerUnderTest) -> Iterator[Site]:
    yield from make_site(rabbitmq_with_management(rabbitmq))
