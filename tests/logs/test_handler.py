"""``leveret.logs.AMQPHandler``: stdlib logging records as log records, on both brokers.

Its per-call latency is measured in benchmarks/logs.py, not asserted here."""

from __future__ import annotations

import logging
import time
from pathlib import Path

import pytest

from leveret.logs import AMQPHandler
from tests.logs.conftest import Shipping, wait_records
from tests.support.brokers import start_leveret
from tests.support.ports import free_port
from tests.support.waiting import wait_for

BURST = 100_000


def test_every_record_of_a_burst_arrives(shipping: Shipping, logger: logging.Logger) -> None:
    path, handler = shipping(timeout=300)
    for i in range(BURST):
        logger.info("burst %06d", i)
    handler.flush()
    stats = handler.stats
    assert (stats.confirmed, stats.dropped, stats.nacked) == (BURST, 0, 0)
    records = wait_records(path, BURST)
    assert [r["message"] for r in records] == [f"burst {i:06d}" for i in range(BURST)]


def test_records_carry_logger_exception_and_extra_fields(
    shipping: Shipping, logger: logging.Logger
) -> None:
    path, handler = shipping("topic", "db.*", exchange_type="topic", facility="db", app="shop")
    logger.warning("slow query %s", "q1", extra={"ms": 1234, "table": "orders"})
    try:
        raise KeyError("missing")
    except KeyError:
        logger.exception("lookup failed")
    logger.critical("down")
    handler.close()
    warning, error, critical = wait_records(path, 3)
    assert warning["message"] == "slow query q1"
    assert warning["extra"] == {"ms": 1234, "table": "orders"}
    assert (warning["severity"], warning["facility"], warning["app"], warning["logger"]) == (
        "warning",
        "db",
        "shop",
        logger.name,
    )
    assert error["severity"] == "error" and "KeyError: 'missing'" in error["exc"]
    assert critical["severity"] == "critical" and "exc" not in critical


def test_a_full_buffer_drops_the_oldest_and_counts(logger: logging.Logger) -> None:
    handler = AMQPHandler(f"amqp://guest:guest@127.0.0.1:{free_port()}/", capacity=10, timeout=0.1)
    logger.addHandler(handler)
    for i in range(25):
        logger.error("r%d", i)
    stats = handler.stats
    assert (stats.accepted, stats.dropped, stats.buffered, stats.confirmed) == (25, 15, 10, 0)
    wait_for(lambda: handler.stats.last_error is not None, 30, 0.01)
    stats = handler.stats
    assert not stats.connected and stats.last_error and "cannot connect" in stats.last_error


@pytest.mark.parametrize("process", [True, False], ids=["shipper", "thread"])
def test_the_handler_ignores_what_its_own_machinery_logs(name: str, process: bool) -> None:
    # pika logs its connection failures from the publishing thread; shipping those would
    # feed the handler from inside itself while the broker is away
    root = logging.getLogger()
    old = root.level
    handler = AMQPHandler(
        f"amqp://guest:guest@127.0.0.1:{free_port()}/", exchange=name, timeout=0.1, process=process
    )
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    try:
        logging.getLogger("app").info("one")
        time.sleep(1.0)  # several failed connection attempts, each logged by pika
        assert handler.stats.accepted == 1
    finally:
        root.removeHandler(handler)
        root.setLevel(old)
        handler.close()


def test_records_wait_for_a_broker_that_comes_up_later(
    tmp_path: Path, name: str, logger: logging.Logger
) -> None:
    import pika

    # a broker with a durable exchange bound to a durable queue, then stopped
    data = tmp_path / "data"
    broker = start_leveret(data)
    port = broker.port
    conn = pika.BlockingConnection(pika.URLParameters(broker.url))
    ch = conn.channel()
    ch.exchange_declare(name, "fanout", durable=True)
    ch.queue_declare("kept", durable=True)
    ch.queue_bind("kept", name)
    conn.close()
    broker.stop()

    handler = AMQPHandler(
        f"amqp://guest:guest@127.0.0.1:{port}/", exchange=name, durable_exchange=True, timeout=60
    )
    logger.addHandler(handler)
    for i in range(100):
        logger.info("early %d", i)
    assert handler.stats.buffered == 100
    broker = start_leveret(data, extra=["--amqp-port", str(port)])
    try:
        for i in range(100):
            logger.info("late %d", i)
        handler.flush()
        stats = handler.stats
        assert (stats.confirmed, stats.dropped, stats.connected) == (200, 0, True)
        conn = pika.BlockingConnection(pika.URLParameters(broker.url))
        ch = conn.channel()
        bodies = []
        for _ in range(200):
            method, _props, body = ch.basic_get("kept", auto_ack=True)
            assert method is not None
            bodies.append(body)
        conn.close()
        import json

        assert [json.loads(b)["message"] for b in bodies] == [
            *(f"early {i}" for i in range(100)),
            *(f"late {i}" for i in range(100)),
        ]
    finally:
        broker.stop()
