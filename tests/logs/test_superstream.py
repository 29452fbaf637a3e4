"""Publishing log records to a super stream: a super stream made as ``rabbitmq-streams
add_super_stream`` makes one, its partitions read from the management API, and every
record in the partition its app (or host) hashes to, as RabbitMQ's stream clients hash; on
both brokers."""

from __future__ import annotations

import json
import logging
import subprocess
import time
from collections.abc import Iterator
from typing import Any

import pika
import pika.exceptions
import pytest

from leveret.logs import AMQPHandler
from leveret.logs.amqp import LogsError
from leveret.logs.emitter import Emitter
from leveret.logs.record import HOST
from leveret.logs.superstream import (
    ManagementApi,
    Partition,
    declare_super_stream,
    ordered_partitions,
    partition_index,
)
from tests.logs.conftest import CLI
from tests.support.brokers import BrokerUnderTest, ensure_rabbitmq_management

PARTITIONS = 4


# The table the RabbitMQ team's Go stream client pins its hash routing with (three
# partitions), which its tests say the .NET, Java and Python clients give too.
GO_CLIENT_TABLE = {
    "hello1": 1, "hello2": 0, "hello3": 1, "hello4": 2, "hello5": 0, "hello6": 2,
    "hello7": 0, "hello8": 1, "hello9": 0, "hello10": 2, "hello88": 1,
}  # fmt: skip


def test_the_partition_of_a_key_is_the_stream_clients_murmur3() -> None:
    assert {k: partition_index(k, 3) for k in GO_CLIENT_TABLE} == GO_CLIENT_TABLE
    # the Go client's test of twenty keys over three partitions: 9, 7 and 4 messages
    counts = [0, 0, 0]
    for i in range(20):
        counts[partition_index(f"hello{i}", 3)] += 1
    assert counts == [9, 7, 4]
    with pytest.raises(ValueError):
        partition_index("x", 0)


def test_partitions_are_ordered_as_rabbitmq_orders_them() -> None:
    order = "x-stream-partition-order"
    bindings = [
        {"destination": "s-b", "destination_type": "queue", "routing_key": "b",
         "arguments": {order: 1}},
        {"destination": "s-late", "destination_type": "queue", "routing_key": "z",
         "arguments": {}},
        {"destination": "s-a", "destination_type": "queue", "routing_key": "a",
         "arguments": {order: 0}},
        {"destination": "classic", "destination_type": "queue", "routing_key": "c",
         "arguments": {order: 2}},
        {"destination": "x", "destination_type": "exchange", "routing_key": "d",
         "arguments": {order: 3}},
        {"destination": "s-a", "destination_type": "queue", "routing_key": "a2",
         "arguments": {order: 5}},
    ]  # fmt: skip
    got = ordered_partitions(bindings, ["s-a", "s-b", "s-late"])
    assert got == [Partition("s-a", "a"), Partition("s-b", "b"), Partition("s-late", "z")]


@pytest.fixture
def api_broker(broker: BrokerUnderTest) -> BrokerUnderTest:
    if broker.name == "rabbitmq" and not ensure_rabbitmq_management():
        pytest.skip("the reference RabbitMQ's management plugin cannot be enabled here")
    return broker


@pytest.fixture
def super_stream(api_broker: BrokerUnderTest, name: str) -> Iterator[str]:
    assert declare_super_stream(api_broker.url, name, PARTITIONS) is True
    yield name
    conn = pika.BlockingConnection(api_broker.pika_params())
    ch = conn.channel()
    ch.exchange_delete(name)
    for k in range(PARTITIONS):
        ch.queue_delete(f"{name}-{k}")
    conn.close()


def partition_records(broker: BrokerUnderTest, stream: str, expected: int) -> list[dict[str, Any]]:
    """The records of one partition, read from its first offset until ``expected`` have
    come and nothing more comes for a moment."""
    conn = pika.BlockingConnection(broker.pika_params())
    ch = conn.channel()
    ch.basic_qos(prefetch_count=500)
    got: list[dict[str, Any]] = []
    last = [time.monotonic()]

    def on(_ch: Any, method: Any, _props: Any, body: bytes) -> None:
        got.append(json.loads(body))
        last[0] = time.monotonic()
        _ch.basic_ack(method.delivery_tag)

    ch.basic_consume(stream, on, arguments={"x-stream-offset": "first"})
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        conn.process_data_events(0.1)
        if len(got) >= expected and time.monotonic() - last[0] > 0.5:
            break
    conn._impl.close()  # no cancel: a stream consumer's buffered deliveries would be rejected
    return got


def test_records_go_to_the_partition_their_app_or_host_hashes_to(
    api_broker: BrokerUnderTest, super_stream: str
) -> None:
    broker, name = api_broker, super_stream
    api = ManagementApi.of(broker.url, broker.http_url)
    assert api.partitions(name) == [Partition(f"{name}-{k}", str(k)) for k in range(PARTITIONS)]
    apps = ["billing", "web", "auth", "search", "mail", "cron"]
    assert len({partition_index(a, PARTITIONS) for a in apps}) > 1
    for app in apps:
        emitter = Emitter(broker.url, name, super_stream=True, app=app,
                          management_url=broker.http_url)  # fmt: skip
        for i in range(3):
            emitter.send(f"{app} {i}")
        result = emitter.close(60)
        assert result.ok and result.sent == 3, result
    logger = logging.getLogger(f"test.{name}")
    logger.propagate = False
    handler = AMQPHandler(broker.url, name, super_stream=True, route_by="host", app="by-host",
                          management_url=broker.http_url, timeout=60)  # fmt: skip
    logger.addHandler(handler)
    try:
        logger.warning("from the handler")
        handler.flush()
        assert handler.stats.confirmed == 1
    finally:
        logger.removeHandler(handler)
        handler.close()
    done = subprocess.run(
        [*CLI, "emit-log", "--url", broker.url, "--super-stream", name, "--route-by", "host",
         "--app", "cli", "--management-url", broker.http_url, "error: from the command"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"Sent 1 record to super stream '{name}'"

    wanted: dict[int, list[str]] = {k: [] for k in range(PARTITIONS)}
    for app in apps:
        wanted[partition_index(app, PARTITIONS)] += [f"{app} {i}" for i in range(3)]
    wanted[partition_index(HOST, PARTITIONS)] += ["from the handler", "from the command"]
    for k in range(PARTITIONS):
        records = partition_records(broker, f"{name}-{k}", len(wanted[k]))
        assert sorted(r["message"] for r in records) == sorted(wanted[k]), k
    # one app's records in order, in its one partition
    billing = partition_records(broker, f"{name}-{partition_index('billing', PARTITIONS)}", 1)
    assert [r["message"] for r in billing if r["app"] == "billing"] == [
        "billing 0", "billing 1", "billing 2"
    ]  # fmt: skip


def test_a_super_stream_that_is_not_there_is_one_plain_line(
    api_broker: BrokerUnderTest, name: str
) -> None:
    done = subprocess.run(
        [*CLI, "emit-log", "--url", api_broker.url, "--super-stream", name,
         "--management-url", api_broker.http_url, "hello"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        f"Error: super stream '{name}' does not exist: no exchange '{name}' in vhost '/' "
        f"({api_broker.http_url})"
    ]
    # the same super stream made twice is made once
    assert declare_super_stream(api_broker.url, name, 2) is True
    try:
        assert declare_super_stream(api_broker.url, name, 5) is False
        api = ManagementApi.of(api_broker.url, api_broker.http_url)
        assert [p.stream for p in api.partitions(name)] == [f"{name}-0", f"{name}-1"]
    finally:
        conn = pika.BlockingConnection(api_broker.pika_params())
        ch = conn.channel()
        ch.exchange_delete(name)
        ch.queue_delete(f"{name}-0")
        ch.queue_delete(f"{name}-1")
        conn.close()


def test_a_super_stream_half_made_is_taken_back(api_broker: BrokerUnderTest, name: str) -> None:
    """A partition the broker refuses (a classic queue of its name is there): the exchange
    and the partitions made before it go again, as RabbitMQ's stream manager rolls back."""
    conn = pika.BlockingConnection(api_broker.pika_params())
    conn.channel().queue_declare(f"{name}-1", durable=True)
    try:
        with pytest.raises(LogsError, match=f"cannot make super stream '{name}': PRECONDITION"):
            declare_super_stream(api_broker.url, name, 3)
        ch = conn.channel()
        for kind, what in (("exchange", name), ("queue", f"{name}-0")):
            with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
                if kind == "exchange":
                    ch.exchange_declare(what, passive=True)
                else:
                    ch.queue_declare(what, passive=True)
            assert info.value.reply_code == 404
            ch = conn.channel()
        assert ch.queue_declare(f"{name}-1", passive=True).method.queue == f"{name}-1"
    finally:
        conn.channel().queue_delete(f"{name}-1")
        conn.close()
