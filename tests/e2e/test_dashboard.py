"""The dashboard's operator pages in headless Chromium (Debian's ``chromium``, driven by
Playwright; no browser is downloaded): log in, the overview's live rates, a queue's page
(get messages, bind, purge, delete), an exchange's page (publish), Admin (add a user, set
a permission). Each action is checked through the management API too. Screenshots go to
test-artifacts/."""

from __future__ import annotations

import threading
import time
import urllib.error
import urllib.request
from typing import Any

import pika
import pytest

from tests.e2e.browser import Page, chromium
from tests.support.mgmt import Site, q
from tests.support.waiting import wait_for

__all__ = ["chromium"]


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
            conn = pika.BlockingConnection(
                pika.ConnectionParameters(
                    b.host,
                    b.port,
                    virtual_host=self.site.vhost,
                    client_properties={"connection_name": "dashboard-publisher"},
                )
            )
            ch = conn.channel()
            ch.queue_declare("dash-depth")
            ch.queue_declare("dash-flow")
            ch.confirm_delivery()
            ch.basic_consume("dash-flow", lambda c, m, p, body: c.basic_ack(m.delivery_tag))
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


def test_login_and_overview_shows_live_rates(chromium: Any, leveret_site: Site) -> None:
    site = leveret_site
    view = Page(chromium, site.broker.http_url)
    publisher = Publisher(site)
    try:
        p = view.page
        p.goto(site.broker.http_url + "/?refresh=500")
        p.wait_for_selector("#login:not([hidden])")
        p.fill("#username", "guest")
        p.fill("#password", "wrong")
        p.click("#login button[type=submit]")
        p.wait_for_function("document.querySelector('#login-error').textContent === 'Login failed'")
        p.fill("#password", "guest")
        p.click("#login button[type=submit]")
        p.wait_for_selector("#app:not([hidden])")

        publisher.start()
        # the session's broker may still show rates of the tests before this one: only
        # look once this publisher is under way (under load its connect can take seconds)
        deadline = time.monotonic() + 60
        while publisher.published_to_depth < 20 and time.monotonic() < deadline:
            assert publisher.error is None
            time.sleep(0.05)
        assert publisher.published_to_depth >= 20, "the publisher never got going"
        for key in ("publish", "deliver", "ack", "confirm"):
            p.wait_for_function(
                f"parseFloat(document.querySelector('#rate-{key}').textContent) > 0", timeout=20_000
            )
        p.wait_for_function("Number(document.querySelector('#chart-rates').dataset.points) > 3")
        p.wait_for_function(
            "JSON.parse(document.querySelector('#chart-queued').dataset.last).ready > 0"
        )
        view.shot("dashboard.png")
        publisher.stop.set()
        publisher.join(15)
        assert publisher.error is None
        depth = publisher.published_to_depth

        # the queues page lists the queue with its depth, once the publisher has stopped
        p.click("#nav a[data-page=queues]")
        p.wait_for_function(
            """([vhost, depth]) => [...document.querySelectorAll('#queues-table tbody tr')]
                 .some(tr => tr.cells[0].textContent === vhost
                             && tr.cells[1].textContent === 'dash-depth'
                             && tr.cells[7].textContent === depth.toLocaleString('en'))""",
            arg=[site.vhost, depth],
            timeout=15_000,
        )
        # keyboard: g then e goes to the exchanges
        p.keyboard.press("g")
        p.keyboard.press("e")
        # the table is drawn empty, then filled once its fetch returns (seconds, under load)
        p.wait_for_function(
            """(vhost) => [...document.querySelectorAll('#exchanges-table tbody tr')]
                 .filter(tr => tr.cells[0] && tr.cells[0].textContent === vhost).length >= 7""",
            arg=site.vhost,
            timeout=15_000,
        )
        assert view.errors == []
    finally:
        publisher.stop.set()
        view.close()


def test_queue_page_gets_binds_purges_and_deletes(chromium: Any, leveret_site: Site) -> None:
    site = leveret_site
    b = site.broker
    conn = site.connect()
    ch = conn.channel()
    ch.queue_declare("orders", durable=True)
    ch.exchange_declare("shop", "topic")
    ch.confirm_delivery()
    for i in range(3):
        ch.basic_publish(
            "",
            "orders",
            f"order {i}".encode(),
            pika.BasicProperties(content_type="text/plain", message_id=f"m{i}"),
        )
    conn.close()
    view = Page(chromium, b.http_url)
    try:
        p = view.login("/queues")
        p.fill("#main [data-search]", "orders")
        p.click(f"#queues-table a[href='/queues/{q(site.vhost)}/orders']")
        p.wait_for_selector("#queue-figures dd")
        assert p.title().startswith("Queue orders")
        p.wait_for_function("document.querySelector('#queue-figures').textContent.includes('3')")

        # get a message, requeued ("Nack message requeue true"): it stays in the queue
        p.select_option("#get-ackmode", "ack_requeue_true")
        p.fill("#get-count", "2")
        p.click("#get-submit")
        p.wait_for_selector("#get-results .message")
        assert p.locator("#get-results .message").count() == 2
        assert p.locator("#get-results pre.payload").first.text_content() == "order 0"
        assert "message_id" in (p.locator("#get-results").text_content() or "")
        assert site.api.get(f"/api/queues/{q(site.vhost)}/orders")["messages"] == 3
        # "Automatic ack" takes one away
        p.select_option("#get-ackmode", "ack_requeue_false")
        p.fill("#get-count", "1")
        p.click("#get-submit")
        p.wait_for_function(
            "document.querySelector('#get-results pre.payload')?.textContent === 'order 0'"
        )
        assert wait_for(
            lambda: site.api.get(f"/api/queues/{q(site.vhost)}/orders")["messages"] == 2, timeout=10
        )

        # add a binding from the topic exchange
        p.fill("#bind-source", "shop")
        p.fill("#bind-key", "order.*")
        p.click("#queue-bind button[type=submit]")
        p.wait_for_selector("#queue-bindings td:text-is('order.*')")
        bindings = site.api.get(f"/api/queues/{q(site.vhost)}/orders/bindings")
        assert [x["routing_key"] for x in bindings if x["source"] == "shop"] == ["order.*"]
        view.shot("queue.png", full_page=True)

        # purge, confirmed in the dialog
        p.click("#purge")
        p.click("#confirm-ok")
        assert wait_for(
            lambda: site.api.get(f"/api/queues/{q(site.vhost)}/orders")["messages"] == 0, timeout=10
        )
        # delete: back to the list, and the queue is gone
        p.click("#delete-queue")
        p.click("#confirm-ok")
        p.wait_for_url("**/queues")
        status, _ = site.api.call("GET", f"/api/queues/{q(site.vhost)}/orders")
        assert status == 404
        assert view.errors == []
    finally:
        view.close()


def test_stream_queue_page_shows_offsets_segments_and_size(
    chromium: Any, leveret_site: Site
) -> None:
    site = leveret_site
    b = site.broker
    conn = site.connect()
    ch = conn.channel()
    ch.queue_declare("events", durable=True, arguments={"x-queue-type": "stream"})
    ch.confirm_delivery()
    for _ in range(25):
        ch.basic_publish("", "events", b"e" * 100)
    conn.close()
    view = Page(chromium, b.http_url)
    try:
        p = view.login(f"/queues/{q(site.vhost)}/events")
        p.wait_for_selector("#stream-status dd")
        text = p.text_content("#stream-status") or ""
        assert "First offset0" in text.replace("\n", "")
        assert "Last offset24" in text.replace("\n", "")
        assert "Segments1" in text.replace("\n", "")
        assert p.locator("#get-messages").is_hidden()  # streams refuse basic.get
        row = site.api.get(f"/api/queues/{q(site.vhost)}/events/stream-status")[0]
        assert (row["first_offset"], row["committed_offset"], row["segments"]) == (0, 24, 1)
        assert row["size"] > 2500
        assert view.errors == []
    finally:
        view.close()


def test_exchange_page_publishes_and_binds(chromium: Any, leveret_site: Site) -> None:
    site = leveret_site
    b = site.broker
    conn = site.connect()
    ch = conn.channel()
    ch.exchange_declare("alerts", "direct", durable=True)
    ch.queue_declare("pager")
    ch.queue_bind("pager", "alerts", "page")
    conn.close()
    view = Page(chromium, b.http_url)
    try:
        p = view.login("/exchanges")
        p.click(f"#exchanges-table a[href='/exchanges/{q(site.vhost)}/alerts']")
        p.wait_for_selector("#exchange-outgoing td:text-is('page')")
        p.fill("#publish-key", "page")
        p.fill("#publish-payload", "disk almost full")
        p.fill("#publish textarea[name=headers]", "level = error")
        p.select_option("#publish select[name=delivery_mode]", "2")
        p.click("#publish-submit")
        p.wait_for_function(
            "document.querySelector('#publish-result').textContent === 'Message published.'"
        )
        got = site.api.call(
            "POST",
            f"/api/queues/{q(site.vhost)}/pager/get",
            {"count": 1, "ackmode": "ack_requeue_true", "encoding": "auto"},
        )[1]
        assert got[0]["payload"] == "disk almost full"
        assert got[0]["properties"]["headers"] == {"level": "error"}
        assert got[0]["properties"]["delivery_mode"] == 2
        # a key nothing is bound with: published, not routed
        p.fill("#publish-key", "nobody")
        p.click("#publish-submit")
        p.wait_for_function(
            "document.querySelector('#publish-result').textContent"
            " === 'Message published, but not routed.'"
        )
        # bind the exchange to another queue from its page
        p.fill("#exchange-bind input[name=destination]", "pager")
        p.fill("#exchange-bind input[name=routing_key]", "sms")
        p.click("#exchange-bind button[type=submit]")
        p.wait_for_selector("#exchange-outgoing td:text-is('sms')")
        view.shot("exchange.png", full_page=True)
        assert view.errors == []
    finally:
        view.close()


def test_admin_adds_a_user_and_sets_permissions(chromium: Any, leveret_site: Site) -> None:
    site = leveret_site
    user = f"{site.vhost}-ops"
    view = Page(chromium, site.broker.http_url)
    try:
        p = view.login("/admin")
        p.wait_for_selector("#users-table td:text-is('guest')")
        p.fill("#user-name", user)
        p.fill("#user-password", "pa55word")
        p.click(".tag-picker button:text-is('monitoring')")
        assert p.input_value("#user-tags") == "monitoring"
        p.click("#user-submit")
        p.wait_for_selector(f"#users-table td:text-is('{user}')")
        assert site.api.get(f"/api/users/{q(user)}")["tags"] == ["monitoring"]
        view.shot("admin.png")
        # permissions tab: give the new user read access to the test's vhost
        p.click("nav.tabs a:text-is('Permissions')")
        p.wait_for_selector("#perm-user")
        p.select_option("#perm-user", user)
        p.select_option("#perm-vhost", site.vhost)
        p.fill("#set-permission input[name=configure]", "^$")
        p.fill("#set-permission input[name=write]", "^$")
        p.click("#perm-submit")
        p.wait_for_selector(f"#permissions-table td:text-is('{user}')")
        perm = site.api.get(f"/api/permissions/{q(site.vhost)}/{q(user)}")
        assert (perm["configure"], perm["write"], perm["read"]) == ("^$", "^$", ".*")
        # the new user logs in and sees no Admin entry (not an administrator)
        other = Page(p.context.browser, site.broker.http_url)
        try:
            op = other.login("/", user, "pa55word")
            op.wait_for_selector("#tile-queues")
            assert op.locator("#nav-admin").is_hidden()
        finally:
            other.close()
        # delete the user from the users tab
        p.click("nav.tabs a:text-is('Users')")
        p.click(f"#users-table tr[data-key='{user}'] button:text-is('Delete')")
        p.click("#confirm-ok")
        p.wait_for_selector(f"#users-table td:text-is('{user}')", state="detached")
        assert site.api.call("GET", f"/api/users/{q(user)}")[0] == 404
        assert view.errors == []
    finally:
        site.api.delete(f"/api/users/{q(user)}")
        view.close()


def test_connections_page_closes_a_connection(chromium: Any, leveret_site: Site) -> None:
    site = leveret_site
    b = site.broker
    conn = pika.BlockingConnection(
        pika.ConnectionParameters(
            b.host,
            b.port,
            virtual_host=site.vhost,
            client_properties={"connection_name": f"{site.vhost}-doomed"},
        )
    )
    view = Page(chromium, b.http_url)
    try:
        p = view.login("/connections")
        row = f"#connections-table tr:has-text('{site.vhost}-doomed')"
        p.wait_for_selector(row)
        p.click(f"{row} button:text-is('Close')")
        p.click("#confirm-ok")
        p.wait_for_selector(row, state="detached", timeout=15_000)
        with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as info:
            for _ in range(50):
                conn.process_data_events(0.1)
        assert info.value.reply_code == 320
        assert "Closed via the Leveret dashboard" in info.value.reply_text
        assert view.errors == []
    finally:
        if conn.is_open:
            conn.close()
        view.close()


def test_dashboard_files_are_served_without_auth(leveret_site: Site) -> None:
    """The page and its scripts come from the package; the data needs credentials. Every
    page path answers the same page; nothing refers to another site."""
    base = leveret_site.broker.http_url
    for path, kind in (
        ("/", "text/html"),
        ("/logs", "text/html"),
        ("/queues/%2F/x", "text/html"),
        ("/admin/users", "text/html"),
        ("/static/app.js", "text/javascript"),
        ("/static/page-logs.js", "text/javascript"),
        ("/static/style.css", "text/css"),
    ):
        with urllib.request.urlopen(base + path, timeout=10) as resp:
            assert resp.headers["Content-Type"].startswith(kind)
            body = resp.read()
            assert b"http://" not in body and b"https://" not in body, path
    for path in ("/api/overview", "/api/logs/lake", "/api/logs/stream", "/api/logs/report"):
        with pytest.raises(urllib.error.HTTPError) as info:
            urllib.request.urlopen(base + path, timeout=10)
        assert info.value.code == 401, path
    with pytest.raises(urllib.error.HTTPError):
        urllib.request.urlopen(base + "/static/../api/overview", timeout=10)
