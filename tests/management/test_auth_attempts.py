"""``/api/auth/attempts/{node}`` and ``…/source`` (rabbit_mgmt_wm_auth_attempts) on
Leveret and on RabbitMQ 3.10.8: the login attempts of each protocol the node counted
(rabbit_core_metrics' auth_attempt_metrics), as the same logins change them on both.

RabbitMQ counts, per protocol: an AMQP 0-9-1 or AMQP 1.0 SASL login checked (a wrong
password, an unknown user, a blank password, a loopback user from elsewhere fail; a
mechanism not offered is no attempt; the stream protocol counts none), and every
management API request that brings credentials (a login refused, a user without a
management tag, and a user the resource does not let in fail; a request without
credentials is no attempt). The request that reads the figures is counted before it
reads them.

The reference broker is shared: other clients' logins add to its figures per protocol
while a test runs. So the two are compared by source (rabbit.track_auth_attempt_source,
on for that test, on a Leveret of its own too): the rows of the scenario's own users."""

from __future__ import annotations

import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pika
import proton
import pytest
from pika.exceptions import ProbableAccessDeniedError, ProbableAuthenticationError

import leveret
from tests.management.test_metrics import scrape
from tests.support.amqp10 import (  # noqa: F401  (leveret_amqp10: a fixture)
    Amqp10Client,
    ensure_rabbitmq_amqp10,
    leveret_amqp10,
)
from tests.support.brokers import (
    RABBITMQ_STREAM_PORT,
    BrokerUnderTest,
    ensure_rabbitmq_stream,
    start_leveret,
)
from tests.support.mgmt import Api, Site, make_site, q, rabbitmq_with_management
from tests.support.streamclient import RawStreamClient

# one worker: the first test turns the reference's source tracking on, the next reads it off
pytestmark = [pytest.mark.rabbitmq, pytest.mark.xdist_group("auth-attempts")]

Figures = dict[str, tuple[int, int, int]]  # protocol -> (total, succeeded, failed)


@pytest.fixture
def lev(request: pytest.FixtureRequest) -> Iterator[Site]:
    """Leveret with AMQP 1.0 (its rabbitmq_amqp1_0 plugin), as the reference has it."""
    yield from make_site(request.getfixturevalue("leveret_amqp10"), "auth")


@pytest.fixture
def rmq(rabbitmq: BrokerUnderTest) -> Iterator[Site]:
    broker = rabbitmq_with_management(rabbitmq)
    if not ensure_rabbitmq_amqp10(broker):
        pytest.fail("RabbitMQ's rabbitmq_amqp1_0 plugin could not be enabled")
    yield from make_site(broker, "auth")


def node(site: Site) -> str:
    name: str = site.api.get("/api/overview")["node"]
    return name


def figures(api: Api, node_name: str) -> Figures:
    rows = api.get(f"/api/auth/attempts/{q(node_name)}")
    for row in rows:
        assert list(row) == [
            "protocol",
            "auth_attempts",
            "auth_attempts_failed",
            "auth_attempts_succeeded",
        ], row
    return {
        r["protocol"]: (r["auth_attempts"], r["auth_attempts_succeeded"], r["auth_attempts_failed"])
        for r in rows
    }


def change(before: Figures, after: Figures) -> Figures:
    out = {}
    for protocol, now in after.items():
        then = before.get(protocol, (0, 0, 0))
        moved = tuple(a - b for a, b in zip(now, then, strict=True))
        if any(moved):
            out[protocol] = (moved[0], moved[1], moved[2])
    return out


def amqp091_logins(site: Site, nobody: str) -> None:
    def params(user: str, password: str) -> pika.ConnectionParameters:
        return pika.ConnectionParameters(
            site.broker.host,
            site.broker.port,
            virtual_host=site.vhost,
            credentials=pika.PlainCredentials(user, password),
            connection_attempts=1,
        )

    pika.BlockingConnection(params(site.user, site.password)).close()  # succeeded
    for user, password in ((site.user, "wrong"), (nobody, "x"), (site.user, "")):
        with pytest.raises((ProbableAuthenticationError, ProbableAccessDeniedError)):
            pika.BlockingConnection(params(user, password))


def http_logins(site: Site) -> None:
    api = site.api
    assert api.as_user(site.user, "wrong").call("GET", "/api/overview")[0] == 401
    assert api.call("GET", "/api/overview", auth=False)[0] == 401  # no credentials: none
    mine = api.as_user(site.user, site.password)  # a management user
    status, body = mine.call("GET", f"/api/auth/attempts/{q(node(site))}")  # +1 guest
    assert (status, body) == (401, {"error": "not_authorised", "reason": "Not monitor user"})
    assert mine.call("GET", "/api/users")[0] == 401  # not an administrator
    assert mine.call("GET", "/api/overview")[0] == 200
    assert api.call("OPTIONS", "/api/overview")[0] == 200  # no login


def amqp10_logins(site: Site) -> None:
    b = site.broker
    Amqp10Client(b.host, b.port, site.vhost, site.user, site.password).blocking.close()
    with pytest.raises(proton.ConnectionException):
        Amqp10Client(b.host, b.port, site.vhost, site.user, "wrong")


def sources(site: Site, users: dict[str, str]) -> dict[tuple[str, str, str], tuple[int, ...]]:
    """The node's rows for ``users`` (name -> the role the scenario gives it), by role.
    The reference's AMQP and stream listeners are IPv6 sockets that take IPv4 as well:
    an address there is IPv4-mapped (``::ffff:127.0.0.1``), where the Leveret of these
    tests listens on 127.0.0.1."""
    rows = site.api.get(f"/api/auth/attempts/{q(node(site))}/source")
    return {
        (r["remote_address"].removeprefix("::ffff:"), users[r["username"]], r["protocol"]): (
            r["auth_attempts"],
            r["auth_attempts_succeeded"],
            r["auth_attempts_failed"],
        )
        for r in rows
        if r["username"] in users
    }


def stream_logins(site: Site) -> None:
    port = site.broker.stream_port or RABBITMQ_STREAM_PORT
    for password, code in ((site.password, 1), ("wrong", 8)):  # OK; AUTHENTICATION_FAILURE
        c = RawStreamClient(site.broker.host, port)
        try:
            assert c.handshake(site.user, password, site.vhost) == code
        finally:
            c.close()


@pytest.fixture
def lev_tracked() -> Iterator[Site]:
    """A Leveret of this test's own with rabbit.track_auth_attempt_source on."""
    broker = start_leveret(
        Path(tempfile.mkdtemp(prefix="leveret-auth-")),
        ["--plugins", "rabbitmq_amqp1_0"],
        env={"LEVERET_TRACK_AUTH_ATTEMPT_SOURCE": "true"},
    )
    try:
        yield from make_site(broker, "auth")
    finally:
        broker.stop()


@pytest.fixture
def rmq_tracked(rmq: Site) -> Iterator[Site]:
    """The reference with the source tracked (rabbitmq-diagnostics
    enable_auth_attempt_source_tracking) while the test runs; its figures reset after."""
    if not ensure_rabbitmq_stream():
        pytest.fail("RabbitMQ's rabbitmq_stream plugin could not be enabled")
    rmq.ctl("eval", "application:set_env(rabbit, track_auth_attempt_source, true).")
    try:
        yield rmq
    finally:
        rmq.ctl("eval", "application:set_env(rabbit, track_auth_attempt_source, false).")
        rmq.ctl("eval", "rabbit_core_metrics:reset_auth_attempt_metrics().")


def test_each_protocols_logins_are_counted(lev_tracked: Site, rmq_tracked: Site) -> None:
    """The same logins on both: the rows of the scenario's own users (by source: the
    reference's figures per protocol are everyone's), and on Leveret the figures per
    protocol as well."""
    nobody = f"no-such-user-{uuid.uuid4().hex[:8]}"
    rows: dict[str, dict[tuple[str, str, str], tuple[int, ...]]] = {}
    for site in (lev_tracked, rmq_tracked):
        before = figures(site.api, node(site))
        amqp091_logins(site, nobody)
        http_logins(site)
        amqp10_logins(site)
        stream_logins(site)
        rows[site.broker.name] = sources(site, {site.user: "user", nobody: "nobody"})
        # /metrics labels only the protocols the collector knows: the stream's row, none
        labels = [
            dict(x[0]) for x in scrape(site.broker.metrics_url)["rabbitmq_auth_attempts_total"]
        ]
        assert {} in labels and {"protocol": "stream"} not in labels, labels
        if site is lev_tracked:
            # http: the user's four, and five reads of guest's (the node's name in the
            # user's scenario; the name and the rows by source; the name and these figures)
            assert change(before, figures(site.api, node(site))) == {
                "amqp091": (4, 1, 3),
                "http": (9, 6, 3),
                "amqp10": (2, 1, 1),
                "stream": (2, 1, 1),
            }
    assert rows["leveret"] == {
        ("127.0.0.1", "user", "amqp091"): (3, 1, 2),
        ("127.0.0.1", "nobody", "amqp091"): (1, 0, 1),
        ("127.0.0.1", "user", "http"): (4, 1, 3),
        ("", "user", "amqp10"): (2, 1, 1),
        ("127.0.0.1", "user", "stream"): (2, 1, 1),
    }
    assert rows["rabbitmq"] == rows["leveret"]


def test_the_resources_answers(lev: Site, rmq: Site) -> None:
    for site in (lev, rmq):
        api = site.api
        name = node(site)
        for path in (f"/api/auth/attempts/{q(name)}", f"/api/auth/attempts/{q(name)}/source"):
            status, body = api.call("GET", path)
            assert status == 200 and isinstance(body, list), (site.broker.name, body)
        # the node does not track sources: none
        assert api.get(f"/api/auth/attempts/{q(name)}/source") == []
        for method in ("GET", "DELETE"):
            for path in ("/api/auth/attempts/rabbit@nowhere", "/api/auth/attempts/x/source"):
                assert api.call(method, path) == (
                    404,
                    {"error": "Object Not Found", "reason": "Not Found"},
                ), (site.broker.name, method, path)
        status, _ = api.call("PUT", f"/api/auth/attempts/{q(name)}", {})
        assert status == 405
        assert "rabbitmq_auth_attempts_total" in scrape(site.broker.metrics_url)


def test_delete_starts_the_count_again() -> None:
    """Leveret's own node (the reference's figures are everyone's): the DELETE's answer,
    then only the read after it."""
    with leveret.Broker(management=True) as b:
        api = Api(b.management_url or "")
        name = api.get("/api/overview")["node"]
        assert api.call("DELETE", f"/api/auth/attempts/{q(name)}/source") == (204, None)
        assert figures(api, name) == {"http": (1, 1, 0)}
        assert api.call("DELETE", f"/api/auth/attempts/{q(name)}") == (204, None)
        assert figures(api, name) == {"http": (1, 1, 0)}


def test_a_refusal_that_is_not_the_users_stays_a_login_that_succeeded() -> None:
    """A resource's error whose reason is a term (bulk-delete's ``["no_such_user", …]``)
    is answered as it is, and the login stays succeeded: only the authorisation
    refusals of a resource count against the user."""
    with leveret.Broker(management=True) as b:
        api = Api(b.management_url or "")
        name = api.get("/api/overview")["node"]
        assert api.call("DELETE", f"/api/auth/attempts/{q(name)}") == (204, None)
        body = {"users": ["no-such-user-bulk"]}
        assert api.call("POST", "/api/users/bulk-delete", body) == (
            400,
            {"error": "bad_request", "reason": ["no_such_user", "no-such-user-bulk"]},
        )
        assert figures(api, name) == {"http": (2, 2, 0)}


def test_sources_when_tracked() -> None:
    """rabbit.track_auth_attempt_source on (not on the shared reference: its config is
    everyone's): each address, user and protocol too, but not a login of no one."""
    with leveret.Broker(management=True, track_auth_attempt_source=True) as b:
        api = Api(b.management_url or "")
        name = api.get("/api/overview")["node"]
        pika.BlockingConnection(pika.ConnectionParameters(b.host, b.port)).close()
        assert api.as_user("guest", "bad").call("GET", "/api/overview")[0] == 401
        rows: list[dict[str, Any]] = api.get(f"/api/auth/attempts/{q(name)}/source")
        got = {
            (r["remote_address"], r["username"], r["protocol"]): (
                r["auth_attempts"],
                r["auth_attempts_succeeded"],
                r["auth_attempts_failed"],
            )
            for r in rows
        }
        assert got == {
            ("127.0.0.1", "guest", "http"): (3, 2, 1),
            ("127.0.0.1", "guest", "amqp091"): (1, 1, 0),
        }
        assert list(rows[0]) == [
            "remote_address",
            "username",
            "protocol",
            "auth_attempts",
            "auth_attempts_failed",
            "auth_attempts_succeeded",
        ]
        assert b.metrics_url is not None
        detailed = scrape(b.metrics_url + "/per-object")
        assert (
            {"remote_address": "127.0.0.1", "username": "guest", "protocol": "amqp091"},
            1.0,
        ) in detailed["rabbitmq_auth_attempts_detailed_total"]
        assert "rabbitmq_auth_attempts_detailed_total" not in scrape(b.metrics_url)
