"""What the interop tests share: the unmodified clients in other languages (tests/interop/go,
tests/interop/node) run one scenario per process and print JSON that the tests judge; and
the scenarios that every client library runs alike, with what RabbitMQ 3.10.8 answers."""

from __future__ import annotations

import json
import os
import subprocess
from typing import Any, NoReturn

import pytest

from tests.support.brokers import BrokerUnderTest

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


def unavailable(client: str, reason: str, hint: str) -> NoReturn:
    """A client that cannot be run here: a skip, but a failure under CI, where it must run."""
    if IN_CI:
        pytest.fail(f"{reason}; under CI the {client} interop tests must run: {hint}")
    pytest.skip(f"{reason}: {hint}")


def run_scenario(
    command: list[str],
    scenario: str,
    broker: BrokerUnderTest,
    name: str,
    *args: str,
    timeout: float = 120,
) -> dict[str, Any]:
    """``COMMAND SCENARIO URL NAME ARGS`` to its end; the JSON of its last line."""
    proc = subprocess.run(
        [*command, scenario, broker.url, name, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert proc.returncode == 0, (
        f"{scenario} on {broker.name} exited {proc.returncode}:\n{proc.stdout}{proc.stderr}"
    )
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def fanout_tutorial(
    command: list[str],
    broker: BrokerUnderTest,
    name: str,
    processes: list[subprocess.Popen[str]],
    timeout: float = 120,
) -> None:
    """The publish/subscribe tutorial: two ``receive_logs`` processes with server-named,
    exclusive queues each get every message ``emit_log`` publishes to a fanout exchange, in
    order."""
    exchange = f"logs-{name}"
    sent = [f"info: Hello World! {i}" for i in range(10)]
    queues: list[str] = []
    try:
        for _ in range(2):
            proc = subprocess.Popen(
                [*command, "receive_logs", broker.url, exchange, str(len(sent))],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            processes.append(proc)
            assert proc.stdout is not None
            ready = json.loads(proc.stdout.readline() or "{}")
            assert ready.get("ready") is True, proc.stderr.read() if proc.stderr else ""
            queues.append(ready["queue"])
        emitted = run_scenario(command, "emit_log", broker, exchange, *sent, timeout=timeout)
        assert emitted == {"sent": len(sent)}
        received = []
        for proc in processes:
            out, err = proc.communicate(timeout=30)
            assert proc.returncode == 0, err
            received.append(json.loads(out.strip().splitlines()[-1]))
    finally:
        run_scenario(command, "delete_exchange", broker, exchange, timeout=timeout)
    assert [r["messages"] for r in received] == [sent, sent]
    assert [r["redelivered"] for r in received] == [0, 0]
    assert [r["queue"] for r in received] == queues
    assert len(set(queues)) == 2
    for q in queues:
        assert q.startswith("amq.gen-") and len(q) == len("amq.gen-") + 22


def assert_names_itself(props: dict[str, Any], broker: BrokerUnderTest) -> None:
    """The server properties of connection.start: Leveret reports the RabbitMQ release it
    behaves as, and names itself honestly."""
    seen = {
        **props,
        "platform": props["platform"].split(" ")[0],
        "cluster_name": props["cluster_name"].split("@")[0],
    }
    identity = {
        "leveret": {
            "product": "Leveret",
            "copyright": "Copyright (c) the Leveret authors",
            "platform": "Python",
            "cluster_name": "rabbit",  # RabbitMQ's default node name, rabbit@<host>
        },
        "rabbitmq": {
            "product": "RabbitMQ",
            "copyright": "Copyright (c) 2007-2022 VMware, Inc. or its affiliates.",
            "platform": "Erlang/OTP",  # then the OTP release, e.g. "Erlang/OTP 25.2.3"
            "cluster_name": "rabbit",  # then "@" and the host name
        },
    }[broker.name]
    assert {k: seen[k] for k in identity} == identity
    assert seen["version"] == "3.10.8"
    assert seen["information"]


# The topic routing scenario: a queue bound with each pattern, a message published with each
# key (its body the key, or ``<empty>``), and what each queue then holds.
TOPIC_PATTERNS = {
    "star": "*.orange.*",
    "hash-tail": "lazy.#",
    "hash-only": "#",
    "star-tail": "*.*.rabbit",
    "hash-middle": "a.#.z",
    "exact": "quick.orange.rabbit",
}
TOPIC_KEYS = [
    "quick.orange.rabbit",
    "lazy.orange.elephant",
    "quick.orange.fox",
    "lazy.brown.fox",
    "lazy",
    "quick.brown.fox",
    "orange",
    "quick.orange.male.rabbit",
    "a.z",
    "a.b.c.z",
    "a.b",
    "",
]
TOPIC_ROUTED = {
    "star": [b"quick.orange.rabbit", b"lazy.orange.elephant", b"quick.orange.fox"],
    "hash-tail": [b"lazy.orange.elephant", b"lazy.brown.fox", b"lazy"],
    "hash-only": [k.encode() or b"<empty>" for k in TOPIC_KEYS],
    "star-tail": [b"quick.orange.rabbit"],
    "hash-middle": [b"a.z", b"a.b.c.z"],
    "exact": [b"quick.orange.rabbit"],
}

# The headers routing scenario: a queue bound with each table, a message published with
# each header table (its body the label), and what each queue then holds.
HEADERS_BINDINGS: dict[str, dict[str, Any]] = {
    "all": {"x-match": "all", "format": "pdf", "type": "report"},
    "any": {"x-match": "any", "format": "pdf", "type": "log"},
    "default": {"format": "zip"},  # x-match defaults to all
}
HEADERS_MESSAGES: list[tuple[str, dict[str, Any]]] = [
    ("pdf-report", {"format": "pdf", "type": "report"}),
    ("pdf-log", {"format": "pdf", "type": "log"}),
    ("zip-report", {"format": "zip", "type": "report"}),
    ("pdf-only", {"format": "pdf"}),
    ("none", {}),
    ("extra", {"format": "pdf", "type": "report", "x": 1}),
]
HEADERS_ROUTED = {
    "all": [b"pdf-report", b"extra"],
    "any": [b"pdf-report", b"pdf-log", b"pdf-only", b"extra"],
    "default": [b"zip-report"],
}

# Each routing scenario by exchange type: the queues' bindings (label: the arguments of
# queue.bind), the messages (body, routing key, message properties) and what each queue
# then holds.
ROUTING: dict[
    str,
    tuple[
        dict[str, dict[str, Any]], list[tuple[bytes, str, dict[str, Any]]], dict[str, list[bytes]]
    ],
] = {
    "topic": (
        {label: {"routing_key": pattern} for label, pattern in TOPIC_PATTERNS.items()},
        [(key.encode() or b"<empty>", key, {}) for key in TOPIC_KEYS],
        TOPIC_ROUTED,
    ),
    "headers": (
        {label: {"arguments": args} for label, args in HEADERS_BINDINGS.items()},
        [(body.encode(), "ignored", {"headers": headers}) for body, headers in HEADERS_MESSAGES],
        HEADERS_ROUTED,
    ),
}

# The qos scenario (prefetch 1, manual acknowledgement): m0 is nacked with requeue and comes
# again, redelivered, before m1 and m2.
QOS_DELIVERIES = [
    {"body": "m0", "tag": 1, "redelivered": False},
    {"body": "m0", "tag": 2, "redelivered": True},
    {"body": "m1", "tag": 3, "redelivered": False},
    {"body": "m2", "tag": 4, "redelivered": False},
]
