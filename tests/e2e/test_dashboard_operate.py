"""The dashboard's operator tabs in headless Chromium: an administrator sets a policy and
an operator policy, a vhost limit and a user limit, and a topic permission, sees them
listed, edits and clears them; each step is checked through the management API and, for
the policy, on a queue that already existed (its page names the policy, its depth drops
to the new limit). Screenshots go to test-artifacts/."""

from __future__ import annotations

from typing import Any

import pika

from tests.e2e.browser import Page, chromium
from tests.support.mgmt import Site, q
from tests.support.waiting import wait_for

__all__ = ["chromium"]


def test_policies_tab_sets_and_clears_policies(chromium: Any, leveret_site: Site) -> None:
    site = leveret_site
    b = site.broker
    conn = pika.BlockingConnection(
        pika.ConnectionParameters(b.host, b.port, virtual_host=site.vhost)
    )
    ch = conn.channel()
    ch.queue_declare("orders.eu")
    for i in range(8):
        ch.basic_publish("", "orders.eu", b"%d" % i)
    view = Page(chromium, b.http_url)
    try:
        p = view.login("/admin/policies")
        p.wait_for_selector("#policy-table")
        p.select_option("#policy-vhost", site.vhost)
        p.fill("#policy-name", "orders-cap")
        p.fill("#policy-pattern", "^orders\\.")
        p.select_option("#policy-apply-to", "queues")
        p.fill("#policy-priority", "5")
        p.click("#set-policy .tag-picker button:text-is('max-length')")
        assert p.input_value("#policy-definition") == "max-length = "
        p.fill("#policy-definition", "max-length = 5\noverflow = drop-head")
        p.click("#policy-submit")
        p.wait_for_selector("#policy-table td:text-is('orders-cap')")
        policy = site.api.get(f"/api/policies/{q(site.vhost)}/orders-cap")
        assert policy["definition"] == {"max-length": 5, "overflow": "drop-head"}
        assert (policy["priority"], policy["apply-to"]) == (5, "queues")
        # the queue that already held 8 messages keeps the newest 5
        queue = site.api.get(f"/api/queues/{q(site.vhost)}/orders.eu")
        assert (queue["policy"], queue["messages"]) == ("orders-cap", 5)

        # an operator policy caps it further
        p.select_option("#op-policy-vhost", site.vhost)
        p.fill("#op-policy-name", "cap")
        p.fill("#op-policy-pattern", ".*")
        p.fill("#op-policy-definition", "max-length = 3")
        p.click("#op-policy-submit")
        p.wait_for_selector("#op-policy-table td:text-is('cap')")
        queue = site.api.get(f"/api/queues/{q(site.vhost)}/orders.eu")
        assert queue["effective_policy_definition"] == {"max-length": 3, "overflow": "drop-head"}
        assert queue["messages"] == 3
        view.shot("admin-policies.png", full_page=True)

        # a refused definition shows RabbitMQ's reason and changes nothing
        p.fill("#op-policy-name", "bad")
        p.fill("#op-policy-definition", "overflow = reject-publish")
        p.click("#op-policy-submit")
        p.wait_for_selector(".toast.error:has-text('are not recognised policy settings')")
        assert site.api.call("GET", f"/api/operator-policies/{q(site.vhost)}/bad")[0] == 404

        # the queue's page names both policies
        p.goto(b.http_url + f"/queues/{q(site.vhost)}/orders.eu")
        p.wait_for_selector(".badge.policy:text-is('orders-cap')")
        p.wait_for_selector(".badge.policy:text-is('cap')")

        # edit, then delete, from the tab
        p.goto(b.http_url + "/admin/policies")
        p.wait_for_selector("#policy-table td:text-is('orders-cap')")
        p.click("#policy-table tr:has(td:text-is('orders-cap')) button:text-is('Edit')")
        assert p.input_value("#policy-pattern") == "^orders\\."
        assert p.input_value("#policy-definition") == "max-length = 5\noverflow = drop-head"
        p.fill("#policy-definition", "max-length = 4")
        p.click("#policy-submit")
        wait_for(
            lambda: (
                site.api.get(f"/api/policies/{q(site.vhost)}/orders-cap")["definition"]
                == {"max-length": 4}
            ),
            timeout=10,
        )
        p.click("#policy-table tr:has(td:text-is('orders-cap')) button:text-is('Delete')")
        p.click("#confirm-ok")
        p.wait_for_selector("#policy-table td:text-is('orders-cap')", state="detached")
        assert site.api.call("GET", f"/api/policies/{q(site.vhost)}/orders-cap")[0] == 404
        assert view.errors == []
    finally:
        conn.close()
        view.close()


def test_limits_and_topic_permissions_tabs(chromium: Any, leveret_site: Site) -> None:
    site = leveret_site
    view = Page(chromium, site.broker.http_url)
    try:
        p = view.login("/admin/limits")
        p.wait_for_selector("#vhost-limits-table")
        p.select_option("#vhost-limit-vhost", site.vhost)
        p.select_option("#vhost-limit-name", "max-queues")
        p.fill("#vhost-limit-value", "2")
        p.click("#vhost-limit-submit")
        p.wait_for_selector(f"#vhost-limits-table td:text-is('{site.vhost}')")
        assert site.api.get(f"/api/vhost-limits/{q(site.vhost)}") == [
            {"vhost": site.vhost, "value": {"max-queues": 2}}
        ]
        p.select_option("#user-limit-user", site.user)
        p.select_option("#user-limit-name", "max-channels")
        p.fill("#user-limit-value", "7")
        p.click("#user-limit-submit")
        p.wait_for_selector(f"#user-limits-table td:text-is('{site.user}')")
        assert site.api.get(f"/api/users/{q(site.user)}")["limits"] == {"max-channels": 7}
        view.shot("admin-limits.png", full_page=True)
        # the vhost limit is in force: a third queue is refused
        b = site.broker
        conn = pika.BlockingConnection(
            pika.ConnectionParameters(b.host, b.port, virtual_host=site.vhost)
        )
        try:
            ch = conn.channel()
            ch.queue_declare("one")
            ch.queue_declare("two")
            try:
                ch.queue_declare("three")
                raise AssertionError("max-queues did not refuse")
            except pika.exceptions.ChannelClosedByBroker as exc:
                assert exc.reply_code == 406
        finally:
            conn.close()
        p.click(
            f"#vhost-limits-table tr[data-key='{site.vhost}'] button:text-is('Clear max-queues')"
        )
        p.wait_for_selector(f"#vhost-limits-table td:text-is('{site.vhost}')", state="detached")
        assert site.api.get(f"/api/vhost-limits/{q(site.vhost)}") == []

        p.click("nav.tabs a:text-is('Topic permissions')")
        p.wait_for_selector("#topic-user")
        p.select_option("#topic-user", site.user)
        p.select_option("#topic-vhost", site.vhost)
        p.fill("#topic-write", "^logs\\.{username}\\.")
        p.click("#topic-submit")
        p.wait_for_selector(f"#topic-permissions-table td:text-is('{site.user}')")
        assert site.api.get(f"/api/topic-permissions/{q(site.vhost)}/{q(site.user)}") == [
            {
                "user": site.user,
                "vhost": site.vhost,
                "exchange": "amq.topic",
                "write": "^logs\\.{username}\\.",
                "read": ".*",
            }
        ]
        view.shot("admin-topic-permissions.png")
        p.click(
            f"#topic-permissions-table tr:has(td:text-is('{site.user}')) button:text-is('Clear')"
        )
        p.click("#confirm-ok")
        p.wait_for_selector(f"#topic-permissions-table td:text-is('{site.user}')", state="detached")
        assert view.errors == []
    finally:
        view.close()
