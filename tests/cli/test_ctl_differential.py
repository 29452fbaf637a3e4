"""``leveret ctl`` prints what ``rabbitmqctl`` prints, for the same declarations on
Leveret and on RabbitMQ 3.10.8. Banner and header lines are compared exactly; RabbitMQ
lists rows in no particular order, so rows are compared as sorted lists. Server-named
queues (amq.gen-…) get one name on both sides."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.mgmt import Site, declare_scenario, normalize, prepared

pytestmark = pytest.mark.rabbitmq


@pytest.fixture
def sites(leveret_site: Site, rabbitmq_site: Site) -> Iterator[tuple[Site, Site]]:
    with prepared((leveret_site, rabbitmq_site), declare_scenario) as both:
        yield both


def split(out: str, banner_lines: int) -> tuple[list[str], list[str]]:
    lines = normalize(out).splitlines()
    head = banner_lines + (1 if len(lines) > banner_lines else 0)
    return lines[:head], sorted(lines[head:])


def keep_users(rows: list[str], users: set[str]) -> list[str]:
    return [r for r in rows if r.split("\t", 1)[0] in users]


VHOST_LISTINGS = [
    ("list_exchanges", [], 1),
    ("list_exchanges", ["name", "type", "durable", "auto_delete", "internal", "arguments"], 1),
    ("list_bindings", [], 1),
    ("list_bindings", ["source_name", "destination_name", "routing_key"], 1),
    ("list_queues", [], 2),
    (
        "list_queues",
        [
            "name",
            "messages",
            "messages_ready",
            "messages_unacknowledged",
            "consumers",
            "durable",
            "auto_delete",
            "exclusive",
            "arguments",
        ],
        2,
    ),
    ("list_permissions", [], 1),
]


@pytest.mark.parametrize(
    ("verb", "columns", "banner"),
    VHOST_LISTINGS,
    ids=[f"{v}-{len(c)}" for v, c, _ in VHOST_LISTINGS],
)
def test_vhost_listing_matches_rabbitmqctl(
    sites: tuple[Site, Site], verb: str, columns: list[str], banner: int
) -> None:
    lev, rmq = sites
    ours = lev.ctl(verb, "-p", lev.vhost, *columns).stdout
    theirs = rmq.ctl(verb, "-p", rmq.vhost, *columns).stdout
    ours = ours.replace(lev.vhost, "VHOST").replace(lev.user, "USER")
    theirs = theirs.replace(rmq.vhost, "VHOST").replace(rmq.user, "USER")
    assert split(ours, banner) == split(theirs, banner)
    assert ours.endswith("\n")


def test_list_users_matches_rabbitmqctl(sites: tuple[Site, Site]) -> None:
    lev, rmq = sites
    ours = lev.ctl("list_users").stdout.replace(lev.user, "USER")
    theirs = rmq.ctl("list_users").stdout.replace(rmq.user, "USER")
    head_o, rows_o = split(ours, 1)
    head_t, rows_t = split(theirs, 1)
    assert head_o == head_t == ["Listing users ...", "user\ttags"]
    # Users are broker-wide and RabbitMQ has other tests' users: compare ours.
    assert keep_users(rows_o, {"guest", "USER"}) == keep_users(rows_t, {"guest", "USER"})
    assert keep_users(rows_o, {"guest", "USER"}) == ["USER\t[management]", "guest\t[administrator]"]


@pytest.mark.parametrize(
    ("verb", "banner"),
    [("list_exchanges", 1), ("list_bindings", 1), ("list_queues", 2), ("list_permissions", 1)],
)
def test_quiet_and_no_headers_match(sites: tuple[Site, Site], verb: str, banner: int) -> None:
    lev, rmq = sites
    for flags in (["-q"], ["--no-table-headers"], ["-q", "--no-table-headers"]):
        ours = lev.ctl(verb, *flags, "-p", lev.vhost).stdout.replace(lev.vhost, "VHOST")
        theirs = rmq.ctl(verb, *flags, "-p", rmq.vhost).stdout.replace(rmq.vhost, "VHOST")
        ours, theirs = ours.replace(lev.user, "USER"), theirs.replace(rmq.user, "USER")
        fixed = (0 if "-q" in flags else banner) + (0 if "--no-table-headers" in flags else 1)
        ours_lines, theirs_lines = normalize(ours).splitlines(), normalize(theirs).splitlines()
        assert ours_lines[:fixed] == theirs_lines[:fixed], flags
        assert sorted(ours_lines[fixed:]) == sorted(theirs_lines[fixed:]), flags


@pytest.mark.parametrize(
    ("verb", "columns"),
    [
        ("list_exchanges", []),
        ("list_exchanges", ["name", "durable", "arguments"]),
        ("list_bindings", []),
        ("list_queues", ["name", "messages", "durable", "arguments"]),
        ("list_permissions", []),
    ],
)
def test_json_formatter_matches(sites: tuple[Site, Site], verb: str, columns: list[str]) -> None:
    lev, rmq = sites
    ours = lev.ctl(verb, "--formatter", "json", "-p", lev.vhost, *columns).stdout
    theirs = rmq.ctl(verb, "--formatter", "json", "-p", rmq.vhost, *columns).stdout
    ours = normalize(ours.replace(lev.user, "USER"))
    theirs = normalize(theirs.replace(rmq.user, "USER"))
    assert ours.startswith("[\n") and ours.endswith("]\n")

    def rows(text: str) -> list[str]:
        return sorted(json.dumps(r) for r in json.loads(text))

    assert rows(ours) == rows(theirs)
    # the same layout: one object a line, commas leading from the second on
    body = ours.splitlines()[1:-1]
    assert [line[:2] for line in body] == ['{"'] + [",{"] * (len(body) - 1)


def test_empty_listing_matches(sites: tuple[Site, Site]) -> None:
    """No rows: the banner only, without a header line."""
    lev, rmq = sites
    ours = lev.ctl("list_consumers", "-p", lev.vhost).stdout.replace(lev.vhost, "VHOST")
    theirs = rmq.ctl("list_consumers", "-p", rmq.vhost).stdout.replace(rmq.vhost, "VHOST")
    assert ours == theirs
    assert lev.ctl("list_consumers", "--formatter", "json", "-p", lev.vhost).stdout == "[\n]\n"


def test_user_and_vhost_verbs_print_as_rabbitmqctl(sites: tuple[Site, Site]) -> None:
    """The management verbs print the same banners and leave the same state."""
    outputs = []
    for site in sites:
        name = f"{site.vhost}-x"
        steps = [
            ("add_user", name, "pw1"),
            ("change_password", name, "pw2"),
            ("set_user_tags", name, "monitoring", "management"),
            ("set_permissions", "-p", site.vhost, name, "^x-", ".*", "^y"),
            ("list_permissions", "-p", site.vhost),
            ("clear_permissions", "-p", site.vhost, name),
            ("delete_user", name),
        ]
        out = []
        for step in steps:
            result = site.ctl(*step)
            text = result.stdout.replace(name, "NEW").replace(site.vhost, "VHOST")
            text = text.replace(site.user, "USER")
            lines = text.splitlines()
            out.append((lines[:2], sorted(lines[2:])))
        outputs.append(out)
    assert outputs[0] == outputs[1]


PID = re.compile(r"<[^<>\s]+>")


@pytest.fixture
def live_sites(leveret_site: Site, rabbitmq_site: Site) -> Iterator[tuple[Site, Site]]:
    """On each broker: one connection with a consuming channel (prefetch 5, two
    unacknowledged deliveries) and a confirm-mode channel."""

    def prepare(site: Site) -> Any:
        conn = site.connect("ctl-differential")
        ch = conn.channel()
        ch.queue_declare("consumed", durable=True)
        for _ in range(2):
            ch.basic_publish("", "consumed", b"m")
        ch.basic_qos(prefetch_count=5)
        ch.basic_consume(
            "consumed", lambda *a: None, consumer_tag="ctag-1", arguments={"x-priority": 3}
        )
        ch2 = conn.channel()
        ch2.confirm_delivery()
        conn.process_data_events(0.5)
        return conn

    with prepared((leveret_site, rabbitmq_site), prepare) as both:
        yield both


@pytest.mark.parametrize(
    ("verb", "columns"),
    [
        ("list_consumers", []),
        (
            "list_consumers",
            [
                "queue_name",
                "consumer_tag",
                "ack_required",
                "prefetch_count",
                "active",
                "activity_status",
                "arguments",
            ],
        ),
        (
            "list_channels",
            [
                "vhost",
                "number",
                "user",
                "transactional",
                "confirm",
                "consumer_count",
                "messages_unacknowledged",
                "prefetch_count",
                "global_prefetch_count",
            ],
        ),
        (
            "list_connections",
            [
                "vhost",
                "user",
                "state",
                "channels",
                "protocol",
                "auth_mechanism",
                "ssl",
                "frame_max",
                "channel_max",
                "timeout",
            ],
        ),
    ],
)
def test_connection_listings_match_rabbitmqctl(
    live_sites: tuple[Site, Site], verb: str, columns: list[str]
) -> None:
    outputs = []
    for site in live_sites:
        args = [verb, *columns] + (["-p", site.vhost] if verb == "list_consumers" else [])
        out = site.ctl(*args).stdout
        lines = out.splitlines()
        # connections and channels are listed broker-wide: keep this test's
        head, rows = (
            lines[:2],
            [r for r in lines[2:] if verb == "list_consumers" or r.split("\t")[0] == site.vhost],
        )
        text = "\n".join(head + sorted(rows)).replace(site.vhost, "VHOST")
        outputs.append(PID.sub("<PID>", text))
    assert outputs[0] == outputs[1]


def test_list_vhosts_matches_rabbitmqctl(sites: tuple[Site, Site]) -> None:
    outputs = []
    for site in sites:
        out = site.ctl("list_vhosts", "name", "description", "tags", "tracing").stdout
        out = out.replace(site.vhost, "VHOST")
        lines = out.splitlines()
        outputs.append(
            (lines[:2], sorted(r for r in lines[2:] if r.split("\t")[0] in ("/", "VHOST")))
        )
    assert outputs[0] == outputs[1]
    assert outputs[0][1] == ["/\tDefault virtual host\t[]\tfalse", "VHOST\t\t[]\tfalse"]
