"""Dead-lettering, the same on both brokers: the x-death history (one entry per queue and
reason, with count, reason, queue, time, exchange, routing-keys and original-expiration),
the x-first-death headers, every reason, reject-publish-dlx, and cycle detection. Headers
are compared in wire order: RabbitMQ sorts the table whenever it dead-letters."""

from __future__ import annotations

from typing import Any

import pika
import pytest

from tests.differential.helpers import connect, death_times_checked, settle
from tests.support.brokers import BrokerUnderTest


def get(ch: Any, queue: str, ack: str = "ack") -> tuple[Any, ...] | None:
    """One message: (exchange, routing key, body, headers in wire order with x-death times
    checked, expiration); then acked, rejected or nacked as asked."""
    m, p, b = ch.basic_get(queue)
    if m is None:
        return None
    if ack == "ack":
        ch.basic_ack(m.delivery_tag)
    elif ack == "reject":
        ch.basic_reject(m.delivery_tag, requeue=False)
    else:
        ch.basic_nack(m.delivery_tag, requeue=False)
    headers = death_times_checked(p.headers or {})
    return m.exchange, m.routing_key, b, list(headers.items()), p.expiration


def wait_get(conn: Any, ch: Any, queue: str, ack: str = "ack") -> tuple[Any, ...]:
    for _ in range(40):
        got = get(ch, queue, ack)
        if got is not None:
            return got
        settle(conn, 0.05)
    raise AssertionError(f"nothing arrived in {queue}")


def test_x_death_history_across_queues(broker: BrokerUnderTest, name: str) -> None:
    a, b = f"{name}-a", f"{name}-b"
    with connect(broker) as conn:
        ch = conn.channel()
        ch.exchange_declare(f"{name}-dlx", "fanout", auto_delete=True)
        ch.queue_declare(a, exclusive=True, arguments={"x-dead-letter-exchange": f"{name}-dlx"})
        ch.queue_declare(
            b,
            exclusive=True,
            arguments={"x-dead-letter-exchange": "", "x-dead-letter-routing-key": a},
        )
        ch.queue_bind(b, f"{name}-dlx")
        ch.basic_publish(
            "",
            a,
            b"m",
            pika.BasicProperties(
                headers={"z": 1, "a": "s", "CC": ["nowhere"]}, expiration="60000", priority=3
            ),
        )
        get(ch, a, "reject")
        first = [
            ("count", 1),
            ("reason", "rejected"),
            ("queue", a),
            ("time", "<now>"),
            ("exchange", ""),
            ("routing-keys", [a, "nowhere"]),
            ("original-expiration", "60000"),
        ]
        # the first death: headers sorted, x-first-death-*, expiration gone
        assert wait_get(conn, ch, b, "nack") == (
            f"{name}-dlx",
            a,
            b"m",
            [
                ("CC", ["nowhere"]),
                ("a", "s"),
                ("x-death", [dict(first)]),
                ("x-first-death-exchange", ""),
                ("x-first-death-queue", a),
                ("x-first-death-reason", "rejected"),
                ("z", 1),
            ],
            None,
        )
        second = {
            "count": 1,
            "exchange": f"{name}-dlx",
            "queue": b,
            "reason": "rejected",
            "routing-keys": [a, "nowhere"],
            "time": "<now>",
        }
        # a dead-letter routing key replaces the keys and removes CC; a new entry goes first
        got = wait_get(conn, ch, a, "reject")
        assert got[:3] == ("", a, b"m")
        assert got[3] == [
            ("a", "s"),
            ("x-death", [second, dict(first)]),
            ("x-first-death-exchange", ""),
            ("x-first-death-queue", a),
            ("x-first-death-reason", "rejected"),
            ("z", 1),
        ]
        assert [list(d) for d in got[3][1][1]] == [list(second), [k for k, _ in first]]
        # the same queue and reason again: its count goes up (its time stays), it moves first
        got = wait_get(conn, ch, b)
        deaths = dict(got[3])["x-death"]
        assert deaths == [{**dict(first), "count": 2}, second]
        assert list(deaths[0]) == sorted(deaths[0])  # an updated entry is sorted


def test_more_than_two_entries_come_back_reversed(broker: BrokerUnderTest, name: str) -> None:
    """rabbit_dead_letter groups the existing entries by (queue, reason) and, with more
    than one, gives them back in reverse order behind the new one."""
    qs = [f"{name}-{i}" for i in range(4)]
    with connect(broker) as conn:
        ch = conn.channel()
        for here, there in zip(qs, qs[1:] + qs[:1], strict=True):
            ch.queue_declare(
                here,
                exclusive=True,
                arguments={"x-dead-letter-exchange": "", "x-dead-letter-routing-key": there},
            )
        ch.basic_publish("", qs[0], b"m")
        for q in qs[:3]:
            wait_get(conn, ch, q, "reject")
        got = wait_get(conn, ch, qs[3])
        assert [d["queue"] for d in dict(got[3])["x-death"]] == [qs[2], qs[0], qs[1]]


def test_reasons(broker: BrokerUnderTest, name: str) -> None:
    sink = f"{name}-sink"
    dl = {"x-dead-letter-exchange": "", "x-dead-letter-routing-key": sink}
    with connect(broker) as conn:
        ch = conn.channel()
        ch.queue_declare(sink, exclusive=True)
        # maxlen: the head is dropped
        ch.queue_declare(f"{name}-len", exclusive=True, arguments={**dl, "x-max-length": 1})
        ch.basic_publish("", f"{name}-len", b"old")
        ch.basic_publish("", f"{name}-len", b"new")
        # expired: the queue's TTL, and a message's own (original-expiration kept)
        ch.queue_declare(f"{name}-ttl", exclusive=True, arguments={**dl, "x-message-ttl": 20})
        ch.basic_publish("", f"{name}-ttl", b"queue ttl")
        ch.queue_declare(f"{name}-exp", exclusive=True, arguments=dl)
        ch.basic_publish("", f"{name}-exp", b"own ttl", pika.BasicProperties(expiration="20"))
        settle(conn, 0.3)
        assert get(ch, f"{name}-exp") is None  # expiry at the head, on the way out
        # rejected, by basic.nack too
        ch.queue_declare(f"{name}-rej", exclusive=True, arguments=dl)
        ch.basic_publish("", f"{name}-rej", b"nacked")
        get(ch, f"{name}-rej", "nack")
        settle(conn, 0.2)
        seen = []
        while (got := get(ch, sink)) is not None:
            d = dict(got[3])["x-death"][0]
            seen.append(
                (
                    got[2],
                    d["reason"],
                    d["queue"],
                    d.get("original-expiration"),
                    dict(got[3])["x-first-death-reason"],
                )
            )
        assert sorted(seen) == sorted(
            [
                (b"old", "maxlen", f"{name}-len", None, "maxlen"),
                (b"queue ttl", "expired", f"{name}-ttl", None, "expired"),
                (b"own ttl", "expired", f"{name}-exp", "20", "expired"),
                (b"nacked", "rejected", f"{name}-rej", None, "rejected"),
            ]
        )


def test_reject_publish_dlx(broker: BrokerUnderTest, name: str) -> None:
    """x-overflow reject-publish-dlx: the refused message is nacked to its publisher and
    dead-lettered (reason maxlen); reject-publish only nacks."""
    sink = f"{name}-sink"
    with connect(broker) as conn:
        ch = conn.channel()
        ch.queue_declare(sink, exclusive=True)
        for overflow in ("reject-publish-dlx", "reject-publish"):
            ch.queue_declare(
                f"{name}-{overflow}",
                exclusive=True,
                arguments={
                    "x-max-length": 1,
                    "x-overflow": overflow,
                    "x-dead-letter-exchange": "",
                    "x-dead-letter-routing-key": sink,
                },
            )
        ch.confirm_delivery()
        for overflow in ("reject-publish-dlx", "reject-publish"):
            ch.basic_publish("", f"{name}-{overflow}", b"kept")
            with pytest.raises(pika.exceptions.NackError):
                ch.basic_publish("", f"{name}-{overflow}", overflow.encode())
        got = wait_get(conn, ch, sink)
        assert got[2] == b"reject-publish-dlx"
        assert dict(got[3])["x-death"] == [
            {
                "count": 1,
                "reason": "maxlen",
                "queue": f"{name}-reject-publish-dlx",
                "time": "<now>",
                "exchange": "",
                "routing-keys": [f"{name}-reject-publish-dlx"],
            }
        ]
        assert get(ch, sink) is None
        for overflow in ("reject-publish-dlx", "reject-publish"):
            assert get(ch, f"{name}-{overflow}")[2] == b"kept"  # type: ignore[index]


def test_cycles(broker: BrokerUnderTest, name: str) -> None:
    """A message that would die again in a queue it died in, with no rejection on the
    way, is dropped; a rejection makes the cycle a client's, and it goes on."""
    q1, q2, q3, q4, q5 = (f"{name}-{i}" for i in range(1, 6))

    def dl(to: str, **more: Any) -> dict[str, Any]:
        return {"x-dead-letter-exchange": "", "x-dead-letter-routing-key": to, **more}

    with connect(broker) as conn:
        ch = conn.channel()
        # expiry both ways: dropped when it comes back to q1
        ch.queue_declare(q1, exclusive=True, arguments=dl(q2, **{"x-message-ttl": 30}))
        ch.queue_declare(q2, exclusive=True, arguments=dl(q1, **{"x-message-ttl": 30}))
        ch.basic_publish("", q1, b"cycling")
        # a queue rejecting into itself: allowed, the count goes up
        ch.queue_declare(q3, exclusive=True, arguments=dl(q3))
        ch.basic_publish("", q3, b"self")
        wait_get(conn, ch, q3, "reject")
        wait_get(conn, ch, q3, "nack")
        # expired, rejected, expired again: not fully automatic, so it goes on
        ch.queue_declare(q4, exclusive=True, arguments=dl(q5, **{"x-message-ttl": 30}))
        ch.queue_declare(q5, exclusive=True, arguments=dl(q4))
        ch.basic_publish("", q4, b"mixed")
        wait_get(conn, ch, q5, "reject")
        settle(conn, 0.5)
        assert ch.queue_declare(q1, passive=True).method.message_count == 0
        assert ch.queue_declare(q2, passive=True).method.message_count == 0
        got = wait_get(conn, ch, q3)
        assert dict(got[3])["x-death"] == [
            {
                "count": 2,
                "exchange": "",
                "queue": q3,
                "reason": "rejected",
                "routing-keys": [q3],
                "time": "<now>",
            }
        ]
        got = wait_get(conn, ch, q5)
        assert [(d["queue"], d["reason"], d["count"]) for d in dict(got[3])["x-death"]] == [
            (q4, "expired", 2),
            (q5, "rejected", 1),
        ]


def test_x_death_of_another_type_is_reset(broker: BrokerUnderTest, name: str) -> None:
    sink = f"{name}-sink"
    with connect(broker) as conn:
        ch = conn.channel()
        ch.queue_declare(sink, exclusive=True)
        ch.queue_declare(
            name,
            exclusive=True,
            arguments={"x-dead-letter-exchange": "", "x-dead-letter-routing-key": sink},
        )
        ch.basic_publish(
            "",
            name,
            b"m",
            pika.BasicProperties(headers={"x-death": "junk", "x-first-death-queue": "kept"}),
        )
        get(ch, name, "reject")
        got = wait_get(conn, ch, sink)
        assert got[3] == [
            (
                "x-death",
                [
                    {
                        "count": 1,
                        "reason": "rejected",
                        "queue": name,
                        "time": "<now>",
                        "exchange": "",
                        "routing-keys": [name],
                    }
                ],
            ),
            ("x-first-death-queue", "kept"),
        ]
