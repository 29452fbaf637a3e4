"""The lake search (DuckDB over the committed files) finds what a Spark query over the same
lake finds, record for record and in the same order, on a lake the real ingest wrote; a file
the sink's log never committed is not read; the CLI prints what receive-logs prints."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pika
import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from leveret.logs.lake import SinkLog
from leveret.logs.search import Filters, LakeSearch
from leveret.spark.pipeline import IngestConfig, start_ingest
from leveret.spark.search import search as spark_search
from tests.support.brokers import BrokerUnderTest

ROOT = Path(__file__).resolve().parents[2]
START = datetime(2026, 11, 24, 22, 0, tzinfo=UTC)
SEVERITIES = ("debug", "info", "warning", "error", "critical")


def _doc(i: int) -> dict[str, object]:
    ts = START + timedelta(minutes=7 * i)  # ~2.4 days: three date partitions
    return {
        "ts": ts.isoformat(timespec="microseconds")[:-6] + "Z",
        "severity": SEVERITIES[i % 5],
        "facility": ("user", "kern", "auth")[i % 3],
        "host": f"host{i % 4}",
        "app": f"app{i % 6}",
        "pid": 100 + i,
        "message": f"request {i} " + ("Timeout talking to db" if i % 7 == 0 else "served"),
        **({"exc": "Traceback: TimeoutError"} if i % 11 == 0 else {}),
        "extra": {"id": i},
    }


@pytest.fixture(scope="module")
def lake(_spark_session: SparkSession, tmp_path_factory: pytest.TempPathFactory,
         leveret: BrokerUnderTest) -> Path:  # fmt: skip
    import uuid

    from tests.spark.conftest import declare_stream, delete_queue

    stream = f"spark-search-{uuid.uuid4().hex[:8]}"
    broker = leveret
    declare_stream(broker, stream)
    conn = pika.BlockingConnection(broker.pika_params())
    ch = conn.channel()
    ch.confirm_delivery()
    props = pika.BasicProperties(content_type="application/json")
    for i in range(500):
        ch.basic_publish("", stream, json.dumps(_doc(i)).encode(), props)
    ch.basic_publish("", stream, b'{"message": "broken Timeout', props)  # malformed
    conn.close()
    tmp = tmp_path_factory.mktemp("search")
    cfg = IngestConfig(url=broker.url, lake=tmp / "lake", checkpoint=tmp / "cp", stream=stream,
                       trigger="availableNow", max_records_per_trigger=120)  # fmt: skip
    spark = _spark_session  # one session for the run (the module's lake outlives a test)
    query = start_ingest(spark, cfg)
    query.awaitTermination(300)
    delete_queue(broker, stream)
    return tmp / "lake"


CASES = [
    Filters(),
    Filters.of(severities=["error", "critical"]),
    Filters.of(since="2026-11-25T06:00:00Z", until="2026-11-26T01:30:00Z"),
    Filters.of(since="2026-11-25", apps=["app1", "app3"], hosts=["host1", "host3"]),
    Filters.of(facilities=["kern"], text="timeout"),
    Filters.of(text="TIMEOUTERROR"),
    Filters.of(text="broken"),
    Filters.of(severities=["warning"], until="2026-11-25T12:00:00+02:00", text="served"),
    Filters.of(apps=["nobody"]),
]


@pytest.mark.parametrize("f", CASES, ids=[str(i) for i in range(len(CASES))])
def test_search_finds_what_spark_finds(spark: SparkSession, lake: Path, f: Filters) -> None:
    duck = LakeSearch(lake).search(f, limit=None).records
    assert duck == spark_search(spark, str(lake), f, limit=None)
    # and a plain Spark SQL query over the lake counts as many
    df = spark.read.parquet(str(lake))
    cond = F.lit(True)
    if f.since:
        cond &= F.col("ts") >= F.lit(f.since.replace(tzinfo=None))
    if f.until:
        cond &= F.col("ts") < F.lit(f.until.astimezone(UTC).replace(tzinfo=None))
    for column, values in (("severity", f.severities), ("app", f.apps), ("host", f.hosts),
                           ("facility", f.facilities)):  # fmt: skip
        if values:
            cond &= F.col(column).isin(*values)
    if f.text:
        t = f.text.lower()
        cond &= F.coalesce(F.lower("message").contains(t) | F.lower("exc").contains(t)
                           | F.lower("_corrupt").contains(t), F.lit(False))  # fmt: skip
    assert len(duck) == df.where(cond).count()
    ts = [r["ts"] for r in duck if r["ts"] is not None]
    assert ts == sorted(ts, reverse=True)


def test_pages_are_slices_of_the_whole(lake: Path) -> None:
    search = LakeSearch(lake)
    whole = search.search(Filters(), limit=None).records
    assert len(whole) == 501
    pages = [search.search(Filters(), limit=50, offset=o) for o in range(0, 550, 50)]
    assert [r for p in pages for r in p.records] == whole
    assert [p.more for p in pages] == [True] * 10 + [False]
    assert search.count(Filters.of(severities=["error"])) == 100


def test_partitions_are_pruned_and_uncommitted_files_not_read(lake: Path, tmp_path: Path) -> None:
    copy = tmp_path / "lake"
    shutil.copytree(lake, copy)
    search = LakeSearch(copy)
    # a complete file the log never named (a killed task's): its records are not found twice
    log = SinkLog(lake)
    log.refresh()
    rel = Path(sorted(log.files)[0]).relative_to(lake)
    shutil.copy(copy / rel, (copy / rel).with_name("part-00009-orphan.c000.snappy.parquet"))
    assert (
        search.search(Filters(), limit=None).records
        == LakeSearch(lake).search(Filters(), limit=None).records
    )
    files = search.files(
        Filters.of(severities=["error"], since="2026-11-26", until="2026-11-26T12:00")
    )
    assert files and all("severity=error" in p and "date=2026-11-26" in p for p in files)
    assert all(p.startswith(str(copy)) for p in search.files(Filters()))


def test_the_cli_prints_records_as_receive_logs_does(lake: Path) -> None:
    env_path = f"{ROOT / 'src'}:{ROOT}"
    run = subprocess.run(
        [sys.executable, "-m", "leveret.cli.main", "logs", "search", "--lake", str(lake),
         "-s", "error", "--app", "app3", "TALKING to", "-n", "3"],
        capture_output=True, text=True, env={"PYTHONPATH": env_path, "PATH": "/usr/bin:/bin"},
        timeout=120,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    # errors are i % 5 == 3; app3 is i % 6 == 3; "talking to db" i % 7 == 0: 63, 273, 483
    assert run.stdout.splitlines() == [
        f"{_doc(i)['ts']} ERROR    {_doc(i)['facility']} host{i % 4} app3[{100 + i}]: "
        f"request {i} Timeout talking to db"
        for i in (63, 273, 483)
    ]
    run = subprocess.run(
        [sys.executable, "-m", "leveret.cli.main", "logs", "search", "--lake", str(lake),
         "--json", "-r", "-n", "1", "--since", "2026-11-25", "--until", "2026-11-25T00:07"],
        capture_output=True, text=True, env={"PYTHONPATH": env_path, "PATH": "/usr/bin:/bin"},
        timeout=120,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    i = 18  # 22:00 + 7 * 18 min = 00:06 the next day
    assert [json.loads(line) for line in run.stdout.splitlines()] == [_doc(i)]
