"""A stateful model of one queue and one consumer with prefetch: whatever the order of
publishes, acks, nacks and rejects, no message is lost or duplicated, the prefetch bound
holds, and a consumer with credit never leaves a message waiting."""

from __future__ import annotations

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from leveret.broker.broker import BrokerCore
from leveret.broker.channel import Settle
from leveret.broker.session import Session
from leveret.protocol.errors import AMQPError
from tests.broker.fakes import Deliver, RecordingOutput
from tests.support.tiers import examples


class QueueModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.broker = BrokerCore.with_defaults()
        self.out = RecordingOutput()
        self.session = Session(self.broker, self.out)
        self.session.authenticate("PLAIN", b"\0guest\0guest", {})
        assert self.session.open_vhost("/") is None
        self.session.channel_opened(1)
        self.ch = self.session.channels[1]
        vhost = self.broker.vhosts["/"]
        self.queue, _ = vhost.declare_queue("q")
        self.prefetch = 3
        self.ch.consumer_prefetch = self.prefetch
        consumer = self.ch.consume(self.queue, "c", False, False, {})
        self.ch.start_consumer(consumer)
        self.published = 0
        self.gone: set[bytes] = set()  # acked or rejected without requeue
        self.requeued: set[bytes] = set()
        self.seen: dict[int, bytes] = {}

    def _publish(self, body: bytes) -> None:
        self.session.publish(1, "", "q", False, False, b"\x00\x01q", b"\x00\x00", body)

    @rule()
    def publish(self) -> None:
        self._publish(str(self.published).encode())
        self.published += 1

    @precondition(lambda self: bool(self.ch.unacked))
    @rule(
        data=st.data(),
        kind=st.sampled_from(list(Settle)),
        multiple=st.booleans(),
        requeue=st.booleans(),
    )
    def settle(self, data: st.DataObject, kind: Settle, multiple: bool, requeue: bool) -> None:
        tags = list(self.ch.unacked)
        tag = data.draw(st.sampled_from(tags))
        if kind is Settle.REJECT:
            multiple = False
        hit = [t for t in tags if t <= tag] if multiple else [tag]
        bodies = {self.ch.unacked[t].entry.message.body for t in hit}
        self.ch.settle(kind, tag, multiple, requeue)
        if kind is Settle.ACK or not requeue:
            self.gone |= bodies
        else:
            self.requeued |= bodies

    @rule(tag=st.integers(min_value=1000, max_value=2000))
    def unknown_tag(self, tag: int) -> None:
        try:
            self.ch.settle(Settle.ACK, tag, False, False)
        except AMQPError as exc:
            assert exc.code == 406 and exc.text == f"unknown delivery tag {tag}"
        else:
            raise AssertionError("an unknown tag was accepted")

    @invariant()
    def conserved(self) -> None:
        ready = [e.message.body for e in self.queue.ready]
        unacked = [d.entry.message.body for d in self.ch.unacked.values()]
        everything = ready + unacked + sorted(self.gone)
        assert len(everything) == self.published
        assert {int(b) for b in everything} == set(range(self.published))

    @invariant()
    def prefetch_bound(self) -> None:
        assert len(self.ch.unacked) <= self.prefetch

    @invariant()
    def no_idle_credit(self) -> None:
        if len(self.ch.unacked) < self.prefetch:
            assert not self.queue.ready

    @invariant()
    def redelivered_flag(self) -> None:
        for d in self.out.of(Deliver):
            tag, redelivered, body = d.delivery_tag, d.redelivered, d.body
            if tag not in self.seen:
                self.seen[tag] = body
                assert redelivered == (body in self.requeued)


TestQueueModel = QueueModel.TestCase
TestQueueModel.settings = settings(
    max_examples=examples(150), stateful_step_count=40, deadline=None
)
