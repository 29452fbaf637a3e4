"""The authorisation matrix over the management API: every endpoint that acts for a user
(declare and delete exchanges and queues, bind and unbind, publish, get, purge) and the
listings, for users whose permission patterns allow or refuse each resource (see
tests/support/permissions.py), on Leveret and on RabbitMQ 3.10.8: the same status and body for
each request, and the same resulting state.

RabbitMQ's API runs these through rabbit_channel:handle_method (declare, delete, bind,
purge) or through a channel of its own (publish, get), so the checks and their order are
AMQP's; rabbit_mgmt_util maps what they refuse to 401/404/400."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.support.brokers import BrokerUnderTest, ensure_rabbitmq_management
from tests.support.mgmt import q
from tests.support.permissions import Names, Site, make_site

pytestmark = pytest.mark.rabbitmq

Request = tuple[str, str, Any]  # method, path ("{v}": the vhost), JSON body or None
Case = tuple[str, str, Callable[[Names], list[Request]]]

DLX = "x-dead-letter-exchange"
AE = "alternate-exchange"


def ex(name: str, tail: str = "") -> str:
    return f"/api/exchanges/{{v}}/{q(name)}{tail}"


def qu(name: str, tail: str = "") -> str:
    return f"/api/queues/{{v}}/{q(name)}{tail}"


def bindings(source: str, kind: str, destination: str, props: str | None = None) -> str:
    path = f"/api/bindings/{{v}}/e/{q(source)}/{kind}/{q(destination)}"
    return path if props is None else f"{path}/{q(props)}"


def publish(exchange: str, routing_key: str = "") -> Request:
    return (
        "POST",
        ex(exchange, "/publish"),
        {
            "properties": {},
            "routing_key": routing_key,
            "payload": "p",
            "payload_encoding": "string",
        },
    )


def get(queue: str) -> Request:
    return (
        "POST",
        qu(queue, "/get"),
        {"count": 1, "ackmode": "ack_requeue_false", "encoding": "auto"},
    )


CASES: list[Case] = [
    # ---- PUT /api/exchanges: configure; the default exchange; alternate-exchange
    ("xput-new-allowed", "main", lambda r: [("PUT", ex(r.X("c")), {"type": "direct"})]),
    ("xput-new-refused", "main", lambda r: [("PUT", ex(r.X("wr")), {"type": "direct"})]),
    ("xput-existing-allowed", "main", lambda r: [("PUT", ex(r.x("c")), {"type": "direct"})]),
    ("xput-existing-refused", "main", lambda r: [("PUT", ex(r.x("wr")), {"type": "direct"})]),
    ("xput-unknown-type-refused", "main", lambda r: [("PUT", ex(r.X("wr")), {"type": "nope"})]),
    ("xput-default", "main", lambda r: [("PUT", ex("amq.default"), {"type": "direct"})]),
    ("xput-reserved", "main", lambda r: [("PUT", ex("amq.t-" + r.token), {"type": "direct"})]),
    (
        "xput-reserved-admin",
        "admin",
        lambda r: [("PUT", ex("amq.t-" + r.token), {"type": "direct"})],
    ),
    (
        "xput-ae-allowed",
        "main",
        lambda r: [("PUT", ex(r.X("cr")), {"type": "direct", "arguments": {AE: r.x("w")}})],
    ),
    (
        "xput-ae-no-read",
        "main",
        lambda r: [("PUT", ex(r.X("c")), {"type": "direct", "arguments": {AE: r.x("w")}})],
    ),
    (
        "xput-ae-no-write",
        "main",
        lambda r: [("PUT", ex(r.X("cr")), {"type": "direct", "arguments": {AE: r.x("r")}})],
    ),
    (
        "xput-ae-default",
        "main",
        lambda r: [("PUT", ex(r.X("cr")), {"type": "direct", "arguments": {AE: ""}})],
    ),
    (
        "xput-ae-default-refused",
        "nodefault",
        lambda r: [("PUT", ex(r.X("cr")), {"type": "direct", "arguments": {AE: ""}})],
    ),
    (
        "xput-ae-int",
        "main",
        lambda r: [("PUT", ex(r.X("c")), {"type": "direct", "arguments": {AE: 5}})],
    ),
    (
        "xput-ae-int-refused",
        "main",
        lambda r: [("PUT", ex(r.X("r")), {"type": "direct", "arguments": {AE: 5}})],
    ),
    ("xput-no-vhost-permissions", "none", lambda r: [("PUT", ex(r.X("c")), {"type": "direct"})]),
    ("xput-admin-no-permissions", "admin", lambda r: [("PUT", ex(r.X("c")), {"type": "direct"})]),
    ("xput-monitor", "monitor", lambda r: [("PUT", ex(r.X("c")), {"type": "direct"})]),
    ("xput-bytes", "bytes", lambda r: [("PUT", ex("e.u.\u00e9"), {"type": "direct"})]),
    # ---- DELETE /api/exchanges
    ("xdel-allowed", "main", lambda r: [("DELETE", ex(r.x("c")), None)]),
    ("xdel-refused", "main", lambda r: [("DELETE", ex(r.x("wr")), None)]),
    ("xdel-missing", "main", lambda r: [("DELETE", ex(r.X("c")), None)]),
    ("xdel-missing-refused", "main", lambda r: [("DELETE", ex(r.X("wr")), None)]),
    ("xdel-default", "main", lambda r: [("DELETE", ex("amq.default"), None)]),
    ("xdel-builtin", "main", lambda r: [("DELETE", ex("amq.direct"), None)]),
    ("xdel-builtin-admin", "admin", lambda r: [("DELETE", ex("amq.direct"), None)]),
    ("xdel-admin-no-permissions", "admin", lambda r: [("DELETE", ex(r.x("c")), None)]),
    ("xdel-no-vhost-permissions", "none", lambda r: [("DELETE", ex(r.x("c")), None)]),
    # ---- PUT /api/queues: configure; dead-letter exchange
    ("qput-new-allowed", "main", lambda r: [("PUT", qu(r.Q("c")), {})]),
    ("qput-new-refused", "main", lambda r: [("PUT", qu(r.Q("wr")), {})]),
    ("qput-existing-allowed", "main", lambda r: [("PUT", qu(r.q("c")), {})]),
    ("qput-existing-refused", "main", lambda r: [("PUT", qu(r.q("wr")), {})]),
    ("qput-reserved", "main", lambda r: [("PUT", qu("amq.t-" + r.token), {})]),
    ("qput-exclusive-other", "main", lambda r: [("PUT", qu(r.xq("c")), {})]),
    ("qput-exclusive-other-refused", "main", lambda r: [("PUT", qu(r.xq("wr")), {})]),
    (
        "qput-dlx-allowed",
        "main",
        lambda r: [("PUT", qu(r.Q("cr")), {"arguments": {DLX: r.x("w")}})],
    ),
    ("qput-dlx-no-read", "main", lambda r: [("PUT", qu(r.Q("c")), {"arguments": {DLX: r.x("w")}})]),
    (
        "qput-dlx-no-write",
        "main",
        lambda r: [("PUT", qu(r.Q("cr")), {"arguments": {DLX: r.x("r")}})],
    ),
    ("qput-dlx-default", "main", lambda r: [("PUT", qu(r.Q("cr")), {"arguments": {DLX: ""}})]),
    (
        "qput-dlx-default-refused",
        "nodefault",
        lambda r: [("PUT", qu(r.Q("cr")), {"arguments": {DLX: ""}})],
    ),
    ("qput-dlx-int", "main", lambda r: [("PUT", qu(r.Q("c")), {"arguments": {DLX: 1}})]),
    (
        "qput-dlx-before-arguments",
        "main",
        lambda r: [("PUT", qu(r.Q("cr")), {"arguments": {DLX: r.x("r"), "x-max-length": "a"}})],
    ),
    ("qput-no-vhost-permissions", "none", lambda r: [("PUT", qu(r.Q("c")), {})]),
    ("qput-admin-no-permissions", "admin", lambda r: [("PUT", qu(r.Q("c")), {})]),
    # ---- DELETE /api/queues: configure
    ("qdel-allowed", "main", lambda r: [("DELETE", qu(r.q("c")), None)]),
    ("qdel-refused", "main", lambda r: [("DELETE", qu(r.q("wr")), None)]),
    ("qdel-missing", "main", lambda r: [("DELETE", qu(r.Q("c")), None)]),
    ("qdel-missing-refused", "main", lambda r: [("DELETE", qu(r.Q("wr")), None)]),
    ("qdel-exclusive-other", "main", lambda r: [("DELETE", qu(r.xq("c")), None)]),
    ("qdel-admin-no-permissions", "admin", lambda r: [("DELETE", qu(r.q("c")), None)]),
    ("qdel-if-empty", "main", lambda r: [("DELETE", qu(r.q("c"), "?if-empty=true"), None)]),
    # ---- DELETE /api/queues/.../contents: read
    ("purge-allowed", "main", lambda r: [("DELETE", qu(r.q("r"), "/contents"), None)]),
    ("purge-refused", "main", lambda r: [("DELETE", qu(r.q("cw"), "/contents"), None)]),
    ("purge-missing", "main", lambda r: [("DELETE", qu(r.Q("r"), "/contents"), None)]),
    ("purge-exclusive-other", "main", lambda r: [("DELETE", qu(r.xq("r"), "/contents"), None)]),
    (
        "purge-admin-no-permissions",
        "admin",
        lambda r: [("DELETE", qu(r.q("r"), "/contents"), None)],
    ),
    ("purge-no-vhost-permissions", "none", lambda r: [("DELETE", qu(r.q("r"), "/contents"), None)]),
    # ---- POST /api/queues/.../get: read (on a channel of its own)
    ("get-allowed", "main", lambda r: [get(r.q("r"))]),
    ("get-refused", "main", lambda r: [get(r.q("cw"))]),
    ("get-missing", "main", lambda r: [get(r.Q("r"))]),
    ("get-exclusive-other", "main", lambda r: [get(r.xq("r"))]),
    ("get-admin-no-permissions", "admin", lambda r: [get(r.q("r"))]),
    ("get-no-vhost-permissions", "none", lambda r: [get(r.q("r"))]),
    # ---- POST /api/exchanges/.../publish: write
    ("publish-allowed", "main", lambda r: [publish(r.x("w"))]),
    ("publish-refused", "main", lambda r: [publish(r.x("cr"))]),
    ("publish-default", "main", lambda r: [publish("amq.default", r.q("n"))]),
    ("publish-default-refused", "nodefault", lambda r: [publish("amq.default", r.q("n"))]),
    ("publish-missing", "main", lambda r: [publish(r.X("w"))]),
    ("publish-missing-refused", "main", lambda r: [publish(r.X("r"))]),
    ("publish-internal", "main", lambda r: [publish(r.x("w", internal=True))]),
    ("publish-admin-no-permissions", "admin", lambda r: [publish(r.x("w"))]),
    ("publish-no-vhost-permissions", "none", lambda r: [publish(r.x("w"))]),
    # ---- POST /api/bindings: write on the destination, read on the source
    (
        "qbind-allowed",
        "main",
        lambda r: [("POST", bindings(r.x("r"), "q", r.q("w")), {"routing_key": "k"})],
    ),
    (
        "qbind-no-write",
        "main",
        lambda r: [("POST", bindings(r.x("r"), "q", r.q("cr")), {"routing_key": "k"})],
    ),
    (
        "qbind-no-read",
        "main",
        lambda r: [("POST", bindings(r.x("cw"), "q", r.q("w")), {"routing_key": "k"})],
    ),
    (
        "qbind-default",
        "main",
        lambda r: [("POST", bindings("amq.default", "q", r.q("w")), {"routing_key": "k"})],
    ),
    (
        "qbind-missing-queue",
        "main",
        lambda r: [("POST", bindings(r.x("r"), "q", r.Q("w")), {"routing_key": "k"})],
    ),
    (
        "qbind-missing-exchange",
        "main",
        lambda r: [("POST", bindings(r.X("r"), "q", r.q("w")), {"routing_key": "k"})],
    ),
    (
        "qbind-missing-refused",
        "main",
        lambda r: [("POST", bindings(r.X("r"), "q", r.Q("c")), {"routing_key": "k"})],
    ),
    (
        "qbind-exclusive-other",
        "main",
        lambda r: [("POST", bindings(r.x("r"), "q", r.xq("w")), {"routing_key": "k"})],
    ),
    (
        "qbind-admin-no-permissions",
        "admin",
        lambda r: [("POST", bindings(r.x("r"), "q", r.q("w")), {"routing_key": "k"})],
    ),
    (
        "ebind-allowed",
        "main",
        lambda r: [("POST", bindings(r.x("r"), "e", r.x("w")), {"routing_key": "k"})],
    ),
    (
        "ebind-no-write",
        "main",
        lambda r: [("POST", bindings(r.x("r"), "e", r.x("cr")), {"routing_key": "k"})],
    ),
    (
        "ebind-no-read",
        "main",
        lambda r: [("POST", bindings(r.x("cw"), "e", r.x("w")), {"routing_key": "k"})],
    ),
    (
        "ebind-default-destination",
        "main",
        lambda r: [("POST", bindings(r.x("r"), "e", "amq.default"), {"routing_key": "k"})],
    ),
    (
        "ebind-default-destination-refused",
        "nodefault",
        lambda r: [("POST", bindings(r.x("r"), "e", "amq.default"), {"routing_key": "k"})],
    ),
    (
        "ebind-default-source",
        "main",
        lambda r: [("POST", bindings("amq.default", "e", r.x("w")), {"routing_key": "k"})],
    ),
    (
        "ebind-builtin-source",
        "main",
        lambda r: [("POST", bindings("amq.direct", "e", r.x("w")), {"routing_key": "k"})],
    ),
    (
        "ebind-builtin-source-refused",
        "nodefault",
        lambda r: [("POST", bindings("amq.direct", "e", r.x("w")), {"routing_key": "k"})],
    ),
    (
        "bind-no-vhost-permissions",
        "none",
        lambda r: [("POST", bindings(r.x("r"), "e", r.x("w")), {"routing_key": "k"})],
    ),
    # ---- DELETE /api/bindings/...: the same checks
    (
        "qunbind-allowed",
        "main",
        lambda r: [
            ("DELETE", bindings(r.x("r"), "q", r.q("w"), r.bound(r.x("r"), "q", r.q("w"))), None)
        ],
    ),
    (
        "qunbind-no-write",
        "main",
        lambda r: [
            ("DELETE", bindings(r.x("r"), "q", r.q("cr"), r.bound(r.x("r"), "q", r.q("cr"))), None)
        ],
    ),
    (
        "qunbind-no-read",
        "main",
        lambda r: [
            ("DELETE", bindings(r.x("cw"), "q", r.q("w"), r.bound(r.x("cw"), "q", r.q("w"))), None)
        ],
    ),
    (
        "qunbind-missing-binding",
        "main",
        lambda r: [("DELETE", bindings(r.x("r"), "q", r.q("w"), "k"), None)],
    ),
    (
        "qunbind-default",
        "main",
        lambda r: [("DELETE", bindings("amq.default", "q", r.q("w"), r.q("w")), None)],
    ),
    (
        "qunbind-exclusive-other",
        "main",
        lambda r: [
            ("DELETE", bindings(r.x("r"), "q", r.xq("w"), r.bound(r.x("r"), "q", r.xq("w"))), None)
        ],
    ),
    (
        "eunbind-allowed",
        "main",
        lambda r: [
            ("DELETE", bindings(r.x("r"), "e", r.x("w"), r.bound(r.x("r"), "e", r.x("w"))), None)
        ],
    ),
    (
        "eunbind-no-write",
        "main",
        lambda r: [
            ("DELETE", bindings(r.x("r"), "e", r.x("cr"), r.bound(r.x("r"), "e", r.x("cr"))), None)
        ],
    ),
    (
        "eunbind-no-read",
        "main",
        lambda r: [
            ("DELETE", bindings(r.x("cw"), "e", r.x("w"), r.bound(r.x("cw"), "e", r.x("w"))), None)
        ],
    ),
    (
        "unbind-admin-no-permissions",
        "admin",
        lambda r: [
            ("DELETE", bindings(r.x("r"), "q", r.q("w"), r.bound(r.x("r"), "q", r.q("w"))), None)
        ],
    ),
    (
        "unbind-no-vhost-permissions",
        "none",
        lambda r: [
            ("DELETE", bindings(r.x("r"), "q", r.q("w"), r.bound(r.x("r"), "q", r.q("w"))), None)
        ],
    ),
    # ---- reading: who may see a vhost's objects
    *[
        (f"read-{role}-{what}", role, build)
        for role in ("main", "none", "admin", "monitor", "empty")
        for what, build in (
            ("exchanges", lambda r: [("GET", "/api/exchanges/{v}", None)]),
            ("exchange", lambda r: [("GET", ex(r.x("n")), None)]),
            ("exchange-bindings", lambda r: [("GET", ex(r.x("n"), "/bindings/source"), None)]),
            ("queues", lambda r: [("GET", "/api/queues/{v}", None)]),
            ("queue", lambda r: [("GET", qu(r.q("n")), None)]),
            ("queue-bindings", lambda r: [("GET", qu(r.q("n"), "/bindings"), None)]),
            ("bindings", lambda r: [("GET", "/api/bindings/{v}", None)]),
            ("bindings-between", lambda r: [("GET", bindings(r.x("n"), "q", r.q("n")), None)]),
            ("vhost", lambda r: [("GET", "/api/vhosts/{v}", None)]),
            ("permissions", lambda r: [("GET", "/api/vhosts/{v}/permissions", None)]),
        )
    ],
]


def answer(site: Site, names: Names, role: str, request: Request) -> Any:
    method, path, body = request
    status, data = site.as_role(role).call(method, path.format(v=q(site.vhost)), body)
    if method == "GET" and status == 200:
        # what may be seen, not how it is shown (the API tests compare the fields)
        if isinstance(data, list):
            data = sorted(
                {
                    str(i.get("name", i.get("destination", "")))
                    for i in data
                    if names.token in json.dumps(i)
                }
            )
        else:
            data = "ok"
    return json.loads(site.normalize(json.dumps([status, data], ensure_ascii=False), names, role))


def outcomes(broker: BrokerUnderTest) -> Iterator[dict[str, Any]]:
    for site in make_site(broker):
        out: dict[str, Any] = {}
        tokens: dict[str, str] = {}
        for case_id, role, build in CASES:
            names = Names()
            tokens[names.token] = case_id
            requests = build(names)
            site.prepare(names)
            out[case_id] = [answer(site, names, role, r) for r in requests]
        out["state"] = state(site, tokens)
        yield out


def state(site: Site, tokens: dict[str, str]) -> dict[str, list[str]]:
    """The vhost's exchanges, queues and bindings after the whole matrix, each case's
    token replaced by its name."""

    def named(text: str) -> str:
        for token, case_id in tokens.items():
            text = text.replace(token, case_id)
        return text

    v = q(site.vhost)
    out = {}
    for what in ("exchanges", "queues"):
        out[what] = sorted(named(i["name"]) for i in site.api.get(f"/api/{what}/{v}"))
    out["bindings"] = sorted(
        named(f"{b['source']} -> {b['destination_type']} {b['destination']} {b['routing_key']}")
        for b in site.api.get(f"/api/bindings/{v}")
    )
    return out


@pytest.fixture(scope="module")
def leveret_outcomes(leveret: BrokerUnderTest) -> Iterator[dict[str, Any]]:
    yield from outcomes(leveret)


@pytest.fixture(scope="module")
def rabbitmq_outcomes(rabbitmq: BrokerUnderTest) -> Iterator[dict[str, Any]]:
    if not ensure_rabbitmq_management():
        pytest.fail("RabbitMQ's management plugin could not be enabled")
    yield from outcomes(rabbitmq)


@pytest.mark.parametrize("case", [c[0] for c in CASES])
def test_matrix(
    case: str, leveret_outcomes: dict[str, Any], rabbitmq_outcomes: dict[str, Any]
) -> None:
    assert leveret_outcomes[case] == rabbitmq_outcomes[case]


def test_the_same_state_after_the_matrix(
    leveret_outcomes: dict[str, Any], rabbitmq_outcomes: dict[str, Any]
) -> None:
    """What was allowed changed the vhost on both, what was refused on neither."""
    assert leveret_outcomes["state"] == rabbitmq_outcomes["state"]


def test_the_matrix_refuses_and_allows(rabbitmq_outcomes: dict[str, Any]) -> None:
    statuses = {a[0] for case, out in rabbitmq_outcomes.items() if case != "state" for a in out}
    assert {200, 201, 204, 400, 401, 404} <= statuses
