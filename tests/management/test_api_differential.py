"""The management API's JSON on Leveret and on RabbitMQ 3.10.8 for the same declarations:
/api/exchanges, /api/queues and /api/bindings compared field by field, for the fields
Leveret implements; and the same status codes and error bodies for bad requests."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.mgmt import (
    EXPECTED_DEPTHS,
    QUEUE_RATES,
    Site,
    declare_scenario,
    normalize,
    prepared,
    q,
)
from tests.support.waiting import STATS_WAIT, wait_for

pytestmark = pytest.mark.rabbitmq

# Fields whose values are the broker's own (memory, timings, pids) or lag in RabbitMQ.
VOLATILE = {
    "memory",
    "node",
    "idle_since",
    "reductions",
    "reductions_details",
    "garbage_collection",
    "backing_queue_status",
    "head_message_timestamp",
    "owner_pid_details",
    "messages_ram",
    "messages_ready_ram",
    "messages_unacknowledged_ram",
    "message_bytes_ram",
    "messages_paged_out",
    "message_bytes_paged_out",
} | QUEUE_RATES


@pytest.fixture
def sites(leveret_site: Site, rabbitmq_site: Site) -> Iterator[tuple[Site, Site]]:
    with prepared((leveret_site, rabbitmq_site), declare_scenario) as both:
        yield both


def by_name(items: list[dict[str, Any]], vhost: str) -> dict[str, dict[str, Any]]:
    out = {}
    for item in items:
        item = {k: (normalize(v) if isinstance(v, str) else v) for k, v in item.items()}
        assert item["vhost"] == vhost
        item["vhost"] = "VHOST"
        out[item["name"]] = item
    return out


def compare(ours: dict[str, Any], theirs: dict[str, Any], what: str) -> None:
    # message_stats reach RabbitMQ's API seconds after a publish (compared in
    # test_measured_differential)
    extra = set(ours) - set(theirs) - {"message_stats"}
    assert not extra, f"{what}: fields RabbitMQ does not have: {extra}"
    for key in sorted(set(ours) - VOLATILE):
        assert ours[key] == theirs[key], (what, key, ours[key], theirs[key])


def test_exchanges_field_by_field(sites: tuple[Site, Site]) -> None:
    lev, rmq = sites
    ours = by_name(lev.api.get(f"/api/exchanges/{q(lev.vhost)}"), lev.vhost)
    theirs = by_name(rmq.api.get(f"/api/exchanges/{q(rmq.vhost)}"), rmq.vhost)
    assert sorted(ours) == sorted(theirs)
    for name in ours:
        compare(ours[name], theirs[name], f"exchange {name!r}")
    one_ours = lev.api.get(f"/api/exchanges/{q(lev.vhost)}/with-ae")
    one_theirs = rmq.api.get(f"/api/exchanges/{q(rmq.vhost)}/with-ae")
    one_ours["vhost"] = one_theirs["vhost"] = "VHOST"
    compare(one_ours, one_theirs, "exchange with-ae")


def mismatches(ours: dict[str, Any], theirs: dict[str, Any], what: str) -> list[Any]:
    out: list[Any] = []
    extra = set(ours) - set(theirs)
    if extra:
        out.append((what, "fields RabbitMQ does not have", extra))
    for key in sorted(set(ours) - VOLATILE):
        if key in theirs and ours[key] != theirs[key]:
            out.append((what, key, ours[key], theirs[key]))
    return out


def test_queues_field_by_field(sites: tuple[Site, Site]) -> None:
    lev, rmq = sites
    ours = by_name(lev.api.get(f"/api/queues/{q(lev.vhost)}"), lev.vhost)
    assert {n: i["messages"] for n, i in ours.items()} == EXPECTED_DEPTHS

    def differences() -> list[Any]:
        # RabbitMQ's queue statistics arrive every 5 s, field by field: poll until they
        # have all arrived (or the test times out with the last differences)
        theirs = by_name(rmq.api.get(f"/api/queues/{q(rmq.vhost)}"), rmq.vhost)
        if sorted(theirs) != sorted(ours):
            return [("queues", sorted(ours), sorted(theirs))]
        out = []
        for name in ours:
            out += mismatches(ours[name], theirs[name], f"queue {name!r}")
            stats = set(ours[name].get("message_stats", {}))
            if not stats <= set(theirs[name].get("message_stats", {})):
                out.append((name, "message_stats", stats))
        return out

    assert wait_for(lambda: not differences(), timeout=STATS_WAIT), differences()
    for name in ("hello", "amq.gen-X"):

        def fetch(site: Site, name: str = name) -> dict[str, Any]:
            real = next(
                i["name"]
                for i in site.api.get(f"/api/queues/{q(site.vhost)}")
                if normalize(i["name"]) == name
            )
            return dict(site.api.get(f"/api/queues/{q(site.vhost)}/{q(real)}"))

        one = fetch(lev)
        assert set(one) - set(fetch(rmq)) == set(), name
        if name != "hello":
            # RabbitMQ names the owner once its connection's statistics have arrived (they
            # can lag under load, the details then empty): poll, as for the figures above
            owner = set(one["owner_pid_details"])
            assert wait_for(
                lambda owner=owner: set(fetch(rmq)["owner_pid_details"]) == owner,
                timeout=STATS_WAIT,
            ), (owner, fetch(rmq)["owner_pid_details"])


def test_bindings_field_by_field(sites: tuple[Site, Site]) -> None:
    lev, rmq = sites

    def rows(site: Site, path: str) -> list[str]:
        items = site.api.get(path)
        items = [items] if isinstance(items, dict) else items
        out = []
        for b in items:
            assert b["vhost"] == site.vhost
            b = dict(b, vhost="VHOST")
            if b["arguments"]:
                # RabbitMQ hashes the arguments with Erlang's phash2: same shape, own value
                key, _, digest = b.pop("properties_key").partition("~")
                assert key == q(b["routing_key"]) and len(digest) == 6
            out.append(normalize(repr(sorted(b.items()))))
        return sorted(out)

    assert rows(lev, f"/api/bindings/{q(lev.vhost)}") == rows(rmq, f"/api/bindings/{q(rmq.vhost)}")
    for path in (
        "/api/exchanges/{v}/direct_logs/bindings/source",
        "/api/exchanges/{v}/logs/bindings/destination",
        "/api/queues/{v}/task_queue/bindings",
        "/api/bindings/{v}/e/direct_logs/q/task_queue",
        "/api/bindings/{v}/e/direct_logs/e/logs",
        "/api/bindings/{v}/e/direct_logs/q/task_queue/error",
    ):
        assert rows(lev, path.format(v=q(lev.vhost))) == rows(rmq, path.format(v=q(rmq.vhost)))


ERROR_CASES: list[tuple[str, str, Any]] = [
    ("GET", "/api/exchanges/{v}/nope", None),
    ("GET", "/api/queues/{v}/nope", None),
    ("GET", "/api/exchanges/no-such-vhost-x", None),
    ("PUT", "/api/exchanges/{v}/x1", {"type": "bogus"}),
    ("PUT", "/api/exchanges/{v}/logs", {"type": "direct"}),
    ("PUT", "/api/exchanges/{v}/x2", b"notjson"),
    ("PUT", "/api/exchanges/{v}/amq.foo", {}),
    ("DELETE", "/api/exchanges/{v}/amq.direct", None),
    ("DELETE", "/api/exchanges/{v}/nope", None),
    ("PUT", "/api/queues/{v}/task_queue", {"durable": True}),
    ("PUT", "/api/queues/{v}/hello", {"durable": False}),
    ("PUT", "/api/queues/{v}/bad", {"arguments": {"x-max-length": "abc"}}),
    ("DELETE", "/api/queues/{v}/nope", None),
    ("POST", "/api/bindings/{v}/e/nope/q/hello", {"routing_key": "a"}),
    ("POST", "/api/bindings/{v}/e/logs/q/nope", {"routing_key": "a"}),
    ("GET", "/api/bindings/{v}/e/direct_logs/q/task_queue/nope", None),
    ("POST", "/api/queues/{v}/hello/get", {}),
    ("PUT", "/api/users/{u}", {}),
    ("PUT", "/api/permissions/{v}/{u}", {"configure": ".*"}),
    ("PUT", "/api/permissions/{v}/nobody-x", {"configure": "", "write": "", "read": ""}),
    ("DELETE", "/api/users/nobody-x", None),
    ("DELETE", "/api/permissions/{v}/nobody-x", None),
    ("DELETE", "/api/vhosts/no-such-vhost-x", None),
]


@pytest.mark.parametrize(
    ("method", "path", "body"), ERROR_CASES, ids=[f"{m} {p}" for m, p, _ in ERROR_CASES]
)
def test_errors_match(sites: tuple[Site, Site], method: str, path: str, body: Any) -> None:
    answers = []
    for site in sites:
        status, data = site.api.call(method, path.format(v=q(site.vhost), u=q(site.user)), body)
        text = normalize(repr(data)).replace(site.vhost, "VHOST").replace(site.user, "USER")
        answers.append((status, text))
    assert answers[0] == answers[1]


def test_auth_errors_match(sites: tuple[Site, Site]) -> None:
    answers = []
    for site in sites:
        wrong = site.api.as_user("guest", "wrong").call("GET", "/api/overview")
        # a management user is no administrator
        limited = site.api.as_user(site.user, site.password)
        users = limited.call("GET", "/api/users")
        whoami = limited.call("GET", "/api/whoami")
        # a user without a management tag may not use the API at all
        assert site.api.put(f"/api/users/{q(site.user)}-none", {"password": "pw", "tags": ""})
        none = site.api.as_user(f"{site.user}-none", "pw").call("GET", "/api/overview")
        site.api.delete(f"/api/users/{q(site.user)}-none")
        no_auth = site.api.call("GET", "/api/overview", auth=False)[0]
        answers.append(
            (wrong, users, normalize(repr(whoami)).replace(site.user, "USER"), none, no_auth)
        )
    assert answers[0] == answers[1]


def test_writes_match(sites: tuple[Site, Site]) -> None:
    """Create, bind, publish, get, purge and delete through the API: same codes, same
    answers, same resulting state."""
    results = []
    for site in sites:
        v = q(site.vhost)
        api = site.api
        steps = [
            api.call("PUT", f"/api/exchanges/{v}/t-api-x", {"type": "topic", "durable": True}),
            api.call("PUT", f"/api/exchanges/{v}/t-api-x", {"type": "topic", "durable": True}),
            api.call(
                "PUT",
                f"/api/queues/{v}/t-api-q",
                {"durable": True, "arguments": {"x-max-length": 10}},
            ),
            api.call(
                "POST",
                f"/api/bindings/{v}/e/t-api-x/q/t-api-q",
                {"routing_key": "a.*", "arguments": {}},
            ),
            api.call(
                "POST",
                f"/api/exchanges/{v}/t-api-x/publish",
                {
                    "properties": {"delivery_mode": 2, "headers": {"h": 1}},
                    "routing_key": "a.b",
                    "payload": "hi",
                    "payload_encoding": "string",
                },
            ),
            api.call(
                "POST",
                f"/api/exchanges/{v}/t-api-x/publish",
                {
                    "properties": {},
                    "routing_key": "z",
                    "payload": "aGk=",
                    "payload_encoding": "base64",
                },
            ),
            api.call(
                "POST",
                f"/api/exchanges/{v}/amq.default/publish",
                {
                    "properties": {},
                    "routing_key": "t-api-q",
                    "payload": "\u00ff",
                    "payload_encoding": "string",
                },
            ),
            api.call(
                "POST",
                f"/api/queues/{v}/t-api-q/get",
                {"count": 5, "ackmode": "ack_requeue_true", "encoding": "auto"},
            ),
            api.call(
                "POST",
                f"/api/queues/{v}/t-api-q/get",
                {"count": 1, "ackmode": "ack_requeue_false", "encoding": "base64", "truncate": 1},
            ),
            api.call("DELETE", f"/api/queues/{v}/t-api-q/contents"),
            api.call("DELETE", f"/api/bindings/{v}/e/t-api-x/q/t-api-q/a.*"),
            api.call("GET", f"/api/bindings/{v}/e/t-api-x/q/t-api-q"),
            api.call("DELETE", f"/api/exchanges/{v}/t-api-x"),
            api.call("DELETE", f"/api/queues/{v}/t-api-q"),
            api.call(
                "PUT",
                f"/api/users/{q(site.user)}",
                {"password": "x", "tags": "monitoring,management"},
            ),
            api.call(
                "PUT",
                f"/api/permissions/{v}/{q(site.user)}",
                {"configure": "", "write": "", "read": ".*"},
            ),
            api.call("GET", f"/api/permissions/{v}/{q(site.user)}"),
            api.call("DELETE", f"/api/permissions/{v}/{q(site.user)}"),
        ]
        results.append(
            [
                normalize(repr(s)).replace(site.vhost, "VHOST").replace(site.user, "USER")
                for s in steps
            ]
        )
    assert results[0] == results[1]


def test_other_endpoints_have_rabbitmqs_fields(sites: tuple[Site, Site]) -> None:
    """Overview, vhost, connection, channel, consumer, user and permission objects: every
    field Leveret gives is one RabbitMQ gives, with the same shape."""

    conns = []
    for site in sites:
        conn = site.connect("shape-test")
        ch = conn.channel()
        ch.confirm_delivery()
        ch.basic_publish("", "hello", b"x")
        ch.basic_consume("task_queue", lambda *a: None, consumer_tag="shape-ctag")
        conn.process_data_events(0.3)
        conns.append(conn)
    try:

        def fetch(site: Site) -> dict[str, Any]:
            v = q(site.vhost)
            conn = next(c for c in site.api.get("/api/connections") if c["vhost"] == site.vhost)
            chan = next(
                c for c in site.api.get(f"/api/vhosts/{v}/channels") if c.get("message_stats")
            )
            return {
                "overview": site.api.get("/api/overview"),
                "vhost": site.api.get(f"/api/vhosts/{v}"),
                "connection": conn,
                "channel": chan,
                "consumer": site.api.get(f"/api/consumers/{v}")[0],
                "user": site.api.get(f"/api/users/{q(site.user)}"),
                "permission": site.api.get(f"/api/permissions/{v}/{q(site.user)}"),
                "whoami": site.api.get("/api/whoami"),
                "definitions": site.api.get(f"/api/definitions/{v}"),
            }

        ours = fetch(sites[0])

        def shape_diff(a: Any, b: Any, path: str) -> list[str]:
            if isinstance(a, dict) and isinstance(b, dict):
                out = [f"{path}.{k}" for k in a if k not in b]
                for k in a:
                    if k in b and k not in (
                        "client_properties",
                        "arguments",
                        "listeners",
                        "contexts",
                        "exchange_types",
                        "cluster_state",
                    ):
                        out += shape_diff(a[k], b[k], f"{path}.{k}")
                return out
            if (
                type(a) is not type(b)
                and not (isinstance(a, (int, float)) and isinstance(b, (int, float)))
                and a is not None
                and b is not None
            ):
                return [f"{path}: {type(a).__name__} vs {type(b).__name__}"]
            return []

        def problems() -> list[str]:
            # RabbitMQ's connection, channel and vhost statistics arrive every 5 s, a few
            # fields at a time: poll until they are all there
            t = _try(fetch, sites[1])
            if t is None:
                return ["RabbitMQ's objects are not all there yet"]
            found = []
            for key in ours:
                found += shape_diff(ours[key], t[key], key)
            return found

        assert wait_for(lambda: not problems(), timeout=STATS_WAIT), "\n".join(problems())
        theirs = fetch(sites[1])
        assert set(ours["overview"]["object_totals"]) == set(theirs["overview"]["object_totals"])
        assert ours["consumer"]["consumer_tag"] == theirs["consumer"]["consumer_tag"]
    finally:
        for conn in conns:
            conn.close()


def _try(fetch: Any, site: Site) -> Any:
    try:
        return fetch(site)
    except (StopIteration, IndexError, AssertionError):
        return None


def test_sorting_paging_and_columns_match(sites: tuple[Site, Site]) -> None:
    answers = []
    for site in sites:
        v = q(site.vhost)
        got = [
            site.api.get(f"/api/exchanges/{v}?page=2&page_size=3&sort=name"),
            site.api.get(
                f"/api/exchanges/{v}?sort=name&sort_reverse=true&columns=name,type,arguments"
            ),
            site.api.get(f"/api/queues/{v}?columns=name,durable,arguments&sort=name"),
            site.api.get(f"/api/bindings/{v}?columns=source,destination,routing_key"),
        ]
        # JSON objects compare without regard to key order; lists keep theirs
        answers.append(
            [json.loads(normalize(json.dumps(g)).replace(site.vhost, "VHOST")) for g in got]
        )
    for ours, theirs in zip(answers[0], answers[1], strict=True):
        assert ours == theirs


@pytest.mark.parametrize(
    "query",
    [
        "name=AMQ.D&page=1",  # ignoring case, a substring
        "name=amq.&page=2&page_size=2",  # total_count unfiltered, filtered_count filtered
        "name=amq.",  # without a page: not filtered
        "name=%5Eamq%5C.%28direct%7Cfanout%29%24&use_regex=true&page=1",
        "name=AMQ%5C.T&use_regex=true&page=1&columns=name",  # a regex ignores case too
        "name=amq.d&use_regex=false&page=1",
        "name=nothing-is-called-this&page=1",
        # sorted as Erlang terms; ties in the default order, and reversed with the rest
        "sort=type&sort_reverse=true",
        "sort=internal",
        "sort=no-such-column&sort_reverse=true",
    ],
)
def test_name_filters_and_sorts_match(sites: tuple[Site, Site], query: str) -> None:
    answers = []
    for site in sites:
        columns = "" if "columns=" in query else "&columns=name,type"
        sort = "" if "sort=" in query else "sort=name&"
        got = site.api.get(f"/api/exchanges/{q(site.vhost)}?{sort}{query}{columns}")
        answers.append(json.loads(normalize(json.dumps(got)).replace(site.vhost, "VHOST")))
    assert answers[0] == answers[1]


def test_a_name_regex_that_does_not_compile_is_a_bad_request(sites: tuple[Site, Site]) -> None:
    answers = [
        site.api.call("GET", f"/api/exchanges/{q(site.vhost)}?name=%28&use_regex=true&page=1")
        for site in sites
    ]
    assert answers[0] == answers[1]
    assert answers[0][0] == 400
