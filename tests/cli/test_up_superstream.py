"""``leveret up --super-stream NAME``: the super stream is made before anything is said, the
command it prints sends into it, syslog records go into it by host, and its receiver (bound
to every partition's key) prints both. Without the ingest (a Spark job: the ingest of a
super stream is tests/spark/test_superstream.py's)."""

from __future__ import annotations

import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pika

from leveret.logs.superstream import ManagementApi, Partition


def test_up_keeps_the_logs_in_a_super_stream(tmp_path: Path) -> None:
    cli = [sys.executable, "-m", "leveret.cli.main"]
    up = subprocess.Popen(
        [*cli, "up", "--amqp-port", "0", "--http-port", "0", "--prometheus-port", "0",
         "--stream-port", "0", "--syslog-port", "0", "--no-ingest",
         "--super-stream", "lake-logs", "--partitions", "2"],
        cwd=tmp_path, stderr=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        env={**os.environ, "COLUMNS": "300", "NO_COLOR": "1"}, start_new_session=True,
    )  # fmt: skip
    printed: list[str] = []
    assert up.stdout is not None and up.stderr is not None
    threading.Thread(target=lambda: printed.extend(up.stdout or []), daemon=True).start()
    try:
        banner = ""
        deadline = time.monotonic() + 90
        while "Report" not in banner and time.monotonic() < deadline:
            line = up.stderr.readline()
            if not line:
                break
            banner += line
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
        sent = subprocess.run([*cli, *args[1:-1], "info: through the super stream"],
                              capture_output=True, text=True, timeout=120)  # fmt: skip
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
    finally:
        up.send_signal(signal.SIGINT)
        try:
            up.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(up.pid, signal.SIGKILL)
            up.wait()
