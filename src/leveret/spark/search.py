"""``leveret logs search --engine spark``: the lake search as a Spark SQL query, for a lake on
a cluster's storage. Same filters, same order and the same fields as the DuckDB search
(:mod:`leveret.logs.search`); Spark reads the committed files through the sink's log and
prunes the ``date`` and ``severity`` partitions itself."""

from __future__ import annotations

from datetime import UTC
from typing import TYPE_CHECKING, Any

from leveret.logs.search import COLUMNS, Filters, record_from_row

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


def matching(spark: SparkSession, lake: str, f: Filters) -> DataFrame:
    """The lake's records that ``f`` matches, as a DataFrame."""
    from pyspark.sql import functions as F

    df = spark.read.parquet(lake)
    cond = F.lit(True)
    if f.since is not None:
        cond &= F.col("ts") >= F.lit(f.since.astimezone(UTC).replace(tzinfo=None))
        cond &= F.col("date") >= F.lit(f.since.date())
    if f.until is not None:
        cond &= F.col("ts") < F.lit(f.until.astimezone(UTC).replace(tzinfo=None))
        cond &= F.col("date") <= F.lit(f.until.date())
    for column, values in (
        ("severity", f.severities),
        ("app", f.apps),
        ("host", f.hosts),
        ("facility", f.facilities),
    ):
        if values:
            cond &= F.col(column).isin(*values)
    if f.text:
        needle = f.text.lower()
        cond &= F.coalesce(
            F.lower(F.col("message")).contains(needle)
            | F.lower(F.col("exc")).contains(needle)
            | F.lower(F.col("_corrupt")).contains(needle),
            F.lit(False),
        )
    return df.where(cond)


def search(
    spark: SparkSession,
    lake: str,
    f: Filters,
    limit: int | None = 100,
    offset: int = 0,
    newest_first: bool = True,
) -> list[dict[str, Any]]:
    """The page of matching records, as :meth:`LakeSearch.search` returns them."""
    from pyspark.sql import functions as F

    df = matching(spark, lake, f)
    ts_us = F.unix_micros(F.col("ts")).alias("ts")
    cols = [ts_us if c == "ts" else F.col(c) for c in COLUMNS]
    if newest_first:
        order = [F.col("ts").desc_nulls_last(), F.col("offset").desc()]
    else:
        order = [F.col("ts").asc_nulls_last(), F.col("offset").asc()]
    ordered = df.select(*cols).orderBy(*order)
    if limit is not None:
        ordered = ordered.limit(offset + limit)
    rows = ordered.collect()[offset:]
    return [record_from_row([row[c] for c in COLUMNS]) for row in rows]
