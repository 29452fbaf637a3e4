"""An in-process Leveret that behaves as RabbitMQ 4.2 (``rabbitmq_version="4.2"``), for the
tests of what RabbitMQ 3.11-3.13 added to streams (served in that mode only)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import leveret


def broker_42(data_dir: Path, **settings: Any) -> leveret.Broker:
    """A started in-process Leveret in its RabbitMQ 4.2 mode, streams kept in
    ``data_dir``; the caller stops it."""
    return leveret.Broker(data_dir=data_dir, rabbitmq_version="4.2", **settings).start()
