"""What every ``leveret`` command shares: how a user error ends the command, and the
options several commands take."""

from __future__ import annotations

import signal
import sys
from pathlib import Path
from types import FrameType
from typing import Annotated, NoReturn

import typer


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
