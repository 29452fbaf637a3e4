"""Alert rules on committed micro-batches: an error rate over a window per app or host and a
pattern, each firing once while its condition holds (again after it stopped holding), as
the ingest's keeper evaluates them on each batch it sees committed: the alert reaches a
queue bound to the ``alerts`` exchange before the next batch, and the logs exchange."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pika
import pytest

import leveret
from leveret.logs.alerts import ALERT_FACILITY, AmqpAlerts, Batch, Evaluator
from leveret.logs.lakeconfig import AlertRule, LakeConfigError, parse
from tests.support.waiting import wait_for

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


def batch(n: int, clock: Clock, rows: list[tuple[str, str, str]]) -> Batch:
    """rows: (severity, app, message), all at the clock's time."""
    return Batch(
        n, [clock.now] * len(rows), [r[0] for r in rows], [r[1] for r in rows],
        ["h1"] * len(rows), ["user"] * len(rows), [r[2] for r in rows],
    )  # fmt: skip


RATE = AlertRule(name="errors", error_rate=0.1, window=300, per="app", min_records=10)
PATTERN = AlertRule(name="disk", pattern=r"No space left")


def test_an_error_rate_fires_once_per_app_while_it_holds() -> None:
    clock = Clock()
    ev = Evaluator([RATE], clock)
    assert ev.observe(batch(0, clock, [("info", "shop", "ok")] * 10)) == []
    # 5 errors in 15 records: 33 % > 10 %
    fired = ev.observe(batch(1, clock, [("error", "shop", "boom")] * 5))
    assert len(fired) == 1
    a = fired[0]
    assert a.facility == ALERT_FACILITY and a.severity == "warning"
    assert a.extra is not None and a.extra["key"] == "shop" and a.extra["batch"] == 1
    assert "error rate 33.3% above 10.0% over 5 min for app 'shop' (5 of 15" in a.message
    assert ev.observe(batch(2, clock, [("critical", "shop", "boom")] * 5)) == []  # still true
    # another app: its own alert; too few records in the window: none
    assert ev.observe(batch(3, clock, [("error", "mail", "x")] * 3)) == []
    mail = ev.observe(batch(4, clock, [("error", "mail", "x")] * 7))
    assert [m.extra["key"] for m in mail if m.extra] == ["mail"]
    # the window moves on: only good records, the condition ends; errors again: fires again
    clock.now += 301
    assert ev.observe(batch(5, clock, [("info", "shop", "ok")] * 50)) == []
    assert ev.observe(batch(6, clock, [("info", "shop", "ok")] * 1)) == []
    again = ev.observe(batch(7, clock, [("error", "shop", "boom")] * 30))
    assert [m.extra["batch"] for m in again if m.extra] == [7]


def test_records_without_an_app_are_nobodys_error_rate() -> None:
    """Found by a user: a per-app rule fired "for app ''" on the broker's own records (and
    plain text, which has no app either)."""
    clock = Clock()
    ev = Evaluator([RATE], clock)
    assert ev.observe(batch(0, clock, [("error", "", "refused login")] * 20)) == []
    fired = ev.observe(batch(1, clock, [("error", "shop", "x")] * 10))
    assert [a.extra["key"] for a in fired if a.extra] == ["shop"]


def test_a_pattern_fires_once_per_run_of_matching_batches() -> None:
    clock = Clock()
    ev = Evaluator([PATTERN], clock)
    fired = ev.observe(batch(0, clock, [("error", "db", "write failed: No space left on dev")]))
    assert len(fired) == 1 and "1 record(s) match 'No space left'" in fired[0].message
    assert ev.observe(batch(1, clock, [("error", "db", "No space left again")])) == []
    assert ev.observe(batch(2, clock, [("info", "db", "fine")])) == []
    assert len(ev.observe(batch(3, clock, [("error", "db", "No space left!")]))) == 1
    # an alert record is never evaluated (its message names the pattern)
    alert = Batch(4, [clock.now], ["warning"], ["leveret-alerts"], [""], [ALERT_FACILITY],
                  ["alert 'disk': ... No space left"])  # fmt: skip
    assert ev.observe(batch(5, clock, [("info", "db", "fine")])) == []
    assert ev.observe(alert) == []


def test_rules_from_the_config() -> None:
    cfg = parse({
        "retention": "30d", "compact_every": "10m",
        "alerts": [
            {"name": "shop errors", "error_rate": 0.05, "window": "5m", "per": "host"},
            {"name": "disk", "pattern": "No space left"},
        ],
    })  # fmt: skip
    assert cfg.compact_every == 600 and cfg.retention == "30d"
    assert cfg.alerts[0] == AlertRule("shop errors", 0.05, 300.0, "host", 1, None)
    assert cfg.alerts[1].kind == "pattern"
    for bad, why in (
        ({"alerts": [{"name": "x"}]}, "give either error_rate or pattern"),
        ({"alerts": [{"name": "x", "pattern": "("}]}, "invalid pattern"),
        ({"alerts": [{"name": "x", "error_rate": 5}]}, "error_rate must be a fraction"),
        ({"alerts": [{"name": "x", "error_rate": 0.1, "per": "pod"}]}, "per must be app"),
        ({"retention": "forever"}, "invalid retention"),
        ({"colour": "red"}, "unknown key 'colour'"),
    ):
        with pytest.raises(LakeConfigError, match=why):
            parse(bad)


# ------------------------------------------------------------ the keeper, over AMQP
def _commit(lake: Path, n: int, rows: list[tuple[str, str, str]]) -> None:
    """One batch of the sink: its files, then its log file."""
    now = time.time()
    meta = lake / "_spark_metadata"
    meta.mkdir(parents=True, exist_ok=True)
    entries = []
    for sev in sorted({r[0] for r in rows}):
        part = [r for r in rows if r[0] == sev]
        d = lake / "date=2026-11-26" / f"severity={sev}"
        d.mkdir(parents=True, exist_ok=True)
        f = d / f"part-00000-{n}-{sev}.c000.snappy.parquet"
        table = pa.table({
            "ts": pa.array([int(now * 1e6)] * len(part), pa.timestamp("us", tz="UTC")),
            "app": [r[1] for r in part], "host": ["h1"] * len(part),
            "facility": ["user"] * len(part), "message": [r[2] for r in part],
        })  # fmt: skip
        pq.write_table(table, f)
        entries.append({"path": f.as_uri(), "size": f.stat().st_size, "isDir": False,
                        "modificationTime": 0, "blockReplication": 1, "blockSize": 1,
                        "action": "add"})  # fmt: skip
    (meta / str(n)).write_text("v1\n" + "\n".join(json.dumps(e) for e in entries))


def test_the_keeper_publishes_an_alert_before_the_next_batch(tmp_path: Path) -> None:
    from leveret.spark.keeper import LakeKeeper

    lake = tmp_path / "lake"
    _commit(lake, 0, [("error", "shop", "old")] * 20)  # before the keeper: not evaluated
    with leveret.Broker() as broker:
        conn = pika.BlockingConnection(pika.URLParameters(broker.url))
        ch = conn.channel()
        ch.exchange_declare("logs", "fanout")
        ch.exchange_declare("alerts", "fanout", durable=True)
        alerts = ch.queue_declare("", exclusive=True).method.queue
        ch.queue_bind(alerts, "alerts")
        logs = ch.queue_declare("", exclusive=True).method.queue
        ch.queue_bind(logs, "logs")
        rules = [AlertRule(name="errors", error_rate=0.2, window=300, min_records=5), PATTERN]
        keeper = LakeKeeper(lake, interval=0.05, alerts=Evaluator(rules),
                            publish=AmqpAlerts(broker.url, "logs").publish)  # fmt: skip
        keeper.start()
        try:

            def take(queue: str) -> list[dict[str, Any]]:
                out = []
                while True:
                    m, _, body = ch.basic_get(queue, auto_ack=True)
                    if m is None:
                        return out
                    out.append(json.loads(body))

            time.sleep(0.3)
            _commit(lake, 1, [("info", "shop", "ok")] * 10)
            assert wait_for(lambda: keeper._latest == 1, timeout=10)
            assert take(alerts) == []
            _commit(lake, 2, [("error", "shop", "boom")] * 5)  # 5 of 15: 33 %
            got: list[dict[str, Any]] = []
            assert wait_for(lambda: bool(got.extend(take(alerts)) or got), timeout=10)
            assert [(a["extra"]["rule"], a["extra"]["batch"]) for a in got] == [("errors", 2)]
            _commit(lake, 3, [("error", "shop", "No space left on device")] * 5)
            assert wait_for(lambda: keeper._latest == 3, timeout=10)
            assert wait_for(lambda: bool(got.extend(take(alerts)) or len(got) > 1), timeout=10)
            assert [(a["extra"]["rule"], a["extra"]["batch"]) for a in got] == [
                ("errors", 2), ("disk", 3),
            ]  # fmt: skip
            time.sleep(0.5)
            assert take(alerts) == []  # once while it holds
            in_logs = take(logs)
            assert [a["facility"] for a in in_logs] == ["alert", "alert"]
            assert in_logs[0]["app"] == "leveret-alerts"
        finally:
            keeper.stop()
            conn.close()


def test_the_broker_ignores_the_lake_table(tmp_path: Path) -> None:
    from leveret.logs.lakeconfig import load
    from leveret.server.config import Config

    path = tmp_path / "leveret.toml"
    path.write_text(
        'heartbeat = 30\n[lake]\nretention = "7d"\n'
        '[[lake.alerts]]\nname = "disk"\npattern = "No space"\n'
    )
    assert Config.load(path).heartbeat == 30
    cfg = load(path)
    assert cfg.retention == "7d" and cfg.alerts[0].pattern == "No space"
