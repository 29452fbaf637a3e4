"""A RabbitMQ node of the server tests' own (its watermark is changed by the tests, which
the shared reference broker's must never be), started once for the session."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests.support.backlog import RabbitMQNode
from tests.support.rabbitmq import installed

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


def need_rabbitmq() -> None:
    if not installed():
        if IN_CI:
            pytest.fail("RabbitMQ (Debian's rabbitmq-server) is required under CI")
        pytest.skip("RabbitMQ is not installed here")


@pytest.fixture(scope="session")
def own_rabbitmq() -> Iterator[RabbitMQNode]:
    need_rabbitmq()
    node = RabbitMQNode(None, None, management=True)
    yield node
    node.close()
