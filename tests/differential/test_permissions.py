"""The authorisation matrix over AMQP: every configure, write and read check RabbitMQ
3.10.8 makes (rabbit_channel, rabbit_access_control), in its order, against users whose
permission patterns allow or refuse each resource. The same table runs on Leveret and on
RabbitMQ and the replies (method, or close code, text and failing method) are compared.
How resources are named after the permissions they get: tests/support/permissions.py."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from pamqp import body, commands, frame, header
from pamqp.base import Frame

from tests.support.brokers import BrokerUnderTest, ensure_rabbitmq_management
from tests.support.permissions import PASSWORD, Names, Site, make_site
from tests.support.rawclient import PROTOCOL_HEADER, RawClient, marshal_unchecked

pytestmark = pytest.mark.rabbitmq

C = commands


@dataclass
class Publish:
    exchange: str
    routing_key: str = ""
    mandatory: bool = False


Step = Frame | Publish


def m(cls: type[Frame], **fields: Any) -> Frame:
    """A method with these fields, not validated by pamqp (names with CR/LF, "é")."""
    method = cls()
    for key, value in fields.items():
        setattr(method, key, value)
    return method


def xdecl(name: str, passive: bool = False, **arguments: Any) -> Frame:
    return m(
        C.Exchange.Declare,
        exchange=name,
        exchange_type="direct",
        passive=passive,
        arguments=arguments,
    )


def qdecl(name: str, passive: bool = False, exclusive: bool = False, **arguments: Any) -> Frame:
    return m(C.Queue.Declare, queue=name, passive=passive, exclusive=exclusive, arguments=arguments)


DLX = "x-dead-letter-exchange"
AE = "alternate-exchange"

Case = tuple[str, str, Callable[[Names], list[Step]]]

CASES: list[Case] = [
    # ---- exchange.declare: configure; passive checks nothing; the default exchange
    ("xdecl-new-allowed", "main", lambda r: [xdecl(r.X("c"))]),
    ("xdecl-new-refused", "main", lambda r: [xdecl(r.X("wr"))]),
    ("xdecl-existing-allowed", "main", lambda r: [xdecl(r.x("c"))]),
    ("xdecl-existing-refused", "main", lambda r: [xdecl(r.x("wr"))]),
    (
        "xdecl-existing-other-type-refused",
        "main",
        lambda r: [m(C.Exchange.Declare, exchange=r.x("wr"), exchange_type="fanout")],
    ),
    (
        "xdecl-unknown-type-refused",
        "main",
        lambda r: [m(C.Exchange.Declare, exchange=r.X("wr"), exchange_type="nope")],
    ),
    ("xdecl-passive-no-permission", "main", lambda r: [xdecl(r.x("n"), passive=True)]),
    ("xdecl-passive-missing", "main", lambda r: [xdecl(r.X("n"), passive=True)]),
    ("xdecl-default", "main", lambda r: [xdecl("")]),
    ("xdecl-default-passive", "main", lambda r: [xdecl("", passive=True)]),
    ("xdecl-amq-default-passive", "main", lambda r: [xdecl("amq.default", passive=True)]),
    ("xdecl-reserved-no-configure", "main", lambda r: [xdecl("amq.t-" + r.token)]),
    ("xdecl-builtin-no-configure", "main", lambda r: [xdecl("amq.direct")]),
    (
        "xdecl-crlf-stripped",
        "main",
        lambda r: [xdecl(r.X("c") + "\r\n"), xdecl(r.X("c"), passive=True)],
    ),
    ("xdecl-crlf-checked-stripped", "main", lambda r: [xdecl("\n" + r.X("c"))]),
    # alternate-exchange at declare time: read on the new exchange, write on the AE
    ("ae-allowed", "main", lambda r: [xdecl(r.X("cr"), **{AE: r.x("w")})]),
    ("ae-no-read-on-declared", "main", lambda r: [xdecl(r.X("c"), **{AE: r.x("w")})]),
    ("ae-no-write-on-ae", "main", lambda r: [xdecl(r.X("cr"), **{AE: r.x("r")})]),
    ("ae-missing-exchange", "main", lambda r: [xdecl(r.X("cr"), **{AE: r.X("w")})]),
    ("ae-default", "main", lambda r: [xdecl(r.X("cr"), **{AE: ""})]),
    ("ae-default-refused", "nodefault", lambda r: [xdecl(r.X("cr"), **{AE: ""})]),
    ("ae-no-configure-first", "main", lambda r: [xdecl(r.X("r"), **{AE: r.x("n")})]),
    ("ae-int", "main", lambda r: [xdecl(r.X("c"), **{AE: 5})]),
    ("ae-bytes", "main", lambda r: [xdecl(r.X("c"), **{AE: bytearray(r.x("w").encode())})]),
    (
        "ae-existing-not-checked",
        "main",
        lambda r: [xdecl(r.x("c")), xdecl(r.x("c"), **{AE: r.x("n")})],
    ),
    ("ae-reserved-name-first", "main", lambda r: [xdecl("amq.t-" + r.token, **{AE: r.x("n")})]),
    # ---- exchange.delete: configure, after the default and amq.* refusals
    ("xdel-allowed", "main", lambda r: [m(C.Exchange.Delete, exchange=r.x("c"))]),
    ("xdel-refused", "main", lambda r: [m(C.Exchange.Delete, exchange=r.x("wr"))]),
    ("xdel-missing-allowed", "main", lambda r: [m(C.Exchange.Delete, exchange=r.X("c"))]),
    ("xdel-missing-refused", "main", lambda r: [m(C.Exchange.Delete, exchange=r.X("wr"))]),
    ("xdel-default", "main", lambda r: [m(C.Exchange.Delete, exchange="")]),
    ("xdel-builtin", "main", lambda r: [m(C.Exchange.Delete, exchange="amq.direct")]),
    (
        "xdel-crlf",
        "main",
        lambda r: [m(C.Exchange.Delete, exchange=r.x("c") + "\n"), xdecl(r.x("c"), passive=True)],
    ),
    # ---- exchange-to-exchange bindings: write on the destination, read on the source
    (
        "ebind-allowed",
        "main",
        lambda r: [m(C.Exchange.Bind, destination=r.x("w"), source=r.x("r"), routing_key="k")],
    ),
    (
        "ebind-no-write-dest",
        "main",
        lambda r: [m(C.Exchange.Bind, destination=r.x("cr"), source=r.x("r"))],
    ),
    (
        "ebind-no-read-source",
        "main",
        lambda r: [m(C.Exchange.Bind, destination=r.x("w"), source=r.x("cw"))],
    ),
    (
        "ebind-neither",
        "main",
        lambda r: [m(C.Exchange.Bind, destination=r.x("n"), source=r.x("n"))],
    ),
    ("ebind-default-dest", "main", lambda r: [m(C.Exchange.Bind, destination="", source=r.x("r"))]),
    (
        "ebind-default-dest-no-write",
        "nodefault",
        lambda r: [m(C.Exchange.Bind, destination="", source=r.x("r"))],
    ),
    (
        "ebind-default-source",
        "main",
        lambda r: [m(C.Exchange.Bind, destination=r.x("w"), source="")],
    ),
    (
        "ebind-builtin-source",
        "main",
        lambda r: [m(C.Exchange.Bind, destination=r.x("w"), source="amq.direct")],
    ),
    (
        "ebind-builtin-source-refused",
        "nodefault",
        lambda r: [m(C.Exchange.Bind, destination=r.x("w"), source="amq.direct")],
    ),
    (
        "ebind-missing-dest",
        "main",
        lambda r: [m(C.Exchange.Bind, destination=r.X("w"), source=r.x("r"))],
    ),
    (
        "ebind-missing-source",
        "main",
        lambda r: [m(C.Exchange.Bind, destination=r.x("w"), source=r.X("r"))],
    ),
    (
        "ebind-both-missing",
        "main",
        lambda r: [m(C.Exchange.Bind, destination=r.X("w"), source=r.X("r"))],
    ),
    (
        "ebind-missing-refused",
        "main",
        lambda r: [m(C.Exchange.Bind, destination=r.X("n"), source=r.X("r"))],
    ),
    (
        "ebind-crlf",
        "main",
        lambda r: [m(C.Exchange.Bind, destination=r.x("w") + "\r", source=r.x("r") + "\n")],
    ),
    (
        "eunbind-allowed",
        "main",
        lambda r: [
            m(C.Exchange.Bind, destination=r.x("w"), source=r.x("r"), routing_key="k"),
            m(C.Exchange.Unbind, destination=r.x("w"), source=r.x("r"), routing_key="k"),
        ],
    ),
    (
        "eunbind-no-binding",
        "main",
        lambda r: [m(C.Exchange.Unbind, destination=r.x("w"), source=r.x("r"), routing_key="k")],
    ),
    (
        "eunbind-no-write-dest",
        "main",
        lambda r: [m(C.Exchange.Unbind, destination=r.x("cr"), source=r.x("r"))],
    ),
    (
        "eunbind-no-read-source",
        "main",
        lambda r: [m(C.Exchange.Unbind, destination=r.x("w"), source=r.x("w"))],
    ),
    (
        "eunbind-missing-dest",
        "main",
        lambda r: [m(C.Exchange.Unbind, destination=r.X("w"), source=r.x("r"))],
    ),
    (
        "eunbind-missing-source",
        "main",
        lambda r: [m(C.Exchange.Unbind, destination=r.x("w"), source=r.X("r"))],
    ),
    (
        "eunbind-default-source",
        "main",
        lambda r: [m(C.Exchange.Unbind, destination=r.x("w"), source="")],
    ),
    # ---- queue.declare: configure; passive checks nothing; dead-letter exchange
    ("qdecl-new-allowed", "main", lambda r: [qdecl(r.Q("c"))]),
    ("qdecl-new-refused", "main", lambda r: [qdecl(r.Q("wr"))]),
    ("qdecl-existing-allowed", "main", lambda r: [qdecl(r.q("c"))]),
    ("qdecl-existing-refused", "main", lambda r: [qdecl(r.q("wr"))]),
    ("qdecl-passive-no-permission", "main", lambda r: [qdecl(r.q("n"), passive=True)]),
    ("qdecl-passive-missing", "main", lambda r: [qdecl(r.Q("n"), passive=True)]),
    ("qdecl-server-named-refused", "main", lambda r: [qdecl("")]),
    ("qdecl-reserved-name", "main", lambda r: [qdecl("amq.t-" + r.token)]),
    ("qdecl-exclusive-other-passive", "main", lambda r: [qdecl(r.xq("n"), passive=True)]),
    ("qdecl-exclusive-other-refused", "main", lambda r: [qdecl(r.xq("wr"))]),
    ("qdecl-exclusive-other-allowed", "main", lambda r: [qdecl(r.xq("c"))]),
    ("qdecl-crlf", "main", lambda r: [qdecl(r.Q("c") + "\r\n"), qdecl(r.Q("c"), passive=True)]),
    ("dlx-allowed", "main", lambda r: [qdecl(r.Q("cr"), **{DLX: r.x("w")})]),
    ("dlx-no-read-on-queue", "main", lambda r: [qdecl(r.Q("c"), **{DLX: r.x("w")})]),
    ("dlx-no-write-on-dlx", "main", lambda r: [qdecl(r.Q("cr"), **{DLX: r.x("r")})]),
    ("dlx-missing-exchange", "main", lambda r: [qdecl(r.Q("cr"), **{DLX: r.X("w")})]),
    ("dlx-default", "main", lambda r: [qdecl(r.Q("cr"), **{DLX: ""})]),
    ("dlx-default-refused", "nodefault", lambda r: [qdecl(r.Q("cr"), **{DLX: ""})]),
    ("dlx-int", "main", lambda r: [qdecl(r.Q("c"), **{DLX: 7})]),
    ("dlx-bytes", "main", lambda r: [qdecl(r.Q("c"), **{DLX: bytearray(r.x("w").encode())})]),
    (
        "dlx-before-argument-validation",
        "main",
        lambda r: [qdecl(r.Q("cr"), **{DLX: r.x("r"), "x-message-ttl": "abc"})],
    ),
    (
        "dlx-existing-not-checked",
        "main",
        lambda r: [qdecl(r.q("c")), qdecl(r.q("c"), **{DLX: r.x("n")})],
    ),
    ("dlx-no-configure-first", "main", lambda r: [qdecl(r.Q("r"), **{DLX: r.x("n")})]),
    # ---- queue.bind / queue.unbind: write on the queue, read on the exchange
    (
        "qbind-allowed",
        "main",
        lambda r: [m(C.Queue.Bind, queue=r.q("w"), exchange=r.x("r"), routing_key="k")],
    ),
    (
        "qbind-no-write-queue",
        "main",
        lambda r: [m(C.Queue.Bind, queue=r.q("cr"), exchange=r.x("r"))],
    ),
    (
        "qbind-no-read-exchange",
        "main",
        lambda r: [m(C.Queue.Bind, queue=r.q("w"), exchange=r.x("cw"))],
    ),
    ("qbind-default", "main", lambda r: [m(C.Queue.Bind, queue=r.q("w"), exchange="")]),
    ("qbind-default-no-write", "main", lambda r: [m(C.Queue.Bind, queue=r.q("c"), exchange="")]),
    ("qbind-missing-queue", "main", lambda r: [m(C.Queue.Bind, queue=r.Q("w"), exchange=r.x("r"))]),
    (
        "qbind-missing-exchange",
        "main",
        lambda r: [m(C.Queue.Bind, queue=r.q("w"), exchange=r.X("r"))],
    ),
    (
        "qbind-missing-refused",
        "main",
        lambda r: [m(C.Queue.Bind, queue=r.Q("c"), exchange=r.X("r"))],
    ),
    (
        "qbind-exclusive-other",
        "main",
        lambda r: [m(C.Queue.Bind, queue=r.xq("w"), exchange=r.x("r"))],
    ),
    (
        "qbind-last-declared",
        "main",
        lambda r: [qdecl(r.q("n"), passive=True), m(C.Queue.Bind, queue="", exchange=r.x("r"))],
    ),
    ("qbind-no-last-declared", "main", lambda r: [m(C.Queue.Bind, queue="", exchange=r.x("n"))]),
    (
        "qunbind-allowed",
        "main",
        lambda r: [
            m(C.Queue.Bind, queue=r.q("w"), exchange=r.x("r"), routing_key="k"),
            m(C.Queue.Unbind, queue=r.q("w"), exchange=r.x("r"), routing_key="k"),
        ],
    ),
    (
        "qunbind-no-binding",
        "main",
        lambda r: [m(C.Queue.Unbind, queue=r.q("w"), exchange=r.x("r"), routing_key="k")],
    ),
    (
        "qunbind-no-write-queue",
        "main",
        lambda r: [m(C.Queue.Unbind, queue=r.q("cr"), exchange=r.x("r"))],
    ),
    (
        "qunbind-no-read-exchange",
        "main",
        lambda r: [m(C.Queue.Unbind, queue=r.q("w"), exchange=r.x("w"))],
    ),
    (
        "qunbind-missing-queue",
        "main",
        lambda r: [m(C.Queue.Unbind, queue=r.Q("w"), exchange=r.x("r"))],
    ),
    ("qunbind-default", "main", lambda r: [m(C.Queue.Unbind, queue=r.q("w"), exchange="")]),
    # ---- queue.purge: read
    ("purge-allowed", "main", lambda r: [m(C.Queue.Purge, queue=r.q("r"))]),
    ("purge-refused", "main", lambda r: [m(C.Queue.Purge, queue=r.q("cw"))]),
    ("purge-missing", "main", lambda r: [m(C.Queue.Purge, queue=r.Q("r"))]),
    ("purge-missing-refused", "main", lambda r: [m(C.Queue.Purge, queue=r.Q("c"))]),
    ("purge-exclusive-other", "main", lambda r: [m(C.Queue.Purge, queue=r.xq("r"))]),
    (
        "purge-last-declared",
        "main",
        lambda r: [qdecl(r.q("c"), passive=True), m(C.Queue.Purge, queue="")],
    ),
    # ---- queue.delete: configure
    ("qdel-allowed", "main", lambda r: [m(C.Queue.Delete, queue=r.q("c"))]),
    ("qdel-refused", "main", lambda r: [m(C.Queue.Delete, queue=r.q("wr"))]),
    ("qdel-missing", "main", lambda r: [m(C.Queue.Delete, queue=r.Q("c"))]),
    ("qdel-missing-refused", "main", lambda r: [m(C.Queue.Delete, queue=r.Q("wr"))]),
    ("qdel-exclusive-other", "main", lambda r: [m(C.Queue.Delete, queue=r.xq("c"))]),
    (
        "qdel-crlf",
        "main",
        lambda r: [m(C.Queue.Delete, queue=r.q("c") + "\r\n"), qdecl(r.q("c"), passive=True)],
    ),
    # ---- basic.get / basic.consume: read
    ("get-allowed", "main", lambda r: [m(C.Basic.Get, queue=r.q("r"))]),
    ("get-refused", "main", lambda r: [m(C.Basic.Get, queue=r.q("cw"))]),
    ("get-missing", "main", lambda r: [m(C.Basic.Get, queue=r.Q("r"))]),
    ("get-missing-refused", "main", lambda r: [m(C.Basic.Get, queue=r.Q("c"))]),
    ("get-exclusive-other", "main", lambda r: [m(C.Basic.Get, queue=r.xq("r"))]),
    (
        "consume-allowed",
        "main",
        lambda r: [m(C.Basic.Consume, queue=r.q("r"), consumer_tag="t", no_ack=True)],
    ),
    ("consume-refused", "main", lambda r: [m(C.Basic.Consume, queue=r.q("cw"), consumer_tag="t")]),
    ("consume-missing", "main", lambda r: [m(C.Basic.Consume, queue=r.Q("r"), consumer_tag="t")]),
    (
        "consume-exclusive-other",
        "main",
        lambda r: [m(C.Basic.Consume, queue=r.xq("r"), consumer_tag="t")],
    ),
    (
        "consume-tag-reuse-first",
        "main",
        lambda r: [
            m(C.Basic.Consume, queue=r.q("r"), consumer_tag="t", no_ack=True),
            m(C.Basic.Consume, queue=r.q("n"), consumer_tag="t"),
        ],
    ),
    # ---- basic.publish: write on the exchange (the default one as 'amq.default')
    ("publish-allowed", "main", lambda r: [Publish(r.x("w"))]),
    ("publish-refused", "main", lambda r: [Publish(r.x("cr"))]),
    ("publish-default", "main", lambda r: [Publish("", r.q("n"), mandatory=True)]),
    ("publish-default-refused", "nodefault", lambda r: [Publish("", r.q("n"))]),
    ("publish-amq-default-by-name", "main", lambda r: [Publish("amq.default", r.q("n"))]),
    ("publish-missing", "main", lambda r: [Publish(r.X("w"))]),
    ("publish-missing-refused", "main", lambda r: [Publish(r.X("r"))]),
    ("publish-internal", "main", lambda r: [Publish(r.x("w", internal=True))]),
    ("publish-internal-refused", "main", lambda r: [Publish(r.x("r", internal=True))]),
    ("publish-tx-refused", "main", lambda r: [m(C.Tx.Select), Publish(r.x("cr")), m(C.Tx.Commit)]),
    ("publish-confirm-refused", "main", lambda r: [m(C.Confirm.Select), Publish(r.x("cr"))]),
    # ---- users with empty patterns, byte-wise matching
    ("empty-declare", "empty", lambda r: [xdecl(r.X("cwr"))]),
    ("empty-publish-default", "empty", lambda r: [Publish("", "x")]),
    ("empty-get", "empty", lambda r: [m(C.Basic.Get, queue=r.q("cwr"))]),
    ("empty-crlf-name-is-empty", "empty", lambda r: [m(C.Queue.Delete, queue="\n")]),
    ("empty-crlf-name-refused", "main", lambda r: [m(C.Queue.Delete, queue="\r")]),
    ("empty-passive", "empty", lambda r: [xdecl(r.x("cwr"), passive=True)]),
    ("bytes-one-character", "bytes", lambda r: [xdecl("e.u.\u00e9")]),
    ("bytes-one-byte", "bytes", lambda r: [xdecl("e.u.z")]),
    # ---- a user with no permissions in the vhost cannot open it
    ("vhost-refused", "none", lambda r: []),
    ("vhost-refused-administrator", "admin", lambda r: []),
]


# ------------------------------------------------------------------ running a case
def open_connection(site: Site, user: str) -> tuple[RawClient | None, str | None]:
    """A connection of ``user`` to the site's vhost, or the close that refused it."""
    c = RawClient(site.broker.host, site.broker.port)
    c.send(PROTOCOL_HEADER)
    c.expect(C.Connection.Start)
    c.send_method(
        0,
        C.Connection.StartOk(
            client_properties={"capabilities": {"authentication_failure_close": True}},
            mechanism="PLAIN",
            response=f"\0{user}\0{PASSWORD}",
            locale="en_US",
        ),
    )
    tune = c.expect(C.Connection.Tune)
    c.send_method(
        0, C.Connection.TuneOk(channel_max=tune.channel_max, frame_max=tune.frame_max, heartbeat=0)
    )
    c.send_method(0, C.Connection.Open(virtual_host=site.vhost))
    got = c.recv_frame()
    if got is not None and isinstance(got[1], C.Connection.OpenOk):
        return c, None
    c.close()
    if got is None:
        return None, "eof"
    close = got[1]
    return None, f"connection.close {close.reply_code} {close.reply_text}"


def send(c: RawClient, channel: int, step: Step) -> None:
    if isinstance(step, Publish):
        data = marshal_unchecked(
            C.Basic.Publish(
                exchange=step.exchange, routing_key=step.routing_key, mandatory=step.mandatory
            ),
            channel,
        )
        props = C.Basic.Properties()
        data += frame.marshal(header.ContentHeader(0, 2, props), channel)
        data += frame.marshal(body.ContentBody(b"hi"), channel)
        # publish has no reply: a qos round trip tells whether the channel survived
        data += frame.marshal(C.Basic.Qos(), channel)
        c.send(data)
    else:
        c.send(marshal_unchecked(step, channel))


def reply(c: RawClient, channel: int, step: Step) -> tuple[str, bool]:
    """The answer to ``step``: (what it was, whether the channel is still open)."""
    expected = (
        ["Basic.QosOk"] if isinstance(step, Publish) else list(getattr(step, "valid_responses", []))
    )
    seen: list[str] = []
    while True:
        got = c.recv_frame()
        if got is None:
            return "eof", False
        ch, value = got
        if isinstance(value, C.Connection.Close):
            c.send_method(0, C.Connection.CloseOk())
            return (
                f"connection.close {value.reply_code} {value.reply_text} "
                f"{value.class_id}.{value.method_id}",
                False,
            )
        if ch != channel:
            continue
        if isinstance(value, C.Channel.Close):
            c.send_method(channel, C.Channel.CloseOk())
            return (
                f"channel.close {value.reply_code} {value.reply_text} "
                f"{value.class_id}.{value.method_id}",
                False,
            )
        name = getattr(value, "name", "")
        if isinstance(value, C.Basic.Return):
            seen.append(f"return {value.reply_code} {value.reply_text}")
        if name in expected:
            return " ".join([*seen, describe(value)]), True


def describe(value: Any) -> str:
    fields = {
        "Queue.DeclareOk": ("queue", "message_count", "consumer_count"),
        "Queue.PurgeOk": ("message_count",),
        "Queue.DeleteOk": ("message_count",),
        "Basic.GetOk": ("exchange", "routing_key", "message_count"),
    }
    out = [value.name]
    out += [f"{f}={getattr(value, f)}" for f in fields.get(value.name, ())]
    return " ".join(out)


def connection_for(site: Site, role: str) -> tuple[RawClient | None, str | None]:
    c = site.clients.get(role)
    if c is not None:
        return c, None
    c, refused = open_connection(site, site.users[role])
    if c is not None:
        site.clients[role] = c
    return c, refused


def run_case(site: Site, case: Case) -> list[str]:
    _, role, build = case
    names = Names()
    steps = build(names)
    site.prepare(names)
    c, refused = connection_for(site, role)
    if c is None:
        out = [str(refused)]
    else:
        out = []
        channel = site.next_channel()
        c.send_method(channel, C.Channel.Open())
        c.expect(C.Channel.OpenOk)
        open_ = True
        for step in steps:
            send(c, channel, step)
            answer, open_ = reply(c, channel, step)
            out.append(answer)
            if not open_:
                break
        if open_:
            done = C.Channel.Close(reply_code=200, reply_text="done", class_id=0, method_id=0)
            c.send_method(channel, done)
            reply(c, channel, done)
        if out and out[-1].startswith(("connection.close", "eof")):
            site.clients.pop(role, None)
            c.close()
    return [site.normalize(o, names, role) for o in out]


def outcomes(broker: BrokerUnderTest) -> Iterator[dict[str, list[str]]]:
    for site in make_site(broker):
        yield {case[0]: run_case(site, case) for case in CASES}


@pytest.fixture(scope="module")
def leveret_outcomes(leveret: BrokerUnderTest) -> Iterator[dict[str, list[str]]]:
    yield from outcomes(leveret)


@pytest.fixture(scope="module")
def rabbitmq_outcomes(rabbitmq: BrokerUnderTest) -> Iterator[dict[str, list[str]]]:
    if not ensure_rabbitmq_management():
        pytest.fail("RabbitMQ's management plugin could not be enabled")
    yield from outcomes(rabbitmq)


@pytest.mark.parametrize("case", [c[0] for c in CASES])
def test_matrix(
    case: str, leveret_outcomes: dict[str, list[str]], rabbitmq_outcomes: dict[str, list[str]]
) -> None:
    assert leveret_outcomes[case] == rabbitmq_outcomes[case]


def test_the_matrix_refuses_and_allows(rabbitmq_outcomes: dict[str, list[str]]) -> None:
    """The table exercises both answers of every check (it cannot pass vacuously)."""
    answers = " ".join(a for out in rabbitmq_outcomes.values() for a in out)
    for what in (
        "Exchange.DeclareOk",
        "Queue.BindOk",
        "Exchange.BindOk",
        "Basic.GetOk",
        "ACCESS_REFUSED - access to exchange",
        "ACCESS_REFUSED - access to queue",
        "NOT_ALLOWED - access to vhost",
    ):
        assert what in answers, what
