"""A stream's create and delete as RabbitMQ's stream manager does them for the stream
protocol (rabbit_stream_manager): the same stream queue AMQP 0-9-1 declares, with the same
authorization and limits, but its own names, arguments and answers."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from leveret.broker.operations import authorization
from leveret.broker.operations.authorization import check_access
from leveret.broker.operations.queues import Declared
from leveret.broker.queues.stream import StreamQueue
from leveret.protocol import errors

if TYPE_CHECKING:
    from leveret.broker.operations.actor import Actor
    from leveret.broker.vhost import VirtualHost

# A Create command's arguments, and the queue argument each one is (rabbit_stream_manager:
# stream_queue_arguments); the others are ignored.
_INT_ARGS = {"max-length-bytes", "stream-max-segment-size-bytes", "initial-cluster-size"}
_CREATE_ARGS = _INT_ARGS | {"max-age", "queue-leader-locator"}
_FILTER_SIZE = "stream-filter-size-bytes"  # RabbitMQ 3.13


def stream_name(name: str) -> str | None:
    """A stream's name as the stream protocol takes it (rabbit_stream_utils:
    enforce_correct_name): CR and LF dropped, as rabbit_channel's names; None for a name
    it refuses (empty, too long, or reserved)."""
    name = name.replace("\r", "").replace("\n", "")
    if not name or len(name.encode()) > 255 or name.startswith("amq."):
        return None
    return name


def queue_arguments(arguments: Mapping[str, str], v4: bool = False) -> dict[str, Any]:
    """A Create command's arguments as the stream queue's (``v4``: with RabbitMQ 3.13's
    ``stream-filter-size-bytes``, 16 to 255). RabbitMQ 3.10.8's manager crashes on a
    number that is not one, and the connection with it: a refusal here."""
    args: dict[str, Any] = {"x-queue-type": "stream"}
    for k, v in arguments.items():
        if k == _FILTER_SIZE and v4:
            try:
                size = int(v)
            except ValueError:
                raise errors.precondition_failed(f"invalid value for {k}: {v!r}") from None
            if not 16 <= size <= 255:  # rabbit_stream_manager:validate_stream_queue_arguments
                raise errors.precondition_failed(f"invalid value for {k}: {v!r}")
            args[f"x-{k}"] = size
            continue
        if k not in _CREATE_ARGS:
            continue
        try:
            args[f"x-{k}"] = int(v) if k in _INT_ARGS else v
        except ValueError:
            raise errors.precondition_failed(f"invalid value for {k}: {v!r}") from None
    return args


def create_stream(
    vhost: VirtualHost, actor: Actor, name: str, arguments: Mapping[str, str], v4: bool = False
) -> Declared:
    """Create a stream (``created`` False: an equivalent one already exists). AMQPError
    for what refuses it: configure permission, arguments, an existing queue of that name
    that is not equivalent, the vhost's queue limit. ``v4``: as RabbitMQ 4.2 creates it."""
    check_access(vhost, actor, "configure", "queue", name)
    args = queue_arguments(arguments, v4)
    existing = vhost.queues.get(name)
    if existing is not None:
        vhost.assert_queue_equivalence(existing, True, None, False, args)
        return Declared(existing, False, existing.message_count)
    authorization.queue_declare(vhost, actor, name, args)
    q, created = vhost.declare_queue(name, True, None, False, args)
    return Declared(q, created, q.message_count)


def delete_stream(
    vhost: VirtualHost,
    actor: Actor,
    name: str,
    before: Callable[[StreamQueue], None] | None = None,
) -> StreamQueue | None:
    """Delete a stream (None when there is no stream of that name, which the stream
    protocol answers itself), after ``before(stream)`` runs: the answer goes out before
    the stream's subscribers hear it is gone."""
    check_access(vhost, actor, "configure", "queue", name)
    q = vhost.queues.get(name)
    if not isinstance(q, StreamQueue) or q.deleted:
        return None
    if before is not None:
        before(q)
    vhost.remove_queue(q)
    return q
