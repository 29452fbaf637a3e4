"""The rolling sample window behind message rates."""

from __future__ import annotations

from itertools import pairwise

from leveret.management.stats import Window


def test_rate_over_the_last_seconds() -> None:
    w = Window(keep=100)
    assert w.rate() == 0.0
    for t in range(10):
        w.add(1000.0 + t, 10.0 * t)  # 10 a second
    assert w.rate() == 10.0
    w.add(1010.0, 90.0)  # stalled for a second: the rate over the last 5 s drops
    assert 0 < w.rate() < 10.0


def test_rate_of_a_gauge_can_be_negative() -> None:
    w = Window(keep=10)
    w.add(1.0, 100.0)
    w.add(2.0, 50.0)
    assert w.rate() == -50.0


def test_samples_newest_first_at_the_asked_increment() -> None:
    w = Window(keep=1000)
    for t in range(120):
        w.add(float(t), float(t))
    d = w.details(age=60, incr=10)
    stamps = [s["timestamp"] for s in d["samples"]]
    assert stamps == sorted(stamps, reverse=True)
    assert stamps[0] == 119_000 and all(a - b == 10_000 for a, b in pairwise(stamps))
    assert d["avg_rate"] == 1.0
    assert w.details() == {"rate": 1.0}


def test_window_keeps_a_bounded_number_of_samples() -> None:
    w = Window(keep=5)
    for t in range(50):
        w.add(float(t), 0.0)
    assert len(w.samples) == 5


def test_sampled_totals_match_live_totals() -> None:
    """The one-pass sampler and the live totals agree, deleted queues included."""
    from leveret.broker.broker import BrokerCore
    from leveret.broker.message import Message
    from leveret.management.stats import LENGTHS, MESSAGE_STATS, Stats

    broker = BrokerCore.with_defaults()
    stats = Stats(broker)
    other = broker.add_vhost("other")
    for vhost in (broker.vhosts["/"], other):
        q, _ = vhost.declare_queue("q1")
        gone, _ = vhost.declare_queue("gone")
        for _ in range(3):
            q.enqueue(Message.build("", "q1", b"m"))
        entry = q.get(no_ack=False)  # counted as delivered by the queue
        assert entry is not None
        gone.delivered += 2
        vhost.remove_queue(gone)
    stats.sample(now=1.0)
    for key in (*MESSAGE_STATS, *LENGTHS):
        want = stats.totals().get(key, stats.lengths().get(key))
        assert stats.overview.windows[key].samples[-1][1] == want, key
        assert stats.vhosts["other"].windows[key].samples[-1][1] == stats.totals("other").get(
            key, stats.lengths("other").get(key)
        ), key
    assert stats.totals()["deliver_get"] == 6
    broker.delete_vhost("other")
    stats.sample(now=2.0)
    assert stats.overview.windows["deliver_get"].samples[-1][1] == stats.totals()["deliver_get"]
    assert "other" not in stats.vhosts


def test_deleting_a_queue_does_not_count_its_publishes_twice() -> None:
    """Publishes are counted where they arrive (sessions); a deleted queue's own count of
    what reached it must not be added to them."""
    from leveret.broker.broker import BrokerCore
    from leveret.broker.message import Message
    from leveret.broker.session import Session
    from leveret.management.stats import Stats
    from tests.broker.fakes import RecordingOutput

    broker = BrokerCore.with_defaults()
    stats = Stats(broker)
    vhost = broker.vhosts["/"]
    session = Session(broker, RecordingOutput())
    assert session.authenticate("PLAIN", b"\0guest\0guest", {}) is None
    assert session.open_vhost("/") is None
    session.recv_publish = 5
    q, _ = vhost.declare_queue("q")
    for _ in range(5):
        q.enqueue(Message.build("", "q", b"m"))
    stats.sample(now=1.0)
    vhost.remove_queue(q)
    stats.sample(now=2.0)
    assert stats.totals()["publish"] == 5
    assert [v for _, v in stats.overview.windows["publish"].samples] == [5, 5]
    assert [v for _, v in stats.vhosts["/"].windows["publish"].samples] == [5, 5]


def test_a_new_queue_rates_over_the_same_span_as_its_vhost() -> None:
    from leveret.broker.broker import BrokerCore
    from leveret.broker.message import Message
    from leveret.management.stats import Stats

    broker = BrokerCore.with_defaults()
    stats = Stats(broker)
    stats.sample(now=1.0)
    stats.sample(now=2.0)
    q, _ = broker.vhosts["/"].declare_queue("fresh")
    for _ in range(10):
        q.enqueue(Message.build("", "fresh", b"m"))
    stats.sample(now=3.0)
    # it had nothing at 2.0: 10 messages in one second, not "no rate yet"
    assert stats.queues[q].windows["publish"].rate() == 10.0
    assert stats.queues[q].windows["messages"].rate() == 10.0
