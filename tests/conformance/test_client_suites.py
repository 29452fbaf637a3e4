"""The client libraries' own test suites (aiormq, py-amqp, kombu) and two frameworks'
RabbitMQ tests (FastStream, Dramatiq) against Leveret and RabbitMQ, through
scripts/conformance: every test that passes on RabbitMQ passes on Leveret, or is a known gap
(conformance/known-gaps.txt).

The first run fetches the sdists and test dependencies from PyPI into .cache/conformance
(FastStream's virtualenv, with every broker client its test modules import, takes a few
minutes). A run then takes about ten minutes on this 2-core machine: two for the client
libraries (most of it aiormq's suite, which traces memory around every test), five to six for
FastStream (its 289 known gaps, direct reply-to, each wait out a timeout on Leveret; about one
minute when they pass) and one for Dramatiq, each suite against both brokers side by side.
FastStream and Dramatiq need network namespaces (root); without them they are left out,
except under CI, where that fails the run."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.brokers import BrokerUnderTest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
@pytest.mark.rabbitmq
@pytest.mark.timeout(1800)
def test_client_suites_pass_on_leveret_as_on_rabbitmq(rabbitmq: BrokerUnderTest) -> None:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "conformance")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
    )
    print(proc.stdout)
    print(proc.stderr, file=sys.stderr)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    assert "NEW GAP" not in proc.stdout
