"""The stream-protocol connections, publishers and consumers in the management API, as
RabbitMQ 3.10.8's rabbitmq_stream_management shows them: the same rstream clients on
Leveret and on RabbitMQ, in a vhost of the test's own, and the same JSON (fields, shapes,
values but for the broker's own: ports, times, traffic, Erlang's memory figures)."""

from __future__ import annotations

import urllib.request
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.mgmt import Site, q
from tests.support.streamscenario import PUBLISHED, StreamClients, stream_clients_on
from tests.support.waiting import wait_for

pytestmark = pytest.mark.rabbitmq
rstream = pytest.importorskip("rstream")

# What only the broker knows: its ports and times, what went over the sockets, and the
# Erlang process figures Leveret has no counterpart of (never shown by Leveret).
VOLATILE = {
    "connected_at",
    "name",
    "peer_port",
    "port",
    "recv_cnt",
    "recv_oct",
    "recv_oct_details",
    "send_cnt",
    "send_oct",
    "send_oct_details",
    "send_pend",
}
ERLANG_ONLY = {"garbage_collection", "reductions", "reductions_details"}


@pytest.fixture
def both(leveret_site: Site, rabbitmq_site: Site) -> Iterator[list[tuple[Site, StreamClients]]]:
    with stream_clients_on(leveret_site, rabbitmq_site) as pairs:
        yield pairs


def connection_shape(c: dict[str, Any], site: Site) -> dict[str, Any]:
    assert c["vhost"] == site.vhost
    out = {k: v for k, v in c.items() if k not in VOLATILE | ERLANG_ONLY}
    out["vhost"] = "VHOST"
    out["node"] = "NODE"
    return out


def by_client(items: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {c["client_properties"]["connection_name"]: c for c in items}


def test_stream_connections_field_by_field(both: list[tuple[Site, StreamClients]]) -> None:
    shapes = []
    for site, clients in both:
        listed = site.api.get(f"/api/stream/connections/{q(site.vhost)}")
        everywhere = [
            c for c in site.api.get("/api/stream/connections") if c["vhost"] == site.vhost
        ]
        assert sorted(c["name"] for c in everywhere) == sorted(c["name"] for c in listed)
        named = by_client(listed)
        assert sorted(named) == sorted(
            [clients.producer_name, clients.consumer_name, f"locator-{clients.consumer_name}"]
        )
        rows = {}
        for name, c in named.items():
            role = name.replace(clients.producer_name, "P").replace(clients.consumer_name, "C")
            one = site.api.get(f"/api/stream/connections/{q(site.vhost)}/{q(c['name'])}")
            rows[role] = (connection_shape(c, site), connection_shape(one, site))
            # listed with the AMQP connections too, as the same object
            amqp = site.api.get(f"/api/connections/{q(c['name'])}")
            assert connection_shape(amqp, site) == connection_shape(one, site)
            client = rows[role][0]["client_properties"]
            client["connection_name"] = role
            rows[role][1]["client_properties"]["connection_name"] = role
            for shape in rows[role]:
                shape["user_provided_name"] = role
        shapes.append(rows)
    ours, theirs = shapes
    assert ours.keys() == theirs.keys()
    for role in ours:
        for i, what in enumerate(("listed", "one")):
            mine, reference = ours[role][i], theirs[role][i]
            assert not set(mine) - set(reference), (role, what, set(mine) - set(reference))
            assert set(reference) - set(mine) <= ERLANG_ONLY, (role, what)
            assert mine == {k: v for k, v in reference.items() if k in mine}, (role, what)


def normalize_entity(item: dict[str, Any], site: Site, clients: StreamClients) -> dict[str, Any]:
    details = dict(item["connection_details"])
    assert set(details) == {"name", "node", "peer_host", "peer_port", "user"}
    assert details["user"] == "guest" and details["peer_host"] == "127.0.0.1"
    assert item["queue"] == {"name": clients.stream, "vhost": site.vhost}
    return {**item, "connection_details": None, "queue": None}


def test_stream_publishers_and_consumers(both: list[tuple[Site, StreamClients]]) -> None:
    answers = []
    for site, clients in both:
        v = q(site.vhost)
        conns = by_client(site.api.get(f"/api/stream/connections/{v}"))
        prod = q(conns[clients.producer_name]["name"])
        cons = q(conns[clients.consumer_name]["name"])
        pubs = site.api.get(f"/api/stream/publishers/{v}")
        assert pubs == site.api.get(f"/api/stream/publishers/{v}/{q(clients.stream)}")
        assert pubs == site.api.get(f"/api/stream/connections/{v}/{prod}/publishers")
        assert [p for p in site.api.get("/api/stream/publishers") if p in pubs] == pubs
        assert site.api.get(f"/api/stream/connections/{v}/{prod}/consumers") == []
        consumers = site.api.get(f"/api/stream/consumers/{v}")
        assert consumers == site.api.get(f"/api/stream/connections/{v}/{cons}/consumers")
        assert [c for c in site.api.get("/api/stream/consumers") if c in consumers] == consumers
        assert site.api.get(f"/api/stream/connections/{v}/{cons}/publishers") == []
        assert pubs[0]["connection_details"]["name"] == conns[clients.producer_name]["name"]
        assert consumers[0]["connection_details"]["name"] == conns[clients.consumer_name]["name"]
        answers.append(
            (
                [normalize_entity(p, site, clients) for p in pubs],
                [normalize_entity(c, site, clients) for c in consumers],
            )
        )
    assert answers[0] == answers[1]
    publishers, consumers = answers[0]
    assert publishers == [
        {
            "confirmed": PUBLISHED,
            "connection_details": None,
            "errored": 0,
            "published": PUBLISHED,
            "publisher_id": publishers[0]["publisher_id"],
            "queue": None,
            "reference": "pub-ref",
        }
    ]
    assert consumers[0]["consumed"] == PUBLISHED
    assert consumers[0]["offset"] == PUBLISHED - 1  # the first offset of its last chunk
    assert consumers[0]["offset_lag"] == 0
    assert consumers[0]["properties"] == {"k": "v"}


def test_stream_lookups_not_found(both: list[tuple[Site, StreamClients]]) -> None:
    answers = []
    for site, clients in both:
        v = q(site.vhost)
        row = []
        for path in (
            "/api/stream/connections/no-such-vhost-x",
            f"/api/stream/connections/{v}/nope",
            f"/api/stream/connections/{v}/nope/publishers",
            f"/api/stream/connections/{v}/nope/consumers",
            "/api/stream/publishers/no-such-vhost-x",
            f"/api/stream/publishers/{v}/no-such-stream",
            "/api/stream/consumers/no-such-vhost-x",
        ):
            row.append((path.replace(v, "VHOST"), *site.api.call("GET", path)))
        # a stream connection is found in its own vhost only
        conns = by_client(site.api.get(f"/api/stream/connections/{v}"))
        other = q(conns[clients.producer_name]["name"])
        row.append(("other vhost", *site.api.call("GET", f"/api/stream/connections/%2F/{other}")))
        answers.append(row)
    assert answers[0] == answers[1]


def test_stream_connections_of_others_are_hidden(
    both: list[tuple[Site, StreamClients]],
) -> None:
    """The test's management user (not the clients' user guest) sees none of them."""
    answers = []
    for site, clients in both:
        api = site.api.as_user(site.user, site.password)
        v = q(site.vhost)
        name = by_client(site.api.get(f"/api/stream/connections/{v}"))[clients.producer_name]
        answers.append(
            (
                [c for c in api.get("/api/stream/connections") if c["vhost"] == site.vhost],
                api.get(f"/api/stream/connections/{v}"),
                api.get(f"/api/stream/publishers/{v}"),
                api.get(f"/api/stream/consumers/{v}"),
                api.call("GET", f"/api/stream/connections/{v}/{q(name['name'])}"),
                api.call("DELETE", f"/api/stream/connections/{v}/{q(name['name'])}"),
            )
        )
    assert answers[0] == answers[1]
    assert answers[0][:4] == ([], [], [], [])
    assert answers[0][4][0] == 401


def test_delete_stream_connection(both: list[tuple[Site, StreamClients]]) -> None:
    for site, clients in both:
        v = q(site.vhost)
        conns = by_client(site.api.get(f"/api/stream/connections/{v}"))
        name = conns[clients.consumer_name]["name"]
        status, _ = site.api.call(
            "DELETE", f"/api/stream/connections/{v}/{q(name)}", headers={"X-Reason": "bye"}
        )
        assert status == 204, site.broker.name

        def gone(name: str = name, site: Site = site) -> bool:
            listed = site.api.get(f"/api/stream/connections/{q(site.vhost)}")
            return name not in [c["name"] for c in listed]

        assert wait_for(gone, 15, 0.2), site.broker.name
        path = f"/api/stream/consumers/{v}"
        assert wait_for(lambda site=site, path=path: site.api.get(path) == [], 15)


def stream_samples(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(url, timeout=10) as resp:
        text = resp.read().decode()
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.labels.get("protocol") == "stream":
                out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def test_prometheus_stream_series(both: list[tuple[Site, StreamClients]]) -> None:
    """Every protocol="stream" series Leveret exposes, RabbitMQ exposes too (same name, same
    labels); with the test's clients connected, its figures count them."""
    (lev, _), (rmq, _) = both
    ours = stream_samples(lev.broker.metrics_url)
    theirs = stream_samples(rmq.broker.metrics_url)
    assert ours and not set(ours) - set(theirs), set(ours) - set(theirs)
    stream = (("protocol", "stream"),)
    assert ours[("rabbitmq_global_publishers", stream)] >= 1
    assert ours[("rabbitmq_global_consumers", stream)] >= 1
    assert ours[("rabbitmq_global_messages_received_total", stream)] >= PUBLISHED
    assert ours[("rabbitmq_global_messages_confirmed_total", stream)] >= PUBLISHED
    assert any(name.startswith("rabbitmq_global_stream_error_") for name, _ in ours)


def test_deleting_the_vhost_closes_its_stream_connections(leveret_site: Site) -> None:
    """As rabbit_connection_tracking: the vhost's stream connections are closed with it,
    and the overview counts them while they are open."""
    site = leveret_site
    clients = StreamClients(site, uuid.uuid4().hex[:8])
    try:
        clients.settled()
        assert site.api.get("/api/overview")["object_totals"]["connections"] >= 3
        assert site.api.delete(f"/api/vhosts/{q(site.vhost)}") == 204

        def closed() -> bool:
            return not [
                c for c in site.api.get("/api/stream/connections") if c["vhost"] == site.vhost
            ]

        assert wait_for(closed, 10, 0.2)
    finally:
        clients.close()
