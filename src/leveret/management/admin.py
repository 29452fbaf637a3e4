"""The administrator's part of the management API: users, vhosts, permissions and
definitions, changed through the broker's methods, whose events the store keeps."""

from __future__ import annotations

import re
from typing import Any

from aiohttp import web

from leveret.broker.definitions import export_definitions, import_definitions
from leveret.management import views
from leveret.management.context import mgmt
from leveret.management.httputil import (
    ApiError,
    bad_request,
    created_or_updated,
    current_user,
    definitions_body,
    json_body,
    json_response,
    listing,
    no_content,
    not_found,
    rate_ages,
    require_admin,
    require_keys,
    resource,
)


def _tags(value: Any) -> list[str]:
    if isinstance(value, list):
        return [str(t).strip() for t in value if str(t).strip()]
    return [t.strip() for t in str(value or "").split(",") if t.strip()]


# ------------------------------------------------------------------------ users
async def users(request: web.Request) -> web.Response:
    require_admin(request)
    b = mgmt(request).broker
    return listing(request, [views.user(u) for _, u in sorted(b.users.users.items())])


async def users_without_permissions(request: web.Request) -> web.Response:
    require_admin(request)
    b = mgmt(request).broker
    with_perms = {user for user, _ in b.users.permissions}
    return json_response(
        [views.user(u) for n, u in sorted(b.users.users.items()) if n not in with_perms]
    )


async def user_get(request: web.Request) -> web.Response:
    require_admin(request)
    return json_response(views.user(mgmt(request).user(request)))


async def user_put(request: web.Request) -> web.Response:
    require_admin(request)
    b = mgmt(request).broker
    name = request.match_info["user"]
    body = await json_body(request)
    if "tags" not in body:
        raise bad_request("tags_not_present")
    tags = _tags(body["tags"])
    # without a password or a hash, RabbitMQ makes a user that cannot log in with one, or
    # clears an existing user's password
    created = b.put_user(
        name,
        tags,
        password=str(body["password"]) if "password" in body else None,
        password_hash=str(body["password_hash"]) if "password_hash" in body else None,
    )
    return created_or_updated(created)


async def user_delete(request: web.Request) -> web.Response:
    require_admin(request)
    b = mgmt(request).broker
    name = request.match_info["user"]
    if not b.delete_user(name):
        raise not_found()
    return no_content()


async def users_bulk_delete(request: web.Request) -> web.Response:
    require_admin(request)
    b = mgmt(request).broker
    body = await json_body(request)
    require_keys(body, "users")
    names = body["users"]
    if not isinstance(names, list):
        # RabbitMQ's handler crashes on this (500, no body): a plain refusal instead
        raise bad_request("users must be a list of user names")
    # one by one, as RabbitMQ: the first name that is no user ends it with a 400, the users
    # named before it deleted
    for name in names:
        if not isinstance(name, str) or not b.delete_user(name):
            raise bad_request(["no_such_user", name])
    return no_content()


async def user_permissions(request: web.Request) -> web.Response:
    require_admin(request)
    m = mgmt(request)
    name = m.user(request).name
    permissions = sorted(m.broker.users.permissions.items())
    return json_response([views.permission(p) for (u, _), p in permissions if u == name])


# ----------------------------------------------------------------------- vhosts
async def vhosts(request: web.Request) -> web.Response:
    m = mgmt(request)
    ages = rate_ages(request)
    return listing(
        request, [views.vhost(v, m.broker, m.stats, ages) for v in m.visible_vhosts(request)]
    )


async def vhost_get(request: web.Request) -> web.Response:
    require_admin(request)
    m = mgmt(request)
    v = m.vhost(request)
    return json_response(views.vhost(v, m.broker, m.stats, rate_ages(request)))


async def vhost_put(request: web.Request) -> web.Response:
    require_admin(request)
    b = mgmt(request).broker
    name = request.match_info["vhost"]
    body = await json_body(request)
    existing = b.vhosts.get(name)
    description = str(body.get("description", ""))
    tags = _tags(body.get("tags", ""))
    tracing = _parse_bool(body.get("tracing"))
    if existing is not None:
        b.update_vhost(existing, description, tags)
        if tracing is not None:
            b.set_tracing(name, tracing)
        return created_or_updated(False)
    vhost = b.add_vhost(name, description, tags)
    if tracing is not None:
        b.set_tracing(name, tracing)
    # As RabbitMQ's API: the user who creates a vhost gets full permissions in it, and
    # is named as the one who made its built-in exchanges.
    creator = current_user(request).name
    for x in vhost.exchanges.values():
        x.user_who_performed_action = creator
    b.set_permissions(creator, name, ".*", ".*", ".*")
    return created_or_updated(True)


def _parse_bool(value: Any) -> bool | None:
    """rabbit_misc:parse_bool: true/false as JSON or strings; absent is None."""
    if value is True or value == "true":
        return True
    if value is False or value == "false":
        return False
    return None


async def vhost_delete(request: web.Request) -> web.Response:
    require_admin(request)
    if not mgmt(request).broker.delete_vhost(request.match_info["vhost"]):
        raise not_found()
    return no_content()


async def vhost_permissions(request: web.Request) -> web.Response:
    require_admin(request)
    m = mgmt(request)
    v = m.vhost(request)
    return json_response(
        [
            views.permission(p)
            for (_, vh), p in sorted(m.broker.users.permissions.items())
            if vh == v.name
        ]
    )


# ------------------------------------------------------------------ permissions
async def permissions(request: web.Request) -> web.Response:
    require_admin(request)
    b = mgmt(request).broker
    return listing(request, [views.permission(p) for p in b.users.permissions.values()])


async def permission_get(request: web.Request) -> web.Response:
    require_admin(request)
    b = mgmt(request).broker
    p = b.users.permission(request.match_info["user"], request.match_info["vhost"])
    if p is None:
        raise not_found()
    return json_response(views.permission(p))


async def permission_put(request: web.Request) -> web.Response:
    require_admin(request)
    b = mgmt(request).broker
    user, vhost = request.match_info["user"], request.match_info["vhost"]
    body = await json_body(request)
    require_keys(body, "configure", "write", "read")
    if user not in b.users.users or vhost not in b.vhosts:
        raise bad_request("vhost_or_user_not_found")
    patterns = [str(body[k]) for k in ("configure", "write", "read")]
    for pattern in patterns:
        try:
            re.compile(pattern)
        except re.error as exc:
            raise bad_request(f"invalid_regexp: {pattern}: {exc}") from exc
    created = b.users.permission(user, vhost) is None
    b.set_permissions(user, vhost, *patterns)
    return created_or_updated(created)


async def permission_delete(request: web.Request) -> web.Response:
    require_admin(request)
    b = mgmt(request).broker
    user, vhost = request.match_info["user"], request.match_info["vhost"]
    if not b.clear_permissions(user, vhost):
        raise not_found()
    return no_content()


# ------------------------------------------------------------------ definitions
VHOST_SECTIONS = ("queues", "exchanges", "bindings")
KEEP_VHOST_SECTIONS = ("parameters", "policies")


async def definitions_get(request: web.Request) -> web.Response:
    require_admin(request)
    m = mgmt(request)
    data = export_definitions(m.broker, durable_only=False)
    data["product_name"] = "Leveret"
    vhost = request.match_info.get("vhost")
    if vhost is None:
        return json_response(data)
    if vhost not in m.broker.vhosts:  # rabbit_mgmt_wm_definitions:to_json's answer
        raise bad_request("vhost_not_found")
    out: dict[str, Any] = {"rabbit_version": data["rabbit_version"]}
    # a vhost's parameters and policies keep their vhost key, as RabbitMQ's
    for section in KEEP_VHOST_SECTIONS:
        out[section] = [item for item in data[section] if item.get("vhost") == vhost]
    for section in VHOST_SECTIONS:
        out[section] = [
            {k: v for k, v in item.items() if k != "vhost"}
            for item in data[section]
            if item.get("vhost") == vhost
        ]
    return json_response(out)


async def definitions_post(request: web.Request) -> web.Response:
    require_admin(request)
    m = mgmt(request)
    body = await definitions_body(request)
    vhost = request.match_info.get("vhost")
    if vhost is not None and vhost not in m.broker.vhosts:  # rabbit_mgmt_wm_definitions:accept
        raise ApiError(404, "not_found", "vhost_not_found")
    # RabbitMQ's import crashes on sections that are not lists of objects (500, no body):
    # a plain refusal here, for the whole broker's definitions and a vhost's alike
    try:
        if vhost is not None:
            body = {
                section: [dict(item, vhost=vhost) for item in body.get(section) or []]
                for section in (*KEEP_VHOST_SECTIONS, *VHOST_SECTIONS)
            }
        import_definitions(m.broker, body, current_user(request).name)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise bad_request(f"invalid definitions: {exc}") from exc
    except ApiError:
        raise
    return no_content()


def routes(app: web.Application) -> None:
    r = app.router
    resource(r, "/api/users", users)
    resource(r, "/api/users/without-permissions", users_without_permissions)
    resource(r, "/api/users/bulk-delete", post=users_bulk_delete)
    resource(r, "/api/users/{user}", user_get, put=user_put, delete=user_delete)
    resource(r, "/api/users/{user}/permissions", user_permissions)
    resource(r, "/api/vhosts", vhosts)
    resource(r, "/api/vhosts/{vhost}", vhost_get, put=vhost_put, delete=vhost_delete)
    resource(r, "/api/vhosts/{vhost}/permissions", vhost_permissions)
    resource(r, "/api/permissions", permissions)
    resource(
        r,
        "/api/permissions/{vhost}/{user}",
        permission_get,
        put=permission_put,
        delete=permission_delete,
    )
    resource(r, "/api/definitions", definitions_get, post=definitions_post)
    resource(r, "/api/definitions/{vhost}", definitions_get, post=definitions_post)
