"""Shared fixtures: one Leveret server for the session, the reference RabbitMQ, and
``broker``, which runs a test once against each."""

from __future__ import annotations

import os
import signal
import uuid
from collections.abc import Iterator

import pytest

from tests.support.brokers import BrokerUnderTest, ensure_rabbitmq, start_leveret

# Tests stop subprocesses with SIGINT and check the Ctrl-C path. A suite started as a
# background job of a non-interactive shell inherits SIGINT ignored, and every process it
# starts would ignore it too (measured: receivers and `leveret up` were killed after their
# timeouts). The handler is reset to the default in each child at exec.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

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
