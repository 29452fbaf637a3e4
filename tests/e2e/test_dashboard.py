"""The dashboard in headless Chromium (Debian's ``chromium``, driven by Playwright with
``executable_path``; no browser is downloaded): log in, publish through AMQP, and see the
live message rates and the queue depth. A screenshot is kept in test-artifacts/."""

from __future__ import annotations

import os
import shutil
import threading
import time
from pathlib import Path

import pika
import pytest

from tests.mgmt import Site

CHROMIUM = os.environ.get("LEVERET_CHROMIUM", "/usr/bin/chromium")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync"]
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


def needs_browser() -> None:
    missing = []
    try:
        import playwright  # noqa: F401
    except ImportError:
        missing.append("the playwright package")
    if not (Path(CHROMIUM).exists() or shutil.which(CHROMIUM)):
        missing.append("Debian's chromium")
    if missing:
        message = " and ".join(missing) + " (scripts/test installs them)"
        if IN_CI:
            pytest.fail(message)
        pytest.skip(message)


class Publisher(threading.Thread):
    """Publishes to a queue nobody consumes (its depth grows) and to one a consumer
    acknowledges (deliver and ack rates), until stopped."""

    def __init__(self, site: Site) -> None:
        super().__init__(daemon=True)
        self.site = site
        self.stop = threading.Event()
        self.published_to_depth = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        b = self.site.broker
        try:
            conn = pika.BlockingConnection(pika.ConnectionParameters(
                b.host, b.port, virtual_host=self.site.vhost,
                client_properties={"connection_name": "dashboard-publisher"}))
            ch = conn.channel()
            ch.queue_declare("dash-depth")
            ch.queue_declare("dash-flow")
            ch.confirm_delivery()
            ch.basic_consume("dash-flow",
                             lambda c, m, p, body: c.basic_ack(m.delivery_tag))
            while not self.stop.is_set():
                for _ in range(10):
                    ch.basic_publish("", "dash-depth", b"depth")
                    self.published_to_depth += 1
                    ch.basic_publish("", "dash-flow", b"flow")
                conn.process_data_events(0.1)
            conn.process_data_events(0.5)
            conn.close()
        except BaseException as exc:  # reported by the test
            self.error = exc


def test_dashboard_shows_rates_and_depth(leveret_site: Site) -> None:
    needs_browser()
    from playwright.sync_api import sync_playwright

    site = leveret_site
    publisher = Publisher(site)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        try:
            page = browser.new_page(viewport={"width": 1300, "height": 1500})
            errors: list[str] = []
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            page.goto(site.broker.http_url + "/?refresh=500")
            page.wait_for_selector("#login:not([hidden])")
            page.fill("#username", "guest")
            page.fill("#password", "wrong")
            page.click("#login button[type=submit]")
            page.wait_for_function(
                "document.querySelector('#login-error').textContent === 'Login failed'")
            page.fill("#password", "guest")
            page.click("#login button[type=submit]")
            page.wait_for_selector("#app:not([hidden])")

            publisher.start()
            # the session's broker may still show rates of the tests before this one: only
            # look once this publisher is under way (under load its connect can take seconds)
            deadline = time.monotonic() + 60
            while publisher.published_to_depth < 20 and time.monotonic() < deadline:
                assert publisher.error is None
                time.sleep(0.05)
            assert publisher.published_to_depth >= 20, "the publisher never got going"
            # live rates: publish, deliver and ack climb above zero while publishing
            for key in ("publish", "deliver", "ack", "confirm"):
                page.wait_for_function(
                    f"parseFloat(document.querySelector('#rate-{key}').textContent) > 0",
                    timeout=20_000)
            page.wait_for_function(
                "Number(document.querySelector('#chart-rates').dataset.points) > 3")
            assert publisher.error is None
            publisher.stop.set()
            publisher.join(15)
            assert publisher.error is None
            depth = publisher.published_to_depth
            assert depth > 0

            # the queue's depth, as the page shows it once the rates have settled
            row = "#queues tbody tr:has(td:text-is('dash-depth'))"
            page.wait_for_function(
                """([vhost, depth]) => [...document.querySelectorAll('#queues tbody tr')]
                     .some(tr => tr.cells[0].textContent === vhost
                                 && tr.cells[1].textContent === 'dash-depth'
                                 && tr.cells[5].textContent === String(depth))""",
                arg=[site.vhost, depth], timeout=15_000)
            cells = page.locator(row).first.locator("td").all_text_contents()
            assert cells[3] == str(depth) and cells[5] == str(depth)
            ready_tile = int(page.text_content("#tile-ready") or "0")
            assert ready_tile >= depth
            page.wait_for_function(
                "JSON.parse(document.querySelector('#chart-queued').dataset.last).ready > 0")
            # the other sections list what the vhost holds
            assert page.locator(f"#exchanges tbody tr:has(td:text-is('{site.vhost}'))").count() >= 7
            assert page.locator("#bindings tbody td:text-is('dash-depth')").count() >= 1

            ARTIFACTS.mkdir(exist_ok=True)
            shot = ARTIFACTS / "dashboard.png"
            page.screenshot(path=str(shot), full_page=True)
            assert shot.stat().st_size > 10_000
            assert errors == []
        finally:
            publisher.stop.set()
            browser.close()


def test_dashboard_files_are_served_without_auth(leveret_site: Site) -> None:
    """The page and its script come from the package; the data needs credentials."""
    import urllib.error
    import urllib.request

    base = leveret_site.broker.http_url
    for path, kind in (("/", "text/html"), ("/static/app.js", "text/javascript"),
                       ("/static/style.css", "text/css")):
        with urllib.request.urlopen(base + path, timeout=10) as resp:
            assert resp.headers["Content-Type"].startswith(kind)
            assert b"http://" not in resp.read() or path == "/"
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(base + "/api/overview", timeout=10)
    assert info.value.code == 401
    with pytest.raises(urllib.error.HTTPError):
        urllib.request.urlopen(base + "/static/../api/overview", timeout=10)
