"""An alert rule with the real ingest running (``leveret pipeline ingest --alerts-config``,
a 500 ms trigger): errors of one app arrive, and the rule fires once, evaluated on the very
batch that committed them (within one trigger), on the ``alerts`` exchange; more errors
while it holds do not fire it again; the alert is itself a record of the lake."""

from __future__ import annotations

import json
import signal
import time
import uuid
from pathlib import Path
from typing import Any

import pika
import pytest

from leveret.logs.lake import local_path, log_batches, log_file, read_log_file
from leveret.logs.search import Filters, LakeSearch
from tests.spark.conftest import declare_stream, delete_queue
from tests.spark.test_ingest import _ingest
from tests.support.brokers import BrokerUnderTest
from tests.support.waiting import wait_for

pytestmark = pytest.mark.timeout(900)

CONFIG = """
[lake]
[[lake.alerts]]
name = "shop errors"
error_rate = 0.2
window = "10m"
per = "app"
min_records = 10
"""


def _send(ch: Any, stream: str, severity: str, app: str, n: int, start: int) -> None:
    now = time.time()
    for i in range(start, start + n):
        doc = {"ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now)) + ".000000Z",
               "severity": severity, "facility": "user", "host": "h", "app": app,
               "pid": 1, "message": f"record {i}"}  # fmt: skip
        ch.basic_publish("", stream, json.dumps(doc).encode(),
                         pika.BasicProperties(content_type="application/json"))  # fmt: skip


def _first_batch_with(lake: Path, part: str) -> int | None:
    ids, compacts = log_batches(lake)
    for b in ids:
        if b in compacts:
            continue
        if any(part in e["path"] for e in read_log_file(log_file(lake, b, False))):
            return b
    return None


def _crossing(lake: Path, rate: float, least: int) -> int | None:
    """The first batch after which the lake's error share is above ``rate``."""
    import pyarrow.parquet as pq

    total = errors = 0
    ids, compacts = log_batches(lake)
    for b in ids:
        if b in compacts:
            continue
        for e in read_log_file(log_file(lake, b, False)):
            path = local_path(e["path"])
            n = pq.ParquetFile(path).metadata.num_rows
            total += n
            errors += n if ("severity=error" in path or "severity=critical" in path) else 0
        if total >= least and errors / total > rate:
            return b
    return None


def test_an_alert_fires_once_within_one_trigger(leveret: BrokerUnderTest, tmp_path: Path) -> None:
    stream = f"spark-alerts-{uuid.uuid4().hex[:8]}"
    declare_stream(leveret, stream)
    config = tmp_path / "leveret.toml"
    config.write_text(CONFIG)
    # the test's connection sits idle while Spark starts (minutes on a loaded machine), and a
    # BlockingConnection answers heartbeats only while it is pumped: no heartbeats for it
    conn = pika.BlockingConnection(leveret.pika_params(heartbeat=0))
    ch = conn.channel()
    ch.exchange_declare("alerts", "fanout", durable=True)
    alerts = ch.queue_declare("", exclusive=True).method.queue
    ch.queue_bind(alerts, "alerts")
    ch.confirm_delivery()
    lake = tmp_path / "lake"
    proc = _ingest(leveret.url, tmp_path, "--stream", stream, "--alerts-config", str(config),
                   trigger="500ms", per_trigger=5000, lake=lake)  # fmt: skip
    got: list[dict[str, Any]] = []

    def take() -> list[dict[str, Any]]:
        while True:
            m, _, body = ch.basic_get(alerts, auto_ack=True)
            if m is None:
                return got
            got.append(json.loads(body))

    try:
        _send(ch, stream, "info", "shop", 40, 0)
        assert wait_for(lambda: _first_batch_with(lake, "severity=info") is not None, 300)
        time.sleep(2)
        assert take() == []
        _send(ch, stream, "error", "shop", 20, 40)  # 20 of 60: 33 %
        assert wait_for(lambda: take(), timeout=120)
        # the batch whose records took the error rate over 20 % (the 20 errors may arrive
        # over several batches); the keeper evaluated that batch, or the next one when two
        # were committed between two of its looks: within one trigger
        crossed = _crossing(lake, 0.2, 10)
        assert [(a["extra"]["rule"], a["extra"]["key"]) for a in got] == [("shop errors", "shop")]
        assert crossed is not None and crossed <= got[0]["extra"]["batch"] <= crossed + 1
        assert got[0]["facility"] == "alert" and got[0]["app"] == "leveret-alerts"
        _send(ch, stream, "critical", "shop", 20, 60)  # still above: no second alert
        assert wait_for(lambda: _first_batch_with(lake, "severity=critical"), timeout=120)
        time.sleep(3)
        assert len(take()) == 1
        # the alert is a record of the lake too (the ingest reads it from the stream)
        assert wait_for(
            lambda: LakeSearch(lake).search(Filters.of(facilities=["alert"]), limit=5).records,
            timeout=120,
        )
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=300)
        conn.close()
    assert proc.returncode == 0, out
    delete_queue(leveret, stream)
