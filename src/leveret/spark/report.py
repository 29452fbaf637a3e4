"""``leveret pipeline report``: a Spark batch job over the log lake.

It computes, from the committed batches of the lake (the file sink's ``_spark_metadata``):

- ``severity_per_minute``: records per minute and severity;
- ``error_rate``: per minute, the share of records that are ``error`` or ``critical``;
- ``top_apps``, ``top_hosts``, ``top_facilities``: the busiest sources;
- ``top_errors``: the most frequent messages among errors and critical records;
- ``summary``: totals, including records whose body was malformed (``_corrupt``).

Each table is written as Parquet under ``<out>/tables/<name>``; the report itself is
``<out>/report.html`` (or ``report.md``) with PNG charts (matplotlib) under ``<out>/charts``.
"""

from __future__ import annotations

import html
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from leveret.logs.record import ERROR_SEVERITIES, SEVERITIES

if TYPE_CHECKING:
    import pandas as pd
    from pyspark.sql import DataFrame, SparkSession

_COLORS = {
    "debug": "#9e9e9e",
    "info": "#1976d2",
    "warning": "#f9a825",
    "error": "#e53935",
    "critical": "#6a1b9a",
}


class ReportError(RuntimeError):
    """The report cannot be made (no lake, an empty lake, an unwritable output)."""


@dataclass
class Report:
    """What was produced: tables (as pandas frames), chart files and the report file."""

    out: Path
    document: Path
    tables: dict[str, pd.DataFrame] = field(default_factory=dict)
    charts: dict[str, Path] = field(default_factory=dict)


def tables(lake: DataFrame, top: int = 10) -> dict[str, DataFrame]:
    """The report's tables as Spark DataFrames."""
    from pyspark.sql import functions as F

    good = lake.where(F.col("_corrupt").isNull())
    minute = F.date_trunc("minute", F.col("ts")).alias("minute")
    is_error = F.col("severity").isin(*ERROR_SEVERITIES).cast("int")
    out: dict[str, DataFrame] = {
        "severity_per_minute": good.groupBy(minute, "severity")
        .count()
        .orderBy("minute", "severity"),
        "error_rate": good.groupBy(minute)
        .agg(F.count(F.lit(1)).alias("records"), F.sum(is_error).alias("errors"))
        .withColumn("error_rate", F.col("errors") / F.col("records"))
        .orderBy("minute"),
        "top_errors": good.where(F.col("severity").isin(*ERROR_SEVERITIES))
        .groupBy("message")
        .agg(F.count(F.lit(1)).alias("count"), F.max("ts").alias("last_seen"))
        .orderBy(F.desc("count"), "message")
        .limit(top),
        "summary": lake.agg(
            F.count(F.lit(1)).alias("records"),
            F.sum(F.col("_corrupt").isNotNull().cast("int")).alias("corrupt"),
            F.sum(is_error).alias("errors"),
            F.min("ts").alias("first"),
            F.max("ts").alias("last"),
        ),
    }
    for name in ("app", "host", "facility"):
        plural = "facilities" if name == "facility" else name + "s"
        out[f"top_{plural}"] = good.groupBy(name).count().orderBy(F.desc("count"), name).limit(top)
    return out


def make_report(
    spark: SparkSession,
    lake: Path,
    out: Path,
    fmt: str = "html",
    top: int = 10,
    progress: Callable[[str], object] | None = None,
) -> Report:
    """Compute the tables, write them as Parquet, draw the charts, write the report.
    ``progress`` is told each step as it begins (a few words)."""
    step = progress or (lambda text: None)
    if fmt not in ("html", "md"):
        raise ReportError(f"unknown report format {fmt!r}: use html or md")
    if not (lake / "_spark_metadata").is_dir() and not any(lake.glob("date=*")):
        raise ReportError(f"no log lake at {lake} (run `leveret pipeline ingest` first)")
    step("reading the lake")
    df = spark.read.parquet(str(lake))
    out.mkdir(parents=True, exist_ok=True)
    report = Report(out, out / f"report.{fmt}")
    computed = tables(df, top)
    for n, (name, table) in enumerate(computed.items(), 1):
        step(f"computing {name.replace('_', ' ')} ({n}/{len(computed)})")
        table.coalesce(1).write.mode("overwrite").parquet(str(out / "tables" / name))
        report.tables[name] = table.toPandas()
    step("drawing the charts")
    report.charts = draw_charts(report.tables, out / "charts")
    step("writing the report")
    text = render_html(report) if fmt == "html" else render_markdown(report)
    report.document.write_text(text, encoding="utf-8")
    return report


# ----------------------------------------------------------------------------- charts
def time_limits(minutes: Any) -> tuple[Any, Any]:
    """The time axis of a per-minute chart: the data's own range, padded by a minute (and
    5 %), so that a minute of data reads as clock times; matplotlib's default for a single
    point spans years."""
    import pandas as pd

    lo, hi = pd.Timestamp(minutes.min()), pd.Timestamp(minutes.max())
    pad = max((hi - lo) * 0.05, pd.Timedelta(minutes=1))
    return lo - pad, hi + pd.Timedelta(minutes=1) + pad


def with_gaps(minutes: Any, values: Any) -> tuple[list[Any], list[float]]:
    """Points of a per-minute line with a break (NaN) wherever minutes without records
    lie between two points: matplotlib draws no line across a NaN, where it drew one
    straight across the empty minutes."""
    import pandas as pd

    xs: list[Any] = []
    ys: list[float] = []
    previous = None
    for minute, value in sorted(zip(pd.to_datetime(minutes), values, strict=True)):
        if previous is not None and minute - previous > pd.Timedelta(minutes=1):
            xs.append(previous + pd.Timedelta(minutes=1))
            ys.append(float("nan"))
        xs.append(minute)
        ys.append(float(value))
        previous = minute
    return xs, ys


def draw_charts(t: dict[str, pd.DataFrame], where: Path) -> dict[str, Path]:
    """PNG charts of the tables; a chart whose table is empty is not drawn."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    where.mkdir(parents=True, exist_ok=True)
    charts: dict[str, Path] = {}

    def time_axis(ax: Any, minutes: Any) -> None:
        import matplotlib.dates as mdates

        ax.set_xlim(*time_limits(minutes))
        locator = mdates.AutoDateLocator(minticks=3, maxticks=8)  # type: ignore[no-untyped-call]
        ax.xaxis.set_major_locator(locator)
        ax.xaxis.set_major_formatter(mdates.ConciseDateFormatter(locator))  # type: ignore[no-untyped-call]
        ax.set_xlabel("time (UTC)")

    def save(fig: Any, name: str) -> None:
        path = where / f"{name}.png"
        fig.tight_layout()
        fig.savefig(path, dpi=100)
        plt.close(fig)
        charts[name] = path

    spm = t["severity_per_minute"]
    if len(spm):
        pivot = spm.pivot_table(
            index="minute", columns="severity", values="count", aggfunc="sum", fill_value=0
        )
        order = [s for s in SEVERITIES if s in pivot.columns] + [
            s for s in pivot.columns if s not in SEVERITIES
        ]
        fig, ax = plt.subplots(figsize=(9, 4))
        bottom = None
        for sev in order:
            values = pivot[sev]
            ax.bar(
                pivot.index,
                values,
                width=1 / 1440 * 0.9,
                align="edge",
                bottom=bottom,
                label=str(sev),
                color=_COLORS.get(str(sev)),
            )
            bottom = values if bottom is None else bottom + values
        ax.set_title("Records per minute by severity")
        ax.set_ylabel("records")
        ax.legend(loc="upper left", fontsize="small")
        time_axis(ax, pivot.index)
        save(fig, "severity_per_minute")

    er = t["error_rate"]
    if len(er):
        fig, ax = plt.subplots(figsize=(9, 3.5))
        x, y = with_gaps(er["minute"], er["error_rate"] * 100)
        ax.plot(x, y, marker="o", color=_COLORS["error"])
        ax.set_title("Error rate (error + critical) per minute")
        ax.set_ylabel("% of records")
        ax.set_ylim(bottom=0)
        time_axis(ax, er["minute"])
        save(fig, "error_rate")

    for name, col in (("top_apps", "app"), ("top_hosts", "host"), ("top_facilities", "facility")):
        frame = t[name]
        if not len(frame):
            continue
        fig, ax = plt.subplots(figsize=(6, 0.4 * len(frame) + 1.2))
        labels = [str(v) if v else "(none)" for v in frame[col]][::-1]
        ax.barh(labels, list(frame["count"])[::-1], color="#1976d2")
        ax.set_title(name.replace("_", " ").capitalize())
        ax.set_xlabel("records")
        save(fig, name)
    return charts


# ----------------------------------------------------------------------------- rendering
_TITLES = {
    "summary": "Summary",
    "top_errors": "Most frequent error messages",
    "top_apps": "Top apps",
    "top_hosts": "Top hosts",
    "top_facilities": "Top facilities",
    "error_rate": "Error rate per minute",
    "severity_per_minute": "Records per minute by severity",
}
_ORDER = (
    "summary",
    "severity_per_minute",
    "error_rate",
    "top_errors",
    "top_apps",
    "top_hosts",
    "top_facilities",
)
_CHART_OF = {
    "severity_per_minute": "severity_per_minute",
    "error_rate": "error_rate",
    "top_apps": "top_apps",
    "top_hosts": "top_hosts",
    "top_facilities": "top_facilities",
}
_MAX_ROWS = 60


def _cell(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4f}"
    return "" if v is None else str(v)


def render_html(report: Report) -> str:
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'><title>Leveret log report"
        "</title><style>body{font-family:sans-serif;margin:2em}table{border-collapse:"
        "collapse}td,th{border:1px solid #ccc;padding:2px 8px;text-align:left}</style>"
        "</head><body><h1>Leveret log report</h1>"
    ]
    for name in _ORDER:
        frame = report.tables[name]
        parts.append(f"<h2>{html.escape(_TITLES[name])}</h2>")
        chart = report.charts.get(_CHART_OF.get(name, ""))
        if chart is not None:
            rel = chart.relative_to(report.out).as_posix()
            parts.append(f"<p><img src='{html.escape(rel)}' alt='{html.escape(name)}'></p>")
        rows = frame.head(_MAX_ROWS)
        parts.append(
            "<table><tr>"
            + "".join(f"<th>{html.escape(str(c))}</th>" for c in rows.columns)
            + "</tr>"
        )
        for rec in rows.itertuples(index=False):
            parts.append(
                "<tr>" + "".join(f"<td>{html.escape(_cell(v))}</td>" for v in rec) + "</tr>"
            )
        parts.append("</table>")
        if len(frame) > _MAX_ROWS:
            parts.append(f"<p>… {len(frame) - _MAX_ROWS} more rows in tables/{name}</p>")
    parts.append("</body></html>")
    return "\n".join(parts)


def render_markdown(report: Report) -> str:
    lines = ["# Leveret log report", ""]
    for name in _ORDER:
        frame = report.tables[name]
        lines += [f"## {_TITLES[name]}", ""]
        chart = report.charts.get(_CHART_OF.get(name, ""))
        if chart is not None:
            lines += [f"![{name}]({chart.relative_to(report.out).as_posix()})", ""]
        rows = frame.head(_MAX_ROWS)
        cols = [str(c) for c in rows.columns]
        lines.append("| " + " | ".join(cols) + " |")
        lines.append("|" + "---|" * len(cols))
        for rec in rows.itertuples(index=False):
            lines.append(
                "| "
                + " | ".join(_cell(v).replace("|", "\\|").replace("\n", " ") for v in rec)
                + " |"
            )
        if len(frame) > _MAX_ROWS:
            lines.append(f"\n… {len(frame) - _MAX_ROWS} more rows in tables/{name}")
        lines.append("")
    return "\n".join(lines)
