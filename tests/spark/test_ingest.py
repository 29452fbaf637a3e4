"""``leveret pipeline ingest`` as a separate process, killed with SIGKILL mid-way and
restarted from its checkpoint (and, for the stream, with the broker restarted under the
second run): every record lands in the lake exactly once (stream queue), or at least once
with only redelivered duplicates (classic queue).

The stream run emits LEVERET_SPARK_EO_RECORDS records (200,000 by default, the issue's full
run) and restarts the broker under the second ingest: a Leveret of the test's own, and a
RabbitMQ node of the test's own (never the shared reference node, which other tests use at
the same time). The classic-queue run emits LEVERET_SPARK_CLASSIC_RECORDS (5,000)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pika
import pytest
from pyspark.sql import SparkSession

from tests.spark.conftest import declare_stream, delete_queue, emit_records, filled_stream
from tests.support.brokers import BrokerUnderTest, start_leveret
from tests.support.ports import free_port
from tests.support.rabbitmq import RabbitNode

RECORDS = int(os.environ.get("LEVERET_SPARK_EO_RECORDS", "200000"))
CLASSIC_RECORDS = int(os.environ.get("LEVERET_SPARK_CLASSIC_RECORDS", "5000"))


def _ingest(
    url: str,
    tmp: Path,
    *source: str,
    trigger: str,
    per_trigger: int,
    lake: Path | None = None,
    cli: list[str] | None = None,
    env: dict[str, str] | None = None,
) -> subprocess.Popen[str]:
    cmd = [
        *(cli or [sys.executable, "-m", "leveret.cli.main"]), "pipeline", "ingest",
        "--url", url, *source, "--exchange", "",
        "--lake", str(lake or tmp / "lake"), "--checkpoint", str(tmp / "checkpoint"),
        "--master", "local[2]", "--trigger", trigger,
        "--max-records-per-trigger", str(per_trigger), "--log-level", "warning",
    ]  # fmt: skip
    # a session of its own, so that SIGKILL takes the whole driver: Python and its JVM
    return subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        start_new_session=True, env=env,
    )  # fmt: skip


def _committed_batches(lake: Path) -> int:
    meta = lake / "_spark_metadata"
    return len([p for p in meta.iterdir() if p.name.isdigit()]) if meta.is_dir() else 0


def _kill_after_batches(proc: subprocess.Popen[str], lake: Path, batches: int) -> None:
    deadline = time.monotonic() + 300
    try:
        while _committed_batches(lake) < batches:
            if proc.poll() is not None:
                out, _ = proc.communicate()
                raise AssertionError("ingest ended early:\n" + out)
            assert time.monotonic() < deadline, "ingest made no progress"
            time.sleep(0.05)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate(timeout=30)  # reaps it and closes its pipe


def _killed_while(proc: subprocess.Popen[str], lake: Path, emit: Callable[[], object]) -> int:
    """Kill the ingest after two committed batches while ``emit`` sends more records beside
    it; the batches it committed."""
    later = threading.Thread(target=emit)
    later.start()
    try:
        _kill_after_batches(proc, lake, 2)
    finally:
        later.join()
    return _committed_batches(lake)


def _finish(proc: subprocess.Popen[str]) -> None:
    out, _ = proc.communicate(timeout=600)
    assert proc.returncode == 0, out


@contextlib.contextmanager
def restartable(
    broker: BrokerUnderTest, tmp_path: Path
) -> Iterator[tuple[BrokerUnderTest, Callable[[], None]]]:
    """A broker of the test's own, of the kind under test, and a way to restart it on the
    same port and data: a Leveret, or a RabbitMQ node."""
    if broker.name != "leveret":
        node = RabbitNode().start()

        def restart_node() -> None:
            node.stop()
            node.start()

        try:
            yield BrokerUnderTest("rabbitmq", node.host, node.port), restart_node
        finally:
            node.close()
        return
    port = free_port()
    data = tmp_path / "leveret-data"
    extra = ["--amqp-port", str(port), "--stream-port", str(free_port())]
    current = [start_leveret(data, extra=extra)]

    def restart() -> None:
        current[0].stop()
        current[0] = start_leveret(data, extra=extra)

    try:
        yield current[0], restart
    finally:
        current[0].stop()


# RabbitMQ's run is over AMQP 0-9-1 alone: the test's own node runs no stream plugin, so
# `auto` there took the same AMQP path as `amqp` (it cost a node and 4 minutes of a run);
# how `auto` chooses, on both brokers, is test_protocol_auto.py's
@pytest.mark.parametrize(
    ("broker", "protocol"),
    [("leveret", "amqp"), ("leveret", "auto"), ("rabbitmq", "amqp")],
    indirect=["broker"],
)
def test_stream_ingest_is_exactly_once_across_a_driver_kill_and_a_broker_restart(
    spark: SparkSession,
    broker: BrokerUnderTest,
    protocol: str,
    tmp_path: Path,
) -> None:
    """``auto`` is the default (no --protocol): Leveret is read over its stream port."""
    with restartable(broker, tmp_path) as (own, restart):
        _exactly_once(spark, own, restart, protocol, tmp_path)


def _exactly_once(
    spark: SparkSession,
    broker: BrokerUnderTest,
    restart: Callable[[], None],
    protocol: str,
    tmp_path: Path,
) -> None:
    stream = f"spark-eo-{uuid.uuid4().hex[:8]}"
    declare_stream(broker, stream)
    half = RECORDS // 2
    emit_records(broker.url, stream, range(half))
    per_trigger = max(1000, RECORDS // 10)
    lake = tmp_path / "lake"
    source = ["--stream", stream]
    if protocol != "auto":
        source += ["--protocol", protocol]
    if broker.stream_port:
        source += ["--stream-port", str(broker.stream_port)]
    proc = _ingest(broker.url, tmp_path, *source, trigger="200ms", per_trigger=per_trigger)
    rest = range(half, RECORDS)
    killed_at = _killed_while(proc, lake, lambda: emit_records(broker.url, stream, rest))
    assert killed_at * per_trigger < RECORDS, "killed too late"

    # restarted from its checkpoint; the broker restarts under it once it makes progress
    proc = _ingest(broker.url, tmp_path, *source, trigger="availableNow", per_trigger=per_trigger)
    deadline = time.monotonic() + 300
    while _committed_batches(lake) <= killed_at and proc.poll() is None:
        assert time.monotonic() < deadline, "the restarted ingest made no progress"
        time.sleep(0.05)
    restart()
    _finish(proc)

    rows = spark.read.parquet(str(lake)).select("message_id", "_corrupt").collect()
    ids = Counter(int(r.message_id) for r in rows)
    assert len(ids) == RECORDS and set(ids) == set(range(RECORDS))
    assert [i for i, n in ids.items() if n != 1] == []
    assert all(r._corrupt is None for r in rows)
    dirs = {p.name.split("=")[0] for p in lake.iterdir() if "=" in p.name}
    assert dirs == {"date"}
    assert all(p.name.startswith("severity=") for p in lake.glob("date=*/*"))
    delete_queue(broker, stream)


def test_classic_queue_ingest_loses_nothing_across_a_driver_kill(
    spark: SparkSession, broker: BrokerUnderTest, tmp_path: Path
) -> None:
    queue = f"spark-classic-{uuid.uuid4().hex[:8]}"
    conn = pika.BlockingConnection(broker.pika_params())
    conn.channel().queue_declare(queue, durable=True)
    conn.close()
    total = CLASSIC_RECORDS
    try:
        emit_records(broker.url, queue, range(total))
        per_trigger = max(200, total // 10)
        proc = _ingest(
            broker.url, tmp_path, "--queue", queue, trigger="200ms", per_trigger=per_trigger
        )
        _kill_after_batches(proc, tmp_path / "lake", 2)
        _finish(
            _ingest(
                broker.url,
                tmp_path,
                "--queue",
                queue,
                trigger="availableNow",
                per_trigger=per_trigger,
            )
        )
        lake = spark.read.parquet(str(tmp_path / "lake"))
        rows = lake.select("message_id", "redelivered", "offset").collect()
        copies: dict[int, list[Any]] = defaultdict(list)
        for r in rows:
            copies[int(r.message_id)].append(r)
        assert set(copies) == set(range(total)), "a record was lost"
        # every duplicate is a redelivery: its copies beyond the first are redelivered ones
        for same in copies.values():
            if len(same) > 1:
                assert sum(1 for r in same if r.redelivered) >= len(same) - 1, same
        # the queue is drained and everything was acked
        conn = pika.BlockingConnection(broker.pika_params())
        ok = conn.channel().queue_declare(queue, passive=True)
        conn.close()
        assert ok.method.message_count == 0
        assert not list((tmp_path / "checkpoint" / "amqp-wal").glob("*.tmp"))
    finally:
        delete_queue(broker, queue)


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 64 KiB tmpfs: a lake that fills up. Needs root (the suite runs as root in CI)."""
    path = tmp_path / "small-disk"
    path.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(path)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {mounted.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False, capture_output=True)


def test_a_full_lake_fails_the_batch_and_the_restart_skips_nothing(
    spark: SparkSession, leveret: BrokerUnderTest, tmp_path: Path, small_disk: Path
) -> None:
    total = 10_000
    stream = filled_stream(leveret, "spark-full", total)
    lake = small_disk / "lake"

    # the lake's disk fills up: the batch fails, the ingest stops with one plain line
    proc = _ingest(
        leveret.url,
        tmp_path,
        "--stream",
        stream,
        "--max-restarts",
        "0",
        trigger="availableNow",
        per_trigger=2000,
        lake=lake,
    )
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 1, out
    errors = [line for line in out.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1, out
    assert errors[0].endswith(": No space left on device") and str(lake) in errors[0], out
    assert "Traceback" not in out and "Caused by" not in out and " ERROR " not in out, out
    committed = _committed_batches(lake)
    assert committed < total // 2000, "the disk never filled up"

    # room again: the same checkpoint runs the failed batch again and finishes
    subprocess.run(["mount", "-o", "remount,size=256m", str(small_disk)], check=True)
    _finish(
        _ingest(
            leveret.url,
            tmp_path,
            "--stream",
            stream,
            trigger="availableNow",
            per_trigger=2000,
            lake=lake,
        )
    )
    ids = Counter(int(r.message_id) for r in spark.read.parquet(str(lake)).collect())
    assert set(ids) == set(range(total)), "a record was skipped"
    assert [i for i, n in ids.items() if n != 1] == []
    delete_queue(leveret, stream)
