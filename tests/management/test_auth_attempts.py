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

The reference broker is shared: other clients' logins (the management API's above all)
add to its figures while a test runs, so its changes are taken when no one else's came
in between (the scenario is run again otherwise)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pika
import proton
import pytest
from pika.exceptions import ProbableAccessDeniedError, ProbableAuthenticationError

import leveret
from tests.management.test_metrics import scrape
from tests.support.amqp10 import (  # noqa: F401  (leveret_amqp10: a fixture)
    Amqp10Broker,
    connect,
    ensure_rabbitmq_amqp10,
    leveret_amqp10,
)
from tests.support.brokers import BrokerUnderTest
from tests.support.mgmt import Api, Site, make_site, q, rabbitmq_with_management

pytestmark = pytest.mark.rabbitmq

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


def quiet_change(site: Site, scenario: Callable[[Site], None], tries: int = 8) -> list[Figures]:
    """What ``scenario`` changes in the node's figures (the read after it counted in),
    once per try until two tries agree: on the shared reference broker a try that others'
    logins disturbed disagrees (it only adds). The changes of every try."""
    name = node(site)
    seen: list[Figures] = []
    for _ in range(tries):
        before = figures(site.api, name)
        scenario(site)
        seen.append(change(before, figures(site.api, name)))
        if seen.count(min(seen, key=lambda f: sum(v[0] for v in f.values()))) >= 2:
            break
    return seen


def settled(seen: list[Figures]) -> Figures:
    """The change of the tries no one else disturbed: the smallest."""
    return min(seen, key=lambda f: sum(v[0] for v in f.values()))


def amqp091_logins(site: Site) -> None:
    site.connect().close()  # guest: succeeded
    for user, password in ((site.user, "wrong"), ("no-such-user-auth", "x"), (site.user, "")):
        params = pika.ConnectionParameters(
            site.broker.host,
            site.broker.port,
            credentials=pika.PlainCredentials(user, password),
            connection_attempts=1,
        )
        with pytest.raises((ProbableAuthenticationError, ProbableAccessDeniedError)):
            pika.BlockingConnection(params)


def http_logins(site: Site) -> None:
    api = site.api
    assert api.as_user("guest", "wrong").call("GET", "/api/overview")[0] == 401
    assert api.call("GET", "/api/overview", auth=False)[0] == 401  # no credentials: none
    mine = api.as_user(site.user, site.password)  # a management user
    status, body = mine.call("GET", f"/api/auth/attempts/{q(node(site))}")  # +1 guest
    assert (status, body) == (401, {"error": "not_authorised", "reason": "Not monitor user"})
    assert mine.call("GET", "/api/users")[0] == 401  # not an administrator
    assert mine.call("GET", "/api/overview")[0] == 200
    assert api.call("OPTIONS", "/api/overview")[0] == 200  # no login


def amqp10_logins(site: Site) -> None:
    target = Amqp10Broker(site.broker)
    with connect(target):
        pass
    with pytest.raises(proton.ConnectionException), connect(target, password="wrong"):
        pass


def test_each_protocols_logins_are_counted(lev: Site, rmq: Site) -> None:
    expected: dict[str, Figures] = {
        # the read that ends each try is one more http login, succeeded
        "amqp091": {"amqp091": (4, 1, 3), "http": (1, 1, 0)},
        # guest: the node's name and the read, and a wrong password; the user's three
        "http": {"http": (6, 3, 3)},
        "amqp10": {"amqp10": (2, 1, 1), "http": (1, 1, 0)},
    }
    for name, scenario in (
        ("amqp091", amqp091_logins),
        ("http", http_logins),
        ("amqp10", amqp10_logins),
    ):
        ours = quiet_change(lev, scenario, tries=1)
        assert ours == [expected[name]], (name, ours)
        theirs = quiet_change(rmq, scenario)
        assert settled(theirs) == expected[name], (name, theirs)


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
