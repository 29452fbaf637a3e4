"""What every ``leveret`` command shares: how a user error ends the command."""

from __future__ import annotations

import sys
from typing import NoReturn

import typer


def fail(message: str, code: int = 1) -> NoReturn:
    """One plain line on stderr and a non-zero exit: no traceback for user errors."""
    print(f"Error: {message}", file=sys.stderr)
    raise typer.Exit(code)
