"""RabbitMQ 4.2's AMQP management node, request by request, on a broker of the test's own.

The reference broker here is RabbitMQ 3.10.8, which has no management node: the texts and
statuses RabbitMQ 4.2 answers with are pinned from its own suites, named at each test
(deps/rabbitmq_amqp_client/test/management_SUITE.erl, deps/rabbit/test/amqp_auth_SUITE.erl
at v4.2.9), or read from rabbit_amqp_management.erl where its suites do not test them."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from leveret.broker.amqp10_management import Node, SessionEnd, handle_request
from leveret.broker.amqp10_mgmt_wire import args_hash, parse_target
from leveret.broker.broker import BrokerCore
from leveret.broker.exchanges.erlhash import Atom, make_hash2
from leveret.broker.message import Message
from leveret.broker.operations import Actor
from leveret.broker.queues import Queue
from leveret.protocol.amqp10 import definitions as d
from leveret.protocol.amqp10 import types as t
from leveret.protocol.amqp10.types import Value
from leveret.protocol.spec import TypedTable
from tests.broker.fakes import FakeConnection

NULL: Value = ("null", None)


def s(text: str) -> Value:
    return ("string", text)


def amap(**items: Value) -> Value:
    return ("map", [(s(k), v) for k, v in items.items()])


def args(**items: Value) -> Value:
    return ("map", [(s(k.replace("_", "-")), v) for k, v in items.items()])


def plain(value: Value) -> Any:
    kind, v = value
    if kind == "map":
        return {plain(k): plain(x) for k, x in v}
    if kind in ("list", "array"):
        return [plain(x) for x in v]
    return v


class Mgmt:
    """One user's requests on one connection, as the link pair hands them over."""

    def __init__(self, broker: BrokerCore, user: str = "guest", cid: int = 1) -> None:
        self.broker = broker
        self.vhost = broker.vhosts["/"]
        self.connection = FakeConnection(cid, user)
        self.owned: list[Queue] = []
        actor = Actor(user, broker.users.permission(user, "/"), self.connection)
        self.node = Node(self.vhost, actor, broker.node_name, self.owned.append)

    def raw(
        self,
        method: str,
        to: str,
        body: Value = NULL,
        message_id: Value = ("string", "m-1"),
        reply_to: Value = ("string", "$me"),
    ) -> list[tuple[int, Value]]:
        props = ("list", [message_id, NULL, s(to), s(method), reply_to])
        payload = t.section(t.PROPERTIES, props) + t.section(t.AMQP_VALUE, body)
        return t.sections(handle_request(payload, self.node))

    def __call__(self, method: str, to: str, body: Value = NULL) -> tuple[str, Value]:
        sections = dict(self.raw(method, to, body))
        return sections[t.PROPERTIES][1][3][1], sections[t.AMQP_VALUE]

    def ok(self, method: str, to: str, body: Value = NULL) -> tuple[str, Any]:
        status, value = self(method, to, body)
        assert status in ("200", "201", "204"), value
        return status, plain(value)

    def refused(self, method: str, to: str, body: Value = NULL) -> tuple[str, str]:
        status, value = self(method, to, body)
        assert value[0] == "string", value
        return status, value[1]


@pytest.fixture
def mgmt(domain: BrokerCore) -> Mgmt:
    return Mgmt(domain)


def session_end(m: Mgmt, method: str, to: str, body: Value = NULL) -> d.Error:
    with pytest.raises(SessionEnd) as info:
        m(method, to, body)
    return info.value.error


def denied(broker: BrokerCore, configure: str = "", write: str = "", read: str = "") -> Mgmt:
    broker.add_user("test user", "pw")
    broker.set_permissions("test user", "/", configure, write, read)
    return Mgmt(broker, "test user", cid=2)


# ------------------------------------------------------------------- the messages
def test_the_response_answers_the_request_as_http_over_amqp(mgmt: Mgmt) -> None:
    # correlation-id: the request's message-id, whatever its type; application properties
    # http:response 1.1; subject the status (rabbit_amqp_management:handle_request)
    sections = mgmt.raw("GET", "/queues/q", message_id=("binary", b"\x01\x02\x03"))
    assert [code for code, _ in sections] == [t.PROPERTIES, t.APPLICATION_PROPERTIES, t.AMQP_VALUE]
    props = sections[0][1][1]
    assert props[3] == s("404") and props[5] == ("binary", b"\x01\x02\x03")
    assert plain(sections[1][1]) == {"http:response": "1.1"}


def test_a_request_must_be_a_link_pair_request(mgmt: Mgmt) -> None:
    # reply-to must be exactly $me (Link Pair CS01 2.1): RabbitMQ's match fails, its
    # session crashes
    with pytest.raises(SessionEnd) as info:
        mgmt.raw("GET", "/queues/q", reply_to=s("elsewhere"))
    assert info.value.error.condition == d.INTERNAL_ERROR


@pytest.mark.parametrize(
    ("method", "to", "body"),
    [
        ("GET", "/exchanges/x", NULL),  # no such clause
        ("PATCH", "/queues/q", NULL),
        ("GET", "/queues/q", amap()),  # GET and DELETE take a null body only
        ("DELETE", "/queues/q", ("string", "")),
        ("PUT", "/queues/q", NULL),  # PUT takes a map
        ("GET", "/bindings?src=x", NULL),  # src and key are needed
        ("PUT", "/auth/tokens", s("not binary")),
        ("DELETE", "/queues/q/", NULL),
    ],
)
def test_what_rabbitmq_has_no_clause_for_ends_the_session(
    mgmt: Mgmt, method: str, to: str, body: Value
) -> None:
    assert session_end(mgmt, method, to, body).condition == d.INTERNAL_ERROR


def test_a_bad_uri(mgmt: Mgmt) -> None:
    # management_SUITE bad_uri
    assert mgmt.refused("GET", "👎") == ("400", "failed to normalize URI '👎': invalid_uri \"👎\"")
    assert mgmt.refused("GET", "/queues/a%zz") == (
        "400",
        "failed to normalize URI '/queues/a%zz': invalid_percent_encoding <<\"%zz\">>",
    )


def test_the_target_as_uri_string_normalizes_it() -> None:
    # uri_string:normalize (measured with OTP 25's): unreserved characters decoded, the
    # others' hex upper-cased, dot segments removed, a lone trailing % kept
    assert parse_target("/queues/a%41%2fb") == (["queues", "aA%2Fb"], {})
    assert parse_target("/queues/../exchanges/./x") == (["exchanges", "x"], {})
    assert parse_target("/queues/a%4") == (["queues", "a%4"], {})
    assert parse_target("/bindings?src=a&dstq=b+c&key=%41") == (
        ["bindings"],
        {"src": "a", "dstq": "b c", "key": "A"},
    )


def test_names_are_percent_decoded(mgmt: Mgmt) -> None:
    assert mgmt("PUT", "/queues/my%20%F0%9F%90%87", amap())[0] == "201"
    assert "my 🐇" in mgmt.vhost.queues


# ------------------------------------------------------------------------ queues
def test_get_queue_not_found(mgmt: Mgmt) -> None:
    # management_SUITE get_queue_not_found
    assert mgmt.refused("GET", "/queues/%F0%9F%A4%B7") == (
        "404",
        "queue '🤷' in vhost '/' not found",
    )


def test_declare_queue_idempotent_with_its_info(mgmt: Mgmt, domain: BrokerCore) -> None:
    # management_SUITE all_management_operations: the same map from the declaration, its
    # repetition and get_queue; the keys and types of encode_queue
    body = amap(
        exclusive=("bool", False),
        auto_delete=("bool", False),
        arguments=args(x_queue_type=s("quorum")),
    )
    status, created = mgmt("PUT", "/queues/my%20q", body)
    assert status == "201"
    assert [k[1] for k, _ in created[1]] == [
        "leader",
        "message_count",
        "consumer_count",
        "name",
        "vhost",
        "durable",
        "auto_delete",
        "exclusive",
        "type",
        "arguments",
        "replicas",
    ]
    fields = dict((k[1], v) for k, v in created[1])
    assert fields["message_count"] == ("ulong", 0)
    assert fields["consumer_count"] == ("uint", 0)
    assert plain(created) == {
        "leader": "rabbit@domain-test",
        "message_count": 0,
        "consumer_count": 0,
        "name": "my q",
        "vhost": "/",
        "durable": True,
        "auto_delete": False,
        "exclusive": False,
        "type": "quorum",
        "arguments": {"x-queue-type": "quorum"},
        "replicas": ["rabbit@domain-test"],
    }
    assert mgmt("PUT", "/queues/my%20q", body) == ("200", created)
    assert mgmt("GET", "/queues/my%20q") == ("200", created)


def test_queue_defaults_and_the_type_written_down(mgmt: Mgmt) -> None:
    # management_SUITE queue_defaults; augment_declare_args writes x-queue-type down
    _, info = mgmt.ok("PUT", "/queues/q", amap())
    assert (info["durable"], info["exclusive"], info["auto_delete"]) == (True, False, False)
    assert info["type"] == "classic" and info["arguments"] == {"x-queue-type": "classic"}
    q = mgmt.vhost.queues["q"]
    assert q.durable and q.arguments == {"x-queue-type": "classic"}


def test_queue_info_counts_ready_messages_and_consumers(mgmt: Mgmt) -> None:
    mgmt.ok("PUT", "/queues/q", amap())
    v = mgmt.vhost
    for body in (b"1", b"2"):
        v.publish_to(v.exchanges[""], Message.from_parts("", "q", b"", body), False)
    _, info = mgmt.ok("GET", "/queues/q")
    assert (info["message_count"], info["consumer_count"]) == (2, 0)
    assert mgmt.ok("DELETE", "/queues/q/messages") == ("200", {"message_count": 2})
    assert mgmt.ok("GET", "/queues/q")[1]["message_count"] == 0


def test_an_exclusive_queue_is_the_connections_and_stays_durable(
    mgmt: Mgmt, domain: BrokerCore
) -> None:
    # management_SUITE queue_properties and exclusive_queue: durable unless asked
    # otherwise; another connection is locked out of binding, deleting and purging it
    _, info = mgmt.ok("PUT", "/queues/%F0%9F%99%8C", amap(exclusive=("bool", True)))
    assert info["exclusive"] and info["durable"]
    assert [q.name for q in mgmt.owned] == ["🙌"]
    other = Mgmt(domain, cid=7)
    locked = (
        "cannot obtain exclusive access to locked queue '🙌' in vhost '/'. It could be "
        "originally declared on another connection or the exclusive property value does "
        "not match that of the original declaration."
    )
    bind = amap(
        source=s("amq.direct"),
        destination_queue=s("🙌"),
        binding_key=s("k"),
        arguments=("map", []),
    )
    assert other.refused("POST", "/bindings", bind) == ("400", locked)
    assert other.refused("DELETE", "/queues/%F0%9F%99%8C") == ("400", locked)
    assert other.refused("DELETE", "/queues/%F0%9F%99%8C/messages") == ("400", locked)
    assert other("GET", "/queues/%F0%9F%99%8C")[0] == "200"  # no exclusivity check there
    # management_SUITE declare_queue_inequivalent_exclusive
    assert mgmt.refused("PUT", "/queues/%F0%9F%99%8C", amap(exclusive=("bool", False))) == (
        "400",
        locked,
    )


@pytest.mark.parametrize(
    ("to", "body", "status", "text"),
    [
        # management_SUITE declare_queue_empty_name
        ("/queues/", amap(), "400", "declare queue with empty name not allowed"),
        # management_SUITE declare_queue_line_feed
        (
            "/queues/%F0%9F%A4%A0%0A%F0%9F%98%B1",
            amap(),
            "400",
            "Bad name '🤠\n😱': line feed and carriage return characters not allowed",
        ),
        # management_SUITE declare_queue_amq_prefix
        (
            "/queues/amq.%F0%9F%8E%87",
            amap(),
            "403",
            "queue 'amq.🎇' in vhost '/' starts with reserved prefix 'amq.'",
        ),
        # management_SUITE bad_queue_property
        (
            "/queues/my-object",
            ("map", [(s("unknown"), s("bla"))]),
            "400",
            'bad queue property {{utf8,<<"unknown">>},{utf8,<<"bla">>}}',
        ),
        # a flag that is no boolean is an unknown property to decode_queue
        (
            "/queues/q",
            amap(durable=s("yes")),
            "400",
            'bad queue property {{utf8,<<"durable">>},{utf8,<<"yes">>}}',
        ),
        # management_SUITE declare_queue_invalid_field (there a stream: the same check)
        (
            "/queues/%F0%9F%91%8C",
            amap(auto_delete=("bool", True), arguments=args(x_queue_type=s("quorum"))),
            "400",
            "invalid property 'auto-delete' for queue '👌' in vhost '/'",
        ),
        # check_declare_arguments exits: 409
        (
            "/queues/q",
            amap(arguments=args(x_max_length=("long", -1))),
            "409",
            "invalid arg 'x-max-length' for queue 'q' in vhost '/': {value_negative,-1}",
        ),
        # rabbit_amqqueue:check_queue_type
        (
            "/queues/q",
            amap(arguments=args(x_queue_type=s("foo"))),
            "409",
            "invalid arg 'x-queue-type' for queue 'q' in vhost '/': \"unsupported queue type "
            "'foo'\"",
        ),
        # check_routing_arg
        (
            "/queues/q",
            amap(arguments=args(x_dead_letter_exchange=("long", 1))),
            "400",
            "invalid type 'long' for arg 'x-dead-letter-exchange'",
        ),
        # args_amqp_to_amqpl: keys are strings or symbols
        (
            "/queues/q",
            amap(arguments=("map", [(("long", 1), s("x"))])),
            "400",
            'unsupported argument {{long,1},{utf8,<<"x">>}}',
        ),
    ],
)
def test_declare_queue_refused(mgmt: Mgmt, to: str, body: Value, status: str, text: str) -> None:
    assert mgmt.refused("PUT", to, body) == (status, text)


def test_declare_queue_inequivalent_fields(mgmt: Mgmt) -> None:
    # management_SUITE declare_queue_inequivalent_fields
    mgmt.ok("PUT", "/queues/%F0%9F%91%8C", amap(auto_delete=("bool", False)))
    assert mgmt.refused("PUT", "/queues/%F0%9F%91%8C", amap(auto_delete=("bool", True))) == (
        "409",
        "inequivalent arg 'auto_delete' for queue '👌' in vhost '/': received 'true' but "
        "current is 'false'",
    )


def test_the_vhost_queue_limit(mgmt: Mgmt) -> None:
    # amqp_auth_SUITE declare_queue_vhost_queue_limit
    mgmt.vhost.set_limits({"max-queues": 0})
    assert mgmt.refused("PUT", "/queues/%F0%9F%8D%BF", amap()) == (
        "403",
        "cannot declare queue '🍿': queue limit in vhost '/' (0) is reached",
    )


def test_delete_and_purge(mgmt: Mgmt) -> None:
    # management_SUITE all_management_operations, purge_non_existing_queue_should_return_
    # not_found: deleting what is not there is no error, purging it is a 404
    mgmt.ok("PUT", "/queues/q", amap())
    v = mgmt.vhost
    v.publish_to(v.exchanges[""], Message.from_parts("", "q", b"", b"x"), False)
    assert mgmt.ok("DELETE", "/queues/q") == ("200", {"message_count": 1})
    assert mgmt.ok("DELETE", "/queues/q") == ("200", {"message_count": 0})
    assert mgmt.refused("DELETE", "/queues/q/messages") == ("404", "no queue 'q' in vhost '/'")


# --------------------------------------------------------------------- exchanges
@pytest.mark.parametrize(
    ("kind", "arguments"),
    [
        ("direct", {}),
        ("fanout", {}),
        ("topic", {}),
        ("headers", {}),
        ("x-consistent-hash", {}),
        ("x-delayed-message", {"x-delayed-type": s("direct")}),
    ],
)
def test_declare_exchange_of_each_type(mgmt: Mgmt, kind: str, arguments: dict[str, Value]) -> None:
    body = amap(type=s(kind), arguments=("map", [(s(k), v) for k, v in arguments.items()]))
    assert mgmt.ok("PUT", "/exchanges/e", body) == ("204", None)
    assert mgmt.ok("PUT", "/exchanges/e", body) == ("204", None)
    x = mgmt.vhost.exchanges["e"]
    assert (x.type_name, x.durable, x.auto_delete, x.internal) == (kind, True, False, False)
    assert mgmt.ok("DELETE", "/exchanges/e") == ("204", None)
    assert mgmt.ok("DELETE", "/exchanges/e") == ("204", None)
    assert "e" not in mgmt.vhost.exchanges


def test_exchange_defaults(mgmt: Mgmt) -> None:
    # management_SUITE exchange_defaults
    mgmt.ok("PUT", "/exchanges/exchange_defaults", amap())
    x = mgmt.vhost.exchanges["exchange_defaults"]
    assert (x.type_name, x.durable, x.auto_delete, x.internal, x.arguments) == (
        "direct",
        True,
        False,
        False,
        {},
    )


@pytest.mark.parametrize(
    ("method", "to", "body", "status", "text"),
    [
        # management_SUITE declare_default_exchange, delete_default_exchange
        ("PUT", "/exchanges/", amap(), "403", "operation not permitted on the default exchange"),
        ("DELETE", "/exchanges/", NULL, "403", "operation not permitted on the default exchange"),
        # management_SUITE declare_exchange_amq_prefix, delete_exchange_amq_prefix
        (
            "PUT",
            "/exchanges/amq.%F0%9F%8E%87",
            amap(),
            "403",
            "exchange 'amq.🎇' in vhost '/' starts with reserved prefix 'amq.'",
        ),
        (
            "DELETE",
            "/exchanges/amq.fanout",
            NULL,
            "403",
            "exchange 'amq.fanout' in vhost '/' starts with reserved prefix 'amq.'",
        ),
        # management_SUITE declare_exchange_line_feed, delete_exchange_carriage_return
        (
            "PUT",
            "/exchanges/%F0%9F%A4%A0%0A%F0%9F%98%B1",
            amap(),
            "400",
            "Bad name '🤠\n😱': line feed and carriage return characters not allowed",
        ),
        (
            "DELETE",
            "/exchanges/x%0Dx",
            NULL,
            "400",
            "Bad name 'x\rx': line feed and carriage return characters not allowed",
        ),
        # management_SUITE bad_exchange_type, bad_exchange_property
        ("PUT", "/exchanges/e1", amap(type=s("🤷")), "400", "unknown exchange type '🤷'"),
        (
            "PUT",
            "/exchanges/my-object",
            ("map", [(s("unknown"), s("bla"))]),
            "400",
            'bad exchange property {{utf8,<<"unknown">>},{utf8,<<"bla">>}}',
        ),
        # check_routing_arg
        (
            "PUT",
            "/exchanges/e",
            amap(arguments=args(alternate_exchange=("bool", True))),
            "400",
            "invalid type 'bool' for arg 'alternate-exchange'",
        ),
    ],
)
def test_exchange_refused(
    mgmt: Mgmt, method: str, to: str, body: Value, status: str, text: str
) -> None:
    assert mgmt.refused(method, to, body) == (status, text)


def test_declare_exchange_inequivalent_fields(mgmt: Mgmt) -> None:
    # management_SUITE declare_exchange_inequivalent_fields; an amq. exchange that
    # exists is declared as any other
    mgmt.ok("PUT", "/exchanges/%F0%9F%91%8C", amap(type=s("direct")))
    assert mgmt.refused("PUT", "/exchanges/%F0%9F%91%8C", amap(type=s("fanout"))) == (
        "409",
        "inequivalent arg 'type' for exchange '👌' in vhost '/': received 'fanout' but "
        "current is 'direct'",
    )
    assert mgmt.ok("PUT", "/exchanges/amq.fanout", amap(type=s("fanout")))[0] == "204"


# ---------------------------------------------------------------------- bindings
def binding(source: str, dest: str, key: str, kind: str = "queue", **arguments: Value) -> Value:
    return amap(
        source=s(source),
        **{f"destination_{kind}": s(dest)},
        binding_key=s(key),
        arguments=("map", [(s(k), v) for k, v in arguments.items()]),
    )


def routed(m: Mgmt, exchange: str, key: str) -> bool:
    v = m.vhost
    return v.publish_to(
        v.exchanges[exchange], Message.from_parts(exchange, key, b"", b"m"), False
    ).routed


def test_bind_and_unbind_a_queue(mgmt: Mgmt) -> None:
    # management_SUITE all_management_operations: both idempotent
    mgmt.ok("PUT", "/queues/q", amap())
    assert mgmt.ok("POST", "/bindings", binding("amq.direct", "q", "🗝️ 1"))[0] == "204"
    assert mgmt.ok("POST", "/bindings", binding("amq.direct", "q", "🗝️ 1"))[0] == "204"
    assert routed(mgmt, "amq.direct", "🗝️ 1")
    _, found = mgmt.ok("GET", "/bindings?src=amq.direct&dstq=q&key=%F0%9F%97%9D%EF%B8%8F+1")
    path = "/bindings/src=amq.direct;dstq=q;key=%F0%9F%97%9D%EF%B8%8F%201;args="
    assert found == [
        {
            "source": "amq.direct",
            "destination_queue": "q",
            "binding_key": "🗝️ 1",
            "arguments": {},
            "location": path,
        }
    ]
    assert mgmt.ok("DELETE", path) == ("204", None)
    assert mgmt.ok("DELETE", path) == ("204", None)
    assert not routed(mgmt, "amq.direct", "🗝️ 1")
    assert mgmt.ok("GET", "/bindings?src=amq.direct&dstq=q&key=%F0%9F%97%9D%EF%B8%8F+1")[1] == []


def test_bind_and_unbind_an_exchange(mgmt: Mgmt) -> None:
    mgmt.ok("PUT", "/exchanges/x", amap(type=s("fanout")))
    mgmt.ok("PUT", "/queues/q", amap())
    mgmt.ok("POST", "/bindings", binding("x", "q", ""))
    mgmt.ok("POST", "/bindings", binding("amq.direct", "x", "key 2", kind="exchange"))
    assert routed(mgmt, "amq.direct", "key 2")
    _, found = mgmt.ok("GET", "/bindings?src=amq.direct&dste=x&key=key%202")
    assert found[0]["destination_exchange"] == "x"
    assert mgmt.ok("DELETE", found[0]["location"]) == ("204", None)
    assert not routed(mgmt, "amq.direct", "key 2")


def test_binding_arguments_and_their_hash(mgmt: Mgmt) -> None:
    # management_SUITE queue_binding_args: a headers binding with typed arguments; the
    # path names them by their hash, which must match for the binding to go
    mgmt.ok("PUT", "/queues/q", amap())
    body = binding(
        "amq.headers",
        "q",
        "",
        **{"key 1": s("👏"), "key 2": ("uint", 3), "key 3": ("bool", True), "x-match": s("all")},
    )
    mgmt.ok("POST", "/bindings", body)
    _, found = mgmt.ok("GET", "/bindings?src=amq.headers&dstq=q&key=")
    assert found[0]["arguments"] == {"key 1": "👏", "key 2": 3, "key 3": True, "x-match": "all"}
    location = found[0]["location"]
    stored = next(iter(mgmt.vhost.exchanges["amq.headers"].bindings.values())).arguments
    assert location.endswith(";args=" + args_hash(stored)) and args_hash(stored)
    mgmt.ok("DELETE", location.rsplit(";args=", 1)[0] + ";args=AAAAAA")  # not this one
    assert mgmt.vhost.exchanges["amq.headers"].bindings
    mgmt.ok("DELETE", location)
    assert not mgmt.vhost.exchanges["amq.headers"].bindings


def test_the_arguments_hash_is_erlangs_phash2() -> None:
    # erlang:phash2([{<<"a">>,longstr,<<"b">>}], 1 bsl 32) = 673430984 (OTP 25, measured)
    table = TypedTable({"a": "b"}, {"a": "longstr"})
    assert make_hash2([(b"a", Atom("longstr"), b"b")]) == 673430984
    expected = base64.urlsafe_b64encode((673430984).to_bytes(4, "big")).rstrip(b"=").decode()
    assert args_hash(table) == expected
    assert args_hash({}) == ""


@pytest.mark.parametrize(
    ("body", "status", "text"),
    [
        # management_SUITE bind_source_default_exchange, bind_destination_default_exchange
        (binding("", "q", "k"), "403", "operation not permitted on the default exchange"),
        (
            binding("amq.fanout", "", "k", kind="exchange"),
            "403",
            "operation not permitted on the default exchange",
        ),
        # management_SUITE bind_source_line_feed, bind_destination_line_feed
        (
            binding("🤠\n😱", "amq.fanout", "k", kind="exchange"),
            "400",
            "Bad name '🤠\n😱': line feed and carriage return characters not allowed",
        ),
        (
            binding("amq.fanout", "🤠\n😱", "k", kind="exchange"),
            "400",
            "Bad name '🤠\n😱': line feed and carriage return characters not allowed",
        ),
        # management_SUITE bind_missing_queue: 400, not 404
        (binding("amq.direct", "👀", "k"), "400", "no queue '👀' in vhost '/'"),
        (
            binding("nope", "amq.direct", "k", kind="exchange"),
            "400",
            "no exchange 'nope' in vhost '/'",
        ),
        (
            ("map", [(s("source"), ("long", 1))]),
            "400",
            'bad binding field {{utf8,<<"source">>},{long,1}}',
        ),
    ],
)
def test_bind_refused(mgmt: Mgmt, body: Value, status: str, text: str) -> None:
    assert mgmt.refused("POST", "/bindings", body) == (status, text)


def test_unbind_bad_binding_path_segment(mgmt: Mgmt) -> None:
    # management_SUITE unbind_bad_binding_path_segment
    segment = "src=e1;dstq=q1;invalidkey=k1;args="
    assert mgmt.refused("DELETE", "/bindings/" + segment) == (
        "400",
        f"bad binding path segment '{segment}'",
    )


def test_get_bindings_needs_a_destination(mgmt: Mgmt) -> None:
    assert mgmt.refused("GET", "/bindings?src=e&key=k") == (
        "400",
        'missing \'dste\' or \'dstq\' in query: #{<<"key">> => <<"k">>,<<"src">> => <<"e">>}',
    )


# ------------------------------------------------------------------- permissions
# amqp_auth_SUITE: a refused permission ends the session (amqp:unauthorized-access)


def test_declare_queue_needs_configure(domain: BrokerCore) -> None:
    m = denied(domain)
    error = session_end(m, "PUT", "/queues/%F0%9F%8D%BF", amap())
    assert error == d.Error(
        d.UNAUTHORIZED_ACCESS,
        "configure access to queue '🍿' in vhost '/' refused for user 'test user'",
    )


def refused_put(domain: BrokerCore, path: str, body: Value, **permissions: str) -> str | None:
    """The session end's text for a PUT to ``path`` by a user with ``permissions`` only."""
    return session_end(denied(domain, **permissions), "PUT", path, body).description


def refusal(access: str, resource: str) -> str:
    return f"{access} access to {resource} in vhost '/' refused for user 'test user'"


def test_dead_letter_exchange_needs_read_on_the_queue_and_write_on_it(domain: BrokerCore) -> None:
    # amqp_auth_SUITE declare_queue_dlx_queue, declare_queue_dlx_exchange
    body = amap(arguments=args(x_dead_letter_exchange=s("📥")))
    path = "/queues/%F0%9F%8D%BF"
    assert refused_put(domain, path, body, configure="🍿", write="📥") == refusal(
        "read", "queue '🍿'"
    )
    assert refused_put(domain, path, body, configure="🍿", read="🍿") == refusal(
        "write", "exchange '📥'"
    )


def test_alternate_exchange_needs_read_on_the_exchange_and_write_on_it(
    domain: BrokerCore,
) -> None:
    # amqp_auth_SUITE declare_exchange_alternate_exchange_read, _write
    body = amap(arguments=args(alternate_exchange=s("ae.1")))
    assert refused_put(domain, "/exchanges/x.1", body, configure="x.1", write="ae.1") == refusal(
        "read", "exchange 'x.1'"
    )
    assert refused_put(domain, "/exchanges/x.1", body, configure="x.1", read="x.1") == refusal(
        "write", "exchange 'ae.1'"
    )


def test_purge_needs_read_and_get_needs_any(domain: BrokerCore, mgmt: Mgmt) -> None:
    # amqp_auth_SUITE purge_queue; get_queue checks as a passive queue.declare
    mgmt.ok("PUT", "/queues/q", amap())
    m = denied(domain, write="q")
    assert session_end(m, "DELETE", "/queues/q/messages").description == (
        "read access to queue 'q' in vhost '/' refused for user 'test user'"
    )
    m = denied(domain, write="q")
    assert m("GET", "/queues/q")[0] == "200"
    m = denied(domain)
    assert session_end(m, "GET", "/queues/q").description == (
        "configure access to queue 'q' in vhost '/' refused for user 'test user'"
    )


def test_binding_needs_write_on_the_destination_and_read_on_the_source(
    domain: BrokerCore, mgmt: Mgmt
) -> None:
    # amqp_auth_SUITE bind_queue_destination, bind_queue_source
    mgmt.ok("PUT", "/queues/q", amap())
    m = denied(domain, read="amq.direct")
    assert session_end(m, "POST", "/bindings", binding("amq.direct", "q", "k")).description == (
        "write access to queue 'q' in vhost '/' refused for user 'test user'"
    )
    m = denied(domain, write="q")
    assert session_end(m, "POST", "/bindings", binding("amq.direct", "q", "k")).description == (
        "read access to exchange 'amq.direct' in vhost '/' refused for user 'test user'"
    )


def test_binding_to_a_topic_needs_its_read_permission(domain: BrokerCore) -> None:
    # amqp_auth_SUITE bind_to_topic_exchange
    m = denied(domain, ".*", ".*", ".*")
    domain.set_topic_permissions("test user", "/", "amq.topic", ".*", "wrong.topic")
    body = binding("amq.topic", "amq.direct", "a.b.🐇", kind="exchange")
    assert session_end(m, "POST", "/bindings", body) == d.Error(
        d.UNAUTHORIZED_ACCESS,
        "read access to topic 'a.b.🐇' in exchange 'amq.topic' in vhost '/' refused for "
        "user 'test user'",
    )


def test_delete_needs_configure(domain: BrokerCore, mgmt: Mgmt) -> None:
    # amqp_auth_SUITE delete_queue, delete_exchange
    mgmt.ok("PUT", "/queues/q", amap())
    m = denied(domain)
    assert session_end(m, "DELETE", "/queues/q").description == (
        "configure access to queue 'q' in vhost '/' refused for user 'test user'"
    )
    assert session_end(m, "DELETE", "/exchanges/x").description == (
        "configure access to exchange 'x' in vhost '/' refused for user 'test user'"
    )


def test_token_refresh_changes_nothing_for_internal_users(mgmt: Mgmt) -> None:
    assert mgmt.ok("PUT", "/auth/tokens", ("binary", b"token")) == ("204", None)
