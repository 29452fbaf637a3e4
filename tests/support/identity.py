"""What RabbitMQ 3.10.8 says about itself in ``connection.start``: the capabilities table and
the server properties' names, each in the order RabbitMQ puts them on the wire (clients that
keep a field table's order, such as amqplib and aiormq, show it)."""

from __future__ import annotations

import fcntl
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

RABBITMQ_CAPABILITIES = {
    "publisher_confirms": True,
    "exchange_exchange_bindings": True,
    "basic.nack": True,
    "consumer_cancel_notify": True,
    "connection.blocked": True,
    "consumer_priorities": True,
    "authentication_failure_close": True,
    "per_consumer_qos": True,
    "direct_reply_to": True,
}
SERVER_PROPERTIES = [
    "capabilities",
    "cluster_name",
    "copyright",
    "information",
    "platform",
    "product",
    "version",
]
# The message of a RESOURCE_LOCKED close, for a queue another connection holds exclusively.
LOCKED = (
    "RESOURCE_LOCKED - cannot obtain exclusive access to locked queue '{}' in vhost '/'. "
    "It could be originally declared on another connection or the exclusive property "
    "value does not match that of the original declaration."
)


def inequivalent(arg: str, kind: str, name: str, received: str, current: str) -> str:
    """The PRECONDITION_FAILED text of a redeclaration that differs in ``arg`` (``received``
    and ``current`` as RabbitMQ renders them: ``'true'``, ``none``, ``the value 'ae' of type
    'longstr'``)."""
    return (
        f"PRECONDITION_FAILED - inequivalent arg '{arg}' for {kind} '{name}' in vhost '/': "
        f"received {received} but current is {current}"
    )


@contextmanager
def cluster_name_held(change: bool = False) -> Iterator[None]:
    """The reference broker's cluster name is everyone's: a test that changes it holds
    this lock alone (``change``), one that reads it from a new connection holds it with
    the other readers. A lock file shared by the suite's workers."""
    path = Path(tempfile.gettempdir()) / "leveret-tests-cluster-name.lock"
    with path.open("a") as f:
        fcntl.flock(f, fcntl.LOCK_EX if change else fcntl.LOCK_SH)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)
