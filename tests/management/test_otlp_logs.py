"""OpenTelemetry logs into the log system: an application's ``LoggingHandler`` exporting
with the OpenTelemetry SDK's OTLP/HTTP exporter (protobuf, gzip or not) to ``/v1/logs`` on
Leveret's management port, and hand-made JSON and broken bodies posted with requests. A
receiver bound to ``logs`` gets each record as ``emit-log`` would publish it.

Leveret only: RabbitMQ has no OTLP endpoint."""

from __future__ import annotations

import base64
import gzip
import json
import logging
import os
import socket
import time
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import requests

import leveret
from tests.support.logsources import Bound, assert_like_emit_log, bound, metric
from tests.support.waiting import wait_for

__all__ = ["bound"]  # the fixture

pytest.importorskip("opentelemetry.sdk", reason="the dev extra's opentelemetry-sdk")
from google.rpc import status_pb2
from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
from opentelemetry.instrumentation.logging.handler import LoggingHandler
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import (
    ExportLogsServiceResponse,
)
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import SimpleLogRecordProcessor
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider

GUEST = {"Authorization": "Basic " + base64.b64encode(b"guest:guest").decode()}
USERS = [
    {"name": "reader", "password": "pw", "tags": ["management"]},
    {"name": "nobody", "password": "pw", "tags": []},
]
PERMISSIONS = [{"user": "reader", "vhost": "/", "configure": ".*", "write": "^$", "read": ".*"}]


@pytest.fixture(scope="module")
def broker() -> Iterator[leveret.Broker]:
    with leveret.Broker(
        management=True, max_message_size=4096, users=USERS, permissions=PERMISSIONS
    ) as b:
        yield b


def endpoint(broker: leveret.Broker) -> str:
    return f"{broker.management_url}/v1/logs"


def app_logger(
    broker: leveret.Broker, name: str, compression: Compression | None, **resource: Any
) -> tuple[logging.Logger, LoggerProvider]:
    """A Python logger whose records go through OpenTelemetry's LoggingHandler (the
    SDK's own is deprecated for opentelemetry-instrumentation-logging's) to Leveret."""
    provider = LoggerProvider(resource=Resource.create(resource))
    exporter = OTLPLogExporter(
        endpoint=endpoint(broker), headers=GUEST, compression=compression, timeout=30
    )
    provider.add_log_record_processor(SimpleLogRecordProcessor(exporter))
    log = logging.getLogger(name)
    log.propagate = False
    log.setLevel(logging.DEBUG)
    log.addHandler(LoggingHandler(level=logging.DEBUG, logger_provider=provider))
    return log, provider


def ts(record: dict[str, Any]) -> datetime:
    return datetime.fromisoformat(str(record["ts"])[:-1]).replace(tzinfo=UTC)


@pytest.mark.parametrize("compression", [None, Compression.Gzip], ids=["plain", "gzip"])
def test_an_application_logs_through_the_sdk(
    broker: leveret.Broker, bound: Bound, compression: Compression | None
) -> None:
    host = socket.gethostname()
    log, provider = app_logger(
        broker,
        f"shop.checkout.{compression}",
        compression,
        **{"service.name": "shop", "host.name": host, "process.pid": os.getpid(),
           "deployment.environment": "test"},
    )  # fmt: skip
    tracer = TracerProvider().get_tracer("t")
    before = datetime.now(UTC)
    try:
        with tracer.start_as_current_span("pay") as span:
            log.warning("card %s declined", "visa", extra={"order": 17})
            try:
                raise ValueError("no funds")
            except ValueError:
                log.exception("payment failed")
        log.debug("outside a span")
        provider.force_flush()
    finally:
        provider.shutdown()
    after = datetime.now(UTC)
    got = bound.take(3)
    for g in got:
        assert_like_emit_log(g)
    warn, err, debug = (g.record for g in got)
    assert [g.routing_key for g in got] == ["warning", "error", "debug"]
    assert (warn["severity"], warn["message"]) == ("warning", "card visa declined")
    assert (err["severity"], debug["severity"]) == ("error", "debug")
    for r in (warn, err, debug):
        assert (r["app"], r["host"], r["pid"], r["facility"]) == ("shop", host, os.getpid(), "user")
        assert r["logger"] == f"shop.checkout.{compression}"
        assert before - timedelta(seconds=1) <= ts(r) <= after
        assert r["extra"]["resource"]["deployment.environment"] == "test"
    ctx = span.get_span_context()
    assert warn["extra"]["trace_id"] == f"{ctx.trace_id:032x}"
    assert warn["extra"]["span_id"] == f"{ctx.span_id:016x}"
    assert err["extra"]["trace_id"] == f"{ctx.trace_id:032x}"
    assert "trace_id" not in debug["extra"]
    assert warn["extra"]["attributes"]["order"] == 17
    assert "ValueError: no funds" in err["exc"]
    bound.none_more()


def otlp_json(*records: dict[str, Any], **resource: Any) -> dict[str, Any]:
    attrs = [{"key": k, "value": v} for k, v in resource.items()]
    return {
        "resourceLogs": [
            {
                "resource": {"attributes": attrs},
                "scopeLogs": [{"scope": {"name": "json.scope"}, "logRecords": list(records)}],
            }
        ]
    }


def test_json_as_otlp_maps_it(broker: leveret.Broker, bound: Bound) -> None:
    body = otlp_json(
        {
            "timeUnixNano": "1714564800123456789",
            "severityNumber": 17,
            "severityText": "ERROR",
            "body": {"stringValue": "disk full"},
            "traceId": "5b8efff798038103d269b633813fc60c",
            "spanId": "eee19b7ec3c1b174",
            "attributes": [{"key": "disk", "value": {"stringValue": "/var"}}],
        },
        {
            "observedTimeUnixNano": 1714564801000000000,
            "severityText": "warn",
            "body": {"kvlistValue": {"values": [{"key": "a", "value": {"intValue": "1"}}]}},
        },
        {"body": {"stringValue": "no time, no severity"}},
        **{
            "service.name": {"stringValue": "api"},
            "host.name": {"stringValue": "web-3"},
            "process.pid": {"intValue": "321"},
        },
    )
    before = datetime.now(UTC)
    r = requests.post(endpoint(broker), json=body, headers=GUEST, timeout=30)
    assert r.status_code == 200, r.text
    assert r.headers["Content-Type"].startswith("application/json")
    assert r.json() == {}
    got = [g.record for g in bound.take(3)]
    assert got[0]["ts"] == "2024-05-01T12:00:00.123456Z"
    assert (got[0]["severity"], got[0]["message"], got[0]["logger"]) == (
        "error",
        "disk full",
        "json.scope",
    )
    assert (got[0]["app"], got[0]["host"], got[0]["pid"]) == ("api", "web-3", 321)
    assert got[0]["extra"]["trace_id"] == "5b8efff798038103d269b633813fc60c"
    assert got[0]["extra"]["span_id"] == "eee19b7ec3c1b174"
    assert got[0]["extra"]["attributes"] == {"disk": "/var"}
    assert (got[1]["ts"], got[1]["severity"]) == ("2024-05-01T12:00:01.000000Z", "warning")
    assert json.loads(got[1]["message"]) == {"a": 1}
    assert got[2]["severity"] == "info"
    assert ts(got[2]) >= before - timedelta(seconds=1)  # arrival time


def test_gzip_json(broker: leveret.Broker, bound: Bound) -> None:
    body = gzip.compress(json.dumps(otlp_json({"body": {"stringValue": "zipped"}})).encode())
    headers = {**GUEST, "Content-Type": "application/json", "Content-Encoding": "gzip"}
    r = requests.post(endpoint(broker), data=body, headers=headers, timeout=30)
    assert r.status_code == 200, r.text
    (got,) = bound.take(1)
    assert got.record["message"] == "zipped"


@pytest.mark.parametrize(
    ("content_type", "body", "encoding", "reason"),
    [
        ("application/json", b"{not json", None, "the body is not JSON"),
        ("application/json", b"[1, 2]", None, "the body is not a JSON object"),
        ("application/json", b'{"resourceLogs": 7}', None, "not an OTLP logs request"),
        (
            "application/json",
            json.dumps(otlp_json({"traceId": "xyz"})).encode(),
            None,
            "traceId 'xyz' is not hexadecimal",
        ),
        (
            "application/json",
            json.dumps(otlp_json({"traceId": "abcd"})).encode(),
            None,
            "trace_id of 2 bytes",
        ),
        ("application/x-protobuf", b"\xff\xff\xff\xff", None, "cannot decode the protobuf body"),
        ("application/json", b"{}", "gzip", "cannot decompress the gzip body"),
        ("application/json", b"{}", "br", "unsupported Content-Encoding 'br'"),
    ],
)
def test_malformed_bodies_are_400_with_a_reason(
    broker: leveret.Broker, content_type: str, body: bytes, encoding: str | None, reason: str
) -> None:
    headers = {**GUEST, "Content-Type": content_type}
    if encoding:
        headers["Content-Encoding"] = encoding
    r = requests.post(endpoint(broker), data=body, headers=headers, timeout=30)
    assert r.status_code == 400
    if content_type == "application/json":
        assert r.json()["code"] == 3 and reason in r.json()["message"], r.text
    else:
        status = status_pb2.Status.FromString(r.content)
        assert status.code == 3 and reason in status.message


def test_an_unknown_content_type_is_415(broker: leveret.Broker) -> None:
    r = requests.post(
        endpoint(broker), data=b"hello", headers={**GUEST, "Content-Type": "text/plain"}, timeout=30
    )
    assert r.status_code == 415
    assert "application/x-protobuf" in r.text


@pytest.mark.parametrize(
    ("user", "password", "status", "reason"),
    [
        (None, None, 401, "credentials are required"),
        ("guest", "wrong", 401, "Login failed"),
        ("nobody", "pw", 401, "Not management user"),
        ("reader", "pw", 403, "ACCESS_REFUSED - access to exchange 'logs' in vhost '/' refused"),
    ],
)
def test_authentication_and_write_permission(
    broker: leveret.Broker, bound: Bound, user: str | None, password: str | None, status: int,
    reason: str,
) -> None:  # fmt: skip
    auth = (user, password) if user is not None and password is not None else None
    r = requests.post(
        endpoint(broker), json=otlp_json({"body": {"stringValue": "x"}}), auth=auth, timeout=30
    )
    assert r.status_code == status, r.text
    assert reason in r.json()["message"]
    if user is None or password == "wrong":
        assert r.headers["WWW-Authenticate"] == 'Basic realm="RabbitMQ Management"'
    assert r.headers["Content-Type"] == "application/json"
    bound.none_more()


def test_records_the_broker_refuses_are_a_partial_success(
    broker: leveret.Broker, bound: Bound
) -> None:
    """max_message_size is 4096 here: the big record is refused, the others go."""
    request = otlp_json(
        {"body": {"stringValue": "small"}},
        {"body": {"stringValue": "x" * 5000}},
        {"body": {"stringValue": "small too"}},
    )
    from google.protobuf import json_format
    from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest

    message = json_format.ParseDict(request, ExportLogsServiceRequest())
    r = requests.post(
        endpoint(broker),
        data=message.SerializeToString(),
        headers={**GUEST, "Content-Type": "application/x-protobuf"},
        timeout=30,
    )
    assert r.status_code == 200
    assert r.headers["Content-Type"] == "application/x-protobuf"
    answer = ExportLogsServiceResponse.FromString(r.content)
    assert answer.partial_success.rejected_log_records == 1
    assert "larger than configured max size 4096" in answer.partial_success.error_message
    assert [g.record["message"] for g in bound.take(2)] == ["small", "small too"]
    bound.none_more()


def test_counted_in_the_metrics(broker: leveret.Broker, bound: Bound) -> None:
    def count(what: str) -> float:
        text = urllib.request.urlopen(broker.metrics_url, timeout=30).read().decode()
        if "leveret_log_source" not in text:
            return 0.0  # not shown before OTLP's first request
        return metric(text, f"leveret_log_source_records_{what}_total", source="otlp")

    before = {w: count(w) for w in ("received", "published", "refused")}
    good = otlp_json({"body": {"stringValue": "a"}}, {"body": {"stringValue": "b"}})
    assert requests.post(endpoint(broker), json=good, headers=GUEST, timeout=30).ok
    bad = requests.post(
        endpoint(broker),
        data=b"{oops",
        headers={**GUEST, "Content-Type": "application/json"},
        timeout=30,
    )
    assert bad.status_code == 400
    bound.take(2)
    assert wait_for(lambda: count("published") == before["published"] + 2, 30)
    assert count("received") == before["received"] + 3
    assert count("refused") == before["refused"] + 1


def test_a_resource_alarm_answers_503_to_retry_later() -> None:
    with leveret.Broker(management=True, vm_memory_high_watermark="1MiB") as b:
        deadline = time.monotonic() + 60
        while True:
            r = requests.post(
                f"{b.management_url}/v1/logs",
                json=otlp_json({"body": {"stringValue": "x"}}),
                headers=GUEST,
                timeout=30,
            )
            if r.status_code == 503 or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert r.status_code == 503, r.text
        assert r.headers["Retry-After"] == "1"
        assert "resource alarm (memory)" in r.json()["message"]


def test_no_leveret_metrics_until_a_source_is_used() -> None:
    """/metrics has only rabbitmq_prometheus's names until OTLP gets a request."""
    with leveret.Broker(management=True) as b:
        before = urllib.request.urlopen(b.metrics_url, timeout=30).read().decode()
        assert "leveret_" not in before
        one = otlp_json({"body": {"stringValue": "x"}})
        requests.post(f"{b.management_url}/v1/logs", json=one, headers=GUEST, timeout=30)
        after = urllib.request.urlopen(b.metrics_url, timeout=30).read().decode()
        assert metric(after, "leveret_log_source_records_received_total", source="otlp") == 1
        assert 'source="syslog"' not in after


def test_off_when_configured_off() -> None:
    with leveret.Broker(management=True, otlp_logs=False) as b:
        r = requests.post(f"{b.management_url}/v1/logs", json={}, headers=GUEST, timeout=30)
        assert r.status_code in (404, 405)
