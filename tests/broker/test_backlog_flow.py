"""Credit flow on a queue's backlog (leveret.broker.queues.backlog), and basic.ack's hot
path (Session.ack, dispatched once a run of acks is over), through a Session."""

from __future__ import annotations

from pamqp import commands as C

from leveret.broker.broker import BrokerCore
from leveret.broker.queues.backlog import HOLD_AT, RELEASE_AT
from tests.broker.fakes import Client, ClientChannel, Closed


def fill(ch: ClientChannel, queue: str, n: int, start: int = 0) -> None:
    for i in range(start, start + n):
        ch.publish("", queue, f"m{i}".encode())


def backlogged(
    domain: BrokerCore, queue: str = "q", prefetch: int = 10
) -> tuple[Client, ClientChannel, Client]:
    """A consumer (prefetch 10, acking) on ``queue``, and a publisher whose publishes
    have just taken its backlog past HOLD_AT."""
    consumer, publisher = Client(domain), Client(domain)
    cch = consumer.channel()
    cch.declare_queue(queue)
    cch.qos(prefetch)
    cch.consume(queue, tag="c")
    pch = publisher.channel()
    fill(pch, queue, prefetch + HOLD_AT)
    assert publisher.session.held_by == set()  # HOLD_AT wait: not past it yet
    fill(pch, queue, 1, start=prefetch + HOLD_AT)
    return consumer, cch, publisher


def queue_flow(domain: BrokerCore, name: str = "q") -> object:
    return domain.vhosts["/"].queues[name].flow


def test_a_backlog_its_consumers_drain_holds_its_publisher_until_it_is_down(
    domain: BrokerCore,
) -> None:
    """Past HOLD_AT ready messages, with the consumers' deliveries out, a publish holds its
    publisher (its socket is not read); acks that bring the backlog down to RELEASE_AT let
    it go. Nothing the clients see changes: every message is delivered, in order."""
    _, cch, publisher = backlogged(domain)
    assert publisher.session.held_by == {queue_flow(domain)}
    queue = domain.vhosts["/"].queues["q"]
    assert queue.message_count == HOLD_AT + 1
    tag = 0
    while queue.message_count > RELEASE_AT + 10:
        tag += 10
        cch.ack(tag, multiple=True)
        assert publisher.session.held_by == {queue_flow(domain)}
    tag += 10
    cch.ack(tag, multiple=True)
    assert queue.message_count <= RELEASE_AT
    assert publisher.session.held_by == set()
    got = [d.body for d in cch.deliveries()]
    assert got == [f"m{i}".encode() for i in range(len(got))]


def test_no_hold_without_deliveries_out_or_without_consumers(domain: BrokerCore) -> None:
    """A queue with no consumer, or whose consumers hold nothing to ack (no-ack), holds
    no one: nothing would drain it (RabbitMQ lets such a queue grow)."""
    publisher = Client(domain)
    pch = publisher.channel()
    pch.declare_queue("q")
    fill(pch, "q", 2 * HOLD_AT)
    assert publisher.session.held_by == set()


def test_a_publisher_that_consumes_from_the_queue_is_not_held(domain: BrokerCore) -> None:
    """Its acks are what the backlog waits for: holding it would wait for itself."""
    client = Client(domain)
    ch = client.channel()
    ch.declare_queue("q")
    ch.qos(10)
    ch.consume("q", tag="c")
    fill(ch, "q", 2 * HOLD_AT)
    assert client.session.held_by == set()


def test_a_publisher_whose_consumers_have_deliveries_out_is_not_held(
    domain: BrokerCore,
) -> None:
    """Its acks come in on the socket a hold stops reading, and another queue waits for
    them: two connections each publishing to the queue the other consumes would hold
    each other. Once it has nothing out, it is held as any publisher."""
    consumer, publisher = Client(domain), Client(domain)
    cch = consumer.channel()
    cch.declare_queue("q")
    cch.qos(10)
    cch.consume("q", tag="c")
    pch = publisher.channel()
    pch.declare_queue("replies")
    pch.qos(5)
    pch.consume("replies", tag="r")
    cch.publish("", "replies", b"reply")  # the publisher's consumer now has one out
    fill(pch, "q", 2 * HOLD_AT)
    assert publisher.session.held_by == set()
    pch.ack(1)
    fill(pch, "q", 1, start=2 * HOLD_AT)
    assert publisher.session.held_by == {queue_flow(domain)}


def test_a_backlog_that_does_not_drain_gives_up_and_holds_no_one_until_it_is_down(
    domain: BrokerCore,
) -> None:
    """The edge gives a hold up after its patience (the consumers stopped acking): the
    publisher goes on, and the queue holds no one until its backlog is down again."""
    _, cch, publisher = backlogged(domain)
    publisher.session.give_up_holds()
    assert publisher.session.held_by == set()
    pch = publisher.channel()
    fill(pch, "q", HOLD_AT, start=10 + HOLD_AT + 1)
    assert publisher.session.held_by == set()
    queue = domain.vhosts["/"].queues["q"]
    tag = 0
    while queue.message_count > RELEASE_AT:
        tag += 10
        cch.ack(tag, multiple=True)
    fill(pch, "q", HOLD_AT + 1, start=10 + 2 * HOLD_AT + 1)  # drained: holds start again
    assert publisher.session.held_by == {queue_flow(domain)}


def test_cancel_purge_and_delete_let_the_publisher_go(domain: BrokerCore) -> None:
    _, cch, publisher = backlogged(domain)
    cch.call(C.Basic.Cancel(consumer_tag="c"))
    assert publisher.session.held_by == set()

    _, cch, publisher = backlogged(domain, "q2")
    cch.call(C.Queue.Purge(queue="q2"))
    assert publisher.session.held_by == set()

    _, cch, publisher = backlogged(domain, "q3")
    cch.call(C.Queue.Delete(queue="q3"))
    assert publisher.session.held_by == set()


def test_a_closing_publisher_leaves_the_queue_it_waited_on(domain: BrokerCore) -> None:
    _, _, publisher = backlogged(domain)
    flow = domain.vhosts["/"].queues["q"].flow
    publisher.close()
    assert publisher.session not in flow.holding


# ---------------------------------------------------------------- basic.ack
def test_a_run_of_acks_dispatches_once_it_is_over(domain: BrokerCore) -> None:
    """Session.ack settles at once; the queues it gave credit back to push what waits
    when the run is over (dispatch_settled), as one push instead of one per ack."""
    consumer, publisher = Client(domain), Client(domain)
    cch = consumer.channel()
    cch.declare_queue("q")
    cch.qos(5)
    cch.consume("q", tag="c")
    fill(publisher.channel(), "q", 20)
    session = consumer.session
    assert [d.delivery_tag for d in cch.deliveries()] == [1, 2, 3, 4, 5]
    for tag in (1, 2, 3):
        session.ack(cch.number, C.Basic.Ack(delivery_tag=tag))
    assert len(cch.deliveries()) == 5  # nothing pushed yet
    assert domain.vhosts["/"].queues["q"].unacked == 2  # but settled
    session.dispatch_settled()
    got = cch.deliveries()
    assert [d.delivery_tag for d in got] == [1, 2, 3, 4, 5, 6, 7, 8]
    assert [d.body for d in got] == [f"m{i}".encode() for i in range(8)]


def test_an_unknown_tag_on_the_hot_path_closes_the_channel_as_handle_does(
    domain: BrokerCore,
) -> None:
    client = Client(domain)
    ch = client.channel()
    ch.declare_queue("q")
    ch.consume("q", tag="c")
    fill(ch, "q", 2)
    session = client.session
    session.ack(ch.number, C.Basic.Ack(delivery_tag=1))
    session.ack(ch.number, C.Basic.Ack(delivery_tag=7))
    closes = [r for r in client.out.log if isinstance(r, Closed) and r.channel == 1]
    assert [c.reply for c in closes] == [(406, "PRECONDITION_FAILED - unknown delivery tag 7")]
    assert (closes[0].class_id, closes[0].method_id) == (60, 80)
    # the message acked before the bad tag stays acked; the other went back
    assert domain.vhosts["/"].queues["q"].message_count == 1
