"""The management API reports what it measured, as RabbitMQ 3.10.8 reports it: the login
challenge, the node's name, the aliveness round trip, a queue's bytes and counts (ready and
unacknowledged, persistent, in memory), the head message's timestamp, the consumers'
capacity, the deliver/get split of queues and channels, exchanges' publish_in/publish_out,
and rabbitmq_prometheus's per-channel and per-connection series. The same scenario runs on
both brokers; RabbitMQ's statistics arrive every 5 s, so its side is polled."""

from __future__ import annotations

import base64
import contextlib
import socket
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pika
import pytest

from tests.support.mgmt import Site, q
from tests.support.waiting import STATS_WAIT, settled, wait_for

pytestmark = pytest.mark.rabbitmq


@pytest.fixture
def sites(leveret_site: Site, rabbitmq_site: Site) -> Iterator[tuple[Site, Site]]:
    yield leveret_site, rabbitmq_site


def connect(site: Site) -> pika.BlockingConnection:
    b = site.broker
    return pika.BlockingConnection(
        pika.ConnectionParameters(b.host, b.port, virtual_host=site.vhost)
    )


def test_login_challenge(sites: tuple[Site, Site]) -> None:
    """No credentials: 401 with RabbitMQ's challenge and no body; wrong ones: the challenge
    and Login failed; a user without a management tag: no challenge."""
    answers = []
    for site in sites:
        site.api.put(f"/api/users/{q(site.user)}-none", {"password": "pw", "tags": ""})
        out = []
        for user, password in ((None, None), ("guest", "wrong"), (f"{site.user}-none", "pw")):
            req = urllib.request.Request(site.broker.http_url + "/api/overview")
            if user is not None:
                token = base64.b64encode(f"{user}:{password}".encode()).decode()
                req.add_header("Authorization", f"Basic {token}")
            try:
                urllib.request.urlopen(req, timeout=10)
            except urllib.error.HTTPError as exc:
                out.append((exc.code, exc.headers.get("WWW-Authenticate"), exc.read()))
        site.api.delete(f"/api/users/{q(site.user)}-none")
        answers.append(out)
    assert answers[0] == answers[1]
    assert answers[0][0] == (401, 'Basic realm="RabbitMQ Management"', b"")


def test_node_is_rabbit_at_host(sites: tuple[Site, Site]) -> None:
    """rabbit@<short host name>, where tools look for it; connection.start still says the
    product is Leveret."""
    host = socket.gethostname().split(".")[0]
    for site in sites:
        assert site.api.get("/api/overview")["node"] == f"rabbit@{host}"
        assert site.api.get(f"/api/nodes/rabbit@{host}")["name"] == f"rabbit@{host}"
    conn = connect(sites[0])
    try:
        assert conn._impl.server_properties["product"] == "Leveret"  # type: ignore[attr-defined]
    finally:
        conn.close()


def test_aliveness_round_trip(sites: tuple[Site, Site]) -> None:
    """The aliveness test declares aliveness-test, publishes to it and gets the message
    back: the queue stays, empty, counted as published and fetched; without permission to
    configure it the user is refused; a missing vhost is 404.

    RabbitMQ's statistics collector drops a channel's figures for a queue it does not know
    yet, and the aliveness test's channel closes at once: the first round trip, which
    creates the queue, is counted on the queue or not, and late or not, by a race (seen in
    full runs: no message_stats at all after 60 s; a publish counted and its get not, then
    both). Leveret counts it. So RabbitMQ is held to what is certain: the second round trip,
    made once the queue is known, is counted, one publish and one get, and the counts end
    equal and at most two; Leveret to counting both."""
    answers = []
    for site in sites:
        ok = site.api.call("GET", f"/api/aliveness-test/{q(site.vhost)}")

        def queue(site: Site = site) -> Any:
            data = site.api.get(f"/api/queues/{q(site.vhost)}/aliveness-test")
            stats = data.get("message_stats", {})
            return (
                data.get("messages"),
                data["durable"],
                data["arguments"],
                stats.get("publish", 0),
                stats.get("get_no_ack", 0),
            )

        assert wait_for(lambda: queue()[0] is not None, timeout=STATS_WAIT, interval=0.2)
        before = settled(queue)  # the first round trip's figures, if they count, are in
        again = site.api.call("GET", f"/api/aliveness-test/{q(site.vhost)}")
        missing = site.api.call("GET", "/api/aliveness-test/no-such-vhost-x")
        # the test's user may configure only ^t- names
        refused = site.api.as_user(site.user, site.password).call(
            "GET", f"/api/aliveness-test/{q(site.vhost)}"
        )
        refused = (
            refused[0],
            str(refused[1]).replace(site.vhost, "VHOST").replace(site.user, "USER"),
        )
        assert before[:3] == (0, False, {}), before

        def counted(b: Any = before, site: Site = site) -> bool:
            _, _, _, published, got = queue(site)
            return published == got and max(b[3], b[4]) + 1 <= published <= 2

        assert wait_for(counted, timeout=STATS_WAIT, interval=0.2), (
            site.broker.name,
            before,
            queue(),
        )
        answers.append([ok, again, missing, refused, queue()])
    ours, theirs = answers
    assert ours[:4] == theirs[:4]
    assert ours[4] == (0, False, {}, 2, 2)  # Leveret counted both round trips


def queue_scenario(site: Site) -> pika.BlockingConnection:
    """q1: ten persistent messages with a timestamp, a consumer (prefetch 3) holding
    three; q2 (durable): two fetched and held, one fetched without ack."""
    conn = connect(site)
    ch = conn.channel()
    ch.queue_declare("q1")
    ch.queue_declare("q2", durable=True)
    ch.exchange_declare("x1", "fanout")
    ch.queue_bind("q1", "x1")
    ch.queue_bind("q2", "x1")
    ch.confirm_delivery()
    for i in range(10):
        ch.basic_publish(
            "x1",
            "",
            b"hello%d" % i,
            pika.BasicProperties(delivery_mode=2, timestamp=1700000000 + i),
        )
    ch.basic_qos(prefetch_count=3)
    ch.basic_consume("q1", lambda *a: None)
    for _ in range(2):
        ch.basic_get("q2", auto_ack=False)
    ch.basic_get("q2", auto_ack=True)
    conn.process_data_events(1)
    return conn


QUEUE_FIGURES = (
    "messages",
    "messages_ready",
    "messages_unacknowledged",
    "messages_ram",
    "messages_ready_ram",
    "messages_unacknowledged_ram",
    "messages_persistent",
    "messages_paged_out",
    "message_bytes",
    "message_bytes_ready",
    "message_bytes_unacknowledged",
    "message_bytes_ram",
    "message_bytes_persistent",
    "message_bytes_paged_out",
    "head_message_timestamp",
    "consumers",
)


def test_queue_figures(sites: tuple[Site, Site]) -> None:
    """Bytes and counts, ready and unacknowledged, persistent and in memory, the head's
    timestamp and the message_stats split, field by field; memory, which Leveret cannot
    measure per queue, is not shown."""
    conns = [queue_scenario(site) for site in sites]
    try:
        lev, rmq = sites

        def figures(site: Site, name: str) -> Any:
            data = site.api.get(f"/api/queues/{q(site.vhost)}/{name}")
            stats = {
                k: v for k, v in data.get("message_stats", {}).items() if not k.endswith("_details")
            }
            return {k: data.get(k) for k in QUEUE_FIGURES}, stats

        for name in ("q1", "q2"):
            ours = figures(lev, name)
            assert wait_for(lambda n=name, o=ours: figures(rmq, n) == o, timeout=STATS_WAIT), (
                ours,
                figures(rmq, name),
            )
        one = lev.api.get(f"/api/queues/{q(lev.vhost)}/q1")
        assert "memory" not in one
        assert 0 < one["consumer_utilisation"] <= 1 and one["consumer_capacity"] <= 1
        assert one["message_bytes_unacknowledged"] == 18
    finally:
        for conn in conns:
            conn.close()


def test_consumer_capacity_measures_blocked_time(sites: tuple[Site, Site]) -> None:
    """A consumer that takes everything keeps the queue at full capacity; one held at
    its prefetch while messages wait brings it down on both brokers (the figure is a
    one-second half-life average of the time consumers could take messages)."""
    results = []
    for site in sites:
        conn = connect(site)
        ch = conn.channel()
        ch.queue_declare("fast")
        ch.queue_declare("slow")
        ch.basic_consume("fast", lambda *a: None, auto_ack=True)
        ch.basic_qos(prefetch_count=1)
        ch.basic_consume("slow", lambda *a: None)
        for i in range(20):
            ch.basic_publish("", "fast", b"%d" % i)
            ch.basic_publish("", "slow", b"%d" % i)
        conn.process_data_events(3)

        def capacity(name: str, site: Site = site) -> float:
            return float(
                site.api.get(f"/api/queues/{q(site.vhost)}/{name}").get("consumer_capacity", -1)
            )

        def held(ch: Any = ch) -> bool:
            # One more message for the held consumer at each look: RabbitMQ's queue process
            # emits its figures only while it is awake, and one that hibernates a second
            # after its last event keeps the capacity it had then (about one half-life into
            # the blocked time, so near 0.5) until something wakes it.
            ch.basic_publish("", "slow", b"more")
            return 0 <= capacity("slow") < 0.5 and capacity("fast") > 0.9

        wait_for(held, timeout=STATS_WAIT)
        results.append((capacity("fast") > 0.9, capacity("slow") < 0.5))
        conn.close()
    assert results == [(True, True), (True, True)]


def test_exchange_and_channel_stats(sites: tuple[Site, Site]) -> None:
    """publish_in counts what was published to an exchange (routed or not), publish_out
    the queue deliveries it made (through exchange-to-exchange bindings too); channels
    split deliveries and gets with and without acks, and count returns."""
    conns = []
    for site in sites:
        conn = connect(site)
        conns.append(conn)
        ch = conn.channel()
        ch.exchange_declare("x1", "direct")
        ch.exchange_declare("x2", "direct")
        ch.exchange_declare("x3", "fanout")
        ch.queue_declare("q1")
        ch.queue_bind("q1", "x2", "k")
        ch.exchange_bind("x3", "x2", "k")
        ch.queue_declare("q3")
        ch.queue_bind("q3", "x3")
        ch.confirm_delivery()
        for _ in range(3):
            ch.basic_publish("x1", "k", b"m")
        with contextlib.suppress(pika.exceptions.UnroutableError):
            ch.basic_publish("x1", "k", b"m", mandatory=True)
        for _ in range(2):
            ch.basic_publish("x2", "k", b"m")
        ch.basic_publish("", "q1", b"m")
        ch.basic_get("q1", auto_ack=True)
        ch.basic_get("q1", auto_ack=False)
        ch2 = conn.channel()
        for _ in range(3):
            ch2.basic_get("q3", auto_ack=True)
        conn.process_data_events(0.5)
    try:
        lev, rmq = sites

        def exchanges(site: Site) -> Any:
            return {
                x["name"]: {
                    k: v
                    for k, v in x.get("message_stats", {}).items()
                    if not k.endswith("_details")
                }
                for x in site.api.get(f"/api/exchanges/{q(site.vhost)}")
            }

        def channels(site: Site) -> Any:
            out = []
            for c in site.api.get(f"/api/vhosts/{q(site.vhost)}/channels"):
                stats = {
                    k: v
                    for k, v in c.get("message_stats", {}).items()
                    if not k.endswith("_details")
                }
                # RabbitMQ 3.10.8's management shows drop_unroutable and get_empty as 0
                # whatever happened; Leveret counts what it dropped and what found nothing
                stats.pop("drop_unroutable", None)
                stats.pop("get_empty", None)
                out.append((c["number"], c.get("messages_unconfirmed"), stats))
            return sorted(out)

        ours = exchanges(lev), channels(lev)
        assert wait_for(lambda: (exchanges(rmq), channels(rmq)) == ours, timeout=STATS_WAIT), (
            ours,
            exchanges(rmq),
            channels(rmq),
        )
        assert ours[0]["x2"] == {"publish_in": 2, "publish_out": 4}
        number_one = next(
            c for c in lev.api.get(f"/api/vhosts/{q(lev.vhost)}/channels") if c["number"] == 1
        )
        assert number_one["message_stats"]["drop_unroutable"] == 3
        number_two = next(
            c for c in lev.api.get(f"/api/vhosts/{q(lev.vhost)}/channels") if c["number"] == 2
        )
        assert number_two["message_stats"]["get_empty"] == 1
    finally:
        for conn in conns:
            conn.close()


def metrics(site: Site, path: str) -> dict[str, float]:
    with urllib.request.urlopen(
        f"http://{site.broker.host}:{site.broker.prometheus_port}{path}", timeout=10
    ) as r:
        text = r.read().decode()
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            out[name] = float(value)
    return out


def test_prometheus_channel_and_connection_series(sites: tuple[Site, Site]) -> None:
    """rabbitmq_prometheus's per-object series: each channel's gauges, its counters by
    exchange and by queue, each connection's traffic (labelled 'channel', as RabbitMQ
    labels it); the same series names on both brokers, and on Leveret the values of this
    test's channel."""
    lev, rmq = sites
    conn = connect(lev)
    try:
        ch = conn.channel()
        ch.queue_declare("pq")
        ch.confirm_delivery()
        for _ in range(4):
            ch.basic_publish("", "pq", b"12345")
        ch.basic_get("pq", auto_ack=True)
        ch.basic_get("pq", auto_ack=False)
        conn.process_data_events(0.2)
        ours = metrics(lev, "/metrics/per-object")
        mine = {k: v for k, v in ours.items() if "rabbitmq_channel_" in k and lev.vhost in k}
        published = [
            v
            for k, v in mine.items()
            if k.startswith("rabbitmq_channel_messages_published_total{") and 'exchange=""' in k
        ]
        assert published == [4.0]
        gets = {k.split("{")[0]: v for k, v in mine.items() if 'queue="pq"' in k}
        assert gets["rabbitmq_channel_get_total"] == 1
        assert gets["rabbitmq_channel_get_ack_total"] == 1
        assert any(
            k.startswith("rabbitmq_connection_incoming_bytes_total{channel=") and v > 0
            for k, v in ours.items()
        )
        theirs = metrics(rmq, "/metrics/per-object")

        def families(m: dict[str, float]) -> set[str]:
            return {
                k.split("{")[0]
                for k in m
                if k.startswith(("rabbitmq_channel_", "rabbitmq_connection_"))
                and "process_reductions" not in k
            }

        # RabbitMQ lists a family only while it has samples: compare the ones it has
        assert families(theirs) <= families(ours)
        aggregated = metrics(lev, "/metrics")
        assert aggregated["rabbitmq_channel_get_total"] >= 1
        assert aggregated['rabbitmq_global_publishers{protocol="amqp091"}'] >= 1
    finally:
        conn.close()


def test_dashboard_requests_get_no_challenge(leveret_site: Site) -> None:
    """The dashboard asks with X-Requested-With and shows its own login form: its 401s
    carry no WWW-Authenticate, so the browser does not prompt over it."""
    req = urllib.request.Request(leveret_site.broker.http_url + "/api/overview")
    req.add_header("X-Requested-With", "XMLHttpRequest")
    req.add_header("Authorization", "Basic " + base64.b64encode(b"guest:wrong").decode())
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(req, timeout=10)
    assert info.value.code == 401
    assert info.value.headers.get("WWW-Authenticate") is None
    assert info.value.read() == b'{"error":"not_authorized","reason":"Login failed"}'


def test_churn_rates(sites: tuple[Site, Site]) -> None:
    """The overview's churn_rates: RabbitMQ's keys, each with its *_details; opening a
    connection and a channel and declaring a queue (new, then again) count on Leveret."""
    lev = sites[0]
    keys = [set(site.api.get("/api/overview")["churn_rates"]) for site in sites]
    assert keys[0] == keys[1]
    before = lev.api.get("/api/overview")["churn_rates"]
    conn = connect(lev)
    ch = conn.channel()
    ch.queue_declare("t-churn")
    ch.queue_declare("t-churn")
    ch.close()
    conn.close()
    after = lev.api.get("/api/overview")["churn_rates"]
    grew = {k: after[k] - before[k] for k in after if not k.endswith("_details")}
    assert {k: v for k, v in grew.items() if k != "connection_closed"} == {
        "channel_created": 1,
        "channel_closed": 1,
        "connection_created": 1,
        "queue_created": 1,
        "queue_declared": 2,
        "queue_deleted": 0,
    }
