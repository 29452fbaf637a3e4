"""The log system under a stopped consumer (issue 13): the durable archive queue of a
stopped ``receive-logs --queue archive --durable`` collects an hour's worth of records
(a service logging 50 records a second: 180,000), several times the memory Leveret may
use for messages, while ``emit-log`` and ``AMQPHandler`` go on publishing; Leveret pages the backlog
to disk, so they are never blocked, and the receiver gets every record when it is back.

Leveret only: RabbitMQ 3.10.8 given the same small watermark blocks its publishers
during such a fill (see tests/server/test_backlog.py)."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from leveret.logs import AMQPHandler
from tests.logs.conftest import Receiver, emit, read_records, start_receiver
from tests.support.backlog import LeveretNode, MiB

HOUR = 180_000  # an hour at 50 records a second
HEADROOM = 16 * MiB


def _lines(path: Path) -> int:
    try:
        with open(path, "rb") as f:
            return sum(chunk.count(b"\n") for chunk in iter(lambda: f.read(1 << 20), b""))
    except FileNotFoundError:
        return 0


@pytest.fixture
def node() -> Iterator[LeveretNode]:
    n = LeveretNode(None, HEADROOM)
    yield n
    n.close()


def test_an_hour_of_records_for_a_stopped_archive_never_blocks_the_publishers(
    node: LeveretNode, name: str, tmp_path: Path, receivers: list[Receiver]
) -> None:
    broker = node.broker
    path = tmp_path / "archive.jsonl"
    args = ("--queue", "archive", "--durable", "--to", str(path))
    assert start_receiver(receivers, broker, name, *args).stop() == 0

    half = HOUR // 2
    peak = 0
    t0 = time.monotonic()
    lines = "".join(f"emitted {i:06d}\n" for i in range(half)).encode()
    result = emit(broker, name, "--persistent", stdin=lines)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"Sent {half} records to exchange '{name}' (fanout)"
    peak = max(peak, node.rss())

    logger = logging.getLogger(f"test.{name}")
    logger.propagate = False
    handler = AMQPHandler(broker.url, exchange=name, persistent=True, timeout=300, process=False)
    logger.addHandler(handler)
    try:
        for i in range(half):
            logger.warning("handled %06d", i)
            if i % 20_000 == 0:
                peak = max(peak, node.rss())
        handler.flush()
        stats = handler.stats
        assert (stats.confirmed, stats.dropped, stats.nacked) == (half, 0, 0)
    finally:
        logger.removeHandler(handler)
        handler.close()
    peak = max(peak, node.rss())

    # the backlog went to disk: no alarm, no blocked publisher, memory under the watermark
    assert not [line for line in node.log if "vm_memory_high_watermark set" in line]
    assert peak < node.watermark

    t1 = time.monotonic()
    start_receiver(receivers, broker, name, *args)
    deadline = time.monotonic() + 240
    while _lines(path) < HOUR and time.monotonic() < deadline:
        time.sleep(0.5)
    records = read_records(path)
    print(
        f"published {t1 - t0:.0f} s, received {time.monotonic() - t1:.0f} s; "
        f"peak RSS {peak / MiB:.0f} MiB, watermark {node.watermark / MiB:.0f} MiB"
    )
    messages = [r["message"] for r in records]
    assert messages[:half] == [f"emitted {i:06d}" for i in range(half)]
    assert messages[half:] == [f"handled {i:06d}" for i in range(half)]
