"""``leveret up --config FILE`` runs its broker with that configuration, as
``leveret server --config`` does (up had no such option)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pika


def test_up_takes_the_brokers_config_file(tmp_path: Path) -> None:
    config = tmp_path / "leveret.toml"
    config.write_text(
        '[[users]]\nname = "alice"\npassword = "secret"\ntags = ["management"]\n\n'
        '[[permissions]]\nuser = "alice"\nvhost = "/"\n'
        'configure = ".*"\nwrite = ".*"\nread = ".*"\n'
    )
    up = subprocess.Popen(
        [sys.executable, "-m", "leveret.cli.main", "up", "--config", str(config),
         "--amqp-port", "0", "--http-port", "0", "--prometheus-port", "0",
         "--no-ingest", "--no-receiver"],
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
        params = pika.ConnectionParameters(
            "127.0.0.1", int(found.group(1)), credentials=pika.PlainCredentials("alice", "secret")
        )
        conn = pika.BlockingConnection(params)
        conn.channel().queue_declare("", exclusive=True)
        conn.close()
    finally:
        up.send_signal(signal.SIGINT)
        try:
            up.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(up.pid, signal.SIGKILL)
            up.wait()
