"""``leveret ctl list_stream_connections``, ``list_stream_consumers`` and
``list_stream_publishers`` print what ``rabbitmqctl`` (and ``rabbitmq-streams``) print on
RabbitMQ 3.10.8, for the same rstream clients in a vhost of the test's own: the
pretty_table they default to, and the table and json formatters. Pids and ports are the
brokers' own; RabbitMQ lists rows in no particular order.

RabbitMQ runs as a node of this module's own. Its ``rabbitmqctl list_stream_*`` asks
every stream connection of the node for its vhost, and a connection still in its
handshake crashes on the question (``function_clause`` in ``rabbit_stream_reader``, state
``peer_properties_exchanged``): on the shared node, the listing would kill a connection
that another test was opening at that moment, and fail itself."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator

import pytest

from tests.support import rabbitmq
from tests.support.brokers import BrokerUnderTest
from tests.support.mgmt import Site, make_site
from tests.support.ports import free_port
from tests.support.streamscenario import StreamClients, stream_clients_on

pytestmark = pytest.mark.rabbitmq
rstream = pytest.importorskip("rstream")

BAR = "\x1b(0x\x1b(B"
PID = re.compile(r"(#PID)?<[^<>]*>")


@pytest.fixture(scope="module")
def own_rabbitmq() -> Iterator[tuple[BrokerUnderTest, rabbitmq.RabbitNode]]:
    if not rabbitmq.installed():
        pytest.skip("RabbitMQ is not installed here")
    stream_port = free_port()
    node = rabbitmq.RabbitNode(
        management=True,
        plugins=["rabbitmq_stream", "rabbitmq_stream_management"],
        config={
            "stream.listeners.tcp.1": f"127.0.0.1:{stream_port}",
            # statistics every second, as on the shared node: the clients settle sooner
            "collect_statistics_interval": "1000",
        },
    ).start()
    try:
        broker = BrokerUnderTest(
            "rabbitmq", node.host, node.port, http_port=node.http_port, stream_port=stream_port
        )
        yield broker, node
    finally:
        node.close()


@pytest.fixture
def rabbitmq_site(own_rabbitmq: tuple[BrokerUnderTest, rabbitmq.RabbitNode]) -> Iterator[Site]:
    """A vhost and a user of the test's own on this module's RabbitMQ node."""
    broker, node = own_rabbitmq
    yield from make_site(broker, node_ctl=node.server.ctl)


@pytest.fixture
def both(leveret_site: Site, rabbitmq_site: Site) -> Iterator[list[tuple[Site, StreamClients]]]:
    with stream_clients_on(leveret_site, rabbitmq_site) as pairs:
        yield pairs


def ctl(site: Site, *args: str) -> str:
    return site.ctl(*args).stdout.replace(site.vhost, "VHOST")


def cells(pretty: str) -> list[list[str]]:
    """The rows (header first) of a pretty table, each cell stripped, pids as PID."""
    rows = []
    for line in pretty.splitlines():
        if line.startswith(BAR):
            parts = line.split(BAR)[1:-1]
            rows.append(
                [
                    PID.sub("PID", p.strip()).replace("\x1b[1m", "").replace("\x1b[0m", "")
                    for p in parts
                ]
            )
    return rows


PUBLISHER_COLUMNS = [
    "publisher_id",
    "stream",
    "reference",
    "messages_published",
    "messages_confirmed",
    "messages_errored",
]
CONSUMER_COLUMNS = [
    "subscription_id",
    "stream",
    "messages_consumed",
    "offset",
    "offset_lag",
    "credits",
    "properties",
]


@pytest.mark.parametrize(
    ("verb", "columns"),
    [("list_stream_publishers", PUBLISHER_COLUMNS), ("list_stream_consumers", CONSUMER_COLUMNS)],
)
def test_pretty_table_is_the_same(
    both: list[tuple[Site, StreamClients]], verb: str, columns: list[str]
) -> None:
    """Without the pid column, the very same bytes: banner, box, bold header, cells."""
    (lev, _), (rmq, _) = both
    ours = ctl(lev, verb, "-p", lev.vhost, *columns)
    assert ours == ctl(rmq, verb, "-p", rmq.vhost, *columns)
    assert ours.startswith(f"Listing stream {verb.split('_')[-1]} ...\n\x1b(0l")
    # with the pid: the same table but for the pids
    ours, theirs = (ctl(site, verb, "-p", site.vhost) for site, _ in both)
    assert cells(ours) == cells(theirs)
    assert ours.splitlines()[0] == theirs.splitlines()[0]
    assert len(ours.splitlines()) == len(theirs.splitlines()) == 6


@pytest.mark.parametrize("verb", ["list_stream_publishers", "list_stream_consumers"])
def test_table_and_json_formatters(both: list[tuple[Site, StreamClients]], verb: str) -> None:
    (lev, _), (rmq, _) = both
    for flags in ([], ["-q"], ["-s"]):
        ours, theirs = (
            PID.sub("PID", ctl(site, verb, "--formatter", "table", *flags, "-p", site.vhost))
            for site in (lev, rmq)
        )
        assert ours == theirs, flags
    ours, theirs = (
        PID.sub("PID", ctl(site, verb, "--formatter", "json", "-p", site.vhost))
        for site in (lev, rmq)
    )
    assert ours == theirs
    assert json.loads(ours)


CONNECTION_COLUMNS = [
    "vhost",
    "user",
    "peer_cert_issuer",
    "peer_cert_subject",
    "peer_cert_validity",
    "subscriptions",
    "ssl",
    "ssl_cipher",
    "ssl_hash",
    "ssl_key_exchange",
    "ssl_protocol",
    "connection_state",
    "auth_mechanism",
    "heartbeat",
    "frame_max",
    "client_properties",
]


def test_list_stream_connections(both: list[tuple[Site, StreamClients]]) -> None:
    """Every vhost's connections: the test's own rows are compared, in the table and json
    formatters, and the pretty table's header."""
    answers = []
    for site, clients in both:

        def run(*args: str, clients: StreamClients = clients, site: Site = site) -> str:
            out = ctl(site, "list_stream_connections", *args)
            return out.replace(clients.consumer_name, "C").replace(clients.producer_name, "P")

        lines = run("--formatter", "table", *CONNECTION_COLUMNS).splitlines()
        head, rows = lines[:2], sorted(r for r in lines[2:] if r.startswith("VHOST\t"))
        as_json = json.loads(run("--formatter", "json", *CONNECTION_COLUMNS))
        mine_json = sorted(json.dumps(r) for r in as_json if r["vhost"] == "VHOST")
        pretty = cells(run("conn_name", "vhost", "host"))
        own = [r for r in pretty[1:] if r[1] == "VHOST"]
        hosts = run("--formatter", "table", "-q", "vhost", "host").splitlines()
        answers.append(
            (head, rows, mine_json, pretty[0], len(own), hosts[0], "VHOST\t127.0.0.1" in hosts)
        )
        assert len(rows) == 3, (site.broker.name, lines)
    assert answers[0] == answers[1]
