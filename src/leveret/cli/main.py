"""``leveret``: one command for the server and its tools."""

from __future__ import annotations

import inspect
import logging
import sys
from pathlib import Path
from typing import Annotated

import typer

from leveret import __version__
from leveret.cli.common import fail
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
}


def listen_failure(exc: ListenError) -> str:
    """One line: the port, what it is for, and the flag that picks another."""
    flag = PORT_FLAGS.get(exc.listener)
    if not exc.in_use or flag is None:
        return str(exc)
    return f"{exc} by another program; pick another port with {flag} (0 picks a free one)"


@app.command()
def server(
    amqp_port: Annotated[
        int | None,
        typer.Option(
            "--amqp-port",
            envvar="LEVERET_AMQP_PORT",
            help="AMQP port (default 5672; 0 picks a free port).",
        ),
    ] = None,
    http_port: Annotated[
        int | None,
        typer.Option(
            "--http-port",
            envvar="LEVERET_HTTP_PORT",
            help="Management API and dashboard port (default 15672; 0 picks a free port).",
        ),
    ] = None,
    prometheus_port: Annotated[
        int | None,
        typer.Option(
            "--prometheus-port",
            envvar="LEVERET_PROMETHEUS_PORT",
            help="Prometheus /metrics port (default 15692; 0 picks a free port).",
        ),
    ] = None,
    bind: Annotated[
        str | None,
        typer.Option(
            "--bind",
            envvar="LEVERET_BIND",
            help="Address to listen on (default all interfaces, as RabbitMQ).",
        ),
    ] = None,
    data_dir: Annotated[
        Path | None,
        typer.Option(
            "--data-dir",
            envvar="LEVERET_DATA_DIR",
            help="Where durable definitions and persistent messages live.",
        ),
    ] = None,
    vm_memory_high_watermark: Annotated[
        str | None,
        typer.Option(
            "--vm-memory-high-watermark",
            envvar="LEVERET_VM_MEMORY_HIGH_WATERMARK",
            help="Memory alarm: a fraction of RAM (default 0.4) or a size such as 512MiB "
            "or 2GB. Classic queues page to disk from half of it.",
        ),
    ] = None,
    disk_free_limit: Annotated[
        str | None,
        typer.Option(
            "--disk-free-limit",
            envvar="LEVERET_DISK_FREE_LIMIT",
            help="Disk alarm: free space below which publishers are blocked (default "
            "50MB), or '{mem_relative, 1.0}' for a multiple of RAM.",
        ),
    ] = None,
    config: Annotated[
        Path | None,
        typer.Option("--config", envvar="LEVERET_CONFIG", help="TOML configuration file."),
    ] = None,
    tcp_listener: Annotated[
        bool | None,
        typer.Option(
            "--tcp-listener/--no-tcp-listener",
            envvar="LEVERET_TCP_LISTENER",
            help="The plain AMQP listener (on by default; off leaves amqps alone).",
        ),
    ] = None,
    amqps_port: Annotated[
        int | None,
        typer.Option(
            "--amqps-port",
            envvar="LEVERET_AMQPS_PORT",
            help="AMQP over TLS port, once a certificate is set (default 5671).",
        ),
    ] = None,
    stream_port: Annotated[
        int | None,
        typer.Option(
            "--stream-port",
            envvar="LEVERET_STREAM_PORT",
            help="RabbitMQ's stream protocol port (default 5552; 0 picks a free one).",
        ),
    ] = None,
    stream_tls_port: Annotated[
        int | None,
        typer.Option(
            "--stream-tls-port",
            envvar="LEVERET_STREAM_TLS_PORT",
            help="The stream protocol over TLS, once a certificate is set (default 5551).",
        ),
    ] = None,
    stream_listener: Annotated[
        bool | None,
        typer.Option(
            "--stream-listener/--no-stream-listener",
            envvar="LEVERET_STREAM_LISTENER",
            help="The stream protocol listener (on by default).",
        ),
    ] = None,
    tls_cert: Annotated[
        Path | None,
        typer.Option("--tls-cert", envvar="LEVERET_TLS_CERT", help="Server certificate (PEM)."),
    ] = None,
    tls_key: Annotated[
        Path | None,
        typer.Option("--tls-key", envvar="LEVERET_TLS_KEY", help="Its private key (PEM)."),
    ] = None,
    tls_ca: Annotated[
        Path | None,
        typer.Option(
            "--tls-ca", envvar="LEVERET_TLS_CA", help="CA bundle that client certificates chain to."
        ),
    ] = None,
    tls_verify_peer: Annotated[
        bool | None,
        typer.Option(
            "--tls-verify-peer",
            envvar="LEVERET_TLS_VERIFY_PEER",
            help="Ask clients for a certificate and check it (RabbitMQ's verify_peer).",
        ),
    ] = None,
    tls_fail_if_no_peer_cert: Annotated[
        bool | None,
        typer.Option(
            "--tls-fail-if-no-peer-cert",
            envvar="LEVERET_TLS_FAIL_IF_NO_PEER_CERT",
            help="With --tls-verify-peer: refuse clients without a certificate.",
        ),
    ] = None,
    http_tls: Annotated[
        bool | None,
        typer.Option(
            "--http-tls",
            envvar="LEVERET_HTTP_TLS",
            help="Serve the management API, dashboard and metrics over HTTPS.",
        ),
    ] = None,
    log_level: Annotated[
        str, typer.Option("--log-level", envvar="LEVERET_LOG_LEVEL", help="Logging level.")
    ] = "info",
    log_exchange: Annotated[
        bool | None,
        typer.Option(
            "--log-exchange/--no-log-exchange",
            envvar="LEVERET_LOG_EXCHANGE",
            help="Publish the broker's log to amq.rabbitmq.log (RabbitMQ's log.exchange).",
            show_default=False,
        ),
    ] = None,
    plugins: Annotated[
        str | None,
        typer.Option(
            "--plugins",
            envvar="LEVERET_PLUGINS",
            help="Plugins to enable beyond those on by default, by RabbitMQ's names, "
            "separated by commas (rabbitmq_event_exchange).",
        ),
    ] = None,
    consumer_timeout: Annotated[
        str | None,
        typer.Option(
            "--consumer-timeout",
            envvar="LEVERET_CONSUMER_TIMEOUT",
            help="Close a channel whose delivery stays unacknowledged this long, in ms "
            "(default 1800000, as RabbitMQ; infinity: never).",
        ),
    ] = None,
) -> None:
    """Run the broker in the foreground until SIGINT or SIGTERM."""
    from leveret.management.runner import Running, run
    from leveret.server.config import Config, ConfigError
    from leveret.server.listen import ListenError
    from leveret.store.lock import DataDirInUse

    logging.basicConfig(
        level=log_level.upper(),
        stream=sys.stderr,
        format="%(asctime)s [%(levelname)s] %(name)s: %(message)s",
    )
    try:
        cfg = Config.load(
            config,
            amqp_port=amqp_port,
            http_port=http_port,
            prometheus_port=prometheus_port,
            bind=bind,
            data_dir=data_dir,
            tcp_listener=tcp_listener,
            amqps_port=amqps_port,
            stream_port=stream_port,
            stream_tls_port=stream_tls_port,
            stream_listener=stream_listener,
            tls_cert=tls_cert,
            tls_key=tls_key,
            tls_ca=tls_ca,
            tls_verify_peer=tls_verify_peer,
            tls_fail_if_no_peer_cert=tls_fail_if_no_peer_cert,
            http_tls=http_tls,
            log_exchange=log_exchange,
            vm_memory_high_watermark=vm_memory_high_watermark,
            disk_free_limit=disk_free_limit,
            plugins=plugins,
            consumer_timeout=consumer_timeout,
        )
    except ConfigError as exc:
        fail(str(exc))

    def ready(running: Running) -> None:
        print(f"Management API listening on {running.http_url}", flush=True)
        print(f"Prometheus metrics listening on {running.metrics_url}", flush=True)
        if running.tls_url is not None and running.server.config.tcp_listener:
            print(f"AMQP over TLS listening on {running.tls_url}", flush=True)
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
        print(f"Server startup complete; listening on {running.url}", flush=True)

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
