"""Running the ``leveret`` command as a user does, in a subprocess of its own: a command that
ends (``run_cli``), and ``leveret up`` on free ports in a session of its own (``start_up``,
``running_up``), read up to its banner's last line (``read_banner``)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

# ``leveret up``'s broker on free ports: its AMQP, management API and Prometheus listeners
# (the stream and syslog ports are free ones already, as tests/conftest.py sets them).
FREE_PORTS = ("--amqp-port", "0", "--http-port", "0", "--prometheus-port", "0")


def cli(*args: str) -> list[str]:
    """The command line of ``leveret ARGS`` with this interpreter (and its PYTHONPATH)."""
    return [sys.executable, "-m", "leveret.cli.main", *args]


def run_cli(
    *args: str, cwd: Path | None = None, timeout: float = 120, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``leveret ARGS`` to its end, its output captured as text (not checked)."""
    return subprocess.run(
        cli(*args), cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env, check=False
    )


def start_up(
    *args: str,
    cwd: Path,
    env: dict[str, str] | None = None,
    stdout: int | None = subprocess.DEVNULL,
    **popen: Any,
) -> subprocess.Popen[str]:
    """``leveret up`` on free ports with ARGS, stderr piped, in a session of its own: what
    it starts (broker, ingest, Spark's JVM) can be killed with it by the id it was started
    with. ``env`` defaults to this one with 200 columns, so that no banner line is broken."""
    return subprocess.Popen(
        cli("up", *FREE_PORTS, *args),
        cwd=cwd,
        stderr=subprocess.PIPE,
        stdout=stdout,
        text=True,
        env={**os.environ, "COLUMNS": "200"} if env is None else env,
        start_new_session=True,
        **popen,
    )


def stop_up(up: subprocess.Popen[str], timeout: float = 60) -> bool:
    """Ctrl-C to ``up``; if it has not ended ``timeout`` seconds later, its whole session
    is killed. True when it ended of itself."""
    up.send_signal(signal.SIGINT)
    try:
        up.wait(timeout)
    except subprocess.TimeoutExpired:
        os.killpg(up.pid, signal.SIGKILL)
        up.wait()
        return False
    return True


@contextmanager
def running_up(*args: str, cwd: Path, **kwargs: Any) -> Iterator[subprocess.Popen[str]]:
    """``start_up``, then ``stop_up`` whatever the test did."""
    up = start_up(*args, cwd=cwd, **kwargs)
    try:
        yield up
    finally:
        stop_up(up)


def read_until(stream: IO[str] | None, needle: str, seconds: float) -> str:
    """Lines from ``stream`` until one holds ``needle``, the stream ends or ``seconds`` pass
    (a bound on a hang, not a speed limit)."""
    assert stream is not None
    text = ""
    deadline = time.monotonic() + seconds
    while needle not in text and time.monotonic() < deadline:
        line = stream.readline()
        if not line:
            break
        text += line
    return text


def read_banner(up: subprocess.Popen[str], seconds: float = 60) -> str:
    """``up``'s banner on its stderr, up to its last line (``Report``)."""
    return read_until(up.stderr, "Report", seconds)
