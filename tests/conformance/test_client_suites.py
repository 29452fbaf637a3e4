"""The client libraries' own test suites (aiormq, aio-pika, py-amqp, kombu) and two
frameworks' RabbitMQ tests (FastStream, Dramatiq) against Leveret and RabbitMQ, through
scripts/conformance: every test that passes on RabbitMQ passes on Leveret, or is a known gap
(conformance/known-gaps.txt).

One test per suite, so that the suites run side by side on the suite's workers. Each run
gets a Leveret and a RabbitMQ node of its own (in network namespaces of its own, root), so
runs share nothing but the cache of sdists and virtualenvs (~/.cache/leveret/conformance,
made on the first run: FastStream's virtualenv takes a few minutes). FastStream, Dramatiq and
the TLS variants need network namespaces; without them they are left out, except under CI,
where that fails the run."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.brokers import BrokerUnderTest

ROOT = Path(__file__).resolve().parents[2]

# Every suite scripts/conformance knows, longest first (the order the workers pick them up
# in). aio-pika's (about ten minutes on each broker, mostly waiting on reconnections) runs
# as three parts, each a test here, so that three workers share it.
SUITES = (
    "aiormq",
    "aio-pika:proxy",
    "aio-pika:rest",
    "aio-pika:amqp",
    "faststream",
    "py-amqp",
    "dramatiq",
    "kombu",
)


@pytest.mark.rabbitmq
@pytest.mark.timeout(2400)
@pytest.mark.parametrize("suite", SUITES)
def test_client_suite_passes_on_leveret_as_on_rabbitmq(
    suite: str, rabbitmq: BrokerUnderTest
) -> None:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "conformance"), suite],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=2400,
        check=False,
    )
    print(proc.stdout)
    print(proc.stderr, file=sys.stderr)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    assert "NEW GAP" not in proc.stdout
