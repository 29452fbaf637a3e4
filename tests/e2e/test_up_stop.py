"""Starting and stopping ``leveret up``: the ingest is "starting" until its query runs,
then "running"; a Ctrl-C to ``up``'s process group while logs flow stops everything
cleanly, the ingest before the broker (it kept retrying a broker stopped with it, mid-batch,
until ``up`` killed it), and says what stopped."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.cli import cli, read_banner, read_until, start_up

pytest.importorskip("pyspark")


# Spark's start and first batch, on a loaded 2-core machine, can take minutes: the waits
# below bound a hang, and the suite's 300 s per test would cut them short
@pytest.mark.timeout(900)
def test_ctrl_c_to_the_process_group_stops_the_ingest_then_the_broker(tmp_path: Path) -> None:
    # its own session and group, as a terminal's foreground job
    up = start_up("--no-receiver", "--trigger", "500ms", cwd=tmp_path)
    feeder: subprocess.Popen[bytes] | None = None
    data = tmp_path / "leveret-data"
    try:
        banner = read_banner(up)
        assert re.search(r"Lake ingest\s+starting", banner), banner
        url = re.search(r"AMQP\s+(amqp://\S+)", banner)
        assert url, banner
        # a wait for Spark, not a speed limit
        started = read_until(up.stderr, "Lake ingest running", 300)
        assert "Lake ingest running" in started, started
        # logs keep flowing while it stops: the ingest is mid-batch when Ctrl-C comes
        feeder = subprocess.Popen(
            [
                sys.executable,
                "-c",
                "import itertools, sys, time\n"
                "for i in itertools.count():\n"
                "    print(f'line {i}', flush=True)\n"
                "    time.sleep(0.001)\n",
            ],
            stdout=subprocess.PIPE,
            start_new_session=True,
        )
        emitter = subprocess.Popen(
            cli("emit-log", "--url", url.group(1)),
            stdin=feeder.stdout,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        deadline = time.monotonic() + 300
        while not list((data / "lake").rglob("*.parquet")) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert list((data / "lake").rglob("*.parquet"))
        broker_pid = int((data / "leveret.lock").read_text())
        os.killpg(up.pid, signal.SIGINT)  # the terminal's Ctrl-C
        up.wait(120)
        rest = up.stderr.read()
        assert "Stopped ingest" in rest and "Stopped broker" in rest, rest
        assert rest.index("Stopped ingest") < rest.index("Stopped broker")
        ingest_log = (data / "logs" / "ingest.log").read_text()
        # (a stop that hung has the ingest's threads' stacks at the end of its log)
        assert "killed after" not in rest and "Error:" not in rest, rest + ingest_log[-6000:]
        # the stop fails nothing: no restart and no traceback once it began (one before it,
        # from a start under load, is the restart tests' business, not this one's)
        assert "stopping the ingest query" in ingest_log, ingest_log[-3000:]
        after_stop = ingest_log[ingest_log.index("stopping the ingest query") :]
        assert "restarting from the checkpoint" not in after_stop, after_stop[-3000:]
        assert "Traceback" not in after_stop, after_stop[-3000:]
        with pytest.raises(ProcessLookupError):
            os.kill(broker_pid, 0)
        emitter.kill()
        emitter.wait()
    finally:
        if feeder is not None:
            feeder.kill()
            feeder.wait()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(up.pid, signal.SIGKILL)
        up.wait()
