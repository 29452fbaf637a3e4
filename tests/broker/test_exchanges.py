"""Exchange types on their own: topic matching against a reference matcher, headers
matching, binding bookkeeping."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from leveret.broker.exchanges import Binding, FanoutExchange, TopicExchange
from leveret.broker.exchanges.headers import headers_match
from leveret.broker.exchanges.topic import topic_matches
from leveret.broker.message import Message
from leveret.broker.queues import ClassicQueue as Queue
from leveret.broker.queues import Declaration
from tests.support.tiers import examples


def reference(binding: str, key: str) -> bool:
    """Topic matching by regular expression over the word lists."""
    bwords = binding.split(".") if binding else []
    kwords = key.split(".") if key else []

    def m(i: int, j: int) -> bool:
        if i == len(bwords):
            return j == len(kwords)
        if bwords[i] == "#":
            return any(m(i + 1, k) for k in range(j, len(kwords) + 1))
        if j == len(kwords):
            return False
        return (bwords[i] == "*" or bwords[i] == kwords[j]) and m(i + 1, j + 1)

    return m(0, 0)


words = st.lists(st.sampled_from(["a", "b", "c", ""]), max_size=5).map(".".join)
patterns = st.lists(st.sampled_from(["a", "b", "*", "#", ""]), max_size=5).map(".".join)


@settings(max_examples=examples(1500), deadline=None)
@given(patterns, words)
def test_topic_matches_reference(binding: str, key: str) -> None:
    assert topic_matches(binding, key) == reference(binding, key)


@settings(max_examples=examples(200), deadline=None)
@given(st.lists(patterns, min_size=1, max_size=6), words)
def test_topic_exchange_routes_each_queue_once(bindings: list[str], key: str) -> None:
    x = TopicExchange("t", "/")
    from leveret.broker.vhost import VirtualHost

    vhost = VirtualHost("/")
    queues = [Queue(Declaration(f"q{i}", "/")) for i in range(len(bindings))]
    for q, b in zip(queues, bindings, strict=True):
        vhost.bind(x, Binding(x.name, q, b))
        vhost.bind(x, Binding(x.name, q, b + ".#" if b else "#"))  # overlapping bindings
    routed = x.route(Message.build("t", key, b""))
    assert len(routed) == len(set(map(id, routed)))
    expected = {
        q.name
        for q, b in zip(queues, bindings, strict=True)
        if reference(b, key) or reference(b + ".#" if b else "#", key)
    }
    assert {q.name for q in routed} == expected  # type: ignore[attr-defined]
    for q, b in zip(queues, bindings, strict=True):
        vhost.unbind(x, Binding(x.name, q, b))
        vhost.unbind(x, Binding(x.name, q, b + ".#" if b else "#"))
    assert x.route(Message.build("t", key, b"")) == []


def test_headers_match_modes() -> None:
    h = {"a": 1, "b": "x", "x-c": "y"}
    assert headers_match({"x-match": "all", "a": 1, "b": "x"}, h)
    assert not headers_match({"x-match": "all", "a": 1, "b": "z"}, h)
    assert headers_match({"x-match": "any", "a": 2, "b": "x"}, h)
    assert headers_match({"a": None}, h)  # void: presence only
    assert not headers_match({"a": "1"}, h)  # a string is not a number
    assert headers_match({"a": 1.0}, h)  # numbers compare numerically
    assert not headers_match({"a": True}, h)  # a bool is not 1
    assert headers_match({"x-match": "all", "x-c": "nope"}, h)  # x- ignored
    assert not headers_match({"x-match": "all-with-x", "x-c": "nope"}, h)
    assert headers_match({"x-match": "any-with-x", "x-c": "y"}, h)


def test_fanout_counts_duplicate_bindings() -> None:
    from leveret.broker.vhost import VirtualHost

    vhost = VirtualHost("/")
    x = FanoutExchange("f", "/")
    q = Queue(Declaration("q", "/"))
    vhost.bind(x, Binding(x.name, q, "one"))
    vhost.bind(x, Binding(x.name, q, "two"))
    assert x.route(Message.build("f", "", b"")) == [q]
    vhost.unbind(x, Binding(x.name, q, "one"))
    assert x.route(Message.build("f", "", b"")) == [q]
    vhost.unbind(x, Binding(x.name, q, "two"))
    assert x.route(Message.build("f", "", b"")) == []
