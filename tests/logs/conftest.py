"""Running ``leveret emit-log`` and ``leveret receive-logs`` as a user would: as processes,
one receiver optionally on a pseudo-terminal."""

from __future__ import annotations

import json
import logging
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from leveret.logs import AMQPHandler
from tests.support.brokers import BrokerUnderTest

CLI = [sys.executable, "-m", "leveret.cli.main"]
# Generous: these bound a hang, they do not measure speed (that is benchmarks/logs.py).
WAIT = 180.0

_ANSI = re.compile(rb"\x1b\[[0-9;]*m")


def _env(colour: bool = False) -> dict[str, str]:
    env = dict(os.environ)
    env.pop("NO_COLOR", None)
    if not colour:
        env["NO_COLOR"] = "1"
    return env


class Receiver:
    """A ``receive-logs`` process; its stderr is collected, and with ``tty`` its stdout is
    a pseudo-terminal whose output is collected too."""

    def __init__(self, args: list[str], tty: bool = False) -> None:
        self.args = args
        self.stderr: list[str] = []
        self.output = bytearray()
        self._ready = threading.Event()
        self.queue = ""
        master = slave = None
        if tty:
            import pty

            master, slave = pty.openpty()
        self.proc = subprocess.Popen(
            [*CLI, "receive-logs", *args],
            stdin=subprocess.DEVNULL,
            stdout=slave if tty else subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=_env(colour=tty),
        )
        threads = [threading.Thread(target=self._read_stderr, daemon=True)]
        if tty:
            assert master is not None and slave is not None
            os.close(slave)
            threads.append(threading.Thread(target=self._read_fd, args=(master, True), daemon=True))
        else:
            assert self.proc.stdout is not None
            threads.append(
                threading.Thread(
                    target=self._read_fd, args=(self.proc.stdout.fileno(), False), daemon=True
                )
            )
        for t in threads:
            t.start()
        self._threads = threads

    def _read_stderr(self) -> None:
        assert self.proc.stderr is not None
        for raw in self.proc.stderr:
            line = raw.decode(errors="replace")
            self.stderr.append(line)
            m = re.search(r"Waiting for logs on queue '([^']*)'", line)
            if m:
                self.queue = m.group(1)
                self._ready.set()

    def _read_fd(self, fd: int, own: bool) -> None:
        while True:
            try:
                chunk = os.read(fd, 1 << 16)
            except OSError:  # EIO: the pty's other side closed
                break
            if not chunk:
                break
            self.output += chunk
        if own:
            os.close(fd)

    def wait_ready(self, count: int = 1) -> str:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if sum("Waiting for logs" in line for line in self.stderr) >= count:
                return self.queue
            if self.proc.poll() is not None:
                time.sleep(0.2)
                raise AssertionError(f"receive-logs exited: {''.join(self.stderr)}")
            time.sleep(0.02)
        raise AssertionError(f"receive-logs never got ready: {''.join(self.stderr)}")

    def lines(self) -> list[bytes]:
        """Complete output lines with colours removed (a pty turns \\n into \\r\\n). A line
        still being written, read before its newline arrived, is left for the next call."""
        data = bytes(self.output)
        data = data[: data.rfind(b"\n") + 1]
        text = _ANSI.sub(b"", data).replace(b"\r\n", b"\n")
        return [line for line in text.split(b"\n") if line]

    def messages(self) -> list[str]:
        """The message part of each printed line."""
        return [line.decode().split(": ", 1)[1] for line in self.lines()]

    def wait_output(self, count: int) -> list[str]:
        deadline = time.monotonic() + WAIT
        while time.monotonic() < deadline:
            got = self.messages()
            if len(got) >= count or self.proc.poll() is not None:
                return got
            time.sleep(0.1)
        return self.messages()

    def stop(self, sig: int = signal.SIGINT) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            code = self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait(10)
        self.close()
        return code

    def close(self) -> None:
        for t in self._threads:
            t.join(5)
        for f in (self.proc.stdout, self.proc.stderr):
            if f is not None:
                f.close()


@pytest.fixture
def receivers() -> Iterator[list[Receiver]]:
    """Receivers started through ``start_receiver`` are stopped after the test."""
    started: list[Receiver] = []
    yield started
    for r in started:
        if r.proc.poll() is None:
            r.proc.kill()
            r.proc.wait(10)
        r.close()


@pytest.fixture
def logger(name: str) -> Iterator[logging.Logger]:
    """A logger of the test's own, its handlers closed after the test."""
    log = logging.getLogger(f"test.{name}")
    log.setLevel(logging.DEBUG)
    log.propagate = False
    yield log
    for h in list(log.handlers):
        log.removeHandler(h)
        h.close()


# ``shipping(*binding, **handler_kwargs)``: the records file and the handler.
Shipping = Callable[..., tuple[Path, AMQPHandler]]


@pytest.fixture
def shipping(
    broker: BrokerUnderTest,
    name: str,
    tmp_path: Path,
    receivers: list[Receiver],
    logger: logging.Logger,
) -> Shipping:
    """A receiver on exchange ``name`` that writes what it gets to a file, and an
    ``AMQPHandler`` on ``logger`` that publishes to that exchange (``handler_kwargs``):
    the file's path and the handler. ``binding`` is the receiver's exchange type and
    binding keys (a fanout exchange when none)."""

    def start(*binding: str, **handler_kwargs: Any) -> tuple[Path, AMQPHandler]:
        path = tmp_path / "records.jsonl"
        kind = ["--type", binding[0]] if binding else []
        start_receiver(receivers, broker, name, *kind, "--to", str(path), *binding[1:])
        handler = AMQPHandler(broker.url, exchange=name, **handler_kwargs)
        logger.addHandler(handler)
        return path, handler

    return start


def start_receiver(
    started: list[Receiver],
    broker: BrokerUnderTest,
    exchange: str,
    *args: str,
    tty: bool = False,
    ready: bool = True,
) -> Receiver:
    r = Receiver(["--url", broker.url, "--exchange", exchange, *args], tty=tty)
    started.append(r)
    if ready:
        r.wait_ready()
    return r


def emit(
    broker: BrokerUnderTest | str, exchange: str, *args: str, stdin: bytes | None = None
) -> subprocess.CompletedProcess[str]:
    url = broker if isinstance(broker, str) else broker.url
    return subprocess.run(
        [*CLI, "emit-log", "--url", url, "--exchange", exchange, *args],
        input=stdin.decode() if stdin is not None else None,
        stdin=None if stdin is not None else subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=WAIT,
        env=_env(),
    )


def read_records(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    data = path.read_bytes()
    end = data.rfind(b"\n") + 1  # ignore a line still being written
    return [json.loads(line) for line in data[:end].splitlines()]


def wait_records(path: Path, count: int, timeout: float = WAIT) -> list[dict[str, Any]]:
    """The records in a ``--to`` file once it holds ``count`` (or after ``timeout``)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = read_records(path)
        if len(got) >= count:
            return got
        time.sleep(0.1)
    return read_records(path)


def one_error_line(result: subprocess.CompletedProcess[str] | tuple[int, str]) -> str:
    """The single plain error line of a failed command (asserts there is just that)."""
    code, err = (
        (result.returncode, result.stderr)
        if isinstance(result, subprocess.CompletedProcess)
        else result
    )
    assert code != 0, err
    assert "Traceback" not in err, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("Error: "), err
    return lines[0]
