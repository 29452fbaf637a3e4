"""A Channel on its own, over a VirtualHost, seeing its connection as a FakeHost: what it
delivers and to whom, how it settles, its flow control, confirms and transactions."""

from __future__ import annotations

import pytest
from pamqp import commands as C

from leveret.broker import operations
from leveret.broker.channel import Channel, Settle
from leveret.broker.message import Message
from leveret.broker.operations import Actor
from leveret.broker.queues import Queue
from leveret.broker.users import Permission
from leveret.broker.vhost import VirtualHost
from leveret.protocol.errors import AMQPError
from tests.broker.fakes import Ack, Content, Deliver, FakeHost, Sent


@pytest.fixture
def vhost() -> VirtualHost:
    return VirtualHost("/")


@pytest.fixture
def host(vhost: VirtualHost) -> FakeHost:
    return FakeHost(vhost, capabilities=("consumer_cancel_notify",))


@pytest.fixture
def channel(host: FakeHost) -> Channel:
    return Channel(host, 1)


def publish(vhost: VirtualHost, queue: str, n: int) -> None:
    for i in range(n):
        operations.publish(
            vhost, Actor("u", Permission("u", "/")), "", Message.build("", queue, f"m{i}".encode())
        )


def consume(channel: Channel, queue: Queue, tag: str = "c", no_ack: bool = False) -> None:
    channel.start_consumer(channel.consume(queue, tag, no_ack, False, {}))


def delivered(host: FakeHost) -> list[tuple[str, int, bool, bytes]]:
    return [
        (d.consumer_tag, d.delivery_tag, d.redelivered, d.body) for d in host.output.of(Deliver)
    ]


def consuming(vhost: VirtualHost, channel: Channel, count: int, tx: bool = False) -> Queue:
    """Queue q with ``count`` messages, and ``channel`` (in a transaction if ``tx``)
    consuming them."""
    q, _ = vhost.declare_queue("q")
    publish(vhost, "q", count)
    if tx:
        channel.tx_select()
    consume(channel, q)
    return q


def test_a_consumer_gets_what_is_ready_with_consecutive_tags(
    vhost: VirtualHost, host: FakeHost, channel: Channel
) -> None:
    consuming(vhost, channel, 2)
    publish(vhost, "q", 1)
    assert delivered(host) == [
        ("c", 1, False, b"m0"),
        ("c", 2, False, b"m1"),
        ("c", 3, False, b"m0"),
    ]
    assert list(channel.unacked) == [1, 2, 3]


def test_consumer_prefetch_and_ack_release_the_next(
    vhost: VirtualHost, host: FakeHost, channel: Channel
) -> None:
    q, _ = vhost.declare_queue("q")
    publish(vhost, "q", 5)
    channel.consumer_prefetch = 2
    consume(channel, q)
    assert [t for _, t, _, _ in delivered(host)] == [1, 2]
    channel.settle(Settle.ACK, 2, True, False)
    assert [t for _, t, _, _ in delivered(host)] == [1, 2, 3, 4]
    assert q.message_count == 1


def test_a_socket_that_cannot_drain_holds_deliveries_back(
    vhost: VirtualHost, host: FakeHost, channel: Channel
) -> None:
    q, _ = vhost.declare_queue("q")
    host.writable = False
    consume(channel, q)
    publish(vhost, "q", 3)
    assert delivered(host) == []
    host.writable = True
    channel.kick()
    assert len(delivered(host)) == 3


def test_global_prefetch_spans_the_channel_queues(
    vhost: VirtualHost, host: FakeHost, channel: Channel
) -> None:
    a, _ = vhost.declare_queue("a")
    b, _ = vhost.declare_queue("b")
    channel.global_prefetch = 3
    consume(channel, a, "ca")
    consume(channel, b, "cb")
    publish(vhost, "a", 2)
    publish(vhost, "b", 2)
    assert [tag for tag, _, _, _ in delivered(host)] == ["ca", "ca", "cb"]
    channel.settle(Settle.ACK, 1, False, False)
    assert [tag for tag, _, _, _ in delivered(host)][-1] == "cb"


def test_settling_an_unknown_tag_is_a_precondition_failure(
    vhost: VirtualHost, channel: Channel
) -> None:
    with pytest.raises(AMQPError) as info:
        channel.settle(Settle.ACK, 5, False, False)
    assert (info.value.code, info.value.reply_text) == (
        406,
        "PRECONDITION_FAILED - unknown delivery tag 5",
    )


def test_nack_without_requeue_drops_and_with_requeue_redelivers(
    vhost: VirtualHost, host: FakeHost, channel: Channel
) -> None:
    q = consuming(vhost, channel, 2)
    channel.settle(Settle.NACK, 1, False, False)
    channel.settle(Settle.NACK, 2, False, True)
    assert delivered(host)[-1] == ("c", 3, True, b"m1")
    assert q.message_count == 0 and list(channel.unacked) == [3]


def test_close_requeues_cancels_and_deletes_auto_delete_queues(
    vhost: VirtualHost, channel: Channel
) -> None:
    q, _ = vhost.declare_queue("q")
    auto, _ = vhost.declare_queue("auto", auto_delete=True)
    publish(vhost, "q", 2)
    consume(channel, q)
    consume(channel, auto, "c2")
    channel.close()
    assert (q.message_count, q.consumers, channel.consumers) == (2, [], {})
    assert "auto" not in vhost.queues
    assert q.get(True).redelivered


def test_recover_redelivers_everything_outstanding(
    vhost: VirtualHost, host: FakeHost, channel: Channel
) -> None:
    consuming(vhost, channel, 2)
    channel.recover()
    assert delivered(host)[2:] == [("c", 3, True, b"m0"), ("c", 4, True, b"m1")]


@pytest.mark.parametrize("notify", [True, False])
def test_server_cancel_is_told_only_to_clients_that_asked(vhost: VirtualHost, notify: bool) -> None:
    host = FakeHost(vhost, capabilities=("consumer_cancel_notify",) if notify else ())
    channel = Channel(host, 3)
    q, _ = vhost.declare_queue("q")
    consume(channel, q, "watcher")
    vhost.remove_queue(q)
    assert channel.consumers == {}
    cancels = [m for m in host.output.methods(3) if isinstance(m, C.Basic.Cancel)]
    assert [c.consumer_tag for c in cancels] == (["watcher"] if notify else [])


def test_get_tracks_only_what_must_be_acked(
    vhost: VirtualHost, host: FakeHost, channel: Channel
) -> None:
    vhost.declare_queue("q")
    q = vhost.queues["q"]
    publish(vhost, "q", 2)
    assert channel.get(q, no_ack=True) and channel.get(q, no_ack=False)
    assert not channel.get(q, no_ack=False)
    assert list(channel.unacked) == [2]
    assert [type(r) for r in host.output.log] == [Content, Content, Sent]
    assert isinstance(host.output.log[-1].method, C.Basic.GetEmpty)


def test_confirms_are_gathered_then_flushed_as_one_ack(host: FakeHost, channel: Channel) -> None:
    channel.confirm_select()
    channel.publish_seq = 3
    for seq in (1, 2, 3):
        channel.confirmed_ok(seq)
    assert host.pending_confirms == {channel}
    channel.flush_confirms()
    assert host.output.log == [Ack(1, 3, True)]
    assert host.pending_confirms == set() and channel.unconfirmed == 0


def test_a_nack_flushes_the_acks_before_it(host: FakeHost, channel: Channel) -> None:
    channel.confirm_select()
    channel.publish_seq = 3
    channel.confirmed_ok(1)
    channel.confirmed_ok(2)
    channel.confirmed_fail(3)
    assert host.output.log[0] == Ack(1, 2, True)
    nack = host.output.log[1].method
    assert isinstance(nack, C.Basic.Nack) and nack.delivery_tag == 3
    assert channel.unconfirmed == 0


def test_a_closed_channel_sends_no_confirm(host: FakeHost, channel: Channel) -> None:
    channel.confirm_select()
    channel.publish_seq = 1
    channel.confirmed_ok(1)
    channel.close()
    channel.flush_confirms()
    assert host.output.log == [] and host.pending_confirms == set()


def test_tx_settles_leave_unacked_at_once_and_rollback_puts_them_back(
    vhost: VirtualHost, channel: Channel
) -> None:
    q = consuming(vhost, channel, 3, tx=True)
    channel.settle(Settle.ACK, 1, False, False)
    channel.settle(Settle.REJECT, 3, False, True)
    assert list(channel.unacked) == [2]
    assert (channel.tx_held, channel.acks_uncommitted) == (2, 1)
    with pytest.raises(AMQPError, match="unknown delivery tag 3"):
        channel.settle(Settle.ACK, 3, False, False)
    channel.tx_rollback()
    assert list(channel.unacked) == [1, 2, 3]
    assert (channel.tx_held, channel.acks_uncommitted) == (0, 0)
    channel.settle(Settle.ACK, 2, False, False)
    assert q.unacked == 3  # the queue hears of the ack at the commit
    assert channel.tx_commit(lambda publish: True)
    assert list(channel.unacked) == [1, 3] and q.unacked == 2
    assert channel.tx_held == 0


def test_tx_settles_hold_global_prefetch_until_commit(vhost: VirtualHost, channel: Channel) -> None:
    channel.global_prefetch = 1
    q = consuming(vhost, channel, 2, tx=True)
    channel.settle(Settle.ACK, 1, False, False)
    assert channel.unacked == {} and channel.credit() == 0 and not channel.can_deliver()
    assert q.message_count == 1
    channel.tx_commit(lambda publish: True)
    assert list(channel.unacked) == [2] and q.message_count == 0


def test_a_closed_channel_requeues_what_its_transaction_settled(
    vhost: VirtualHost, channel: Channel
) -> None:
    q = consuming(vhost, channel, 2, tx=True)
    channel.settle(Settle.ACK, 2, False, False)
    channel.close()
    assert (q.message_count, q.unacked) == (2, 0)


def test_tx_and_confirm_exclude_each_other(host: FakeHost) -> None:
    tx, confirm = Channel(host, 1), Channel(host, 2)
    tx.tx_select()
    confirm.confirm_select()
    with pytest.raises(AMQPError, match="cannot switch from tx to confirm mode"):
        tx.confirm_select()
    with pytest.raises(AMQPError, match="cannot switch from confirm to tx mode"):
        confirm.tx_select()
