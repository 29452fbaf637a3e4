"""The README's main job: ``leveret up`` brings up the broker, the dashboard and the lake
ingest; logs sent with ``emit-log`` land in the lake and the report runs over it, and so do
the broker's own errors (its log exchange, facility ``broker``)."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.support.cli import cli, read_banner, start_up, stop_up
from tests.support.mgmt import Api
from tests.support.waiting import wait_for

pytest.importorskip("pyspark")
pq = pytest.importorskip("pyarrow.parquet")


def test_up_runs_the_whole_stack(tmp_path: Path) -> None:
    # the broker's stream listener on a free port too (5552 may be RabbitMQ's)
    env = {**os.environ, "COLUMNS": "200", "LEVERET_STREAM_PORT": "0"}
    # a session of its own: if it does not stop, it is killed with everything it started
    # (broker, ingest, Spark's JVM), by the id it was started with
    up = start_up("--no-receiver", "--trigger", "1s", cwd=tmp_path, env=env)
    try:
        banner = read_banner(up)
        url = re.search(r"AMQP\s+(amqp://\S+)", banner)
        dashboard = re.search(r"Dashboard\s+(http://\S+)", banner)
        streams = re.search(r"Streams\s+rabbitmq-stream://\S+@127\.0\.0\.1:(\d+)/%2f", banner)
        assert url and dashboard and streams, banner
        for severity, lines in (
            ("info", [f"line {i}" for i in range(80)]),
            ("error", [f"failure number {i}" for i in range(20)]),
        ):
            sent = subprocess.run(
                cli("emit-log", "--url", url.group(1), "--severity", severity),
                input="\n".join(lines),
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert sent.returncode == 0, sent.stderr
        lake = tmp_path / "leveret-data" / "lake"

        def lake_records() -> list[dict[str, object]]:
            return [
                r
                for f in (lake.rglob("*.parquet") if lake.exists() else [])
                for r in pq.read_table(f, columns=["facility", "host", "message"]).to_pylist()
            ]

        rows = 0
        # a wait, not a speed limit: on a loaded 2-core machine Spark's first batch took
        # 90 s after the emit (measured), besides its start-up
        deadline = time.monotonic() + 360
        while rows < 100 and time.monotonic() < deadline:
            time.sleep(1)
            try:  # the logs sent; the broker's events (facility broker) go to the lake too
                rows = sum(1 for r in lake_records() if r["facility"] != "broker")
            except (OSError, ValueError):  # a file still being written
                continue
        assert rows == 100
        # the ingest read whole chunks from the port the broker bound, not 5552
        ingest_log = (tmp_path / "leveret-data" / "logs" / "ingest.log").read_text()
        expected = f"over the stream protocol (127.0.0.1:{streams.group(1)})"
        assert expected in ingest_log, ingest_log[-3000:]
        # the dashboard reads the same lake: its numbers, and no offset left behind (the
        # stream holds the broker's events beside the 100 records)
        api = Api(dashboard.group(1).rstrip("/"))
        numbers = wait_for(
            lambda: (
                lambda d: (
                    d
                    if d["ingest_lag"] == 0
                    and d["lake"]["summary"]["records"] == d["stream"]["end"] >= 100
                    else None
                )
            )(api.get("/api/logs/lake")),
            timeout=30,
        )
        assert numbers, api.get("/api/logs/lake")
        assert numbers["lake"]["summary"]["errors"] == 20
        total = numbers["lake"]["summary"]["records"]
        assert sum(r["records"] for r in numbers["lake"]["per_minute"]) == total
        assert not numbers["report"]["available"]
        # the report, where `leveret up` says to put it, is served by the dashboard
        out = tmp_path / "leveret-data" / "report"
        report = subprocess.run(
            cli(
                "pipeline", "report", "--lake", str(lake), "--out", str(out), "--master", "local[1]"
            ),
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert report.returncode == 0, report.stderr[-2000:]
        charts = list(out.rglob("*.png"))
        assert charts
        info = api.get("/api/logs/report")
        assert info["available"] and info["document"] == "report.html"
        status, page = api.call("GET", "/api/logs/report/report.html")
        assert status == 200 and "Leveret log report" in page
        chart = charts[0].relative_to(out).as_posix()
        assert api.call("GET", f"/api/logs/report/{chart}")[0] == 200
        # the broker's own errors land in the lake too: a refused login, facility broker
        import pika

        params = pika.URLParameters(url.group(1).replace("guest:guest", "guest:wrong"))
        with pytest.raises(pika.exceptions.AMQPError):
            pika.BlockingConnection(params)
        # ... as its log's line and as the event exchange's user.authentication.failure
        refused: list[dict[str, object]] = []
        failed: list[dict[str, object]] = []
        from_broker: list[dict[str, object]] = []
        deadline = time.monotonic() + 120
        while not (refused and failed) and time.monotonic() < deadline:
            time.sleep(1)
            try:
                from_broker = [r for r in lake_records() if r["facility"] == "broker"]
            except (OSError, ValueError):  # a file still being written
                continue
            refused = [r for r in from_broker if "login refused" in str(r["message"])]
            failed = [
                r for r in from_broker if str(r["message"]).startswith("user.authentication.fail")
            ]
        assert refused and failed, from_broker
        assert all(str(r["host"]).startswith("rabbit@") for r in refused)
    finally:
        if not stop_up(up):
            raise AssertionError("leveret up did not stop within 60 s of a Ctrl-C")
    assert up.returncode in (0, 130, -signal.SIGINT)


def test_sigterm_stops_up_and_everything_it_started(tmp_path: Path) -> None:
    """A service manager stops ``leveret up`` with SIGTERM: it stops its broker too (before,
    SIGTERM ended ``up`` alone and the broker ran on)."""
    import socket

    up = start_up(
        "--no-receiver",
        "--no-ingest",
        cwd=tmp_path,
        env={**os.environ, "COLUMNS": "200", "LEVERET_STREAM_PORT": "0"},
    )
    try:
        banner = read_banner(up)
        found = re.search(r"AMQP\s+amqp://\S+@127\.0\.0\.1:(\d+)/", banner)
        assert found, banner
        port = int(found.group(1))
        socket.create_connection(("127.0.0.1", port), timeout=5).close()
        up.send_signal(signal.SIGTERM)
        assert up.wait(60) == 0
        with pytest.raises(OSError):  # the broker is gone with it
            socket.create_connection(("127.0.0.1", port), timeout=5).close()
    finally:
        # its session: whatever is left of what it started (all of it, on the old code)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(up.pid, signal.SIGKILL)
        up.wait()


def test_sigint_stops_up_started_with_sigint_ignored(tmp_path: Path) -> None:
    """A background job of a script starts with SIGINT ignored; ``kill -INT`` still stops
    ``leveret up`` and the broker it started (which runs in a process group of its own)."""
    import socket

    up = start_up(
        "--no-receiver",
        "--no-ingest",
        cwd=tmp_path,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
    )
    try:
        banner = read_banner(up)
        found = re.search(r"AMQP\s+amqp://\S+@127\.0\.0\.1:(\d+)/", banner)
        assert found, banner
        port = int(found.group(1))
        os.killpg(up.pid, signal.SIGINT)
        up.wait(60)
        assert "Stopped broker" in up.stderr.read()
        with pytest.raises(OSError):
            socket.create_connection(("127.0.0.1", port), timeout=5).close()
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(up.pid, signal.SIGKILL)
        up.wait()
