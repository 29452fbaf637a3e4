"""Backlogs larger than memory (issue 13), on Leveret and on a RabbitMQ node of the
test's own configured the same way.

Each broker gets a memory high watermark HEADROOM above its own idle resident memory
(Leveret idles near 60 MB, RabbitMQ near 130 MB), and a backlog of 4 x HEADROOM: four
times what it may use for messages. Measured here, RabbitMQ 3.10.8 blocks its publisher
(connection.blocked, low on memory) during such a fill and peaks above its watermark,
then pages and unblocks; Leveret pages from half its watermark and never blocks. So the
fill and drain are checked on both, the no-blocking and the memory bound on Leveret."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.server.conftest import need_rabbitmq
from tests.support.backlog import (
    LeveretNode,
    MiB,
    Node,
    Publisher,
    RabbitMQNode,
    drain,
    node_figures,
    queue_depth,
)
from tests.support.mgmt import Api
from tests.support.tmpfs import small_tmpfs
from tests.support.waiting import wait_for

HEADROOM = 32 * MiB
BACKLOG = 4 * HEADROOM
SIZE = 32 * 1024
COUNT = BACKLOG // SIZE
PREFETCH = 100


@contextlib.contextmanager
def own_broker(
    kind: str, base: Path | None = None, headroom: int | None = HEADROOM, management: bool = False
) -> Iterator[Node]:
    """A broker of the test's own, for tests that kill it or put its data on a tmpfs."""
    node: Node
    if kind == "leveret":
        node = LeveretNode(base, headroom)
    else:
        need_rabbitmq()
        node = RabbitMQNode(base, headroom, management=management)
    try:
        yield node
    finally:
        node.close()


@pytest.fixture(params=["leveret", "rabbitmq"])
def node(request: pytest.FixtureRequest) -> Iterator[Node]:
    """Leveret of the test's own, or the session's own RabbitMQ node (its watermark set
    HEADROOM above what it holds now), each with a watermark HEADROOM above its footprint."""
    if request.param == "leveret":
        with own_broker("leveret") as lev:
            yield lev
        return
    rmq: RabbitMQNode = request.getfixturevalue("own_rabbitmq")
    rmq.set_headroom(HEADROOM)
    yield rmq


def test_backlog_of_four_times_the_memory_fills_and_drains_in_order(node: Node) -> None:
    pub = Publisher(node, "backlog", confirms=False)
    pub.declare(durable=False)
    res = pub.publish(COUNT, SIZE, persistent=False, sample=node.rss)
    wait_for(lambda: queue_depth(node, "backlog") >= COUNT, 300, 0.2)
    assert queue_depth(node, "backlog") == COUNT
    seen, drain_peak, intact = drain(node, "backlog", COUNT, SIZE, PREFETCH, node.rss)
    pub.delete_queue()
    pub.close()
    assert seen == list(range(COUNT))
    assert intact
    print(
        f"{node.kind}: watermark {node.watermark / MiB:.0f} MiB, peak RSS filling "
        f"{res.peak_rss / MiB:.0f} MiB, draining {drain_peak / MiB:.0f} MiB, "
        f"blocked {len(res.blocked)} times"
    )
    if node.kind == "leveret":
        assert res.blocked == []
        assert max(res.peak_rss, drain_peak) < node.watermark


def test_a_lazy_queue_keeps_its_memory_flat(node: Node) -> None:
    """A lazy queue's resident memory does not grow with its backlog: after the first
    quarter of the backlog, the other three quarters add a small fraction of their size
    (measured: Leveret +-2 MiB, RabbitMQ +14 to +27 MiB for 192 MiB added)."""
    pub = Publisher(node, "lazy", confirms=True)
    pub.declare(durable=False, arguments={"x-queue-mode": "lazy"})
    quarter = COUNT // 4
    after: list[int] = []
    for k in range(4):
        pub.publish(quarter, SIZE, persistent=False, window=64, start=k * quarter)
        time.sleep(1.0)
        after.append(node.rss())
    assert queue_depth(node, "lazy") == 4 * quarter
    pub.delete_queue()
    pub.close()
    grew = after[-1] - after[0]
    print(
        f"{node.kind}: RSS after each quarter of {BACKLOG // MiB} MiB: "
        f"{[round(a / MiB) for a in after]} MiB"
    )
    assert grew < 3 * quarter * SIZE // 4


# ------------------------------------------------------------------------ the disk alarm
@pytest.fixture
def small_disk() -> Iterator[Path]:
    """A 96 MiB tmpfs (mounted as root, unmounted after)."""
    with small_tmpfs("96m") as where:
        yield where


def _alarms_section(status: str, node_name: str) -> list[str]:
    lines = status.replace("\x1b[1m", "").replace("\x1b[0m", "").splitlines()
    start = lines.index("Alarms") + 2
    end = lines.index("", start)
    return [line.replace(node_name, "NODE") for line in lines[start:end]]


def _status(node: Node) -> list[str]:
    if isinstance(node, RabbitMQNode):
        out = node.node.ctl("status").stdout
        name = node.node.name
    else:
        env = {**os.environ, "LEVERET_CTL_URL": node.http_url}
        out = subprocess.run(
            [sys.executable, "-m", "leveret.cli.main", "ctl", "status"],
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
        ).stdout
        name = Api(node.http_url).get("/api/overview")["node"]
    return _alarms_section(out, name)


@pytest.mark.parametrize("kind", ["leveret", "rabbitmq"])
def test_disk_alarm_blocks_publishers_until_space_returns(kind: str, small_disk: Path) -> None:
    """The data directory on a 96 MiB file system, the default disk_free_limit (50 MB):
    filling the disk below it raises the disk alarm, which blocks publishers and shows in
    /api/nodes, the health checks and ctl status; freeing space clears it and unblocks
    them. (RabbitMQ checks every 10 s while alarmed, hence the long waits.)"""
    with own_broker(kind, base=small_disk / "data", headroom=None, management=True) as node:
        api = Api(node.http_url)
        assert api.get("/api/health/checks/alarms") == {"status": "ok"}
        me = node_figures(api)
        assert (me["disk_free_alarm"], me["disk_free_limit"]) == (False, 50_000_000)
        assert me["disk_free"] > 50_000_000
        assert _status(node) == ["(none)"]
        pub = Publisher(node, "q", confirms=False)
        pub.declare(durable=True)

        filler = small_disk / "filler"
        with open(filler, "wb") as f:
            f.write(b"\0" * (shutil.disk_usage(small_disk).free - 30_000_000))
        sent = 0
        deadline = time.monotonic() + 60
        while not pub.result.blocked and time.monotonic() < deadline:
            pub.publish(1, 1000, persistent=True, start=sent)
            sent += 1
            pub._poll()
            time.sleep(0.05)
        assert pub.result.blocked == ["low on disk"]

        me = node_figures(api, lambda n: n["disk_free_alarm"] is True)
        assert me["disk_free"] < 50_000_000
        alarm = [{"node": me["name"], "resource": "disk space"}]
        assert api.call("GET", "/api/health/checks/alarms") == (
            503,
            {
                "status": "failed",
                "reason": "There are alarms in effect in the cluster",
                "alarms": alarm,
            },
        )
        assert api.call("GET", "/api/health/checks/local-alarms") == (
            503,
            {
                "status": "failed",
                "reason": "There are alarms in effect on the node",
                "alarms": alarm,
            },
        )
        assert _status(node) == ["Free disk space alarm on node NODE"]

        filler.unlink()
        deadline = time.monotonic() + 60
        while not pub.result.unblocked and time.monotonic() < deadline:
            time.sleep(0.2)
            pub._poll()
        assert pub.result.unblocked == 1
        assert api.get("/api/health/checks/alarms") == {"status": "ok"}
        assert node_figures(api, lambda n: n["disk_free_alarm"] is False)
        # what the blocked publisher sent meanwhile was not lost
        pub.publish(1, 1000, persistent=True, start=sent)
        wait_for(lambda: queue_depth(node, "q") >= sent + 1, 30, 0.2)
        assert queue_depth(node, "q") == sent + 1
        pub.close()


# ------------------------------------------------------------------------ kill -9
@pytest.mark.parametrize("kind", ["leveret", "rabbitmq"])
def test_kill_9_with_a_paged_backlog_loses_no_confirmed_message(kind: str) -> None:
    """Persistent messages to a durable queue, confirmed, 4 x the memory headroom (so
    mostly paged); the broker is killed with SIGKILL while more are being published;
    after a restart every confirmed message is there, in order, intact."""
    with own_broker(kind) as node:
        pub = Publisher(node, "kept", confirms=True)
        pub.declare(durable=True)
        t0 = time.monotonic()
        pub.publish(COUNT, SIZE, persistent=True)
        t1 = time.monotonic()
        # more, most of them unconfirmed at the moment of the crash
        more = 64
        pub.publish(more, SIZE, persistent=True, start=COUNT, window=10**9, wait=False)
        pub._poll()
        confirmed = pub.result.confirmed
        assert confirmed >= COUNT
        node.kill9()
        pub.close()
        t2 = time.monotonic()
        node.restart()
        t3 = time.monotonic()
        depth = queue_depth(node, "kept")
        assert depth >= confirmed
        seen, _, intact = drain(node, "kept", depth, SIZE, PREFETCH)
        print(
            f"{kind}: published {t1 - t0:.1f}s, restarted {t3 - t2:.1f}s, "
            f"drained {time.monotonic() - t3:.1f}s; {confirmed} confirmed, {depth} kept"
        )
        assert intact
        assert seen[:confirmed] == list(range(confirmed))
        assert seen == list(range(len(seen)))
