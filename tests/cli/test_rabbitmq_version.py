"""The switch on the command line: ``leveret server --rabbitmq-version`` and ``leveret up
--rabbitmq-version``, which passes it on to its broker (see
tests/embedded/rabbitmq42/ for what the 4.2 mode does)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pika


def _leveret(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "leveret.cli.main", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


BAD = "Error: invalid value for 'rabbitmq_version': '4.1' (one of 3.10.8, 4.2)"


def test_a_version_other_than_3_10_8_or_4_2_is_one_plain_line(tmp_path: Path) -> None:
    data = str(tmp_path / "data")
    done = _leveret("server", "--rabbitmq-version", "4.1", "--data-dir", data, cwd=tmp_path)
    assert (done.returncode, done.stderr) == (1, BAD + "\n")
    done = _leveret(
        "up", "--rabbitmq-version", "4.1", "--data-dir", str(tmp_path / "up"),
        "--no-ingest", "--no-receiver", "--amqp-port", "0", "--http-port", "0",
        "--prometheus-port", "0", cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 1
    assert done.stderr.splitlines()[-1].startswith(BAD)


def test_up_passes_the_version_on_to_its_broker(tmp_path: Path) -> None:
    up = subprocess.Popen(
        [sys.executable, "-m", "leveret.cli.main", "up", "--rabbitmq-version", "4.2",
         "--data-dir", str(tmp_path / "data"), "--amqp-port", "0", "--http-port", "0",
         "--prometheus-port", "0", "--no-ingest", "--no-receiver"],
        cwd=tmp_path,
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
        env={**os.environ, "COLUMNS": "200"},
        start_new_session=True,
    )  # fmt: skip
    try:
        assert up.stderr is not None
        banner = ""
        deadline = time.monotonic() + 60
        while "Report" not in banner and time.monotonic() < deadline:
            line = up.stderr.readline()
            if not line:
                break
            banner += line
        found = re.search(r"AMQP\s+amqp://\S+@127\.0\.0\.1:(\d+)/", banner)
        assert found, banner
        conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", int(found.group(1))))
        assert conn._impl.server_properties["version"] == "4.2.9"
        conn.close()
    finally:
        up.send_signal(signal.SIGINT)
        try:
            up.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(up.pid, signal.SIGKILL)
            up.wait()
