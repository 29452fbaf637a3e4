"""``leveret pipeline ingest`` and ``leveret pipeline report``: the Spark log pipeline.

Registered on the app in ``leveret.cli.main``; PySpark (the ``spark`` extra) is imported
only when a command runs.
"""

from __future__ import annotations

import contextlib
import faulthandler
import logging
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType
from typing import Annotated

import typer

from leveret.cli.common import (
    DUMP_STACKS,
    Lake,
    check_lake,
    fail,
    partitions_option,
    super_stream_option,
)
from leveret.cli.logs import Url, broker_urls

app = typer.Typer(
    no_args_is_help=True,
    help="The Spark log pipeline: ingest the logs stream into a Parquet lake, report on it.",
)

Master = Annotated[
    str,
    typer.Option(
        "--master",
        envvar="LEVERET_SPARK_MASTER",
        help="Spark master URL: local[*], local[2], spark://host:7077, …",
    ),
]
Remote = Annotated[
    str | None,
    typer.Option(
        "--remote",
        envvar="LEVERET_SPARK_REMOTE",
        help="A Spark Connect server (sc://host:15002) to run on instead of --master. Needs "
        "pip install 'pyspark[connect]'; an ingest also needs Leveret in the server's Python.",
    ),
]
Conf = Annotated[
    list[str] | None,
    typer.Option(
        "--conf",
        "-c",
        help="A Spark setting KEY=VALUE, as spark-submit takes it (repeatable), e.g. "
        "spark.executor.memory=2g or spark.pyspark.python=/opt/venv/bin/python. The "
        "executors' Python: this setting, else PYSPARK_PYTHON, else (local masters) this "
        "interpreter.",
    ),
]
LogLevel = Annotated[
    str, typer.Option("--log-level", envvar="LEVERET_LOG_LEVEL", help="Logging level.")
]


def _need_spark() -> None:
    try:
        import pyspark  # noqa: F401
    except ImportError:
        fail("the pipeline needs PySpark: pip install 'leveret[spark]'")


def _logging(level: str) -> None:
    logging.basicConfig(
        level=level.upper(),
        stream=sys.stderr,
        format="%(asctime)s [%(levelname)s] %(name)s: %(message)s",
    )
    logging.getLogger("py4j").setLevel(logging.WARNING)
    if level.upper() != "DEBUG":
        # pika logs every close and a traceback per refused connection; our errors say it
        logging.getLogger("pika").setLevel(logging.CRITICAL)


def _conf(pairs: list[str] | None) -> dict[str, str]:
    from leveret.spark.session import parse_conf

    try:
        return parse_conf(pairs or [])
    except ValueError as exc:
        fail(str(exc))


def _spark_level(level: str) -> str:
    """The JVM's log level: Spark's own warnings and stack traces only with ``debug``;
    otherwise a failure is the command's one plain line (its cause included)."""
    return "WARN" if level.upper() == "DEBUG" else "OFF"


def _stop_on_signals(stop: threading.Event | None = None) -> threading.Event:
    """SIGTERM or Ctrl-C sets the event (the ingest then stops its query and returns, and
    does not restart it); the same signal again interrupts at once. (Ctrl-C to
    ``leveret up``'s process group and then ``up``'s own SIGTERM are one request to stop.)

    Only the first signal sets the event: Event.set holds the event's lock, and a second
    signal that came while the main thread was inside it would wait for that lock on the
    same thread forever (seen under load: the ingest then had to be killed)."""
    stop = stop or threading.Event()
    event = stop
    seen: set[int] = set()

    def handler(signum: int, frame: FrameType | None) -> None:
        if event.is_set() and signum in seen:
            raise KeyboardInterrupt
        first = not seen
        seen.add(signum)
        if first:
            event.set()

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)
    return stop


@app.command()
def ingest(
    url: Url = None,
    stream: Annotated[
        str | None,
        typer.Option(
            "--stream",
            envvar="LEVERET_LOG_STREAM",
            help="The stream queue to read (declared and bound to the exchange "
            "if missing). Exactly-once into the lake.",
        ),
    ] = "logs",
    queue: Annotated[
        str | None,
        typer.Option(
            "--queue",
            help="Read a classic queue instead (at-least-once; acks after each batch commits).",
        ),
    ] = None,
    super_stream: Annotated[
        str | None,
        super_stream_option(
            "Read every partition of this super stream instead of --stream (made with "
            "--partitions partitions if missing). Exactly-once per partition."
        ),
    ] = None,
    partitions: Annotated[
        int,
        partitions_option(
            "The partitions a missing --super-stream is made with (NAME-0, NAME-1, ... "
            "bound with keys 0, 1, ...)."
        ),
    ] = 3,
    management_url: Annotated[
        str | None,
        typer.Option(
            "--management-url",
            envvar="LEVERET_MANAGEMENT_URL",
            help="With --super-stream, where no stream port answers: the management API its "
            "partitions are read from [default: http://<the broker's host>:15672].",
            show_default=False,
        ),
    ] = None,
    exchange: Annotated[
        str,
        typer.Option(
            "--exchange",
            "-x",
            envvar="LEVERET_LOG_EXCHANGE",
            help="The exchange the stream is bound to ('' for none).",
        ),
    ] = "logs",
    lake: Lake = Path("leveret-data/lake"),
    checkpoint: Annotated[
        Path,
        typer.Option(
            "--checkpoint",
            envvar="LEVERET_CHECKPOINT",
            help="Checkpoint directory of the query (offsets and commits).",
        ),
    ] = Path("leveret-data/checkpoints/ingest"),
    master: Master = "local[*]",
    trigger: Annotated[
        str,
        typer.Option(
            "--trigger",
            help="availableNow (ingest what is there, then exit), "
            "once, or an interval such as 1s or 1 minute.",
        ),
    ] = "1s",
    max_records_per_trigger: Annotated[
        int | None,
        typer.Option("--max-records-per-trigger", min=1, help="Cap on records per batch."),
    ] = None,
    starting_offsets: Annotated[
        str,
        typer.Option(
            "--starting-offsets",
            help="Where a new query starts: earliest, latest, an offset or a time.",
        ),
    ] = "earliest",
    stream_replicas: Annotated[
        int | None,
        typer.Option(
            "--stream-replicas",
            min=1,
            help="On a cluster: the nodes that keep a copy of the stream when it is "
            "declared (x-initial-cluster-size).",
        ),
    ] = None,
    protocol: Annotated[
        str,
        typer.Option(
            "--protocol",
            help="How the executors read the stream: amqp (AMQP 0-9-1 consumers), stream "
            "(RabbitMQ's stream protocol on --stream-port, whole chunks: faster) or auto "
            "(stream when that port answers and holds the stream, else amqp).",
        ),
    ] = "auto",
    stream_port: Annotated[
        int | None,
        typer.Option(
            "--stream-port",
            min=1,
            help="The broker's stream-protocol port [default: 5552, 5551 for amqps://].",
        ),
    ] = None,
    max_restarts: Annotated[
        int,
        typer.Option(
            "--max-restarts",
            min=0,
            help="Restart a failed query from its checkpoint this many times in a row.",
        ),
    ] = 5,
    alerts_config: Annotated[
        Path | None,
        typer.Option(
            "--alerts-config",
            envvar="LEVERET_CONFIG",
            help="A configuration file whose [[lake.alerts]] rules are evaluated on each "
            "batch (alerts go to the 'alerts' exchange and into the lake).",
            show_default=False,
        ),
    ] = None,
    remote: Remote = None,
    conf: Conf = None,
    log_level: LogLevel = "info",
) -> None:
    """Stream the log records of the logs stream (or of every partition of a super stream)
    into a Parquet lake partitioned by date and severity."""
    _need_spark()
    _logging(log_level)
    from leveret.spark.client import AmqpSourceError
    from leveret.spark.pipeline import IngestConfig, parse_trigger, run_ingest
    from leveret.spark.session import SessionError

    try:
        parse_trigger(trigger)
    except ValueError as exc:
        fail(str(exc))
    if protocol not in ("amqp", "stream", "auto"):
        fail(f"--protocol: {protocol!r} is not amqp, stream or auto")
    if super_stream and queue:
        fail("--super-stream and --queue: give one source")
    settings = _conf(conf)
    urls = broker_urls(url)
    from leveret.logs.lakeconfig import AlertRule, LakeConfigError
    from leveret.logs.lakeconfig import load as load_lake

    rules: tuple[AlertRule, ...] = ()
    if alerts_config is not None:
        try:
            rules = load_lake(alerts_config).alerts
        except LakeConfigError as exc:
            fail(str(exc))
    cfg = IngestConfig(
        url=",".join(urls),
        lake=lake.resolve(),
        checkpoint=checkpoint.resolve(),
        stream=None if queue or super_stream else stream,
        queue=queue,
        super_stream=super_stream,
        partitions=partitions,
        management_url=management_url,
        exchange=exchange,
        trigger=trigger,
        max_records_per_trigger=max_records_per_trigger,
        starting_offsets=starting_offsets,
        stream_replicas=stream_replicas,
        protocol=protocol,
        stream_port=stream_port,
        alerts=rules,
    )
    stop = _stop_on_signals()
    if DUMP_STACKS is not None:
        faulthandler.register(DUMP_STACKS, all_threads=True)
    try:
        restarts = run_ingest(
            cfg,
            master=master,
            max_restarts=max_restarts,
            log_level=_spark_level(log_level),
            conf=settings,
            remote=remote,
            stop=stop,
            # PySpark's context replaces the SIGINT handler with one that raises
            # KeyboardInterrupt into the py4j call the main thread waits in: Ctrl-C then
            # failed the query, which was restarted against a broker stopping with it
            on_session=lambda: _stop_on_signals(stop),
        )
    except (AmqpSourceError, SessionError) as exc:
        fail(str(exc))
    except KeyboardInterrupt:
        return
    if restarts:
        logging.getLogger(__name__).info("ingest finished after %d restart(s)", restarts)


@contextlib.contextmanager
def _progress(first: str) -> Iterator[Callable[[str], object]]:
    """A spinner with the current step on stderr when it is a terminal; else nothing."""
    if not sys.stderr.isatty():
        yield lambda text: None
        return
    from rich.console import Console

    started = time.monotonic()
    console = Console(stderr=True)
    with console.status(f"Report: {first}") as status:

        def step(text: str) -> None:
            status.update(f"Report: {text} ({time.monotonic() - started:.0f} s)")

        yield step


@app.command()
def report(
    lake: Lake = Path("leveret-data/lake"),
    out: Annotated[
        Path, typer.Option("--out", "-o", help="Where the report, charts and tables go.")
    ] = Path("leveret-data/report"),
    fmt: Annotated[str, typer.Option("--format", help="Report format: html or md.")] = "html",
    top: Annotated[int, typer.Option("--top", min=1, help="Rows of the top-N tables.")] = 10,
    master: Master = "local[*]",
    remote: Remote = None,
    conf: Conf = None,
    log_level: LogLevel = "warning",
) -> None:
    """A Spark batch job over the lake: counts by severity per minute, error rate, top
    apps/hosts/facilities and error messages, as a report with PNG charts and Parquet
    tables."""
    _need_spark()
    _logging(log_level)
    from leveret.spark.report import ReportError, make_report
    from leveret.spark.session import SessionError, spark_session

    if fmt not in ("html", "md"):
        fail(f"unknown report format {fmt!r}: use html or md")
    check_lake(lake)
    settings = _conf(conf)
    # on a terminal, what it is doing meanwhile (Spark's start and the job take 20 s to a
    # minute); into a pipe or a file, nothing but the result
    with _progress("starting Spark") as step:
        try:
            spark = spark_session(
                master, "leveret-report", settings, log_level=_spark_level(log_level), remote=remote
            )
        except SessionError as exc:
            fail(str(exc))
        try:
            result = make_report(spark, lake.resolve(), out.resolve(), fmt, top, progress=step)
        except ReportError as exc:
            fail(str(exc))
        finally:
            step("stopping Spark")
            spark.stop()
    summary = result.tables["summary"]
    records = int(summary["records"].iloc[0]) if len(summary) else 0
    print(f"Report: {result.document} ({records} records, {len(result.charts)} charts)")


def _seconds(text: str, name: str) -> float:
    import re

    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*", text.lower())
    if m is None:
        fail(f"{name}: {text!r} is not a duration (e.g. 30s, 10m, 1h)")
    scale = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400}[m.group(2) or "s"]
    return float(m.group(1)) * scale


@app.command()
def compact(
    lake: Lake = Path("leveret-data/lake"),
    retention: Annotated[
        str | None,
        typer.Option(
            "--retention",
            envvar="LEVERET_RETENTION",
            help="Also drop the date partitions older than this (30d, 4w).",
            show_default=False,
        ),
    ] = None,
    target_size: Annotated[
        str,
        typer.Option("--target-size", help="Size of the files a compaction writes (128M)."),
    ] = "128M",
    grace: Annotated[
        str,
        typer.Option(
            "--grace",
            help="How long replaced files stay on the disk for readers that listed them "
            "before the commit (a directory lister sees their records twice meanwhile).",
        ),
    ] = "30s",
    every: Annotated[
        str | None,
        typer.Option(
            "--every",
            help="Run again at this interval until stopped (leveret up runs it so).",
            show_default=False,
        ),
    ] = None,
    log_level: LogLevel = "info",
) -> None:
    """Rewrite each partition's small files into large ones and drop expired partitions,
    committed through the sink's log while the ingest runs: Spark, the search and the
    report see every record once throughout (no Spark needed)."""
    _logging(log_level)
    from leveret.cli.logs import _size
    from leveret.logs import compaction

    try:
        days = compaction.parse_retention(retention) if retention else None
        target = _size(target_size)
    except (ValueError, typer.BadParameter) as exc:
        fail(str(exc))
    wait = _seconds(grace, "--grace")
    interval = _seconds(every, "--every") if every else None
    if interval is None:
        check_lake(lake)
    stop = _stop_on_signals()
    root = lake.resolve()
    say = logging.getLogger(__name__)
    if interval is not None:
        keep = f", dropping the date partitions older than {days} days" if days else ""
        say.info("compacting %s every %s%s", root, _duration(interval), keep)
    while True:
        try:
            dropped = compaction.drop_expired(root, days) if days else None
            change = compaction.compact(root, target=target)
        except compaction.CompactionError as exc:
            if interval is None:
                fail(str(exc))
            say.warning("%s (next run in %s)", exc, _duration(interval))
        except OSError as exc:
            fail(f"cannot compact {lake}: {exc.strerror or exc}")
        else:
            if dropped and dropped.partitions:
                print(
                    f"Retention: dropped {len(dropped.partitions)} partition(s) "
                    f"({len(dropped.removed)} files) older than {days} days",
                    flush=True,
                )
            if interval is None or change.partitions:  # --every: only what it did
                print(
                    f"Compacted {len(change.partitions)} partition(s): {len(change.removed)} "
                    f"files into {len(change.added)} ({change.records} records)",
                    flush=True,
                )
            if change.waiting:
                (say.debug if interval else say.info)(
                    "%d small file(s) of the batches since the sink's last compacted log are "
                    "compacted once its next one (batch %d) names them",
                    change.waiting, change.next_log_compaction,
                )  # fmt: skip
        # replaced files go once readers that listed them are done (and the sink is not
        # writing a compacted log, which may name them again: a one-off run waits for it)
        if stop.wait(wait):
            break
        compaction.finish_removals(root, grace=wait, wait=5.0 if interval else 60.0)
        if interval is None or stop.wait(max(0.0, interval - wait)):
            break
    compaction.finish_removals(root, grace=wait)


def _duration(seconds: float) -> str:
    """``--every``'s interval as people say it: 30 s, 10 min, 1 h."""
    if seconds >= 3600 and seconds % 3600 == 0:
        return f"{seconds / 3600:g} h"
    if seconds >= 60 and seconds % 60 == 0:
        return f"{seconds / 60:g} min"
    return f"{seconds:g} s"
