"""HTTP plumbing shared by the API handlers: RabbitMQ's error bodies, basic auth, JSON
bodies, sorting and pagination."""

from __future__ import annotations

import base64
import binascii
import json
import re
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


#: what most resources' answers vary with (cowboy_rest's content negotiation, their
#: variances); the listener's middleware puts each resource's own (management.routing)
RESOURCE_VARY = "accept, accept-encoding, origin"
#: rabbit_mgmt_headers' content security policy, on every answer of the listener
CSP = "script-src 'self' 'unsafe-eval' 'unsafe-inline'; object-src 'self'"
#: cowboy_compress_h's compress_threshold: smaller bodies go out as they are
GZIP_THRESHOLD = 300


def json_response(data: Any, status: int = 200) -> web.Response:
    """A JSON answer as rabbit_mgmt_util's: ``application/json`` without a charset, and
    ``cache-control: no-cache`` on a resource's reply (not on an error's)."""
    headers = {"Content-Type": "application/json", "vary": RESOURCE_VARY}
    if status == 200:
        headers["cache-control"] = "no-cache"
    body = json.dumps(data, separators=(",", ":"), ensure_ascii=False).encode()
    return web.Response(body=body, status=status, headers=headers)


def check_failed(data: dict[str, Any]) -> web.Response:
    """A failed health check: rabbit_mgmt_util:reply's body and headers (``cache-control:
    no-cache`` too) sent by cowboy_req:reply with 503."""
    response = json_response(data, 503)
    response.headers["cache-control"] = "no-cache"
    return response


def _accepts_gzip(header: str) -> bool:
    for part in header.split(","):
        coding, _, params = part.strip().partition(";")
        if coding.strip().lower() in ("gzip", "*"):
            q = params.strip().lower()
            return not (q.startswith("q=") and float(q[2:] or 0) == 0)
    return False


async def as_the_listener_answers(request: web.Request, response: web.StreamResponse) -> None:
    """Headers every answer of RabbitMQ's management listener carries: its content
    security policy, and ``vary: origin`` where no resource said more."""
    headers = response.headers
    headers.setdefault("content-security-policy", CSP)
    headers.setdefault("vary", "origin")


def gzip_if_accepted(request: web.Request, response: web.StreamResponse) -> None:
    """gzip for a JSON body of at least :data:`GZIP_THRESHOLD` bytes when the client
    accepts it, as cowboy_compress_h does (before the answer is prepared)."""
    if (
        isinstance(response, web.Response)
        and response.content_type == "application/json"
        and isinstance(response.body, bytes)
        and len(response.body) >= GZIP_THRESHOLD
        and "Content-Encoding" not in response.headers
    ):
        try:
            wanted = _accepts_gzip(request.headers.get("Accept-Encoding", ""))
        except ValueError:  # a q-value that is not a number: as if none was asked for
            wanted = False
        if wanted:
            response.enable_compression(web.ContentCoding.gzip)


def no_content() -> web.Response:
    return web.Response(status=204)


def created_or_updated(created: bool) -> web.Response:
    return web.Response(status=201 if created else 204)


DOUBLY_ENCODED = (
    "invalid payload: the request body JSON-decoded to a string. Is the input doubly-JSON-encoded?"
)


async def json_body(request: web.Request) -> dict[str, Any]:
    """A request's JSON object, as rabbit_mgmt_util:decode/1 reads it: an empty body and
    the bodies ``null`` and ``undefined`` are an empty object, and so is any JSON
    ``true``/``false``/``null``; a JSON string is refused as doubly encoded; anything else
    that is not an object (whitespace alone included) is ``not_json``."""
    raw = await request.read()
    if raw in (b"", b"null", b"undefined"):
        return {}
    try:
        data = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise bad_request("not_json") from exc
    if isinstance(data, dict):
        return data
    if data is None or isinstance(data, bool):
        return {}
    if isinstance(data, str):
        raise bad_request(DOUBLY_ENCODED)
    raise bad_request("not_json")


async def definitions_body(request: web.Request) -> dict[str, Any]:
    """A definitions import's JSON object, as rabbit_mgmt_wm_definitions decodes it: an
    empty body imports nothing; anything that is not a JSON object fails to parse."""
    raw = await request.read()
    if raw == b"":
        return {}
    try:
        data = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise bad_request("failed_to_parse_json") from exc
    if not isinstance(data, dict):
        raise bad_request("failed_to_parse_json")
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
    if sort == "":
        pass  # sort_list/4: an empty sort column list is neither sorted nor reversed
    elif sort is not None:
        # lists:sort of Erlang terms, the column first; ties keep the listing's own order
        # (its default sort), and the reverse reverses all of it, ties too
        items = sorted(items, key=lambda item: erlang_order(dotted(item, sort)))
        if reverse:
            items.reverse()
    elif reverse:
        items = list(reversed(items))
    asked = pagination(q.get("page"), q.get("page_size")) if pages else None
    if asked is None:  # the name filter too is the pagination's
        if q.get("columns"):
            items = [project(i, q["columns"]) for i in items]
        return json_response(items)
    page, size = asked
    total = len(items)
    if q.get("name"):
        items = name_filtered(items, q["name"], q.get("use_regex") == "true")
    if q.get("columns"):
        items = [project(i, q["columns"]) for i in items]
    filtered = len(items)
    start = (page - 1) * size
    if start > filtered:  # lists:sublist/3 fails past the end of the list
        raise ApiError(
            400,
            "page_out_of_range",
            f"Page out of range, page: {page} page size: {size}, len: {filtered}",
        )
    shown = items[start : start + size]
    return json_response(
        {
            "filtered_count": filtered,
            "item_count": len(shown),
            "items": shown,
            "page": page,
            "page_count": (filtered + size - 1) // size,
            "page_size": size,
            "total_count": total,
        }
    )


def dotted(item: dict[str, Any], column: str) -> Any:
    """rabbit_mgmt_util:get_dotted_value: ``a.b`` looked up key by key; what is missing
    is 0, which puts it before everything else."""
    value: Any = item
    for part in column.split("."):
        value = value.get(part, 0) if isinstance(value, dict) else 0
    return value


def erlang_order(value: Any) -> tuple[Any, ...]:
    """A sort key in Erlang's term order of the JSON value's term: number < atom (true,
    false, null: undefined) < map or property list < list < binary."""
    if isinstance(value, bool):
        return (1, "true" if value else "false")
    if isinstance(value, int | float):
        return (0, value)
    if value is None:
        return (1, "undefined")
    if isinstance(value, dict):
        return (3, tuple((str(k), erlang_order(v)) for k, v in value.items()))
    if isinstance(value, list):
        return (4, tuple(erlang_order(v) for v in value))
    return (5, str(value).encode())


def name_filtered(items: list[dict[str, Any]], name: str, regex: bool) -> list[dict[str, Any]]:
    """The items whose name holds ``name`` (rabbit_mgmt_util:match_value): ignoring case,
    as a substring, or with ``use_regex=true`` as a regular expression; one that does not
    compile is a bad request, as RabbitMQ answers its failed pagination."""
    if not regex:
        lowered = name.lower()
        return [i for i in items if lowered in str(i.get("name", "")).lower()]
    try:
        pattern = re.compile(name, re.IGNORECASE)
    except re.error:
        raise bad_request("Pagination parameters are invalid") from None
    return [i for i in items if pattern.search(str(i.get("name", "")))]


#: rabbit_mgmt_util's ?MAX_PAGE_SIZE and ?DEFAULT_PAGE_SIZE
MAX_PAGE_SIZE = 500
DEFAULT_PAGE_SIZE = 100
INTEGER = re.compile(r"[+-]?[0-9]+")


def pagination(page_arg: str | None, size_arg: str | None) -> tuple[int, int] | None:
    """The page and page size asked for, as rabbit_mgmt_util:pagination_params checks them
    (None when no page is asked for): a parameter that is no integer is a bad request,
    whether a page is asked for or not; a page below 1, or a size outside 1..500, is
    refused with what was asked (``undefined`` for a size not given)."""

    def integer(raw: str | None) -> int | None:
        if raw is None:
            return None
        if not INTEGER.fullmatch(raw):  # list_to_integer's syntax
            raise bad_request("Pagination parameters are invalid")
        return int(raw)

    page, size = integer(page_arg), integer(size_arg)
    if page is None:
        return None
    if page > 0 and (size is None or 0 < size <= MAX_PAGE_SIZE):
        return page, DEFAULT_PAGE_SIZE if size is None else size
    raise ApiError(
        400,
        "invalid_pagination_parameters",
        f"Invalid pagination parameters: page number {page}, page size "
        + ("undefined" if size is None else str(size)),
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
