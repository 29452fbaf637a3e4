"""``leveret up --super-stream NAME``: the super stream is made before anything is said, the
command it prints sends into it, syslog records go into it by host, and its receiver (bound
to every partition's key) prints both. Without the ingest (a Spark job: the ingest of a
super stream is tests/spark/test_superstream.py's)."""

from __future__ import annotations

import os
import re
import shlex
import socket
import subprocess
import threading
import time
from pathlib import Path

import pika

from leveret.logs.superstream import ManagementApi, Partition
from tests.support.cli import read_banner, run_cli, running_up


def test_up_keeps_the_logs_in_a_super_stream(tmp_path: Path) -> None:
    with running_up(
        "--stream-port", "0", "--syslog-port", "0", "--no-ingest",
        "--super-stream", "lake-logs", "--partitions", "2",
        cwd=tmp_path, stdout=subprocess.PIPE,
        env={**os.environ, "COLUMNS": "300", "NO_COLOR": "1"},
    ) as up:  # fmt: skip
        _check_the_super_stream(up)


def _check_the_super_stream(up: subprocess.Popen[str]) -> None:
    printed: list[str] = []
    assert up.stdout is not None and up.stderr is not None
    threading.Thread(target=lambda: printed.extend(up.stdout or []), daemon=True).start()
    banner = read_banner(up, 90)
    # read on, so that up never blocks writing its stderr (its shutdown lines)
    said: list[str] = [banner]
    threading.Thread(target=lambda: said.extend(up.stderr or []), daemon=True).start()
    url = re.search(r"AMQP\s+(amqp://\S+)", banner)
    send = re.search(r"Send logs\s+(.*)$", banner, re.M)
    syslog = re.search(r"Syslog\s+udp\+tcp 127\.0\.0\.1:(\d+)", banner)
    assert url and send and syslog, banner
    # made before the banner: two partitions, bound with keys 0 and 1
    management = re.search(r"--management-url (\S+)", send.group(1))
    assert management, send.group(1)
    api = ManagementApi.of(url.group(1), management.group(1))
    assert api.partitions("lake-logs") == [
        Partition("lake-logs-0", "0"), Partition("lake-logs-1", "1")
    ]  # fmt: skip
    # the terminal receiver binds its queue to every partition once it says so (on
    # stderr, as the tutorial's receive_logs.py); then the command up prints, as printed
    deadline = time.monotonic() + 60
    while "Waiting for logs" not in "".join(said) and time.monotonic() < deadline:
        time.sleep(0.1)
    args = shlex.split(send.group(1))
    assert args[:2] == ["leveret", "emit-log"], args
    sent = run_cli(*args[1:-1], "info: through the super stream")
    assert sent.returncode == 0, sent.stderr
    assert "super stream 'lake-logs'" in sent.stdout
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
        line = "<14>1 2026-01-01T00:00:00Z web-7 app - - - through syslog"
        udp.sendto(line.encode(), ("127.0.0.1", int(syslog.group(1))))
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        text = "".join(printed)
        if "through the super stream" in text and "through syslog" in text:
            break
        time.sleep(0.2)
    text = "".join(printed)
    assert "through the super stream" in text and "through syslog" in text, text
    # both are in the partitions (Leveret's passive declare with x-stream-offsets
    # tells a stream's end), once their chunks are committed: the receiver's queue
    # can have a record a moment before its partition's committed end moves past it
    conn = pika.BlockingConnection(pika.URLParameters(url.group(1)))
    deadline = time.monotonic() + 30
    while True:
        ends = [
            conn.channel().queue_declare(f"lake-logs-{k}", passive=True,
                                         arguments={"x-stream-offsets": True})
            .method.message_count
            for k in range(2)
        ]  # fmt: skip
        if sum(ends) == 2 or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    conn.close()
    assert sum(ends) == 2, ends
