"""RabbitMQ 4's deprecated features (rabbit_deprecated_features, from 3.13):
transient non-exclusive queues, permitted by default in 4.2 and refused when the
configuration says ``deprecated_features.permit.transient_nonexcl_queues = false``, and
the management API's listing of the features."""

from __future__ import annotations

import logging

import pika
import pika.exceptions
import pytest

from tests.embedded.rabbitmq42.support import api, broker, channel

DENY = "transient_nonexcl_queues=false"

# rabbit_deprecated_features:generate_warnings1 at v4.2.9 (rabbit_deprecated_features.erl:
# 437-451), the when_denied text of a permitted_by_default feature
DENIED = (
    "Feature `transient_nonexcl_queues` is deprecated.\n"
    "Its use is not permitted per the configuration (overriding the default, which is "
    "permitted):\n"
    '    "deprecated_features.permit.transient_nonexcl_queues = false"\n'
    "Its use will not be permitted by default in a future minor RabbitMQ version and the "
    "feature will be removed from a future major RabbitMQ version; actual versions to be "
    "determined.\n"
    "To continue using this feature when it is not permitted by default, set the following "
    "parameter in your configuration:\n"
    '    "deprecated_features.permit.transient_nonexcl_queues = true"'
)
# the same as a connection.close's reply text: io_lib:format("~ts - ~ts", ...,
# [{chars_limit, 255}]) (v4.2.9 rabbit_binary_generator.erl:231-233), measured with
# Erlang/OTP here: 252 characters and "..."
DENIED_REPLY = (
    "INTERNAL_ERROR - Feature `transient_nonexcl_queues` is deprecated.\n"
    "Its use is not permitted per the configuration (overriding the default, which is "
    "permitted):\n"
    '    "deprecated_features.permit.transient_nonexcl_queues = false"\n'
    "Its use will not be permit..."
)


@pytest.mark.parametrize("mode", ["3.10.8", "4.2"])
def test_transient_non_exclusive_queues_are_permitted_by_default(
    mode: str, caplog: pytest.LogCaptureFixture
) -> None:
    """transient_nonexcl_queues is permitted_by_default in 4.2.9 (rabbit_amqqueue.erl:
    115-120): the declaration works, and 4.2 logs the feature's warning
    (rabbit_deprecated_features:is_permitted, maybe_log_warning)."""
    with caplog.at_level(logging.WARNING), broker(mode) as b, channel(b) as ch:
        ch.queue_declare("transient")
        ch.queue_declare("transient2")
    warnings = [r.getMessage() for r in caplog.records if "transient_nonexcl" in r.getMessage()]
    if mode == "3.10.8":
        assert warnings == []
    else:
        # once, however many such queues: RabbitMQ logs it at most once a day
        assert warnings == [
            "Deprecated features: `transient_nonexcl_queues`: Feature "
            "`transient_nonexcl_queues` is deprecated.\n"
            "By default, this feature can still be used for now.\n"
            "Its use will not be permitted by default in a future minor RabbitMQ version "
            "and the feature will be removed from a future major RabbitMQ version; actual "
            "versions to be determined.\n"
            "To continue using this feature when it is not permitted by default, set the "
            "following parameter in your configuration:\n"
            '    "deprecated_features.permit.transient_nonexcl_queues = true"\n'
            "To test RabbitMQ as if the feature was removed, set this in your configuration:\n"
            '    "deprecated_features.permit.transient_nonexcl_queues = false"'
        ]


def test_denied_a_transient_non_exclusive_queue_closes_the_connection() -> None:
    """rabbit_amqqueue:declare at v4.2.9 (rabbit_amqqueue.erl:221-242): after the arguments
    are checked, a queue neither durable nor exclusive is refused with
    {protocol_error, internal_error, Warning}, a connection error (541). Durable and
    exclusive queues are not concerned; a server-named one is."""
    with broker("4.2", deprecated_features=DENY) as b:
        with channel(b) as ch:
            ch.queue_declare("durable", durable=True)
            ch.queue_declare("exclusive", exclusive=True)
            ch.queue_declare("", exclusive=True)
            with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as info:
                ch.queue_declare("transient")
        assert info.value.reply_code == 541
        assert info.value.reply_text == DENIED_REPLY
        with channel(b) as ch:
            with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as info:
                ch.queue_declare("")
            assert info.value.reply_code == 541
        with channel(b) as ch:
            # the arguments are checked first: their error, not the feature's
            with pytest.raises(pika.exceptions.ChannelClosedByBroker) as chan:
                ch.queue_declare("transient", arguments={"x-max-priority": "high"})
            assert chan.value.reply_code == 406
        with channel(b) as ch:
            # and before a quorum queue's properties: the feature's error, not non-durable's
            with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as info:
                ch.queue_declare("qq", arguments={"x-queue-type": "quorum"})
            assert info.value.reply_code == 541
    with broker("4.2") as b, channel(b) as ch:
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as chan:
            ch.queue_declare("qq", arguments={"x-queue-type": "quorum"})
        assert chan.value.reply_text == (
            "PRECONDITION_FAILED - invalid property 'non-durable' for queue 'qq' in vhost '/'"
        )


def test_denied_the_management_api_answers_400_with_the_whole_warning() -> None:
    """rabbit_mgmt_wm_queue:accept_content declares through rabbit_channel:handle_method;
    an amqp_error of another kind than not_found/access_refused/not_allowed is a 400 whose
    reason is its explanation, whole (v4.2.9 rabbit_mgmt_util.erl direct_request)."""
    with broker("4.2", management=True, deprecated_features=DENY) as b:
        status, body = api(b, "PUT", "/api/queues/%2F/transient", {"durable": False})
        assert (status, body) == (400, {"error": "bad_request", "reason": DENIED})
        assert api(b, "PUT", "/api/queues/%2F/kept", {"durable": True})[0] == 201


def test_the_management_api_lists_the_deprecated_features_from_4_0() -> None:
    """GET /api/deprecated-features and /used (rabbit_mgmt_dispatcher.erl:190-191 at
    v4.2.9; rabbit_depr_ff_extra:cli_info: name, desc, deprecation_phase, doc_url,
    provided_by, and the state for all of them). RabbitMQ 3.10.8 has no such path."""
    with broker("3.10.8", management=True) as b:
        assert api(b, "GET", "/api/deprecated-features")[0] == 404
    with broker("4.2", management=True, deprecated_features=DENY) as b:
        status, features = api(b, "GET", "/api/deprecated-features")
        assert status == 200
        assert [f["name"] for f in features] == [
            "amqp_address_v1",
            "amqp_filter_set_bug",
            "classic_queue_mirroring",
            "global_qos",
            "management_metrics_collection",
            "queue_master_locator",
            "ram_node_type",
            "transient_nonexcl_queues",
        ]
        by_name = {f["name"]: f for f in features}
        assert by_name["transient_nonexcl_queues"] == {
            "deprecation_phase": "permitted_by_default",
            "desc": "",
            "doc_url": "https://blog.rabbitmq.com/posts/2021/08/4.0-deprecation-announcements/"
            "#removal-of-transient-non-exclusive-queues",
            "name": "transient_nonexcl_queues",
            "provided_by": "rabbit",
            "state": "denied",
        }
        assert by_name["classic_queue_mirroring"]["deprecation_phase"] == "removed"
        assert by_name["classic_queue_mirroring"]["state"] == "denied"
        assert by_name["global_qos"]["state"] == "permitted"
        assert by_name["management_metrics_collection"]["provided_by"] == (
            "rabbitmq_management_agent"
        )
        assert api(b, "GET", "/api/deprecated-features/used") == (200, [])
    with broker("4.2", management=True) as b, channel(b) as ch:
        ch.queue_declare("durable", durable=True)
        assert api(b, "GET", "/api/deprecated-features/used") == (200, [])
        ch.queue_declare("transient")
        _, used = api(b, "GET", "/api/deprecated-features/used")
        assert [f["name"] for f in used] == ["transient_nonexcl_queues"]
        assert "state" not in used[0]


@pytest.mark.parametrize("mode", ["3.10.8", "4.2"])
def test_aliveness_test_is_a_no_op_from_4_1(mode: str) -> None:
    """GET /api/aliveness-test/vhost: 3.10.8 declares a transient aliveness-test queue and
    sends a message round it; from 4.1 it only opens a channel and answers ok (v4.2.9
    rabbit_mgmt_wm_aliveness_test.erl to_json; release-notes/4.1.0.md: it used a
    transient non-exclusive queue)."""
    with broker(mode, management=True) as b:
        assert api(b, "GET", "/api/aliveness-test/%2F") == (200, {"status": "ok"})
        names = [q["name"] for q in api(b, "GET", "/api/queues")[1]]
        assert names == (["aliveness-test"] if mode == "3.10.8" else [])
