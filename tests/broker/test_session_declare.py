"""Declaring, deleting and binding through a Session, with RabbitMQ 3.10.8's replies and
error texts (the ones tests/differential/test_errors.py pins against RabbitMQ itself)."""

from __future__ import annotations

import pytest
from pamqp import commands as C

from leveret.broker.broker import BrokerCore
from leveret.broker.session import Session
from tests.broker.fakes import BrokerClosed, Client, ClientChannel, RecordingOutput, plain

LOCKED = (
    "RESOURCE_LOCKED - cannot obtain exclusive access to locked queue 'q' in vhost '/'. It "
    "could be originally declared on another connection or the exclusive property value does "
    "not match that of the original declaration."
)


# ------------------------------------------------------------------- queues
def test_declare_ok_names_the_queue_and_counts(ch: ClientChannel) -> None:
    ok = ch.declare_queue("q")
    assert (ok.queue, ok.message_count, ok.consumer_count) == ("q", 0, 0)
    ch.publish("", "q", b"1")
    ch.publish("", "q", b"2")
    ok = ch.declare_queue("q")
    assert (ok.message_count, ok.consumer_count) == (2, 0)


def test_server_named_queue(ch: ClientChannel) -> None:
    name = ch.declare_queue("", exclusive=True).queue
    assert name.startswith("amq.gen-") and len(name) == len("amq.gen-") + 22
    assert ch.declare_queue(name, passive=True).queue == name


def test_passive_declare_of_missing_queue_closes_the_channel(ch: ClientChannel) -> None:
    with pytest.raises(BrokerClosed) as info:
        ch.call(C.Queue.Declare(queue="nope", passive=True))
    closed = info.value.closed
    assert closed.reply == (404, "NOT_FOUND - no queue 'nope' in vhost '/'")
    assert (closed.channel, closed.class_id, closed.method_id) == (ch.number, 50, 10)
    assert not ch.is_open and not ch.client.closed


def test_passive_declare_of_missing_exchange(ch: ClientChannel) -> None:
    assert ch.refused(C.Exchange.Declare(exchange="nope", passive=True)) == (
        404,
        "NOT_FOUND - no exchange 'nope' in vhost '/'",
    )


def test_queue_durable_inequivalent(ch: ClientChannel) -> None:
    ch.declare_queue("q", auto_delete=True)
    assert ch.refused(C.Queue.Declare(queue="q", durable=True, auto_delete=True)) == (
        406,
        "PRECONDITION_FAILED - inequivalent arg 'durable' for queue 'q' in vhost '/': "
        "received 'true' but current is 'false'",
    )


def test_queue_argument_inequivalent(ch: ClientChannel) -> None:
    ch.declare_queue("q", exclusive=True, arguments={"x-message-ttl": 1000})
    assert ch.refused(C.Queue.Declare(queue="q", exclusive=True)) == (
        406,
        "PRECONDITION_FAILED - inequivalent arg 'x-message-ttl' for queue 'q' in vhost '/': "
        "received none but current is the value '1000' of type 'signedint'",
    )


def test_invalid_queue_argument(ch: ClientChannel) -> None:
    assert ch.refused(C.Queue.Declare(queue="q", arguments={"x-message-ttl": -1})) == (
        406,
        "PRECONDITION_FAILED - invalid arg 'x-message-ttl' for queue 'q' in vhost '/': "
        "{value_negative,-1}",
    )


def test_reserved_queue_name(ch: ClientChannel) -> None:
    assert ch.refused(C.Queue.Declare(queue="amq.mine")) == (
        403,
        "ACCESS_REFUSED - queue name 'amq.mine' contains reserved prefix 'amq.*'",
    )


def test_exclusive_queue_is_locked_to_its_connection(domain: BrokerCore) -> None:
    owner = Client(domain).channel()
    owner.declare_queue("q", exclusive=True)
    other = Client(domain)
    for method in (
        C.Queue.Declare(queue="q", exclusive=True),
        C.Queue.Declare(queue="q", passive=True),
        C.Basic.Get(queue="q"),
        C.Queue.Purge(queue="q"),
        C.Queue.Delete(queue="q"),
        C.Basic.Consume(queue="q"),
    ):
        assert other.channel().refused(method) == (405, LOCKED)
    assert owner.declare_queue("q", passive=True).queue == "q"


def test_exclusive_queue_goes_with_its_connection(domain: BrokerCore) -> None:
    owner = Client(domain)
    owner.channel().declare_queue("q", exclusive=True)
    owner.close()
    assert "q" not in domain.vhosts["/"].queues
    assert owner.session.id not in domain.connections


def test_auto_delete_queue_goes_with_its_last_consumer(ch: ClientChannel) -> None:
    ch.declare_queue("q", auto_delete=True)
    ch.consume("q", "c1")
    ch.consume("q", "c2")
    ch.reply(C.Basic.Cancel(consumer_tag="c1"))
    assert ch.declare_queue("q", passive=True).consumer_count == 1
    ch.reply(C.Basic.Cancel(consumer_tag="c2"))
    assert ch.refused(C.Queue.Declare(queue="q", passive=True))[0] == 404


def test_queue_delete_answers_the_ready_count(ch: ClientChannel) -> None:
    ch.declare_queue("q")
    for body in (b"a", b"b", b"c"):
        ch.publish("", "q", body)
    assert ch.reply(C.Queue.Delete(queue="q")).message_count == 3
    assert ch.reply(C.Queue.Delete(queue="q")).message_count == 0  # missing: still ok


def test_queue_delete_if_unused(ch: ClientChannel) -> None:
    ch.declare_queue("q")
    ch.consume("q")
    assert ch.refused(C.Queue.Delete(queue="q", if_unused=True)) == (
        406,
        "PRECONDITION_FAILED - queue 'q' in vhost '/' in use",
    )


def test_queue_delete_if_empty(ch: ClientChannel) -> None:
    ch.declare_queue("q")
    ch.publish("", "q", b"x")
    assert ch.refused(C.Queue.Delete(queue="q", if_empty=True)) == (
        406,
        "PRECONDITION_FAILED - queue 'q' in vhost '/' not empty",
    )


def test_purge_answers_the_count_and_empties(ch: ClientChannel) -> None:
    ch.declare_queue("q")
    for _ in range(4):
        ch.publish("", "q", b"x")
    assert ch.reply(C.Queue.Purge(queue="q")).message_count == 4
    assert ch.get("q") is None


def test_empty_queue_name_means_the_last_declared(ch: ClientChannel) -> None:
    name = ch.declare_queue("").queue
    ch.bind("", "amq.direct")  # queue '' and key '': the last declared, keyed by its name
    ch.publish("amq.direct", name, b"x")
    assert ch.get("").body == b"x"


def test_no_previously_declared_queue(ch: ClientChannel) -> None:
    assert ch.refused(C.Basic.Get(queue="")) == (
        404,
        "NOT_FOUND - no previously declared queue",
    )


# ---------------------------------------------------------------- exchanges
def test_exchange_type_inequivalent(ch: ClientChannel) -> None:
    ch.declare_exchange("x", "fanout")
    assert ch.refused(C.Exchange.Declare(exchange="x", exchange_type="direct")) == (
        406,
        "PRECONDITION_FAILED - inequivalent arg 'type' for exchange 'x' in vhost '/': "
        "received 'direct' but current is 'fanout'",
    )


def test_exchange_durable_inequivalent(ch: ClientChannel) -> None:
    ch.declare_exchange("x", "fanout", auto_delete=True)
    method = C.Exchange.Declare(
        exchange="x", exchange_type="fanout", durable=True, auto_delete=True
    )
    assert ch.refused(method) == (
        406,
        "PRECONDITION_FAILED - inequivalent arg 'durable' for exchange 'x' in vhost '/': "
        "received 'true' but current is 'false'",
    )


def test_redeclare_with_the_same_properties_is_ok(ch: ClientChannel) -> None:
    ch.declare_exchange("x", "topic", durable=True)
    assert isinstance(ch.declare_exchange("x", "topic", durable=True), C.Exchange.DeclareOk)
    assert isinstance(ch.declare_exchange("amq.direct", durable=True), C.Exchange.DeclareOk)


def test_reserved_exchange_name(ch: ClientChannel) -> None:
    assert ch.refused(C.Exchange.Declare(exchange="amq.mine", exchange_type="direct")) == (
        403,
        "ACCESS_REFUSED - exchange name 'amq.mine' contains reserved prefix 'amq.*'",
    )


def test_delete_system_exchange(ch: ClientChannel) -> None:
    assert ch.refused(C.Exchange.Delete(exchange="amq.direct")) == (
        403,
        "ACCESS_REFUSED - deletion of system exchange 'amq.direct' in vhost '/' not allowed",
    )


@pytest.mark.parametrize(
    "method",
    [
        C.Exchange.Declare(exchange="", exchange_type="direct", passive=True),
        C.Exchange.Delete(exchange=""),
        C.Queue.Bind(queue="q", exchange="", routing_key="q"),
    ],
    ids=["declare", "delete", "bind"],
)
def test_default_exchange_is_off_limits(ch: ClientChannel, method: C.Exchange.Declare) -> None:
    ch.declare_queue("q")
    assert ch.refused(method) == (
        403,
        "ACCESS_REFUSED - operation not permitted on the default exchange",
    )


def test_exchange_delete_if_unused(ch: ClientChannel) -> None:
    ch.declare_exchange("x", "fanout")
    ch.declare_queue("q")
    ch.bind("q", "x")
    assert ch.refused(C.Exchange.Delete(exchange="x", if_unused=True)) == (
        406,
        "PRECONDITION_FAILED - exchange 'x' in vhost '/' in use",
    )


def test_deleting_what_is_missing_is_ok(ch: ClientChannel) -> None:
    assert isinstance(ch.reply(C.Exchange.Delete(exchange="nope")), C.Exchange.DeleteOk)
    ch.declare_queue("q")
    unbind = C.Queue.Unbind(queue="q", exchange="amq.direct", routing_key="never-bound")
    assert isinstance(ch.reply(unbind), C.Queue.UnbindOk)


def test_auto_delete_exchange_goes_with_its_last_binding(ch: ClientChannel) -> None:
    ch.declare_exchange("x", "fanout", auto_delete=True)
    ch.declare_queue("q")
    ch.bind("q", "x")
    ch.reply(C.Queue.Unbind(queue="q", exchange="x"))
    assert ch.refused(C.Exchange.Declare(exchange="x", passive=True))[0] == 404


def test_unknown_exchange_type_closes_the_connection(ch: ClientChannel) -> None:
    with pytest.raises(BrokerClosed) as info:
        ch.call(C.Exchange.Declare(exchange="x", exchange_type="nonsense"))
    assert info.value.hard
    assert info.value.reply == (503, "COMMAND_INVALID - unknown exchange type 'nonsense'")
    assert ch.client.closed


# ----------------------------------------------------------------- bindings
def test_bind_to_missing_exchange(ch: ClientChannel) -> None:
    ch.declare_queue("q")
    assert ch.refused(C.Queue.Bind(queue="q", exchange="nope")) == (
        404,
        "NOT_FOUND - no exchange 'nope' in vhost '/'",
    )


def test_bind_missing_queue(ch: ClientChannel) -> None:
    assert ch.refused(C.Queue.Bind(queue="nope", exchange="amq.fanout")) == (
        404,
        "NOT_FOUND - no queue 'nope' in vhost '/'",
    )


def test_invalid_x_match(ch: ClientChannel) -> None:
    ch.declare_queue("q")
    code, text = ch.refused(
        C.Queue.Bind(queue="q", exchange="amq.headers", arguments={"x-match": "some"})
    )
    assert code == 406 and text.startswith("PRECONDITION_FAILED - Invalid x-match field value")


# -------------------------------------------------------------- permissions
@pytest.fixture
def limited(domain: BrokerCore) -> Client:
    """A user who may configure only what starts with 'u-', and write and read all."""
    domain.add_user("u", "secret", [])
    domain.set_permissions("u", "/", "^u-", ".*", ".*")
    return Client(domain, "u", "secret")


def test_configure_refused(limited: Client) -> None:
    ch = limited.channel()
    assert ch.declare_queue("u-q").queue == "u-q"
    assert ch.refused(C.Queue.Declare(queue="other")) == (
        403,
        "ACCESS_REFUSED - access to queue 'other' in vhost '/' refused for user 'u'",
    )


def test_vhost_access_refused(domain: BrokerCore) -> None:
    domain.add_user("nobody", "pw", [])
    with pytest.raises(BrokerClosed) as info:
        Client(domain, "nobody", "pw")
    assert info.value.reply == (530, "NOT_ALLOWED - access to vhost '/' refused for user 'nobody'")


def test_unknown_vhost(domain: BrokerCore) -> None:
    with pytest.raises(BrokerClosed) as info:
        Client(domain, vhost="no-such-vhost")
    assert info.value.reply == (530, "NOT_ALLOWED - vhost no-such-vhost not found")


def test_bad_password_is_refused(domain: BrokerCore) -> None:
    session = Session(domain, RecordingOutput())
    err = session.authenticate("PLAIN", plain("guest", "wrong"), {})
    assert err is not None and (err.code, err.reply_text) == (
        403,
        "ACCESS_REFUSED - Login was refused using authentication mechanism PLAIN. "
        "For details see the broker logfile.",
    )
