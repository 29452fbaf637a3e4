"""``leveret up``: the whole stack on embedded defaults, from one command.

It runs, as child processes of its own: the broker (with the management API, the live
dashboard and Prometheus metrics), the Spark ingest of the ``logs`` stream into the
Parquet lake (``local[*]``), and, in the foreground, a terminal receiver of the tutorial's
``logs`` exchange. Ctrl-C stops them all."""

from __future__ import annotations

import contextlib
import inspect
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Annotated

import typer
from rich.console import Console

from leveret.cli.common import (
    DUMP_STACKS,
    fail,
    interrupt_on_sigterm,
    partitions_option,
    setting_parameter,
    super_stream_option,
)
from leveret.logs.record import BROKER_EVENT_EXCHANGE, BROKER_LOG_EXCHANGE, HOST
from leveret.logs.superstream import Partition, pick
from leveret.server import defaults

# soft_wrap: lines are never broken by rich (at 80 columns when the output is not a
# terminal); a terminal wraps them itself, so the commands printed stay copyable whole
console = Console(stderr=True, soft_wrap=True)


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "leveret.cli.main", *args]


# the broker's ports: up's options of leveret server's names, passed on to it as given
PORTS = (
    (
        "--amqp-port",
        f"AMQP port (default {defaults.AMQP_PORT}, or the config file's; 0 picks a free port).",
    ),
    (
        "--http-port",
        f"Dashboard and management API port (default {defaults.HTTP_PORT}; 0 picks a free port).",
    ),
    (
        "--prometheus-port",
        f"Prometheus metrics port (default {defaults.PROMETHEUS_PORT}; 0 picks a free port).",
    ),
    (
        "--stream-port",
        "RabbitMQ's stream protocol port, which the lake ingest reads from "
        f"(default {defaults.STREAM_PORT}; 0 picks a free port).",
    ),
    (
        "--syslog-port",
        "Syslog port, UDP and TCP, into the logs exchange (default 1514 here, unless the "
        "config file or LEVERET_SYSLOG_PORT says otherwise; 0 picks a free port).",
    ),
)
#: where ``up`` takes syslog when nothing else says (1514: 514 needs root)
SYSLOG_PORT = 1514


def _syslog_port_set(config: Path | None) -> bool:
    """Whether LEVERET_SYSLOG_PORT or the config file chooses the syslog port (a port, or
    off): then the broker reads it, and up does not pass its own default."""
    if os.environ.get("LEVERET_SYSLOG_PORT", "") != "":
        return True
    if config is None:
        return False
    import tomllib

    try:
        data = tomllib.loads(config.read_text())
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return False  # the broker itself says what is wrong with the file, in one line
    server = data.get("server")
    return any(
        "syslog_port" in t or "syslog-port" in t
        for t in (data, server if isinstance(server, dict) else {})
    )


def _start_server(
    data_dir: Path,
    asked: dict[str, int | str | None],
    log: IO[str],
    config: Path | None = None,
    settings: list[str] | None = None,
    env: dict[str, str] | None = None,
) -> tuple[subprocess.Popen[str], dict[str, str]]:
    """Start the broker with the ports ``asked`` (by flag); return it and the ports it
    listens on (asked-for 0 is filled in). A port not given is the config file's, else the
    server's default."""
    log.flush()
    start = log.seek(0, os.SEEK_END)
    args = ["server", "--data-dir", str(data_dir), "--log-exchange"]
    for flag, port in asked.items():
        if port is not None:
            args += [flag, str(port)]
    if config is not None:
        args += ["--config", str(config)]
    args += settings or []
    proc = subprocess.Popen(
        _cli(*args),
        stdout=subprocess.PIPE,
        stderr=log,
        text=True,
        # a process group of its own: a Ctrl-C to the terminal's group reaches the ingest
        # and the receiver, and up stops the broker after them (a broker stopped with them
        # left an ingest mid-batch retrying it); it still ends if up dies (see _bound_to_parent)
        process_group=0,
        preexec_fn=_bound_to_parent,
        env=None if env is None else {**os.environ, **env},
    )
    assert proc.stdout is not None
    ports: dict[str, str] = {}
    for line in proc.stdout:
        line = line.strip()
        console.print(f"[dim]broker:[/dim] {line}")
        bound = line.rsplit(":", 1)[-1].split("/")[0]
        if line.startswith("Management API listening"):
            ports["http"] = bound
        elif line.startswith("Prometheus metrics listening"):
            ports["prometheus"] = bound
        elif line.startswith("Stream protocol listening"):
            ports["stream"] = bound
        elif line.startswith("Syslog (UDP and TCP) listening"):
            ports["syslog"] = bound
        elif line.startswith("Server startup complete"):
            ports["amqp"] = bound
            return proc, ports
    proc.wait()
    raise RuntimeError(_why_not_started(log, start) + " (see " + log.name + ")")


def _bound_to_parent() -> None:
    """In the child, before exec: SIGTERM when ``up`` dies, however it dies (Linux's
    PR_SET_PDEATHSIG), since a Ctrl-C to ``up``'s group no longer reaches it."""
    if sys.platform != "linux":
        return
    import ctypes

    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def _why_not_started(log: IO[str], start: int) -> str:
    """The broker's own one-line reason (its ``Error: ...`` line in the log it wrote
    since ``start``): a port taken, the data directory in use."""
    log.flush()
    try:
        with open(log.name, encoding="utf-8", errors="replace") as f:
            f.seek(start)
            written = f.read()
    except OSError:
        written = ""
    reasons = [line[7:] for line in written.splitlines() if line.startswith("Error: ")]
    return reasons[-1] if reasons else "the broker did not start"


# The broker's own log lines that go to the lake (amq.rabbitmq.log's routing key is the
# level): warnings and worse, not every connection's info lines.
BROKER_LOG_LEVELS = ("warning", "error", "critical")


EVENT_EXCHANGE_PLUGIN = "rabbitmq_event_exchange"
# The broker's events that go to the lake: refused logins, alarms, and what was made,
# changed or deleted, and by whom. Not the churn of connections, channels, consumers and
# accepted logins: the ingest's own readers make those with every micro-batch, and bound,
# each batch would bring the next one, forever (measured: a micro-batch a second with
# nothing emitted).
BROKER_EVENT_KEYS = (
    "user.authentication.failure",
    "user.created",
    "user.deleted",
    "user.password.*",
    "user.tags.*",
    "user.limits.*",
    "permission.*",
    "topic.permission.*",
    "vhost.#",
    "policy.*",
    "queue.created",
    "queue.deleted",
    "exchange.created",
    "exchange.deleted",
    "binding.*",
    "alarm.*",
)


def _server_settings(config: Path | None) -> list[str]:
    """The flags the broker runs with beyond the user's: the plugins (the config file's, or
    LEVERET_PLUGINS, and the event exchange, whose events go to the lake) and the message
    interceptors (the user's, and set_header_timestamp without overwrite: every record
    then carries the broker's arrival time, the one time every reader gives a record that
    has no ``ts`` of its own)."""
    from leveret.server.config import Config, ConfigError

    try:
        loaded = Config.load(config)
    except (ConfigError, OSError, ValueError):
        # the broker itself says what is wrong, in one line
        return ["--plugins", EVENT_EXCHANGE_PLUGIN]
    plugins = ",".join(dict.fromkeys([*loaded.plugins, EVENT_EXCHANGE_PLUGIN]))
    interceptors = {"set_header_timestamp": False, **dict(loaded.message_interceptors)}
    stamps = ",".join(f"{n}={str(o).lower()}" for n, o in interceptors.items())
    return ["--plugins", plugins, "--message-interceptors", stamps]


def _make_super_stream(url: str, management: str, name: str, partitions: int) -> list[Partition]:
    """The lake's super stream, made if it is not there, and its partitions (with their
    binding keys, from the management API)."""
    from leveret.logs.amqp import LogsError
    from leveret.logs.superstream import ManagementApi, declare_super_stream

    try:
        declare_super_stream(url, name, partitions)
        return ManagementApi.of(url, management).partitions(name)
    except LogsError as exc:
        fail(str(exc))


def _bind_broker_log(url: str, stream: str = "logs") -> None:
    """Bind the lake's stream to the broker's log exchange (the server runs with
    --log-exchange) and to its event exchange (amq.rabbitmq.event), so that its warnings
    and errors, and who failed to log in, or made, changed or deleted what, land in the
    lake as facility broker."""
    import pika

    conn = pika.BlockingConnection(pika.URLParameters(url))
    try:
        ch = conn.channel()
        for level in BROKER_LOG_LEVELS:
            ch.queue_bind(stream, BROKER_LOG_EXCHANGE, level)
        for key in BROKER_EVENT_KEYS:
            ch.queue_bind(stream, BROKER_EVENT_EXCHANGE, key)
    finally:
        conn.close()


@dataclass
class _Child:
    """A process ``up`` started, by the name it reports it under."""

    name: str
    proc: subprocess.Popen[str]
    dumps_stacks: bool = False  # it writes its threads' stacks to its log on DUMP_STACKS


# How long each stops cleanly before it is killed: the ingest commits or drops its
# micro-batch, and the broker closes its clients. 15 s was not enough for the ingest on a
# loaded two-core machine (measured: killed mid-stop beside the test suite's Spark jobs).
STOP_TIMEOUT = 30.0


def _stop(children: list[_Child]) -> None:
    """The receiver and the ingest first, while the broker still serves them (an ingest
    that outlived its broker retried it for half a minute), then the broker; say what
    stopped, and how."""
    clients = [c for c in children if c.name != "broker"]
    for group in (clients, [c for c in children if c.name == "broker"]):
        for c in group:
            if c.proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    c.proc.send_signal(signal.SIGTERM if os.name == "posix" else signal.SIGINT)
        for c in group:
            try:
                code = c.proc.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                note = ""
                if c.dumps_stacks and DUMP_STACKS is not None:
                    with contextlib.suppress(ProcessLookupError, subprocess.TimeoutExpired):
                        c.proc.send_signal(DUMP_STACKS)
                        c.proc.wait(1)  # (time to write them)
                    note = " (where its threads were is at the end of its log)"
                c.proc.kill()
                c.proc.wait()
                console.print(f"Stopped {c.name}: killed after {STOP_TIMEOUT:.0f} s{note}")
                continue
            how = "" if code in (0, -signal.SIGTERM, -signal.SIGINT, 130) else f" (code {code})"
            console.print(f"Stopped {c.name}{how}")


def _query_started(log_path: Path, start: int) -> bool:
    """Whether the ingest has logged that its query runs, since ``start`` in its log."""
    from leveret.spark.pipeline import QUERY_STARTED

    try:
        with open(log_path, encoding="utf-8", errors="replace") as f:
            f.seek(start)
            return QUERY_STARTED in f.read()
    except OSError:
        return False


def _leveret_command() -> str:
    """How the user runs ``leveret`` from this directory: ``leveret`` when the one on PATH is
    this one, else its path (``.venv/bin/leveret`` after ``scripts/up``, which does not
    touch the user's PATH)."""
    here = Path(sys.executable).parent / "leveret"
    on_path = shutil.which("leveret")
    if not here.exists() or (on_path is not None and Path(on_path).resolve() == here.resolve()):
        return "leveret"
    try:
        return str(here.relative_to(Path.cwd()))
    except ValueError:
        return str(here)


def _spark_available() -> bool:
    try:
        import pyspark  # noqa: F401
    except ImportError:
        return False
    return True


def up(
    data_dir: Annotated[
        Path,
        typer.Option(
            "--data-dir",
            envvar="LEVERET_DATA_DIR",
            help="Broker data, the lake, checkpoints and logs all go here.",
        ),
    ] = Path("leveret-data"),
    config: Annotated[
        Path | None,
        typer.Option(
            "--config",
            envvar="LEVERET_CONFIG",
            help="The broker's TOML configuration file, as leveret server --config (users, "
            "vhosts, TLS, limits); --data-dir and the port flags given here win over it.",
        ),
    ] = None,
    ingest: Annotated[
        bool, typer.Option("--ingest/--no-ingest", help="Run the Spark ingest into the lake.")
    ] = True,
    receiver: Annotated[
        bool, typer.Option("--receiver/--no-receiver", help="Print the logs on this terminal.")
    ] = True,
    trigger: Annotated[str, typer.Option("--trigger", help="Ingest trigger interval.")] = "1s",
    retention: Annotated[
        str | None,
        typer.Option(
            "--retention",
            envvar="LEVERET_RETENTION",
            help="Drop the lake's date partitions older than this (30d, 4w); default: the "
            "config file's [lake] retention, else keep everything.",
            show_default=False,
        ),
    ] = None,
    rabbitmq_version: Annotated[
        str | None,
        typer.Option(
            "--rabbitmq-version",
            envvar="LEVERET_RABBITMQ_VERSION",
            help="The RabbitMQ the broker behaves as: 3.10.8 (the default, or the config "
            "file's rabbitmq_version) or 4.2.",
            show_default=False,
        ),
    ] = None,
    super_stream: Annotated[
        str | None,
        super_stream_option(
            "Keep the logs in a super stream of this name (made with --partitions "
            "partitions if missing) instead of the logs stream: the log sources, the "
            "receiver and the lake ingest use it; send with emit-log --super-stream."
        ),
    ] = None,
    partitions: Annotated[int, partitions_option("The partitions of a new --super-stream.")] = 3,
    compact_every: Annotated[
        str | None,
        typer.Option(
            "--compact-every",
            help="Compact the lake (and apply the retention) this often; default: the "
            "config file's [lake] compact_every, else 10m.",
            show_default=False,
        ),
    ] = None,
    **port_options: int | str | None,  # PORTS, by their parameters' names
) -> None:
    """Run the broker, dashboard, a terminal receiver and the lake ingest together."""
    # stopped by a service manager or kill as by Ctrl-C: its children stop with it (a
    # SIGTERM ended it alone before, and the broker, ingest and Spark ran on)
    interrupt_on_sigterm()
    # Ctrl-C stops it even when it was started with SIGINT ignored (a background job of a
    # script): its broker is in a group of its own and only up stops it
    signal.signal(signal.SIGINT, signal.default_int_handler)
    from leveret.logs.lakeconfig import LakeConfig, LakeConfigError
    from leveret.logs.lakeconfig import load as load_lake

    try:
        lake_cfg = load_lake(config) if config is not None else LakeConfig()
        every = compact_every or (f"{lake_cfg.compact_every}s" if lake_cfg.compact_every else "10m")
        keep = retention or lake_cfg.retention
        if keep:
            from leveret.logs.compaction import parse_retention

            parse_retention(keep)
    except (LakeConfigError, ValueError) as exc:
        fail(str(exc))
    data_dir.mkdir(parents=True, exist_ok=True)
    logs_dir = data_dir / "logs"
    logs_dir.mkdir(exist_ok=True)
    children: list[_Child] = []
    broker_log = open(logs_dir / "broker.log", "a")  # noqa: SIM115 - lives as long as up
    try:
        try:
            asked = {flag: port_options[p.name] for flag, p in _PORT_PARAMETERS.items()}
            if asked["--syslog-port"] is None and not _syslog_port_set(config):
                asked["--syslog-port"] = SYSLOG_PORT
            settings = _server_settings(config)
            if rabbitmq_version is not None:
                settings += ["--rabbitmq-version", rabbitmq_version]
            server, ports = _start_server(
                data_dir,
                asked,
                broker_log,
                config,
                settings,
                # syslog and OTLP records into the super stream (by host)
                env={"LEVERET_LOG_SOURCES_EXCHANGE": super_stream} if super_stream else None,
            )
        except RuntimeError as exc:
            fail(str(exc))  # one plain line, unwrapped, as leveret server's
        children.append(_Child("broker", server))
        url = f"amqp://guest:guest@127.0.0.1:{ports['amqp']}/"
        management = f"http://127.0.0.1:{ports.get('http')}"
        parts: list[Partition] = []
        broker_partition = None
        if super_stream:
            # made before anyone is told to send: nothing sent is lost; the broker's own
            # log and events go to the partition this host hashes to, as the log sources'
            parts = _make_super_stream(url, management, super_stream, partitions)
            broker_partition = pick(parts, HOST).stream
        lake = data_dir / "lake"
        ingest_log_path = logs_dir / "ingest.log"
        ingest_log_start = 0
        ingesting: _Child | None = None
        if ingest and _spark_available():
            from leveret.spark.pipeline import ensure_log_stream

            # the stream is bound before anyone is told to send: nothing sent is lost
            if broker_partition is None:
                ensure_log_stream(url)
            _bind_broker_log(url, broker_partition or "logs")
            ingest_log = open(ingest_log_path, "a")  # noqa: SIM115
            ingest_log_start = ingest_log.seek(0, os.SEEK_END)
            ingesting = _Child(
                "ingest",
                subprocess.Popen(
                    _cli(
                        "pipeline",
                        "ingest",
                        "--url",
                        url,
                        "--lake",
                        str(lake),
                        "--checkpoint",
                        str(data_dir / "checkpoints" / "ingest"),
                        "--trigger",
                        trigger,
                        # the port the broker bound: the ingest reads whole chunks from it
                        *(["--stream-port", ports["stream"]] if "stream" in ports else []),
                        *(
                            ["--super-stream", super_stream, "--management-url", management]
                            if super_stream
                            else []
                        ),
                        *(["--alerts-config", str(config)] if lake_cfg.alerts else []),
                    ),
                    stdout=ingest_log,
                    stderr=subprocess.STDOUT,
                    text=True,
                ),
                dumps_stacks=True,
            )
            children.append(ingesting)
            compact_args = ["pipeline", "compact", "--lake", str(lake), "--every", every,
                            "--target-size", lake_cfg.target_size]  # fmt: skip
            if keep:
                compact_args += ["--retention", keep]
            children.append(
                _Child(
                    "compaction",
                    subprocess.Popen(
                        _cli(*compact_args),
                        stdout=ingest_log,
                        stderr=subprocess.STDOUT,
                        text=True,
                    ),
                )
            )
            # Spark takes a while to start its query: "running" is said once it has
            ingest_note = f"starting (Spark), log in {ingest_log_path}"
        elif ingest:
            ingest_note = "off: install the spark extra (pip install -e '.[spark]')"
        else:
            ingest_note = "off"
        console.rule("Leveret is up")
        console.print(f"AMQP        {url}")
        console.print(f"Dashboard   http://127.0.0.1:{ports.get('http')}/   (guest / guest)")
        console.print(f"Metrics     http://127.0.0.1:{ports.get('prometheus')}/metrics")
        if "stream" in ports:
            console.print(
                f"Streams     rabbitmq-stream://guest:guest@127.0.0.1:{ports['stream']}/%2f"
            )
        console.print(f"Lake ingest {ingest_note} -> {lake}")
        leveret = _leveret_command()
        if super_stream:
            console.print(
                f"Send logs   {leveret} emit-log --url {url} --super-stream {super_stream} "
                f"--management-url {management} 'info: hello'"
            )
        else:
            console.print(f"Send logs   {leveret} emit-log --url {url} 'info: hello'")
        if "syslog" in ports:
            console.print(
                f"Syslog      udp+tcp 127.0.0.1:{ports['syslog']}   logger --tcp --server "
                f"127.0.0.1 --port {ports['syslog']} 'hello'"
            )
        console.print(f"OTLP logs   http://127.0.0.1:{ports.get('http')}/v1/logs   (guest / guest)")
        console.print(
            f"Report      {leveret} pipeline report --lake {lake} --out {data_dir / 'report'}"
        )
        console.rule()
        essential = [server]
        if receiver:
            # on a super stream: its exchange, bound with every partition's key
            keys = (
                ["--exchange", super_stream, "--type", "direct", "--durable-exchange"]
                + [str(p.key) for p in parts]
                if super_stream
                else []
            )
            essential.append(subprocess.Popen(_cli("receive-logs", "--url", url, *keys), text=True))
            children.append(_Child("receiver", essential[-1]))
        # the broker and the receiver keep the stack up; an ingest that dies is reported
        reported: set[int] = set()
        waiting_for_query = ingesting is not None
        while all(c.poll() is None for c in essential):
            if (
                waiting_for_query
                and ingesting is not None
                and ingesting.proc.poll() is None
                and _query_started(ingest_log_path, ingest_log_start)
            ):
                waiting_for_query = False
                console.print(f"Lake ingest running -> {lake}")
            for c in children:
                if c.proc.poll() not in (None, 0) and c.proc.pid not in reported:
                    reported.add(c.proc.pid)
                    console.print(
                        f"Error: {c.name} stopped with code {c.proc.returncode}; see {logs_dir}"
                    )
            time.sleep(0.5)
    except KeyboardInterrupt:
        pass
    finally:
        _stop(children)
        broker_log.close()


# up's parameters: --data-dir, then the ports, then the rest of its own
_PORT_PARAMETERS = {
    flag: setting_parameter(
        flag, str | None if flag == "--syslog-port" else int | None, help, show_default=False
    )
    for flag, help in PORTS
}
_OWN = [
    p.replace(kind=inspect.Parameter.KEYWORD_ONLY)
    for p in inspect.signature(up, eval_str=True).parameters.values()
    if p.kind is not inspect.Parameter.VAR_KEYWORD
]
up.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
    [_OWN[0], *_PORT_PARAMETERS.values(), *_OWN[1:]]
)
