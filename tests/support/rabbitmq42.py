"""An in-process Leveret that behaves as RabbitMQ 4.2 (``rabbitmq_version="4.2"``), for the
tests of what RabbitMQ 3.11-3.13 added to streams.

Until the 4.2 switch (``broker.compat``) is on this branch's main, the broker is started
in the default mode and given a compat of 4.2 before any client connects: the streams'
one gate (:func:`leveret.broker.stream_features.serves_3_13`) reads nothing else."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import leveret
from leveret.server.config import ConfigError


@dataclass(frozen=True)
class _Series42:
    series: str = "4.2"
    v4: bool = True


def broker_42(data_dir: Path, **settings: Any) -> leveret.Broker:
    """A started in-process Leveret in its RabbitMQ 4.2 mode, streams kept in
    ``data_dir``; the caller stops it."""
    try:
        return leveret.Broker(data_dir=data_dir, rabbitmq_version="4.2", **settings).start()
    except ConfigError:  # no switch yet: the gate's compat, set before any connection
        b = leveret.Broker(data_dir=data_dir, **settings).start()
        b._call(lambda core: setattr(core, "compat", _Series42()))
        return b
