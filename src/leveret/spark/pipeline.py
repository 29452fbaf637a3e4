"""The log lake ingest: Structured Streaming from the logs stream into Parquet.

``leveret pipeline ingest`` (see :func:`run_ingest`) makes sure the stream exists and is
bound to the logs exchange, then runs one query::

    format("amqp") stream, log records parsed by the executors  ->  Parquet, partitioned
    by date and severity

The Parquet file sink commits each micro-batch in its ``_spark_metadata`` log, and the
source's offsets are replayable, so a batch is in the lake exactly once however often the
driver dies; readers of the lake (``spark.read.parquet(lake)``) see committed batches only.
With ``--queue`` the source is a classic queue instead, at-least-once (see
:mod:`leveret.spark.queue`). With ``--super-stream`` it is every partition of a super
stream, exactly-once per partition (see :mod:`leveret.spark.superstream`); the super stream
is made first, if it does not exist, as ``rabbitmq-streams add_super_stream`` makes one.
"""

from __future__ import annotations

import contextlib
import logging
import re
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from leveret.logs.alerts import AmqpAlerts, Evaluator
from leveret.logs.lakeconfig import AlertRule
from leveret.logs.superstream import DEFAULT_PARTITIONS
from leveret.spark.client import AmqpSourceError, close_quietly, connect, connected
from leveret.spark.keeper import LakeKeeper
from leveret.spark.session import spark_session

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming.query import StreamingQuery

log = logging.getLogger(__name__)

DEFAULT_STREAM = "logs"
DEFAULT_EXCHANGE = "logs"
LAKE_PARTITIONS = ("date", "severity")
#: Routing keys a stream is bound with so that it receives everything sent to the logs
#: exchange whatever its type: ``#`` for topic (and fanout, which ignores keys), the
#: severities for direct. A queue gets a message once however many bindings match.
BIND_KEYS = ("#", "debug", "info", "warning", "error", "critical")
#: Parquet settings of the lake's files: no dictionary for the columns whose values are all
#: different (the writer would build one and then give it up at every page), which cut the
#: write's CPU by ~2.5 µs a record for ~5 % larger files (benchmarks/README.md).
LAKE_WRITE_OPTIONS = {
    f"parquet.enable.dictionary#{column}": "false"
    for column in ("offset", "message_id", "ts", "message")
}


def ensure_log_stream(
    url: str,
    stream: str = DEFAULT_STREAM,
    exchange: str = DEFAULT_EXCHANGE,
    replicas: int | None = None,
) -> None:
    """Declare the stream queue (durable) and bind it to ``exchange``. An exchange that
    does not exist yet is declared as ``leveret emit-log`` declares it (fanout, transient);
    one that exists keeps its type. ``replicas``: on a cluster, how many nodes keep a copy
    of a new stream (``x-initial-cluster-size``). AmqpSourceError when the broker refuses."""
    import pika.exceptions

    arguments: dict[str, object] = {"x-queue-type": "stream"}
    if replicas is not None:
        arguments["x-initial-cluster-size"] = replicas
    with connected(url, f"preparing stream {stream!r}") as conn:
        ch = conn.channel()
        try:
            ch.queue_declare(stream, durable=True, arguments=arguments)
        except pika.exceptions.ChannelClosedByBroker as exc:
            raise AmqpSourceError(f"cannot declare stream {stream!r}: {exc.reply_text}") from None
        if exchange:
            try:
                ch.exchange_declare(exchange, passive=True)
            except pika.exceptions.ChannelClosedByBroker as exc:
                if exc.reply_code != 404:
                    raise AmqpSourceError(f"exchange {exchange!r}: {exc.reply_text}") from None
                ch = conn.channel()
                ch.exchange_declare(exchange, "fanout")
            for key in BIND_KEYS:
                ch.queue_bind(stream, exchange, key)


def ensure_super_stream(cfg: IngestConfig) -> str:
    """Make the ingest's super stream if it does not exist (and ``cfg.declare``), find its
    partitions as the query will, and return the one the lake's alert records go to (the
    partition their app hashes to, as a publisher's records do). AmqpSourceError when the
    broker refuses, or the super stream cannot be found."""
    from leveret.logs.alerts import ALERT_APP
    from leveret.logs.amqp import LogsError
    from leveret.logs.superstream import Partition, declare_super_stream, pick
    from leveret.spark.options import ReadOptions
    from leveret.spark.superstream import discover

    assert cfg.super_stream is not None
    if cfg.declare:
        arguments = {}
        if cfg.stream_replicas is not None:
            arguments["x-initial-cluster-size"] = cfg.stream_replicas
        try:
            if declare_super_stream(cfg.url, cfg.super_stream, cfg.partitions,
                                    arguments=arguments):  # fmt: skip
                log.info("made super stream %r with %d partitions", cfg.super_stream,
                         cfg.partitions)  # fmt: skip
        except LogsError as exc:
            raise AmqpSourceError(str(exc)) from None
    options = {"url": cfg.url, "superStream": cfg.super_stream, "protocol": cfg.protocol}
    if cfg.stream_port is not None:
        options["streamPort"] = str(cfg.stream_port)
    if cfg.management_url:
        options["managementUrl"] = cfg.management_url
    names = discover(ReadOptions.parse(options))
    return pick([Partition(n) for n in names], ALERT_APP).stream


def parse_trigger(text: str) -> dict[str, Any]:
    """``availableNow``, ``once`` or a processing-time interval (``1s``, ``500ms``,
    ``10 seconds``) as keyword arguments of ``DataStreamWriter.trigger``."""
    t = text.strip()
    if t.lower() in ("availablenow", "available-now", "available_now"):
        return {"availableNow": True}
    if t.lower() == "once":
        return {"once": True}
    m = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([a-z]+)", t, re.I)
    scale = _UNITS.get(m.group(2).lower()) if m else None
    if m is None or scale is None:
        raise ValueError(
            f"invalid trigger {text!r}: use availableNow, once, or an interval such as 1s, "
            "500ms or 1 minute"
        )
    return {"processingTime": f"{round(float(m.group(1)) * scale)} milliseconds"}


_UNITS = {
    **dict.fromkeys(("ms", "millisecond", "milliseconds"), 1),
    **dict.fromkeys(("s", "sec", "secs", "second", "seconds"), 1000),
    **dict.fromkeys(("m", "min", "mins", "minute", "minutes"), 60_000),
}


@dataclass(frozen=True, slots=True)
class IngestConfig:
    """What ``leveret pipeline ingest`` runs."""

    url: str
    lake: Path
    checkpoint: Path
    stream: str | None = DEFAULT_STREAM
    queue: str | None = None
    exchange: str = DEFAULT_EXCHANGE
    trigger: str = "1s"
    max_records_per_trigger: int | None = None
    starting_offsets: str = "earliest"
    declare: bool = True
    stream_replicas: int | None = None
    #: how executors read the stream: amqp, stream (RabbitMQ's stream protocol on
    #: ``stream_port``) or auto (stream when that port answers and holds the stream)
    protocol: str = "auto"
    stream_port: int | None = None  # None: 5552, or 5551 for amqps:// URLs
    #: alert rules evaluated on each committed batch (see :mod:`leveret.logs.alerts`)
    alerts: tuple[AlertRule, ...] = ()
    #: a super stream to read instead of ``stream``: every partition
    super_stream: str | None = None
    #: the partitions a super stream is made with when it does not exist
    partitions: int = DEFAULT_PARTITIONS
    #: where a super stream's partitions are read from when no stream port tells them
    management_url: str | None = None


def start_ingest(spark: SparkSession, cfg: IngestConfig) -> StreamingQuery:
    """Start the ingest query (the stream must exist)."""
    # the executors parse the records as they read: Spark gets typed Arrow batches
    reader = spark.readStream.format("amqp").option("url", cfg.url).option("records", "log")
    if cfg.super_stream:
        reader = reader.option("superStream", cfg.super_stream)
        reader = reader.option("startingOffsets", cfg.starting_offsets)
        reader = reader.option("protocol", cfg.protocol)
        if cfg.stream_port is not None:
            reader = reader.option("streamPort", str(cfg.stream_port))
        if cfg.management_url:
            reader = reader.option("managementUrl", cfg.management_url)
    elif cfg.queue:
        reader = (
            reader.option("queue", cfg.queue)
            .option("walLocation", str(cfg.checkpoint / "amqp-wal"))
            .option("checkpointLocation", str(cfg.checkpoint))
        )
    else:
        assert cfg.stream is not None
        reader = reader.option("stream", cfg.stream).option("startingOffsets", cfg.starting_offsets)
        reader = reader.option("protocol", cfg.protocol)
        if cfg.stream_port is not None:
            reader = reader.option("streamPort", str(cfg.stream_port))
    if cfg.max_records_per_trigger:
        reader = reader.option("maxRecordsPerTrigger", str(cfg.max_records_per_trigger))
    cores = _cores(spark)
    if cores:  # one offset range per core
        reader = reader.option("minPartitions", str(cores))
    writer = reader.load().writeStream.format("parquet")
    for key, value in LAKE_WRITE_OPTIONS.items():
        writer = writer.option(key, value)
    return (
        writer.queryName("leveret-ingest")
        .option("path", str(cfg.lake))
        .option("checkpointLocation", str(cfg.checkpoint))
        .partitionBy(*LAKE_PARTITIONS)
        .trigger(**parse_trigger(cfg.trigger))
        .start()
    )


def _cores(spark: SparkSession) -> int | None:
    """The session's default parallelism (its cores), None when it cannot tell (Spark
    Connect has no SparkContext)."""
    try:
        return int(spark.sparkContext.defaultParallelism)
    except Exception:
        return None


#: Causes a person can act on, found anywhere in a failed query's text (Spark wraps them in
#: TASK_WRITE_FAILED and the like).
_IO_CAUSE = re.compile(
    r"(No space left on device|Disk quota exceeded|Read-only file system|Permission denied"
    r"|Too many open files)"
)
_WRITING_TO = re.compile(r"writing rows to (?:file:)?(\S+?)\.?(?:\s|$)")


def query_error(exc: BaseException, places: Sequence[Path] = ()) -> str:
    """The useful line of a failed query: our own error's text when it is in there, else
    an I/O cause (a full disk) with the path being written (or, when the error names no
    file being written, the first of ``places``, the query's output directories, that it
    names), else the first line."""
    text = str(exc)
    m = re.search(r"AmqpSourceError: (.*)", text)
    if m:
        return m.group(1).strip()
    at = text.rfind("Traceback (most recent call last)")
    if at >= 0:
        # a Python process's traceback: the exception line that ends it says what happened
        m = re.search(r"^([A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt)\b.*)$", text[at:], re.M)
        if m:
            return m.group(1).strip()
    causes = _java_causes(exc)
    cause = _IO_CAUSE.search(text) or _IO_CAUSE.search(causes)
    if cause:
        where = _WRITING_TO.search(text)
        if where:
            return f"cannot write {where.group(1)}: {cause.group(1)}"
        # a failure outside the tasks' writers (the sink's metadata log, a commit) names
        # the directory it was writing in, not "writing rows to"
        named = [str(p) for p in places if str(p) in text or str(p) in causes]
        return f"cannot write {named[0]}: {cause.group(1)}" if named else cause.group(1)
    for line in text.splitlines():
        if line.strip():
            return line.strip()
    return type(exc).__name__


def _java_causes(exc: BaseException) -> str:
    """The messages of the Java exception chain behind a PySpark error, if it has one."""
    messages: list[str] = []
    with contextlib.suppress(Exception):
        cause = exc._origin  # type: ignore[attr-defined]  # py4j's Throwable
        while cause is not None and len(messages) < 20:
            messages.append(str(cause.toString()))
            cause = cause.getCause()
    return "\n".join(messages)


#: The ingest's log line once its query runs (``leveret up`` waits for it to say "running").
QUERY_STARTED = "ingest query started"
# how long the main thread waits in Spark at a time (whole seconds: PySpark's type) before it
# looks at its signals
AWAIT_SLICE = 1


def run_ingest(
    cfg: IngestConfig,
    master: str = "local[*]",
    max_restarts: int = 5,
    log_level: str = "WARN",
    conf: Mapping[str, str] | None = None,
    remote: str | None = None,
    stop: threading.Event | None = None,
    on_session: Callable[[], object] | None = None,
) -> int:
    """Run the ingest until it ends (availableNow) or ``stop`` is set; a query that fails is
    restarted from its checkpoint (a broker restart, a lost connection) up to
    ``max_restarts`` times in a row. ``conf``: Spark settings (spark-submit's ``--conf``);
    ``remote``: a Spark Connect server (``sc://host:port``) instead of ``master``.
    Returns the number of restarts.

    ``stop`` is how a signal ends the ingest cleanly: a thread stops the query when it is
    set (an exception raised into the py4j call the main thread waits in would break the
    connection to the JVM instead). ``on_session`` is called once the Spark session exists
    (PySpark's context installs a SIGINT handler of its own then, which raises
    KeyboardInterrupt in whatever the main thread waits in: the CLI puts its own back)."""
    alerts_to = AmqpAlerts(cfg.url, cfg.exchange, cfg.stream)
    if cfg.super_stream:
        alerts_to = AmqpAlerts(cfg.url, "", ensure_super_stream(cfg))
    elif cfg.declare:
        if cfg.queue:
            conn = connect(cfg.url)
            close_quietly(conn)
        else:
            assert cfg.stream is not None
            ensure_log_stream(cfg.url, cfg.stream, cfg.exchange, cfg.stream_replicas)
    cfg.lake.mkdir(parents=True, exist_ok=True)
    cfg.checkpoint.mkdir(parents=True, exist_ok=True)
    spark = spark_session(master, "leveret-ingest", conf, log_level=log_level, remote=remote)
    if on_session is not None:
        on_session()
    restarts = 0
    failures = 0
    stop = stop or threading.Event()
    # removes what failed task attempts left behind: at each start and after each batch
    keeper = LakeKeeper(
        cfg.lake,
        alerts=Evaluator(cfg.alerts) if cfg.alerts else None,
        publish=alerts_to.publish,
    )
    keeper.start()
    current: list[StreamingQuery] = []

    def stopper() -> None:
        stop.wait()
        log.info("stopping the ingest query")
        for q in current:
            with contextlib.suppress(Exception):
                q.stop()

    threading.Thread(target=stopper, name="leveret-ingest-stop", daemon=True).start()
    try:
        while not stop.is_set():
            keeper.sweep(everything=True)  # no query runs: nothing left can be committed
            query = start_ingest(spark, cfg)
            current[:] = [query]
            if stop.is_set():  # set while the query was starting
                query.stop()
            log.info(
                "%s: %s -> %s (checkpoint %s)",
                QUERY_STARTED,
                cfg.super_stream or cfg.stream or cfg.queue,
                cfg.lake,
                cfg.checkpoint,
            )
            try:
                # in short waits, not one: a signal the kernel handed to another thread
                # runs its Python handler only once the main thread is back in Python, and a
                # py4j call blocked in recv() is not (Ctrl-C then did nothing until up
                # killed the ingest, in about one stop in three beside other Spark jobs)
                while not query.awaitTermination(AWAIT_SLICE):
                    pass
                return restarts
            except Exception as exc:
                if stop.is_set():
                    return restarts
                failures += 1
                reason = query_error(exc, (cfg.lake, cfg.checkpoint))
                progressed = bool(query.recentProgress)
                if progressed:
                    failures = 1
                if failures > max_restarts:
                    raise AmqpSourceError(f"ingest failed: {reason}") from None
                log.warning("ingest query failed (%s); restarting from the checkpoint", reason)
                restarts += 1
                stop.wait(min(2.0 * failures, 10.0))
        return restarts
    finally:
        stop.set()
        stopped = False
        with contextlib.suppress(Exception):  # a JVM already gone has nothing to stop
            for q in spark.streams.active:
                q.stop()
            stopped = True
        keeper.stop()
        # a stopped query commits nothing more: what its last batch had written goes
        keeper.sweep(everything=stopped)
