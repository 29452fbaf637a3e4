"""``leveret pipeline report`` over a small lake: tables, charts and the report exist."""

from __future__ import annotations

import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pandas as pd
from pyspark.sql import SparkSession

from leveret.spark.records import parse_log_records
from leveret.spark.report import make_report
from leveret.spark.schema import MESSAGE_SCHEMA
from tests.spark.test_records import _row

START = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)


def _small_lake(spark: SparkSession, where: Path) -> Path:
    rows = []
    for i in range(300):
        severity = ("info", "info", "warning", "error", "critical", "debug")[i % 6]
        ts = (START + timedelta(seconds=i)).isoformat().replace("+00:00", "Z")
        body = (
            f'{{"ts":"{ts}","severity":"{severity}","facility":"f{i % 2}","host":"h{i % 3}",'
            f'"app":"app{i % 4}","pid":1,"message":"msg {i % 5 if i % 6 >= 3 else i}"}}'
        )
        rows.append(_row(i, body.encode()))
    rows.append(_row(300, b"{broken"))
    records = parse_log_records(spark.createDataFrame(rows, MESSAGE_SCHEMA))
    lake = where / "lake"
    records.write.partitionBy("date", "severity").parquet(str(lake))
    return lake


def test_the_report_runs_on_a_small_lake_and_its_charts_exist(
    spark: SparkSession, tmp_path: Path
) -> None:
    lake = _small_lake(spark, tmp_path)
    report = make_report(spark, lake, tmp_path / "report", "html")
    assert report.document.exists()
    assert set(report.charts) == {
        "severity_per_minute", "error_rate", "top_apps", "top_hosts", "top_facilities",
    }  # fmt: skip
    for path in report.charts.values():
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert path.name in report.document.read_text()
    for name in report.tables:
        assert list((tmp_path / "report" / "tables" / name).glob("*.parquet")), name
    t = report.tables
    summary = t["summary"].iloc[0]
    assert (summary["records"], summary["corrupt"], summary["errors"]) == (301, 1, 100)
    spm = t["severity_per_minute"]
    assert len(spm) == 5 * 5  # five minutes, five severities
    assert spm["count"].sum() == 300
    rate = t["error_rate"]
    assert len(rate) == 5 and (rate["error_rate"] - 1 / 3).abs().max() < 1e-9
    assert list(t["top_apps"]["count"]) == [75, 75, 75, 75]
    assert list(t["top_hosts"]["count"]) == [100, 100, 100]
    top_errors = t["top_errors"]
    assert top_errors.iloc[0]["count"] == 20 and len(top_errors) == 5
    tables = pd.read_parquet(tmp_path / "report" / "tables" / "top_hosts")
    assert sorted(tables["host"]) == ["h0", "h1", "h2"]


def test_the_report_without_a_lake_is_one_clear_line(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "leveret.cli.main", "pipeline", "report", "--lake",
         str(tmp_path / "nothing")],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 1
    assert (
        result.stderr.strip() == f"Error: no log lake at {tmp_path / 'nothing'} (run "
        "`leveret pipeline ingest` first)"
    )


def test_a_minute_of_data_gets_a_time_axis_of_minutes() -> None:
    from leveret.spark.report import time_limits

    one = pd.Series(pd.to_datetime(["2026-11-22 10:00:00"]))
    lo, hi = time_limits(one)
    assert (lo, hi) == (pd.Timestamp("2026-11-22 09:59"), pd.Timestamp("2026-11-22 10:02"))
    day = pd.Series(pd.date_range("2026-11-22 00:00", periods=1440, freq="min"))
    lo, hi = time_limits(day)
    assert hi - lo < pd.Timedelta(hours=27)


def test_the_report_command_shows_its_steps_on_a_terminal_and_only_its_result_into_a_pipe(
    spark: SparkSession, tmp_path: Path
) -> None:
    """Spark's start and the job take 20 s to a minute: on a terminal the report says what
    it is doing meanwhile; into a pipe it prints only its result."""
    import os
    import pty

    lake = _small_lake(spark, tmp_path)
    args = [sys.executable, "-m", "leveret.cli.main", "pipeline", "report", "--lake", str(lake),
            "--master", "local[1]"]  # fmt: skip
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [*args, "--out", str(tmp_path / "tty")],
        stdout=subprocess.PIPE,
        stderr=slave,
        env={**os.environ, "TERM": "xterm", "COLUMNS": "120"},
    )
    os.close(slave)
    seen = bytearray()
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # the other side closed
            break
        if not chunk:
            break
        seen += chunk
    os.close(master)
    assert proc.wait(300) == 0
    text = seen.decode("utf-8", "replace")
    for step in ("starting Spark", "reading the lake", "computing summary", "drawing the charts"):
        assert f"Report: {step}" in text, text[-2000:]
    # Into a pipe (and the command's other format): only the result, on stdout
    out = tmp_path / "pipe"
    piped = subprocess.run(
        [*args, "--out", str(out), "--format", "md"], capture_output=True, text=True, timeout=300
    )
    assert piped.returncode == 0, piped.stderr
    assert "Report:" not in piped.stderr and "\x1b[" not in piped.stderr
    assert piped.stdout.startswith("Report: ")
    assert "301 records, 5 charts" in piped.stdout
    # Spark's start-up chatter stays out of a user's terminal
    for chatter in ("Using incubator modules", "Setting default log level", "sc.setLogLevel"):
        assert chatter not in piped.stderr, piped.stderr
    assert (out / "report.md").exists() and (out / "charts" / "error_rate.png").exists()


def test_the_error_rate_line_has_gaps_where_minutes_have_no_records(
    tmp_path: Path, monkeypatch: object
) -> None:
    """Minutes 12:00 and 12:01, then nothing until 12:05: the chart's line stops at 12:01
    and starts again at 12:05 (it was drawn straight across the empty minutes)."""
    import math

    import matplotlib.axes

    from leveret.spark.report import draw_charts

    drawn: list[tuple[list[object], list[float]]] = []
    plot = matplotlib.axes.Axes.plot

    def spy(self: object, x: object, y: object, *args: object, **kwargs: object) -> object:
        drawn.append((list(x), list(y)))  # type: ignore[call-overload]
        return plot(self, x, y, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(matplotlib.axes.Axes, "plot", spy)  # type: ignore[attr-defined]
    minutes = pd.to_datetime(["2024-05-01 12:00", "2024-05-01 12:01", "2024-05-01 12:05"])
    tables = {
        "severity_per_minute": pd.DataFrame(
            {"minute": minutes, "severity": ["info"] * 3, "count": [4, 2, 5]}
        ),
        "error_rate": pd.DataFrame({"minute": minutes, "error_rate": [0.25, 0.5, 0.2]}),
        "top_apps": pd.DataFrame({"app": [], "count": []}),
        "top_hosts": pd.DataFrame({"host": [], "count": []}),
        "top_facilities": pd.DataFrame({"facility": [], "count": []}),
    }
    charts = draw_charts(tables, tmp_path / "charts")
    assert "error_rate" in charts
    ((x, y),) = drawn
    assert [round(v, 6) if not math.isnan(v) else "gap" for v in y] == [25.0, 50.0, "gap", 20.0]
    assert pd.Timestamp(x[0]) == minutes[0] and pd.Timestamp(x[-1]) == minutes[-1]
