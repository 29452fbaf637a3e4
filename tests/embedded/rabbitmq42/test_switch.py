"""The switch (``rabbitmq_version``: 3.10.8 by default, or 4.2), RabbitMQ 4's
``deprecated_features.permit.*`` settings, and the version and limits each mode has."""

from __future__ import annotations

import re
from pathlib import Path

import pika
import pika.exceptions
import pytest

import leveret
from leveret.server.config import Config, ConfigError
from tests.embedded.rabbitmq42.support import MODES, api, broker, channel
from tests.support.identity import RABBITMQ_CAPABILITIES, SERVER_PROPERTIES


def test_the_switch_takes_3_10_8_or_4_2_from_a_file_the_environment_or_an_argument(
    tmp_path: Path,
) -> None:
    assert Config.load(env={}).compat().version == "3.10.8"
    assert Config.load(env={"LEVERET_RABBITMQ_VERSION": "4.2"}).compat().version == "4.2.9"
    conf = tmp_path / "leveret.toml"
    conf.write_text('rabbitmq_version = "4.2"\n')
    assert Config.load(conf, env={}).compat().version == "4.2.9"
    assert Config.load(conf, env={}, rabbitmq_version="3.10.8").compat().version == "3.10.8"
    for bad in ("4.1", "4", "3.13.7", ""):
        with pytest.raises(ConfigError) as info:
            Config.load(env={}, rabbitmq_version=bad or 4.1)
        assert "\n" not in str(info.value)
        assert str(info.value).startswith("invalid value for 'rabbitmq_version': ")
        assert str(info.value).endswith("(one of 3.10.8, 4.2)")
    with pytest.raises(ConfigError, match=re.escape("'rabbitmq_version': '4.0'")):
        leveret.Broker(rabbitmq_version="4.0")
    assert leveret.Broker().rabbitmq_version == "3.10.8"
    assert leveret.Broker(rabbitmq_version="4.2").rabbitmq_version == "4.2.9"


def test_deprecated_features_permit_is_rabbitmq_confs_key_as_toml(tmp_path: Path) -> None:
    """rabbit.schema at v4.2.9 (lines 2171-2189): deprecated_features.permit.$name = a
    boolean, one key per feature; here a TOML table of the same dotted name."""
    conf = tmp_path / "leveret.toml"
    conf.write_text(
        'rabbitmq_version = "4.2"\n'
        "[deprecated_features.permit]\n"
        "transient_nonexcl_queues = false\n"
        "global_qos = true\n"
    )
    rabbit = Config.load(conf, env={}).compat()
    assert not rabbit.permitted("transient_nonexcl_queues")
    assert rabbit.permitted("global_qos")
    assert rabbit.permitted("queue_master_locator")  # permitted_by_default
    assert not rabbit.permitted("classic_queue_mirroring")  # removed
    env = {"LEVERET_RABBITMQ_VERSION": "4.2", "LEVERET_DEPRECATED_FEATURES": "global_qos=false"}
    assert not Config.load(env=env).compat().permitted("global_qos")
    # a feature RabbitMQ 4.2 does not know, a value that is no boolean: one line each
    conf.write_text("[deprecated_features.permit]\ntransient_queues = false\n")
    with pytest.raises(ConfigError, match="transient_queues is no deprecated feature"):
        Config.load(conf, env={})
    conf.write_text("[deprecated_features.permit]\nglobal_qos = 'sometimes'\n")
    with pytest.raises(ConfigError, match=re.escape("deprecated_features.permit.global_qos")):
        Config.load(conf, env={})
    # RabbitMQ 3.10.8 has no deprecated features (they came in 3.13)
    conf.write_text("[deprecated_features.permit]\nglobal_qos = false\n")
    with pytest.raises(ConfigError, match=re.escape("RabbitMQ 3.10.8 has no deprecated features")):
        Config.load(conf, env={}).compat()
    with pytest.raises(ConfigError, match=re.escape("RabbitMQ 3.10.8 has no deprecated features")):
        leveret.Broker(deprecated_features="global_qos=false")


@pytest.mark.parametrize("mode", MODES)
def test_server_properties_report_the_version(mode: str) -> None:
    """rabbit_reader:server_properties at v4.2.9 (deps/rabbit/src/rabbit_reader.erl:214-257):
    the same keys and capabilities as 3.10.8's; the version is rabbit_misc:version()."""
    version = {"3.10.8": "3.10.8", "4.2": "4.2.9"}[mode]
    with broker(mode) as b:
        conn = pika.BlockingConnection(pika.URLParameters(b.url))
        props = conn._impl.server_properties
        conn.close()
    assert props["version"] == version
    assert props["information"].endswith(f"behaves as RabbitMQ {version}")
    assert sorted(props) == SERVER_PROPERTIES
    assert props["capabilities"] == RABBITMQ_CAPABILITIES


def test_the_management_api_reports_the_version_with_4_2s_fields() -> None:
    """/api/overview as rabbit_mgmt_wm_overview:to_json builds it at v4.2.9 (cluster_tags,
    node_tags, crypto_lib_version, default_queue_type, is_op_policy_updating_enabled; no
    release_series_support_status), and each node's versions as
    rabbit_mgmt_external_stats (v4.2.9 ?OTHER_KEYS: rabbitmq_version, erlang_version,
    erlang_full_version, crypto_lib_version)."""
    with broker("3.10.8", management=True) as b:
        _, overview = api(b, "GET", "/api/overview")
        _, nodes = api(b, "GET", "/api/nodes")
        _, definitions = api(b, "GET", "/api/definitions")
    assert overview["rabbitmq_version"] == overview["management_version"] == "3.10.8"
    assert overview["release_series_support_status"] == "supported"
    assert "cluster_tags" not in overview and "default_queue_type" not in overview
    assert "rabbitmq_version" not in nodes[0]
    assert definitions["rabbit_version"] == definitions["rabbitmq_version"] == "3.10.8"
    with broker("4.2", management=True) as b:
        _, overview = api(b, "GET", "/api/overview")
        _, nodes = api(b, "GET", "/api/nodes")
        _, definitions = api(b, "GET", "/api/definitions")
    for key in ("rabbitmq_version", "management_version", "product_version"):
        assert overview[key] == "4.2.9"
    assert list(overview)[:17] == [
        "management_version",
        "rates_mode",
        "sample_retention_policies",
        "exchange_types",
        "product_version",
        "product_name",
        "rabbitmq_version",
        "cluster_name",
        "cluster_tags",
        "node_tags",
        "erlang_version",
        "erlang_full_version",
        "crypto_lib_version",
        "disable_stats",
        "default_queue_type",
        "is_op_policy_updating_enabled",
        "enable_queue_totals",
    ]
    assert overview["cluster_tags"] == overview["node_tags"] == {}
    assert overview["default_queue_type"] == "classic"
    assert overview["is_op_policy_updating_enabled"] is True
    assert overview["crypto_lib_version"].startswith("OpenSSL ")
    assert "release_series_support_status" not in overview
    assert nodes[0]["rabbitmq_version"] == "4.2.9"
    assert nodes[0]["crypto_lib_version"] == overview["crypto_lib_version"]
    assert definitions["rabbit_version"] == definitions["rabbitmq_version"] == "4.2.9"


@pytest.mark.parametrize("mode", MODES)
def test_ctl_status_and_prometheus_tell_the_version(
    mode: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from leveret.cli import ctl

    version = {"3.10.8": "3.10.8", "4.2": "4.2.9"}[mode]
    with broker(mode, management=True) as b:
        assert ctl.main(["--url", b.management_url, "status"], env={}) == 0
        import urllib.request

        with urllib.request.urlopen(b.metrics_url, timeout=10) as resp:
            metrics = resp.read().decode()
    out = capsys.readouterr().out
    assert f"RabbitMQ version: {version}\n" in out
    assert f"Product version: {version}\n" in out
    assert (
        f'rabbitmq_build_info{{product="Leveret",prometheus_plugin_version="{version}",'
        f'rabbitmq_version="{version}"}} 1.0'
    ) in metrics


def test_max_message_size_is_16_mib_by_default_from_4_0() -> None:
    """Default max_message_size: 128 MiB in 3.10.8 (deps/rabbit/Makefile:119), 16 MiB in
    4.x (v4.2.9 deps/rabbit/Makefile:111; release-notes/4.0.1.md "Default Maximum Message
    Size Reduced to 16 MiB"); a larger publish closes the channel (v4.2.9
    rabbit_channel.erl:1024-1039 check_msg_size)."""
    body = b"x" * (16 * 1024 * 1024 + 1)
    with broker("3.10.8") as b, channel(b) as ch:
        ch.queue_declare("big")
        ch.basic_publish("", "big", body)
        assert ch.queue_declare("big", passive=True).method.message_count == 1
    with broker("4.2") as b, channel(b) as ch:
        ch.queue_declare("big")
        ch.basic_publish("", "big", body[:-1])  # 16 MiB is allowed
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
            ch.basic_publish("", "big", body)
            ch.queue_declare("big", passive=True)
        assert info.value.reply_code == 406
        assert info.value.reply_text == (
            "PRECONDITION_FAILED - message size 16777217 is larger than configured max "
            "size 16777216"
        )
    with broker("4.2", max_message_size=64 * 1024 * 1024) as b, channel(b) as ch:
        ch.queue_declare("big")
        ch.basic_publish("", "big", body)  # a configured size wins, as RabbitMQ's
        assert ch.queue_declare("big", passive=True).method.message_count == 1


def test_a_frame_max_below_8192_is_refused_from_4_1() -> None:
    """?FRAME_MIN_SIZE is 8192 from 4.1 (v4.2.9 rabbit_framing.hrl:14; rabbit_reader.erl:
    1287-1297 validate_negotiated_integer_value; release-notes/4.1.0.md "Initial AMQP 0-9-1
    Maximum Frame Size"): a client asking for 4096 in tune-ok is dropped, as amqplib before
    0.10.7 was; 3.10.8 took 4096. The server's own frame_max cannot be set below it."""
    with broker("3.10.8") as b:
        params = pika.URLParameters(b.url)
        params.frame_max = 4096
        conn = pika.BlockingConnection(params)
        assert conn.is_open
        conn.close()
    with broker("4.2") as b:
        params = pika.URLParameters(b.url)
        params.frame_max = 4096
        with pytest.raises(pika.exceptions.AMQPConnectionError):
            pika.BlockingConnection(params)
        params.frame_max = 8192
        conn = pika.BlockingConnection(params)
        assert conn.is_open
        conn.close()
    with pytest.raises(ConfigError, match=re.escape("'frame_max': at least 8192")):
        leveret.Broker(rabbitmq_version="4.2", frame_max=4096)


def test_a_vhost_shows_the_default_queue_type_and_protection_from_4_0() -> None:
    """rabbit_vhost at v4.2.9: a vhost made without a default queue type gets classic, in
    its metadata too (rabbit_vhost.erl:197-202, 757-778), and tells
    protected_from_deletion (vhost.erl:126-136); 3.10.8 shows undefined."""
    with broker("3.10.8", management=True) as b:
        (vhost,) = api(b, "GET", "/api/vhosts")[1]
        assert vhost["default_queue_type"] == "undefined"
        assert "protected_from_deletion" not in vhost
    with broker("4.2", management=True) as b:
        (vhost,) = api(b, "GET", "/api/vhosts")[1]
        assert vhost["default_queue_type"] == "classic"
        assert vhost["metadata"] == {
            "default_queue_type": "classic",
            "description": "Default virtual host",
            "tags": [],
        }
        assert vhost["protected_from_deletion"] is False
