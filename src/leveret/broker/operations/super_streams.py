"""Super streams (RabbitMQ 3.11; created and deleted over the stream protocol from 3.13), as
rabbit_stream_manager and rabbit_stream_utils of 4.2.9 make them: a durable direct
exchange with the argument ``x-super-stream: true``, and its partitions, streams bound to
it with a binding key each and the binding argument ``x-stream-partition-order`` (0, 1,
...). A super stream's partitions are the streams bound to its exchange, ordered by that
argument (bindings without one after); a message's partitions are the streams the
exchange routes its routing key to.

Called alike by the stream protocol (CreateSuperStream, DeleteSuperStream, Partitions,
Route), the management API and ``leveret ctl``. Refusals are :class:`SuperStreamRefused`
with the kind of the stream protocol's answer and the manager's message."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from enum import Enum
from typing import TYPE_CHECKING, Any

from leveret.broker.exchanges import Binding
from leveret.broker.message import Message
from leveret.broker.operations.authorization import check_access
from leveret.broker.operations.streams import create_stream, stream_name
from leveret.broker.queues.stream import StreamQueue
from leveret.protocol.errors import AMQPError

if TYPE_CHECKING:
    from leveret.broker.exchanges import Exchange
    from leveret.broker.operations.actor import Actor
    from leveret.broker.vhost import VirtualHost

SUPER_STREAM_ARG = "x-super-stream"
ORDER_ARG = "x-stream-partition-order"
# rabbit_stream_utils ?MAX_SUPER_STREAM_PARTITIONS (rabbitmq_stream.max_super_stream_partitions)
MAX_PARTITIONS = 1000


class Refusal(Enum):
    """How the stream protocol answers a refused super stream operation."""

    VALIDATION = "validation_failed"  # precondition failed
    EXISTS = "reference_already_exists"  # stream already exists
    ACCESS = "access_refused"
    NOT_FOUND = "stream_not_found"  # stream does not exist
    INTERNAL = "internal_error"


class SuperStreamRefused(Exception):
    """A refusal: its kind and the manager's message. ``nested``: the manager's reason
    holds the message in a tuple of its own (``{validation_failed, {Message}}``), which
    the management API shows as it is."""

    def __init__(self, kind: Refusal, message: str, nested: bool = False) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.nested = nested


def partition_names(name: str, partitions: int) -> list[str]:
    """``name-0`` ... (rabbit_stream_utils:streams_from_partitions)."""
    return [f"{name}-{k}" for k in range(partitions)]


def routing_keys(partitions: int) -> list[str]:
    """``0``, ``1``, ... (rabbit_stream_utils:routing_keys)."""
    return [str(k) for k in range(partitions)]


def names_from_binding_keys(name: str, keys: Sequence[str]) -> list[str]:
    """``name-key`` for each key (rabbit_stream_utils:streams_from_binding_keys)."""
    return [f"{name}-{k}" for k in keys]


def binding_keys(text: str) -> list[str]:
    """A comma-separated list of keys, trimmed, empty ones dropped."""
    return [k.strip() for k in text.split(",") if k.strip()]


def _order(binding: Binding) -> tuple[int, int]:
    value = binding.arguments.get(ORDER_ARG)
    try:
        return (0, int(value)) if value is not None else (1, 0)
    except (TypeError, ValueError):
        return (1, 0)


def _partition_bindings(vhost: VirtualHost, x: Exchange) -> list[Binding]:
    queues = vhost.queues
    found = [
        b
        for b in x.bindings.values()
        if b.destination.kind == "queue" and isinstance(queues.get(b.destination.name), StreamQueue)
    ]
    found.sort(key=_order)  # stable: bindings without an order keep theirs
    return found


def partitions(vhost: VirtualHost, name: str) -> list[str] | None:
    """The super stream's partitions in order (None: no exchange of that name)."""
    x = vhost.exchanges.get(name)
    if x is None:
        return None
    out: list[str] = []
    for b in _partition_bindings(vhost, x):
        if b.destination.name not in out:
            out.append(b.destination.name)
    return out


def is_super_stream(x: Exchange) -> bool:
    """Whether an exchange was made as a super stream's (``x-super-stream: true``)."""
    return x.arguments.get(SUPER_STREAM_ARG) in (True, "true")


def partition_keys(vhost: VirtualHost, name: str) -> list[tuple[str, str]]:
    """The super stream's partitions in order, each with the binding key that routes to
    it (the first, for a partition bound with several); empty when there is no exchange."""
    x = vhost.exchanges.get(name)
    if x is None:
        return []
    out: dict[str, str] = {}
    for b in _partition_bindings(vhost, x):
        out.setdefault(b.destination.name, b.routing_key)
    return list(out.items())


def partition_index(vhost: VirtualHost, super_stream: str, stream: str) -> int:
    """A partition's index in its super stream (rabbit_stream_manager:partition_index):
    its binding's order, else the number after its name's last ``-``, else -1; -1 too
    when the super stream or the binding is not there."""
    x = vhost.exchanges.get(super_stream)
    if x is None:
        return -1
    mine = [b for b in _partition_bindings(vhost, x) if b.destination.name == stream]
    if not mine:
        return -1
    order = mine[0].arguments.get(ORDER_ARG)
    if order is not None:
        try:
            return int(order)
        except (TypeError, ValueError):
            return -1
    _, dash, tail = stream.rpartition("-")
    if not dash:
        return -1
    try:
        return int(tail)
    except ValueError:
        return -1


def route(vhost: VirtualHost, super_stream: str, routing_key: str) -> list[str] | None:
    """The streams a message with ``routing_key`` goes to (None: no such exchange)."""
    x = vhost.exchanges.get(super_stream)
    if x is None:
        return None
    ex, rk = super_stream.encode(), routing_key.encode()
    message = Message(
        super_stream, routing_key, bytes((len(ex),)) + ex + bytes((len(rk),)) + rk, b"\x00\x00", b""
    )
    return [q.name for q in vhost.route(x, message) if isinstance(q, StreamQueue)]


def _allowed(vhost: VirtualHost, actor: Actor, what: str, kind: str, name: str) -> bool:
    try:
        check_access(vhost, actor, what, kind, name)
    except AMQPError:
        return False
    return True


def management_permitted(
    vhost: VirtualHost, actor: Actor, name: str, partitions: Sequence[str]
) -> bool:
    """rabbit_stream_utils:check_super_stream_management_permitted: configure on the
    exchange and on each partition, read on the exchange, write on each partition."""
    return (
        _allowed(vhost, actor, "configure", "exchange", name)
        and all(_allowed(vhost, actor, "configure", "queue", p) for p in partitions)
        and _allowed(vhost, actor, "read", "exchange", name)
        and all(_allowed(vhost, actor, "write", "queue", p) for p in partitions)
    )


def _validate(
    vhost: VirtualHost, name: str, partitions: Sequence[str], keys: Sequence[str]
) -> None:
    """rabbit_stream_manager:validate_super_stream_creation, in its order."""
    if len(partitions) != len(keys):
        raise SuperStreamRefused(
            Refusal.VALIDATION, "There must be the same number of partitions and binding keys"
        )
    # the names are written with ~ts, which prints a list of binaries run together
    if len(set(partitions)) != len(partitions):
        raise SuperStreamRefused(
            Refusal.VALIDATION, f"Duplicate partition names found {''.join(partitions)}", True
        )
    # lists:dropwhile: the first refused name and every one after it
    first_bad = next((k for k, p in enumerate(partitions) if stream_name(p) is None), None)
    if first_bad is not None:
        bad = "".join(partitions[first_bad:])
        raise SuperStreamRefused(
            Refusal.VALIDATION, f"{bad} is not a correct partition names", True
        )
    if len(partitions) > MAX_PARTITIONS:
        raise SuperStreamRefused(
            Refusal.VALIDATION, f"The partition number must not exceed {MAX_PARTITIONS}", True
        )
    limit = vhost.limit("max-queues")
    if limit is not None and len(vhost.queues) + len(partitions) > limit:
        raise SuperStreamRefused(
            Refusal.VALIDATION,
            f"Cannot declare super stream {name} with {len(partitions)} partition(s) because "
            f"queue limit {limit} in vhost '{vhost.name}' is reached",
        )
    if stream_name(name) is None:  # the stream protocol refuses such a name before
        raise SuperStreamRefused(
            Refusal.VALIDATION, f"{name} is not a correct name for a super stream"
        )
    if name in vhost.exchanges:
        raise SuperStreamRefused(Refusal.EXISTS, f"there is already an exchange named {name}")
    for p in partitions:
        if p in vhost.queues:
            raise SuperStreamRefused(Refusal.EXISTS, f"there is already a queue named {p}")


def create_super_stream(
    vhost: VirtualHost,
    actor: Actor,
    name: str,
    partitions: Sequence[str],
    keys: Sequence[str],
    arguments: Mapping[str, str],
) -> None:
    """Create the exchange, the partitions (each a stream with ``arguments``, and a
    ``queue-leader-locator`` of ``balanced`` unless given) and the bindings; what was made
    is removed again when a step fails. Refusals as RabbitMQ's CreateSuperStream answers
    them (the caller checks the name and :func:`management_permitted` first)."""
    _validate(vhost, name, partitions, keys)
    args = dict(arguments)
    args.setdefault("queue-leader-locator", "balanced")
    x, _ = vhost.declare_exchange(name, "direct", True, False, False, {SUPER_STREAM_ARG: True})
    x.user_who_performed_action = actor.username
    made: list[str] = []
    try:
        for p in partitions:
            try:
                create_stream(vhost, actor, p, args, v4=True)
            except AMQPError as exc:
                # the manager's create answers {error, validation_failed}, which the reader
                # takes as an error of another kind
                raise SuperStreamRefused(Refusal.INTERNAL, exc.reply_text) from None
            made.append(p)
        for order, (p, key) in enumerate(zip(partitions, keys, strict=True)):
            vhost.bind(x, Binding(name, vhost.get_queue(p), key, {ORDER_ARG: order}))
    except SuperStreamRefused:
        _remove(vhost, name, made)
        raise


def _remove(vhost: VirtualHost, name: str, streams: Sequence[str]) -> None:
    vhost.delete_exchange(name)
    for s in streams:
        q = vhost.queues.get(s)
        if isinstance(q, StreamQueue) and not q.deleted:
            vhost.remove_queue(q)


def delete_super_stream(vhost: VirtualHost, name: str, streams: Sequence[str]) -> None:
    """Delete the exchange and the partitions ``streams`` (the ones the caller's
    authorization was checked against); what is already gone is skipped."""
    _remove(vhost, name, streams)


def arguments_of(value: Any) -> dict[str, str]:
    """The management API's ``arguments`` object as the stream protocol's string map."""
    if not isinstance(value, dict):
        return {}
    return {str(k): str(v) for k, v in value.items()}
