"""The management API on Leveret: live counters and rates, connections, channels and
consumers, closing a connection, and users and vhosts that survive a restart."""

from __future__ import annotations

from typing import Any

import pika
import pytest

from tests.support.brokers import BrokerUnderTest, start_leveret
from tests.support.mgmt import Api, Site, make_site, q
from tests.support.waiting import wait_for


def connect(site: Site, name: str = "test-conn") -> pika.BlockingConnection:
    return site.connect(name)


def test_message_stats_and_rates(leveret_site: Site) -> None:
    site, api = leveret_site, leveret_site.api
    v = q(site.vhost)
    conn = connect(site)
    ch = conn.channel()
    ch.queue_declare("work")
    ch.confirm_delivery()
    for i in range(20):
        ch.basic_publish("", "work", f"job {i}".encode())
    # deliver and ack half of them
    for _ in range(10):
        method, _, _ = ch.basic_get("work")
        assert method is not None
        ch.basic_ack(method.delivery_tag)
    conn.close()  # the counters of a closed connection are kept

    stats = api.get(f"/api/vhosts/{v}")["message_stats"]
    assert (stats["publish"], stats["confirm"], stats["deliver_get"], stats["ack"]) == (
        20,
        20,
        10,
        10,
    )
    queue = api.get(f"/api/queues/{v}/work")
    assert (queue["messages"], queue["messages_ready"], queue["messages_unacknowledged"]) == (
        10,
        10,
        0,
    )
    assert queue["message_stats"]["publish"] == 20
    assert queue["message_stats"]["ack"] == 10
    overview = api.get("/api/overview")
    assert overview["message_stats"]["publish"] >= 20
    assert overview["object_totals"]["queues"] >= 1
    assert overview["queue_totals"]["messages"] >= 10

    # rates come from the rolling window: publish steadily, then the rate shows
    conn = connect(site)
    ch = conn.channel()

    def rate_seen() -> bool:
        for _ in range(20):
            ch.basic_publish("", "work", b"x")
        conn.process_data_events(0)
        data = api.get(f"/api/vhosts/{v}")
        return data["message_stats"]["publish_details"]["rate"] > 0

    assert wait_for(rate_seen, timeout=15, interval=0.3)
    assert wait_for(
        lambda: api.get(f"/api/queues/{v}/work")["messages_details"]["rate"] > 0,
        timeout=15,
        interval=0.3,
    )
    conn.close()
    data = api.get("/api/overview?lengths_age=60&lengths_incr=5&msg_rates_age=60&msg_rates_incr=5")
    details = data["message_stats"]["publish_details"]
    assert {"rate", "samples", "avg_rate", "avg"} <= set(details)
    assert details["samples"] and {"sample", "timestamp"} == set(details["samples"][0])


def test_connections_channels_consumers_and_close(leveret_site: Site) -> None:
    site, api = leveret_site, leveret_site.api
    conn = connect(site, "conn-under-test")
    ch = conn.channel()
    ch.queue_declare("q-consumed")
    ch.basic_qos(prefetch_count=7)
    ch.basic_consume("q-consumed", lambda *a: None, consumer_tag="my-ctag")
    mine = [c for c in api.get("/api/connections") if c["vhost"] == site.vhost]
    assert len(mine) == 1
    c = mine[0]
    assert c["user_provided_name"] == "conn-under-test"
    assert c["client_properties"]["connection_name"] == "conn-under-test"
    assert (c["user"], c["protocol"], c["state"], c["channels"]) == (
        "guest",
        "AMQP 0-9-1",
        "running",
        1,
    )
    assert c["name"] == f"{c['peer_host']}:{c['peer_port']} -> {c['host']}:{c['port']}"
    assert api.get(f"/api/connections/{q(c['name'])}")["name"] == c["name"]
    chans = api.get(f"/api/connections/{q(c['name'])}/channels")
    assert [x["name"] for x in chans] == [f"{c['name']} (1)"]
    assert chans[0]["prefetch_count"] == 7 and chans[0]["consumer_count"] == 1
    consumers = api.get(f"/api/consumers/{q(site.vhost)}")
    assert [
        (x["consumer_tag"], x["queue"]["name"], x["prefetch_count"], x["ack_required"])
        for x in consumers
    ] == [("my-ctag", "q-consumed", 7, True)]
    assert api.get(f"/api/vhosts/{q(site.vhost)}/connections")[0]["name"] == c["name"]

    status, _ = api.call(
        "DELETE", f"/api/connections/{q(c['name'])}", headers={"X-Reason": "go away"}
    )
    assert status == 204
    with pytest.raises(pika.exceptions.ConnectionClosed) as info:
        conn.process_data_events(2)
        ch.basic_publish("", "q-consumed", b"x")
    assert info.value.reply_code == 320
    assert "go away" in info.value.reply_text
    assert wait_for(
        lambda: not [x for x in api.get("/api/connections") if x["vhost"] == site.vhost],
        timeout=5,
        interval=0.1,
    )
    assert api.call("GET", f"/api/connections/{q(c['name'])}")[0] == 404


def test_non_administrators_see_their_own(leveret_site: Site) -> None:
    site = leveret_site
    limited = site.api.as_user(site.user, site.password)
    vhosts = [v["name"] for v in limited.get("/api/vhosts")]
    assert vhosts == [site.vhost]
    assert limited.call("GET", "/api/definitions")[0] == 401
    assert limited.call("PUT", f"/api/vhosts/{q(site.vhost)}-2", {})[0] == 401
    # configure permission is '^t-': declaring elsewhere is refused
    assert limited.put(f"/api/queues/{q(site.vhost)}/t-mine", {}) == 201
    status, body = limited.call("PUT", f"/api/queues/{q(site.vhost)}/other", {})
    assert (status, body) == (401, {"error": "not_authorised", "reason": "Access refused."})


def test_alarms_and_nodes(leveret: BrokerUnderTest) -> None:
    api = Api(leveret.http_url)
    assert api.get("/api/health/checks/alarms") == {"status": "ok"}
    nodes = api.get("/api/nodes")
    overview = api.get("/api/overview")
    assert [n["name"] for n in nodes] == [overview["node"]]
    assert api.get(f"/api/nodes/{q(overview['node'])}")["running"] is True
    assert {lst["protocol"] for lst in overview["listeners"]} == {
        "amqp",
        "http",
        "http/prometheus",
        "stream",
    }
    assert api.get("/api/whoami") == {"name": "guest", "tags": ["administrator"]}


def test_users_vhosts_permissions_survive_restart(tmp_path: Any) -> None:
    broker = start_leveret(tmp_path)
    try:
        site_gen = make_site(broker, "p")
        site = next(site_gen)
        api = site.api
        assert api.put(f"/api/queues/{q(site.vhost)}/t-durable", {"durable": True}) == 201
    finally:
        broker.stop()
    broker = start_leveret(tmp_path)
    try:
        api = Api(broker.http_url)
        assert api.get(f"/api/vhosts/{q(site.vhost)}")["name"] == site.vhost
        assert api.get(f"/api/users/{q(site.user)}")["tags"] == ["management"]
        assert api.get(f"/api/permissions/{q(site.vhost)}/{q(site.user)}")["configure"] == "^t-"
        assert api.get(f"/api/queues/{q(site.vhost)}/t-durable")["durable"] is True
        # and the user's password still works
        assert Api(broker.http_url, site.user, site.password).get("/api/whoami")["name"] == (
            site.user
        )
    finally:
        broker.stop()


def test_stream_queues_are_listed(leveret_site: Site) -> None:
    site, api = leveret_site, leveret_site.api
    conn = connect(site)
    ch = conn.channel()
    ch.queue_declare("t-stream", durable=True, arguments={"x-queue-type": "stream"})
    ch.basic_publish("", "t-stream", b"s")
    conn.close()
    listed = {x["name"]: x for x in api.get(f"/api/queues/{q(site.vhost)}")}
    assert listed["t-stream"]["type"] == "stream"
    assert listed["t-stream"]["arguments"] == {"x-queue-type": "stream"}
    status, _ = api.call(
        "POST",
        f"/api/queues/{q(site.vhost)}/t-stream/get",
        {"count": 1, "ackmode": "ack_requeue_true", "encoding": "auto"},
    )
    assert status < 500
