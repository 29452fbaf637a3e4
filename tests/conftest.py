"""Shared fixtures: one Leveret server for the session, the reference RabbitMQ, and
``broker``, which runs a test once against each."""

from __future__ import annotations

import os
import signal
import uuid
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, settings

from tests.support import jvm, tiers
from tests.support.brokers import BrokerUnderTest, ensure_rabbitmq, start_leveret

# Tests stop subprocesses with SIGINT and check the Ctrl-C path. A suite started as a
# background job of a non-interactive shell inherits SIGINT ignored, and every process it
# starts would ignore it too (measured: receivers and `leveret up` were killed after their
# timeouts). The handler is reset to the default in each child at exec.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")

# Hypothesis checks each example against a 200 ms deadline by default: a wall-clock limit,
# which a loaded machine breaks (measured: the AMQP 1.0 splice property failed with load
# 16 on two cores). Speed lives in benchmarks/; the properties only check behaviour.
settings.register_profile("leveret", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("leveret")

# Every Leveret a test starts (``leveret server``, ``leveret up``, in a subprocess or not)
# takes free stream protocol ports unless the test says otherwise, as its AMQP and HTTP
# ports are: 5552 and 5551 belong to the reference RabbitMQ's stream plugin here.
os.environ.setdefault("LEVERET_STREAM_PORT", "0")
os.environ.setdefault("LEVERET_STREAM_TLS_PORT", "0")
# ``leveret up`` takes syslog on 1514 unless told otherwise: not in the tests, where several
# run at once (a test that wants it passes --syslog-port 0)
os.environ.setdefault("LEVERET_SYSLOG_PORT", "off")

# Spark's JVMs in the tests (the shared session's, and those of every ``leveret pipeline``
# and ``leveret up`` a test starts, which inherit this), as tests/support/jvm.py says why.
os.environ.setdefault("SPARK_SUBMIT_OPTS", jvm.SUBMIT_OPTS)

# The fast tier (``scripts/test --fast``, or ``-m "not slow"``): the codec, the domain
# through its ports, the stores and the in-process broker. Everything else is marked slow
# here: whatever needs RabbitMQ, Spark, a browser, a virtualenv or a broker subprocess.
FAST_DIRS = ("tests/protocol/", "tests/broker/", "tests/store/", "tests/embedded/")
FAST_MODULES = (
    "tests/logs/test_record.py",
    "tests/spark/test_logparse.py",
    "tests/spark/test_wire.py",
    "tests/cli/test_ctl_verbs.py",
    "tests/docs/test_doc_blocks.py",
)
# Fixtures that make a test slow wherever it is: the reference broker, a broker subprocess
# (``broker`` runs one for its Leveret side), a virtualenv of its own.
SLOW_FIXTURES = frozenset({"rabbitmq", "leveret", "fresh_leveret", "broker", "venv"})

# Tests measured at a minute or more (the last full run's --durations), started first so
# that the longest ones do not begin when the others are nearly done. Prefixes of node ids.
_SUITE = (
    "tests/conformance/test_client_suites.py::test_client_suite_passes_on_leveret_as_on_rabbitmq"
)
_ALONE = (
    "tests/conformance/test_client_suites.py::test_client_suite_fails_on_leveret_only_as_listed"
)

LONG_FIRST = (
    # The client suites mostly wait on their brokers; the Spark, cluster and install tests
    # keep both cores busy. Alternated, so that each long wait runs beside long work.
    f"{_SUITE}[aiormq]",
    "tests/spark/test_rabbitmq_cluster.py",
    # RabbitMQ's official AMQP 1.0 client: the longest under CI (377 s in the last run)
    f"{_ALONE}[amqp-python-client]",
    f"{_SUITE}[aio-pika:proxy]",
    "tests/spark/test_ingest.py::test_stream_ingest_is_exactly_once",
    f"{_SUITE}[aio-pika:rest]",
    "tests/spark/test_install.py",
    f"{_SUITE}[aio-pika:amqp]",
    "tests/e2e/test_up.py",
    f"{_SUITE}[faststream]",
    "tests/spark/test_report.py",
    f"{_ALONE}[rstream]",  # ~170 s
    # the pipeline's documented examples: an ingest, a report and a Spark read (~1.5 min)
    "tests/docs/test_examples.py::test_the_examples_run_as_written[docs/pipeline.md]",
    "tests/conformance/",
    "tests/spark/test_spark_cluster.py",
    "tests/spark/test_ingest.py",
    # ran last in the last full runs (241 s, and 87 s): the run waited on them alone
    "tests/spark/test_compaction.py",
    "tests/server/test_limits.py::test_failed_logins",
    "tests/spark/test_alerts.py",
    "tests/logs/test_backlog.py",
    "tests/spark/test_spark_connect.py",
    "tests/test_checks.py",
    "tests/embedded/test_sample_project.py",
)


LONG_TIMEOUT = 1200  # seconds, for the tests in LONG_FIRST that set no timeout of their own


def _long(nodeid: str) -> bool:
    """Whether a test is one of the long ones (``LONG_FIRST``)."""
    return nodeid.startswith(LONG_FIRST)


def _is_fast(item: pytest.Item) -> bool:
    path = item.nodeid.split("::", 1)[0]
    if not path.startswith(FAST_DIRS) and path not in FAST_MODULES:
        return False
    return not SLOW_FIXTURES.intersection(getattr(item, "fixturenames", ()))


def _module_scoped(item: pytest.Item) -> bool:
    """Whether the test uses a fixture set up once per module (a node, a cluster, a
    browser): such a module's tests run on one xdist worker (``--dist loadgroup``), so the
    fixture is set up once, not once per worker."""
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return False
    return any(defs[-1].scope == "module" for defs in info.name2fixturedefs.values() if defs)


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups
def pytest_configure(config: pytest.Config) -> None:
    """The fast tier is ``-m "not slow"`` (what scripts/test --fast runs): it draws fewer
    property-test examples. Set before any test module is imported, on every xdist worker
    (each is configured with the same options)."""
    if config.getoption("markexpr", "").strip() == "not slow":
        tiers.FAST = True
        settings.register_profile(
            "leveret-fast", settings.get_profile("leveret"), max_examples=tiers.examples(100)
        )
        settings.load_profile("leveret-fast")


# before xdist's own, which reads the xdist_group marks into the node ids the scheduler groups
# by: after it, the marks added here grouped nothing
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    slow = pytest.mark.slow
    long_timeout = pytest.mark.timeout(LONG_TIMEOUT)
    for item in items:
        if not _is_fast(item):
            item.add_marker(slow)
        # The suite's 300 s per test is a guard against hangs; the long tests, which run
        # side by side on two cores, can take longer than that without hanging.
        if _long(item.nodeid) and item.get_closest_marker("timeout") is None:
            item.add_marker(long_timeout)
        if _module_scoped(item):
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::", 1)[0]))

    def rank(item: pytest.Item) -> int:
        for i, prefix in enumerate(LONG_FIRST):
            if item.nodeid.startswith(prefix):
                return i
        return len(LONG_FIRST)

    items.sort(key=rank)  # stable: the rest keep pytest's order


@pytest.hookimpl(optionalhook=True)  # xdist's hook: unknown under -p no:xdist
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object | None:
    if config.getoption("dist") != "loadgroup":
        return None
    from tests.support.scheduling import LongFirstScheduling

    return LongFirstScheduling(config, log, _long)


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
