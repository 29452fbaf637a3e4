"""queue.declare, queue.delete, queue.purge, and opening a queue to read from it
(basic.get, basic.consume, the management API's get). Declare and delete take their
method record, as exchange.declare does."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple

from leveret.broker import names
from leveret.broker.events import QueueDeclared, QueueDeclaredNew
from leveret.broker.operations import authorization
from leveret.broker.operations.authorization import check_access
from leveret.broker.queues import queue_type_name
from leveret.protocol import errors, spec

if TYPE_CHECKING:
    from pamqp import commands

    from leveret.broker.operations.actor import Actor
    from leveret.broker.queues import Queue
    from leveret.broker.vhost import VirtualHost


class Declared(NamedTuple):
    """What queue.declare-ok tells: the queue, whether this declaration made it, and
    its message count as the reply gives it."""

    queue: Queue
    created: bool
    message_count: int


def declare_queue(
    vhost: VirtualHost,
    actor: Actor,
    method: commands.Queue.Declare,
    *,
    transient_exclusive: bool = True,
) -> Declared:
    """A queue declared as RabbitMQ declares it: an exclusive one is the actor's
    connection's (and not durable: rabbit_channel makes it transient; RabbitMQ 4's AMQP
    management node keeps the durability asked for, ``transient_exclusive=False``); an
    empty name is the server's to choose."""
    name = actor.name(method.queue)
    arguments = spec.arguments(method)
    if method.passive:
        authorization.passive_declare(vhost, actor, "queue", name)
        q = vhost.get_queue(name)
        actor.check_exclusive(q, vhost.name)
        return Declared(q, False, q.declare_ok_count(arguments))
    if vhost.compat.v4 and "x-queue-type" not in arguments:
        arguments = with_default_queue_type(arguments)
    server_named = name == ""
    if server_named:
        qtype = queue_type_name(arguments)
        if qtype in ("stream", "quorum"):
            raise errors.precondition_failed(
                f"Cannot declare a server-named queue for type rabbit_{qtype}_queue"
            )
        name = names.queue_name()
    owner = actor.connection if method.exclusive else None
    authorization.queue_declare(vhost, actor, name, arguments, server_named)
    vhost.observers.emit(QueueDeclared(vhost.name, name))
    durable = method.durable and not (method.exclusive and transient_exclusive)
    q, created = vhost.declare_queue(name, durable, owner, method.auto_delete, arguments)
    if created:
        vhost.observers.emit(QueueDeclaredNew(vhost.name, name))
    return Declared(q, created, q.message_count)


def with_default_queue_type(arguments: dict[str, Any]) -> dict[str, Any]:
    """RabbitMQ 4's rabbit_amqqueue:augment_declare_args (v4.2.9 rabbit_amqqueue.erl:
    761-810): a declaration without x-queue-type gets the default one, classic, as a
    long string (set_table_value: the table sorted by key), which the queue then shows
    among its arguments."""
    types = dict(getattr(arguments, "types", {}))
    types["x-queue-type"] = "longstr"
    merged = {**arguments, "x-queue-type": "classic"}
    ordered = {k: merged[k] for k in sorted(merged, key=lambda k: k.encode())}
    return spec.TypedTable(ordered, types)


def open_queue(vhost: VirtualHost, actor: Actor, name: str) -> Queue:
    """A queue the actor may read from (basic.get, basic.consume, queue.purge)."""
    check_access(vhost, actor, "read", "queue", name)
    q = vhost.get_queue(name)
    actor.check_exclusive(q, vhost.name)
    return q


def purge_queue(vhost: VirtualHost, actor: Actor, name: str) -> int:
    """How many ready messages went."""
    return open_queue(vhost, actor, name).purge()


def delete_queue(
    vhost: VirtualHost,
    actor: Actor,
    method: commands.Queue.Delete,
    before: Callable[[Queue], None] | None = None,
) -> Queue | None:
    """The queue checked for deletion (None when there is none, which is no error), and
    deleted after ``before(queue)`` runs: RabbitMQ's delete-ok goes out before the
    queue's consumers are told basic.cancel."""
    name = actor.name(method.queue)
    check_access(vhost, actor, "configure", "queue", name)
    q = vhost.queues.get(name)
    if q is None:
        return None
    actor.check_exclusive(q, vhost.name)
    vhost.check_queue_delete(q, method.if_unused, method.if_empty)
    if before is not None:
        before(q)
    vhost.remove_queue(q)
    return q
