"""The pytest plugin: AMQP fixtures that isolate every test in a vhost of its own.

Installed with Leveret (the ``pytest11`` entry point ``leveret``; ``-p no:leveret`` turns it
off). Nothing starts until a test asks for a fixture.

- ``leveret_broker`` (session): the broker. By default a :class:`leveret.Broker` in this
  process, in memory, on a free port of 127.0.0.1. With ``--leveret-url URL`` (or the ini
  option ``leveret_url``) an outside broker, such as RabbitMQ, as a
  :class:`~leveret.testing.remote.RemoteBroker`.
- ``amqp_vhost`` (function): the name of a fresh vhost made for the test, in which the
  broker's user (guest, or the user of ``--leveret-url``) has every permission. It is
  deleted after the test with everything in it; connections still open to it are closed.
- ``amqp_url``: the AMQP URL of that vhost, e.g. ``amqp://guest:guest@127.0.0.1:41235/
  test-it-works-3f2a9c1b``. Tests that use it see nothing of one another, so they may run
  in parallel (pytest-xdist) against one broker.

- ``--leveret-rabbitmq-version 4.2`` (ini ``leveret_rabbitmq_version``): the in-process
  brokers behave as RabbitMQ 4.2 (see docs/compatibility.md); 3.10.8 by default.

- ``leveret_clock`` (function): a :class:`leveret.Broker` of the test's own whose clock
  stands still until the test moves it: ``leveret_clock.advance(1800)`` makes half an
  hour pass at once (message TTL, queue expiry, delayed messages, consumer timeouts).
  Its AMQP URL is ``leveret_clock.url``.

Against an outside broker the vhosts are made and deleted through its management API:
``--leveret-management-url`` (ini ``leveret_management_url``), by default the one on the AMQP
URL's host, port 10000 above the AMQP port or 15672, whose node listens for AMQP on the URL's
port (never another broker's), with the AMQP URL's credentials (which need the
administrator tag).
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import pytest

from leveret.testing.remote import ManagementError, RemoteBroker

if TYPE_CHECKING:
    from leveret.embedded import Broker

URL_HELP = (
    "run the AMQP fixtures (amqp_url, leveret_broker) against this broker, e.g. a "
    "RabbitMQ at amqp://guest:guest@localhost:5672/, instead of an in-process Leveret"
)
MANAGEMENT_HELP = (
    "the management API of the --leveret-url broker, where the tests' vhosts are made "
    "(default: the one of that broker on its host, port AMQP+10000 or 15672)"
)


VERSION_HELP = "the RabbitMQ the in-process brokers behave as: 3.10.8 (the default) or 4.2"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("leveret", "AMQP broker fixtures (Leveret)")
    group.addoption("--leveret-url", dest="leveret_url", metavar="URL", help=URL_HELP)
    group.addoption(
        "--leveret-management-url",
        dest="leveret_management_url",
        metavar="URL",
        help=MANAGEMENT_HELP,
    )
    group.addoption(
        "--leveret-rabbitmq-version",
        dest="leveret_rabbitmq_version",
        metavar="VERSION",
        help=VERSION_HELP,
    )
    parser.addini("leveret_url", URL_HELP, default=None)
    parser.addini("leveret_management_url", MANAGEMENT_HELP, default=None)
    parser.addini("leveret_rabbitmq_version", VERSION_HELP, default=None)


def _setting(config: pytest.Config, name: str) -> str | None:
    value = config.getoption(name) or config.getini(name)
    return str(value) if value else None


def pytest_report_header(config: pytest.Config) -> str | None:
    url = _setting(config, "leveret_url")
    return f"leveret: AMQP fixtures against {url}" if url else None


@pytest.fixture(scope="session")
def leveret_broker(request: pytest.FixtureRequest) -> Iterator[Broker | RemoteBroker]:
    """The broker the AMQP fixtures use: an in-process Leveret, or the --leveret-url one."""
    url = _setting(request.config, "leveret_url")
    if url is not None:
        try:
            remote = RemoteBroker(url, _setting(request.config, "leveret_management_url"))
            remote.locate()
        except (ValueError, ManagementError) as exc:
            pytest.fail(f"--leveret-url: {exc}", pytrace=False)
        yield remote
        return
    with _in_process(request.config) as broker:
        yield broker


@contextmanager
def _in_process(config: pytest.Config, **settings: Any) -> Iterator[Broker]:
    """An in-process Leveret behaving as --leveret-rabbitmq-version says."""
    from leveret.embedded import Broker
    from leveret.server.config import ConfigError

    version = _setting(config, "leveret_rabbitmq_version") or "3.10.8"
    try:
        broker = Broker(rabbitmq_version=version, **settings)
    except ConfigError as exc:
        pytest.fail(f"--leveret-rabbitmq-version: {exc}", pytrace=False)
    with broker:
        yield broker


_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")


def _vhost_name(test_name: str) -> str:
    slug = _UNSAFE.sub("-", test_name).strip("-")[:48]
    return f"test-{slug}-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def amqp_vhost(
    request: pytest.FixtureRequest, leveret_broker: Broker | RemoteBroker
) -> Iterator[str]:
    """A fresh vhost for this test, deleted after it."""
    name = _vhost_name(request.node.name)
    user = leveret_broker.user if isinstance(leveret_broker, RemoteBroker) else "guest"
    leveret_broker.add_vhost(name, description=f"pytest: {request.node.nodeid}"[:200])
    try:
        leveret_broker.set_permissions(user, name, ".*", ".*", ".*")
        yield name
    finally:
        leveret_broker.delete_vhost(name)


@pytest.fixture
def amqp_url(leveret_broker: Broker | RemoteBroker, amqp_vhost: str) -> str:
    """The AMQP URL of this test's own vhost."""
    return leveret_broker.vhost_url(amqp_vhost)


@pytest.fixture
def leveret_clock(request: pytest.FixtureRequest) -> Iterator[Broker]:
    """An in-process Leveret of this test's own, on a manual clock: time passes only
    when the test calls ``advance(seconds)``."""
    with _in_process(request.config, clock="manual") as broker:
        yield broker
