"""Plugins by RabbitMQ's names: the setting (flag, environment, config file), what is on by
default, and where the enabled ones are listed (/api/nodes, /api/overview's exchange
types, ``leveret ctl status``)."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
from base64 import b64encode
from pathlib import Path
from typing import Any

import pytest

import leveret
from leveret.server.config import Config, ConfigError

DEFAULTS = [
    "rabbitmq_management",
    "rabbitmq_prometheus",
    "rabbitmq_stream",
    "rabbitmq_stream_management",
    "rabbitmq_consistent_hash_exchange",
    "rabbitmq_delayed_message_exchange",
    "rabbitmq_message_deduplication",
]


def test_the_setting(tmp_path: Path) -> None:
    assert Config.load(env={}).plugins == ()
    env = {"LEVERET_PLUGINS": "rabbitmq_event_exchange, rabbitmq_event_exchange"}
    assert Config.load(env=env).plugins == ("rabbitmq_event_exchange",)
    conf = tmp_path / "leveret.toml"
    conf.write_text('plugins = ["rabbitmq_event_exchange"]\nconsumer_timeout = 5000\n')
    cfg = Config.load(conf, env={})
    assert (cfg.plugins, cfg.consumer_timeout) == (("rabbitmq_event_exchange",), 5000)
    conf.write_text('plugins = ["rabbitmq_shovel"]\n')
    with pytest.raises(ConfigError, match="unknown plugin 'rabbitmq_shovel'"):
        Config.load(conf, env={})
    assert Config.load(env={}).consumer_timeout == 1_800_000  # RabbitMQ's default
    assert Config.load(env={"LEVERET_CONSUMER_TIMEOUT": "infinity"}).consumer_timeout is None
    with pytest.raises(ConfigError, match="consumer_timeout"):
        Config.load(env={"LEVERET_CONSUMER_TIMEOUT": "0"})


def _get(url: str) -> Any:
    req = urllib.request.Request(url)
    req.add_header("Authorization", "Basic " + b64encode(b"guest:guest").decode())
    with urllib.request.urlopen(req, timeout=10) as resp:
        return json.loads(resp.read())


@pytest.mark.parametrize("extra", [[], ["rabbitmq_event_exchange"]])
def test_where_the_enabled_ones_are_listed(extra: list[str]) -> None:
    with leveret.Broker(management=True, plugins=extra) as b:
        node = _get(f"{b.management_url}/api/nodes")[0]
        assert node["enabled_plugins"] == [*DEFAULTS, *extra]
        types = [t["name"] for t in _get(f"{b.management_url}/api/overview")["exchange_types"]]
        assert types == [
            "direct",
            "fanout",
            "headers",
            "topic",
            "x-consistent-hash",
            "x-delayed-message",
            "x-message-deduplication",
        ]
        status = subprocess.run(
            [sys.executable, "-m", "leveret.cli.main", "ctl", "--url", b.management_url,
             "status"],
            capture_output=True, text=True, timeout=60, check=True,
        ).stdout  # fmt: skip
        section = status.split("Enabled plugins:\n\n", 1)[1].split("\n\n", 1)[0]
        assert section.splitlines() == [f" * {name}" for name in [*DEFAULTS, *extra]]
