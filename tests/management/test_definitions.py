"""Definitions exported from Leveret import into RabbitMQ 3.10.8, and the reverse: the
same exchanges, queues, bindings, users (their password hashes work on the other broker)
and permissions come out on the other side."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pika
import pytest

from tests.support.brokers import BrokerUnderTest
from tests.support.mgmt import Api, Site, declare_scenario, make_site, normalize, q

pytestmark = pytest.mark.rabbitmq


def only(defs: dict[str, Any], vhost: str, user: str) -> dict[str, Any]:
    """The part of a broker's definitions that belongs to one test."""
    return {
        "users": [u for u in defs["users"] if u["name"] == user],
        "vhosts": [v for v in defs["vhosts"] if v["name"] == vhost],
        "permissions": [p for p in defs["permissions"] if p["vhost"] == vhost],
        "queues": [x for x in defs["queues"] if x["vhost"] == vhost],
        "exchanges": [x for x in defs["exchanges"] if x["vhost"] == vhost],
        "bindings": [x for x in defs["bindings"] if x["vhost"] == vhost],
    }


def topology(api: Api, vhost: str) -> dict[str, Any]:
    keep = ("name", "type", "durable", "auto_delete", "internal", "arguments")
    exchanges = sorted(
        json.dumps({k: x[k] for k in keep}, sort_keys=True)
        for x in api.get(f"/api/exchanges/{q(vhost)}")
    )
    queues = sorted(
        json.dumps(
            {k: x[k] for k in ("name", "durable", "auto_delete", "arguments")}, sort_keys=True
        )
        for x in api.get(f"/api/queues/{q(vhost)}")
        if not x["exclusive"]
    )
    bindings = sorted(
        normalize(
            json.dumps(
                {
                    k: b[k]
                    for k in (
                        "source",
                        "destination",
                        "destination_type",
                        "routing_key",
                        "arguments",
                    )
                },
                sort_keys=True,
            )
        )
        for b in api.get(f"/api/bindings/{q(vhost)}")
        if "amq.gen" not in b["destination"]
    )
    perms = sorted(
        json.dumps({k: p[k] for k in ("user", "configure", "write", "read")}, sort_keys=True)
        for p in api.get(f"/api/vhosts/{q(vhost)}/permissions")
    )
    return {"exchanges": exchanges, "queues": queues, "bindings": bindings, "perms": perms}


def can_log_in(broker: BrokerUnderTest, vhost: str, user: str, password: str) -> bool:
    params = pika.ConnectionParameters(
        broker.host,
        broker.port,
        virtual_host=vhost,
        credentials=pika.PlainCredentials(user, password),
    )
    try:
        pika.BlockingConnection(params).close()
        return True
    except pika.exceptions.AMQPError:
        return False


def leveret_ctl(broker: BrokerUnderTest, *args: str, stdin: str | None = None) -> str:
    result = subprocess.run(
        [sys.executable, "-m", "leveret.cli.main", "ctl", "--url", broker.http_url, *args],
        capture_output=True,
        text=True,
        timeout=60,
        input=stdin,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_leveret_export_imports_into_rabbitmq(
    leveret_site: Site, rabbitmq: BrokerUnderTest, tmp_path: Path
) -> None:
    from tests.support.mgmt import rabbitmq_with_management

    rabbitmq_with_management(rabbitmq)
    lev = leveret_site
    conn = declare_scenario(lev)
    conn.close()
    path = tmp_path / "leveret.json"
    leveret_ctl(lev.broker, "export_definitions", str(path))
    exported = json.loads(path.read_text())
    assert exported["rabbit_version"] == "3.10.8"
    mine = only(exported, lev.vhost, lev.user)
    assert len(mine["users"]) == 1 and mine["users"][0]["password_hash"]
    rmq = Api(rabbitmq.http_url)
    try:
        status, body = rmq.call("POST", "/api/definitions", mine)
        assert status in (201, 204), body
        assert topology(rmq, lev.vhost) == topology(lev.api, lev.vhost)
        # the password hash Leveret made is one RabbitMQ accepts
        assert can_log_in(rabbitmq, lev.vhost, lev.user, lev.password)
        assert not can_log_in(rabbitmq, lev.vhost, lev.user, "wrong")
        # and rabbitmqctl lists what leveret ctl lists (queue arguments aside: RabbitMQ
        # keeps them in the order of the imported JSON, Leveret in the declaring client's)
        for verb, columns in (
            ("list_exchanges", []),
            ("list_bindings", []),
            ("list_queues", ["name", "durable", "auto_delete"]),
        ):
            theirs = subprocess.run(
                ["rabbitmqctl", verb, "-p", lev.vhost, "-q", *columns],
                capture_output=True,
                text=True,
                timeout=60,
            ).stdout
            ours = leveret_ctl(lev.broker, verb, "-p", lev.vhost, "-q", *columns)
            ours = "\n".join(line for line in ours.splitlines() if "amq.gen" not in line)
            assert sorted(ours.splitlines()) == sorted(theirs.splitlines()), verb
    finally:
        rmq.delete(f"/api/vhosts/{q(lev.vhost)}")
        rmq.delete(f"/api/users/{q(lev.user)}")


def test_rabbitmq_export_imports_into_leveret(
    rabbitmq_site: Site, leveret: BrokerUnderTest, tmp_path: Path
) -> None:
    rmq = rabbitmq_site
    conn = declare_scenario(rmq)
    conn.close()
    exported = rmq.api.get("/api/definitions")
    mine = only(exported, rmq.vhost, rmq.user)
    path = tmp_path / "rabbitmq.json"
    path.write_text(json.dumps({"rabbit_version": exported["rabbit_version"], **mine}))
    lev = Api(leveret.http_url)
    try:
        out = leveret_ctl(leveret, "import_definitions", str(path))
        assert out.splitlines()[0] == f'Importing definitions in JSON from a file at "{path}" ...'
        assert topology(lev, rmq.vhost) == topology(rmq.api, rmq.vhost)
        # RabbitMQ's password hash works on Leveret
        assert can_log_in(leveret, rmq.vhost, rmq.user, rmq.password)
        # from standard input too, idempotently
        leveret_ctl(leveret, "import_definitions", "-", stdin=path.read_text())
        assert topology(lev, rmq.vhost) == topology(rmq.api, rmq.vhost)
    finally:
        lev.delete(f"/api/vhosts/{q(rmq.vhost)}")
        lev.delete(f"/api/users/{q(rmq.user)}")


def test_per_vhost_definitions_round_trip(
    leveret: BrokerUnderTest, rabbitmq: BrokerUnderTest
) -> None:
    """/api/definitions/{vhost} from either broker loads into a vhost of the other."""
    from tests.support.mgmt import rabbitmq_with_management

    rabbitmq_with_management(rabbitmq)
    sites = [make_site(leveret, "d"), make_site(rabbitmq, "d")]
    lev, rmq = (next(s) for s in sites)
    try:
        declare_scenario(lev).close()
        ours = lev.api.get(f"/api/definitions/{q(lev.vhost)}")
        assert "vhost" not in ours["queues"][0]
        status, body = rmq.api.call("POST", f"/api/definitions/{q(rmq.vhost)}", ours)
        assert status in (201, 204), body
        theirs = rmq.api.get(f"/api/definitions/{q(rmq.vhost)}")
        status, body = lev.api.call("POST", f"/api/definitions/{q(lev.vhost)}", theirs)
        assert status == 204, body
        a, b = topology(lev.api, lev.vhost), topology(rmq.api, rmq.vhost)
        assert a["exchanges"] == b["exchanges"] and a["queues"] == b["queues"]
        assert a["bindings"] == b["bindings"]
    finally:
        for s in sites:
            for _ in s:
                pass


@pytest.mark.parametrize(
    "body", [{"queues": True}, {"queues": [1]}, {"bindings": 4}, {"queues": [["a"]]}]
)
@pytest.mark.parametrize("where", ["", "/{v}"])
def test_malformed_definitions_are_refused(
    leveret_site: Site, body: dict[str, Any], where: str
) -> None:
    """Sections that are not lists of objects: RabbitMQ's import crashes on them (500, no
    body); Leveret refuses them with a 400 and RabbitMQ's error object, the whole broker's
    definitions and a vhost's alike (the vhost's raised a traceback and a 500, found by
    the API fuzzing campaign)."""
    path = "/api/definitions" + where.format(v=q(leveret_site.vhost))
    status, answer = leveret_site.api.call("POST", path, body)
    assert status == 400 and answer["error"] == "bad_request", answer
    assert answer["reason"].startswith("invalid definitions:")
