"""The stream protocol's session over a real broker and store, driven by random command
sequences: it never raises, and every subscription is handed each record once, in order,
as whole chunks with contiguous offsets, never more chunks than its credit."""

from __future__ import annotations

import os
import shutil
import struct
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from leveret.broker.broker import BrokerCore
from leveret.broker.events import Observers
from leveret.broker.ports import ChunkRef
from leveret.broker.stream_session import StreamSession
from leveret.protocol.stream import chunk
from leveret.protocol.stream import events as ev
from leveret.store.setup import Persistence
from tests.broker.fakes import stream_endpoint
from tests.support.tiers import examples


class Output:
    def __init__(self) -> None:
        self.frames: list[bytes] = []
        self.chunks: list[tuple[int, bytes]] = []
        self.open = True

    def send(self, data: bytes) -> None:
        self.frames.append(data)

    def send_chunk(self, subscription_id: int, ref: ChunkRef) -> None:
        # the stored bytes, as the server sends them
        self.chunks.append((subscription_id, os.pread(ref.fd, ref.size, ref.position)))

    def writable(self) -> bool:
        return self.open


_names = st.sampled_from(["a", "b"])
_ids = st.integers(0, 2)
commands = st.one_of(
    st.builds(ev.Create, st.just(1), _names, st.just({})),
    st.builds(ev.Delete, st.just(1), _names),
    st.builds(ev.DeclarePublisher, st.just(1), _ids, st.sampled_from(["", "w"]), _names),
    st.builds(ev.DeletePublisher, st.just(1), _ids),
    *[
        st.builds(
            ev.Publish,
            _ids,
            st.lists(
                st.tuples(st.integers(0, 6), st.binary(min_size=1, max_size=8)),
                min_size=1,
                max_size=4,
            ),
            st.just([]),
        )
    ]
    * 3,
    st.builds(
        ev.Subscribe,
        st.just(1),
        _ids,
        _names,
        st.sampled_from([1, 2, 3, 4, 5]),
        st.integers(0, 5),
        st.integers(0, 3),
        st.just({}),
    ),
    st.builds(
        ev.Subscribe, st.just(1), _ids, _names, st.just(1), st.just(0), st.just(2), st.just({})
    ),
    st.builds(ev.Credit, _ids, st.integers(0, 3)),
    st.builds(ev.Unsubscribe, st.just(1), _ids),
    st.builds(ev.StoreOffset, st.just("r"), _names, st.integers(0, 10)),
    st.builds(ev.QueryOffset, st.just(1), st.just("r"), _names),
    st.builds(ev.QueryPublisherSequence, st.just(1), st.just("w"), _names),
    st.builds(ev.Metadata, st.just(1), st.lists(_names, max_size=2).map(tuple)),
    st.just("sync"),
    st.just("sync"),
    st.just("stall"),
    st.just("drain"),
)


@settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(commands, max_size=40))
def test_random_commands(script: list[object]) -> None:
    root = Path(tempfile.mkdtemp(prefix="leveret-session-"))
    try:
        observers = Observers()
        persistence = Persistence(root)
        observers.subscribe(persistence.observe)
        broker = BrokerCore(observers=observers, storage=persistence)
        broker.add_vhost("/")
        broker.add_user("guest", "guest", ["administrator"])
        broker.set_permissions("guest", "/", ".*", ".*", ".*")
        out = Output()
        session = StreamSession(broker, stream_endpoint(out), ("127.0.0.1", 1), ("h", 5552))
        assert session.authenticate("PLAIN", b"\0guest\0guest") == 1
        assert session.open("/") == 1
        granted: dict[int, int] = {}  # credit given to each live subscription
        sent: dict[int, int] = {}  # chunks it was sent
        ends: dict[int, int | None] = {}  # one past the last offset it was sent
        delivered = 0
        setup: list[object] = [
            ev.Create(1, "a", {}),
            ev.Create(1, "b", {}),
            ev.DeclarePublisher(1, 0, "w", "a"),
            ev.DeclarePublisher(1, 1, "", "b"),
        ]
        for step in setup + script:
            before = dict(session.subscriptions)
            if step == "sync":
                persistence.sync()
                session.flush_confirms()
            elif step == "stall":
                out.open = False
            elif step == "drain":
                out.open = True
                session.feed_all()
            elif isinstance(step, ev.Publish):
                session.publish(step)
            else:
                if isinstance(step, ev.Credit) and step.subscription_id in before:
                    granted[step.subscription_id] += step.credit
                if isinstance(step, ev.Subscribe) and step.subscription_id not in before:
                    granted[step.subscription_id] = step.credit
                    sent[step.subscription_id] = 0
                    ends[step.subscription_id] = None
                session.handle(step)  # type: ignore[arg-type]
            for _sub_id, raw in out.chunks[delivered:]:
                head = chunk.parse_header(raw)
                assert len(chunk.records(raw)) == head.records == head.entries > 0
                end = ends[_sub_id]
                live = session.subscriptions.get(_sub_id)
                if end is not None and end != head.first_offset and live is not None:
                    # only tracking chunks (stored offsets) may lie between two deliveries
                    nxt = live.queue.log.chunk_at(end)
                    assert head.first_offset > end and nxt is not None, "a repeat"
                    assert nxt.first == head.first_offset, "a gap"
                ends[_sub_id] = head.first_offset + head.records
                sent[_sub_id] += 1
                assert sent[_sub_id] <= granted[_sub_id], "more chunks than credit"
            delivered = len(out.chunks)
            for sub_id, sub in session.subscriptions.items():
                assert sub.credit == granted[sub_id] - sent[sub_id]
        assert all(isinstance(f, bytes) and struct.unpack_from(">I", f)[0] == len(f) - 4
                   for f in out.frames)  # fmt: skip
        session.close()
        persistence.close()
    finally:
        shutil.rmtree(root, ignore_errors=True)
