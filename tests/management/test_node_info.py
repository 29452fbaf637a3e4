"""What ``/api/nodes`` tells of Leveret itself (its mechanisms, files and log
destinations) and a vhost's connection bytes, exactly: what RabbitMQ's side of these
looks like is in tests/differential/test_management_node_figures.py."""

from __future__ import annotations

import base64
import json
import logging
import sys
import urllib.request
from pathlib import Path
from typing import Any

import pika

import leveret
from leveret.management.nodeinfo import auth_mechanisms, log_locations
from tests.support.waiting import wait_for

GUEST = "Basic " + base64.b64encode(b"guest:guest").decode()


def get(b: leveret.Broker, path: str) -> Any:
    assert b.management_url is not None
    req = urllib.request.Request(b.management_url.rstrip("/") + path)
    req.add_header("Authorization", GUEST)
    with urllib.request.urlopen(req, timeout=30) as resp:
        return json.load(resp)


def test_mechanisms_are_leverets_enabled_as_configured() -> None:
    got = auth_mechanisms(("PLAIN", "EXTERNAL"), v4=False)
    assert [(m["name"], m["enabled"]) for m in got] == [
        ("AMQPLAIN", False),
        ("PLAIN", True),
        ("EXTERNAL", True),
    ]
    assert got[0]["description"] == "QPid AMQPLAIN mechanism"
    v4 = auth_mechanisms(("ANONYMOUS",), v4=True)
    assert v4[-1] == {
        "name": "ANONYMOUS",
        "description": "SASL ANONYMOUS authentication mechanism",
        "enabled": True,
    }


def test_log_locations_name_each_handlers_destination(tmp_path: Path) -> None:
    logger = logging.getLogger("leveret")
    to_file = logging.FileHandler(tmp_path / "leveret.log")
    to_stdout = logging.StreamHandler(sys.stdout)
    logger.addHandler(to_file)
    logger.addHandler(to_stdout)
    try:
        got = log_locations()
    finally:
        logger.removeHandler(to_file)
        logger.removeHandler(to_stdout)
        to_file.close()
    assert str(tmp_path / "leveret.log") in got
    assert "<stdout>" in got
    assert got == sorted(got)


def test_the_node_shows_its_files_and_mechanisms(tmp_path: Path) -> None:
    config = tmp_path / "leveret.toml"
    config.write_text('[server]\nauth_mechanisms = ["PLAIN"]\n')
    with leveret.Broker(management=True, data_dir=tmp_path / "data", config=config) as b:
        (node,) = get(b, "/api/nodes")
        assert node["db_dir"] == str((tmp_path / "data").absolute())
        assert node["config_files"] == [str(config.absolute())]
        assert node["cluster_links"] == []
        enabled = {m["name"]: m["enabled"] for m in node["auth_mechanisms"]}
        assert enabled == {"AMQPLAIN": False, "PLAIN": True, "EXTERNAL": False}
    with leveret.Broker(management=True) as b:  # in memory, no file: no data directory
        (node,) = get(b, "/api/nodes")
        assert "db_dir" not in node
        assert node["config_files"] == []


def test_a_vhost_adds_up_its_connections_bytes() -> None:
    with leveret.Broker(management=True) as b:
        b.add_vhost("traffic")
        b.set_permissions("guest", "traffic")
        assert "recv_oct" not in get(b, "/api/vhosts/traffic")
        params = pika.ConnectionParameters(b.host, b.port, virtual_host="traffic")
        first = pika.BlockingConnection(params)
        first.channel().basic_publish("", "nowhere", b"x" * 5000)
        second = pika.BlockingConnection(params)
        second.channel()
        first.process_data_events(0.2)

        def live() -> list[dict[str, Any]]:
            return [c for c in get(b, "/api/connections") if c["vhost"] == "traffic"]

        def by_connection() -> tuple[int, int]:
            conns = live()
            return sum(c["recv_oct"] for c in conns), sum(c["send_oct"] for c in conns)

        def of_vhost() -> tuple[int, int]:
            v = get(b, "/api/vhosts/traffic")
            return v["recv_oct"], v["send_oct"]

        assert of_vhost() == by_connection()
        assert of_vhost()[0] > 5000
        first.close()
        assert wait_for(lambda: len(live()) == 1)
        kept = of_vhost()
        assert kept[0] > by_connection()[0] + 5000  # the closed one's bytes stay
        second.close()
        assert wait_for(lambda: not live())
        assert of_vhost() >= kept
        b.delete_vhost("traffic")
        b.add_vhost("traffic")  # made again: from nothing, as RabbitMQ
        assert "recv_oct" not in get(b, "/api/vhosts/traffic")
