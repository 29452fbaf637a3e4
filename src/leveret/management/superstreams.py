"""``PUT /api/stream/super-streams/{vhost}/{name}``: RabbitMQ 4.2's management endpoint
that creates a super stream (rabbitmq_stream_management's rabbit_stream_super_stream_mgmt,
first in v4.2.0; served in the 4.2 mode only).

The body names ``partitions`` (a number, or a string of one) or ``binding-keys`` (a
comma-separated string), with optional ``arguments`` for the partition streams and
``node``. Its checks, their order and their texts are v4.2.9's; the super stream is made by
:mod:`leveret.broker.operations.super_streams` (as the stream protocol's CreateSuperStream
makes it) with the acting user's permissions. The resource allows PUT only (no DELETE: a
super stream is deleted by the stream protocol or ``leveret ctl delete_super_stream``)."""

from __future__ import annotations

import json
import re
from typing import Any

from aiohttp import web

from leveret.broker.operations import super_streams as ss
from leveret.management.context import mgmt
from leveret.management.erlterm import Atom, Term, reason_text
from leveret.management.httputil import (
    ApiError,
    access_refused,
    bad_request,
    created_or_updated,
    is_admin,
    resource,
)

PATH = "/api/stream/super-streams/{vhost}/{name}"
_INTEGER = re.compile(r"[+-]?[0-9]+")  # what binary_to_integer takes


async def _body(request: web.Request) -> dict[str, Any]:
    """rabbit_mgmt_util:decode: an empty body (or ``null``) is an empty object; a JSON
    string and anything else that is not an object are refused with its texts."""
    raw = await request.read()
    if raw in (b"", b"null", b"undefined"):
        return {}
    try:
        data = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        raise bad_request("not_json") from None
    if isinstance(data, str):
        raise bad_request(
            "invalid payload: the request body JSON-decoded to a string. "
            "Is the input doubly-JSON-encoded?"
        )
    if not isinstance(data, dict):
        raise bad_request("not_json")
    return data


def _binding_keys_text(value: Any) -> str:
    """rabbit_data_coercion:to_binary of the decoded JSON value: a string as it is, a
    number's digits, true/false/null as the atoms' names, a list of strings run together."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return "".join(value)
    # RabbitMQ fails on anything else (a crash, HTTP 500): refused here instead
    raise bad_request("The binding keys must be a string")


def _check_choice(body: dict[str, Any]) -> None:
    """validate_partitions_or_binding_keys."""
    has_partitions, has_keys = "partitions" in body, "binding-keys" in body
    if not has_partitions and not has_keys:
        raise bad_request("Must specify partitions or binding keys")
    if has_partitions and has_keys:
        raise bad_request("Specify partitions or binding keys, not both")
    if has_keys:
        text = _binding_keys_text(body["binding-keys"])
        # a cheap bound first (commas + 1), as RabbitMQ guards against huge bodies
        if text.count(",") + 1 > ss.MAX_PARTITIONS:
            raise bad_request(f"The number of binding keys must not exceed {ss.MAX_PARTITIONS}")
        if not ss.binding_keys(text):
            raise bad_request("The number of binding keys must be greater than 0")


def _partitions(value: Any) -> int:
    """validate_partitions: rabbit_data_coercion:to_integer (a JSON integer, or a string
    of digits), at least 1, at most the maximum."""
    if isinstance(value, int) and not isinstance(value, bool):
        number = value
    elif isinstance(value, str) and _INTEGER.fullmatch(value):
        number = int(value)
    else:
        raise bad_request("The partitions must be a number")
    if number < 1:
        raise bad_request("The partition number must be greater than 0")
    if number > ss.MAX_PARTITIONS:
        raise bad_request(f"The partition number must not exceed {ss.MAX_PARTITIONS}")
    return number


def _check_node(request: web.Request, body: dict[str, Any]) -> None:
    """get_node: ``node`` must name a cluster member (this node), its host part taken
    from this node's name when it has none (rabbit_nodes:resolve_member)."""
    if "node" not in body:
        return
    node = str(body["node"])
    ours = mgmt(request).broker.node_name
    full = node if "@" in node else f"{node}@{ours.partition('@')[2]}"
    if full != ours:
        raise bad_request(f"Node {node} is not a cluster member")


def _failure(exc: ss.SuperStreamRefused) -> Term:
    """The manager's ``{error, Reason}`` as the endpoint formats it."""
    if exc.kind is ss.Refusal.INTERNAL:
        # a partition's create answered {error, validation_failed}
        return Atom("validation_failed")
    message: Term = (exc.message,) if exc.nested else exc.message
    return (Atom(exc.kind.value if exc.kind is ss.Refusal.EXISTS else "validation_failed"),
            message)  # fmt: skip


async def put_super_stream(request: web.Request) -> web.Response:
    """Create a super stream: 204 (201 when the vhost does not exist, which is refused
    before anything is made: no permissions there)."""
    m = mgmt(request)
    vhost_name, name = request.match_info["vhost"], request.match_info["name"]
    v = m.broker.vhosts.get(vhost_name)
    perm = m.permission(request, vhost_name)
    # rabbit_web_dispatch_access_control:is_authorized_vhost at v4.2.9: an administrator,
    # or a user with access to the vhost; anyone else hears of no such thing
    if v is not None and perm is None and not is_admin(request):
        raise ApiError(404, "not_found", "Not Found")
    # cowboy takes a PUT to a missing resource (here: a missing vhost) to accept_content,
    # where the permission check refuses it: no one has permissions in it
    if v is None or perm is None or not perm.allows("configure", name):
        raise access_refused()
    body = await _body(request)
    _check_choice(body)
    arguments = ss.arguments_of(body.get("arguments", {}))
    _check_node(request, body)
    if "partitions" in body:
        count = _partitions(body["partitions"])
        streams, keys = ss.partition_names(name, count), ss.routing_keys(count)
    else:
        keys = ss.binding_keys(_binding_keys_text(body["binding-keys"]))
        streams = ss.names_from_binding_keys(name, keys)
    actor = m.actor(request, v, perm)
    if not ss.management_permitted(v, actor, name, streams):
        raise access_refused()
    try:
        ss.create_super_stream(v, actor, name, streams, keys, arguments)
    except ss.SuperStreamRefused as exc:
        raise bad_request(reason_text(_failure(exc))) from None
    return created_or_updated(False)


def routes(app: web.Application) -> None:
    """The endpoint (the 4.2 mode registers it; RabbitMQ 3.10.8 has no such path)."""
    resource(app.router, PATH, put=put_super_stream)
