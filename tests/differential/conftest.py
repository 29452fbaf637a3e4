"""Fixtures of the differential tests."""

from __future__ import annotations

import pytest

from tests.conftest import IN_CI
from tests.support.amqp10 import amqp10, leveret_amqp10  # noqa: F401  (fixtures, for the tests)
from tests.support.brokers import (
    RABBITMQ_STREAM_PORT,
    BrokerUnderTest,
    ensure_rabbitmq_management,
    ensure_rabbitmq_stream,
)


@pytest.fixture
def sbroker(broker: BrokerUnderTest) -> BrokerUnderTest:
    """The broker, with the port of its stream protocol listener."""
    if broker.name == "rabbitmq":
        if not ensure_rabbitmq_stream():
            if IN_CI:
                pytest.fail("RabbitMQ's stream plugin could not be enabled")
            pytest.skip("RabbitMQ's stream plugin is not available")
        broker.stream_port = RABBITMQ_STREAM_PORT
    assert broker.stream_port, "the broker has no stream protocol listener"
    return broker


@pytest.fixture
def mbroker(broker: BrokerUnderTest) -> BrokerUnderTest:
    """The broker, with its management API (RabbitMQ's plugin enabled if it is not)."""
    if broker.name == "rabbitmq" and not ensure_rabbitmq_management():
        pytest.fail("RabbitMQ's management plugin could not be enabled")
    return broker
