"""The lake's numbers beside the Logs view: the report's tables (records per minute by
severity, error rate, summary) read incrementally from the lake's committed files, across
Spark's log compaction; the ingest's lag against the stream; the last report, served. The
lake here is written in the ingest's layout without Spark (tests/e2e/lakes.py); test_up.py
runs the real ingest and report."""

from __future__ import annotations

import base64
import random
import struct
import sys
import time
import urllib.request
import zlib
from pathlib import Path
from typing import Any

import pika
import pytest

import leveret
from leveret.management.lakeview import Lake
from tests.e2e.browser import Page, chromium
from tests.e2e.lakes import SyntheticLake, holdings, minute
from tests.support.brokers import start_leveret
from tests.support.mgmt import Api
from tests.support.waiting import wait_for

__all__ = ["chromium"]

M0 = 29_000_000  # an epoch minute (2025)
SEVERITY_NAMES = ["debug", "info", "warning", "error", "critical"]


def totals(lake: Lake) -> dict[str, Any]:
    s = lake.state(minutes=10_000)
    per = {
        r["minute"] // 60_000: {
            k: v for k, v in r.items() if k in ("debug", "info", "warning", "error", "critical")
        }
        for r in s["per_minute"]
    }
    return {
        "summary": s["summary"],
        "per_minute": per,
        "max_offset": s["max_offset"],
        "files": s["files"],
    }


def test_the_lake_is_read_once_per_file_across_compaction(tmp_path: Path) -> None:
    synthetic = SyntheticLake(tmp_path / "lake")
    lake = Lake(synthetic.path)
    lake.refresh()
    assert lake.state()["error"].startswith("no log lake at")
    expected: dict[int, dict[str, int]] = {}

    def batch(m: int, severities: list[str], corrupt: int = 0) -> None:
        synthetic.commit(synthetic.rows(minute(m), severities, corrupt))
        for s in severities:
            expected.setdefault(m, {}).setdefault(s, 0)
            expected[m][s] += 1

    batch(M0, ["info", "info", "error"], corrupt=1)
    batch(M0, ["warning"])
    batch(M0 + 1, ["critical", "debug"])
    lake.refresh()
    t = totals(lake)
    assert t["per_minute"] == {
        M0: {"info": 2, "error": 1, "warning": 1},
        M0 + 1: {"critical": 1, "debug": 1},
    }
    assert t["summary"]["records"] == 7 and t["summary"]["corrupt"] == 1
    assert t["summary"]["errors"] == 2
    assert t["max_offset"] == 6
    state = lake.state()
    rate = {r["minute"] // 60_000: r["error_rate"] for r in state["per_minute"]}
    assert rate == {M0: 1 / 4, M0 + 1: 1 / 2}  # the malformed record is in neither

    # more batches, up to Spark's compaction at batch 9; the reader then only finds the
    # compacted log (the batch files it replaced are deleted)
    for i in range(3, 10):
        batch(M0 + 2 + i % 2, ["info"] * i + ["error"])
    synthetic.clean_up_before(9)
    lake.refresh()
    t = totals(lake)
    assert t["per_minute"] == expected
    assert t["summary"]["records"] == synthetic.next_offset
    assert t["max_offset"] == synthetic.next_offset - 1
    for _ in range(10, 13):
        batch(M0 + 4, ["debug", "warning"])
    lake.refresh()
    assert totals(lake)["per_minute"] == expected
    assert totals(lake)["summary"]["records"] == synthetic.next_offset

    # a reader that starts now begins at the compacted log and comes to the same
    fresh = Lake(synthetic.path)
    fresh.refresh()
    assert totals(fresh) == totals(lake)


def test_a_big_lake_is_read_a_bounded_number_of_files_per_refresh(tmp_path: Path) -> None:
    synthetic = SyntheticLake(tmp_path / "lake")
    for i in range(6):
        synthetic.commit(synthetic.rows(minute(M0 + i), ["info", "error"]))
    lake = Lake(synthetic.path)
    lake.refresh(budget=5)
    assert lake.state()["files"] == 5 and lake.state()["files_pending"] == 7
    lake.refresh(budget=5)
    lake.refresh(budget=5)
    assert lake.state()["files"] == 12 and lake.state()["files_pending"] == 0
    assert lake.state()["summary"]["records"] == 12


def test_without_pyarrow_the_lake_is_unavailable_and_says_why(
    tmp_path: Path, monkeypatch: Any
) -> None:
    synthetic = SyntheticLake(tmp_path / "lake")
    synthetic.commit(synthetic.rows(minute(M0), ["info"]))
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    lake = Lake(synthetic.path)
    lake.refresh()
    state = lake.state()
    assert not state["available"]
    assert state["error"].startswith("pyarrow is not installed")


def tiny_png() -> bytes:
    def chunk(kind: bytes, data: bytes) -> bytes:
        return (
            struct.pack(">I", len(data))
            + kind
            + data
            + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)
        )

    raw = b"\x00" + b"\xe5\x39\x35" * 40
    body = b"".join(raw for _ in range(30))
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", struct.pack(">IIBBBBB", 40, 30, 8, 2, 0, 0, 0))
        + chunk(b"IDAT", zlib.compress(body))
        + chunk(b"IEND", b"")
    )


def test_lake_panel_lag_and_report_over_http_and_in_chromium(chromium: Any, tmp_path: Path) -> None:
    """A broker whose data directory holds a lake and a report, and a stream ``logs``
    ahead of the lake: the API's numbers, the report's files, and the Logs page."""
    synthetic = SyntheticLake(tmp_path / "data" / "lake")
    now = int(time.time() // 60)
    for i in range(5):
        synthetic.commit(synthetic.rows(minute(now - 4 + i), ["info"] * (3 + i) + ["error"] * i))
    report = tmp_path / "data" / "report"
    (report / "charts").mkdir(parents=True)
    (report / "charts" / "error_rate.png").write_bytes(tiny_png())
    (report / "report.html").write_text(
        "<!doctype html><html><body><h1>Leveret log report</h1>"
        "<p><img src='charts/error_rate.png' alt='error_rate'></p></body></html>"
    )
    (tmp_path / "secret.txt").write_text("not for the dashboard")
    broker = start_leveret(data_dir=tmp_path / "data")
    try:
        conn = pika.BlockingConnection(pika.ConnectionParameters(broker.host, broker.port))
        ch = conn.channel()
        ch.queue_declare("logs", durable=True, arguments={"x-queue-type": "stream"})
        ch.confirm_delivery()
        for _ in range(synthetic.next_offset + 12):  # 12 records not yet ingested
            ch.basic_publish("", "logs", b'{"message": "x"}')
        conn.close()
        api = Api(broker.http_url)
        d = wait_for(
            lambda: (lambda x: x if x["lake"]["files"] == 9 else None)(api.get("/api/logs/lake")),
            timeout=20,
        )
        assert d, "the lake was never read"
        assert d["stream"] == {
            "vhost": "/",
            "name": "logs",
            "first_offset": 0,
            "end": synthetic.next_offset + 12,
        }
        assert d["ingest_lag"] == 12
        assert d["lake"]["summary"]["records"] == synthetic.next_offset
        assert [r["records"] for r in d["lake"]["per_minute"]] == [3, 5, 7, 9, 11]
        assert d["report"]["available"] and d["report"]["url"] == "/api/logs/report/report.html"
        assert d["live"] is None  # no Logs view open

        status, _ = api.call("GET", "/api/logs/report/charts/error_rate.png")
        assert status == 200
        for bad in (
            "../secret.txt",
            "..%2Fsecret.txt",
            "charts/../../secret.txt",
            "%2e%2e/secret.txt",
            "nothing.html",
            "a%00b.html",  # a NUL byte: a traceback and a 500 before (fuzzing campaign)
            "a" * 5000 + ".html",  # a name too long for the system
        ):
            assert api.call("GET", f"/api/logs/report/{bad}")[0] == 404, bad
        req = urllib.request.Request(broker.http_url + "/api/logs/report/report.html")
        req.add_header("Authorization", "Basic " + base64.b64encode(b"guest:guest").decode())
        with urllib.request.urlopen(req, timeout=10) as resp:
            assert resp.headers["Content-Type"].startswith("text/html")

        view = Page(chromium, broker.http_url)
        try:
            p = view.login("/logs")
            p.wait_for_function(
                "document.querySelector('#lag-value')?.textContent === '12'", timeout=20_000
            )
            p.wait_for_function("Number(document.querySelector('#lake-chart').dataset.bars) === 5")
            assert "Records" in (p.text_content("#lake-figures") or "")
            view.shot("logs-lake.png")
            p.click("#report-open")
            p.wait_for_selector("#report-frame:not([hidden])")
            frame = p.frame_locator("#report-frame")
            src = frame.locator("img").get_attribute("src") or ""
            assert src.startswith("data:image/png;base64,")
            assert frame.locator("h1").text_content() == "Leveret log report"
            view.shot("report.png")
            assert view.errors == []
        finally:
            view.close()
    finally:
        broker.stop()


def _shown(state: dict[str, Any]) -> dict[str, Any]:
    """The dashboard's numbers, in the shape of tests.e2e.lakes.holdings."""
    per_minute = {
        r["minute"] // 60_000: {k: v for k, v in r.items() if k in SEVERITY_NAMES}
        for r in state["per_minute"]
    }
    return {
        "files": state["files"],
        "records": state["summary"]["records"],
        "corrupt": state["summary"]["corrupt"],
        "errors": state["summary"]["errors"],
        "max_offset": state["max_offset"],
        "per_minute": per_minute,
    }


@pytest.mark.parametrize("clean_up", [False, True])
def test_counts_equal_the_lake_whenever_it_is_read_across_compactions(
    tmp_path: Path, clean_up: bool
) -> None:
    """Refreshes fall anywhere between commits: several batches at a time, and a batch's
    own log read in the same pass as the compacted log after it (which names it again).
    Before, that batch was counted twice."""
    synthetic = SyntheticLake(tmp_path / "lake")
    lake = Lake(synthetic.path)
    rng = random.Random(23)
    reads = 0
    for batch in range(35):  # three compactions (batches 9, 19, 29)
        severities = rng.choices(SEVERITY_NAMES, k=rng.randint(1, 6))
        synthetic.commit(synthetic.rows(minute(M0 + batch // 4), severities, rng.randint(0, 1)))
        if clean_up and (batch + 1) % 10 == 0:
            synthetic.clean_up_before(batch)
        # read after batch 8 and after the compaction at 9 in one pass, and at random
        if batch in (7, 9, 18, 19, 28, 30, 34) or rng.random() < 0.3:
            lake.refresh(budget=10_000)
            reads += 1
            assert _shown(lake.state(minutes=10_000)) == holdings(synthetic.path), batch
            assert lake.state()["batches"] == batch + 1
    assert reads > 7


def test_the_dashboard_shows_what_the_lake_holds_across_a_compaction(tmp_path: Path) -> None:
    """Over HTTP, as the dashboard reads it: the panel was read after batch 7, then batch 8
    and the compaction at 9 came before its next refresh."""
    data = tmp_path / "data"
    synthetic = SyntheticLake(data / "lake")
    with leveret.Broker(data_dir=data, management=True) as broker:
        api = Api(broker.management_url)

        def settled(batches: int) -> dict[str, Any] | None:
            d = api.get("/api/logs/lake")["lake"]
            return d if d["batches"] == batches and d["files_pending"] == 0 else None

        for i in range(8):
            synthetic.commit(synthetic.rows(minute(M0 + i), ["info", "error"][: 1 + i % 2]))
        seen = wait_for(lambda: settled(8), timeout=30)
        assert seen and _shown(seen) == holdings(synthetic.path)
        synthetic.commit(synthetic.rows(minute(M0 + 8), ["warning", "critical", "info"]))
        synthetic.commit(synthetic.rows(minute(M0 + 9), ["debug"]))  # 9.compact
        seen = wait_for(lambda: settled(10), timeout=30)
        assert seen, api.get("/api/logs/lake")
        assert _shown(seen) == holdings(synthetic.path)
        assert seen["summary"]["records"] == synthetic.next_offset == 16


def test_the_panels_error_rate_line_has_gaps_where_minutes_have_no_records(
    chromium: Any, tmp_path: Path
) -> None:
    """Records in two minutes, none for two, then two more: the error-rate line over the
    lake's bars is drawn in two pieces (it was one line across the empty minutes)."""
    data = tmp_path / "data"
    synthetic = SyntheticLake(data / "lake")
    now = int(time.time() // 60)
    for m in (now - 6, now - 5, now - 2, now - 1):
        synthetic.commit(synthetic.rows(minute(m), ["info", "info", "error"]))
    with leveret.Broker(data_dir=data, management=True) as broker:
        view = Page(chromium, broker.management_url)
        try:
            p = view.login("/logs")
            p.wait_for_function(
                "Number(document.querySelector('#lake-chart').dataset.bars) === 4",
                timeout=20_000,
            )
            segments = p.get_attribute("#lake-chart", "data-line-segments")
            assert segments == "2"
            assert view.errors == []
        finally:
            view.close()
