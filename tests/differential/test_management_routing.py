"""What the management listener answers before any API resource does, the same on Leveret
and on RabbitMQ 3.10.8: unknown paths (inside /api and outside it) by method, the methods a
known path does not allow (405 with its ``allow`` list), OPTIONS (200 with the list, no
credentials asked), the /api redirect, the 400s of Cowboy's router and of its static file
handler, and the 501s of methods Cowboy does not implement.

Each request goes on a connection of its own, as written (no client normalises the path),
and the status, the body and the allow, location and content-type headers are compared.
The rules behind the expected answers are in src/leveret/management/routing.py."""

from __future__ import annotations

import http.client
from dataclasses import dataclass

import pytest

from tests.support.brokers import BrokerUnderTest
from tests.support.mgmt import GUEST

pytestmark = pytest.mark.rabbitmq

NOT_FOUND = b'{"error":"Object Not Found","reason":"Not Found"}'
STATIC = "HEAD, GET, OPTIONS"  # cowboy_rest's default allowed methods (and cowboy_static's)


@dataclass(frozen=True, slots=True)
class Answer:
    status: int
    body: bytes = b""
    allow: str | None = None
    location: str | None = None
    content_type: str | None = None


def ask(broker: BrokerUnderTest, method: str, path: str, auth: bool) -> Answer:
    assert not broker.https
    conn = http.client.HTTPConnection(broker.host, broker.http_port, timeout=30)
    try:
        conn.request(method, path, headers={"Authorization": GUEST} if auth else {})
        r = conn.getresponse()
        body = r.read()  # nothing for HEAD: http.client reads no body for it
        return Answer(
            r.status,
            body,
            r.getheader("allow"),
            r.getheader("location"),
            r.getheader("content-type"),
        )
    finally:
        conn.close()


def not_found() -> Answer:
    return Answer(404, NOT_FOUND, content_type="application/json")


def check(broker: BrokerUnderTest, method: str, path: str, expected: Answer) -> None:
    """The same answer with credentials and without: none of these asks for them."""
    for auth in (True, False):
        got = ask(broker, method, path, auth)
        if method == "HEAD":
            expected = Answer(
                expected.status, b"", expected.allow, expected.location, expected.content_type
            )
        assert got == expected, (method, path, "with" if auth else "without", "credentials")


# ------------------------------------------------------------------ unknown paths
UNKNOWN = ["/api/nonexistent", "/api/queues/vh/q/x/y", "/nonexistent", "/nonexistent/deeper"]


@pytest.mark.parametrize("path", UNKNOWN)
def test_an_unknown_path_is_a_missing_static_file(mbroker: BrokerUnderTest, path: str) -> None:
    """No path is unknown to RabbitMQ's router: a catch-all route serves the plugins' static
    files (rabbit_mgmt_wm_static), which allows HEAD, GET and OPTIONS, and a file that is
    not there is a 404 whose empty body the listener turns into JSON."""
    check(mbroker, "GET", path, not_found())
    check(mbroker, "HEAD", path, not_found())
    check(mbroker, "OPTIONS", path, Answer(200, allow=STATIC))
    for method in ("DELETE", "PUT", "POST", "PATCH"):
        check(mbroker, method, path, Answer(405, allow=STATIC))


@pytest.mark.parametrize(
    "path",
    [
        "/api/queues/%2F/q/x/y",
        "/api/queues/%2F/q/unknownsub",
        "/api/queues/%2F/q/bindings/extra",
        "/api/exchanges/%2F/amq.direct/bindings/sideways",
        "/api/a%5Cb",
        "/api/a%00b",
    ],
)
def test_a_reserved_character_in_an_unknown_path_is_a_bad_request(
    mbroker: BrokerUnderTest, path: str
) -> None:
    """A path no API route matches, with a segment that decodes to "/", "\\" or NUL:
    cowboy_static refuses it as malformed (400), after the method check (405)."""
    for method in ("GET", "HEAD", "OPTIONS"):
        check(mbroker, method, path, Answer(400))
    for method in ("DELETE", "PUT", "POST"):
        check(mbroker, method, path, Answer(405, allow=STATIC))


@pytest.mark.parametrize("path", ["/api/%zz", "/api/queues/a[b", "/api/a\\b", "/a%2"])
def test_a_path_the_router_cannot_decode_is_a_bad_request(
    mbroker: BrokerUnderTest, path: str
) -> None:
    """cowboy_router decodes each segment (cow_uri:urldecode): a bad escape or a character
    outside RFC 3986's pchar is a 400 before any route, whatever the method."""
    for method in ("GET", "DELETE", "OPTIONS"):
        check(mbroker, method, path, Answer(400))


def test_characters_the_router_accepts(mbroker: BrokerUnderTest) -> None:
    check(mbroker, "GET", "/api/a~b!$&'()*+,;=:@_-.c", not_found())


def test_options_star_matches_no_route(mbroker: BrokerUnderTest) -> None:
    check(mbroker, "OPTIONS", "*", not_found())


# ------------------------------------------------------------------- redirects
@pytest.mark.parametrize(
    ("path", "location"),
    [
        ("/api", "/api/index.html"),
        ("/api/", "/api/index.html"),
        ("/cli", "/cli/index.html"),
        ("/mgmt", "/"),
        ("/stats", "/api/index.html"),
        ("/doc/stats.html", "/api/index.html"),
    ],
)
def test_redirects(mbroker: BrokerUnderTest, path: str, location: str) -> None:
    """rabbit_mgmt_wm_redirect answers 301 to any method; the router drops one trailing
    slash, so /api/ is /api."""
    for method in ("GET", "HEAD", "OPTIONS", "DELETE", "PUT", "POST", "PATCH"):
        check(mbroker, method, path, Answer(301, location=location))


# ------------------------------------------------------------------ known paths
# RabbitMQ 3.10.8's allowed_methods/2 (cowboy_rest's HEAD, GET, OPTIONS where a module has
# none), for routes Leveret serves.
ALLOWED = {
    "/api/overview": STATIC,
    "/api/overview/": STATIC,
    "/api/whoami": STATIC,
    "/api/vhosts": STATIC,
    "/api/vhosts/%2F": "HEAD, GET, PUT, DELETE, OPTIONS",
    "/api/queues": STATIC,
    "/api/queues/%2F/q": "HEAD, GET, PUT, DELETE, OPTIONS",
    "/api/queues/%2F/q/": "HEAD, GET, PUT, DELETE, OPTIONS",
    "/api/queues/%2F/q/contents": "DELETE, OPTIONS",
    "/api/queues/%2F/q/get": "POST, OPTIONS",
    "/api/queues/%2F/q/bindings": STATIC,
    "/api/exchanges/%2F/x": "HEAD, GET, PUT, DELETE, OPTIONS",
    "/api/exchanges/%2F/x/publish": "POST, OPTIONS",
    "/api/exchanges/%2F/x/bindings/source": STATIC,
    "/api/bindings/%2F/e/x/q/y": "HEAD, GET, POST, OPTIONS",
    "/api/bindings/%2F/e/x/q/y/~": "HEAD, GET, DELETE, OPTIONS",
    "/api/connections/c": "HEAD, GET, DELETE, OPTIONS",
    "/api/definitions": "HEAD, GET, POST, OPTIONS",
    "/api/users/guest": "HEAD, GET, PUT, DELETE, OPTIONS",
    "/api/users/bulk-delete": "POST, OPTIONS",
    "/api/users/without-permissions": STATIC,
    "/api/permissions/%2F/guest": "HEAD, GET, PUT, DELETE, OPTIONS",
    "/api/policies/%2F/p": "HEAD, GET, PUT, DELETE, OPTIONS",
    "/api/vhost-limits": "GET, OPTIONS",
    "/api/vhost-limits/%2F": "GET, OPTIONS",
    "/api/vhost-limits/%2F/max-queues": "PUT, DELETE, OPTIONS",
    "/api/user-limits/guest": "GET, OPTIONS",
    "/api/topic-permissions/%2F/guest": "HEAD, GET, PUT, DELETE, OPTIONS",
    "/": STATIC,
}


@pytest.mark.parametrize("path", sorted(ALLOWED))
def test_options_lists_the_allowed_methods(mbroker: BrokerUnderTest, path: str) -> None:
    """cowboy_rest answers OPTIONS with the resource's allowed methods; the management
    resources' is_authorized lets OPTIONS through without credentials."""
    check(mbroker, "OPTIONS", path, Answer(200, allow=ALLOWED[path]))


WRONG = [
    ("DELETE", "/api/overview"),
    ("PATCH", "/api/overview"),
    ("POST", "/api/queues/%2F/q"),
    ("PUT", "/api/queues/%2F/q/bindings"),
    ("GET", "/api/queues/%2F/q/get"),
    ("GET", "/api/queues/%2F/q/contents"),
    ("DELETE", "/api/exchanges/%2F/x/publish"),
    ("POST", "/api/bindings/%2F/e/x/q/y/~"),
    # the path belongs to the literal route, which RabbitMQ lists before /api/users/:user
    ("GET", "/api/users/bulk-delete"),
    ("PUT", "/api/users/without-permissions"),
    ("DELETE", "/api/users/without-permissions"),
    ("HEAD", "/api/vhost-limits"),
    ("HEAD", "/api/vhost-limits/%2F"),
    ("GET", "/api/vhost-limits/%2F/max-queues"),
    ("DELETE", "/"),
]


@pytest.mark.parametrize(("method", "path"), WRONG)
def test_a_method_the_path_does_not_allow(mbroker: BrokerUnderTest, method: str, path: str) -> None:
    """cowboy_rest checks the method (405, with allow) before the credentials."""
    check(mbroker, method, path, Answer(405, allow=ALLOWED[path]))


def test_an_allowed_method_still_asks_for_credentials(mbroker: BrokerUnderTest) -> None:
    got = ask(mbroker, "GET", "/api/overview", auth=False)
    assert (got.status, got.body) == (401, b"")
    assert ask(mbroker, "GET", "/api/overview", auth=True).status == 200
    assert ask(mbroker, "GET", "/api/users/without-permissions", auth=True).status == 200


@pytest.mark.parametrize("path", ["/api/overview", "/api/nonexistent", "/api", "/"])
def test_methods_cowboy_does_not_implement(mbroker: BrokerUnderTest, path: str) -> None:
    """cowboy_http refuses CONNECT and TRACE with the request line, whatever the path;
    cowboy_rest refuses a method outside its known ones (501 both)."""
    check(mbroker, "TRACE", path, Answer(501))
    if path != "/api":  # rabbit_mgmt_wm_redirect is no REST resource: 301 for any method
        check(mbroker, "PROPFIND", path, Answer(501))
