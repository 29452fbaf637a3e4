"""The cluster name and the global runtime parameters through the management API, as
RabbitMQ 3.10.8 answers them (rabbit_mgmt_wm_cluster_name, rabbit_mgmt_wm_global_parameter
and _parameters): the same requests on both brokers, statuses and bodies compared.

RabbitMQ is shared with other tests: each test's parameters have names of its own and are
deleted at the end, and the cluster name is set back by deleting the parameter
cluster_name (the node's name is the cluster's again)."""

from __future__ import annotations

import re
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pika
import pytest

from tests.support.identity import cluster_name_held
from tests.support.mgmt import Site, q

pytestmark = pytest.mark.rabbitmq

CLUSTER_ID = re.compile(r"rabbitmq-cluster-id-[A-Za-z0-9_-]{22}")


@pytest.fixture
def sites(leveret_site: Site, rabbitmq_site: Site) -> Iterator[tuple[Site, Site]]:
    yield leveret_site, rabbitmq_site


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def on_both(
    sites: tuple[Site, Site], scenario: Callable[[Site], Any], names: list[str]
) -> tuple[Any, Any]:
    """``scenario`` on Leveret then on RabbitMQ; the parameters ``names`` deleted from
    both after, whatever happened."""
    try:
        ours, theirs = (scenario(site) for site in sites)
    finally:
        for site in sites:
            for name in names:
                site.api.delete(f"/api/global-parameters/{q(name)}")
    return ours, theirs


def answers(site: Site, steps: list[tuple[str, str, Any]], name: str) -> list[Any]:
    """Each step's status and body, the test's parameter name replaced by NAME and the
    node's name by NODE."""
    node = site.api.get("/api/overview")["node"]
    out = []
    for method, path, body in steps:
        status, data = site.api.call(method, path.format(n=q(name)), body)
        text = repr(data).replace(name, "NAME").replace(node, "NODE")
        out.append((method, path, status, text))
    return out


def mine(site: Site, names: set[str]) -> list[dict[str, Any]]:
    """The global parameters named ``names`` and internal_cluster_id (its value checked,
    then replaced: each broker has its own), in the listing's order."""
    out = []
    for p in site.api.get("/api/global-parameters"):
        if p["name"] == "internal_cluster_id":
            assert CLUSTER_ID.fullmatch(p["value"]), p
            out.append({**p, "value": "ID"})
        elif p["name"] in names:
            out.append(p)
    return out


def test_global_parameter_answers(sites: tuple[Site, Site]) -> None:
    """201 for a new parameter, 204 when replaced; any JSON value, an object's keys in
    order (at every depth) and an empty object kept as []; the value first in a GET of
    one; 404 for a missing one, to GET and DELETE; the body's errors."""
    name = unique("gp")
    steps: list[tuple[str, str, Any]] = [
        ("GET", "/api/global-parameters/{n}", None),
        ("DELETE", "/api/global-parameters/{n}", None),
        ("PUT", "/api/global-parameters/{n}", {"value": {"b": 1, "a": [1, 2], "c": {"z": 1}}}),
        ("GET", "/api/global-parameters/{n}", None),
        ("PUT", "/api/global-parameters/{n}", {"value": {"x": {"z": 1, "y": {}}}}),
        ("GET", "/api/global-parameters/{n}", None),
        ("PUT", "/api/global-parameters/{n}", {"value": {}}),
        ("GET", "/api/global-parameters/{n}", None),
        ("PUT", "/api/global-parameters/{n}", {"value": None}),
        ("GET", "/api/global-parameters/{n}", None),
        ("PUT", "/api/global-parameters/{n}", {"value": [1, {"b": 2, "a": 1}, "é"]}),
        ("GET", "/api/global-parameters/{n}", None),
        ("PUT", "/api/global-parameters/{n}", {"value": 12345678901234567890, "extra": 1}),
        ("GET", "/api/global-parameters/{n}", None),
        ("PUT", "/api/global-parameters/{n}", {}),
        ("PUT", "/api/global-parameters/{n}", b"garbage"),
        ("PUT", "/api/global-parameters/{n}", b'"doubly"'),
        ("PUT", "/api/global-parameters/{n}", {"value": "text"}),
        ("GET", "/api/global-parameters/{n}", None),
        ("DELETE", "/api/global-parameters/{n}", None),
        ("GET", "/api/global-parameters/{n}", None),
        ("DELETE", "/api/global-parameters/{n}", None),
    ]
    ours, theirs = on_both(sites, lambda site: answers(site, steps, name), [name])
    assert ours == theirs


def test_global_parameters_listing(sites: tuple[Site, Site]) -> None:
    """The listing: internal_cluster_id from the start, then the parameters set, by name,
    each as name then value; the definitions' global_parameters the same."""
    names = [unique("gp-b"), unique("gp-a")]

    def scenario(site: Site) -> Any:
        for i, name in enumerate(names):
            assert site.api.put(f"/api/global-parameters/{q(name)}", {"value": {"n": i}}) == 201
        listed = mine(site, set(names))
        exported = site.api.get("/api/definitions")["global_parameters"]
        ids = [p for p in exported if p["name"] == "internal_cluster_id"]
        assert [p["value"] for p in ids] == [
            p["value"] for p in site.api.get("/api/global-parameters") if p in ids
        ]
        kept = [
            {**p, "value": "ID"} if p["name"] == "internal_cluster_id" else p
            for p in exported
            if p["name"] in names or p["name"] == "internal_cluster_id"
        ]
        return [list(p) for p in listed], listed, sorted(kept, key=lambda p: p["name"])

    ours, theirs = on_both(sites, scenario, names)
    assert ours == theirs
    assert [p["name"] for p in ours[1]] == sorted(["internal_cluster_id", *names])


def test_definitions_import_global_parameters(sites: tuple[Site, Site]) -> None:
    """POST /api/definitions sets its global_parameters as a PUT would (an object's keys
    in order, an empty one []), and they are exported again."""
    names = [unique("gp-imp"), unique("gp-imp")]
    data = {
        "global_parameters": [
            {"name": names[0], "value": {"b": 1, "a": {"d": 1, "c": 2}}},
            {"name": names[1], "value": {}},
        ]
    }

    def scenario(site: Site) -> Any:
        status = site.api.call("POST", "/api/definitions", data)[0]
        got = [site.api.call("GET", f"/api/global-parameters/{q(n)}") for n in names]
        exported = site.api.get("/api/definitions")["global_parameters"]
        # exported in the order of RabbitMQ's table (none in particular)
        return status, got, sorted((p for p in exported if p["name"] in names), key=str)

    ours, theirs = on_both(sites, scenario, names)
    assert ours == theirs


def test_who_may_use_global_parameters(sites: tuple[Site, Site]) -> None:
    """Global parameters: an administrator or a policymaker, even one without permissions
    (401 "User not authorised to access object" for a monitoring or management user);
    the cluster name: any management user reads it, an administrator alone sets it (401
    "Not administrator user"); no management tag at all: "Not management user"."""
    param = unique("gp-who")
    tags = ["policymaker", "monitoring", "management", ""]
    steps: list[tuple[str, str, Any]] = [
        ("GET", "/api/global-parameters", None),
        ("GET", "/api/global-parameters/{n}", None),
        ("PUT", "/api/global-parameters/{n}", {"value": 1}),
        ("GET", "/api/global-parameters/{n}", None),
        ("DELETE", "/api/global-parameters/{n}", None),
        ("PUT", "/api/global-parameters/{n}", {"value": 1}),
        ("DELETE", "/api/global-parameters/{n}", None),
        ("PUT", "/api/cluster-name", {"name": "never-set"}),
        ("PUT", "/api/cluster-name", {}),
    ]

    def scenario(site: Site) -> Any:
        out = []
        for tag in tags:
            user = unique("gp-user")
            assert site.api.put(f"/api/users/{q(user)}", {"password": "pw", "tags": tag}) == 201
            try:
                as_user = site.api.as_user(user, "pw")
                for method, path, body in steps:
                    status, data = as_user.call(method, path.format(n=q(param)), body)
                    if path == "/api/global-parameters" and status == 200:
                        data = "a listing"
                    out.append((tag, method, path, status, repr(data).replace(param, "NAME")))
                name = as_user.call("GET", "/api/cluster-name")
                out.append((tag, name[0], name[1] == site.api.get("/api/cluster-name")))
            finally:
                site.api.delete(f"/api/users/{q(user)}")
                site.api.delete(f"/api/global-parameters/{q(param)}")
        return out

    ours, theirs = (scenario(site) for site in sites)
    assert ours == theirs


def server_cluster_name(site: Site) -> Any:
    """The cluster_name a new AMQP connection is told (connection.start)."""
    b = site.broker
    conn = pika.BlockingConnection(pika.ConnectionParameters(b.host, b.port))
    try:
        return conn._impl.server_properties["cluster_name"]  # pika keeps them here
    finally:
        conn.close()


def test_cluster_name(sites: tuple[Site, Site]) -> None:
    """PUT /api/cluster-name: 204 each time (the resource always exists); the name is the
    global parameter cluster_name (set through either, it shows in both), in the overview
    and in the connection.start of new connections; an empty name is a name; a list of
    bytes is joined; the body's errors. Deleting the parameter gives the node's name back."""
    name = unique("gp-cluster")

    def scenario(site: Site) -> Any:
        node = site.api.get("/api/overview")["node"]

        def shown() -> Any:
            return (
                site.api.get("/api/cluster-name"),
                site.api.get("/api/overview")["cluster_name"],
                site.api.call("GET", "/api/global-parameters/cluster_name"),
            )

        out: list[Any] = [site.api.get("/api/cluster-name") == {"name": node}]
        try:
            out.append(site.api.call("PUT", "/api/cluster-name", {"name": name}))
            out.append(shown())
            out.append(server_cluster_name(site))
            out.append(site.api.call("PUT", "/api/cluster-name", {"name": name + "-2"}))
            out.append(shown())
            out.append(site.api.call("PUT", "/api/cluster-name", {"name": ""}))
            out.append(shown())
            out.append(site.api.call("PUT", "/api/cluster-name", {"name": [104, 105]}))
            out.append(shown())
            out.append(site.api.call("PUT", "/api/global-parameters/cluster_name", {"value": name}))
            out.append(shown())
            for body in ({}, b"garbage", b'"doubly"'):
                out.append(site.api.call("PUT", "/api/cluster-name", body))
            out.append(site.api.call("DELETE", "/api/global-parameters/cluster_name"))
        finally:
            site.api.delete("/api/global-parameters/cluster_name")
        out.append(site.api.get("/api/cluster-name") == {"name": node})
        out.append(site.api.get("/api/overview")["cluster_name"] == node)
        return out

    with cluster_name_held(change=True):
        ours, theirs = (scenario(site) for site in sites)
    assert ours == theirs


def allowed(site: Site, method: str, path: str) -> tuple[int, str | None]:
    req = urllib.request.Request(site.broker.http_url.rstrip("/") + path, method=method)
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, resp.headers.get("allow")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers.get("allow")


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("OPTIONS", "/api/cluster-name"),
        ("POST", "/api/cluster-name"),
        ("DELETE", "/api/cluster-name"),
        ("OPTIONS", "/api/global-parameters"),
        ("PUT", "/api/global-parameters"),
        ("OPTIONS", "/api/global-parameters/x"),
        ("POST", "/api/global-parameters/x"),
    ],
)
def test_methods(sites: tuple[Site, Site], method: str, path: str) -> None:
    """The methods each resource allows (its allowed_methods): OPTIONS lists them, any
    other is 405 with the same list."""
    ours, theirs = (allowed(site, method, path) for site in sites)
    assert ours == theirs
