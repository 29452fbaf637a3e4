"""``leveret logs search``: find records in the log lake, printed as ``receive-logs`` prints
them (or as JSON lines).

Registered on the app in ``leveret.cli.main``. DuckDB (the ``search`` extra) reads the
committed files of a local lake; ``--engine spark`` runs the same search as a Spark job.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from leveret.cli.common import Lake, check_lake, fail

app = typer.Typer(no_args_is_help=True, help="The log lake: search the records it keeps.")


def _only(field: str, *short: str) -> Any:
    """A filter on one field of the records: ``--FIELD``, repeatable (any value given)."""
    return typer.Option(
        f"--{field}", *short, help=f"Only this {field} (repeatable).", show_default=False
    )


@app.command()
def search(
    text: Annotated[
        str | None,
        typer.Argument(
            help="Free text: records whose message (or exception text) contains it, case ignored.",
            show_default=False,
        ),
    ] = None,
    lake: Lake = Path("leveret-data/lake"),
    since: Annotated[
        str | None,
        typer.Option(
            "--since",
            help="From this time on: ISO (2026-11-26, 2026-11-26T10:00:00Z; UTC unless an "
            "offset is given) or a duration ago (15m, 2h, 7d).",
            show_default=False,
        ),
    ] = None,
    until: Annotated[
        str | None,
        typer.Option("--until", help="Before this time (same forms).", show_default=False),
    ] = None,
    severity: Annotated[list[str] | None, _only("severity", "-s")] = None,
    app_name: Annotated[list[str] | None, _only("app")] = None,
    host: Annotated[list[str] | None, _only("host")] = None,
    facility: Annotated[list[str] | None, _only("facility", "-f")] = None,
    limit: Annotated[
        int,
        typer.Option("--limit", "-n", min=0, help="The newest N matching records; 0: all."),
    ] = 100,
    reverse: Annotated[
        bool, typer.Option("--reverse", "-r", help="Newest first (default: oldest first).")
    ] = False,
    as_json: Annotated[
        bool, typer.Option("--json", help="One JSON record per line, as receive-logs --to writes.")
    ] = False,
    engine: Annotated[
        str,
        typer.Option(
            "--engine",
            help="duckdb (the lake on this machine) or spark (a Spark job: a lake on a "
            "cluster's storage).",
        ),
    ] = "duckdb",
    master: Annotated[
        str,
        typer.Option(
            "--master", envvar="LEVERET_SPARK_MASTER", help="Spark master (--engine spark)."
        ),
    ] = "local[*]",
) -> None:
    """Search the lake: every filter given must match. Prints the newest --limit records
    that match, oldest first (newest first with --reverse)."""
    from leveret.logs.search import Filters, LakeSearch, SearchError, as_record
    from leveret.logs.search import as_json as json_line
    from leveret.logs.sinks import format_line

    if engine not in ("duckdb", "spark"):
        fail(f"--engine: {engine!r} is not duckdb or spark")
    try:
        filters = Filters.of(
            since, until, severity or (), app_name or (), host or (), facility or (), text or ""
        )
    except SearchError as exc:
        fail(str(exc))
    if engine == "duckdb":
        check_lake(lake)
    wanted = limit or None
    try:
        if engine == "spark":
            records = _spark(master, str(lake), filters, wanted)
        else:
            # the newest N, then printed in the order asked for
            records = (
                LakeSearch(lake.resolve())
                .search(filters, wanted, newest_first=wanted is not None)
                .records
            )
    except SearchError as exc:
        fail(str(exc))
    newest_first_now = wanted is not None
    if newest_first_now != reverse:
        records.reverse()
    out = sys.stdout
    try:
        for doc in records:
            out.write((json_line(doc) if as_json else format_line(as_record(doc))) + "\n")
        out.flush()
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def _spark(master: str, lake: str, filters: object, limit: int | None) -> list[dict[str, object]]:
    try:
        import pyspark  # noqa: F401
    except ImportError:
        fail("--engine spark needs PySpark: pip install 'leveret[spark]'")
    from leveret.logs.search import Filters
    from leveret.spark.search import search as spark_search
    from leveret.spark.session import SessionError, spark_session

    assert isinstance(filters, Filters)
    try:
        spark = spark_session(master, "leveret-search", {}, log_level="OFF")
    except SessionError as exc:
        fail(str(exc))
    try:
        return spark_search(spark, lake, filters, limit, newest_first=limit is not None)
    except Exception as exc:  # Spark's analysis errors: a path without a lake
        from leveret.spark.pipeline import query_error

        fail(f"cannot search the lake at {lake}: {query_error(exc)}")
    finally:
        spark.stop()
