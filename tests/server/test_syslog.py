"""Syslog into the log system, sent by util-linux's ``logger`` (RFC 5424 and RFC 3164, UDP
and TCP, newline and octet-counting framing) to a Leveret's ``syslog_port``, read by a
receiver bound to ``logs`` as ``receive-logs`` binds: each record is what ``emit-log`` would
publish, with the severity, facility, app, host, pid and time the message said.

Leveret only: RabbitMQ has no syslog listener."""

from __future__ import annotations

import shutil
import socket
import subprocess
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

import leveret
from tests.support.logsources import Bound, assert_like_emit_log, bound, metric
from tests.support.waiting import wait_for

__all__ = ["bound"]  # the fixture

LOGGER = shutil.which("logger")
pytestmark = pytest.mark.skipif(LOGGER is None, reason="util-linux logger is not installed")
HOSTS = {socket.gethostname(), socket.gethostname().split(".")[0]}


@pytest.fixture(scope="module")
def broker() -> Iterator[leveret.Broker]:
    with leveret.Broker(syslog_port=0, management=True) as b:
        yield b


def logger(broker: leveret.Broker, *args: str) -> None:
    assert LOGGER is not None
    subprocess.run(
        [LOGGER, "--server", "127.0.0.1", "--port", str(broker.syslog_port), *args],
        check=True,
        timeout=60,
    )


def ts(record: dict[str, object]) -> datetime:
    text = str(record["ts"])
    assert text.endswith("Z"), text
    return datetime.fromisoformat(text[:-1]).replace(tzinfo=UTC)


def test_rfc5424_over_tcp(broker: leveret.Broker, bound: Bound) -> None:
    before = datetime.now(UTC)
    logger(broker, "--tcp", "--rfc5424", "-p", "local3.err", "-t", "billing", "--id=4242",
           "--msgid", "PAY", "--sd-id", "order@32473", "--sd-param", 'id="A-17"',
           "payment declined")  # fmt: skip
    after = datetime.now(UTC)
    (got,) = bound.take(1)
    assert_like_emit_log(got)
    r = got.record
    assert got.routing_key == "error"  # fanout: the severity, as emit-log's key
    assert (r["severity"], r["facility"], r["app"], r["pid"]) == (
        "error",
        "local3",
        "billing",
        4242,
    )
    assert r["host"] in HOSTS
    assert r["message"] == "payment declined"
    assert before - timedelta(seconds=1) <= ts(r) <= after
    extra = r["extra"]
    assert extra["syslog_severity"] == "err" and extra["syslog_facility"] == 19
    assert extra["msgid"] == "PAY"
    assert extra["structured_data"]["order@32473"] == {"id": "A-17"}
    bound.none_more()


def test_rfc3164_over_udp(broker: leveret.Broker, bound: Bound) -> None:
    before = datetime.now(UTC).replace(microsecond=0)
    logger(broker, "--udp", "--rfc3164", "-p", "mail.crit", "-t", "postfix", "--id=77",
           "queue file write error")  # fmt: skip
    after = datetime.now(UTC)
    (got,) = bound.take(1)
    assert_like_emit_log(got)
    r = got.record
    assert (r["severity"], r["facility"], r["app"], r["pid"]) == ("critical", "mail", "postfix", 77)
    assert r["host"] in HOSTS
    assert r["message"] == "queue file write error"
    # RFC 3164's time has no zone: read in the server's (this process's) local zone, as
    # logger wrote it in its own, the same one
    assert before - timedelta(seconds=1) <= ts(r) <= after
    assert r["extra"]["syslog_severity"] == "crit"


def test_octet_counting_over_tcp(broker: leveret.Broker, bound: Bound) -> None:
    for severity in ("debug", "notice", "warning", "emerg"):
        logger(broker, "--tcp", "--rfc5424", "--octet-count", "-p", f"auth.{severity}",
               "-t", "sshd", f"{severity} line")  # fmt: skip
    got = bound.take(4)
    assert [g.record["severity"] for g in got] == ["debug", "info", "warning", "critical"]
    assert [g.record["message"] for g in got] == [
        "debug line",
        "notice line",
        "warning line",
        "emerg line",
    ]
    assert {g.record["facility"] for g in got} == {"auth"}
    assert {g.record["app"] for g in got} == {"sshd"}


def test_rfc3164_over_tcp_and_rfc5424_over_udp(broker: leveret.Broker, bound: Bound) -> None:
    logger(broker, "--tcp", "--rfc3164", "-p", "daemon.info", "-t", "cron", "--id=9", "tcp 3164")
    logger(broker, "--udp", "--rfc5424", "-p", "lpr.debug", "-t", "lpd", "udp 5424")
    got = sorted(bound.take(2), key=lambda g: str(g.record["message"]))
    assert [(g.record["facility"], g.record["severity"], g.record["app"]) for g in got] == [
        ("daemon", "info", "cron"),
        ("lpr", "debug", "lpd"),
    ]
    assert got[0].record["pid"] == 9


def test_a_topic_exchange_gets_facility_dot_severity(broker: leveret.Broker) -> None:
    """An exchange that exists keeps its type: a topic ``logs`` in a vhost of its own
    gets emit-log's topic key, ``facility.severity``."""
    with leveret.Broker(syslog_port=0, log_sources_exchange="topic-logs", default_user=True) as own:
        topic = Bound(own.url, "topic-logs", "topic", "auth.*")
        try:
            logger(own, "--udp", "--rfc5424", "-p", "auth.warning", "-t", "su", "bad su")
            logger(own, "--udp", "--rfc5424", "-p", "user.warning", "-t", "app", "not bound")
            (got,) = topic.take(1)
            assert got.routing_key == "auth.warning"
            assert got.record["message"] == "bad su"
            topic.none_more()
        finally:
            topic.close()


def test_malformed_input_is_refused_counted_and_the_stream_goes_on(
    broker: leveret.Broker, bound: Bound
) -> None:
    metrics = broker.metrics_url

    def count(what: str) -> float:
        text = urllib.request.urlopen(metrics, timeout=30).read().decode()
        return metric(text, f"leveret_log_source_records_{what}_total", source="syslog")

    refused, received = count("refused"), count("received")
    port = broker.syslog_port
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(
            b"no priority here\n"
            b"<999>1 - - - - - - bad pri\n"
            b"<13>1 2024-13-45T99:00:00Z h a - - - bad time\n"
            b"<13>1 - host app - - [unclosed sd\n"
            b"<14>1 2024-05-01T12:00:00.5+02:00 web1 shop 7 - - good one\n"
        )
        s.shutdown(socket.SHUT_WR)
        s.recv(1)  # the server keeps the connection until we close: wait for its close
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as u:
        u.sendto(b"\xff\xfe garbage", ("127.0.0.1", port))
        u.sendto(b"<11>May  1 12:00:00 web2 shop[8]: good two", ("127.0.0.1", port))
    got = sorted(bound.take(2), key=lambda g: str(g.record["message"]))
    assert [g.record["message"] for g in got] == ["good one", "good two"]
    assert got[0].record["ts"] == "2024-05-01T10:00:00.500000Z"
    assert (got[0].record["host"], got[0].record["pid"]) == ("web1", 7)
    assert (got[1].record["host"], got[1].record["severity"]) == ("web2", "error")
    assert wait_for(lambda: count("refused") == refused + 5, 30)
    assert count("received") == received + 7
    bound.none_more()


def test_the_listener_is_off_unless_asked() -> None:
    with leveret.Broker() as b:
        assert b.syslog_port == 0


def test_a_message_without_a_hostname_gets_the_senders_address(
    broker: leveret.Broker, bound: Bound
) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as u:
        u.sendto(b"<12>May  1 12:00:00 myapp: no host", ("127.0.0.1", broker.syslog_port))
    (got,) = bound.take(1)
    assert (got.record["host"], got.record["app"]) == ("127.0.0.1", "myapp")
    assert got.record["severity"] == "warning"


@pytest.mark.parametrize(
    ("value", "port"), [("1514", 1514), (0, 0), ("off", None), ("none", None), (False, None)]
)
def test_the_syslog_port_setting(value: object, port: int | None) -> None:
    from leveret.server.config import Config

    config = Config()
    config.set("syslog_port", value)
    assert config.syslog_port == port
    assert Config.load(env={"LEVERET_SYSLOG_PORT": str(value)}).syslog_port == port


@pytest.mark.parametrize("value", ["70000", "-1", "syslog", True])
def test_a_bad_syslog_port_is_one_line(value: object) -> None:
    from leveret.server.config import Config, ConfigError

    with pytest.raises(ConfigError, match="invalid value for 'syslog_port'"):
        Config().set("syslog_port", value)


def test_the_exchange_and_vhost_settings_are_shared_and_not_empty(tmp_path: Path) -> None:
    from leveret.server.config import Config, ConfigError

    config_file = tmp_path / "leveret.toml"
    config_file.write_text('[log]\nsources_exchange = "ext"\nsources_vhost = "v"\n')
    config = Config.load(config_file, env={})
    assert (config.log_sources_exchange, config.log_sources_vhost) == ("ext", "v")
    with pytest.raises(ConfigError, match="'log_sources_exchange': a name, not empty"):
        Config().set("log_sources_exchange", "")


def test_a_super_stream_gets_each_host_in_the_partition_its_name_hashes_to(
    tmp_path: Path,
) -> None:
    """The sources' exchange made as a super stream: each record goes with the binding key
    of the partition its host hashes to (as emit-log --super-stream --route-by host)."""
    import pika

    from leveret.logs.superstream import declare_super_stream, partition_index

    with leveret.Broker(
        syslog_port=0, log_sources_exchange="sup", default_user=True, data_dir=tmp_path
    ) as own:
        assert declare_super_stream(own.url, "sup", 3, binding_keys=["a", "b", "c"])
        conn = pika.BlockingConnection(pika.URLParameters(own.url))
        try:
            ch = conn.channel()
            queue = ch.queue_declare("", exclusive=True).method.queue
            for key in "abc":
                ch.queue_bind(queue, "sup", key)
            hosts = [f"web-{i}" for i in range(8)]
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
                for host in hosts:
                    line = f"<14>1 2026-01-01T00:00:00Z {host} app - - - from {host}"
                    udp.sendto(line.encode(), ("127.0.0.1", own.syslog_port))
            got: dict[str, str] = {}
            assert wait_for(lambda: _take_into(ch, queue, got) >= len(hosts), 30, 0.05), got
            assert got == {h: "abc"[partition_index(h, 3)] for h in hosts}
            assert len(set(got.values())) > 1
        finally:
            conn.close()


def _take_into(ch: object, queue: str, got: dict[str, str]) -> int:
    import json

    method, _, body = ch.basic_get(queue, auto_ack=True)  # type: ignore[attr-defined]
    if method is not None:
        got[json.loads(body)["host"]] = method.routing_key
    return len(got)
