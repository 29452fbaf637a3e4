"""Leveret: an AMQP 0-9-1 broker with RabbitMQ's messaging model.

``leveret.Broker`` and ``leveret.serve`` run the whole broker in-process (see
:mod:`leveret.embedded`). They are loaded on first use, so importing any part of Leveret
(the log handler, the Spark source) does not load the server; ``__init__.pyi`` declares
them for type checkers.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

__all__ = ["Broker", "__version__", "serve"]


def __getattr__(name: str) -> Any:
    if name in ("Broker", "serve"):
        # By name, not an import statement: the package's root must not depend on the
        # server (the broker's modules read __version__ from it).
        return getattr(importlib.import_module("leveret.embedded"), name)
    raise AttributeError(f"module 'leveret' has no attribute {name!r}")
