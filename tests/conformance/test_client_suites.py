"""The client libraries' own test suites (aiormq, py-amqp, kombu) against Leveret and
RabbitMQ, through scripts/conformance: every test that passes on RabbitMQ passes on
Leveret, or is a known gap (conformance/known-gaps.txt).

The first run fetches the sdists and test dependencies from PyPI into .cache/conformance;
a run takes about two minutes, most of it aiormq's suite (about 60 s: it traces memory
around every test), run against both brokers side by side."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.brokers import BrokerUnderTest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
@pytest.mark.rabbitmq
@pytest.mark.timeout(1800)
def test_client_suites_pass_on_leveret_as_on_rabbitmq(rabbitmq: BrokerUnderTest) -> None:
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "conformance")], cwd=ROOT,
                          capture_output=True, text=True, timeout=1800, check=False)
    print(proc.stdout)
    print(proc.stderr, file=sys.stderr)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    assert "NEW GAP" not in proc.stdout
