"""What a compaction or the retention leaves to do once readers are done: removing from the
disk the files a commit took out of the lake's log, and the new ones of a commit that did
not last (see :mod:`leveret.logs.compaction`).

Each commit first records, under ``_leveret/removals``, the files it takes out of the log
and those it puts in. After a grace period (readers that listed the old set may still be
reading it), and never while the sink writes a compacted log (it may name again files it
read before a commit), the recorded files the log does not name are removed: by the run
that made the commit, the next run, or the ingest after its next batch. The janitor of
:mod:`leveret.logs.lake` keeps recorded files meanwhile.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from pathlib import Path
from typing import Any

from leveret.durable import fsync_path
from leveret.logs.lake import (
    STATE_DIR,
    SinkLog,
    ingest_running,
    log_batches,
    remove_file,
    sink_compacting,
)

PENDING_DIR = "removals"
DEFAULT_GRACE = 30.0


def record(lake: Path, remove: list[str], add: list[str], base: int) -> Path:
    """Record, durably and before the log changes, the committed files a commit takes out
    of the log (``remove``) and the new ones it puts in (``add``); ``base``: the log file
    it rewrites first (for people reading the record)."""
    d = lake / STATE_DIR / PENDING_DIR
    d.mkdir(parents=True, exist_ok=True)
    path = d / f"{time.time_ns()}-{uuid.uuid4().hex[:8]}.json"
    tmp = path.with_suffix(".tmp")
    doc = {"at": time.time(), "base": base, "remove": remove, "add": add}
    with open(tmp, "w") as f:
        f.write(json.dumps(doc))
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_path(d)
    return path


def finish_removals(
    lake: Path, grace: float = DEFAULT_GRACE, now: float | None = None, wait: float = 0.0
) -> int:
    """Remove from the disk the files that earlier commits recorded (those they took out of
    the log, and the new ones of commits that did not last) once ``grace`` seconds have
    passed and the log does not name them; returns how many. Nothing goes while the sink
    writes a compacted log (it may name again files it read before a commit): this waits
    up to ``wait`` seconds for it to finish."""
    d = lake / STATE_DIR / PENDING_DIR
    if not d.is_dir():
        return 0
    now = time.time() if now is None else now
    due: list[tuple[Path, dict[str, Any]]] = []
    protected: set[str] = set()  # named by records still in their grace
    for rec in sorted(d.glob("*.json")):
        try:
            doc = json.loads(rec.read_text())
            files = [str(p) for p in doc["remove"] + doc.get("add", [])]
            at = float(doc["at"])
        except FileNotFoundError:
            continue
        except (OSError, ValueError, KeyError, TypeError):
            rec.unlink(missing_ok=True)
            continue
        if now < at + grace:
            protected.update(os.path.basename(p) for p in files)
        else:
            due.append((rec, {"files": files}))
    if not due:
        return 0
    deadline = time.monotonic() + wait
    while ingest_running(lake) and _writing_compaction(lake):
        if time.monotonic() >= deadline:
            return 0
        time.sleep(0.05)
    sink = SinkLog(lake)  # read after the look at the sink: see leveret.logs.lake
    sink.refresh()
    removed = 0
    for rec, doc in due:
        for p in doc["files"]:
            name = os.path.basename(p)
            if name in sink.names or name in protected:
                continue  # the log names it (again), or a newer commit recorded it
            if remove_file(p):
                removed += 1
                _remove_empty_dirs(Path(p).parent, lake)
        rec.unlink(missing_ok=True)
    return removed


def _writing_compaction(lake: Path) -> bool:
    """Whether the sink writes a compacted log after its latest (one of an earlier batch is
    what a killed sink left)."""
    _, compacts = log_batches(lake)
    return any(b > max(compacts, default=-1) for b, _ in sink_compacting(lake))


def _remove_empty_dirs(d: Path, lake: Path) -> None:
    while d != lake and lake in d.parents:
        try:
            d.rmdir()
        except OSError:
            return
        d = d.parent
