"""Alert rules, evaluated on each micro-batch the ingest commits to the lake.

Two kinds of rule (``[[lake.alerts]]`` in the configuration file, see
:mod:`leveret.logs.lakeconfig`):

- **error rate**: the share of ``error`` and ``critical`` records above ``error_rate`` over
  the last ``window`` (by the records' own times), for one app or one host (``per``), once
  the window holds ``min_records``; records without an app (or host), such as the broker's
  own and plain text, belong to none;
- **pattern**: a regular expression found in a record's message.

A rule fires when its condition becomes true, once: it fires again only after a batch in
which it was false. An error-rate rule is debounced per app (or host), a pattern rule as a
whole. Firing publishes a log record (facility ``alert``, severity ``warning``, app
``leveret-alerts``; what fired in ``extra``) to the ``alerts`` exchange (a fanout,
declared if missing) for receivers, shippers or webhook bridges, and to the logs exchange,
so that the alert is itself a record of the lake. Alert records are never evaluated
themselves.
"""

from __future__ import annotations

import logging
import re
import time
from collections import defaultdict, deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

from leveret.logs.lakeconfig import AlertRule
from leveret.logs.record import ERROR_SEVERITIES, Record, rfc3339

log = logging.getLogger(__name__)

ALERTS_EXCHANGE = "alerts"
ALERT_FACILITY = "alert"
ALERT_APP = "leveret-alerts"


@dataclass(frozen=True, slots=True)
class Batch:
    """The records of one committed micro-batch, as columns."""

    batch: int
    ts: Sequence[float | None]  # seconds since the epoch
    severity: Sequence[str | None]
    app: Sequence[str | None]
    host: Sequence[str | None]
    facility: Sequence[str | None]
    message: Sequence[str | None]


def read_batch(batch: int, files: Iterable[str]) -> Batch:
    """The records of a batch's Parquet files (the severity is their partition)."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    cols: dict[str, list[Any]] = defaultdict(list)
    for path in files:
        severity = next(
            (unquote(p[9:]) for p in path.split("/") if p.startswith("severity=")), None
        )
        pf = pq.ParquetFile(path)
        names = set(pf.schema_arrow.names)
        want = [c for c in ("ts", "app", "host", "facility", "message") if c in names]
        table = pf.read(columns=want)
        n = table.num_rows
        for c in ("app", "host", "facility", "message"):
            cols[c] += table.column(c).to_pylist() if c in names else [None] * n
        if "ts" in names:
            us = pc.cast(pc.cast(table.column("ts"), "timestamp[us]"), "int64").to_pylist()
            cols["ts"] += [v / 1e6 if v is not None else None for v in us]
        else:
            cols["ts"] += [None] * n
        cols["severity"] += [severity] * n
    return Batch(batch, cols["ts"], cols["severity"], cols["app"], cols["host"],
                 cols["facility"], cols["message"])  # fmt: skip


class Evaluator:
    """The rules' state across batches; :meth:`observe` returns the alerts that fire."""

    def __init__(self, rules: Sequence[AlertRule], clock: Callable[[], float] = time.time) -> None:
        self.rules = list(rules)
        self.clock = clock
        self._patterns = {r.name: re.compile(r.pattern) for r in self.rules if r.pattern}
        # rule -> key -> deque of (ts, total, errors) per batch, newest last
        self._counts: dict[str, dict[str, deque[tuple[float, int, int]]]] = defaultdict(
            lambda: defaultdict(deque)
        )
        self._firing: set[tuple[str, str]] = set()

    def observe(self, b: Batch) -> list[Record]:
        now = self.clock()
        fired: list[Record] = []
        keep = [i for i, f in enumerate(b.facility) if f != ALERT_FACILITY]
        for rule in self.rules:
            # key (an app, a host; "" for a pattern) -> (message, extra) while true
            true_now: dict[str, tuple[str, dict[str, Any]]] = {}
            if rule.pattern is not None:
                rx = self._patterns[rule.name]
                hits = [i for i in keep if rx.search(b.message[i] or "")]
                if hits:
                    true_now[""] = (
                        f"alert {rule.name!r}: {len(hits)} record(s) match {rule.pattern!r}, "
                        f"e.g. {b.message[hits[0]]!r}",
                        {"pattern": rule.pattern, "matches": len(hits)},
                    )
            else:
                true_now = self._rates(rule, b, keep, now)
            fired += self._edge(rule, true_now, now, b.batch)
        return fired

    def _rates(
        self, rule: AlertRule, b: Batch, keep: list[int], now: float
    ) -> dict[str, tuple[str, dict[str, Any]]]:
        assert rule.error_rate is not None
        counts = self._counts[rule.name]
        added: dict[str, tuple[float, int, int]] = {}
        for i in keep:
            ts = b.ts[i]
            if ts is None or ts < now - rule.window:
                continue
            key = (b.app[i] if rule.per == "app" else b.host[i]) or ""
            if not key:
                continue  # no app (or host) to speak of: the broker's own records, plain text
            top, total, errors = added.get(key, (0.0, 0, 0))
            added[key] = (max(top, ts), total + 1, errors + (b.severity[i] in ERROR_SEVERITIES))
        for key, slot in added.items():
            counts[key].append(slot)
        out: dict[str, tuple[str, dict[str, Any]]] = {}
        for key in list(counts):
            q = counts[key]
            while q and q[0][0] < now - rule.window:
                q.popleft()
            if not q:
                del counts[key]
                continue
            total = sum(t for _, t, _ in q)
            errors = sum(e for _, _, e in q)
            if total >= rule.min_records and errors / total > rule.error_rate:
                rate = errors / total
                out[key] = (
                    f"alert {rule.name!r}: error rate {rate:.1%} above {rule.error_rate:.1%} "
                    f"over {_span(rule.window)} for {rule.per} {key!r} "
                    f"({errors} of {total} records)",
                    {"per": rule.per, "key": key, "error_rate": round(rate, 6),
                     "errors": errors, "records": total, "threshold": rule.error_rate,
                     "window_seconds": rule.window},
                )  # fmt: skip
        return out

    def _edge(
        self,
        rule: AlertRule,
        true_now: dict[str, tuple[str, dict[str, Any]]],
        now: float,
        batch: int,
    ) -> list[Record]:
        """Alerts for the keys that became true; the keys no longer true are re-armed."""
        out = []
        for key, (message, detail) in true_now.items():
            if (rule.name, key) in self._firing:
                continue
            self._firing.add((rule.name, key))
            extra = {"rule": rule.name, "kind": rule.kind, "batch": batch, **detail}
            out.append(
                Record(
                    ts=rfc3339(now),
                    severity="warning",
                    facility=ALERT_FACILITY,
                    host="",
                    app=ALERT_APP,
                    pid=0,
                    message=message,
                    extra=extra,
                )
            )
        for name, key in list(self._firing):
            if name == rule.name and key not in true_now:
                self._firing.discard((name, key))
        return out


def _span(seconds: float) -> str:
    if seconds % 3600 == 0:
        return f"{int(seconds // 3600)} h"
    if seconds % 60 == 0:
        return f"{int(seconds // 60)} min"
    return f"{seconds:g} s"


class AmqpAlerts:
    """Publishes alert records (with confirms) to the ``alerts`` exchange and to the logs
    exchange (or, without one, straight to the lake's stream)."""

    def __init__(self, url: str, logs_exchange: str = "logs", stream: str | None = None) -> None:
        self.url = url.split(",")[0]
        self.logs_exchange = logs_exchange
        self.stream = stream

    def publish(self, records: Sequence[Record]) -> None:
        import pika
        import pika.exceptions

        if not records:
            return
        conn = pika.BlockingConnection(pika.URLParameters(self.url))
        try:
            ch = conn.channel()
            try:
                ch.exchange_declare(ALERTS_EXCHANGE, passive=True)
            except pika.exceptions.ChannelClosedByBroker:
                ch = conn.channel()
                ch.exchange_declare(ALERTS_EXCHANGE, "fanout", durable=True)
            ch.confirm_delivery()
            props = pika.BasicProperties(
                content_type="application/json", delivery_mode=2, app_id=ALERT_APP
            )
            for r in records:
                body = r.to_json()
                ch.basic_publish(ALERTS_EXCHANGE, f"{ALERT_FACILITY}.warning", body, props)
                if self.logs_exchange:
                    ch.basic_publish(self.logs_exchange, "warning", body, props)
                elif self.stream:
                    ch.basic_publish("", self.stream, body, props)
        finally:
            if conn.is_open:
                conn.close()
