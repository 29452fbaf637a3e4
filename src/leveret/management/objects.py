"""The management API's exchanges, queues and bindings: list, declare, delete, bind,
publish, get and purge, with RabbitMQ's answers."""

from __future__ import annotations

import base64
from datetime import UTC, datetime
from typing import Any
from urllib.parse import unquote

from aiohttp import web
from pamqp import commands

from leveret.broker import errors as rabbit
from leveret.broker import operations
from leveret.broker.consumer import Consumer
from leveret.broker.message import Message
from leveret.broker.operations import BindingRequest
from leveret.broker.queues import Queue
from leveret.broker.vhost import VirtualHost
from leveret.logs.amqp import PROPERTY_NAMES
from leveret.management import views
from leveret.management.context import mgmt
from leveret.management.httputil import (
    ApiError,
    arguments,
    as_bool,
    bad_request,
    created_or_updated,
    json_body,
    json_response,
    listing,
    no_content,
    not_found,
    rate_ages,
    require_keys,
    resource,
    scoped,
)
from leveret.protocol import errors, spec
from leveret.protocol.errors import AMQPError


# -------------------------------------------------------------------- exchanges
def exchange_name(request: web.Request) -> str:
    name = request.match_info["name"]
    return "" if name == "amq.default" else name


async def exchanges(request: web.Request) -> web.Response:
    m = mgmt(request)
    vhosts = [m.vhost(request)] if "vhost" in request.match_info else m.visible_vhosts(request)
    ages = rate_ages(request)
    out = [
        views.exchange(x, m.stats, ages)
        for v in vhosts
        for x in sorted(v.exchanges.values(), key=lambda x: x.name)
    ]
    return listing(request, out)


def _one(data: dict[str, Any], *lists: str) -> web.Response:
    """One exchange or queue as the API answers for it alone: its listing's fields, the
    lists only that answer has (``incoming`` …), empty here, and the keys sorted."""
    for key in lists:
        data[key] = []
    return json_response(dict(sorted(data.items())))


async def exchange_get(request: web.Request) -> web.Response:
    v = mgmt(request).vhost(request)
    x = v.exchanges.get(exchange_name(request))
    if x is None:
        raise not_found()
    data = views.exchange(x, mgmt(request).stats, rate_ages(request))
    return _one(data, "incoming", "outgoing")


async def exchange_put(request: web.Request) -> web.Response:
    """As RabbitMQ's API: exchange.declare with AMQP's checks, for the user."""
    m = mgmt(request)
    v = m.vhost(request)
    name = exchange_name(request)
    body = await json_body(request)
    method = spec.command(
        commands.Exchange.Declare,
        exchange=name,
        exchange_type=str(body.get("type", "direct")),
        durable=as_bool(body.get("durable")),
        auto_delete=as_bool(body.get("auto_delete")),
        internal=as_bool(body.get("internal")),
        arguments=arguments(body),
    )
    _, created = operations.declare_exchange(v, m.actor(request, v), method)
    return created_or_updated(created)


async def exchange_delete(request: web.Request) -> web.Response:
    m = mgmt(request)
    v = m.vhost(request)
    name = exchange_name(request)
    if name not in v.exchanges:
        raise not_found()
    if_unused = as_bool(request.query.get("if-unused"))
    method = spec.command(commands.Exchange.Delete, exchange=name, if_unused=if_unused)
    operations.delete_exchange(v, m.actor(request, v), method)
    return no_content()


async def exchange_publish(request: web.Request) -> web.Response:
    """As RabbitMQ's API: a publish with mandatory=true and a confirm, through the same
    path as an AMQP publish; what the broker refuses is a 400 naming the AMQP error."""
    m = mgmt(request)
    v = m.vhost(request)
    name = exchange_name(request)
    body = await json_body(request)
    require_keys(body, "routing_key", "properties", "payload", "payload_encoding")
    perm = m.open_vhost(request, v)
    encoding = body["payload_encoding"]
    if encoding == "string":
        payload = str(body["payload"]).encode()
    elif encoding == "base64":
        try:
            payload = base64.b64decode(str(body["payload"]), validate=True)
        except ValueError as exc:
            raise bad_request("payload_not_base64") from exc
    else:
        raise bad_request(f"invalid payload_encoding: {encoding}")
    props = body["properties"] or {}
    if not isinstance(props, dict):
        raise bad_request("properties must be an object")
    unknown = [k for k in props if k not in PROPERTY_NAMES]
    if unknown:
        raise bad_request(f"unknown properties: {', '.join(unknown)}")
    if isinstance(props.get("timestamp"), (int, float)) and not isinstance(
        props["timestamp"], bool
    ):
        props = dict(props, timestamp=datetime.fromtimestamp(props["timestamp"], UTC))
    try:
        properties = commands.Basic.Properties(**props) if props else None
        message = Message.build(name, str(body["routing_key"]), payload, properties)
    except (TypeError, ValueError) as exc:
        raise bad_request(str(exc)) from exc
    try:
        result = operations.publish(v, m.actor(request, v, perm), name, message, True)
    except AMQPError as exc:
        raise channel_closed(exc) from exc
    # on a channel in confirm mode, mandatory: confirmed unless refused, returned when
    # it reached no queue (RabbitMQ's rabbit_mgmt_wm_exchange_publish)
    m.stats.count_publish(
        v.name,
        confirmed=not (result.unstorable or result.refused),
        returned=bool(result.returned),
    )
    if result.unstorable:
        raise channel_closed(errors.error(spec.INTERNAL_ERROR, ""))
    if result.refused:
        raise bad_request("rejected Unable to publish message. Check queue limits.")
    return json_response({"routed": not result.returned})


def on_channel(exc: AMQPError) -> ApiError:
    """What RabbitMQ's API answers when a call on its channel fails: the AMQP reply
    text, under 404 or 401 for those codes, and as a 400 naming the code otherwise."""
    if exc.code == spec.NOT_FOUND:
        return ApiError(404, "not_found", exc.reply_text)
    if exc.code == spec.ACCESS_REFUSED:
        return ApiError(401, "not_authorised", exc.reply_text)
    return channel_closed(exc)


def channel_closed(exc: AMQPError) -> ApiError:
    """RabbitMQ's API publishes on a channel of its own; when the broker closes it, the
    answer is a 400 that names the code and the reply text."""
    return bad_request(f"{exc.code} {exc.reply_text}")


# ----------------------------------------------------------------------- queues
async def queues(request: web.Request) -> web.Response:
    m = mgmt(request)
    vhosts = [m.vhost(request)] if "vhost" in request.match_info else m.visible_vhosts(request)
    ages = rate_ages(request)
    out = [
        views.queue(q, m.broker, m.stats, ages)
        for v in vhosts
        for q in sorted(v.queues.values(), key=lambda q: q.name)
    ]
    return listing(request, out)


def queue_named(request: web.Request) -> tuple[VirtualHost, Queue]:
    v = mgmt(request).vhost(request)
    q = v.queues.get(request.match_info["name"])
    if q is None:
        raise not_found()
    return v, q


async def queue_get(request: web.Request) -> web.Response:
    m = mgmt(request)
    _, q = queue_named(request)
    data = views.queue(q, m.broker, m.stats, rate_ages(request))
    data["consumer_details"] = [
        views.consumer(c, m.broker.node_name) for c in q.consumers if isinstance(c, Consumer)
    ]
    owner = views.owner_details(q)
    if owner is not None:
        data["owner_pid_details"] = owner
    return _one(data, "deliveries", "incoming")


async def queue_put(request: web.Request) -> web.Response:
    m = mgmt(request)
    v = m.vhost(request)
    body = await json_body(request)
    method = spec.command(
        commands.Queue.Declare,
        queue=request.match_info["name"],
        durable=as_bool(body.get("durable")),
        auto_delete=as_bool(body.get("auto_delete")),
        arguments=arguments(body),
    )
    declared = operations.declare_queue(v, m.actor(request, v), method)
    return created_or_updated(declared.created)


async def queue_delete(request: web.Request) -> web.Response:
    m = mgmt(request)
    v, q = queue_named(request)
    method = spec.command(
        commands.Queue.Delete,
        queue=q.name,
        if_unused=as_bool(request.query.get("if-unused")),
        if_empty=as_bool(request.query.get("if-empty")),
    )
    operations.delete_queue(v, m.actor(request, v), method)
    return no_content()


async def queue_purge(request: web.Request) -> web.Response:
    m = mgmt(request)
    v, q = queue_named(request)
    operations.purge_queue(v, m.actor(request, v), q.name)
    return no_content()


def message_properties(message: Message) -> Any:
    props = message.props
    out = {}
    for name in PROPERTY_NAMES:
        value = getattr(props, name, None)
        if value is not None and value != "" and not (name == "headers" and not value):
            out[name] = views.jsonable(value)
    stamp = props.timestamp
    if "timestamp" in out and stamp is not None and hasattr(stamp, "timestamp"):
        out["timestamp"] = int(stamp.timestamp())
    return dict(sorted(out.items())) or []  # RabbitMQ answers no properties as []


async def queue_get_messages(request: web.Request) -> web.Response:
    """As RabbitMQ's API: basic.get on a channel of the user's own, so what the channel
    refuses is answered with its AMQP text."""
    m = mgmt(request)
    v = m.vhost(request)
    body = await json_body(request)
    require_keys(body, "ackmode", "count", "encoding")
    perm = m.open_vhost(request, v)
    ackmode = body["ackmode"]
    if ackmode not in (
        "ack_requeue_true",
        "ack_requeue_false",
        "reject_requeue_true",
        "reject_requeue_false",
    ):
        raise bad_request(f"invalid ackmode: {ackmode}")
    encoding = body["encoding"]
    if encoding not in ("auto", "base64"):
        raise bad_request(f"invalid encoding: {encoding}")
    try:
        count = int(body["count"])
        truncate = int(body["truncate"]) if body.get("truncate") is not None else None
    except (TypeError, ValueError) as exc:
        raise bad_request("count and truncate must be integers") from exc
    name = request.match_info["name"]
    try:
        q = operations.open_queue(v, m.actor(request, v, perm), name)
    except AMQPError as exc:
        raise on_channel(exc) from exc
    entries = []
    out = []
    # rabbit_mgmt_wm_queue_get's parse_ackmode: ack_requeue_false fetches without an
    # acknowledgement (get_no_ack in the statistics), the other modes with one
    no_ack = ackmode == "ack_requeue_false"
    for _ in range(max(0, count)):
        entry = q.get(no_ack=no_ack)
        if entry is None:
            break
        entries.append(entry)
        msg = entry.message
        payload = msg.body if truncate is None else msg.body[:truncate]
        item: dict[str, Any] = {
            "payload_bytes": len(msg.body),
            "redelivered": entry.redelivered,
            "exchange": msg.exchange,
            "routing_key": msg.routing_key,
            "message_count": q.message_count,
            "properties": message_properties(msg),
        }
        text: str | None = None
        if encoding == "auto":
            try:
                text = payload.decode("utf-8")
            except UnicodeDecodeError:
                text = None
        if text is not None:
            item["payload"], item["payload_encoding"] = text, "string"
        else:
            item["payload"] = base64.b64encode(payload).decode()
            item["payload_encoding"] = "base64"
        out.append(item)
    # As RabbitMQ's API (basic.get, then basic.reject for the modes that acknowledge):
    # the same settling as an AMQP client's, so reject_requeue_false dead-letters.
    if ackmode == "ack_requeue_true":
        q.requeue(entries)
    elif not no_ack:
        q.reject(entries, requeue=ackmode.endswith("requeue_true"))
    return json_response(out)


def listed_vhost(request: web.Request) -> VirtualHost | None:
    """The vhost of a binding listing, None when there is none: rabbit_mgmt_wm_bindings
    lists what the names given match, whether or not they exist, and a vhost that does
    not exist lets everyone in and lists nothing (rabbit_mgmt_util:user_matches_vhost)."""
    m = mgmt(request)
    if request.match_info["vhost"] not in m.broker.vhosts:
        return None
    return m.vhost(request)


async def queue_bindings(request: web.Request) -> web.Response:
    v = listed_vhost(request)
    if v is None:
        return json_response([])
    name = request.match_info["name"]
    q = v.queues.get(name)
    out = [views.default_binding(v.name, name)]
    out += [
        views.binding(v.name, b)
        for b in sorted(v.bindings(), key=lambda b: (b.source, b.routing_key))
        if q is not None and b.destination is q
    ]
    return json_response(out)


# --------------------------------------------------------------------- bindings
async def bindings(request: web.Request) -> web.Response:
    m = mgmt(request)
    vhosts = [m.vhost(request)] if "vhost" in request.match_info else m.visible_vhosts(request)
    return listing(request, [b for v in vhosts for b in views.all_bindings(v)])


async def exchange_bindings(request: web.Request) -> web.Response:
    v = listed_vhost(request)
    if v is None:
        return json_response([])
    name = exchange_name(request)
    as_source = request.match_info["direction"] == "source"
    out = [
        b
        for b in views.all_bindings(v)
        if (
            b["source"] == name
            if as_source
            else (b["destination_type"] == "exchange" and b["destination"] == name)
        )
    ]
    return json_response(out)


def binding_names(request: web.Request) -> tuple[str, str, str]:
    """Source, destination kind and destination; 'amq.default' names the default
    exchange at either end, as rabbit_mgmt_util:id does."""
    source = request.match_info["source"]
    dest = request.match_info["dest"]
    kind = "queue" if request.match_info["kind"] == "q" else "exchange"
    if kind == "exchange" and dest == "amq.default":
        dest = ""
    return ("" if source == "amq.default" else source), kind, dest


def binding_ends(request: web.Request) -> tuple[VirtualHost, Any, Any]:
    v = mgmt(request).vhost(request)
    source, kind, dest = binding_names(request)
    src = v.exchanges.get(source)
    if src is None:
        raise rabbit.no_exchange(source, v.name)
    target = v.queues.get(dest) if kind == "queue" else v.exchanges.get(dest)
    if target is None:
        raise rabbit.no_queue(dest, v.name) if kind == "queue" else rabbit.no_exchange(dest, v.name)
    return v, src, target


def between(v: VirtualHost, source: str, kind: str, dest: str) -> list[dict[str, Any]]:
    """The bindings from exchange ``source`` to the ``kind`` named ``dest``."""
    return [
        b
        for b in views.all_bindings(v)
        if b["source"] == source and b["destination"] == dest and b["destination_type"] == kind
    ]


async def bindings_between(request: web.Request) -> web.Response:
    v = listed_vhost(request)
    if v is None:
        return json_response([])
    source, kind, dest = binding_names(request)
    if source == "" and kind == "queue":  # the implicit binding, queue or no queue
        return json_response([views.default_binding(v.name, dest)])
    return json_response(between(v, source, kind, dest))


async def binding_create(request: web.Request) -> web.Response:
    """As RabbitMQ's API: queue.bind or exchange.bind with AMQP's checks, for the user."""
    m = mgmt(request)
    v = m.vhost(request)
    body = await json_body(request)
    key = str(body.get("routing_key", ""))
    args = arguments(body)
    source, kind, dest = binding_names(request)
    operations.bind(v, m.actor(request, v), BindingRequest(source, kind, dest, key, args))
    location = views.properties_key(key, args)
    return web.Response(status=201, headers={"Location": location})


async def binding_one(request: web.Request) -> web.Response:
    v, src, target = binding_ends(request)
    props = request.match_info["props"]
    for b in between(v, src.name, target.kind, target.name):
        if unquote(b["properties_key"]) == props or b["properties_key"] == props:
            if request.method == "DELETE":
                actor = mgmt(request).actor(request, v)
                binding = BindingRequest(
                    src.name, target.kind, target.name, b["routing_key"], b["arguments"]
                )
                operations.unbind(v, actor, binding)
                return no_content()
            return json_response(b)
    raise not_found()


def routes(app: web.Application) -> None:
    r = app.router
    item = "/api/exchanges/{vhost}/{name}"
    scoped(r, "/api/exchanges", exchanges, "{vhost}")
    resource(r, item, exchange_get, put=exchange_put, delete=exchange_delete)
    resource(r, item + "/bindings/{direction:source|destination}", exchange_bindings)
    resource(r, item + "/publish", post=exchange_publish)
    item = "/api/queues/{vhost}/{name}"
    scoped(r, "/api/queues", queues, "{vhost}")
    resource(r, item, queue_get, put=queue_put, delete=queue_delete)
    resource(r, item + "/contents", delete=queue_purge)
    resource(r, item + "/get", post=queue_get_messages)
    resource(r, item + "/bindings", queue_bindings)
    scoped(r, "/api/bindings", bindings, "{vhost}")
    ends = "/api/bindings/{vhost}/e/{source}/{kind:q|e}/{dest}"
    resource(r, ends, bindings_between, post=binding_create)
    resource(r, ends + "/{props}", binding_one, delete=binding_one)
