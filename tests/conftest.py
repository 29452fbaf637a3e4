"""Shared fixtures: one Leveret server for the session, the reference RabbitMQ, and
``broker``, which runs a test once against each."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest

from tests.brokers import BrokerUnderTest, ensure_rabbitmq, start_leveret

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


@pytest.fixture(scope="session")
def leveret() -> Iterator[BrokerUnderTest]:
    broker = start_leveret()
    yield broker
    broker.stop()


@pytest.fixture(scope="session")
def rabbitmq() -> BrokerUnderTest:
    broker = ensure_rabbitmq()
    if broker is None:
        if IN_CI:
            pytest.fail(
                "RabbitMQ (Debian's rabbitmq-server) is required under CI; "
                "the test command installs it"
            )
        pytest.skip("RabbitMQ is not installed here (apt-get install rabbitmq-server)")
    return broker


@pytest.fixture(params=["leveret", "rabbitmq"])
def broker(request: pytest.FixtureRequest) -> BrokerUnderTest:
    """Run the test against Leveret and against the reference RabbitMQ."""
    b: BrokerUnderTest = request.getfixturevalue(request.param)
    return b


@pytest.fixture
def fresh_leveret(tmp_path: object) -> Iterator[BrokerUnderTest]:
    """A Leveret of the test's own, for tests that restart or stop it."""
    broker = start_leveret()
    yield broker
    broker.stop()


@pytest.fixture
def name() -> str:
    """A unique name for the exchanges and queues of one test."""
    return f"t-{uuid.uuid4().hex[:10]}"
