"""Compaction and retention on a lake in the ingest's layout (tests/support/loglake.py),
committed through the sink's log: every reader of the log sees each record once before,
during and after, across kill -9 at every step; a directory lister too once the replaced
files are gone. tests/spark/test_compaction.py does the same with the real ingest running."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from datetime import date
from pathlib import Path

import pytest

pytest.importorskip("duckdb")
pytest.importorskip("pyarrow")

from leveret.logs import compaction
from leveret.logs.lake import Janitor, SinkLog, lake_lock
from leveret.logs.search import Filters, LakeSearch
from tests.support.loglake import write_lake

ROOT = Path(__file__).resolve().parents[2]
RECORDS = 2000


def seen_by_log(lake: Path) -> Counter[int]:
    """The records as a reader of the sink's log sees them (the search)."""
    page = LakeSearch(lake).search(Filters(), limit=None)
    return Counter(int(r["message_id"]) for r in page.records)


def seen_by_lister(lake: Path) -> Counter[int]:
    import pyarrow.dataset as ds

    t = ds.dataset(str(lake), format="parquet", partitioning="hive").to_table(
        columns=["message_id"]
    )
    return Counter(int(v) for v in t.column("message_id").to_pylist())


def once(c: Counter[int], n: int = RECORDS) -> bool:
    return set(c) == set(range(n)) and set(c.values()) == {1}


def spark_compaction(lake: Path, batch: int) -> None:
    """What Spark's sink does at a log compaction batch: every entry of the previous
    compacted log and the batches since, those a delete entry names taken out."""
    meta = lake / "_spark_metadata"
    entries = []
    for b in range(max(0, batch - 10), batch):
        for name in (str(b), f"{b}.compact"):
            if (meta / name).exists():
                lines = (meta / name).read_text().split("\n")[1:]
                entries += [json.loads(x) for x in lines if x.strip()]
    gone = {e["path"] for e in entries if e["action"] == "delete"}
    kept = [e for e in entries if e["path"] not in gone]
    (meta / f"{batch}.compact").write_text("v1\n" + "\n".join(json.dumps(e) for e in kept))


def killed_at(step: str, lake: Path, what: str = "compact", args: str = "") -> None:
    """``compaction.<what>`` on the lake (``args`` before its own keywords) in a Python of its
    own that kills itself with SIGKILL when it comes to ``step``."""
    script = (
        "import datetime, os; from pathlib import Path; from leveret.logs import compaction\n"
        "def step(s):\n"
        f"    if s == {step!r}: os.kill(os.getpid(), 9)\n"
        f"compaction.{what}(Path({str(lake)!r}), {args}wait=5, step=step)\n"
    )
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'src'}:{ROOT}"}
    run = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                         timeout=120)  # fmt: skip
    assert run.returncode == -signal.SIGKILL, run.stderr.decode()


@pytest.fixture
def ingest_running(tmp_path: Path) -> Iterator[Path]:
    """A lake whose ingest 'runs' (its lock held, as the ingest's keeper holds it)."""
    lake = tmp_path / "lake"
    write_lake(lake, batches=25, n=RECORDS, orphan=False)
    with lake_lock(lake, name="ingest", shared=True):
        yield lake


def test_compaction_replaces_small_files_for_every_reader(ingest_running: Path) -> None:
    lake = ingest_running
    before = SinkLog(lake)
    before.refresh()
    base = lake / "_spark_metadata" / "19.compact"
    mtime = base.stat().st_mtime_ns
    import pyarrow.parquet as pq

    in_base = sum(pq.ParquetFile(p).metadata.num_rows for p in before.in_base)
    assert 0 < in_base < RECORDS  # batches 0-19; 20-24 are in plain log files
    change = compaction.compact(lake, wait=5)
    assert change.partitions and change.records == in_base
    after = SinkLog(lake)
    after.refresh()
    assert len(after.files) < len(before.files) / 2
    assert not set(change.removed) & set(after.files)
    assert base.stat().st_mtime_ns == mtime  # the janitor's commit time of that batch
    assert once(seen_by_log(lake))
    # the replaced files stay for readers that listed them; the janitor keeps them too
    assert all(os.path.exists(p) for p in before.files)
    assert Janitor(lake).sweep(everything=True) == []
    assert compaction.finish_removals(lake, grace=30) == 0
    assert compaction.finish_removals(lake, grace=0) == len(change.removed)
    assert once(seen_by_lister(lake)) and once(seen_by_log(lake))
    # the sink's next log compaction names the files of the rewritten base and the
    # batches since; the next compaction takes those too
    spark_compaction(lake, 29)
    final = SinkLog(lake)
    final.refresh()
    assert final.files.keys() == after.files.keys()
    assert once(seen_by_log(lake))
    compaction.compact(lake, wait=5)
    compaction.finish_removals(lake, grace=0)
    assert once(seen_by_lister(lake)) and once(seen_by_log(lake))
    last = SinkLog(lake)
    last.refresh()
    assert len(last.files) == len(change.partitions)  # one file per partition


@pytest.mark.parametrize("step", ["written", "recorded", "published", "committed"])
def test_kill_9_at_each_step(ingest_running: Path, step: str) -> None:
    lake = ingest_running
    killed_at(step, lake)
    assert once(seen_by_log(lake))
    # what the killed run left: its new files (uncommitted) go with the janitor, the
    # files it replaced with the next run's removals
    Janitor(lake).sweep(everything=True)
    compaction.finish_removals(lake, grace=0)
    assert once(seen_by_lister(lake)) and once(seen_by_log(lake))
    assert not list(lake.rglob(".compacting-*"))[1:]  # at most the one being written
    compaction.compact(lake, wait=5)
    compaction.finish_removals(lake, grace=0)
    assert once(seen_by_lister(lake)) and once(seen_by_log(lake))
    # a half-written file of a killed run goes with a later run, an hour on
    for p in lake.rglob(".compacting-*"):
        os.utime(p, (time.time() - 7200, time.time() - 7200))
    compaction.compact(lake, wait=5)
    assert not list(lake.rglob(".compacting-*"))


def test_retention_drops_old_partitions(ingest_running: Path) -> None:
    lake = ingest_running
    everything = seen_by_log(lake)
    search = LakeSearch(lake)
    newer = {
        int(r["message_id"])
        for r in search.search(Filters.of(since="2026-11-26"), limit=None).records
    }
    assert 0 < len(newer) < RECORDS
    change = compaction.drop_expired(lake, days=1, today=date(2026, 11, 27))
    assert change.partitions and all("date=2026-11-25" in p for p in change.partitions)
    assert set(seen_by_log(lake)) == newer  # readers of the log at once
    assert (lake / "date=2026-11-25").exists()  # kept for readers that listed it
    compaction.finish_removals(lake, grace=0)
    assert not (lake / "date=2026-11-25").exists()
    assert set(seen_by_lister(lake)) == newer
    assert set(everything) == set(range(RECORDS))
    assert compaction.drop_expired(lake, days=1, today=date(2026, 11, 27)).partitions == []


def test_retention_words() -> None:
    assert compaction.parse_retention("30d") == 30
    assert compaction.parse_retention("4w") == 28
    assert compaction.parse_retention("7 days") == 7
    for bad in ("0d", "1y", "soon", ""):
        with pytest.raises(ValueError, match="invalid retention"):
            compaction.parse_retention(bad)


def test_the_compact_command(tmp_path: Path) -> None:
    lake = tmp_path / "lake"
    write_lake(lake, batches=12, n=RECORDS, orphan=False)
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'src'}:{ROOT}"}

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "leveret.cli.main", "pipeline", "compact", *args],
            env=env, capture_output=True, text=True, timeout=120,
        )  # fmt: skip

    run = cli("--lake", str(lake), "--grace", "0s", "--log-level", "warning")
    assert run.returncode == 0, run.stderr
    # the files batch 9's compacted log names; the date=2026-11-25 ones are one a partition
    assert run.stdout.startswith("Compacted 5 partition(s): 50 files into 5 ")
    assert once(seen_by_lister(lake)) and once(seen_by_log(lake))
    for args, error in (
        (("--lake", str(lake), "--retention", "forever"), "invalid retention 'forever'"),
        (("--lake", str(tmp_path / "nope")), "no log lake at"),
        (("--lake", str(lake), "--grace", "soon"), "--grace: 'soon' is not a duration"),
    ):
        run = cli(*args)
        assert run.returncode == 1 and run.stderr.startswith(f"Error: {error}"), run.stderr


def test_the_dashboards_numbers_stay_the_same_across_a_compaction(ingest_running: Path) -> None:
    from leveret.management.lakeview import Lake

    lake = ingest_running
    view = Lake(lake)
    for _ in range(5):
        view.refresh(budget=10_000)
    before = view.state()["summary"]
    assert before["records"] == RECORDS
    compaction.compact(lake, wait=5)
    for _ in range(5):
        view.refresh(budget=10_000)
    after = view.state()
    assert after["summary"] == before  # counted again from the rewritten base, once
    log = SinkLog(lake)
    log.refresh()
    assert after["committed_files"] == len(log.files)
