"""The Logs view's search of the lake: ``GET /api/logs/search`` over the committed files of a
lake in the ingest's layout (written here without Spark; tests/spark/test_search.py compares
the search with Spark on a lake the real ingest wrote), and the search form in Chromium:
filters, newest first, pages, a record's fields on click."""

from __future__ import annotations

import base64
import json
import os
import urllib.error
import urllib.request
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pytest

import leveret
from leveret.logs.lake import SinkLog
from tests.e2e.browser import Page, chromium
from tests.support.loglake import START, N, _doc, write_lake

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")
pytest.importorskip("duckdb")

__all__ = ["chromium"]


def _get(base: str, path: str) -> tuple[int, Any]:
    auth = base64.b64encode(b"guest:guest").decode()
    req = urllib.request.Request(base + path, headers={"Authorization": f"Basic {auth}"})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, json.load(r)
    except urllib.error.HTTPError as exc:
        return exc.code, json.load(exc)


def _expected(pred: Any) -> list[int]:
    return sorted((i for i in range(N) if pred(_doc(i))), key=lambda i: -i)


def test_search_over_http(tmp_path: Path) -> None:
    data = tmp_path / "data"
    write_lake(data / "lake")
    with leveret.Broker(data_dir=data, management=True) as broker:
        base = broker.management_url
        status, page = _get(base, "/api/logs/search?limit=100")
        assert status == 200, page
        assert [int(r["message_id"]) for r in page["records"]] == _expected(lambda d: True)[:100]
        assert page["more"] is True
        status, last = _get(base, "/api/logs/search?limit=100&offset=200")
        assert [int(r["message_id"]) for r in last["records"]] == _expected(lambda d: True)[200:]
        assert last["more"] is False
        q = urlencode(
            {
                "severity": "error,critical",
                "app": "shop",
                "q": "TIMED OUT",
                "since": "2026-11-25T23:30:00Z",
                "until": "2026-11-26T01:00:00Z",
            }
        )
        status, found = _get(base, f"/api/logs/search?{q}")
        want = _expected(
            lambda d: d["severity"] in ("error", "critical") and d["app"] == "shop"
            and "timed out" in d["message"]
            and datetime(2026, 11, 25, 23, 30, tzinfo=UTC) <= d["ts"]
            < datetime(2026, 11, 26, 1, tzinfo=UTC)
        )  # fmt: skip
        assert want and [int(r["message_id"]) for r in found["records"]] == want
        r0 = found["records"][0]
        d0 = _doc(want[0])
        assert r0["ts"] == d0["ts"].isoformat(timespec="microseconds")[:-6] + "Z"
        assert (r0["host"], r0["pid"], r0["extra"]) == (d0["host"], d0["pid"], {"request": want[0]})
        status, found = _get(base, "/api/logs/search?q=timeouterror&host=web0")
        assert [int(r["message_id"]) for r in found["records"]] == _expected(
            lambda d: d["exc"] is not None and d["host"] == "web0"
        )
        for bad, reason in (("since=yesterday", "invalid time 'yesterday'"),
                            ("severity=loud", "unknown severity 'loud'"),
                            ("limit=0", "limit must be 1 to 1000"),
                            ("offset=x", "limit and offset must be whole numbers")):  # fmt: skip
            status, err = _get(base, f"/api/logs/search?{bad}")
            assert status == 400 and err["reason"].startswith(reason), err


def test_search_in_the_logs_view(chromium: Any, tmp_path: Path) -> None:
    data = tmp_path / "data"
    write_lake(data / "lake")
    with leveret.Broker(data_dir=data, management=True) as broker:
        view = Page(chromium, broker.management_url, viewport={"width": 1366, "height": 1300})
        try:
            p = view.login("/logs")
            p.wait_for_selector("#lake-search")
            # the lake panel: its size, file count and oldest record; the alerts of the day
            p.wait_for_function(
                "document.querySelector('#lake-figures').textContent.includes('Oldest')",
                timeout=20_000,
            )
            figures = p.text_content("#lake-figures") or ""
            committed = SinkLog(data / "lake")
            committed.refresh()
            assert f"in {len(committed.files)} files" in figures, figures
            assert "Oldest2026-11-25 23:00:00Z" in figures, figures
            p.wait_for_function(
                "document.querySelector('#lake-alerts').textContent.includes('No alert')",
                timeout=20_000,
            )
            p.fill("#lake-since", "2026-11-25T23:30:00")
            p.click("#lake-search .sev-chip[data-severity=debug]")
            p.click("#lake-search .sev-chip[data-severity=info]")
            p.click("#lake-go")
            p.wait_for_selector("#lake-results .log-row")
            want = _expected(
                lambda d: d["severity"] in ("warning", "error", "critical")
                and d["ts"] >= START + timedelta(minutes=30)
            )  # fmt: skip
            assert len(want) > 100  # two pages
            rows = p.locator("#lake-results .log-row .msg").all_inner_texts()
            assert [int(t.split()[1]) for t in rows] == want[:100]
            assert "newest first" in p.inner_text("#lake-status")
            p.click("#lake-older")
            p.wait_for_function(
                "document.querySelector('#lake-newer').disabled === false", timeout=20_000
            )
            rows = p.locator("#lake-results .log-row .msg").all_inner_texts()
            assert [int(t.split()[1]) for t in rows] == want[100:200]
            p.click("#lake-newer")
            p.wait_for_function("document.querySelector('#lake-newer').disabled", timeout=20_000)
            p.locator("#lake-results .log-row").nth(0).click()
            p.wait_for_selector("#record-detail:not([hidden])")
            drawer = p.inner_text("#record-detail")
            d = _doc(want[0])
            for text in (d["host"], d["app"], str(d["pid"]), d["message"], "In the lake",
                         f'"request": {want[0]}'):  # fmt: skip
                assert text in drawer
            view.shot("logs-lake-search.png")
            assert view.errors == []
        finally:
            view.close()


def test_the_cli_search_of_the_same_lake(tmp_path: Path) -> None:
    import subprocess
    import sys

    lake = tmp_path / "lake"
    write_lake(lake)
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": f"{root / 'src'}:{root}"}
    run = subprocess.run(
        [sys.executable, "-m", "leveret.cli.main", "logs", "search", "--lake", str(lake),
         "--app", "auth", "--severity", "critical", "--facility", "user", "-n", "2"],
        capture_output=True, text=True, env=env, timeout=60,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    # critical: i % 5 == 4; auth: i % 3 == 1; user: i even -> i % 30 == 4
    lines = run.stdout.splitlines()
    assert [line.split(": ", 1)[1] for line in lines] == [
        f"request {i} " + ("timed out after 30s" if i % 4 == 0 else "served") for i in (214, 244)
    ]
    assert lines[0].startswith("2026-11-26T00:47:00.000000Z CRITICAL user web1 auth[1214]")
