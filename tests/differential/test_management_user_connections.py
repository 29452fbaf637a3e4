"""Two resources of RabbitMQ 3.10.8's management API, the same on Leveret:

- ``/api/auth`` (rabbit_mgmt_wm_auth), which the management UI asks to learn how to log in:
  OAuth 2 is off (Leveret has none), and the answer is the same with credentials, without,
  or with wrong ones (its is_authorized lets every request in);
- ``/api/connections/username/{username}`` (rabbit_mgmt_wm_connection_user_name): a user's
  connections as connection tracking knows them (name, vhost, user, node), sorted, paged
  and projected as any listing; DELETE closes them all with the ``X-Reason`` header's reason
  (or "Closed via management plugin"), 204 whether there were any or not. A user that does
  not exist has none. A monitoring user may list anyone's, an administrator close them.

The shared RabbitMQ has other clients' connections as guest: the closing is done on users
of the test's own, and guest's listing is checked to hold the test's own connections."""

from __future__ import annotations

import base64
import http.client
import json
import uuid
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Any

import pika
import pytest

from tests.support.brokers import BrokerUnderTest
from tests.support.mgmt import Api, q
from tests.support.waiting import STATS_WAIT, wait_for

pytestmark = pytest.mark.rabbitmq

CSP = "script-src 'self' 'unsafe-eval' 'unsafe-inline'; object-src 'self'"
RESOURCE = "accept, accept-encoding, origin"
NO_OAUTH = b'{"enable_uaa":false,"uaa_client_id":"","uaa_location":""}'
PASSWORD = "pw-user-connections"


@dataclass(frozen=True, slots=True)
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes


COMPARED = ("content-type", "cache-control", "vary", "content-security-policy", "allow")


def ask(
    broker: BrokerUnderTest,
    method: str,
    path: str,
    user: tuple[str, str] | None = ("guest", "guest"),
    reason: str | None = None,
) -> Answer:
    """One request on a connection of its own: the status, the compared headers, the body."""
    conn = http.client.HTTPConnection(broker.host, broker.http_port, timeout=30)
    sent = {}
    if user is not None:
        sent["Authorization"] = "Basic " + base64.b64encode(":".join(user).encode()).decode()
    if reason is not None:
        sent["X-Reason"] = reason
    try:
        conn.request(method, path, headers=sent)
        r = conn.getresponse()
        body = r.read()
        got = {k.lower(): v for k, v in r.getheaders()}
        return Answer(r.status, {k: got[k] for k in COMPARED if k in got}, body)
    finally:
        conn.close()


def listed(broker: BrokerUnderTest, user: str, query: str = "") -> Any:
    answer = ask(broker, "GET", f"/api/connections/username/{q(user)}{query}")
    assert answer.status == 200, answer
    assert answer.headers == {
        "content-type": "application/json",
        "cache-control": "no-cache",
        "vary": RESOURCE,
        "content-security-policy": CSP,
    }
    return json.loads(answer.body)


@dataclass(frozen=True, slots=True)
class Users:
    owner: str  # no tags: connects, never asks the API
    other: str  # another one
    manager: str  # tagged management: may use the API, is no monitor
    monitor: str  # tagged monitoring


@pytest.fixture
def users(mbroker: BrokerUnderTest) -> Iterator[Users]:
    api = Api(mbroker.http_url)
    tag = uuid.uuid4().hex[:8]
    made = Users(f"uc-owner-{tag}", f"uc-other-{tag}", f"uc-manager-{tag}", f"uc-monitor-{tag}")
    tags = {made.owner: "", made.other: "", made.manager: "management", made.monitor: "monitoring"}
    try:
        for user, tagged in tags.items():
            assert api.put(f"/api/users/{user}", {"password": PASSWORD, "tags": tagged}) in (
                201,
                204,
            )
            everything = {"configure": ".*", "write": ".*", "read": ".*"}
            assert api.put(f"/api/permissions/%2F/{user}", everything) in (201, 204)
        yield made
    finally:
        for user in tags:
            api.delete(f"/api/users/{user}")


def connect(
    stack: ExitStack, broker: BrokerUnderTest, user: str, password: str = PASSWORD
) -> tuple[str, pika.BlockingConnection]:
    """A connection of ``user``, closed when ``stack`` ends, and its name in the management
    API (found by its client-given name: /api/connections lags by RabbitMQ's stats
    interval)."""
    given = f"uc-{uuid.uuid4().hex[:10]}"
    params = broker.pika_params(
        credentials=pika.PlainCredentials(user, password),
        client_properties={"connection_name": given},
    )
    conn = pika.BlockingConnection(params)
    stack.callback(lambda: conn.close() if conn.is_open else None)
    api = Api(broker.http_url)

    def named() -> str | None:
        for c in api.get("/api/connections"):
            if (c.get("client_properties") or {}).get("connection_name") == given:
                return str(c["name"])
        return None

    name = wait_for(named, timeout=STATS_WAIT)
    assert name, f"connection {given} never showed in /api/connections"
    return name, conn


def closed_with(conn: pika.BlockingConnection) -> tuple[int, str] | None:
    """The connection.close the broker sent, waiting up to 30 s; None if still open."""
    try:
        wait_for(lambda: conn.process_data_events(0.1) or False, timeout=30, interval=0)
    except pika.exceptions.ConnectionClosedByBroker as exc:
        return exc.reply_code, exc.reply_text
    return None


def still_open(conn: pika.BlockingConnection) -> bool:
    conn.process_data_events(0.5)
    return bool(conn.is_open)


def node_of(broker: BrokerUnderTest) -> str:
    return str(Api(broker.http_url).get("/api/overview")["node"])


# ------------------------------------------------------------------------ /api/auth
@pytest.mark.parametrize("user", [("guest", "guest"), None, ("guest", "wrong")])
def test_auth_answers_anyone(mbroker: BrokerUnderTest, user: tuple[str, str] | None) -> None:
    assert ask(mbroker, "GET", "/api/auth", user) == Answer(
        200,
        {
            "content-type": "application/json",
            "cache-control": "no-cache",
            "vary": RESOURCE,
            "content-security-policy": CSP,
        },
        NO_OAUTH,
    )
    assert ask(mbroker, "HEAD", "/api/auth", user).status == 200


def test_auth_methods(mbroker: BrokerUnderTest) -> None:
    allow = {"allow": "HEAD, GET, OPTIONS", "vary": "origin", "content-security-policy": CSP}
    assert ask(mbroker, "OPTIONS", "/api/auth", None) == Answer(200, allow, b"")
    assert ask(mbroker, "POST", "/api/auth") == Answer(405, allow, b"")
    assert ask(mbroker, "DELETE", "/api/auth", None) == Answer(405, allow, b"")


# ------------------------------------------------------- a user's connections: methods
def test_user_connections_methods(mbroker: BrokerUnderTest) -> None:
    path = "/api/connections/username/guest"
    allow = {
        "allow": "HEAD, GET, DELETE, OPTIONS",
        "vary": "origin",
        "content-security-policy": CSP,
    }
    assert ask(mbroker, "OPTIONS", path, None) == Answer(200, allow, b"")
    assert ask(mbroker, "POST", path) == Answer(405, allow, b"")
    assert ask(mbroker, "PUT", path, None) == Answer(405, allow, b"")
    unauthenticated = ask(mbroker, "GET", path, None)
    assert (unauthenticated.status, unauthenticated.headers, unauthenticated.body) == (
        401,
        {"vary": "origin", "content-security-policy": CSP},
        b"",
    )
    # "channels" is a user name here, as in RabbitMQ's dispatch list
    assert listed(mbroker, "channels") == []


def test_an_unknown_user_has_no_connections(mbroker: BrokerUnderTest) -> None:
    nobody = f"uc-nobody-{uuid.uuid4().hex[:8]}"
    assert listed(mbroker, nobody) == []
    assert listed(mbroker, nobody, "?page=1&page_size=5") == {
        "total_count": 0,
        "item_count": 0,
        "filtered_count": 0,
        "page": 1,
        "page_size": 5,
        "page_count": 0,
        "items": [],
    }
    # rabbit_mgmt_util:pagination_params and range_filter
    path = f"/api/connections/username/{nobody}"
    for query, error, reason in (
        ("?page=x", "bad_request", "Pagination parameters are invalid"),
        ("?page_size=x", "bad_request", "Pagination parameters are invalid"),
        (
            "?page=0",
            "invalid_pagination_parameters",
            "Invalid pagination parameters: page number 0, page size undefined",
        ),
        (
            "?page=1&page_size=501",
            "invalid_pagination_parameters",
            "Invalid pagination parameters: page number 1, page size 501",
        ),
        ("?page=2", "page_out_of_range", "Page out of range, page: 2 page size: 100, len: 0"),
    ):
        answer = ask(mbroker, "GET", path + query)
        assert (answer.status, json.loads(answer.body)) == (
            400,
            {"error": error, "reason": reason},
        ), query
        assert answer.headers == {
            "content-type": "application/json",
            "vary": RESOURCE,
            "content-security-policy": CSP,
        }
    gone = ask(mbroker, "DELETE", f"/api/connections/username/{nobody}")
    assert (gone.status, gone.body) == (204, b"")
    assert gone.headers == {"vary": RESOURCE, "content-security-policy": CSP}


# ------------------------------------------------------- a user's connections: listing
def test_listing_a_users_connections(mbroker: BrokerUnderTest, users: Users) -> None:
    node = node_of(mbroker)
    with ExitStack() as stack:
        mine = sorted(connect(stack, mbroker, users.owner)[0] for _ in range(2))
        theirs, _ = connect(stack, mbroker, users.other)
        guests = [connect(stack, mbroker, "guest", "guest")[0] for _ in range(2)]

        expected = [{"name": n, "vhost": "/", "user": users.owner, "node": node} for n in mine]
        assert wait_for(lambda: listed(mbroker, users.owner) == expected), listed(
            mbroker, users.owner
        )
        assert listed(mbroker, users.other) == [
            {"name": theirs, "vhost": "/", "user": users.other, "node": node}
        ]
        # guest's: the test's two among whatever other clients of the broker hold
        of_guest = listed(mbroker, "guest")
        assert {c["name"] for c in of_guest} >= set(guests)
        assert {c["user"] for c in of_guest} == {"guest"}
        assert of_guest == sorted(of_guest, key=lambda c: (c["vhost"], c["name"]))

        # a monitoring user sees anyone's
        monitor = (users.monitor, PASSWORD)
        seen = ask(mbroker, "GET", f"/api/connections/username/{users.owner}", monitor)
        assert (seen.status, json.loads(seen.body)) == (200, expected)

        # rabbit_mgmt_util:reply_list_or_paginate: sorting, columns, pages
        assert listed(mbroker, users.owner, "?columns=name,user&sort=name&sort_reverse=true") == [
            {"name": n, "user": users.owner} for n in reversed(mine)
        ]
        assert listed(mbroker, users.owner, "?page=2&page_size=1") == {
            "total_count": 2,
            "item_count": 1,
            "filtered_count": 2,
            "page": 2,
            "page_size": 1,
            "page_count": 2,
            "items": expected[1:],
        }


# ------------------------------------------------------- a user's connections: closing
def test_closing_a_users_connections(mbroker: BrokerUnderTest, users: Users) -> None:
    with ExitStack() as stack:
        (mine0, conn0), (mine1, conn1) = (connect(stack, mbroker, users.owner) for _ in "01")
        theirs, conn2 = connect(stack, mbroker, users.other)
        conns = [conn0, conn1, conn2]
        assert wait_for(lambda: len(listed(mbroker, users.owner)) == 2)

        closed = ask(mbroker, "DELETE", f"/api/connections/username/{users.owner}", reason="bye")
        assert (closed.status, closed.body) == (204, b"")
        assert closed.headers == {"vary": RESOURCE, "content-security-policy": CSP}
        assert [closed_with(c) for c in conns[:2]] == [(320, "CONNECTION_FORCED - bye")] * 2
        assert still_open(conns[2])
        assert wait_for(lambda: listed(mbroker, users.owner) == []), (mine0, mine1)
        assert [c["name"] for c in listed(mbroker, users.other)] == [theirs]

        # without X-Reason: the single-connection DELETE's reason
        closed = ask(mbroker, "DELETE", f"/api/connections/username/{users.other}")
        assert closed.status == 204
        assert closed_with(conns[2]) == (320, "CONNECTION_FORCED - Closed via management plugin")


# ------------------------------------------------- a user's connections: who may ask
NOT_AUTHORISED = b'{"error":"not_authorised","reason":"User not authorised to access object"}'


def refused(broker: BrokerUnderTest, answer: Answer) -> bool:
    """RabbitMQ 3.10.8's check crashes for anyone it does not let through on its first
    test (it looks the user up in what is no connection): an HTTP 500 with no body. Leveret
    refuses with the check's own words."""
    if broker.name == "rabbitmq":
        return (answer.status, answer.body) == (500, b"")
    return (answer.status, answer.body, answer.headers) == (
        401,
        NOT_AUTHORISED,
        {"content-type": "application/json", "vary": "origin", "content-security-policy": CSP},
    )


def test_who_may_list_and_close(mbroker: BrokerUnderTest, users: Users) -> None:
    manager = (users.manager, PASSWORD)
    monitor = (users.monitor, PASSWORD)
    owner = (users.owner, PASSWORD)
    with ExitStack() as stack:
        conns = [connect(stack, mbroker, u)[1] for u in (users.owner, users.manager)]
        path = f"/api/connections/username/{users.owner}"
        assert wait_for(lambda: len(listed(mbroker, users.owner)) == 1)

        # a management user: neither another's connections nor its own
        assert refused(mbroker, ask(mbroker, "GET", path, manager))
        assert refused(mbroker, ask(mbroker, "DELETE", path, manager))
        own = f"/api/connections/username/{users.manager}"
        assert refused(mbroker, ask(mbroker, "GET", own, manager))
        assert refused(mbroker, ask(mbroker, "DELETE", own, manager))
        # a monitoring user lists, does not close
        assert ask(mbroker, "GET", path, monitor).status == 200
        assert refused(mbroker, ask(mbroker, "DELETE", path, monitor))
        # a user without management tags is no management user at all
        assert ask(mbroker, "GET", path, owner) == Answer(
            401,
            {"content-type": "application/json", "vary": "origin", "content-security-policy": CSP},
            b'{"error":"not_authorised","reason":"Not management user"}',
        )
        assert ask(mbroker, "DELETE", path, owner).status == 401
        # nothing refused closed anything
        assert all(still_open(c) for c in conns)
