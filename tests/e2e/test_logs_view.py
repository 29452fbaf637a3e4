"""The Logs view (/logs) in headless Chromium, and its stream (/api/logs/stream) over a
plain socket: records emitted with ``leveret emit-log`` after the page opened appear,
coloured by severity; filters, search, pause and a record's fields; what is dropped when
records come faster than a view takes them, or a browser reads too slowly, is counted; and
the view's consumer goes away when nobody watches."""

from __future__ import annotations

import base64
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import pytest

from tests.e2e.browser import Page, chromium
from tests.support.logstream import LogStream
from tests.support.mgmt import Site, q
from tests.support.waiting import wait_for

__all__ = ["chromium"]


def amqp_url(site: Site) -> str:
    b = site.broker
    return f"amqp://guest:guest@{b.host}:{b.port}/{quote(site.vhost, safe='')}"


def emit(site: Site, *args: str, lines: str | None = None) -> None:
    """``leveret emit-log`` into the test's vhost (the real tool, over AMQP)."""
    result = subprocess.run(
        [sys.executable, "-m", "leveret.cli.main", "emit-log", "--url", amqp_url(site), *args],
        input=lines,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr


def declare_logs_exchange(site: Site) -> None:
    conn = site.connect()
    conn.channel().exchange_declare("logs", "fanout")
    conn.close()


def rows_with(page: Any, token: str) -> list[str]:
    return [t for t in page.locator("#log-list .log-row").all_text_contents() if token in t]


def test_logs_view_live_filters_pause_and_details(chromium: Any, leveret_site: Site) -> None:
    site = leveret_site
    declare_logs_exchange(site)
    token = uuid.uuid4().hex[:8]
    view = Page(chromium, site.broker.http_url)
    try:
        p = view.login(f"/logs?vhost={quote(site.vhost, safe='')}")
        p.wait_for_selector("#logs-status[data-status=live]", timeout=20_000)
        # emitted after the page opened, shown within a few seconds
        emit(
            site,
            "--severity",
            "error",
            "--app",
            "billing",
            "--facility",
            "daemon",
            f"disk almost full {token}",
        )
        p.wait_for_function(
            "t => [...document.querySelectorAll('#log-list .log-row')]"
            ".some(r => r.textContent.includes(t))",
            arg=token,
            timeout=10_000,
        )
        emit(site, "--app", "web", "--severity", "info", lines=f"GET /health {token}\n")
        emit(site, "--app", "web", "--severity", "warning", lines=f"slow request {token}\n")
        emit(site, "--app", "web", "--severity", "critical", lines=f"out of memory {token}\n")
        p.wait_for_function(
            "t => [...document.querySelectorAll('#log-list .log-row')]"
            ".filter(r => r.textContent.includes(t)).length === 4",
            arg=token,
            timeout=10_000,
        )
        # newest at the bottom
        assert "out of memory" in rows_with(p, token)[-1]
        # coloured as the terminal receiver colours them: info plain, error red,
        # critical white on red
        colour = p.evaluate("""() => Object.fromEntries([...document.querySelectorAll(
            '#log-list .log-row')].map(r => [r.dataset.severity, [getComputedStyle(r).color,
            getComputedStyle(r).backgroundColor]]))""")
        assert colour["error"][0] == "rgb(239, 107, 107)"
        assert colour["warning"][0] == "rgb(229, 192, 123)"
        assert colour["critical"] == ["rgb(255, 255, 255)", "rgb(179, 38, 30)"]
        assert colour["info"][0] == "rgb(213, 218, 225)"
        view.shot("logs.png")

        # filters: severity chips, app, free text; the URL keeps them
        p.click(".sev-chip[data-severity=info]")
        p.wait_for_function(
            "t => ![...document.querySelectorAll('#log-list .log-row')]"
            ".some(r => r.textContent.includes('GET /health ' + t))",
            arg=token,
        )
        assert len(rows_with(p, token)) == 3
        p.select_option("#logs-app", "web")
        p.wait_for_function(
            "t => [...document.querySelectorAll('#log-list .log-row')]"
            ".filter(r => r.textContent.includes(t)).length === 2",
            arg=token,
        )
        assert "severity=debug%2Cwarning%2Cerror%2Ccritical" in p.url and "app=web" in p.url
        p.select_option("#logs-app", "")
        p.fill("#logs-search", f"almost full {token}")
        p.wait_for_function(
            "t => [...document.querySelectorAll('#log-list .log-row')]"
            ".filter(r => r.textContent.includes(t)).length === 1",
            arg=token,
        )
        assert "billing" in rows_with(p, token)[0]

        # a record's fields
        p.click(f"#log-list .log-row:has-text('{token}')")
        p.wait_for_selector("#record-detail:not([hidden])")
        detail = p.text_content("#record-detail") or ""
        for text in (
            "billing",
            "daemon",
            f"disk almost full {token}",
            "routing key",
            "application/json",
            "redelivered",
        ):
            assert text in detail, text
        view.shot("logs-record.png")
        p.keyboard.press("Escape")
        p.wait_for_selector("#record-detail", state="hidden")

        # pause: new records wait, and come when resumed
        p.fill("#logs-search", token)
        p.keyboard.press("Escape")  # leave the search box; "p" is the shortcut
        p.keyboard.press("p")
        assert p.text_content("#logs-pause") == "Resume"
        emit(site, "--severity", "error", "--app", "billing", f"after pause {token}")
        p.wait_for_function(
            "document.querySelector('#logs-pause').textContent === 'Resume (1)'", timeout=10_000
        )
        assert not any("after pause" in r for r in rows_with(p, token))
        p.click("#logs-pause")
        p.wait_for_function(
            "t => [...document.querySelectorAll('#log-list .log-row')]"
            ".some(r => r.textContent.includes('after pause ' + t))",
            arg=token,
        )
        assert view.errors == []
    finally:
        view.close()


# ------------------------------------------------------------- the stream itself
class Stream(LogStream):
    """``GET /api/logs/stream`` of the site's ``logs`` exchange."""

    def __init__(self, site: Site, rcvbuf: int | None = None) -> None:
        b = site.broker
        path = f"/api/logs/stream?vhost={quote(site.vhost, safe='')}&exchange=logs"
        super().__init__(b.host, b.http_port, path, "Accept: text/event-stream\r\n", rcvbuf)

    def batches(self, until: float) -> Iterator[dict[str, Any]]:
        return self.batches_until(until)

    def wait_live(self) -> None:
        for batch in self.batches(time.monotonic() + 20):
            if batch["status"] == "live":
                return
        raise AssertionError("the view's consumer never went live")


def test_faster_than_the_view_takes_it_drops_and_counts(leveret_site: Site) -> None:
    """10,000 records in a burst: the view takes what it can, drops what waits beyond its
    limit (the oldest, counted) and goes on with the newest, down to the last record
    (a user saw the view stop at the 50th of 5,000, the rest purged); received + dropped
    is everything."""
    site = leveret_site
    declare_logs_exchange(site)
    stream = Stream(site)
    try:
        stream.wait_live()
        n = 10_000
        emit(site, "--app", "burst", lines="".join(f"burst {i}\n" for i in range(n)))
        received: list[str] = []
        dropped = 0
        for batch in stream.batches(time.monotonic() + 60):
            received += [r["message"] for r in batch["records"]]
            dropped = batch["dropped"]["broker"]
            if len(received) + dropped >= n:
                break
        assert dropped > 0
        assert len(received) + dropped == n
        numbers = [int(m.split()[1]) for m in received]
        assert numbers == sorted(numbers)  # in order, whole runs with gaps between
        assert numbers[0] == 0  # the first ones the view took at once
        assert numbers[-1] == n - 1  # and it went on with the newest, to the last
        assert numbers[-1000:] == list(range(n - 1000, n))  # the queue kept the newest
        assert len(set(numbers)) == len(numbers)
    finally:
        stream.close()


def test_a_slow_browser_loses_its_oldest_records_and_is_told(leveret_site: Site) -> None:
    """A reader that stops reading: the server's buffer for it drops its oldest records,
    counts them, and the tap and the broker carry on (another reader gets everything)."""
    site = leveret_site
    declare_logs_exchange(site)
    slow = Stream(site, rcvbuf=4096)
    fast = Stream(site)
    try:
        slow.wait_live()
        fast.wait_live()
        # under the view's rate (200/s, so the broker drops nothing), big records (8 kB)
        # so that the slow reader's socket buffers and its 4 MiB on the server fill soon
        n = 1_200
        sender = subprocess.Popen(
            [
                sys.executable,
                "-c",
                f"""
import sys, time
for i in range({n}):
    print(f"slow reader test {{i}} " + "x" * 8000, flush=(i % 15 == 0))
    if i % 15 == 14:
        time.sleep(0.1)
""",
            ],
            stdout=subprocess.PIPE,
        )
        emitter = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "leveret.cli.main",
                "emit-log",
                "--url",
                amqp_url(site),
                "--app",
                "slow",
            ],
            stdin=sender.stdout,
        )
        fast_count = 0
        for batch in fast.batches(time.monotonic() + 90):
            fast_count += len(batch["records"])
            if fast_count >= n:
                break
        assert emitter.wait(60) == 0 and sender.wait(10) == 0
        assert fast_count == n
        got: list[dict[str, Any]] = []
        last: dict[str, Any] = {}
        for batch in slow.batches(time.monotonic() + 30):
            got += batch["records"]
            last = batch
            if got and got[-1]["message"].startswith(f"slow reader test {n - 1} "):
                break
        assert last["dropped"]["server"] > 0
        assert last["dropped"]["broker"] == 0
        assert len(got) + last["dropped"]["server"] == n
        assert got[-1]["message"].startswith(f"slow reader test {n - 1} ")
    finally:
        slow.close()
        fast.close()


def test_nobody_watching_no_consumer(leveret_site: Site) -> None:
    """The view's consumer exists while a page reads the stream, and goes (with its
    queue) a few seconds after the last one leaves."""
    site = leveret_site
    declare_logs_exchange(site)
    api = site.api

    def view_connections() -> list[dict[str, Any]]:
        return [
            c
            for c in api.get(f"/api/vhosts/{q(site.vhost)}/connections")
            if str(c.get("user_provided_name", "")).startswith("leveret dashboard logs view")
        ]

    assert view_connections() == []
    stream = Stream(site)
    stream.wait_live()
    assert wait_for(lambda: len(view_connections()) == 1, timeout=10)
    queues = [
        x for x in api.get(f"/api/queues/{q(site.vhost)}") if x["name"].startswith("amq.gen-")
    ]
    assert len(queues) == 1 and queues[0]["exclusive"]
    # bounded: past 1,000 waiting records the broker drops the oldest
    assert queues[0]["arguments"] == {"x-max-length": 1000}
    stream.close()
    assert wait_for(lambda: view_connections() == [], timeout=30)
    assert [
        x for x in api.get(f"/api/queues/{q(site.vhost)}") if x["name"].startswith("amq.gen-")
    ] == []


def test_the_view_runs_with_the_users_own_rights(leveret_site: Site) -> None:
    """The site's user may not configure amq.gen-* queues: the view says so, as AMQP
    refused it, and shows nothing of the vhost's logs."""
    site = leveret_site
    declare_logs_exchange(site)
    b = site.broker
    sock = socket.create_connection((b.host, b.http_port))
    try:
        auth = base64.b64encode(f"{site.user}:{site.password}".encode()).decode()
        sock.sendall(
            f"GET /api/logs/stream?vhost={quote(site.vhost, safe='')} HTTP/1.1\r\n"
            f"Host: x\r\nAuthorization: Basic {auth}\r\n\r\n".encode()
        )
        sock.settimeout(20)
        data = b""
        deadline = time.monotonic() + 20
        while b'"status":"error"' not in data and time.monotonic() < deadline:
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
        text = data.decode()
        assert "ACCESS_REFUSED - access to queue 'amq.gen-" in text
        assert f"refused for user '{site.user}'" in text
    finally:
        sock.close()


@pytest.mark.parametrize("path", ["/api/logs/stream?vhost=no-such-vhost"])
def test_unknown_vhost_is_not_found(leveret_site: Site, path: str) -> None:
    status, body = leveret_site.api.call("GET", path)
    assert status == 404 and body == {"error": "Object Not Found", "reason": "Not Found"}
