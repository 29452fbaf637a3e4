"""What the ingest does for its lake beside the query: after each committed batch, evaluate
the alert rules on its records (see :mod:`leveret.logs.alerts`) and remove the files the
sink's log never committed (see :mod:`leveret.logs.lake`), so that a reader that lists the
directory (pyarrow, pandas, DuckDB) sees each record once, as Spark does.

A thread of the ingest's driver watches the sink's log; it only reads and removes files,
it never writes the log (the query alone does). It also holds the lake's ``ingest`` lock
(shared) while the ingest runs, and removes the files compactions and the retention took
out of the log once their grace is over (see :mod:`leveret.logs.removals`). Compactions
never stop the ingest: they commit beside it (see :mod:`leveret.logs.compaction`); the
one thing they wait for, the sink writing its compacted log, is over in milliseconds, or
was left by a sink killed -9 and is removed before the next query starts
(:meth:`leveret.logs.lake.Janitor.sweep`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Callable
from pathlib import Path

from leveret.logs.alerts import Evaluator, read_batch
from leveret.logs.compaction import COMPACTED_PREFIX
from leveret.logs.lake import Janitor, SinkLog, lake_lock
from leveret.logs.record import Record
from leveret.logs.removals import finish_removals

log = logging.getLogger(__name__)


class LakeKeeper:
    """Sweeps a lake after each batch the ingest commits, from a thread of its own."""

    def __init__(
        self,
        lake: Path,
        interval: float = 0.25,
        alerts: Evaluator | None = None,
        publish: Callable[[list[Record]], object] | None = None,
    ) -> None:
        self.lake = lake
        self.alerts = alerts
        self.publish = publish
        self.fired: list[Record] = []
        self.interval = interval
        self.janitor = Janitor(lake)
        self._latest = -1
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._ingest_lock: contextlib.AbstractContextManager[bool] | None = None

    def sweep(self, everything: bool = False) -> list[str]:
        """One sweep now (``everything``: no query runs, so no task can commit)."""
        with self._lock:
            try:
                return self.janitor.sweep(everything)
            except OSError as exc:
                log.warning("cannot clean the lake at %s: %s", self.lake, exc)
                return []

    def start(self) -> None:
        # tells a compaction that a sink may be writing the log (released at exit, kill -9
        # included)
        self._ingest_lock = lake_lock(self.lake, wait=120, name="ingest", shared=True)
        if not self._ingest_lock.__enter__():
            log.warning("a compaction of %s holds its lock: running without it", self.lake)
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="leveret-lake", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(30)
        if self._ingest_lock is not None:
            self._ingest_lock.__exit__(None, None, None)
            self._ingest_lock = None

    def _run(self) -> None:
        watch = SinkLog(self.lake)
        evaluated: set[str] | None = None
        if self.alerts is not None:
            # the rules see the batches committed from now on
            with contextlib.suppress(OSError, ValueError):
                watch.refresh()
            evaluated = {os.path.basename(p) for p in watch.files}
        while not self._stop.wait(self.interval):
            try:
                latest = _latest_batch(watch)
            except (OSError, ValueError) as exc:
                log.debug("cannot read the sink's log: %s", exc)
                continue
            if latest > self._latest:
                self._latest = latest
                if evaluated is not None:
                    self._evaluate(watch, evaluated)
                self.sweep()
                try:  # what a compaction killed before its end left on the disk
                    finish_removals(self.lake)
                except (OSError, ValueError) as exc:
                    log.warning("cannot finish the lake's removals: %s", exc)

    def _evaluate(self, watch: SinkLog, evaluated: set[str]) -> None:
        """The alert rules on the files committed since the last look (a compaction's
        files hold records already seen)."""
        assert self.alerts is not None
        try:
            latest = watch.refresh()
            new = [
                p
                for p in watch.files
                if os.path.basename(p) not in evaluated
                and not os.path.basename(p).startswith(COMPACTED_PREFIX)
            ]
            evaluated.update(os.path.basename(p) for p in new)
            if not new:
                return
            fired = self.alerts.observe(read_batch(latest, new))
        except (OSError, ValueError) as exc:
            log.warning("cannot evaluate the alert rules: %s", exc)
            return
        for record in fired:
            log.warning("%s", record.message)
        self.fired += fired
        if fired and self.publish is not None:
            try:
                self.publish(fired)
            except Exception as exc:  # the broker away: the alert is in the ingest's log
                log.warning("cannot publish %d alert(s): %s", len(fired), exc)


def _latest_batch(watch: SinkLog) -> int:
    from leveret.logs.lake import log_batches

    ids, _ = log_batches(watch.lake)
    return ids[-1] if ids else -1
