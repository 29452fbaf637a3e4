"""Memory and disk alarms from measurements, and the paging budget (issue 13): the
settings as RabbitMQ reads them, the monitor's decisions on given readings, and the
memory alarm over a real socket on Leveret and on a RabbitMQ node of the test's own."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from leveret.broker.broker import BrokerCore
from leveret.broker.message import Message
from leveret.server.config import Config, ConfigError, DiskFreeLimit, MemoryWatermark
from leveret.server.resources import ResourceMonitor
from leveret.server.state import Limits, ServerState
from tests.support.backlog import LeveretNode, Node, Publisher, RabbitMQNode, node_figures
from tests.support.mgmt import Api
from tests.support.waiting import wait_for

MiB = 1024 * 1024
GB = 10**9


# ------------------------------------------------------------------ settings
@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("0.4", MemoryWatermark(0.4, None)),
        ("1", MemoryWatermark(1.0, None)),
        ("0", MemoryWatermark(0.0, None)),
        ("512MiB", MemoryWatermark(None, 512 * MiB)),
        ("2GB", MemoryWatermark(None, 2 * GB)),
        ("1024k", MemoryWatermark(None, 1024 * 1024)),
        ("3G", MemoryWatermark(None, 3 * 1024**3)),
        ({"absolute": "1GiB"}, MemoryWatermark(None, 1024**3)),
        ({"relative": 0.5}, MemoryWatermark(0.5, None)),
    ],
)
def test_vm_memory_high_watermark_values(raw: Any, expected: MemoryWatermark) -> None:
    assert Config.load(env={}, vm_memory_high_watermark=raw).vm_memory_high_watermark == expected


@pytest.mark.parametrize("raw", ["1.5", "1073741824", "lots", "-0.1", "512 MiB", "5TB"])
def test_bad_vm_memory_high_watermark_is_one_line(raw: str) -> None:
    with pytest.raises(ConfigError) as info:
        Config.load(env={"LEVERET_VM_MEMORY_HIGH_WATERMARK": raw})
    assert str(info.value) == (
        f"invalid value for 'vm_memory_high_watermark': {raw!r} (a fraction of RAM up to "
        "1.0, or a size such as 512MiB or 2GB)"
    )


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("50MB", DiskFreeLimit(50_000_000, None)),
        ("1000000000", DiskFreeLimit(10**9, None)),
        (2_000_000, DiskFreeLimit(2_000_000, None)),
        ("{mem_relative, 1.0}", DiskFreeLimit(None, 1.0)),
        ("{mem_relative,2}", DiskFreeLimit(None, 2.0)),
        ("mem_relative:1.5", DiskFreeLimit(None, 1.5)),
        ({"relative": 1.5}, DiskFreeLimit(None, 1.5)),
        ({"absolute": "1GB"}, DiskFreeLimit(GB, None)),
    ],
)
def test_disk_free_limit_values(raw: Any, expected: DiskFreeLimit) -> None:
    assert Config.load(env={}, disk_free_limit=raw).disk_free_limit == expected


def test_defaults_and_limits_are_rabbitmqs() -> None:
    c = Config.load(env={})
    assert c.vm_memory_high_watermark == MemoryWatermark(0.4, None)
    assert c.vm_memory_high_watermark_paging_ratio == 0.5
    assert c.disk_free_limit == DiskFreeLimit(50_000_000, None)
    total = 8 * 1024**3
    assert c.vm_memory_high_watermark.limit(total) == int(0.4 * total)
    # an absolute watermark above the machine's memory is capped, as vm_memory_monitor
    assert MemoryWatermark(None, 16 * 1024**3).limit(total) == total
    assert DiskFreeLimit(None, 1.5).limit(total) == round(1.5 * total)


def test_settings_from_a_file(tmp_path: Path) -> None:
    path = tmp_path / "leveret.toml"
    path.write_text(
        '[server]\nvm_memory_high_watermark.absolute = "600MB"\n'
        "vm_memory_high_watermark_paging_ratio = 0.75\n"
        "disk_free_limit = {mem_relative = 1.0}\n"
    )
    c = Config.load(path, env={})
    assert c.vm_memory_high_watermark == MemoryWatermark(None, 600 * 10**6)
    assert c.vm_memory_high_watermark_paging_ratio == 0.75
    assert c.disk_free_limit == DiskFreeLimit(None, 1.0)


def test_bad_setting_on_the_command_line_is_one_line(tmp_path: Path) -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "leveret.cli.main",
            "server",
            "--data-dir",
            str(tmp_path),
            "--disk-free-limit",
            "plenty",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode != 0
    assert result.stderr.strip().splitlines() == [
        "Error: invalid value for 'disk_free_limit': 'plenty' (a size such as 50MB or 2GiB, "
        "or {mem_relative, 1.0})"
    ]


# ------------------------------------------------------------------ the monitor
class Conn:
    def __init__(self) -> None:
        self.calls: list[tuple[bool, str]] = []
        self.alarms_raised = 0

    def alarm_raised(self) -> None:
        self.alarms_raised += 1

    def set_blocked(self, blocked: bool, reason: str) -> None:
        self.calls.append((blocked, reason))

    def shutdown(self, reason: str) -> None: ...

    def abort(self) -> None: ...


class Readings:
    def __init__(self) -> None:
        self.rss = 100 * MiB
        self.disk: int | None = 10 * GB

    def read_rss(self) -> int:
        return self.rss

    def read_disk(self, path: Path) -> int | None:
        return self.disk


@pytest.fixture
def monitored(tmp_path: Path) -> Iterator[tuple[ResourceMonitor, Readings, ServerState, Conn]]:
    broker = BrokerCore.with_defaults()
    state = ServerState(broker, Limits(), lambda: None)
    conn = Conn()
    state.connections.add(conn)
    readings = Readings()
    config = Config.load(
        env={}, data_dir=tmp_path, vm_memory_high_watermark="1GiB", disk_free_limit="1GB"
    )
    monitor = ResourceMonitor(
        config, state, broker, rss=readings.read_rss, disk=readings.read_disk, total=8 * 1024**3
    )
    yield monitor, readings, state, conn
    monitor.close()


def test_memory_alarm_is_set_above_the_watermark_and_cleared_below(
    monitored: tuple[ResourceMonitor, Readings, ServerState, Conn],
) -> None:
    monitor, readings, state, conn = monitored
    monitor.check()
    assert state.alarms == set() and monitor.mem_used == 100 * MiB
    readings.rss = 1024 * MiB + 1
    monitor.check()
    # publishers are blocked by the connections themselves, at their next publish
    assert state.alarms == {"memory"} and conn.calls == [] and conn.alarms_raised == 1
    readings.disk = 999_999_999
    monitor.check()
    assert state.alarms == {"memory", "disk"}
    readings.rss = 900 * MiB
    monitor.check()
    assert state.alarms == {"disk"} and conn.calls == []  # still blocked: the disk
    readings.disk = 2 * GB
    monitor.check()
    assert state.alarms == set() and conn.calls == [(False, "")]


def test_the_paging_budget_follows_resident_memory(
    monitored: tuple[ResourceMonitor, Readings, ServerState, Conn],
) -> None:
    monitor, readings, state, _ = monitored
    budget = state.broker.memory
    assert monitor.paging_threshold == 512 * MiB
    readings.rss = 300 * MiB
    monitor.check()
    assert budget.limit == budget.used + 212 * MiB  # the headroom below the threshold
    # a queue holding bodies in memory, without a pager: nothing can be released
    q, _ = state.broker.vhosts["/"].declare_queue("q")
    for _ in range(10):
        q.enqueue(Message("", "q", b"\x00\x01q", b"\x00\x00", b"x" * MiB))
    readings.rss = 600 * MiB
    monitor.check()
    assert budget.limit == max(0, budget.used - 88 * MiB)
    assert state.alarms == set()


# ------------------------------------------------------------------ over the wire
def _node(kind: str, request: pytest.FixtureRequest) -> Node:
    if kind == "leveret":
        # a watermark below what Leveret needs idle: the alarm is on from the start
        return LeveretNode(None, None, ["--vm-memory-high-watermark", "8MiB"])
    node: RabbitMQNode = request.getfixturevalue("own_rabbitmq")
    node.node.ctl("set_vm_memory_high_watermark", "absolute", "8MiB")
    return node


@pytest.mark.parametrize("kind", ["leveret", "rabbitmq"])
def test_memory_alarm_blocks_a_publisher_at_its_first_publish(
    kind: str, request: pytest.FixtureRequest
) -> None:
    node = _node(kind, request)
    try:
        api = Api(node.http_url)
        assert wait_for(lambda: api.call("GET", "/api/health/checks/alarms")[0] == 503, 30, 0.2)
        name = api.get("/api/overview")["node"]
        assert api.call("GET", "/api/health/checks/alarms") == (
            503,
            {
                "status": "failed",
                "reason": "There are alarms in effect in the cluster",
                "alarms": [{"node": name, "resource": "memory"}],
            },
        )
        me = node_figures(api, lambda n: n["mem_limit"] == 8 * MiB and n["mem_alarm"])
        assert me["mem_used"] > 8 * MiB
        assert me["mem_alarm"] is True and me["mem_calculation_strategy"] == "rss"

        pub = Publisher(node, "q", confirms=False)
        pub.declare(durable=False)  # not a publish: not blocked
        time.sleep(0.5)
        pub._poll()
        assert pub.result.blocked == []
        pub.publish(1, 10, persistent=False)
        deadline = time.monotonic() + 10
        while not pub.result.blocked and time.monotonic() < deadline:
            time.sleep(0.1)
            pub._poll()
        assert pub.result.blocked == ["low on memory"]
        if isinstance(node, RabbitMQNode):
            # (Leveret's watermark is set at start; RabbitMQ's can be raised live)
            node.node.ctl("set_vm_memory_high_watermark", "0.4")
            deadline = time.monotonic() + 10
            while not pub.result.unblocked and time.monotonic() < deadline:
                time.sleep(0.1)
                pub._poll()
            assert pub.result.unblocked == 1
        pub.close()  # a blocked connection reads nothing, a close-ok included
        if isinstance(node, RabbitMQNode):
            Api(node.http_url).delete("/api/queues/%2F/q")
        if isinstance(node, LeveretNode):
            status = subprocess.run(
                [sys.executable, "-m", "leveret.cli.main", "ctl", "status"],
                capture_output=True,
                text=True,
                timeout=60,
                env={**os.environ, "LEVERET_CTL_URL": node.http_url},
            )
            assert f"Alarms\n\nMemory alarm on node {name}\n" in status.stdout
    finally:
        if isinstance(node, LeveretNode):
            node.close()
        else:
            assert isinstance(node, RabbitMQNode)
            node.node.ctl("set_vm_memory_high_watermark", "0.4")
