"""``leveret emit-log`` and ``leveret receive-logs``: the tutorial's log system as tools.

Registered on the app in ``leveret.cli.main``. Every failure a user can cause (a bad URL,
refused credentials, an exchange of another type, a full disk) ends in one plain line on
stderr and a non-zero exit.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated

import typer

from leveret.cli.common import fail, interrupt_on_sigterm, super_stream_option
from leveret.logs.amqp import (
    DEFAULT_EXCHANGE,
    DEFAULT_URL,
    ExchangeType,
    LogsError,
    redact,
    split_urls,
)
from leveret.logs.emitter import Emitter
from leveret.logs.receiver import Subscription, receive
from leveret.logs.record import DEFAULT_FACILITY
from leveret.logs.sinks import FileSink, Sink, TerminalSink
from leveret.logs.superstream import RouteBy

Url = Annotated[
    list[str] | None,
    typer.Option(
        "--url",
        envvar="LEVERET_URL",
        help="Broker URL (amqp:// or amqps://). Repeat it (or separate URLs with commas) "
        "for the nodes of a cluster: when a connection is lost the next one is used. "
        f"Default: {DEFAULT_URL}",
        show_default=False,
    ),
]


def broker_urls(given: list[str] | None) -> list[str]:
    """The URLs of ``--url`` (the default when none), each checked; a bad one fails."""
    try:
        return split_urls(given or [DEFAULT_URL])
    except LogsError as exc:
        fail(str(exc))


Exchange = Annotated[
    str,
    typer.Option("--exchange", "-x", envvar="LEVERET_LOG_EXCHANGE", help="Exchange name."),
]
Type = Annotated[
    ExchangeType,
    typer.Option(
        "--type",
        envvar="LEVERET_LOG_EXCHANGE_TYPE",
        help="Exchange type: fanout broadcasts; direct routes by severity; topic by "
        "facility.severity.",
    ),
]
DurableExchange = Annotated[
    bool,
    typer.Option(
        "--durable-exchange",
        help="Declare the exchange durable (every producer and receiver must agree).",
    ),
]


SuperStream = Annotated[
    str | None,
    super_stream_option(
        "Send to this super stream (instead of --exchange): each record to the partition "
        "its app, or host, hashes to (see --route-by). It must exist: see "
        "'leveret pipeline ingest --super-stream'."
    ),
]
RouteByOption = Annotated[
    RouteBy,
    typer.Option(
        "--route-by",
        help="With --super-stream: hash the record's app or its host to choose the partition "
        "(one app's, or host's, records stay in order in one partition).",
    ),
]
ManagementUrl = Annotated[
    str | None,
    typer.Option(
        "--management-url",
        envvar="LEVERET_MANAGEMENT_URL",
        help="With --super-stream: the management API its partitions are read from "
        "[default: http://<the broker's host>:15672, the --url's user].",
        show_default=False,
    ),
]


def _stdin_lines() -> Iterator[str]:
    for raw in sys.stdin.buffer:
        yield raw.decode("utf-8", "replace").rstrip("\r\n")


def emit_log(
    messages: Annotated[
        list[str] | None,
        typer.Argument(
            help="Messages, one record each. Without any, lines from stdin.", show_default=False
        ),
    ] = None,
    url: Url = None,
    exchange: Exchange = DEFAULT_EXCHANGE,
    exchange_type: Type = ExchangeType.fanout,
    severity: Annotated[
        str | None,
        typer.Option(
            "--severity",
            "-s",
            help="debug, info, warning, error or critical, for every record. Without it a "
            "message names its own as 'error: disk full' (stored as severity error, message "
            "'disk full'); other messages are info.",
            show_default=False,
        ),
    ] = None,
    facility: Annotated[
        str,
        typer.Option("--facility", "-f", help="Facility (topic keys are facility.severity)."),
    ] = DEFAULT_FACILITY,
    app: Annotated[str, typer.Option("--app", help="The app field of records.")] = "emit-log",
    persistent: Annotated[
        bool, typer.Option("--persistent", help="Publish with delivery mode 2 (persistent).")
    ] = False,
    durable_exchange: DurableExchange = False,
    super_stream: SuperStream = None,
    route_by: RouteByOption = RouteBy.app,
    management_url: ManagementUrl = None,
) -> None:
    """Send log records: each MESSAGE, or each line of stdin.

    Streams stdin (tail -f app.log | leveret emit-log) with publisher confirms, and exits 0
    only when the broker confirmed every record. With several --url (one cluster's nodes) a
    lost connection moves on to the next node; records in flight then are not sent again
    (the node may have stored them) and count as not confirmed.

    With --super-stream every record goes to the partition of that super stream which its
    app (or host, --route-by host) hashes to, as RabbitMQ's stream clients hash.
    """
    interrupt_on_sigterm()
    urls = broker_urls(url)
    try:
        emitter = Emitter(
            urls,
            super_stream or exchange,
            exchange_type,
            severity=severity,
            facility=facility,
            app=app,
            persistent=persistent,
            durable_exchange=durable_exchange,
            super_stream=super_stream is not None,
            route_by=route_by,
            management_url=management_url,
        )
    except LogsError as exc:
        fail(str(exc))
    interrupted = False
    try:
        for message in messages if messages else _stdin_lines():
            emitter.send(message)
    except LogsError:
        pass  # reported below with the counts
    except KeyboardInterrupt:
        interrupted = True
    try:
        result = emitter.close(10 if interrupted else None)
    except KeyboardInterrupt:
        result = emitter.close(0)
    if emitter.error is not None:
        fail(f"{emitter.error} ({result.confirmed} of {result.sent} records confirmed)")
    if result.unconfirmed:
        fail(
            f"{result.unconfirmed} records were in flight when a connection was lost and "
            f"are not confirmed (the broker may or may not have them); the brokers confirmed "
            f"{result.confirmed} of {result.sent} records"
        )
    if not result.ok:
        fail(
            f"the broker confirmed {result.confirmed} of {result.sent} records"
            + (f" and rejected {result.nacked}" if result.nacked else "")
        )
    noun = "record" if result.sent == 1 else "records"
    if super_stream is not None:
        print(f"Sent {result.sent} {noun} to super stream '{super_stream}'")
        return
    print(f"Sent {result.sent} {noun} to exchange '{exchange}' ({exchange_type.value})")


def _size(text: str) -> int:
    units = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
    t = text.strip().lower().removesuffix("b").removesuffix("i")
    try:
        if t and t[-1] in units:
            return int(float(t[:-1]) * units[t[-1]])
        return int(t)
    except ValueError:
        raise typer.BadParameter(f"{text!r} is not a size (e.g. 10485760, 10M, 1G)") from None


def receive_logs(
    binding_keys: Annotated[
        list[str] | None,
        typer.Argument(
            help="Binding keys: severities for direct (info warning error), patterns for "
            "topic (kern.* *.critical). Default: everything.",
            show_default=False,
        ),
    ] = None,
    url: Url = None,
    exchange: Exchange = DEFAULT_EXCHANGE,
    exchange_type: Type = ExchangeType.fanout,
    to: Annotated[
        Path | None,
        typer.Option("--to", help="Append records to FILE as JSON lines instead of printing."),
    ] = None,
    max_bytes: Annotated[
        str, typer.Option("--max-bytes", help="Rotate FILE at this size (e.g. 100M); 0: never.")
    ] = "0",
    backups: Annotated[
        int, typer.Option("--backups", min=0, help="Rotated files to keep (FILE.1 ...).")
    ] = 5,
    queue: Annotated[
        str | None,
        typer.Option("--queue", help="Subscribe through this named queue, not a temporary one."),
    ] = None,
    durable: Annotated[
        bool,
        typer.Option(
            "--durable",
            help="Make --queue durable: it keeps records while the "
            "receiver is away and across broker restarts.",
        ),
    ] = False,
    queue_type: Annotated[
        str | None,
        typer.Option(
            "--queue-type",
            help="x-queue-type of --queue: quorum replicates it over a cluster's nodes "
            "(it must then be --durable).",
        ),
    ] = None,
    durable_exchange: DurableExchange = False,
    prefetch: Annotated[
        int, typer.Option("--prefetch", min=1, max=65535, help="Unacked records in flight.")
    ] = 1000,
) -> None:
    """Print log records as they arrive, or append them to a file.

    On a terminal records are coloured by severity; with --to FILE each is one JSON line,
    acked only once written. Ctrl-C exits cleanly.
    """
    interrupt_on_sigterm()
    keys = tuple(binding_keys or ())
    if durable and not queue:
        fail("--durable needs --queue NAME")
    if queue_type and not queue:
        fail("--queue-type needs --queue NAME")
    urls = broker_urls(url)
    if exchange_type == ExchangeType.fanout and keys:
        fail("binding keys are for --type direct or topic; a fanout exchange ignores them")
    limit = _size(max_bytes)
    sub = Subscription(
        url=tuple(urls),
        exchange=exchange,
        exchange_type=exchange_type,
        binding_keys=keys,
        queue=queue,
        durable=durable,
        durable_exchange=durable_exchange,
        prefetch=prefetch,
        queue_type=queue_type,
    )
    sink: Sink
    if to is not None:
        try:
            sink = FileSink(to, max_bytes=limit, backups=backups)
        except OSError as exc:
            fail(f"cannot open {to}: {exc.strerror or exc}")
    else:
        colour = sys.stdout.isatty() and "NO_COLOR" not in os.environ
        sink = TerminalSink(sys.stdout.buffer, colour)

    def ready(queue_name: str) -> None:
        where = f"to {to}" if to is not None else "here"
        print(
            f" [*] Waiting for logs on queue '{queue_name}' (exchange '{exchange}', "
            f"{exchange_type.value}), writing {where}. To exit press CTRL+C",
            file=sys.stderr,
            flush=True,
        )

    def lost(err: LogsError, delay: float) -> None:
        then = f"reconnecting in {delay:.1f}s" if delay else "trying the next node"
        print(f" [!] {err}; {then}", file=sys.stderr, flush=True)

    try:
        receive(sub, sink, on_ready=ready, on_lost=lost)
    except KeyboardInterrupt:
        pass
    except LogsError as exc:
        fail(str(exc))
    except BrokenPipeError:
        # whoever read our stdout went away (receive-logs | head): nothing left to do
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return
    except OSError as exc:
        target = to if to is not None else "stdout"
        fail(f"cannot write {target}: {exc.strerror or exc}")
    finally:
        with contextlib.suppress(OSError):
            sink.close()


__all__ = ["emit_log", "receive_logs", "redact"]
