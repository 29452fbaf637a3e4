"""One broker per data directory: a second ``leveret server`` (or ``leveret up``, or an
in-process ``Broker``) on a directory a running broker holds refuses in one line naming the
directory and the holder's pid; a broker killed with ``kill -9`` does not block the next."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pika
import pytest

import leveret
from leveret.store.lock import DataDirInUse
from tests.support.brokers import start_leveret


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "leveret.cli.main", *args]


def _free_ports() -> list[str]:
    return ["--amqp-port", "0", "--http-port", "0", "--prometheus-port", "0"]


def test_second_server_on_a_held_data_dir_refuses_in_one_line(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with leveret.Broker(data_dir=data):
        second = subprocess.run(
            _cli("server", "--data-dir", str(data), "--bind", "127.0.0.1", *_free_ports()),
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert second.returncode != 0
        lines = second.stderr.strip().splitlines()
        assert len(lines) == 1, second.stderr
        assert lines[0].startswith("Error: ")
        assert str(data) in lines[0] and f"pid {os.getpid()}" in lines[0]
        # in the same process too: the second one does not start
        with pytest.raises(DataDirInUse) as refused:
            leveret.Broker(data_dir=data).start()
        assert refused.value.pid == os.getpid()
    # once the first has stopped, the directory is free again
    with leveret.Broker(data_dir=data):
        pass


def test_second_up_on_a_held_data_dir_refuses_in_one_line(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with leveret.Broker(data_dir=data):
        second = subprocess.run(
            _cli("up", "--data-dir", str(data), *_free_ports(), "--no-ingest", "--no-receiver"),
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, "COLUMNS": "300"},
        )
    assert second.returncode != 0
    errors = [line for line in second.stderr.splitlines() if line.startswith("Error: ")]
    assert len(errors) == 1, second.stderr
    assert str(data) in errors[0] and f"pid {os.getpid()}" in errors[0], second.stderr


def test_a_broker_killed_with_sigkill_does_not_block_the_next(tmp_path: Path) -> None:
    data = tmp_path / "data"
    first = start_leveret(data)
    conn = pika.BlockingConnection(first.pika_params())
    ch = conn.channel()
    ch.confirm_delivery()
    ch.queue_declare("kept", durable=True)
    ch.basic_publish("", "kept", b"survives", pika.BasicProperties(delivery_mode=2))
    conn.close()
    assert first.process is not None
    assert (data / "leveret.lock").read_text().strip() == str(first.process.pid)
    first.process.send_signal(signal.SIGKILL)
    first.process.wait(30)
    second = start_leveret(data)
    try:
        conn = pika.BlockingConnection(second.pika_params())
        ch = conn.channel()
        method, _, body = ch.basic_get("kept", auto_ack=True)
        assert method is not None and body == b"survives"
        conn.close()
    finally:
        second.stop()
