"""HTTP plumbing shared by the API handlers: RabbitMQ's error bodies, basic auth, JSON
bodies, sorting and pagination."""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from leveret.broker.users import User
from leveret.protocol import spec
from leveret.protocol.errors import AMQPError
from leveret.protocol.spec import TypedTable

MANAGEMENT_TAGS = frozenset({"administrator", "management", "monitoring", "policymaker"})
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


# The authenticated user of a request, set by the authentication middleware.
USER: web.RequestKey[User] = web.RequestKey("user", User)


class ApiError(Exception):
    """An error answered as ``{"error": ..., "reason": ...}`` with an HTTP status."""

    def __init__(self, status: int, error: str, reason: Any) -> None:
        super().__init__(reason)
        self.status = status
        self.error = error
        self.reason = reason


def not_found() -> ApiError:
    return ApiError(404, "Object Not Found", "Not Found")


def bad_request(reason: Any) -> ApiError:
    return ApiError(400, "bad_request", reason)


def access_refused() -> ApiError:
    return ApiError(401, "not_authorised", "Access refused.")


def not_admin() -> ApiError:
    return ApiError(401, "not_authorised", "Not administrator user")


def from_amqp(exc: AMQPError) -> ApiError:
    """RabbitMQ's mapping of a channel error to a management API answer."""
    if exc.code == spec.NOT_FOUND:
        return ApiError(404, "not_found", exc.text)
    if exc.code == spec.ACCESS_REFUSED:
        return access_refused()
    return bad_request(exc.text)


def json_response(data: Any, status: int = 200) -> web.Response:
    return web.Response(
        text=json.dumps(data, separators=(",", ":"), ensure_ascii=False),
        status=status,
        content_type="application/json",
        headers={"vary": "accept, accept-encoding, origin"},
    )


def no_content() -> web.Response:
    return web.Response(status=204)


def created_or_updated(created: bool) -> web.Response:
    return web.Response(status=201 if created else 204)


async def json_body(request: web.Request) -> dict[str, Any]:
    raw = await request.read()
    if not raw.strip():
        return {}
    try:
        data = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise bad_request("not_json") from exc
    if not isinstance(data, dict):
        raise bad_request("not_json")
    return data


def _json_type(value: Any) -> str:
    """The AMQP type RabbitMQ gives a JSON value (rabbit_misc:type_val)."""
    if value is None:
        raise bad_request("null_not_allowed")
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "long"
    if isinstance(value, float):
        return "double"
    if isinstance(value, dict):
        for item in value.values():
            _json_type(item)
        return "table"
    if isinstance(value, list):
        for item in value:
            _json_type(item)
        return "array"
    return "longstr"


def arguments(body: dict[str, Any]) -> TypedTable:
    """A body's ``arguments`` as the AMQP table RabbitMQ makes of JSON: integers are
    longs, other numbers doubles, strings long strings; a null anywhere is refused."""
    args = body.get("arguments") or {}
    if not isinstance(args, dict):
        raise bad_request("arguments must be an object")
    return TypedTable(args, {key: _json_type(value) for key, value in args.items()})


def require_keys(body: dict[str, Any], *keys: str) -> None:
    missing = [k for k in keys if k not in body]
    if missing:
        raise bad_request("[" + ",".join(f"{{key_missing,{k}}}" for k in missing) + "]")


def as_bool(value: Any, default: bool = False) -> bool:
    if value is None:
        return default
    if isinstance(value, bool):
        return value
    return str(value).lower() in ("true", "1", "yes")


def credentials(request: web.Request) -> tuple[str, str] | None:
    header = request.headers.get("Authorization", "")
    if not header.lower().startswith("basic "):
        return None
    try:
        raw = base64.b64decode(header[6:].strip(), validate=True).decode()
    except (binascii.Error, UnicodeDecodeError):
        return None
    name, sep, password = raw.partition(":")
    return (name, password) if sep else None


def current_user(request: web.Request) -> User:
    user: User = request[USER]
    return user


def is_admin(request: web.Request) -> bool:
    return current_user(request).is_administrator


def require_admin(request: web.Request) -> None:
    if not is_admin(request):
        raise not_admin()


def listing(request: web.Request, items: list[dict[str, Any]], pages: bool = True) -> web.Response:
    """Sort (``sort``, ``sort_reverse``) and page (``page``, ``page_size``) as RabbitMQ;
    without ``pages``, the whole list whatever the page asked for (rabbit_mgmt_util's
    reply_list: the listings of one vhost, of one connection)."""
    q = request.query
    sort = q.get("sort")
    reverse = as_bool(q.get("sort_reverse"))
    if sort:

        def key(item: dict[str, Any]) -> Any:
            value: Any = item
            for part in sort.split("."):
                value = value.get(part) if isinstance(value, dict) else None
            return (value is None, str(value) if not isinstance(value, (int, float)) else value)

        items = sorted(items, key=key, reverse=reverse)
    elif reverse:
        items = list(reversed(items))
    name_filter = q.get("name")
    if name_filter:
        items = [i for i in items if name_filter in str(i.get("name", ""))]
    if q.get("columns"):
        items = [project(i, q["columns"]) for i in items]
    if "page" not in q or not pages:
        return json_response(items)
    try:
        page = max(1, int(q["page"]))
        size = max(1, min(500, int(q.get("page_size", "100"))))
    except ValueError as exc:
        raise bad_request("page and page_size must be integers") from exc
    total = len(items)
    page_count = max(1, (total + size - 1) // size)
    return json_response(
        {
            "filtered_count": total,
            "item_count": len(items[(page - 1) * size : page * size]),
            "items": items[(page - 1) * size : page * size],
            "page": page,
            "page_count": page_count,
            "page_size": size,
            "total_count": total,
        }
    )


def project(item: dict[str, Any], columns: str) -> dict[str, Any]:
    """Only the ``columns`` asked for (``a,b.c``), nested keys kept nested, as RabbitMQ."""
    out: dict[str, Any] = {}
    for column in columns.split(","):
        parts = column.strip().split(".")
        value: Any = item
        for part in parts:
            value = value.get(part) if isinstance(value, dict) else None
            if value is None:
                break
        if value is None:
            continue
        target = out
        for part in parts[:-1]:
            target = target.setdefault(part, {})
        target[parts[-1]] = value
    return dict(sorted(out.items()))  # RabbitMQ answers projections with sorted keys


def rate_ages(
    request: web.Request,
) -> tuple[float | None, float | None, float | None, float | None]:
    """``lengths_age``/``lengths_incr`` and ``msg_rates_age``/``msg_rates_incr``."""

    def num(name: str) -> float | None:
        raw = request.query.get(name)
        try:
            return float(raw) if raw is not None else None
        except ValueError:
            return None

    return num("lengths_age"), num("lengths_incr"), num("msg_rates_age"), num("msg_rates_incr")


def resource(
    router: web.UrlDispatcher,
    path: str,
    get: Handler | None = None,
    *,
    put: Handler | None = None,
    post: Handler | None = None,
    delete: Handler | None = None,
) -> None:
    """One path's handlers by method; GET answers HEAD too, as ``add_get`` makes it. The
    path is served with one trailing slash too, as RabbitMQ's router serves it."""
    for each in (path, path + "/"):
        if get is not None:
            router.add_get(each, get)
        if put is not None:
            router.add_put(each, put)
        if post is not None:
            router.add_post(each, post)
        if delete is not None:
            router.add_delete(each, delete)


def scoped(
    router: web.UrlDispatcher, path: str, listing: Handler, *scopes: str, head: bool = True
) -> None:
    """A listing at ``path`` and again under each scope in turn, narrower each time:
    ``scoped(r, "/api/queues", queues, "{vhost}")`` serves ``/api/queues`` and
    ``/api/queues/{vhost}``. ``head=False`` for the few RabbitMQ resources whose
    allowed_methods name GET but not HEAD (HEAD is then 405)."""
    router.add_get(path, listing, allow_head=head)
    router.add_get(path + "/", listing, allow_head=head)
    for scope in scopes:
        path = f"{path}/{scope}"
        router.add_get(path, listing, allow_head=head)
        router.add_get(path + "/", listing, allow_head=head)
