"""A port another program holds: ``leveret server`` and ``leveret up`` say which port, what
it is for, and the flag that picks another (``leveret up`` said only that the broker did not
start, and where its log was)."""

from __future__ import annotations

import os
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.cli import run_cli


@pytest.fixture
def taken_port() -> Iterator[int]:
    with socket.socket() as s:
        s.bind(("0.0.0.0", 0))
        s.listen()
        yield s.getsockname()[1]


def _run(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_cli(*args, cwd=cwd, timeout=60, env={**os.environ, "COLUMNS": "80"})


@pytest.mark.parametrize(
    ("flag", "serves"),
    [
        ("--amqp-port", "AMQP"),
        ("--http-port", "management API"),
        ("--prometheus-port", "Prometheus metrics"),
        # a RabbitMQ with its stream plugin holds 5552
        ("--stream-port", "stream protocol"),
        ("--syslog-port", "syslog (UDP and TCP)"),
    ],
)
@pytest.mark.parametrize("command", ["server", "up"])
def test_a_taken_port_is_named_with_the_flag_that_picks_another(
    tmp_path: Path, taken_port: int, command: str, flag: str, serves: str
) -> None:
    ports = {"--amqp-port": "0", "--http-port": "0", "--prometheus-port": "0", "--stream-port": "0"}
    if flag == "--syslog-port":
        ports[flag] = "0"
    ports[flag] = str(taken_port)
    args = [command, "--data-dir", str(tmp_path / "data")]
    args += [part for item in ports.items() for part in item]
    if command == "up":
        args += ["--no-ingest", "--no-receiver"]
    done = _run(tmp_path, *args)
    assert done.returncode != 0
    errors = [line for line in done.stderr.splitlines() if line.startswith("Error: ")]
    assert len(errors) == 1, done.stderr
    # one line, even at 80 columns
    line = errors[0]
    assert f":{taken_port} ({serves}" in line, done.stderr
    assert f"port {taken_port} is in use" in line
    assert f"pick another port with {flag}" in line
