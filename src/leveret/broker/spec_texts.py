"""Error texts shared by several broker modules."""

from __future__ import annotations

from typing import Any

from leveret.protocol import errors
from leveret.protocol.errors import AMQPError


def stream_not_supported(what: str, queue: Any) -> AMQPError:
    return errors.not_implemented(
        f"{what} not supported by stream queues queue '{queue.name}' in vhost '{queue.vhost}'"
    )
