"""The broker's operations, one function each: declare, delete, bind, unbind, publish,
purge, set and clear global parameters, and the checks before them. AMQP's session, the
stream protocol and the management API call the same functions with an :class:`Actor`
(who acts, with which permissions, on which connection), so a rule lives in one place;
where the two sides differ on purpose (exclusive queues, CR/LF in names) the actor says
so. Declaring and deleting an exchange or a queue take the AMQP method record itself: the
session passes the one it decoded, and the management API builds one (``spec.command``), as
RabbitMQ's management plugin sends #'queue.declare'{} and the like on a channel.

Each operation returns its result or raises the AMQPError RabbitMQ's channel would
close with; the caller turns that into its own answer (channel.close, an HTTP status).
:class:`~leveret.broker.vhost.VirtualHost` keeps the state and routes; it checks nothing
on anyone's behalf."""

from __future__ import annotations

from leveret.broker.operations.actor import Actor
from leveret.broker.operations.authorization import check_access
from leveret.broker.operations.bindings import BindingRequest, bind, unbind
from leveret.broker.operations.exchanges import declare_exchange, delete_exchange
from leveret.broker.operations.global_parameters import (
    clear_global_parameter,
    seed_internal_cluster_id,
    set_cluster_name,
    set_global_parameter,
)
from leveret.broker.operations.publish import authorize_publish, publish
from leveret.broker.operations.queues import (
    declare_queue,
    delete_queue,
    open_queue,
    purge_queue,
)

__all__ = [
    "Actor",
    "BindingRequest",
    "authorize_publish",
    "bind",
    "check_access",
    "clear_global_parameter",
    "declare_exchange",
    "declare_queue",
    "delete_exchange",
    "delete_queue",
    "open_queue",
    "publish",
    "purge_queue",
    "seed_internal_cluster_id",
    "set_cluster_name",
    "set_global_parameter",
    "unbind",
]
