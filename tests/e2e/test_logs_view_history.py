"""The Logs view's stream (/api/logs/stream) opens with the recent past of the ``logs``
stream, then live records, each once; and it picks up a ``logs`` exchange that appears (or
is declared again) after the view opened. An in-process broker per test."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pika
import pytest

import leveret
from leveret.management.logstap import HISTORY
from tests.e2e.browser import Page, chromium
from tests.support.logstream import LogStream

__all__ = ["chromium"]


class Stream(LogStream):
    """``GET /api/logs/stream`` of ``exchange`` in vhost /."""

    def __init__(self, broker: leveret.Broker, exchange: str = "logs") -> None:
        u = urlparse(broker.management_url)
        assert u.hostname is not None and u.port is not None
        super().__init__(u.hostname, u.port, f"/api/logs/stream?vhost=%2F&exchange={exchange}")

    def batches(self, seconds: float) -> Iterator[dict[str, Any]]:
        return self.batches_until(time.monotonic() + seconds)

    def messages_until(self, last: str, seconds: float = 60) -> list[str]:
        got: list[str] = []
        for batch in self.batches(seconds):
            got += [r["message"] for r in batch["records"]]
            if last in got:
                return got
        raise AssertionError(f"{last!r} never came; got {got[-5:]}")

    def wait_status(self, status: str, seconds: float = 30) -> dict[str, Any]:
        for batch in self.batches(seconds):
            if batch["status"] == status:
                return batch
        raise AssertionError(f"the view never was {status}")


def wait_for_row(p: Any, text: str, rows: str = "#log-list .log-row") -> None:
    """Until one of the view's ``rows`` holds ``text`` (20 s at most)."""
    p.wait_for_function(
        "([rows, t]) => [...document.querySelectorAll(rows)].some(r => r.textContent.includes(t))",
        arg=[rows, text],
        timeout=20_000,
    )


def emit(broker: leveret.Broker, lines: list[str], *args: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "leveret.cli.main", "emit-log", "--url", broker.url, *args],
        input="".join(f"{line}\n" for line in lines),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[leveret.Broker]:
    with leveret.Broker(management=True, data_dir=tmp_path / "data") as b:
        yield b


def _channel(broker: leveret.Broker) -> tuple[Any, Any]:
    conn = pika.BlockingConnection(pika.URLParameters(broker.url))
    return conn, conn.channel()


def test_the_view_opens_with_the_streams_recent_records_then_live_ones(
    broker: leveret.Broker,
) -> None:
    conn, ch = _channel(broker)
    ch.exchange_declare("logs", "fanout")
    ch.queue_declare("logs", durable=True, arguments={"x-queue-type": "stream"})
    ch.queue_bind("logs", "logs")
    conn.close()
    old = [f"old {i}" for i in range(HISTORY + 100)]
    emit(broker, old)
    stream = Stream(broker)
    try:
        history = stream.messages_until(old[-1])
        # bounded: the last HISTORY records, in order, each once
        assert history == old[-HISTORY:]
        emit(broker, ["new 0", "new 1"])
        live = stream.messages_until("new 1")
        assert live == ["new 0", "new 1"]
    finally:
        stream.close()


def test_an_exchange_that_appears_after_the_view_opened_is_picked_up(
    broker: leveret.Broker,
) -> None:
    stream = Stream(broker)
    try:
        waiting = stream.wait_status("waiting")
        assert "no exchange 'logs'" in str(waiting["error"])
        conn, ch = _channel(broker)
        ch.exchange_declare("logs", "fanout")  # as the first emit-log or receiver would
        stream.wait_status("live")
        emit(broker, ["first"])
        assert stream.messages_until("first") == ["first"]
        # deleted and declared again, of another type: waited for and bound anew
        ch.exchange_delete("logs")
        assert "'logs'" in str(stream.wait_status("waiting")["error"])
        ch.exchange_declare("logs", "direct")
        conn.close()
        stream.wait_status("live")
        emit(broker, ["second"], "--type", "direct", "--severity", "error")
        assert stream.messages_until("second") == ["second"]
    finally:
        stream.close()


def test_in_the_browser_the_view_shows_what_every_reader_reads(
    chromium: Any, broker: leveret.Broker
) -> None:
    """Found by a user, in the page: the record that declared ``logs`` (``leveret emit-log``
    declares the exchange and publishes at once) never shown, the broker's events shown as
    ``info binding ''``. Now the page shows that record, a failed login as the warning the
    lake files, and a body that is not a record whole, marked MALFORMED."""
    page = Page(chromium, broker.management_url)
    try:
        p = page.login("/logs")
        p.wait_for_selector("#logs-status[data-status=waiting]", timeout=20_000)
        emit(broker, ["disk full"], "--severity", "error")  # declares logs, then publishes
        wait_for_row(p, "disk full")
        conn, ch = _channel(broker)
        ch.basic_publish("logs", "", b'{"message": 5, "tag": "CORRUPTJSON"}')
        conn.close()
        wait_for_row(p, "CORRUPTJSON", "#log-list .log-row.malformed")
        rows = p.locator("#log-list .log-row").all_text_contents()
        disk = next(r for r in rows if "disk full" in r)
        assert " ERROR " in disk
        bad = next(r for r in rows if "CORRUPTJSON" in r)
        assert 'MALFORMED {"message": 5, "tag": "CORRUPTJSON"}' in bad
        page.shot("logs-view-malformed.png")
        assert page.errors == []
    finally:
        page.close()


def test_in_the_browser_the_history_shows_the_brokers_events_as_the_lake_files_them(
    chromium: Any, tmp_path: Path
) -> None:
    with leveret.Broker(
        management=True, data_dir=tmp_path / "data", plugins="rabbitmq_event_exchange"
    ) as b:
        from leveret.spark.pipeline import ensure_log_stream

        ensure_log_stream(b.url)
        conn, ch = _channel(b)
        ch.queue_bind("logs", "amq.rabbitmq.event", "user.authentication.failure")
        ch.queue_bind("logs", "amq.rabbitmq.event", "binding.*")
        ch.queue_declare("billing")
        ch.queue_bind("billing", "logs", "")
        conn.close()
        with pytest.raises(pika.exceptions.ProbableAuthenticationError):
            pika.BlockingConnection(
                pika.URLParameters(b.url.replace("guest:guest", "mallory:wrong"))
            )
        page = Page(chromium, b.management_url)
        try:
            p = page.login("/logs")
            wait_for_row(p, "user.authentication.failure")
            rows = p.locator("#log-list .log-row").all_text_contents()
            login = next(r for r in rows if "user.authentication.failure" in r)
            assert " WARNING " in login and " broker" in login
            assert "user.authentication.failure name=mallory by mallory" in login
            binding = next(r for r in rows if "destination_name=billing" in r)
            assert "binding.created source_name=logs destination_name=billing vhost=/ by guest" in (
                binding
            )
            assert " INFO " in binding and " broker" in binding
            page.shot("logs-view-broker-events.png")
            assert page.errors == []
        finally:
            page.close()
