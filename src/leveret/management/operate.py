"""The operator's part of the management API, as RabbitMQ 3.10.8's: policies and operator
policies, global parameters, vhost and user limits, and topic permissions, with its status
codes, its error bodies and who may do what."""

from __future__ import annotations

import re
from typing import Any

from aiohttp import web

from leveret.broker.limits import USER_LIMITS, VHOST_LIMITS, limit_error
from leveret.broker.operations import Actor, clear_global_parameter, set_global_parameter
from leveret.broker.policies import PolicyError, by_priority, make_policy, regex_error
from leveret.broker.vhost import VirtualHost
from leveret.management import views
from leveret.management.context import mgmt
from leveret.management.httputil import (
    ApiError,
    bad_request,
    created_or_updated,
    current_user,
    is_admin,
    json_body,
    json_response,
    listing,
    no_content,
    not_found,
    require_admin,
    require_keys,
    resource,
    scoped,
)


def _vhost_or_404(request: web.Request) -> VirtualHost:
    """A PUT's vhost; RabbitMQ answers one that does not exist with vhost_not_found."""
    v = mgmt(request).broker.vhosts.get(request.match_info["vhost"])
    if v is None:
        raise ApiError(404, "not_found", "vhost_not_found")
    return v


def escape_html(text: str) -> str:
    """rabbit_mgmt_format:escape_html_tags, which the policy endpoint applies to errors."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


# --------------------------------------------------------------------- policies
def _require_policymaker(request: web.Request, vhost: str) -> None:
    """rabbit_mgmt_util:is_authorized_policies: an administrator, or a policymaker who
    may use the vhost."""
    user = current_user(request)
    if is_admin(request):
        return
    if "policymaker" in user.tags and mgmt(request).broker.users.permission(user.name, vhost):
        return
    raise ApiError(401, "not_authorised", "User not authorised to access object")


def _policies(request: web.Request, operator: bool) -> web.Response:
    m = mgmt(request)
    vhosts = [m.vhost(request)] if "vhost" in request.match_info else m.visible_vhosts(request)
    out = [p.as_json() for v in vhosts for p in by_priority(v.policies.table(operator).values())]
    out.sort(key=lambda p: p["priority"])  # RabbitMQ's default sort, across vhosts
    return listing(request, out)


async def policies(request: web.Request) -> web.Response:
    return _policies(request, operator=False)


async def operator_policies(request: web.Request) -> web.Response:
    return _policies(request, operator=True)


def _policy_access(request: web.Request, operator: bool) -> None:
    if operator:
        require_admin(request)
    else:
        _require_policymaker(request, request.match_info["vhost"])


async def policy_get(request: web.Request, operator: bool = False) -> web.Response:
    _policy_access(request, operator)
    v = mgmt(request).broker.vhosts.get(request.match_info["vhost"])
    policy = v.policies.table(operator).get(request.match_info["name"]) if v else None
    if policy is None:
        raise not_found()
    return json_response(policy.as_json())


async def policy_put(request: web.Request, operator: bool = False) -> web.Response:
    _policy_access(request, operator)
    v = _vhost_or_404(request)
    name = request.match_info["name"]
    body = await json_body(request)
    require_keys(body, "pattern", "definition")
    try:
        policy = make_policy(
            v.name,
            name,
            body["pattern"],
            body["definition"],
            body.get("priority"),
            body.get("apply-to"),
            operator=operator,
            compat=v.compat,
        )
    except PolicyError as exc:
        # 3.10.8's policy endpoint escapes its errors for HTML, the operator-policy one
        # not; 4.2.9's escapes neither (rabbit_mgmt_wm_policy:accept_content)
        plain = operator or v.compat.v4
        raise bad_request(exc.text if plain else escape_html(exc.text)) from exc
    created = name not in v.policies.table(operator)
    v.set_policy(policy)
    return created_or_updated(created)


async def policy_delete(request: web.Request, operator: bool = False) -> web.Response:
    _policy_access(request, operator)
    v = mgmt(request).broker.vhosts.get(request.match_info["vhost"])
    if v is None or not v.clear_policy(request.match_info["name"], operator):
        raise not_found()
    return no_content()


async def operator_policy_get(request: web.Request) -> web.Response:
    return await policy_get(request, operator=True)


async def operator_policy_put(request: web.Request) -> web.Response:
    return await policy_put(request, operator=True)


async def operator_policy_delete(request: web.Request) -> web.Response:
    return await policy_delete(request, operator=True)


# ------------------------------------------------------------- global parameters
def _require_global_policymaker(request: web.Request) -> None:
    """rabbit_mgmt_util:is_authorized_global_parameters: an administrator or a
    policymaker, whatever their permissions."""
    if is_admin(request) or "policymaker" in current_user(request).tags:
        return
    raise ApiError(401, "not_authorised", "User not authorised to access object")


async def global_parameters(request: web.Request) -> web.Response:
    """rabbit_mgmt_wm_global_parameters: every global parameter (reply_list: sorted by
    name, not paged)."""
    _require_global_policymaker(request)
    params = sorted(mgmt(request).broker.global_parameters.items())
    return listing(request, [{"name": k, "value": v} for k, v in params], pages=False)


async def global_parameter_get(request: web.Request) -> web.Response:
    _require_global_policymaker(request)
    name = request.match_info["name"]
    params = mgmt(request).broker.global_parameters
    if name not in params:
        raise not_found()
    # rabbit_mgmt_format:parameter puts the value first
    return json_response({"value": params[name], "name": name})


async def global_parameter_put(request: web.Request) -> web.Response:
    """rabbit_mgmt_wm_global_parameter's PUT: any name, ``{"value": ...}`` any JSON; 201
    when new, 204 when replaced."""
    _require_global_policymaker(request)
    body = await json_body(request)
    require_keys(body, "value")
    actor = Actor(current_user(request).name, None)
    name = request.match_info["name"]
    created = set_global_parameter(mgmt(request).broker, actor, name, body["value"])
    return created_or_updated(created)


async def global_parameter_delete(request: web.Request) -> web.Response:
    _require_global_policymaker(request)
    actor = Actor(current_user(request).name, None)
    if not clear_global_parameter(mgmt(request).broker, actor, request.match_info["name"]):
        raise not_found()
    return no_content()


# ------------------------------------------------------------------ vhost limits
async def vhost_limits(request: web.Request) -> web.Response:
    m = mgmt(request)
    vhosts = [m.vhost(request)] if "vhost" in request.match_info else m.visible_vhosts(request)
    return listing(
        request, [{"vhost": v.name, "value": dict(v.limits)} for v in vhosts if v.limits]
    )


async def vhost_limit_put(request: web.Request) -> web.Response:
    require_admin(request)
    v = _vhost_or_404(request)
    name = request.match_info["name"]
    body = await json_body(request)
    require_keys(body, "value")
    err = limit_error(name, body["value"], VHOST_LIMITS, "limits")
    if err is not None:
        raise bad_request(f"Validation failed\n\n{err}\n")
    # rabbit_vhost_limit:update_limit: the new limit first, the others after it
    limits = {name: body["value"], **{k: x for k, x in v.limits.items() if k != name}}
    v.set_limits(limits)
    return no_content()


async def vhost_limit_delete(request: web.Request) -> web.Response:
    require_admin(request)
    v = _vhost_or_404(request)
    name = request.match_info["name"]
    if name in v.limits:
        v.set_limits({k: x for k, x in v.limits.items() if k != name})
    return no_content()


# ------------------------------------------------------------------- user limits
async def user_limits(request: web.Request) -> web.Response:
    b = mgmt(request).broker
    name = request.match_info.get("user")
    if name is None:
        users = [u for _, u in sorted(b.users.users.items())]
    else:
        user = b.users.users.get(name)
        if user is None:
            raise not_found()
        users = [user]
    return listing(request, [{"user": u.name, "value": dict(u.limits)} for u in users if u.limits])


async def user_limit_put(request: web.Request) -> web.Response:
    require_admin(request)
    b = mgmt(request).broker
    user_name, name = request.match_info["user"], request.match_info["name"]
    body = await json_body(request)
    require_keys(body, "value")
    user = b.users.users.get(user_name)
    if user is None:
        raise bad_request(["no_such_user", user_name])
    err = limit_error(name, body["value"], USER_LIMITS, "user-limits")
    if err is not None:
        raise bad_request(err)
    b.set_user_limit(user_name, name, body["value"])
    return no_content()


async def user_limit_delete(request: web.Request) -> web.Response:
    require_admin(request)
    b = mgmt(request).broker
    user_name, name = request.match_info["user"], request.match_info["name"]
    user = b.users.users.get(user_name)
    if user is None:
        raise bad_request(["no_such_user", user_name])
    b.clear_user_limit(user_name, name)
    return no_content()


# ------------------------------------------------------------- topic permissions
def topic_permission(p: Any) -> dict[str, Any]:
    return views.attributes(p, ("user", "vhost", "exchange", "write", "read"))


def _sorted_topics(items: list[Any]) -> list[dict[str, Any]]:
    return [topic_permission(p) for p in sorted(items, key=lambda p: (p.vhost, p.user))]


async def topic_permissions(request: web.Request) -> web.Response:
    require_admin(request)
    return listing(request, _sorted_topics(mgmt(request).broker.topic_permissions()))


async def vhost_topic_permissions(request: web.Request) -> web.Response:
    require_admin(request)
    m = mgmt(request)
    v = m.vhost(request)
    return json_response(_sorted_topics(m.broker.topic_permissions(vhost=v.name)))


async def user_topic_permissions(request: web.Request) -> web.Response:
    require_admin(request)
    m = mgmt(request)
    name = m.user(request).name
    return json_response(_sorted_topics(m.broker.topic_permissions(user=name)))


def _topic_key(request: web.Request) -> tuple[str, str]:
    return request.match_info["user"], request.match_info["vhost"]


async def topic_permission_get(request: web.Request) -> web.Response:
    require_admin(request)
    b = mgmt(request).broker
    user, vhost = _topic_key(request)
    found = b.topic_permissions(user=user, vhost=vhost) if user in b.users.users else []
    if not found:
        raise not_found()
    return json_response(_sorted_topics(found))


def _regexp_refusal(pattern: str) -> list[Any] | None:
    """How RabbitMQ's API answers an invalid pattern: [invalid_regexp, Pattern,
    [Message as character codes, Offset]]."""
    err = regex_error(pattern)
    if err is None:
        return None
    found = re.search(r'\{"(.*)",\s*(\d+)\}$', err, re.S)
    message, offset = (found.group(1), int(found.group(2))) if found else (err, 0)
    return ["invalid_regexp", pattern, [[ord(c) for c in message], offset]]


async def topic_permission_put(request: web.Request) -> web.Response:
    require_admin(request)
    b = mgmt(request).broker
    user, vhost = _topic_key(request)
    body = await json_body(request)
    require_keys(body, "exchange", "write", "read")
    if user not in b.users.users or vhost not in b.vhosts:
        raise bad_request("vhost_or_user_not_found")
    write, read = str(body["write"]), str(body["read"])
    for pattern in (write, read):
        refusal = _regexp_refusal(pattern)
        if refusal is not None:
            raise bad_request(refusal)
    created = not b.topic_permissions(user=user, vhost=vhost)
    b.set_topic_permissions(user, vhost, str(body["exchange"]), write, read)
    return created_or_updated(created)


async def topic_permission_delete(request: web.Request) -> web.Response:
    require_admin(request)
    b = mgmt(request).broker
    user, vhost = _topic_key(request)
    if not b.clear_topic_permissions(user, vhost):
        raise not_found()
    return no_content()


def routes(app: web.Application) -> None:
    r = app.router
    scoped(r, "/api/policies", policies, "{vhost}")
    resource(r, "/api/policies/{vhost}/{name}", policy_get, put=policy_put, delete=policy_delete)
    scoped(r, "/api/operator-policies", operator_policies, "{vhost}")
    resource(
        r,
        "/api/operator-policies/{vhost}/{name}",
        operator_policy_get,
        put=operator_policy_put,
        delete=operator_policy_delete,
    )
    resource(r, "/api/global-parameters", global_parameters)
    resource(
        r,
        "/api/global-parameters/{name}",
        global_parameter_get,
        put=global_parameter_put,
        delete=global_parameter_delete,
    )
    # rabbit_mgmt_wm_limits and _user_limits allow GET and OPTIONS only: no HEAD
    scoped(r, "/api/vhost-limits", vhost_limits, "{vhost}", head=False)
    resource(r, "/api/vhost-limits/{vhost}/{name}", put=vhost_limit_put, delete=vhost_limit_delete)
    scoped(r, "/api/user-limits", user_limits, "{user}", head=False)
    resource(r, "/api/user-limits/{user}/{name}", put=user_limit_put, delete=user_limit_delete)
    resource(r, "/api/topic-permissions", topic_permissions)
    resource(
        r,
        "/api/topic-permissions/{vhost}/{user}",
        topic_permission_get,
        put=topic_permission_put,
        delete=topic_permission_delete,
    )
    resource(r, "/api/vhosts/{vhost}/topic-permissions", vhost_topic_permissions)
    resource(r, "/api/users/{user}/topic-permissions", user_topic_permissions)
