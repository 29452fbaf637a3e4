"""RabbitMQ 4.2's AMQP management node (rabbit_amqp_management): the requests the official
AMQP 1.0 clients send on their ``/management`` link pair, answered as RabbitMQ answers them.

A request is an HTTP method (the message's subject) on a target (its ``to``): ``GET``,
``PUT`` or ``DELETE /queues/:queue``, ``DELETE /queues/:queue/messages`` (purge), ``PUT``
or ``DELETE /exchanges/:exchange``, ``POST /bindings``, ``DELETE
/bindings/src=…;dstq=…;key=…;args=…``, ``GET /bindings?src=…&dstq=…&key=…`` and ``PUT
/auth/tokens``. The answer is a status (the response's subject) and a body; a refusal's
body is its reason. As in RabbitMQ:

- what a user may not do ends the AMQP session (amqp:unauthorized-access), it is no
  status: RabbitMQ's session checks permissions (rabbit_amqp_session:check_resource_access)
  and exits;
- a request RabbitMQ has no clause for (another method or path, a body of the wrong kind)
  crashes its session: the session ends with amqp:internal-error (:class:`Crash`);
- reserved names (``amq.``) and the default exchange are 403, a vhost's queue limit 403,
  inequivalent declarations 409, a missing queue 404 where RabbitMQ says so, and what
  the broker's operations refuse otherwise 400.

The broker's operations (:mod:`leveret.broker.operations`) do the work; this module
makes the management node's own checks first, in its order and with its texts (they
differ from AMQP 0-9-1's: ``configure access to queue …`` names the permission, names
with CR or LF are refused rather than stripped, exclusive queues stay durable)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pamqp import commands

from leveret.broker import operations
from leveret.broker.amqp10_mgmt_wire import (
    MISSING,
    NULL,
    Crash,
    Refusal,
    args_from_amqp,
    args_hash,
    args_to_amqp,
    binding_location,
    binding_segment,
    decode_request,
    encode_response,
    parse_target,
    query_term,
    term,
    urldecode,
)
from leveret.broker.exchanges import exchange_type
from leveret.broker.limits import check_queue_limit
from leveret.broker.operations import Actor, BindingRequest
from leveret.broker.operations.topics import authorize_topic
from leveret.broker.queues import (
    QUEUE_TYPES,
    ClassicQueue,
    Declaration,
    Queue,
    queue_type_name,
)
from leveret.broker.vhost import VirtualHost
from leveret.protocol import spec
from leveret.protocol.amqp10 import definitions as d
from leveret.protocol.amqp10.types import Value
from leveret.protocol.errors import AMQPError
from leveret.protocol.spec import TypedTable, type_of

log = logging.getLogger(__name__)


class SessionEnd(Exception):
    """The request ends the AMQP session with ``error`` (RabbitMQ's session exits)."""

    def __init__(self, error: d.Error) -> None:
        super().__init__(error.description)
        self.error = error


@dataclass(frozen=True, slots=True)
class Node:
    """Who asks and where: the vhost, the actor (user, permissions, connection), the node's
    name (a queue's leader and replicas), and ``owned``, told of each exclusive queue
    declared (the connection deletes them when it closes)."""

    vhost: VirtualHost
    actor: Actor
    node_name: str
    owned: Callable[[Queue], None]


def handle_request(payload: bytes, node: Node) -> bytes:
    """The response message to a request message. SessionEnd when the request ends the
    session instead."""
    try:
        request = decode_request(payload)
        try:
            segments, query = parse_target(request.target)
            status, body = _dispatch(node, request.method, segments, query, request.body)
        except Refusal as refusal:
            log.warning("request %s %s failed: %s", request.method, request.target, refusal.text)
            status, body = refusal.status, ("string", refusal.text)
    except Crash as crash:
        raise SessionEnd(d.Error(d.INTERNAL_ERROR, crash.reason)) from None
    return encode_response(request.message_id, status, body)


def _dispatch(
    node: Node, method: str, path: list[str], query: dict[str, str | bool], body: Value
) -> tuple[str, Value]:
    """rabbit_amqp_management:handle_http_req's clauses, in their order: no clause, no
    answer (a function_clause)."""
    null = body == NULL
    match method, path:
        case "GET", ["queues", queue] if null:
            return _get_queue(node, queue)
        case "PUT", ["queues", queue]:
            return _put_queue(node, queue, body)
        case "PUT", ["exchanges", exchange]:
            return _put_exchange(node, exchange, body)
        case "DELETE", ["queues", queue, "messages"] if null:
            return _purge_queue(node, queue)
        case "DELETE", ["queues", queue] if null:
            return _delete_queue(node, queue)
        case "DELETE", ["exchanges", exchange] if null:
            return _delete_exchange(node, exchange)
        case "POST", ["bindings"]:
            return _post_binding(node, body)
        case "DELETE", ["bindings", segment] if null:
            return _delete_binding(node, segment)
        case "GET", ["bindings"] if null and "src" in query and "key" in query:
            return _get_bindings(node, query)
        case "PUT", ["auth", "tokens"]:
            if body[0] != "binary":
                raise Crash("{badmatch," + term(body) + "}")
            # the internal backend's credential never expires: the update changes nothing
            return "204", NULL
    raise Crash("function_clause")


# ----------------------------------------------------------------- the checks
def _check(node: Node, what: str, kind: str, name: str) -> None:
    """rabbit_amqp_session:check_resource_access: a refusal ends the session."""
    permission = node.actor.permission
    lookup = "amq.default" if kind == "exchange" and name == "" else name
    if permission is None or not permission.allows(what, lookup):
        raise SessionEnd(
            d.Error(
                d.UNAUTHORIZED_ACCESS,
                f"{what} access to {kind} '{lookup}' in vhost '{node.vhost.name}' refused "
                f"for user '{node.actor.username}'",
            )
        )


def _check_any(node: Node, kind: str, name: str) -> None:
    """Any of read, write, configure (as a passive queue.declare): the last refusal
    ends the session."""
    permission = node.actor.permission
    if permission is not None and any(permission.allows(w, name) for w in ("read", "write")):
        return
    _check(node, "configure", kind, name)


def _no_cr_lf(name: str) -> None:
    if "\n" in name or "\r" in name:
        raise Refusal(
            "400", f"Bad name '{name}': line feed and carriage return characters not allowed"
        )


def _not_default(kind: str, name: str) -> None:
    if kind == "exchange" and name == "":
        raise Refusal("403", "operation not permitted on the default exchange")


def _not_reserved(kind: str, name: str, vhost: str) -> None:
    if name.startswith("amq."):
        raise Refusal(
            "403", f"{kind} '{name}' in vhost '{vhost}' starts with reserved prefix 'amq.'"
        )


def _routing_arg(node: Node, kind: str, name: str, arguments: Any, key: str) -> None:
    """check_routing_arg: an alternate or dead-letter exchange is a long string (400
    otherwise); read on what is declared, write on the exchange it names."""
    value = arguments.get(key)
    if value is None and key not in arguments:
        return
    wire = type_of(arguments, key)
    if wire != "longstr":
        raise Refusal("400", f"invalid type '{wire}' for arg '{key}'")
    _check(node, "read", kind, name)
    target = value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
    _check(node, "write", "exchange", target)


def _of_property(exc: AMQPError) -> bool:
    """A queue type's refusal of a property (auto-delete, exclusive, non-durable): RabbitMQ
    4.2's queue types return these as protocol errors (400), where an argument's refusal
    exits (409)."""
    return _error_text(exc).startswith("invalid property '")


def _error_text(exc: AMQPError) -> str:
    text = exc.reply_text
    _, sep, rest = text.partition(" - ")
    return rest if sep else text


# ------------------------------------------------------------------- queues
def _stat(q: Queue) -> tuple[int, int]:
    """rabbit_amqqueue:stat: ready messages (as queue.declare-ok counts them) and
    consumers (a stream's stat counts none)."""
    consumers = 0 if q.type_name == "stream" else q.consumer_count
    return q.declare_ok_count({}), consumers


def _queue_body(node: Node, q: Queue, messages: int, consumers: int) -> Value:
    """encode_queue: a one-node broker's queue leads and is replicated on that node."""
    n = ("string", node.node_name)

    def field(key: str, value: Value) -> tuple[Value, Value]:
        return ("string", key), value

    return (
        "map",
        [
            field("leader", n),
            field("message_count", ("ulong", messages)),
            field("consumer_count", ("uint", consumers)),
            field("name", ("string", q.name)),
            field("vhost", ("string", q.vhost)),
            field("durable", ("bool", q.durable)),
            field("auto_delete", ("bool", q.auto_delete)),
            field("exclusive", ("bool", q.exclusive_owner is not None)),
            field("type", ("string", q.type_name)),
            field("arguments", args_to_amqp(q.arguments)),
            field("replicas", ("array", [n])),
        ],
    )


def _count_body(count: int) -> Value:
    return ("map", [(("string", "message_count"), ("ulong", count))])


def _get_queue(node: Node, raw: str) -> tuple[str, Value]:
    name = urldecode(raw)
    _check_any(node, "queue", name)
    q = node.vhost.queues.get(name)
    if q is None:
        raise Refusal("404", f"queue '{name}' in vhost '{node.vhost.name}' not found")
    return "200", _queue_body(node, q, *_stat(q))


@dataclass(frozen=True, slots=True)
class _QueueProps:
    durable: bool = True
    exclusive: bool = False
    auto_delete: bool = False
    arguments: TypedTable | None = None


def _decode_props(body: Value, what: str, booleans: tuple[str, ...]) -> dict[str, Any]:
    """decode_queue / decode_exchange: a map of known keys, refused at the first other."""
    if body[0] != "map":
        raise Crash("function_clause")
    out: dict[str, Any] = {}
    for k, v in body[1]:
        key = k[1] if k[0] == "string" else None
        if key in booleans and v[0] == "bool":
            out[key] = v[1]
        elif key == "arguments":
            out[key] = args_from_amqp(v)
        elif key == "type" and what == "exchange" and v[0] == "string":
            out[key] = v[1]
        else:
            raise Refusal("400", f"bad {what} property {term(('list', [k, v]), tuple_=True)}")
    return out


def _put_queue(node: Node, raw: str, body: Value) -> tuple[str, Value]:
    props = _QueueProps(**_decode_props(body, "queue", ("durable", "exclusive", "auto_delete")))
    name = urldecode(raw)
    vhost = node.vhost
    arguments = props.arguments if props.arguments is not None else TypedTable({})
    if "x-queue-type" not in arguments:
        # augment_declare_args: the type is written down (classic: no vhost default here)
        arguments = TypedTable(dict(sorted({**arguments, "x-queue-type": "classic"}.items())))
        arguments.types.update(getattr(props.arguments, "types", {}))
        arguments.types["x-queue-type"] = "longstr"
    if name == "":
        raise Refusal("400", "declare queue with empty name not allowed")
    _no_cr_lf(name)
    _not_reserved("queue", name, vhost.name)
    _check(node, "configure", "queue", name)
    if name not in vhost.queues:
        _routing_arg(node, "queue", name, arguments, "x-dead-letter-exchange")
        # rabbit_amqqueue:declare's order: the arguments (exits, 409), the vhost's queue
        # limit (403), then what the queue type refuses of the properties (400)
        owner = node.actor.connection if props.exclusive else None
        kind = QUEUE_TYPES.get(queue_type_name(arguments), ClassicQueue)
        declaration = Declaration(
            name, vhost.name, props.durable, owner, props.auto_delete, arguments
        )
        refused: AMQPError | None = None
        try:
            kind.validate(declaration)
        except AMQPError as exc:
            if not _of_property(exc):
                raise Refusal("409", _error_text(exc)) from None
            refused = exc
        try:
            check_queue_limit(vhost, name)
        except AMQPError as exc:
            raise Refusal("403", _error_text(exc)) from None
        if refused is not None:
            raise Refusal("400", _error_text(refused))
    method = spec.command(
        commands.Queue.Declare,
        queue=name,
        durable=props.durable,
        exclusive=props.exclusive,
        auto_delete=props.auto_delete,
        arguments=arguments,
    )
    try:
        declared = operations.declare_queue(vhost, node.actor, method, transient_exclusive=False)
    except AMQPError as exc:
        conflict = exc.code == spec.PRECONDITION_FAILED and not _of_property(exc)
        raise Refusal("409" if conflict else "400", _error_text(exc)) from None
    q = declared.queue
    if declared.created:
        if q.exclusive_owner is not None:
            node.owned(q)
        return "201", _queue_body(node, q, 0, 0)
    return "200", _queue_body(node, q, *_stat(q))


def _purge_queue(node: Node, raw: str) -> tuple[str, Value]:
    name = urldecode(raw)
    _check(node, "read", "queue", name)
    try:
        q = operations.open_queue(node.vhost, node.actor, name)
    except AMQPError as exc:
        raise Refusal("404" if exc.code == spec.NOT_FOUND else "400", _error_text(exc)) from None
    try:
        count = q.purge()
    except AMQPError:  # a stream: rabbit_stream_queue:purge is not_supported
        raise Refusal("400", f"purge not supported by {q.where}") from None
    return "200", _count_body(count)


def _delete_queue(node: Node, raw: str) -> tuple[str, Value]:
    name = urldecode(raw)
    _no_cr_lf(name)
    _check(node, "configure", "queue", name)
    counted: list[int] = []
    method = spec.command(commands.Queue.Delete, queue=name)
    try:
        operations.delete_queue(
            node.vhost,
            node.actor,
            method,
            before=lambda q: counted.append(q.declare_ok_count({})),
        )
    except AMQPError as exc:
        raise Refusal("400", _error_text(exc)) from None
    return "200", _count_body(counted[0] if counted else 0)


# ---------------------------------------------------------------- exchanges
def _put_exchange(node: Node, raw: str, body: Value) -> tuple[str, Value]:
    name = urldecode(raw)
    props = {"durable": True, "auto_delete": False, "internal": False, "type": "direct"}
    props |= _decode_props(body, "exchange", ("durable", "auto_delete", "internal"))
    arguments = props.get("arguments") or TypedTable({})
    type_name = str(props["type"])
    try:
        exchange_type(type_name, node.vhost.compat.v4)
    except AMQPError as exc:
        raise Refusal("400", _error_text(exc)) from None
    vhost = node.vhost
    _not_default("exchange", name)
    _check(node, "configure", "exchange", name)
    new = name not in vhost.exchanges
    if new:
        _no_cr_lf(name)
        _not_reserved("exchange", name, vhost.name)
        _routing_arg(node, "exchange", name, arguments, "alternate-exchange")
    method = spec.command(
        commands.Exchange.Declare,
        exchange=name,
        exchange_type=type_name,
        durable=props["durable"],
        auto_delete=props["auto_delete"],
        internal=props["internal"],
        arguments=arguments,
    )
    try:
        operations.declare_exchange(vhost, node.actor, method)
    except AMQPError as exc:
        if new:  # rabbit_exchange:declare's refusals are not caught: the session crashes
            raise Crash(f'{{amqp_error,{_error_name(exc)},"{_error_text(exc)}",none}}') from None
        status = "409" if exc.code == spec.PRECONDITION_FAILED else "400"
        raise Refusal(status, _error_text(exc)) from None
    return "204", NULL


def _error_name(exc: AMQPError) -> str:
    text = exc.reply_text
    head, sep, _ = text.partition(" - ")
    return head.lower() if sep else "internal_error"


def _delete_exchange(node: Node, raw: str) -> tuple[str, Value]:
    name = urldecode(raw)
    vhost = node.vhost
    _no_cr_lf(name)
    _not_default("exchange", name)
    _not_reserved("exchange", name, vhost.name)
    _check(node, "configure", "exchange", name)
    method = spec.command(commands.Exchange.Delete, exchange=name)
    try:
        operations.delete_exchange(vhost, node.actor, method)
    except AMQPError as exc:
        raise Refusal("400", _error_text(exc)) from None
    return "204", NULL


# ----------------------------------------------------------------- bindings
def _binding_checks(node: Node, source: str, kind: str, destination: str, key: str) -> None:
    """binding_checks: neither end the default exchange nor a name with CR/LF, write on
    the destination, read on the source, and read on the binding key's topic."""
    for k, name in (("exchange", source), (kind, destination)):
        _not_default(k, name)
        _no_cr_lf(name)
    _check(node, "write", kind, destination)
    _check(node, "read", "exchange", source)
    src = node.vhost.exchanges.get(source)
    if src is not None and node.vhost.topic_permissions:
        try:
            authorize_topic(node.vhost, src, node.actor.username, key, "read")
        except AMQPError as exc:
            raise SessionEnd(d.Error(d.UNAUTHORIZED_ACCESS, "read " + _error_text(exc))) from None


def _post_binding(node: Node, body: Value) -> tuple[str, Value]:
    if body[0] != "map":
        raise Crash("function_clause")
    fields: dict[str, Any] = {}
    for k, v in body[1]:
        key = k[1] if k[0] == "string" else None
        if key in ("source", "destination_queue", "destination_exchange", "binding_key"):
            if v[0] == "string":
                fields[key] = v[1]
                continue
        elif key == "arguments":
            fields[key] = args_from_amqp(v)
            continue
        raise Refusal("400", f"bad binding field {term(('list', [k, v]), tuple_=True)}")
    if not {"source", "binding_key", "arguments"} <= fields.keys():
        raise Crash("{badmatch,#{...}}")
    if "destination_queue" in fields:
        kind, destination = "queue", fields["destination_queue"]
    elif "destination_exchange" in fields:
        kind, destination = "exchange", fields["destination_exchange"]
    else:
        raise Crash("{case_clause,#{...}}")
    source, key, arguments = fields["source"], fields["binding_key"], fields["arguments"]
    _binding_checks(node, source, kind, destination, key)
    request = BindingRequest(source, kind, destination, key, arguments)
    try:
        operations.bind(node.vhost, node.actor, request)
    except AMQPError as exc:
        raise Refusal("400", _error_text(exc)) from None
    return "204", NULL


def _matching(node: Node, source: str, kind: str, destination: str, key: str) -> list[Any]:
    """rabbit_binding:list_for_source_and_destination, with the binding key ``key``."""
    src = node.vhost.exchanges.get(source)
    if src is None:
        return []
    return [
        b
        for b in src.bindings.values()
        if b.destination.kind == kind and b.destination.name == destination and b.routing_key == key
    ]


def _delete_binding(node: Node, segment: str) -> tuple[str, Value]:
    source, kind, destination, key, hashed = binding_segment(segment)
    _binding_checks(node, source, kind, destination, key)
    for b in _matching(node, source, kind, destination, key):
        if args_hash(b.arguments) == hashed:
            request = BindingRequest(source, kind, destination, key, b.arguments)
            try:
                operations.unbind(node.vhost, node.actor, request)
            except AMQPError as exc:
                raise Refusal("400", _error_text(exc)) from None
            break
    return "204", NULL


def _get_bindings(node: Node, query: dict[str, str | bool]) -> tuple[str, Value]:
    if "dste" in query:
        kind, destination = "exchange", query["dste"]
    elif "dstq" in query:
        kind, destination = "queue", query["dstq"]
    else:
        raise Refusal("400", f"missing 'dste' or 'dstq' in query: {query_term(query)}")
    source, key = query["src"], query["key"]
    if not (isinstance(source, str) and isinstance(destination, str) and isinstance(key, str)):
        raise Crash("badarg")  # a parameter without '=' is the atom true
    _binding_checks(node, source, kind, destination, key)
    found = []
    for b in _matching(node, source, kind, destination, key):
        found.append(
            (
                "map",
                [
                    (("string", "source"), ("string", source)),
                    (("string", f"destination_{kind}"), ("string", destination)),
                    (("string", "binding_key"), ("string", key)),
                    (("string", "arguments"), args_to_amqp(b.arguments)),
                    (
                        ("string", "location"),
                        ("string", binding_location(source, kind, destination, key, b.arguments)),
                    ),
                ],
            )
        )
    return "200", ("list", found)


__all__ = ["MISSING", "Node", "SessionEnd", "handle_request"]
