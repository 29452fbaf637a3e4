"""Failed logins and handshakes that never finish leave nothing behind: after thousands of
them a broker's file descriptors are where they were, and its memory nearly so."""

from __future__ import annotations

import socket
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from pamqp import commands

from tests.support.brokers import BrokerUnderTest, start_leveret
from tests.support.rawclient import RawClient


def fds(broker: BrokerUnderTest) -> int:
    assert broker.process is not None
    return len(list(Path(f"/proc/{broker.process.pid}/fd").iterdir()))


def rss_kib(broker: BrokerUnderTest) -> int:
    assert broker.process is not None
    for line in Path(f"/proc/{broker.process.pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def failed_login(broker: BrokerUnderTest, i: int) -> None:
    with RawClient(broker.host, broker.port, timeout=10) as c:
        c.send(b"AMQP\x00\x00\x09\x01")
        c.expect(commands.Connection.Start)
        caps = {"authentication_failure_close": bool(i % 2)}
        c.send_method(
            0,
            commands.Connection.StartOk(
                client_properties={"capabilities": caps},
                mechanism="PLAIN",
                response=f"\0guest\0wrong-{i}",
            ),
        )
        # connection.close (or nothing), then the end; most answer close-ok as clients do,
        # every tenth leaves the broker to wait for it until its timeout
        while (frame := c.recv_frame()) is not None:
            if isinstance(frame[1], commands.Connection.Close) and i % 10 != 1:
                c.send_method(0, commands.Connection.CloseOk())


def half_open(broker: BrokerUnderTest, i: int) -> socket.socket:
    s = socket.create_connection((broker.host, broker.port), timeout=10)
    s.sendall(b"AMQP\x00\x00"[: i % 6])  # part of a protocol header, or nothing
    return s


def settle(broker: BrokerUnderTest, baseline: int, timeout: float = 60) -> int:
    """The broker's descriptor count once closed sockets are gone."""
    deadline = time.monotonic() + timeout
    count = fds(broker)
    while count > baseline and time.monotonic() < deadline:
        time.sleep(0.2)
        count = fds(broker)
    return count


def test_failed_logins_and_half_open_handshakes_leave_nothing_behind(tmp_path: Path) -> None:
    config = tmp_path / "leveret.toml"
    config.write_text("handshake_timeout = 1000\n")
    broker = start_leveret(extra=["--config", str(config)])
    try:
        with ThreadPoolExecutor(16) as pool:
            list(pool.map(lambda i: failed_login(broker, i), range(200)))  # warm up
        baseline_fds = settle(broker, 0, timeout=2)
        baseline_rss = rss_kib(broker)
        with ThreadPoolExecutor(16) as pool:
            list(pool.map(lambda i: failed_login(broker, i), range(2000)))
        sockets = [half_open(broker, i) for i in range(600)]
        # the broker ends each one at its handshake timeout (1 s here)
        for s in sockets:
            s.settimeout(30)
            try:
                while s.recv(100):
                    pass
            except ConnectionError:
                pass
            s.close()
        assert settle(broker, baseline_fds) <= baseline_fds
        grown = rss_kib(broker) - baseline_rss
        assert grown < 16 * 1024, f"RSS grew by {grown} KiB"
        # and the broker still serves
        with RawClient(broker.host, broker.port) as c:
            c.handshake()
    finally:
        broker.stop()
