"""Bodies the parsing tests of both paths (``leveret.spark.logparse`` without Spark,
``leveret.spark.records`` in Spark) start from."""

from __future__ import annotations

from leveret.logs.record import Record

# A record with every field set: a ts with microseconds, a severity and facility, an
# exception and extra fields.
GOOD = Record(
    ts="2024-05-01T23:30:00.123456Z", severity="warning", facility="kern", host="h1",
    app="a1", pid=12, message="disk almost full", logger="app.disk", exc="Traceback…",
    extra={"id": 7, "tags": ["x"]},
).to_json()  # fmt: skip
