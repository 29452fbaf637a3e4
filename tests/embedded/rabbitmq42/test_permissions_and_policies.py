"""Who may passively declare what in RabbitMQ 4.2, and the classic queue mirroring
policies RabbitMQ 4 refuses."""

from __future__ import annotations

import pika
import pika.exceptions
import pytest

from leveret.cli import ctl
from tests.embedded.rabbitmq42.support import MODES, api, broker, channel


@pytest.mark.parametrize("mode", MODES)
def test_a_passive_declare_needs_some_permission_in_4_2(mode: str) -> None:
    """v4.2.9 rabbit_channel.erl:916-950, 2644-2650 and 2756-2763 (rabbitmq-server#16085):
    a passive queue.declare or exchange.declare wants read, write or configure on the
    object, before it is looked up; a refusal reads as configure's (naming the permission,
    as 4.2's refusals do). 3.10.8 checks none."""
    with broker(mode) as b:
        b.add_user("reader", "reader")
        b.set_permissions("reader", "/", configure="^$", write="^$", read="^q$")
        b.add_user("nobody", "nobody")
        b.set_permissions("nobody", "/", configure="^x", write="^x", read="^x")
        with channel(b) as ch:
            ch.queue_declare("q")
        with channel(b, b.vhost_url("/", "reader", "reader")) as ch:
            assert ch.queue_declare("q", passive=True).method.queue == "q"
        for kind, name in (("queue", "q"), ("queue", "missing"), ("exchange", "amq.direct")):
            with channel(b, b.vhost_url("/", "nobody", "nobody")) as ch:
                declare = ch.queue_declare if kind == "queue" else ch.exchange_declare
                if mode == "3.10.8" and name != "missing":
                    declare(name, passive=True)
                    continue
                with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
                    declare(name, passive=True)
                if mode == "3.10.8":
                    assert info.value.reply_code == 404
                else:
                    assert info.value.reply_code == 403
                    assert info.value.reply_text == (
                        f"ACCESS_REFUSED - configure access to {kind} '{name}' in vhost '/' "
                        "refused for user 'nobody'"
                    )


HA = {"ha-mode": "exactly", "ha-params": 2, "ha-sync-mode": "automatic"}
# rabbit_policy:validation0 at v4.2.9 (rabbit_policy.erl:571-590): no validator knows the
# ha-* keys any more (classic_queue_mirroring is removed, rabbit_mirror_queue_misc.erl:
# 19-55), so they are "not recognised policy settings"
NOT_RECOGNISED = (
    '[{<<"ha-mode">>,<<"exactly">>},{<<"ha-params">>,2},'
    '{<<"ha-sync-mode">>,<<"automatic">>}] are not recognised policy settings'
)


@pytest.mark.parametrize("mode", MODES)
def test_classic_queue_mirroring_policies_are_refused(
    mode: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """RabbitMQ 4 removed classic queue mirroring (release-notes/4.0.1.md "Classic Queues
    is Now a Non-Replicated Queue Type"): a policy with ha-* keys is refused by the
    management API (400) and rabbitmqctl set_policy alike. Leveret on one node never
    mirrored, and refused them with the same words in its 3.10.8 mode already. 4.2.9's
    policy endpoint no longer escapes its error for HTML (rabbit_mgmt_wm_policy.erl
    accept_content; 3.10.8's called rabbit_mgmt_format:escape_html_tags)."""
    with broker(mode, management=True) as b:
        status, body = api(b, "PUT", "/api/policies/%2F/ha", {"pattern": ".*", "definition": HA})
        assert status == 400
        reason = f"Validation failed\n\n{NOT_RECOGNISED}\n"
        if mode == "3.10.8":
            reason = reason.replace("<", "&lt;").replace(">", "&gt;")
        assert body == {"error": "bad_request", "reason": reason}
        code = ctl.main(
            ["--url", b.management_url, "set_policy", "ha", ".*", '{"ha-mode":"all"}'], env={}
        )
        assert api(b, "GET", "/api/policies")[1] == []
    assert code == 69
    err = capsys.readouterr().err
    assert err == (
        "Error:\nValidation failed\n\n"
        '[{<<"ha-mode">>,<<"all">>}] are not recognised policy settings\n\n'
    )


def test_a_policy_may_apply_to_one_queue_type_from_3_12() -> None:
    """apply-to classic_queues, quorum_queues or streams (rabbit_policy.erl:507-519 and
    596-616 at v4.2.9: matches_queue_type, apply_to_validation with its text)."""
    typed = {"pattern": ".*", "definition": {"max-length": 1}, "apply-to": "quorum_queues"}
    with broker("3.10.8", management=True) as b:
        status, body = api(b, "PUT", "/api/policies/%2F/typed", typed)
        assert (status, body["reason"]) == (
            400,
            "Validation failed\n\napply-to 'quorum_queues' unrecognised; should be 'queues', "
            "'exchanges' or 'all'\n",
        )
    with broker("4.2", management=True) as b, channel(b) as ch:
        assert api(b, "PUT", "/api/policies/%2F/typed", typed)[0] == 201
        ch.queue_declare("qq", durable=True, arguments={"x-queue-type": "quorum"})
        ch.queue_declare("classic")
        policies = {q["name"]: q["policy"] for q in api(b, "GET", "/api/queues/%2F")[1]}
        assert policies == {"qq": "typed", "classic": None}
        bad = {**typed, "apply-to": "lazy_queues"}
        assert api(b, "PUT", "/api/policies/%2F/bad", bad)[1]["reason"] == (
            "Validation failed\n\napply-to 'lazy_queues' unrecognised; should be one of: "
            "'queues', 'classic_queues',  'quorum_queues', 'streams', 'exchanges', or 'all'\n"
        )


@pytest.mark.parametrize("mode", MODES)
def test_a_users_channel_limit_is_worded_without_parentheses_from_4_0(mode: str) -> None:
    """rabbit_reader:is_over_limits at v4.2.9 (rabbit_reader.erl:1022-1026): "... the
    maximum allowed user limit of 1"; 3.10.8 wrote "(1)". A connection error (530)."""
    with broker(mode, management=True) as b:
        assert api(b, "PUT", "/api/user-limits/guest/max-channels", {"value": 1})[0] == 204
        with channel(b) as ch, pytest.raises(pika.exceptions.ConnectionClosedByBroker) as info:
            ch.connection.channel()
        limit = "1" if mode == "4.2" else "(1)"
        assert (info.value.reply_code, info.value.reply_text) == (
            530,
            "NOT_ALLOWED - number of channels opened for user 'guest' has reached the "
            f"maximum allowed user limit of {limit}",
        )


@pytest.mark.parametrize("mode", MODES)
def test_a_refusal_names_the_permission_from_3_13(mode: str) -> None:
    """rabbit_access_control:check_resource_access and check_topic_access at v4.2.9
    (rabbit_access_control.erl:343, 356): "write access to exchange ... refused"; 3.10.8
    says "access to exchange ... refused"."""
    with broker(mode, management=True) as b:
        b.add_user("reader", "reader")
        b.set_permissions("reader", "/", configure="^$", write="^$", read=".*")
        topic = {"exchange": "amq.topic", "write": "^allowed$", "read": ".*"}
        assert api(b, "PUT", "/api/topic-permissions/%2F/guest", topic)[0] == 201
        named = {"3.10.8": "access", "4.2": "write access"}[mode]
        reader = b.vhost_url("/", "reader", "reader")
        refused = pika.exceptions.ChannelClosedByBroker
        with channel(b, reader) as ch, pytest.raises(refused) as info:
            ch.basic_publish("amq.direct", "k", b"m")
            ch.queue_declare("", exclusive=True)
        assert info.value.reply_text == (
            f"ACCESS_REFUSED - {named} to exchange 'amq.direct' in vhost '/' refused for "
            "user 'reader'"
        )
        with channel(b) as ch, pytest.raises(refused) as info:
            ch.basic_publish("amq.topic", "denied", b"m")
            ch.queue_declare("", exclusive=True)
        assert info.value.reply_text == (
            f"ACCESS_REFUSED - {named} to topic 'denied' in exchange 'amq.topic' in vhost "
            "'/' refused for user 'guest'"
        )
