"""``leveret up`` kills a child that does not stop within its time; an ingest that hangs
first writes every thread's stack to its log, so that the log says where it hung."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from leveret.cli import up

# a child that stops as a hung ingest does not: SIGTERM ignored, stacks on DUMP_STACKS
HUNG = """
import faulthandler, signal, sys, threading, time
faulthandler.register(signal.SIGUSR1, all_threads=True)
signal.signal(signal.SIGTERM, signal.SIG_IGN)
def waits_in_spark():
    time.sleep(60)
threading.Thread(target=waits_in_spark, name="query").start()
print("ready", flush=True)
time.sleep(60)
"""


@pytest.mark.skipif(up.DUMP_STACKS is None, reason="no SIGUSR1 here")
def test_a_hung_ingest_leaves_its_stacks_in_its_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(up, "STOP_TIMEOUT", 0.5)
    log = tmp_path / "ingest.log"
    with open(log, "w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-c", HUNG], stdout=out, stderr=subprocess.STDOUT, text=True
        )
    try:
        while "ready" not in log.read_text():
            assert proc.poll() is None, log.read_text()
        up._stop([up._Child("ingest", proc, dumps_stacks=True)])
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    captured = capsys.readouterr()
    printed = captured.out + captured.err
    assert "Stopped ingest: killed after 0 s (where its threads were is at the end of its log)" in (
        printed.replace("\n", " ")
    ), printed
    stacks = log.read_text()
    assert "waits_in_spark" in stacks and "Current thread" in stacks, stacks
