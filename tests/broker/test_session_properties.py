"""Properties of a Session over any sequence of client actions (hypothesis, few examples
each: these run in the fast tier): settling never loses or duplicates a message, the
redelivered flag tells a first delivery from a later one, prefetch holds, confirms cover
every publish in order, and a rolled-back transaction changes nothing."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from pamqp import commands as C

from tests.broker.fakes import Ack, Client, Content, Deliver, new_broker
from tests.support.tiers import examples

FEW = settings(max_examples=examples(40), deadline=None)

# What a client does with one queue on one channel: publish, get, settle one outstanding
# delivery (picked by index) with ack / nack-requeue / reject-requeue / nack-drop, recover,
# or close the channel and open another.
actions = st.lists(
    st.one_of(
        st.just(("publish",)),
        st.just(("get",)),
        st.tuples(st.sampled_from(["ack", "nack", "reject", "drop"]), st.integers(0, 7)),
        st.just(("recover",)),
        st.just(("reopen",)),
    ),
    max_size=30,
)


@FEW
@given(actions)
def test_settling_keeps_every_message_exactly_once(steps: list[tuple[Any, ...]]) -> None:
    client = Client(new_broker())
    ch = client.channel()
    ch.declare_queue("q")
    published: list[bytes] = []
    outstanding: dict[int, bytes] = {}  # delivery tag -> body, on the open channel
    seen: set[bytes] = set()
    gone: list[bytes] = []  # acked or dropped

    def check_redelivered(body: bytes, redelivered: bool) -> None:
        assert redelivered == (body in seen)
        seen.add(body)

    for step in steps:
        kind = step[0]
        if kind == "publish":
            published.append(str(len(published)).encode())
            ch.publish("", "q", published[-1])
        elif kind == "get":
            got = ch.get("q")
            if got is not None:
                check_redelivered(got.body, got.method.redelivered)
                outstanding[got.method.delivery_tag] = got.body
        elif kind in ("ack", "nack", "reject", "drop") and outstanding:
            tag = sorted(outstanding)[step[1] % len(outstanding)]
            if kind == "ack":
                ch.ack(tag)
            elif kind == "drop":
                ch.nack(tag, requeue=False)
            elif kind == "nack":
                ch.nack(tag, requeue=True)
            else:
                ch.reject(tag, requeue=True)
            body = outstanding.pop(tag)
            if kind in ("ack", "drop"):
                gone.append(body)
        elif kind == "recover":
            ch.reply(C.Basic.Recover(requeue=True))
            outstanding.clear()
        elif kind == "reopen":
            ch.close()
            ch = client.channel()
            outstanding.clear()
    assert ch.declare_queue("q").message_count == len(published) - len(gone) - len(outstanding)
    ch.close()
    ch = client.channel()
    while (got := ch.get("q", no_ack=True)) is not None:
        check_redelivered(got.body, got.method.redelivered)
        gone.append(got.body)
    assert sorted(gone) == sorted(published)


@FEW
@given(
    st.integers(1, 4),
    st.integers(0, 12),
    st.lists(st.tuples(st.booleans(), st.booleans(), st.booleans()), max_size=20),
)
def test_a_consumer_never_holds_more_than_its_prefetch(
    prefetch: int, backlog: int, settles: list[tuple[bool, bool, bool]]
) -> None:
    client = Client(new_broker())
    ch = client.channel()
    ch.declare_queue("q")
    for i in range(backlog):
        ch.publish("", "q", str(i).encode())
    ch.qos(prefetch)
    ch.consume("q", "c")
    for newest, ack, multiple in settles:
        unacked = ch.channel.unacked
        assert len(unacked) <= prefetch
        if not unacked:
            ch.publish("", "q", b"more")
            continue
        tag = max(unacked) if newest else min(unacked)
        if ack:
            ch.ack(tag, multiple)
        else:
            ch.nack(tag, multiple, requeue=True)
    deliveries = ch.deliveries()
    assert [d.delivery_tag for d in deliveries] == list(range(1, len(deliveries) + 1))
    assert len(ch.channel.unacked) <= prefetch


@FEW
@given(
    st.lists(
        st.lists(st.tuples(st.booleans(), st.booleans()), min_size=1, max_size=5),
        max_size=6,
    )
)
def test_confirms_cover_every_publish_in_order(
    batches: list[list[tuple[bool, bool]]],
) -> None:
    """Publishes in batches (one read each), each routable or not, mandatory or not."""
    client = Client(new_broker())
    ch = client.channel()
    ch.declare_queue("q")
    ch.reply(C.Confirm.Select())
    seq = 0
    returned_seqs = []
    for batch in batches:
        with client.batch():
            for routable, mandatory in batch:
                seq += 1
                ch.publish("", "q" if routable else "nowhere", b"x", mandatory=mandatory)
                if mandatory and not routable:
                    returned_seqs.append(seq)
    acks = [r.delivery_tag for r in ch.out.log if isinstance(r, Ack)]
    assert acks == sorted(set(acks)) and acks[-1:] == ([seq] if seq else [])
    assert len(acks) == len(batches)  # one ack per batch
    # each basic.return goes out before the ack that covers its publish
    covered = 0
    returns = 0
    for r in ch.out.log:
        if isinstance(r, Content):
            returns += 1
            assert returned_seqs[returns - 1] > covered
        elif isinstance(r, Ack):
            covered = r.delivery_tag
    assert returns == len(returned_seqs)


@FEW
@given(
    st.integers(0, 5),
    st.lists(st.one_of(st.just(None), st.integers(0, 5)), max_size=10),
    st.booleans(),
)
def test_rollback_changes_nothing_and_commit_applies_all(
    held: int, ops: list[int | None], commit: bool
) -> None:
    """``held`` messages are got before the transaction; in it, publishes (None) and acks
    of held ones (by index); then rollback or commit."""
    client = Client(new_broker())
    ch = client.channel()
    ch.declare_queue("q")
    for i in range(held + 2):
        ch.publish("", "q", str(i).encode())
    tags = [ch.get("q").method.delivery_tag for _ in range(held)]
    ch.reply(C.Tx.Select())
    acked: set[int] = set()
    published = 0
    for op in ops:
        if op is None:
            ch.publish("", "q", b"tx")
            published += 1
        elif tags:
            tag = tags[op % len(tags)]
            if tag in acked:
                continue  # a second ack of it in the transaction is refused
            ch.ack(tag)
            acked.add(tag)
    ch.reply(C.Tx.Commit() if commit else C.Tx.Rollback())
    ready = ch.declare_queue("q").message_count
    if commit:
        assert (ready, set(ch.channel.unacked)) == (2 + published, set(tags) - acked)
    else:
        assert (ready, set(ch.channel.unacked)) == (2, set(tags))
    assert [r for r in ch.out.log if isinstance(r, Deliver)] == []
