"""Operating Leveret as RabbitMQ 3.10.8 through the management API: policies and operator
policies, vhost and user limits, topic permissions. Every request runs on both brokers,
each in a vhost and with a user of the test's own, and the answers (status and JSON) are
compared; what the settings do to queues, exchanges, connections and publishes is
compared through real clients (pika)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from typing import Any

import pika
import pytest
from pika.exceptions import (
    ChannelClosedByBroker,
    ConnectionClosedByBroker,
    ProbableAccessDeniedError,
)

from tests.support.mgmt import Site, q
from tests.support.waiting import STATS_WAIT, wait_for

pytestmark = pytest.mark.rabbitmq


@pytest.fixture
def sites(leveret_site: Site, rabbitmq_site: Site) -> Iterator[tuple[Site, Site]]:
    yield leveret_site, rabbitmq_site


def norm(site: Site, value: Any) -> Any:
    text = json.dumps(value, sort_keys=True)
    return json.loads(text.replace(site.vhost, "VHOST").replace(site.user, "USER"))


def calls(site: Site, steps: list[tuple[str, str, Any]], as_user: bool = False) -> list[Any]:
    api = site.api.as_user(site.user, site.password) if as_user else site.api
    out = []
    for method, path, body in steps:
        status, data = api.call(method, path.format(v=q(site.vhost), u=q(site.user)), body)
        out.append((method, path, status, norm(site, data)))
    return out


def same_answers(
    sites: tuple[Site, Site], steps: list[tuple[str, str, Any]], as_user: bool = False
) -> None:
    ours, theirs = (calls(site, steps, as_user) for site in sites)
    for mine, reference in zip(ours, theirs, strict=True):
        assert _any_order(mine) == _any_order(reference)


def _any_order(answer: Any) -> Any:
    """An answer with its lists of objects sorted: RabbitMQ lists what a mnesia set table
    holds (topic permissions, for one) in no fixed order."""
    if isinstance(answer, tuple):
        return tuple(_any_order(a) for a in answer)
    if isinstance(answer, list) and all(isinstance(a, dict) for a in answer):
        return sorted(answer, key=lambda a: json.dumps(a, sort_keys=True, default=str))
    return answer


def connect(
    site: Site, user: str | None = None, password: str | None = None
) -> pika.BlockingConnection:
    b = site.broker
    credentials = pika.PlainCredentials(user or "guest", password or "guest")
    return pika.BlockingConnection(
        pika.ConnectionParameters(b.host, b.port, virtual_host=site.vhost, credentials=credentials)
    )


def on_both(sites: tuple[Site, Site], scenario: Callable[[Site], Any]) -> None:
    ours, theirs = (norm(site, scenario(site)) for site in sites)
    assert ours == theirs


# ---------------------------------------------------------------------- policies
POLICY_API = [
    ("GET", "/api/policies/{v}", None),
    ("PUT", "/api/policies/{v}/p1", {"pattern": "^a", "definition": {"max-length": 5}}),
    (
        "PUT",
        "/api/policies/{v}/p1",
        {"pattern": "^a", "definition": {"max-length": 5}, "priority": 3, "apply-to": "queues"},
    ),
    (
        "PUT",
        "/api/policies/{v}/p2",
        {
            "pattern": "^b",
            "definition": {"message-ttl": 100, "dead-letter-exchange": "dlx"},
            "priority": 1,
        },
    ),
    (
        "PUT",
        "/api/policies/{v}/p3",
        {"pattern": "^c", "definition": {"max-length": 1}, "priority": 1.5},
    ),
    ("GET", "/api/policies/{v}/p1", None),
    ("GET", "/api/policies/{v}", None),
    ("GET", "/api/policies/{v}?sort=name", None),
    ("GET", "/api/policies/{v}/nope", None),
    ("DELETE", "/api/policies/{v}/nope", None),
    ("PUT", "/api/policies/{v}/bad", {"pattern": "^a", "definition": {"max-length": -1}}),
    ("PUT", "/api/policies/{v}/bad", {"pattern": "^a", "definition": {"max-length": "x"}}),
    ("PUT", "/api/policies/{v}/bad", {"pattern": "^a", "definition": {"foo": 1}}),
    (
        "PUT",
        "/api/policies/{v}/bad",
        {"pattern": "^a", "definition": {"foo": 1, "max-length": "x"}},
    ),
    ("PUT", "/api/policies/{v}/bad", {"pattern": "^a", "definition": {}}),
    ("PUT", "/api/policies/{v}/bad", {"pattern": "[", "definition": {"max-length": 1}}),
    ("PUT", "/api/policies/{v}/bad", {"pattern": "*a", "definition": {"max-length": 1}}),
    (
        "PUT",
        "/api/policies/{v}/bad",
        {"pattern": "^a", "definition": {"max-length": 1}, "apply-to": "bogus"},
    ),
    (
        "PUT",
        "/api/policies/{v}/bad",
        {"pattern": "^a", "definition": {"max-length": 1}, "priority": "x"},
    ),
    ("PUT", "/api/policies/{v}/bad", {"definition": {"max-length": 1}}),
    ("PUT", "/api/policies/{v}/bad", {"pattern": "^a"}),
    ("PUT", "/api/policies/{v}/bad", {"pattern": 1, "definition": {"max-length": 1}}),
    ("PUT", "/api/policies/{v}/bad", b"notjson"),
    ("PUT", "/api/policies/{v}/bad", {"pattern": "^a", "definition": {"message-ttl": 1.5}}),
    ("PUT", "/api/policies/{v}/bad", {"pattern": "^a", "definition": {"expires": 0}}),
    ("PUT", "/api/policies/{v}/bad", {"pattern": "^a", "definition": {"queue-mode": "x"}}),
    ("PUT", "/api/policies/{v}/bad", {"pattern": "^a", "definition": {"overflow": "x"}}),
    ("PUT", "/api/policies/{v}/bad", {"pattern": "^a", "definition": {"max-age": "1Q"}}),
    (
        "PUT",
        "/api/policies/{v}/ok",
        {"pattern": "^a", "definition": {"max-age": "1D", "stream-max-segment-size-bytes": 1000}},
    ),
    (
        "PUT",
        "/api/policies/{v}/bad",
        {"pattern": "^a", "definition": {"stream-max-segment-size-bytes": 5000000000}},
    ),
    ("PUT", "/api/policies/{v}/bad", {"pattern": "^a", "definition": {"alternate-exchange": 1}}),
    (
        "PUT",
        "/api/policies/{v}/bad",
        {"pattern": "^a", "definition": {"dead-letter-routing-key": 1}},
    ),
    ("PUT", "/api/policies/{v}/bad", {"pattern": "^a", "definition": {"delivery-limit": -2}}),
    ("PUT", "/api/policies/no-such-vhost-x/p", {"pattern": "^a", "definition": {"max-length": 5}}),
    ("GET", "/api/policies/no-such-vhost-x", None),
    ("DELETE", "/api/policies/{v}/ok", None),
    ("DELETE", "/api/policies/{v}/p3", None),
    ("GET", "/api/policies/{v}", None),
]


def test_policy_endpoints(sites: tuple[Site, Site]) -> None:
    same_answers(sites, POLICY_API)


OPERATOR_API = [
    ("GET", "/api/operator-policies/{v}", None),
    (
        "PUT",
        "/api/operator-policies/{v}/o1",
        {
            "pattern": "^a",
            "definition": {
                "max-length": 3,
                "expires": 100000,
                "message-ttl": 5000,
                "max-length-bytes": 100,
                "delivery-limit": 2,
            },
        },
    ),
    (
        "PUT",
        "/api/operator-policies/{v}/o2",
        {"pattern": "^a", "definition": {"overflow": "reject-publish"}},
    ),
    (
        "PUT",
        "/api/operator-policies/{v}/o2",
        {"pattern": "^a", "definition": {"queue-mode": "lazy"}},
    ),
    ("PUT", "/api/operator-policies/{v}/o2", {"pattern": "^a", "definition": {"max-length": "x"}}),
    ("PUT", "/api/operator-policies/{v}/o2", {"pattern": "[", "definition": {"max-length": 1}}),
    ("GET", "/api/operator-policies/{v}/o1", None),
    ("GET", "/api/operator-policies/{v}", None),
    ("DELETE", "/api/operator-policies/{v}/o1", None),
    ("DELETE", "/api/operator-policies/{v}/o1", None),
    ("GET", "/api/operator-policies/{v}", None),
]


def test_operator_policy_endpoints(sites: tuple[Site, Site]) -> None:
    same_answers(sites, OPERATOR_API)


def test_policy_listings_across_vhosts(sites: tuple[Site, Site]) -> None:
    """/api/policies and /api/operator-policies list every vhost's: this test's are
    compared."""

    def scenario(site: Site) -> Any:
        site.api.put(
            f"/api/policies/{q(site.vhost)}/pa",
            {"pattern": "x", "definition": {"max-length": 1}, "priority": 2},
        )
        site.api.put(
            f"/api/operator-policies/{q(site.vhost)}/oa",
            {"pattern": "x", "definition": {"max-length": 1}},
        )
        return [
            [p for p in site.api.get(path) if p["vhost"] == site.vhost]
            for path in ("/api/policies", "/api/operator-policies")
        ]

    on_both(sites, scenario)


def test_who_may_use_policies(sites: tuple[Site, Site]) -> None:
    """A management user lists a vhost's policies but may not read, set or clear one, nor
    touch operator policies; a policymaker may set policies in its vhosts."""
    for site in sites:
        site.api.put(
            f"/api/policies/{q(site.vhost)}/p1", {"pattern": "^a", "definition": {"max-length": 5}}
        )
    steps: list[tuple[str, str, Any]] = [
        ("GET", "/api/policies/{v}", None),
        ("GET", "/api/policies/{v}/p1", None),
        ("PUT", "/api/policies/{v}/p2", {"pattern": "x", "definition": {"max-length": 1}}),
        ("DELETE", "/api/policies/{v}/p1", None),
        ("GET", "/api/operator-policies/{v}", None),
        ("GET", "/api/operator-policies/{v}/x", None),
        ("PUT", "/api/operator-policies/{v}/x", {"pattern": "x", "definition": {"max-length": 1}}),
    ]
    same_answers(sites, steps, as_user=True)
    for site in sites:
        site.api.put(
            f"/api/users/{q(site.user)}", {"password": site.password, "tags": "policymaker"}
        )
    same_answers(sites, steps, as_user=True)


def queue_fields(site: Site, name: str) -> dict[str, Any]:
    data = site.api.get(f"/api/queues/{q(site.vhost)}/{q(name)}")
    return {
        k: data.get(k)
        for k in ("policy", "operator_policy", "effective_policy_definition", "messages")
    }


def settle(
    sites: tuple[Site, Site], probe: Callable[[Site], Any], timeout: float = STATS_WAIT
) -> None:
    """Compare ``probe`` on both brokers; RabbitMQ's queue statistics arrive once per
    statistics interval, so its side is polled until it agrees (or the time is up and the
    difference shows)."""
    lev, rmq = sites
    ours = norm(lev, probe(lev))
    wait_for(lambda: norm(rmq, probe(rmq)) == ours, timeout=timeout)
    assert ours == norm(rmq, probe(rmq))


def test_policies_apply_to_existing_queues_at_once(sites: tuple[Site, Site]) -> None:
    """A policy and an operator policy on queues that hold messages: the smaller
    max-length of the two and the queue's own argument wins, drop-head drops from the head
    at once, an argument's overflow (reject-publish) beats the policy's; clearing them
    gives the argument back."""
    conns = []
    for site in sites:
        conn = connect(site)
        conns.append(conn)
        ch = conn.channel()
        ch.queue_declare("a1", arguments={"x-max-length": 10, "x-overflow": "reject-publish"})
        ch.queue_declare("a2", arguments={"x-max-length": 20})
        ch.queue_declare("b1")
        for i in range(6):
            ch.basic_publish("", "a1", b"m%d" % i)
            ch.basic_publish("", "a2", b"m%d" % i)
            ch.basic_publish("", "b1", b"m%d" % i)
        site.api.put(
            f"/api/policies/{q(site.vhost)}/p1",
            {
                "pattern": "^a",
                "priority": 1,
                "definition": {"max-length": 4, "message-ttl": 60000, "overflow": "drop-head"},
            },
        )
        site.api.put(
            f"/api/operator-policies/{q(site.vhost)}/o1",
            {"pattern": "^a", "definition": {"max-length": 3, "expires": 100000}},
        )
    try:
        for name in ("a1", "a2", "b1"):
            settle(sites, lambda site, name=name: queue_fields(site, name))
        assert queue_fields(sites[0], "a2")["messages"] == 3
        # the head went: the oldest left are m3..m5
        got = [
            sites[0].api.call(
                "POST",
                f"/api/queues/{q(sites[0].vhost)}/a2/get",
                {"count": 5, "ackmode": "ack_requeue_true", "encoding": "auto"},
            )[1]
        ]
        assert [m["payload"] for m in got[0]] == ["m3", "m4", "m5"]
        for site in sites:
            site.api.delete(f"/api/policies/{q(site.vhost)}/p1")
            site.api.delete(f"/api/operator-policies/{q(site.vhost)}/o1")
        for conn in conns:
            ch = conn.channel()
            for i in range(9):
                ch.basic_publish("", "a1", b"n%d" % i)
        for name in ("a1", "a2"):
            settle(sites, lambda site, name=name: queue_fields(site, name))
        assert queue_fields(sites[0], "a1")["messages"] == 10
    finally:
        for conn in conns:
            conn.close()


def test_exchange_policies(sites: tuple[Site, Site]) -> None:
    """A policy's alternate exchange takes unroutable messages, the exchange's own
    argument wins over it; policies show on exchanges (the default one too), only the
    policy's name."""

    def scenario(site: Site) -> Any:
        conn = connect(site)
        try:
            ch = conn.channel()
            ch.exchange_declare("ae1", "fanout")
            ch.exchange_declare("ae2", "fanout")
            ch.queue_declare("t-ae1")
            ch.queue_declare("t-ae2")
            ch.queue_bind("t-ae1", "ae1")
            ch.queue_bind("t-ae2", "ae2")
            ch.exchange_declare("x-plain", "direct")
            ch.exchange_declare("x-own", "direct", arguments={"alternate-exchange": "ae2"})
            site.api.put(
                f"/api/policies/{q(site.vhost)}/ae",
                {
                    "pattern": "^x-",
                    "apply-to": "exchanges",
                    "definition": {"alternate-exchange": "ae1"},
                },
            )
            site.api.put(
                f"/api/policies/{q(site.vhost)}/everything",
                {
                    "pattern": "^$",
                    "apply-to": "exchanges",
                    "priority": -1,
                    "definition": {"alternate-exchange": "ae1"},
                },
            )
            time.sleep(0.2)
            ch.confirm_delivery()
            ch.basic_publish("x-plain", "nowhere", b"1")
            ch.basic_publish("x-own", "nowhere", b"2")
            ch.basic_publish("", "no-such-queue", b"3")  # the default exchange: no AE
            time.sleep(0.2)
            depths = {
                n: ch.queue_declare(n, passive=True).method.message_count
                for n in ("t-ae1", "t-ae2")
            }
            shown = {
                x["name"]: x.get("policy") for x in site.api.get(f"/api/exchanges/{q(site.vhost)}")
            }
            one = site.api.get(f"/api/exchanges/{q(site.vhost)}/x-plain")
            # (message_stats arrive later on RabbitMQ: compared in test_exchange_stats)
            return depths, shown, sorted(k for k in one if k != "message_stats")
        finally:
            conn.close()

    on_both(sites, scenario)


def test_queue_argument_and_policy_precedence(sites: tuple[Site, Site]) -> None:
    """Per key, as rabbit_amqqueue_process: the smaller of argument and policy for
    message-ttl and max-length, the argument for dead-letter-exchange and overflow."""

    def scenario(site: Site) -> Any:
        conn = connect(site)
        try:
            ch = conn.channel()
            for n in ("dlx-arg", "dlx-pol"):
                ch.exchange_declare(n, "fanout")
                ch.queue_declare(f"t-{n}")
                ch.queue_bind(f"t-{n}", n)
            site.api.put(
                f"/api/policies/{q(site.vhost)}/pq",
                {
                    "pattern": "^q",
                    "definition": {
                        "dead-letter-exchange": "dlx-pol",
                        "message-ttl": 60000,
                        "max-length": 2,
                    },
                },
            )
            ch.queue_declare("q-ttl", arguments={"x-message-ttl": 50})
            ch.queue_declare("q-dlx", arguments={"x-dead-letter-exchange": "dlx-arg"})
            ch.queue_declare("q-len", arguments={"x-max-length": 5})
            ch.queue_declare("q-pol")
            for n in ("q-ttl", "q-dlx", "q-len", "q-pol"):
                for i in range(4):
                    ch.basic_publish("", n, b"%d" % i)
            time.sleep(0.4)
            for n in ("q-ttl", "q-dlx", "q-pol"):
                m = ch.basic_get(n)
                if m[0] is not None:
                    ch.basic_nack(m[0].delivery_tag, requeue=False)
            time.sleep(0.3)
            return {
                n: ch.queue_declare(n, passive=True).method.message_count
                for n in ("q-ttl", "q-dlx", "q-len", "q-pol", "t-dlx-arg", "t-dlx-pol")
            }
        finally:
            conn.close()

    on_both(sites, scenario)


def test_policies_apply_to_quorum_queues(sites: tuple[Site, Site]) -> None:
    """rabbit_quorum_queue:ra_machine_config on a live queue: the smaller max-length and
    delivery-limit of argument and policy, the policy's overflow and expires, the
    argument's dead-letter exchange; a policy holding a key quorum queues do not take
    (queue-mode) does not apply to them at all; removing the policy gives the arguments
    back."""

    def scenario(site: Site) -> Any:
        conn = connect(site)
        v = q(site.vhost)
        out: dict[str, Any] = {}
        try:
            ch = conn.channel()
            ch.exchange_declare("qdlx-arg", "fanout")
            ch.queue_declare("t-qdlx-arg")
            ch.queue_bind("t-qdlx-arg", "qdlx-arg")
            quorum = {"x-queue-type": "quorum"}
            ch.queue_declare("qq-len", durable=True, arguments={**quorum, "x-max-length": 10})
            ch.queue_declare(
                "qq-dl",
                durable=True,
                arguments={**quorum, "x-delivery-limit": 5, "x-dead-letter-exchange": "qdlx-arg"},
            )
            ch.queue_declare("qq-lazy", durable=True, arguments=quorum)
            for i in range(6):
                ch.basic_publish("", "qq-len", b"m%d" % i)
            ch.basic_publish("", "qq-dl", b"d")
            site.api.put(
                f"/api/policies/{v}/pqq",
                {
                    "pattern": "^qq-(len|dl)",
                    "definition": {
                        "max-length": 3,
                        "delivery-limit": 1,
                        "overflow": "drop-head",
                        "dead-letter-exchange": "nowhere",
                    },
                },
            )
            site.api.put(
                f"/api/policies/{v}/plazy",
                {"pattern": "^qq-lazy", "definition": {"queue-mode": "lazy"}},
            )
            time.sleep(0.5)
            # the head went at once: m3..m5 left
            got = [ch.basic_get("qq-len", auto_ack=True)[2] for _ in range(4)]
            got = [b.decode() if b is not None else None for b in got]
            out["qq-len"] = got
            # delivered twice, returned twice: over the policy's limit of 1, dead-lettered
            # to the argument's exchange
            for _ in range(2):
                m = ch.basic_get("qq-dl")
                if m[0] is not None:
                    ch.basic_nack(m[0].delivery_tag, requeue=True)
            time.sleep(0.5)
            out["qq-dl"] = ch.queue_declare(
                "qq-dl", durable=True, passive=True
            ).method.message_count
            out["dead"] = ch.queue_declare("t-qdlx-arg", passive=True).method.message_count
            site.api.delete(f"/api/policies/{v}/pqq")
            time.sleep(0.3)
            for i in range(9):
                ch.basic_publish("", "qq-len", b"n%d" % i)
            time.sleep(0.5)
            out["qq-len after"] = ch.queue_declare(
                "qq-len", durable=True, passive=True
            ).method.message_count
            for name in ("qq-len", "qq-dl", "qq-lazy"):
                ch.queue_delete(name)
            return out
        finally:
            conn.close()

    on_both(sites, scenario)

    def policies(site: Site) -> Any:
        conn = connect(site)
        try:
            conn.channel().queue_declare(
                "qq-shown", durable=True, arguments={"x-queue-type": "quorum"}
            )
        finally:
            conn.close()
        site.api.put(
            f"/api/policies/{q(site.vhost)}/pshown",
            {"pattern": "^qq-shown", "definition": {"max-length": 7}},
        )
        site.api.put(
            f"/api/policies/{q(site.vhost)}/plazy2",
            {"pattern": "^qq-shown", "priority": 5, "definition": {"queue-mode": "lazy"}},
        )
        return None

    for site in sites:
        policies(site)
    settle(sites, lambda site: queue_fields(site, "qq-shown"))


# ------------------------------------------------------------------------ limits
VHOST_LIMITS_API = [
    ("GET", "/api/vhost-limits/{v}", None),
    ("PUT", "/api/vhost-limits/{v}/max-connections", {"value": 5}),
    ("PUT", "/api/vhost-limits/{v}/max-queues", {"value": 10}),
    ("PUT", "/api/vhost-limits/{v}/max-queues", {"value": "x"}),
    ("PUT", "/api/vhost-limits/{v}/max-queues", {"value": 1.5}),
    ("PUT", "/api/vhost-limits/{v}/max-queues", {}),
    ("PUT", "/api/vhost-limits/{v}/foo", {"value": 1}),
    ("PUT", "/api/vhost-limits/{v}/max-queues", {"value": -1}),
    ("GET", "/api/vhost-limits/{v}", None),
    ("GET", "/api/vhost-limits/no-such-vhost-x", None),
    ("PUT", "/api/vhost-limits/no-such-vhost-x/max-queues", {"value": 1}),
    ("DELETE", "/api/vhost-limits/{v}/max-queues", None),
    ("DELETE", "/api/vhost-limits/{v}/max-queues", None),
    ("DELETE", "/api/vhost-limits/{v}/foo", None),
    ("GET", "/api/vhost-limits/{v}", None),
    ("DELETE", "/api/vhost-limits/{v}/max-connections", None),
    ("GET", "/api/vhost-limits/{v}", None),
]


def test_vhost_limit_endpoints(sites: tuple[Site, Site]) -> None:
    same_answers(sites, VHOST_LIMITS_API)


USER_LIMITS_API = [
    ("GET", "/api/user-limits/{u}", None),
    ("PUT", "/api/user-limits/{u}/max-connections", {"value": 5}),
    ("PUT", "/api/user-limits/{u}/max-channels", {"value": 10}),
    ("PUT", "/api/user-limits/{u}/max-channels", {"value": "x"}),
    ("PUT", "/api/user-limits/{u}/foo", {"value": 1}),
    ("PUT", "/api/user-limits/{u}/max-channels", {}),
    ("GET", "/api/user-limits/{u}", None),
    ("GET", "/api/user-limits/nobody-x", None),
    ("PUT", "/api/user-limits/nobody-x/max-channels", {"value": 1}),
    ("GET", "/api/users/{u}", None),
    ("DELETE", "/api/user-limits/{u}/max-channels", None),
    ("DELETE", "/api/user-limits/{u}/max-channels", None),
    ("GET", "/api/user-limits/{u}", None),
]


def test_user_limit_endpoints(sites: tuple[Site, Site]) -> None:
    ours, theirs = (calls(site, USER_LIMITS_API) for site in sites)
    for mine, reference in zip(ours, theirs, strict=True):
        if isinstance(mine[3], dict) and "password_hash" in mine[3]:
            mine[3].pop("password_hash")
            reference[3].pop("password_hash")
        assert mine == reference


def test_limit_listings_and_who_may_set_them(sites: tuple[Site, Site]) -> None:
    def scenario(site: Site) -> Any:
        site.api.put(f"/api/vhost-limits/{q(site.vhost)}/max-queues", {"value": 7})
        site.api.put(f"/api/user-limits/{q(site.user)}/max-channels", {"value": 4})
        mine = [("/api/vhost-limits", "vhost", site.vhost), ("/api/user-limits", "user", site.user)]
        listed = [[i for i in site.api.get(path) if i[key] == name] for path, key, name in mine]
        as_user = calls(
            site,
            [
                ("GET", "/api/vhost-limits/{v}", None),
                ("PUT", "/api/vhost-limits/{v}/max-queues", {"value": 1}),
                ("GET", "/api/user-limits/{u}", None),
                ("PUT", "/api/user-limits/{u}/max-channels", {"value": 1}),
            ],
            as_user=True,
        )
        return listed, as_user

    on_both(sites, scenario)


def refusal(action: Callable[[], Any]) -> Any:
    try:
        action()
    except (ChannelClosedByBroker, ConnectionClosedByBroker) as exc:
        return exc.reply_code, exc.reply_text
    except ProbableAccessDeniedError as exc:
        return "refused", str(exc)
    return "ok"


def test_vhost_limits_refuse_as_rabbitmq(sites: tuple[Site, Site]) -> None:
    """max-queues refuses new queues (AMQP and API), not existing ones; max-connections
    refuses the connection past it, 0 refuses all."""

    def scenario(site: Site) -> Any:
        out = []
        site.api.put(f"/api/vhost-limits/{q(site.vhost)}/max-queues", {"value": 2})
        conn = connect(site)
        ch = conn.channel()
        out.append(refusal(lambda: ch.queue_declare("q1")))
        out.append(refusal(lambda: ch.queue_declare("q2")))
        out.append(refusal(lambda: ch.queue_declare("q3")))
        ch = conn.channel()
        out.append(refusal(lambda: ch.queue_declare("q1")))
        out.append(refusal(lambda: ch.queue_declare("q1", passive=True)))
        out.append(site.api.call("PUT", f"/api/queues/{q(site.vhost)}/q9", {}))
        site.api.put(f"/api/vhost-limits/{q(site.vhost)}/max-connections", {"value": 1})
        out.append(refusal(lambda: connect(site).close()))
        site.api.put(f"/api/vhost-limits/{q(site.vhost)}/max-connections", {"value": 0})
        out.append(refusal(lambda: connect(site).close()))
        conn.close()
        site.api.delete(f"/api/vhost-limits/{q(site.vhost)}/max-connections")
        out.append(refusal(lambda: connect(site).close()))
        return out

    on_both(sites, scenario)


def test_user_limits_refuse_as_rabbitmq(sites: tuple[Site, Site]) -> None:
    """max-channels closes the connection that opens one channel too many (530);
    max-connections refuses the connection past it."""

    def scenario(site: Site) -> Any:
        out = []
        site.api.put(
            f"/api/permissions/{q(site.vhost)}/{q(site.user)}",
            {"configure": ".*", "write": ".*", "read": ".*"},
        )
        site.api.put(f"/api/user-limits/{q(site.user)}/max-channels", {"value": 2})
        conn = connect(site, site.user, site.password)
        conn.channel()
        conn.channel()
        out.append(refusal(conn.channel))
        out.append(conn.is_open)
        site.api.put(f"/api/user-limits/{q(site.user)}/max-connections", {"value": 1})
        first = connect(site, site.user, site.password)
        out.append(refusal(lambda: connect(site, site.user, site.password).close()))
        first.close()
        site.api.put(f"/api/user-limits/{q(site.user)}/max-connections", {"value": 0})
        out.append(refusal(lambda: connect(site, site.user, site.password).close()))
        return out

    on_both(sites, scenario)


# ------------------------------------------------------------- topic permissions
TOPIC_API = [
    ("GET", "/api/topic-permissions/{v}/{u}", None),
    (
        "PUT",
        "/api/topic-permissions/{v}/{u}",
        {"exchange": "amq.topic", "write": "^a", "read": "^b"},
    ),
    (
        "PUT",
        "/api/topic-permissions/{v}/{u}",
        {"exchange": "amq.topic", "write": "^a", "read": "^c"},
    ),
    ("PUT", "/api/topic-permissions/{v}/{u}", {"exchange": "t2", "write": "", "read": ".*"}),
    ("PUT", "/api/topic-permissions/{v}/{u}", {"exchange": "t3", "write": "["}),
    ("PUT", "/api/topic-permissions/{v}/{u}", {"exchange": "t3", "write": "[", "read": "x"}),
    ("PUT", "/api/topic-permissions/{v}/{u}", {"write": "a", "read": "x"}),
    ("PUT", "/api/topic-permissions/{v}/nobody-x", {"exchange": "t3", "write": "a", "read": "x"}),
    (
        "PUT",
        "/api/topic-permissions/no-such-vhost-x/{u}",
        {"exchange": "t3", "write": "a", "read": "x"},
    ),
    ("GET", "/api/topic-permissions/{v}/{u}", None),
    ("GET", "/api/vhosts/{v}/topic-permissions", None),
    ("GET", "/api/users/{u}/topic-permissions", None),
    ("GET", "/api/topic-permissions/{v}/nobody-x", None),
    ("DELETE", "/api/topic-permissions/{v}/{u}", None),
    ("DELETE", "/api/topic-permissions/{v}/{u}", None),
    ("GET", "/api/topic-permissions/{v}/{u}", None),
]


def test_topic_permission_endpoints(sites: tuple[Site, Site]) -> None:
    same_answers(sites, TOPIC_API)


def test_topic_permissions_are_enforced(sites: tuple[Site, Site]) -> None:
    """Publishing to a topic exchange is checked against write (with {username} filled
    in), binding against read; an empty pattern allows only the empty key; other exchange
    types are not checked. The API's publish and bind meet the same checks."""

    def scenario(site: Site) -> Any:
        v, u = q(site.vhost), q(site.user)
        site.api.put(f"/api/permissions/{v}/{u}", {"configure": ".*", "write": ".*", "read": ".*"})
        site.api.put(
            f"/api/topic-permissions/{v}/{u}",
            {"exchange": "amq.topic", "write": "^a\\.{username}", "read": "^b"},
        )
        site.api.put(f"/api/topic-permissions/{v}/{u}", {"exchange": "tx", "write": "", "read": ""})
        out: list[Any] = []
        conn = connect(site, site.user, site.password)
        ch = conn.channel()
        ch.exchange_declare("tx", "topic")
        ch.queue_declare("qq")
        for ex, rk in [
            ("amq.topic", f"a.{site.user}.x"),
            ("amq.topic", "a.other"),
            ("tx", ""),
            ("tx", "z"),
            ("amq.direct", "zzz"),
        ]:

            def publish(ex: str = ex, rk: str = rk) -> None:
                c = conn.channel()
                c.confirm_delivery()
                c.basic_publish(ex, rk, b"m")

            out.append(refusal(publish))
        for ex, rk in [("amq.topic", "b.1"), ("amq.topic", "c"), ("tx", "")]:
            out.append(refusal(lambda ex=ex, rk=rk: conn.channel().queue_bind("qq", ex, rk)))
            out.append(refusal(lambda ex=ex, rk=rk: conn.channel().queue_unbind("qq", ex, rk)))
        out.append(refusal(lambda: conn.channel().exchange_bind("amq.direct", "amq.topic", "c")))
        conn.close()
        api = site.api.as_user(site.user, site.password)
        publish = {"properties": {}, "payload": "x", "payload_encoding": "string"}
        out.append(
            api.call(
                "POST",
                f"/api/exchanges/{v}/amq.topic/publish",
                dict(publish, routing_key="a.other"),
            )
        )
        out.append(
            api.call(
                "POST",
                f"/api/exchanges/{v}/amq.topic/publish",
                dict(publish, routing_key=f"a.{site.user}"),
            )
        )
        out.append(api.call("POST", f"/api/bindings/{v}/e/amq.topic/q/qq", {"routing_key": "c"}))
        return out

    on_both(sites, scenario)


# ------------------------------------------------------------------ definitions
def definitions_file(site: Site) -> dict[str, Any]:
    """A RabbitMQ definitions file with policies, operator policies, vhost and user
    limits, topic permissions and what they apply to."""
    vhost, user = f"{site.vhost}-defs", f"{site.user}-defs"
    return {
        "rabbit_version": "3.10.8",
        "users": [
            {
                "name": user,
                "password_hash": "kI3GCqW5JLMJa4iX1lo7X4D6XbYqlLgxIs30+P6tENUV2POR",
                "hashing_algorithm": "rabbit_password_hashing_sha256",
                "tags": ["management"],
                "limits": {"max-channels": 4, "max-connections": 2},
            }
        ],
        "vhosts": [{"name": vhost}],
        "permissions": [
            {"user": user, "vhost": vhost, "configure": ".*", "write": ".*", "read": ".*"}
        ],
        "topic_permissions": [
            {"user": user, "vhost": vhost, "exchange": "amq.topic", "write": "^a", "read": "^b"}
        ],
        "parameters": [
            {
                "value": {"max-queues": 7, "max-connections": 9},
                "vhost": vhost,
                "component": "vhost-limits",
                "name": "limits",
            },
            {
                "value": {
                    "pattern": "^q",
                    "definition": {"max-length": 3},
                    "priority": 0,
                    "apply-to": "queues",
                },
                "vhost": vhost,
                "component": "operator_policy",
                "name": "o1",
            },
        ],
        "global_parameters": [],
        "policies": [
            {
                "vhost": vhost,
                "name": "p1",
                "pattern": "^q",
                "apply-to": "queues",
                "definition": {"max-length": 5, "message-ttl": 60000},
                "priority": 1,
            },
            {
                "vhost": vhost,
                "name": "p2",
                "pattern": "^x",
                "apply-to": "exchanges",
                "definition": {"alternate-exchange": "ae"},
                "priority": 0,
            },
        ],
        "queues": [
            {"name": "q1", "vhost": vhost, "durable": True, "auto_delete": False, "arguments": {}}
        ],
        "exchanges": [
            {
                "name": "x1",
                "vhost": vhost,
                "type": "direct",
                "durable": True,
                "auto_delete": False,
                "internal": False,
                "arguments": {},
            }
        ],
        "bindings": [],
    }


def test_definitions_round_trip(sites: tuple[Site, Site]) -> None:
    """Imported, the file's policies, limits and topic permissions are in force and
    exported again as they came, on both brokers."""

    def scenario(site: Site) -> Any:
        data = definitions_file(site)
        vhost, user = data["vhosts"][0]["name"], data["users"][0]["name"]
        try:
            assert site.api.call("POST", "/api/definitions", data)[0] in (201, 204)
            exported = site.api.get("/api/definitions")
            mine: dict[str, Any] = {}
            for section in (
                "users",
                "topic_permissions",
                "parameters",
                "policies",
                "queues",
                "exchanges",
                "permissions",
            ):
                items = [
                    i for i in exported[section] if i.get("vhost") == vhost or i.get("name") == user
                ]
                mine[section] = sorted(json.dumps(i, sort_keys=True) for i in items)
            per_vhost = site.api.get(f"/api/definitions/{q(vhost)}")
            mine["per_vhost"] = {
                k: sorted(json.dumps(i, sort_keys=True) for i in per_vhost[k])
                for k in ("parameters", "policies")
            }
            q1 = wait_for(
                lambda: site.api.get(f"/api/queues/{q(vhost)}/q1").get(
                    "effective_policy_definition"
                ),
                timeout=STATS_WAIT,
            )
            x1 = site.api.get(f"/api/exchanges/{q(vhost)}/x1").get("policy")
            return mine, q1, x1, site.api.get(f"/api/user-limits/{q(user)}")
        finally:
            site.api.delete(f"/api/vhosts/{q(vhost)}")
            site.api.delete(f"/api/users/{q(user)}")

    lev, rmq = (norm(site, scenario(site)) for site in sites)
    assert lev == rmq


def test_policies_limits_and_topic_permissions_survive_a_restart(tmp_path: Any) -> None:
    """Kept in the data directory: after a restart the policies apply again to the
    durable queue they applied to, and limits and topic permissions are in force."""
    from tests.support.brokers import start_leveret
    from tests.support.mgmt import Api, make_site

    broker = start_leveret(tmp_path)
    try:
        sites = make_site(broker, "r")  # kept: closing it would delete the vhost
        site = next(sites)
        v, u = q(site.vhost), q(site.user)
        api = site.api
        assert api.put(f"/api/queues/{v}/t-kept", {"durable": True}) == 201
        assert (
            api.put(
                f"/api/policies/{v}/p",
                {"pattern": "^t-", "apply-to": "queues", "definition": {"max-length": 2}},
            )
            == 201
        )
        assert (
            api.put(
                f"/api/operator-policies/{v}/o",
                {"pattern": ".*", "definition": {"message-ttl": 1000}},
            )
            == 201
        )
        assert api.put(f"/api/vhost-limits/{v}/max-queues", {"value": 5}) == 204
        assert api.put(f"/api/user-limits/{u}/max-channels", {"value": 3}) == 204
        assert (
            api.put(
                f"/api/topic-permissions/{v}/{u}",
                {"exchange": "amq.topic", "write": "^a", "read": "^b"},
            )
            == 201
        )
    finally:
        broker.stop()
    broker = start_leveret(tmp_path)
    try:
        api = Api(broker.http_url)
        queue = api.get(f"/api/queues/{v}/t-kept")
        assert (queue["policy"], queue["operator_policy"]) == ("p", "o")
        assert queue["effective_policy_definition"] == {"max-length": 2, "message-ttl": 1000}
        assert api.get(f"/api/vhost-limits/{v}") == [
            {"vhost": site.vhost, "value": {"max-queues": 5}}
        ]
        assert api.get(f"/api/users/{u}")["limits"] == {"max-channels": 3}
        assert api.get(f"/api/topic-permissions/{v}/{u}")[0]["write"] == "^a"
    finally:
        broker.stop()


def test_users_bulk_delete(sites: tuple[Site, Site]) -> None:
    """Users deleted one by one: the first name that is no user ends it with RabbitMQ's 400
    (naming the value as it was sent), the ones before it gone. Found by fuzzing
    (tests/management/test_fuzz_api.py), which also sends ``users`` that are not a list:
    RabbitMQ's handler crashes on those (500, no body), Leveret refuses them with a 400."""
    steps: list[tuple[str, str, Any]] = [
        ("PUT", "/api/users/{u}-bulk1", {"password": "pw", "tags": ""}),
        ("PUT", "/api/users/{u}-bulk2", {"password": "pw", "tags": ""}),
        ("POST", "/api/users/bulk-delete", {"users": ["{U}-bulk1", "{U}-none", "{U}-bulk2"]}),
        ("GET", "/api/users/{u}-bulk1", None),
        ("GET", "/api/users/{u}-bulk2", None),
        ("POST", "/api/users/bulk-delete", {"users": [1]}),
        ("POST", "/api/users/bulk-delete", {"users": [True, "x"]}),
        ("POST", "/api/users/bulk-delete", {"users": ["{U}-bulk2"]}),
        ("GET", "/api/users/{u}-bulk2", None),
        ("POST", "/api/users/bulk-delete", {"users": []}),
        ("POST", "/api/users/bulk-delete", {"nobody": []}),
    ]
    answers = []
    for site in sites:
        concrete = [
            (m, p, json.loads(json.dumps(b).replace("{U}", site.user)) if b else b)
            for m, p, b in steps
        ]
        got = calls(site, concrete)
        answers.append([(m, p, s, d if s != 200 else None) for m, p, s, d in got])
    assert answers[0] == answers[1]
    leveret, _ = sites
    status, body = leveret.api.call("POST", "/api/users/bulk-delete", {"users": 100})
    assert (status, body) == (
        400,
        {"error": "bad_request", "reason": "users must be a list of user names"},
    )
