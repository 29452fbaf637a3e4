"""``leveret``: one command for the server and its tools."""

from __future__ import annotations

import inspect
import logging
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer

from leveret import __version__
from leveret.cli.common import fail, setting_parameter
from leveret.server import defaults
from leveret.server.listen import ListenError

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="Leveret: an AMQP 0-9-1 broker with RabbitMQ's messaging model.",
    pretty_exceptions_enable=False,
)


def _version(value: bool) -> None:
    if value:
        print(f"leveret {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_version, is_eager=True, help="Print the version and exit."
        ),
    ] = False,
) -> None:
    pass


# the flag that picks each listener's port, in leveret server and leveret up alike
PORT_FLAGS = {
    "amqp": "--amqp-port",
    "amqp/ssl": "--amqps-port",
    "http": "--http-port",
    "prometheus": "--prometheus-port",
    "stream": "--stream-port",
    "stream/ssl": "--stream-tls-port",
    "syslog": "--syslog-port",
}


def listen_failure(exc: ListenError) -> str:
    """One line: the port, what it is for, and the flag that picks another."""
    flag = PORT_FLAGS.get(exc.listener)
    if not exc.in_use or flag is None:
        return str(exc)
    return f"{exc} by another program; pick another port with {flag} (0 picks a free one)"


# leveret server's options, in the order its help lists them: each is the Config setting of
# its name, unset by default; but for --config and --log-level, the command's own.
@dataclass(frozen=True)
class _Option:
    flag: str
    kind: Any
    help: str
    default: Any = None
    show_default: bool = True

    def parameter(self) -> inspect.Parameter:
        """The option as a parameter of the command function (--amqp-port: amqp_port)."""
        return setting_parameter(self.flag, self.kind, self.help, self.default, self.show_default)


SERVER_OPTIONS: tuple[_Option, ...] = (
    _Option(
        "--amqp-port", int | None, f"AMQP port (default {defaults.AMQP_PORT}; 0 picks a free port)."
    ),
    _Option(
        "--http-port",
        int | None,
        f"Management API and dashboard port (default {defaults.HTTP_PORT}; 0 picks a free port).",
    ),
    _Option(
        "--prometheus-port",
        int | None,
        f"Prometheus /metrics port (default {defaults.PROMETHEUS_PORT}; 0 picks a free port).",
    ),
    _Option("--bind", str | None, "Address to listen on (default all interfaces, as RabbitMQ)."),
    _Option("--data-dir", Path | None, "Where durable definitions and persistent messages live."),
    _Option(
        "--vm-memory-high-watermark",
        str | None,
        "Memory alarm: a fraction of RAM (default 0.4) or a size such as 512MiB "
        "or 2GB. Classic queues page to disk from half of it.",
    ),
    _Option(
        "--disk-free-limit",
        str | None,
        "Disk alarm: free space below which publishers are blocked (default "
        "50MB), or '{mem_relative, 1.0}' for a multiple of RAM.",
    ),
    _Option("--config", Path | None, "TOML configuration file."),
    _Option(
        "--tcp-listener/--no-tcp-listener",
        bool | None,
        "The plain AMQP listener (on by default; off leaves amqps alone).",
    ),
    _Option(
        "--amqps-port",
        int | None,
        f"AMQP over TLS port, once a certificate is set (default {defaults.AMQPS_PORT}).",
    ),
    _Option(
        "--stream-port",
        int | None,
        f"RabbitMQ's stream protocol port (default {defaults.STREAM_PORT}; 0 picks a free one).",
    ),
    _Option(
        "--stream-tls-port",
        int | None,
        "The stream protocol over TLS, once a certificate is set "
        f"(default {defaults.STREAM_TLS_PORT}).",
    ),
    _Option(
        "--stream-listener/--no-stream-listener",
        bool | None,
        "The stream protocol listener (on by default).",
    ),
    _Option(
        "--syslog-port",
        str | None,
        "Take syslog (RFC 5424 and 3164) over UDP and TCP on this port into the logs "
        "exchange (off by default, or 'off'; 0 picks a free port).",
    ),
    _Option("--tls-cert", Path | None, "Server certificate (PEM)."),
    _Option("--tls-key", Path | None, "Its private key (PEM)."),
    _Option("--tls-ca", Path | None, "CA bundle that client certificates chain to."),
    _Option(
        "--tls-verify-peer",
        bool | None,
        "Ask clients for a certificate and check it (RabbitMQ's verify_peer).",
    ),
    _Option(
        "--tls-fail-if-no-peer-cert",
        bool | None,
        "With --tls-verify-peer: refuse clients without a certificate.",
    ),
    _Option(
        "--http-tls", bool | None, "Serve the management API, dashboard and metrics over HTTPS."
    ),
    _Option("--log-level", str, "Logging level.", default="info"),
    _Option(
        "--log-exchange/--no-log-exchange",
        bool | None,
        "Publish the broker's log to amq.rabbitmq.log (RabbitMQ's log.exchange).",
        show_default=False,
    ),
    _Option(
        "--plugins",
        str | None,
        "Plugins to enable beyond those on by default, by RabbitMQ's names, "
        "separated by commas (rabbitmq_event_exchange).",
    ),
    _Option(
        "--message-interceptors",
        str | None,
        "What the broker stamps on the messages clients publish, as RabbitMQ 3.12+'s "
        "message_interceptors.incoming: name=overwrite separated by commas "
        "(set_header_timestamp=false: the arrival time as a timestamp_in_ms header).",
    ),
    _Option(
        "--rabbitmq-version",
        str | None,
        "The RabbitMQ whose behaviour and version clients see: 3.10.8 (the default) or 4.2.",
    ),
    _Option(
        "--consumer-timeout",
        str | None,
        "Close a channel whose delivery stays unacknowledged this long, in ms "
        "(default 1800000, as RabbitMQ; infinity: never).",
    ),
)


def server(**options: Any) -> None:
    """Run the broker in the foreground until SIGINT or SIGTERM."""
    from leveret.management.runner import Running, run
    from leveret.server.config import Config, ConfigError
    from leveret.server.listen import ListenError
    from leveret.store.lock import DataDirInUse

    config, log_level = options.pop("config"), options.pop("log_level")
    logging.basicConfig(
        level=log_level.upper(),
        stream=sys.stderr,
        format="%(asctime)s [%(levelname)s] %(name)s: %(message)s",
    )
    try:
        cfg = Config.load(config, **options)
    except ConfigError as exc:
        fail(str(exc))

    def ready(running: Running) -> None:
        print(f"Management API listening on {running.http_url}", flush=True)
        print(f"Prometheus metrics listening on {running.metrics_url}", flush=True)
        if running.server.tls_url is not None and running.server.config.tcp_listener:
            print(f"AMQP over TLS listening on {running.server.tls_url}", flush=True)
        stream = running.server
        if stream.stream_port:
            print(
                f"Stream protocol listening on {stream.stream_host}:{stream.stream_port}",
                flush=True,
            )
        if stream.stream_tls_port:
            print(
                f"Stream protocol over TLS listening on {stream.stream_host}:"
                f"{stream.stream_tls_port}",
                flush=True,
            )
        if stream.syslog_port:
            print(
                f"Syslog (UDP and TCP) listening on {stream.syslog_host}:{stream.syslog_port}",
                flush=True,
            )
        print(f"Server startup complete; listening on {running.server.url}", flush=True)

    try:
        run(cfg, ready)
    except (ConfigError, DataDirInUse) as exc:
        fail(str(exc))
    except ListenError as exc:
        fail(listen_failure(exc))
    except OSError as exc:
        fail(f"cannot listen on {cfg.bind}: {exc.strerror or exc}")
    except KeyboardInterrupt:
        pass


server.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
    [option.parameter() for option in SERVER_OPTIONS]
)
app.command()(server)


@app.command(
    context_settings={
        "allow_extra_args": True,
        "ignore_unknown_options": True,
        "help_option_names": [],
    },
    add_help_option=False,
)
def ctl(ctx: typer.Context) -> None:
    """rabbitmqctl's verbs against a running Leveret, through its management API."""
    from leveret.cli.ctl import main as ctl_main

    raise typer.Exit(ctl_main(list(ctx.args)))


def _register_log_commands() -> None:
    from leveret.cli import logs

    app.command("emit-log")(logs.emit_log)
    app.command("receive-logs")(logs.receive_logs)


_register_log_commands()


def _register_pipeline_commands() -> None:
    from leveret.cli.pipeline import app as pipeline_app
    from leveret.cli.search import app as search_app

    app.add_typer(pipeline_app, name="pipeline")
    app.add_typer(search_app, name="logs")


_register_pipeline_commands()


def _register_up() -> None:
    from leveret.cli.up import up

    app.command("up")(up)


_register_up()


def _unwrap(text: str) -> str:
    """A docstring as help: each paragraph one line (typer keeps the source's line breaks
    after the first paragraph, and rich then wraps those lines again: sentences broke after
    a word or two). A paragraph starting with \\b keeps its lines."""
    paragraphs = inspect.cleandoc(text).split("\n\n")
    return "\n\n".join(
        p if p.startswith("\b") else " ".join(line.strip() for line in p.splitlines())
        for p in paragraphs
    )


def _unwrap_help(typer_app: typer.Typer) -> None:
    for command in typer_app.registered_commands:
        text = command.help or inspect.getdoc(command.callback)
        if text:
            command.help = _unwrap(text)
    for group in typer_app.registered_groups:
        if group.typer_instance is not None:
            _unwrap_help(group.typer_instance)


_unwrap_help(app)


def main() -> None:
    # `leveret ctl ...` goes to rabbitmqctl's parser untouched: click would take a `--`
    # (rabbitmqctl's end of options, as in `delete_queue -- -x`) for its own.
    if len(sys.argv) > 1 and sys.argv[1] == "ctl":
        from leveret.cli.ctl import main as ctl_main

        sys.exit(ctl_main(sys.argv[2:]))
    app()


if __name__ == "__main__":
    main()
