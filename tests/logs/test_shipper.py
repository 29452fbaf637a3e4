"""``AMQPHandler``'s shipper process: what happens to records when the application, the
shipper or the pipe between them misbehaves. On both brokers, over real sockets."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

from leveret.logs import AMQPHandler
from tests.logs.conftest import Receiver, Shipping, start_receiver, wait_records
from tests.support.brokers import BrokerUnderTest

HANG = 120.0  # bounds a hang; speed is benchmarks/logs.py's business


def _shipper_pid(handler: AMQPHandler) -> int:
    return int(handler._publisher._proc.pid)  # type: ignore[union-attr]


def _wait_connected(handler: AMQPHandler) -> None:
    deadline = time.monotonic() + HANG
    while not handler.stats.connected:
        assert time.monotonic() < deadline, handler.stats
        time.sleep(0.05)


def test_records_outlive_an_application_killed_with_sigkill(
    broker: BrokerUnderTest, name: str, tmp_path: Path, receivers: list[Receiver]
) -> None:
    # The application dies without logging.shutdown: the shipper reads end-of-file,
    # publishes what it holds and exits.
    path = tmp_path / "killed.jsonl"
    start_receiver(receivers, broker, name, "--to", str(path))
    script = textwrap.dedent(f"""
        import logging, os, signal, sys
        from leveret.logs import AMQPHandler
        log = logging.getLogger("app")
        log.propagate = False
        log.addHandler(AMQPHandler({broker.url!r}, exchange={name!r}, timeout=60))
        for i in range(5000):
            log.warning("last words %04d", i)
        print(os.getpid(), flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    """)
    app = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=HANG
    )
    assert app.returncode == -signal.SIGKILL, app.stderr
    records = wait_records(path, 5000)
    assert [r["message"] for r in records] == [f"last words {i:04d}" for i in range(5000)]


def test_emit_returns_while_the_shipper_cannot_read_and_nothing_is_lost(
    shipping: Shipping, logger: logging.Logger
) -> None:
    # With the shipper stopped, the pipe fills (several MiB of records): emit keeps
    # returning, the rest waits in the handler, and all of it arrives once it reads again.
    path, handler = shipping(timeout=HANG)
    _wait_connected(handler)
    pid = _shipper_pid(handler)
    pad = "x" * 10_000
    os.kill(pid, signal.SIGSTOP)
    try:
        burst = threading.Thread(
            target=lambda: [logger.info("big %03d %s", i, pad) for i in range(400)], daemon=True
        )
        burst.start()
        burst.join(HANG)
        assert not burst.is_alive(), "emit blocked while the shipper was stopped"
        assert handler._publisher._pending  # type: ignore[union-attr]
    finally:
        os.kill(pid, signal.SIGCONT)
    handler.flush()
    stats = handler.stats
    assert (stats.confirmed, stats.dropped, stats.buffered) == (400, 0, 0)
    records = wait_records(path, 400)
    assert [r["message"][:7] for r in records] == [f"big {i:03d}" for i in range(400)]


def test_a_shipper_that_dies_is_replaced(shipping: Shipping, logger: logging.Logger) -> None:
    path, handler = shipping(timeout=HANG)
    logger.info("before")
    handler.flush()
    first = _shipper_pid(handler)
    os.kill(first, signal.SIGKILL)
    deadline = time.monotonic() + HANG
    while "gone" not in (handler.stats.last_error or "") and "exited" not in (
        handler.stats.last_error or ""
    ):
        logger.info("lost")  # the dead shipper cannot take these: counted as dropped
        assert time.monotonic() < deadline
        time.sleep(0.01)
    time.sleep(1.1)  # a replacement is started at most once a second
    logger.info("after")
    handler.flush()
    assert _shipper_pid(handler) != first
    stats = handler.stats
    assert stats.confirmed == 1 and stats.connected
    records = wait_records(path, 2)
    assert [r["message"] for r in records if r["message"] != "lost"] == ["before", "after"]


def test_a_forked_child_ships_through_its_own_shipper(
    shipping: Shipping, logger: logging.Logger
) -> None:
    path, handler = shipping(timeout=HANG)
    logger.info("parent")
    handler.flush()
    parent_shipper = _shipper_pid(handler)
    pid = os.fork()
    if pid == 0:  # the child: log, flush through a new shipper, leave without cleanup
        code = 1
        try:
            logger.info("child")
            handler.flush()
            ok = handler.stats.confirmed == 1 and _shipper_pid(handler) != parent_shipper
            code = 0 if ok else 1
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    logger.info("parent again")
    handler.flush()
    assert handler.stats.confirmed == 2
    records = wait_records(path, 3)
    assert sorted(r["message"] for r in records) == ["child", "parent", "parent again"]
