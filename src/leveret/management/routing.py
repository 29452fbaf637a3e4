"""What RabbitMQ 3.10.8's management listener answers before any resource runs: its router
(Cowboy's), its redirects, and the method checks every Cowboy REST resource makes first.

RabbitMQ's dispatch list (rabbit_mgmt_dispatcher:build_routes) is the API's routes, then a
few redirects, then a catch-all ``/[...]`` served by rabbit_mgmt_wm_static (cowboy_static
over the plugins' ``www`` directories). So no path is unknown to its router: a path no API
route matches is a missing static file. Each resource is a cowboy_rest handler, which checks,
in this order (cowboy_rest:known_methods, allowed_methods, malformed_request, is_authorized,
options), and answers with an empty body:

- a method Cowboy does not know (only HEAD GET POST PUT PATCH DELETE OPTIONS): 501;
- a method the resource does not allow: 405, with ``allow`` listing those it does (a
  resource without allowed_methods/2 allows HEAD, GET, OPTIONS, as cowboy_static does);
- cowboy_static: a path segment holding ``/``, ``\\`` or NUL once decoded
  (validate_reserved): 400;
- authentication, which rabbit_mgmt_util:is_authorized waives for OPTIONS;
- OPTIONS: 200 with ``allow``.

A static file that is not there is an empty 404, which rabbit_cowboy_stream_h (the
listener's stream handler) turns into the JSON ``{"error":"Object Not Found",...}``, for
every 404 with an empty body. Before all this cowboy_http refuses CONNECT and TRACE (501,
whatever the path), and the router (cowboy_router:split_path) answers
400 to a path it cannot split: one not starting with ``/`` or with a character
cow_uri:urldecode refuses; ``*`` (``OPTIONS *``) matches no route: 404.

Leveret's routes are its aiohttp router's; a request whose path a route matches gets that
route's methods as its ``allow`` list, in RabbitMQ's order. Where a literal route and a
pattern both match a path (``/api/users/bulk-delete`` and ``/api/users/{user}``), the path
belongs to the literal one, as RabbitMQ's dispatch list has the literal first: a method it
does not allow is 405, not the pattern's handler. Leveret's own pages (the dashboard) stand
where RabbitMQ's static files do, and get the static handler's checks."""

from __future__ import annotations

import re
from urllib.parse import unquote_to_bytes

from aiohttp import web
from aiohttp.web_urldispatcher import PlainResource

from leveret.management.httputil import RESOURCE_VARY

# Methods cowboy_http refuses as it reads the request line, before any routing
# (cowboy_http:parse_request): 501 and the connection closed.
UNSUPPORTED = frozenset({"CONNECT", "TRACE"})
# cowboy_rest's known methods when a resource does not say (cowboy_rest:known_methods/2).
KNOWN_METHODS = frozenset({"HEAD", "GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
# The order of every allowed_methods/2 list in rabbitmq_management 3.10.8 (none has PATCH).
ALLOW_ORDER = ("HEAD", "GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")
# cowboy_rest's allowed methods when a resource does not say: cowboy_static's.
STATIC_METHODS = frozenset({"HEAD", "GET", "OPTIONS"})

# rabbit_mgmt_dispatcher:build_routes's redirects (rabbit_mgmt_wm_redirect: 301 whatever the
# method). The router drops one trailing slash, so "/api/" is "/api".
REDIRECTS = {
    "/api": "/api/index.html",
    "/cli": "/cli/index.html",
    "/mgmt": "/",
    "/stats": "/api/index.html",
    "/doc/stats.html": "/api/index.html",
}

# A path segment's characters cow_uri:urldecode/1 accepts (RFC 3986 pchar less "%" alone).
SEGMENT = re.compile(r"(?:[A-Za-z0-9!$&'()*+,\-.:;=@_~]|%[0-9A-Fa-f]{2})*")
# cowboy_static:validate_reserved/1: what a decoded segment may not hold.
RESERVED = frozenset(b"/\\\0")

NOT_FOUND = b'{"error":"Object Not Found","reason":"Not Found"}'

# The literal paths of an application's routes, to the routes' resource (make_app builds it
# once all routes are in).
LITERALS: web.AppKey[dict[str, web.AbstractResource]] = web.AppKey("literals", dict)


def literal_paths(router: web.UrlDispatcher) -> dict[str, web.AbstractResource]:
    """Each literal route path, to the first resource that serves it."""
    out: dict[str, web.AbstractResource] = {}
    for resource in router.resources():
        if isinstance(resource, PlainResource):
            out.setdefault(resource.get_info()["path"], resource)
    return out


def not_found() -> web.Response:
    """rabbit_cowboy_stream_h's body for an empty 404."""
    return web.Response(status=404, body=NOT_FOUND, content_type="application/json")


def empty(status: int, allow: frozenset[str] | set[str] | None = None) -> web.Response:
    headers = {}
    if allow is not None:
        headers["Allow"] = ", ".join(m for m in ALLOW_ORDER if m in allow or m == "OPTIONS")
    return web.Response(status=status, headers=headers)


def answer(request: web.Request) -> web.Response | None:
    """RabbitMQ's answer when its router, a redirect or its resources' method checks answer
    before the resource itself does; None when the request goes on to its handler."""
    if request.method in UNSUPPORTED:
        response = empty(501)
        response.force_close()  # cowboy_http ends the connection with the answer
        return response
    raw = request.raw_path.partition("?")[0]
    if raw == "*":
        return not_found()
    if not raw.startswith("/"):
        return empty(400)
    segments = raw[1:].split("/")
    if not all(SEGMENT.fullmatch(s) for s in segments):
        return empty(400)
    location = REDIRECTS.get(raw[:-1] if raw.endswith("/") else raw)
    if location is not None:
        return web.Response(status=301, headers={"Location": location})
    method = request.method
    if method not in KNOWN_METHODS:
        return empty(501)
    methods = route_methods(request)
    if methods is not None and "*" in methods:  # a route that takes any method decides
        return None
    if methods is None:  # no route: RabbitMQ's static files
        if method not in STATIC_METHODS:
            return empty(405, STATIC_METHODS)
        if any(RESERVED.intersection(unquote_to_bytes(s)) for s in segments):
            return empty(400)
        if method == "OPTIONS":
            return empty(200, STATIC_METHODS)
        return not_found()
    if method == "OPTIONS":
        return empty(200, methods)
    if method not in methods:
        return empty(405, methods)
    return None


def route_methods(request: web.Request) -> set[str] | None:
    """The methods of the route that owns the request's path; None when no route does."""
    literal = request.app[LITERALS].get(request.rel_url.path_safe)
    if literal is not None:
        return {route.method for route in literal}
    match = request.match_info
    exc = match.http_exception
    if isinstance(exc, web.HTTPMethodNotAllowed):
        return set(exc.allowed_methods)
    if exc is not None:
        return None
    return {route.method for route in match.route.resource or ()}


# What a resource's answer varies with: cowboy_rest adds ``accept`` where the resource
# offers more than one content type (rabbit_mgmt_util:responder_map), then the resource's
# own variances. Most offer two and vary with accept-encoding and origin; these differ.
_VARIES = (
    # one content type (or cowboy's default), variances accept-encoding and origin
    (
        re.compile(
            r"/api/(?:(?:vhost-limits|user-limits|operator-policies|topic-permissions)(?:/.*)?"
            r"|(?:users|vhosts)/[^/]+/topic-permissions|queues/[^/]+/[^/]+/(?:contents|actions)"
            r"|feature-flags/[^/]+/enable|vhosts/[^/]+/start/[^/]+|reset(?:/[^/]+)?"
            r"|rebalance/queues)"
        ),
        "accept-encoding, origin",
    ),
    # rabbitmq_stream_management's listings: one content type, no variances of their own
    (re.compile(r"/api/stream/(?:connections|publishers|consumers)(?:/[^/]+)?"), "origin"),
)


def resource_vary(request: web.Request) -> str:
    """The ``vary`` header of the answer of the resource a request reached."""
    path = request.raw_path.partition("?")[0]
    for pattern, vary in _VARIES:
        if pattern.fullmatch(path):
            return vary
    return RESOURCE_VARY
