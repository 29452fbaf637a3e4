"""Syslog and OpenTelemetry records reach the lake exactly once: util-linux ``logger``
(RFC 5424 over TCP, RFC 3164 over UDP) and an application exporting with the OpenTelemetry
SDK send to a running ``leveret server``; ``leveret pipeline ingest`` (availableNow) reads
the ``logs`` stream into a Parquet lake; every record is there once, with its fields.

Leveret only (RabbitMQ has neither listener). One test: Spark is slow."""

from __future__ import annotations

import base64
import logging
import os
import shutil
import socket
import subprocess
import sys
import urllib.request
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from leveret.spark.pipeline import ensure_log_stream
from tests.support.brokers import BrokerUnderTest, start_leveret
from tests.support.logsources import metric
from tests.support.waiting import wait_for

LOGGER = shutil.which("logger")
N = 25  # records from each of the three senders


@pytest.fixture
def leveret_syslog(tmp_path: Path) -> Iterator[BrokerUnderTest]:
    broker = start_leveret(tmp_path / "data", extra=["--syslog-port", "0"])
    try:
        yield broker
    finally:
        broker.stop()


def _logger(broker: BrokerUnderTest, lines: list[str], *args: str) -> None:
    assert LOGGER is not None
    subprocess.run(
        [LOGGER, "--server", "127.0.0.1", "--port", str(broker.syslog_port), *args],
        input="".join(f"{line}\n" for line in lines),
        text=True,
        check=True,
        timeout=60,
    )


def _otel(broker: BrokerUnderTest) -> None:
    from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
    from opentelemetry.instrumentation.logging.handler import LoggingHandler
    from opentelemetry.sdk._logs import LoggerProvider
    from opentelemetry.sdk._logs.export import BatchLogRecordProcessor
    from opentelemetry.sdk.resources import Resource

    provider = LoggerProvider(
        resource=Resource.create(
            {"service.name": "otel-app", "host.name": "otel-host", "process.pid": 4321}
        )
    )
    auth = "Basic " + base64.b64encode(b"guest:guest").decode()
    exporter = OTLPLogExporter(
        endpoint=f"{broker.http_url}/v1/logs", headers={"Authorization": auth}, timeout=30
    )
    provider.add_log_record_processor(BatchLogRecordProcessor(exporter))
    log = logging.getLogger("lake.otel")
    log.propagate = False
    handler = LoggingHandler(logger_provider=provider)
    log.addHandler(handler)
    try:
        for i in range(N):
            log.error("otel %d", i)
        assert provider.force_flush(30_000)
    finally:
        log.removeHandler(handler)
        provider.shutdown()


@pytest.mark.skipif(LOGGER is None, reason="util-linux logger is not installed")
def test_syslog_and_otlp_records_land_in_the_lake_exactly_once(
    leveret_syslog: BrokerUnderTest, tmp_path: Path
) -> None:
    pytest.importorskip("opentelemetry.sdk")
    broker = leveret_syslog
    ensure_log_stream(broker.url)  # the stream bound to logs before anything is sent
    _logger(broker, [f"tcp {i}" for i in range(N)],
            "--tcp", "--rfc5424", "-p", "local1.warning", "-t", "tcp-app", "--id=101")  # fmt: skip
    _logger(broker, [f"udp {i}" for i in range(N)],
            "--udp", "--rfc3164", "-p", "daemon.err", "-t", "udp-app", "--id=202")  # fmt: skip
    _otel(broker)

    def published() -> float:
        text = urllib.request.urlopen(broker.metrics_url, timeout=30).read().decode()
        return sum(
            metric(text, "leveret_log_source_records_published_total", source=s)
            for s in ("syslog", "otlp")
        )

    assert wait_for(lambda: published() == 3 * N, 60)

    lake = tmp_path / "lake"
    done = subprocess.run(
        [sys.executable, "-m", "leveret.cli.main", "pipeline", "ingest",
         "--url", broker.url, "--lake", str(lake),
         "--checkpoint", str(tmp_path / "checkpoint"), "--master", "local[2]",
         "--trigger", "availableNow", "--log-level", "warning"],
        capture_output=True, text=True, timeout=600, env={**os.environ},
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr

    rows = []
    for f in sorted(lake.rglob("*.parquet")):
        severity = f.parent.name.split("=", 1)[1]
        for row in pq.read_table(f).to_pylist():
            rows.append({**row, "severity": severity})
    by_message = Counter(r["message"] for r in rows)
    want = [f"{kind} {i}" for kind in ("tcp", "udp", "otel") for i in range(N)]
    assert sorted(by_message) == sorted(want)
    assert set(by_message.values()) == {1}, by_message.most_common(3)
    assert len({r["message_id"] for r in rows}) == len(rows)
    hosts = {socket.gethostname(), socket.gethostname().split(".")[0]}
    for r in rows:
        kind = r["message"].split()[0]
        got = (r["severity"], r["facility"], r["app"], r["pid"])
        if kind == "tcp":
            assert got == ("warning", "local1", "tcp-app", 101)
            assert r["host"] in hosts
        elif kind == "udp":
            assert got == ("error", "daemon", "udp-app", 202)
            assert r["host"] in hosts
        else:
            assert got == ("error", "user", "otel-app", 4321)
            assert r["host"] == "otel-host"
        assert r["ts"] is not None
