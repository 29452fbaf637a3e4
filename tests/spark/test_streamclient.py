"""Which node the stream-protocol reader connects to, from RabbitMQ's Metadata
(:func:`leveret.spark.streamclient.pick_host`): None means the URL's own host."""

from __future__ import annotations

from leveret.spark.streamclient import pick_host


def test_one_node_is_read_through_the_url_host_whatever_it_advertises() -> None:
    assert pick_host("127.0.0.1", {0: ("vm", 5552)}, [0]) is None


def test_a_member_advertised_under_the_url_host_or_its_address_is_read_there() -> None:
    brokers = {0: ("node-a.invalid", 5552), 1: ("localhost", 5552)}
    assert pick_host("127.0.0.1", brokers, [0, 1]) is None
    assert pick_host("node-a.invalid", brokers, [0]) is None


def test_otherwise_the_first_member_whose_name_resolves() -> None:
    brokers = {0: ("node-a.invalid", 5552), 1: ("127.0.0.2", 5553), 2: ("127.0.0.3", 5552)}
    assert pick_host("127.0.0.1", brokers, [0, 1]) == ("127.0.0.2", 5553)
    assert pick_host("127.0.0.1", brokers, [0]) is None  # nothing resolves: the URL's host


def test_the_targets_are_the_urls_then_the_members_metadata_named() -> None:
    from leveret.spark.streamclient import targets_of

    url = "amqp://u:p@a:5672/v,amqp://u:p@b:5673/v"
    got = targets_of(url, 7000, [("a", 7000), ("c", 7001), ("c", 7001)])
    assert [(t.host, t.port) for t in got] == [("a", 7000), ("b", 7000), ("c", 7001)]
    assert {(t.user, t.password, t.vhost) for t in got} == {("u", "p", "v")}
    tls = targets_of("amqps://u:p@a/")
    assert (tls[0].port, tls[0].tls) == (5551, True)
