"""Compaction and retention whatever the ingest is doing: on a quiet lake whose sink sits just
short of its own log compaction (no data, no batch, for as long as it likes), after a
backfill (the expired records in the newest batches, after the sink's last compacted log),
and when the sink begins its log compaction during a commit (it then reads the log files
from before the rename). A running ingest is its lock held, as the ingest's keeper holds
it; the sink's log compaction is written as Spark 4 writes it (tests/support/loglake.py).
Compactions and retentions are killed -9 at each step. Throughout, every reader of the log
sees each kept record once; a directory lister too once the replaced files are gone."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import pytest

pytest.importorskip("duckdb")
pytest.importorskip("pyarrow")

from leveret.logs import compaction
from leveret.logs.lake import Janitor, SinkLog, lake_lock
from leveret.logs.search import Filters, LakeSearch
from tests.logs.test_compaction import killed_at, seen_by_lister, seen_by_log
from tests.support.loglake import (
    BACKFILL_DAY,
    START,
    begin_sink_compaction,
    sink_compaction,
    write_lake,
)

ROOT = Path(__file__).resolve().parents[2]
RECORDS = 2000
TODAY = date(2026, 11, 27)  # 30 days keep 2026-11-25 and -26, and drop the backfill's day
META = "_spark_metadata"


def quiet_lake(tmp_path: Path) -> Path:
    """28 batches (the newest 27; the sink's next log compaction is batch 29, its last one
    19), the last three a backfill of old records: the expired files are named by plain
    log files after the base, and the sink is within three batches of its compaction."""
    lake = tmp_path / "lake"
    write_lake(lake, batches=28, n=RECORDS, orphan=False, backfill=3)
    return lake


def backfilled(lake: Path) -> set[int]:
    day = datetime.combine(BACKFILL_DAY, datetime.min.time(), UTC)
    page = LakeSearch(lake).search(Filters(since=day, until=day + timedelta(days=1)), limit=None)
    return {int(r["message_id"]) for r in page.records}


def exactly(counts: Counter[int], ids: set[int]) -> bool:
    return set(counts) == ids and set(counts.values()) == {1}


def at_most_once(counts: Counter[int], kept: set[int], old: set[int]) -> bool:
    """Every kept record once, the expired ones at most once (a retention under way)."""
    return kept <= set(counts) <= kept | old and set(counts.values()) == {1}


@pytest.fixture
def ingest_running(tmp_path: Path) -> Iterator[Path]:
    """A quiet lake whose ingest 'runs' (its lock held, as the ingest's keeper holds it)."""
    lake = quiet_lake(tmp_path)
    with lake_lock(lake, name="ingest", shared=True):
        yield lake


def test_a_quiet_lake_short_of_the_sinks_log_compaction(ingest_running: Path) -> None:
    lake = ingest_running
    old = backfilled(lake)
    kept = set(range(RECORDS)) - old
    assert 0 < len(old) < RECORDS
    before = SinkLog(lake)
    assert before.refresh() == 27 and not (lake / META / "29.compact").exists()
    change = compaction.compact(lake, wait=5)
    assert change.partitions and change.records  # the files the base, 19.compact, names
    assert not set(change.removed) & _files(lake)
    assert exactly(seen_by_log(lake), set(range(RECORDS)))
    dropped = compaction.drop_expired(lake, days=30, today=TODAY)
    assert sorted(dropped.partitions) == sorted(
        f"date={BACKFILL_DAY}/{d.name}" for d in (lake / f"date={BACKFILL_DAY}").iterdir()
    )
    # named by the plain log files of the last three batches, after the base
    assert {before.batch_of[f] for f in dropped.removed} == {25, 26, 27}
    assert exactly(seen_by_log(lake), kept)
    compaction.finish_removals(lake, grace=0)
    assert not (lake / f"date={BACKFILL_DAY}").exists()
    assert exactly(seen_by_lister(lake), kept)
    # the sink's next log compaction reads the rewritten log files
    sink_compaction(lake, 29)
    assert exactly(seen_by_log(lake), kept)
    assert compaction.drop_expired(lake, days=30, today=TODAY).partitions == []


def _files(lake: Path) -> set[str]:
    log = SinkLog(lake)
    log.refresh()
    return set(log.files)


@pytest.mark.parametrize("what", ["compaction", "retention"])
def test_the_sinks_log_compaction_begins_during_a_commit(ingest_running: Path, what: str) -> None:
    """The sink begins its log compaction just before the rename: it reads the old log files
    and its compacted log names what they named. The commit is made again on it."""
    lake = ingest_running
    old = backfilled(lake)
    everything = set(range(RECORDS))
    timers: list[threading.Timer] = []

    def step(name: str) -> None:
        if name == "recorded" and not timers:
            finish = begin_sink_compaction(lake, 29)
            timers.append(threading.Timer(0.3, finish))
            timers[0].start()

    if what == "compaction":
        change = compaction.compact(lake, wait=10, step=step)
    else:
        change = compaction.drop_expired(lake, days=30, today=TODAY, wait=10, step=step)
    assert timers
    timers[0].join()
    assert (lake / META / "29.compact").exists()
    files = _files(lake)
    assert change.removed and not set(change.removed) & files
    assert set(change.added) <= files
    want = everything if what == "compaction" else everything - old
    assert exactly(seen_by_log(lake), want)
    Janitor(lake).sweep()
    compaction.finish_removals(lake, grace=0)
    assert exactly(seen_by_lister(lake), want) and exactly(seen_by_log(lake), want)


STEPS = [("compact", s) for s in ("written", "recorded", "published", "committed")] + [
    ("drop_expired", s) for s in ("recorded", "dropped")
]


@pytest.mark.parametrize(("what", "step"), STEPS)
def test_kill_9_at_each_step_on_a_quiet_lake(ingest_running: Path, what: str, step: str) -> None:
    lake = ingest_running
    old = backfilled(lake)
    kept = set(range(RECORDS)) - old
    args = "days=30, today=datetime.date(2026, 11, 27), " if what == "drop_expired" else ""
    killed_at(step, lake, what, args)
    assert at_most_once(seen_by_log(lake), kept, old)
    # what the killed run left: new files the log does not name go with the janitor or
    # after the grace, the files it took out of the log after the grace
    Janitor(lake).sweep()
    compaction.finish_removals(lake, grace=0)
    assert at_most_once(seen_by_lister(lake), kept, old)
    assert at_most_once(seen_by_log(lake), kept, old)
    # the next run does it all
    compaction.drop_expired(lake, days=30, today=TODAY, wait=5)
    compaction.compact(lake, wait=5)
    compaction.finish_removals(lake, grace=0)
    assert exactly(seen_by_log(lake), kept) and exactly(seen_by_lister(lake), kept)
    assert not (lake / f"date={BACKFILL_DAY}").exists()


def test_a_log_compaction_left_by_a_killed_ingest_wedges_nothing(tmp_path: Path) -> None:
    lake = quiet_lake(tmp_path)
    old = backfilled(lake)
    kept = set(range(RECORDS)) - old
    begin_sink_compaction(lake, 29)  # never finished: its ingest was killed -9 in it
    temps = list((lake / META).glob(".29.compact.*.tmp"))
    assert len(temps) == 1
    temps.append(lake / META / f".{temps[0].name}.crc")  # Hadoop's checksum beside it
    temps[1].write_bytes(b"crc")
    # no ingest runs: no sink is writing it
    assert compaction.compact(lake, wait=5).partitions
    with lake_lock(lake, name="ingest", shared=True):  # an ingest started again ...
        with pytest.raises(compaction.CompactionError) as err:
            compaction.drop_expired(lake, days=30, today=TODAY, wait=0.5)
        assert str(err.value).startswith(
            "the ingest has been writing its log compaction (batch 29) for "
        ), err.value
        assert backfilled(lake) == old  # nothing changed
        Janitor(lake).sweep(everything=True)  # ... which, before its query starts, removes it
        assert not any(p.exists() for p in temps)
        assert compaction.drop_expired(lake, days=30, today=TODAY, wait=5).partitions
    compaction.finish_removals(lake, grace=0)
    assert exactly(seen_by_log(lake), kept) and exactly(seen_by_lister(lake), kept)


def test_removals_wait_for_the_sinks_log_compaction(ingest_running: Path) -> None:
    lake = ingest_running
    change = compaction.compact(lake, wait=5)
    # the sink writes its compacted log (it began after the commit: it names the new files)
    finish = begin_sink_compaction(lake, 29)
    assert compaction.finish_removals(lake, grace=0) == 0  # not while it is being written
    finish()
    assert compaction.finish_removals(lake, grace=0) == len(change.removed)
    assert exactly(seen_by_lister(lake), set(range(RECORDS)))


def test_a_removal_waits_for_every_record_naming_the_file(ingest_running: Path) -> None:
    """A compaction's new file that a later compaction replaced stays until the later one's
    grace is over (readers may have listed it before that commit)."""
    lake = ingest_running
    first = compaction.compact(lake, wait=5)
    records = set((lake / "_leveret" / "removals").glob("*.json"))
    sink_compaction(lake, 29)  # names the first compaction's files
    second = compaction.compact(lake, wait=5)
    again = set(first.added) & set(second.removed)
    assert again
    for rec in set((lake / "_leveret" / "removals").glob("*.json")) - records:
        doc = json.loads(rec.read_text())
        doc["at"] = time.time() + 100  # the second compaction's commits: just made
        rec.write_text(json.dumps(doc))
    compaction.finish_removals(lake, grace=30, now=time.time() + 31)
    assert all(os.path.exists(p) for p in again)
    assert exactly(seen_by_log(lake), set(range(RECORDS)))


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "leveret.cli.main", "pipeline", "compact", *args]


def _days_kept() -> int:
    """A retention that keeps the lake's own days and drops the backfill's, today."""
    return (datetime.now(UTC).date() - START.date()).days + 5


def test_the_compact_command_after_a_backfill_beside_a_quiet_ingest(ingest_running: Path) -> None:
    lake = ingest_running
    old = backfilled(lake)
    days = _days_kept()
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'src'}:{ROOT}"}
    run = subprocess.run(
        _cli("--lake", str(lake), "--retention", f"{days}d", "--grace", "0s", "--log-level",
             "warning"),
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert run.stderr == ""
    lines = run.stdout.splitlines()
    # the backfill's day: five severities, a file each in three batches
    assert lines[0] == f"Retention: dropped 5 partition(s) (15 files) older than {days} days"
    assert lines[1].startswith("Compacted 10 partition(s): "), lines
    assert not (lake / f"date={BACKFILL_DAY}").exists()
    kept = set(range(RECORDS)) - old
    assert exactly(seen_by_log(lake), kept) and exactly(seen_by_lister(lake), kept)


def test_the_periodic_compaction_says_what_it_did(ingest_running: Path) -> None:
    """As ``leveret up`` runs it: what each run did on stdout, nothing else on a run that
    had nothing to do, no warning."""
    lake = ingest_running
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'src'}:{ROOT}"}
    days = _days_kept()
    proc = subprocess.Popen(
        _cli("--lake", str(lake), "--retention", f"{days}d", "--every", "1s", "--grace", "0s"),
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()
        second = proc.stdout.readline()
        deadline = time.monotonic() + 60
        while (lake / f"date={BACKFILL_DAY}").exists():  # removed once the grace is over
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.1)
        time.sleep(2.5)  # two more runs, with nothing to do
    finally:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert first == f"Retention: dropped 5 partition(s) (15 files) older than {days} days\n"
    assert second.startswith("Compacted 10 partition(s): ")
    assert out == ""  # the runs after: nothing done, nothing said
    assert "WARNING" not in err and "ERROR" not in err, err
    assert err.splitlines()[0].endswith(
        f"compacting {lake} every 1 s, dropping the date partitions older than {days} days"
    ), err


def test_long_lived_readers_see_the_retention_of_a_backfill(ingest_running: Path) -> None:
    """The search of a running server and the dashboard keep what they read of the log: a
    retention that rewrites the batch files after the base is seen by both."""
    from leveret.management.lakeview import Lake

    lake = ingest_running
    old = backfilled(lake)
    search = LakeSearch(lake)
    view = Lake(lake)
    for _ in range(5):
        view.refresh(budget=10_000)
    assert view.state()["summary"]["records"] == RECORDS
    assert exactly(_ids(search), set(range(RECORDS)))
    compaction.drop_expired(lake, days=30, today=TODAY)
    compaction.finish_removals(lake, grace=0)
    assert exactly(_ids(search), set(range(RECORDS)) - old)
    for _ in range(5):
        view.refresh(budget=10_000)
    assert view.state()["summary"]["records"] == RECORDS - len(old)


def _ids(search: LakeSearch) -> Counter[int]:
    return Counter(int(r["message_id"]) for r in search.search(Filters(), limit=None).records)


def test_a_search_before_the_sinks_first_batch_finds_nothing_and_reads_no_file(
    tmp_path: Path,
) -> None:
    """The sink has made its log directory and is writing its first batch's file (empty so
    far): that file is not committed, and a search must not read it."""
    lake = tmp_path / "lake"
    (lake / META).mkdir(parents=True)
    part = lake / "date=2026-11-27" / "severity=info"
    part.mkdir(parents=True)
    (part / "part-00000-0.c000.snappy.parquet").write_bytes(b"")
    search = LakeSearch(lake)
    assert search.files(Filters()) == []
    assert search.search(Filters()).records == []
