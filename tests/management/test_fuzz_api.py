"""Fuzzed management API requests against a live Leveret: every route the application
serves (taken from its own router), with drawn path segments (names that exist, names that
do not, any Unicode, stray slashes and bad percent-escapes), drawn query strings (the
parameters the API reads, with values of every shape, and others), and drawn bodies (a
valid body for the route with one key given a value of another type, removed or added; any
JSON value; bytes that are not JSON), sent with drawn content types.

After every request: no answer is a server error, every error answer under ``/api/`` is
RabbitMQ's ``{"error": ..., "reason": ...}`` object (or empty where RabbitMQ's is: a 405, a
400 for a path its router refuses), the broker's log holds no traceback or
error, and the witness (a consumer with messages waiting and a durable queue of persistent
messages, in a vhost the fuzzing never names) has noticed nothing.

In the suite: 300 derandomized cases. ``LEVERET_FUZZ_EXAMPLES=N`` (with
``LEVERET_FUZZ_SECONDS``) runs a campaign instead that records every distinct failure and
writes them to ``$LEVERET_FUZZ_DIR/api.json`` (see tests/support/fuzzing.py)."""

from __future__ import annotations

import base64
import http.client
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, unquote_to_bytes, urlencode

import pytest
from aiohttp import web
from hypothesis import given
from hypothesis import strategies as st

from leveret.management import routing
from leveret.management.app import routes as api_routes
from tests.support.fuzzing import (
    CAMPAIGN_EXAMPLES,
    QUEUE_ARGUMENT_KEYS,
    WITNESS_USER,
    WITNESS_VHOST,
    Campaign,
    LogWatch,
    Witness,
    describe_exception,
    fresh_broker,
    harm,
    in_suite_settings,
)

IN_SUITE_EXAMPLES = 300


# ------------------------------------------------------------------------ the routes
def _routes() -> list[tuple[str, str]]:
    """(method, path template) of every route the management application serves."""
    app = web.Application()
    api_routes(app)
    out = set()
    for route in app.router.routes():
        info = route.resource.get_info() if route.resource is not None else {}
        template = info.get("formatter") or info.get("path")
        if template and route.method in ("GET", "PUT", "POST", "DELETE"):
            out.add((route.method, template))
    # served beside the API by the dashboard and the streams module
    out |= {
        ("GET", "/api/queues/{vhost}/{name}/stream-status"),
        ("GET", "/api/logs/lake"),
        ("GET", "/api/logs/report"),
        ("GET", "/api/logs/report/{path}"),
    }
    return sorted(out)


ROUTES = _routes()
PARAM = re.compile(r"\{([a-z_]+)(?::[^}]*)?\}")

# names that exist (or may, once a case made them), so that requests get past the lookups
KNOWN = {
    "vhost": ["/", "fuzz"],
    "user": ["guest", "fuzz-user"],
    "name": [
        "fuzz-q",
        "fuzz-x",
        "amq.direct",
        "amq.topic",
        "fuzz-policy",
        "max-connections",
        "max-queues",
        "max-channels",
    ],
    "source": ["amq.direct", "fuzz-x", ""],
    "dest": ["fuzz-q", "fuzz-x"],
    "props": ["~", "rk", "rk~abc"],
    "node": ["rabbit@localhost"],
    "kind": ["q", "e"],
    "direction": ["source", "destination"],
}
# the requests are sent as an administrator of the fuzzing's own, that no request names
# (changing its password or tags would turn every later request into a 401), as the
# witness is never named
ADMIN, ADMIN_PASSWORD = "fuzz-admin", "fuzz-admin-pw"
FORBIDDEN = {WITNESS_VHOST, WITNESS_USER, ADMIN}

QUERY_KEYS = [
    "page",
    "page_size",
    "name",
    "use_regex",
    "pagination",
    "sort",
    "sort_reverse",
    "columns",
    "lengths_age",
    "lengths_incr",
    "msg_rates_age",
    "msg_rates_incr",
    "data_rates_age",
    "data_rates_incr",
    "if-unused",
    "if-empty",
    "vhost",
    "exchange",
    "disable_stats",
    "enable_queue_totals",
    "download",
    "limit",
]

TEXT = st.text(max_size=16).filter(lambda s: s not in FORBIDDEN)


def json_values(depth: int = 2) -> st.SearchStrategy[Any]:
    scalars = st.one_of(
        st.none(),
        st.booleans(),
        st.integers(),
        st.sampled_from([0, -1, 1, 2**31, 2**63, -(2**63) - 1, 10**40]),
        st.floats(allow_nan=False),
        TEXT,
        st.sampled_from(
            [
                "",
                "x-",
                "classic",
                "quorum",
                "stream",
                "lazy",
                "drop-head",
                "reject-publish",
                "all",
                "queues",
                "exchanges",
                "auto",
                "base64",
                "string",
                "ack_requeue_true",
                "reject_requeue_false",
                ".*",
                "^$",
                "(",
                "administrator",
                "1D",
                "first",
            ]
        ),
    )
    if depth == 0:
        return scalars
    inner = json_values(depth - 1)
    return st.one_of(scalars, st.lists(inner, max_size=4), st.dictionaries(TEXT, inner, max_size=4))


ARGUMENT_KEYS = [
    *QUEUE_ARGUMENT_KEYS,
    "x-single-active-consumer",
    "x-max-age",
    "x-stream-max-segment-size-bytes",
    "x-initial-cluster-size",
    "x-delivery-limit",
    "alternate-exchange",
    "x-queue-master-locator",
]


def arguments() -> st.SearchStrategy[dict[str, Any]]:
    return st.dictionaries(
        st.one_of(st.sampled_from(ARGUMENT_KEYS), TEXT), json_values(1), max_size=3
    )


# a valid body per kind of route, to be mutated
def base_body(method: str, template: str) -> dict[str, Any] | None:
    if method in ("GET", "DELETE"):
        return None
    t = template
    if t.startswith("/api/queues/") and t.endswith("/get"):
        return {"count": 2, "ackmode": "ack_requeue_true", "encoding": "auto", "truncate": 50}
    if t.endswith("/publish"):
        return {
            "properties": {"delivery_mode": 2, "headers": {"a": 1}},
            "routing_key": "fuzz-q",
            "payload": "hello",
            "payload_encoding": "string",
        }
    if t.startswith("/api/queues/"):
        return {"durable": True, "auto_delete": False, "arguments": {"x-max-length": 10}}
    if t.startswith("/api/exchanges/"):
        return {
            "type": "direct",
            "durable": True,
            "auto_delete": False,
            "internal": False,
            "arguments": {},
        }
    if t.startswith("/api/bindings/"):
        return {"routing_key": "rk", "arguments": {"abc": "1"}}
    if t == "/api/users/bulk-delete":
        return {"users": ["fuzz-user"]}
    if t.startswith("/api/users/"):
        return {"password": "secret", "tags": "management"}
    if t.startswith("/api/topic-permissions/"):
        return {"exchange": "amq.topic", "write": ".*", "read": ".*"}
    if t.startswith("/api/permissions/"):
        return {"configure": ".*", "write": ".*", "read": ".*"}
    if t.startswith(("/api/policies/", "/api/operator-policies/")):
        return {
            "pattern": "^fuzz",
            "definition": {"max-length": 5},
            "priority": 0,
            "apply-to": "queues",
        }
    if t.startswith(("/api/vhost-limits/", "/api/user-limits/")):
        return {"value": 100}
    if t.startswith("/api/vhosts/"):
        return {"description": "fuzzed", "tags": "a,b", "tracing": False}
    if t.startswith("/api/definitions"):
        return {
            "rabbit_version": "3.10.8",
            "queues": [
                {
                    "name": "fuzz-q",
                    "vhost": "fuzz",
                    "durable": True,
                    "auto_delete": False,
                    "arguments": {},
                }
            ],
            "exchanges": [],
            "bindings": [],
            "policies": [],
            "users": [],
            "vhosts": [],
            "permissions": [],
        }
    return {}


@dataclass(frozen=True)
class ApiCase:
    method: str
    path: str
    body: bytes | None
    content_type: str | None

    def jsonable(self) -> dict[str, Any]:
        return {
            "method": self.method,
            "path": self.path,
            "body": None if self.body is None else self.body.decode("utf-8", "replace"),
            "content_type": self.content_type,
        }


def segment(draw: Any, param: str) -> str:
    known = KNOWN.get(param, [])
    if param in ("kind", "direction"):
        return draw(st.sampled_from(known))
    if known and draw(st.integers(0, 2)) > 0:
        return quote(draw(st.sampled_from(known)), safe="")
    raw = draw(
        st.one_of(
            TEXT,
            st.sampled_from(
                ["..", ".", "%", "%zz", "%2F", "a/b", "~", " ", "\u00e9\u4e2d", "a" * 300]
            ),
        )
    )
    if draw(st.booleans()):
        return quote(raw, safe="")
    # stray slashes and percent signs left as they are
    return quote(raw, safe="/%~")


@st.composite
def api_cases(draw: Any) -> ApiCase:
    method, template = draw(st.sampled_from(ROUTES))
    if draw(st.integers(0, 19)) == 0:  # now and then a method the route does not serve
        method = draw(st.sampled_from(["GET", "PUT", "POST", "DELETE", "PATCH"]))
    path = PARAM.sub(lambda m: segment(draw, m.group(1)), template)
    query = draw(
        st.lists(
            st.tuples(
                st.one_of(st.sampled_from(QUERY_KEYS), TEXT),
                st.one_of(
                    TEXT,
                    st.integers().map(str),
                    st.sampled_from(
                        [
                            "true",
                            "false",
                            "",
                            "0",
                            "-1",
                            "name",
                            "messages,name",
                            "a.b.c",
                            "1e999",
                            "nan",
                        ]
                    ),
                ),
            ),
            max_size=4,
        )
    )
    if query:
        path += "?" + urlencode(query, quote_via=quote)
    body: bytes | None = None
    content_type: str | None = "application/json"
    valid = base_body(method, template)
    shape = draw(st.integers(0, 9))
    if valid is not None and shape <= 5:
        doc = dict(valid)
        for _ in range(draw(st.integers(0, 3))):
            what = draw(st.sampled_from(["retype", "remove", "add", "arguments"]))
            if what == "retype" and doc:
                doc[draw(st.sampled_from(sorted(doc)))] = draw(json_values())
            elif what == "remove" and doc:
                doc.pop(draw(st.sampled_from(sorted(doc))))
            elif what == "arguments":
                doc["arguments"] = draw(arguments())
            else:
                doc[draw(TEXT)] = draw(json_values())
        body = json.dumps(doc).encode()
    elif shape <= 7:
        body = json.dumps(draw(json_values())).encode()
    elif shape == 8:
        body = draw(
            st.one_of(
                st.binary(max_size=64),
                st.sampled_from(
                    [
                        b"{",
                        b"[1,",
                        b'{"a":}',
                        b"\xff\xfe{}",
                        b"null",
                        b'{"password": "\\ud800"}',
                        b"{}" * 1000,
                    ]
                ),
            )
        )
    if draw(st.integers(0, 9)) == 0:
        content_type = draw(
            st.sampled_from(
                [
                    None,
                    "text/plain",
                    "application/x-www-form-urlencoded",
                    "multipart/form-data; boundary=x",
                    "application/json; charset=latin-1",
                ]
            )
        )
    return ApiCase(method, path, body, content_type)


# ------------------------------------------------------------------------ the target
class Target:
    """The broker under fuzzing, its witness and its log."""

    def __init__(self) -> None:
        self.broker = fresh_broker()
        self.witness = Witness(self.broker)
        self.watch = LogWatch(self.broker)
        self.auth = "Basic " + base64.b64encode(b"guest:guest").decode()
        self.send(
            ApiCase(
                "PUT",
                f"/api/users/{ADMIN}",
                json.dumps({"password": ADMIN_PASSWORD, "tags": "administrator"}).encode(),
                "application/json",
            )
        )
        self.auth = "Basic " + base64.b64encode(f"{ADMIN}:{ADMIN_PASSWORD}".encode()).decode()
        # the objects the known names refer to
        for case in (
            ApiCase("PUT", "/api/vhosts/fuzz", b"{}", "application/json"),
            ApiCase(
                "PUT",
                f"/api/permissions/%2F/{ADMIN}",
                b'{"configure":".*","write":".*","read":".*"}',
                "application/json",
            ),
            ApiCase(
                "PUT",
                f"/api/permissions/fuzz/{ADMIN}",
                b'{"configure":".*","write":".*","read":".*"}',
                "application/json",
            ),
            ApiCase("PUT", "/api/queues/fuzz/fuzz-q", b"{}", "application/json"),
            ApiCase("PUT", "/api/exchanges/fuzz/fuzz-x", b'{"type":"direct"}', "application/json"),
        ):
            status, _, _ = self.send(case)
            assert status in (201, 204), (case, status)

    def restart(self) -> None:
        self.stop()
        self.__init__()  # type: ignore[misc]

    def stop(self) -> None:
        self.witness.close()
        self.broker.stop()

    def send(self, case: ApiCase) -> tuple[int, bytes, str | None]:
        """The status, body and ``allow`` header of the answer."""
        conn = http.client.HTTPConnection(self.broker.host, self.broker.http_port, timeout=30)
        try:
            conn.putrequest(case.method, case.path, skip_accept_encoding=True)
            conn.putheader("Authorization", self.auth)
            if case.content_type is not None:
                conn.putheader("Content-Type", case.content_type)
            conn.putheader("Content-Length", str(len(case.body or b"")))
            conn.endheaders(case.body or b"")
            resp = conn.getresponse()
            return resp.status, resp.read(), resp.getheader("allow")
        finally:
            conn.close()

    def failure(self, case: ApiCase) -> tuple[str, str] | None:
        """Send one request; what went wrong, as (signature, detail), or None."""
        route = PARAM.sub("{}", case.path.split("?")[0])
        try:
            status, raw, allow = self.send(case)
        except (OSError, http.client.HTTPException) as exc:
            return f"http: {describe_exception(exc)}", describe_exception(exc)
        harmed = harm(self.watch, self.witness)
        if harmed is not None:
            return harmed
        text = raw[:300].decode("utf-8", "replace")
        if status >= 500 and not failed_check(case, status, raw):
            return f"status {status} from {case.method}", f"{route}: {text}"
        if (
            status >= 400
            and case.path.startswith("/api/")
            and not empty_as_rabbitmq(case, status, raw, allow)
            and not failed_check(case, status, raw)
        ):
            try:
                doc = json.loads(raw)
            except ValueError:
                doc = None
            if not (isinstance(doc, dict) and {"error", "reason"} <= doc.keys()):
                return (
                    f"status {status} without RabbitMQ's error object",
                    f"{case.method} {route}: {text}",
                )
        return None


def failed_check(case: ApiCase, status: int, raw: bytes) -> bool:
    """A health check that failed (a port or protocol with no listener): RabbitMQ's 503
    with its ``{"status":"failed",...}`` body, not the server failing."""
    if status != 503 or not case.path.startswith(("/api/health/checks/", "/api/healthchecks/")):
        return False
    try:
        doc = json.loads(raw)
    except ValueError:
        return False
    return isinstance(doc, dict) and doc.get("status") == "failed"


def empty_as_rabbitmq(case: ApiCase, status: int, raw: bytes, allow: str | None) -> bool:
    """The answers RabbitMQ gives with an empty body rather than its error object: a method
    the path does not allow (405, with ``allow``), and a path its router cannot decode or
    whose segment decodes to a character its static file handler refuses (400)."""
    if raw:
        return False
    if status == 405:
        return allow is not None and "OPTIONS" in allow
    segments = case.path.split("?")[0][1:].split("/")
    return status == 400 and any(
        not routing.SEGMENT.fullmatch(s) or routing.RESERVED.intersection(unquote_to_bytes(s))
        for s in segments
    )


@pytest.fixture(scope="module")
def target() -> Iterator[Target]:
    t = Target()
    yield t
    t.stop()


def test_every_route_is_fuzzed() -> None:
    """The route table is the application's own, so a new route is fuzzed too."""
    assert len(ROUTES) > 60
    assert ("POST", "/api/definitions") in ROUTES
    assert ("PUT", "/api/queues/{vhost}/{name}") in ROUTES


@pytest.mark.skipif(CAMPAIGN_EXAMPLES > 0, reason="the campaign runs instead")
@in_suite_settings(IN_SUITE_EXAMPLES)
@given(case=api_cases())
def test_fuzzed_requests_leave_the_broker_and_others_alone(target: Target, case: ApiCase) -> None:
    assert target.failure(case) is None


def test_the_witness_messages_are_all_deliverable(target: Target) -> None:
    target.witness.check()
    target.witness.deliverable()


# ------------------------------------------------------------------------ the campaign
@pytest.mark.skipif(CAMPAIGN_EXAMPLES == 0, reason="LEVERET_FUZZ_EXAMPLES runs a campaign")
@pytest.mark.timeout(0)  # it runs for LEVERET_FUZZ_SECONDS, past the suite's per-test limit
def test_campaign() -> None:
    campaign = Campaign("api")
    t = Target()

    def check(case: ApiCase) -> None:
        got = t.failure(case)
        if got is not None:
            sig, detail = got
            campaign.record(sig, detail, case.jsonable(), len(json.dumps(case.jsonable())))
            if sig.startswith(("witness", "http")) or (
                t.broker.process is not None and t.broker.process.poll() is not None
            ):
                t.restart()

    try:
        campaign.drive(api_cases(), check)
        campaign.save()
    finally:
        t.stop()
    assert not campaign.failures, [f.signature for f in campaign.failures.values()]
