"""What every ``leveret`` command shares: how a user error ends the command, and the
options several commands take."""

from __future__ import annotations

import inspect
import signal
import sys
from pathlib import Path
from types import FrameType
from typing import Annotated, Any, NoReturn

import typer

#: what ``leveret up`` sends an ingest that did not stop in time, before it kills it: every
#: thread's stack goes to stderr (its log), so that a stop that hangs says where it hangs
DUMP_STACKS = getattr(signal, "SIGUSR1", None)


def fail(message: str, code: int = 1) -> NoReturn:
    """One plain line on stderr and a non-zero exit: no traceback for user errors."""
    print(f"Error: {message}", file=sys.stderr)
    raise typer.Exit(code)


def interrupt_on_sigterm() -> None:
    """SIGTERM (a service manager's stop, ``kill``) ends a command the way Ctrl-C does:
    cleanly, through KeyboardInterrupt."""

    def handler(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, handler)


# the log lake of leveret pipeline and leveret logs search
Lake = Annotated[
    Path,
    typer.Option("--lake", envvar="LEVERET_LAKE", help="The Parquet log lake directory."),
]


def super_stream_option(help: str) -> Any:
    """The ``--super-stream`` option (also read from LEVERET_SUPER_STREAM) of the commands
    that write or read the logs' super stream, with each command's ``help``."""
    return typer.Option(
        "--super-stream", envvar="LEVERET_SUPER_STREAM", help=help, show_default=False
    )


def partitions_option(help: str) -> Any:
    """The ``--partitions`` option: how many partitions a missing super stream is made with
    (at most rabbit_stream_utils' 1000)."""
    return typer.Option("--partitions", min=1, max=1000, help=help)


def check_lake(lake: Path) -> None:
    """End the command with one line when ``lake`` is not a log lake."""
    from leveret.logs.lake import not_a_lake

    why = not_a_lake(lake)
    if why is not None:
        fail(why if "--lake" in why else f"{why} (run `leveret pipeline ingest` first)")


def setting_parameter(
    flag: str, kind: Any, help: str, default: Any = None, show_default: bool = True
) -> inspect.Parameter:
    """An option for one of the broker's settings, as a parameter of a command function:
    named after its flag (--amqp-port: amqp_port) and also read from LEVERET_<NAME>
    (LEVERET_AMQP_PORT), in leveret server and leveret up alike."""
    name = flag.split("/")[0].removeprefix("--").replace("-", "_")
    option = typer.Option(
        flag, envvar=f"LEVERET_{name.upper()}", help=help, show_default=show_default
    )
    annotated: Any = Annotated
    return inspect.Parameter(
        name, inspect.Parameter.KEYWORD_ONLY, annotation=annotated[kind, option], default=default
    )
