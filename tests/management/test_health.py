"""Leveret's side of RabbitMQ 3.10.8's health checks where the answer depends on the node
(tests/differential/test_management_health.py compares the rest with RabbitMQ): the
listener checks list Leveret's own listeners, as bound, in RabbitMQ's order; the
certificate check reads the TLS listeners' certificates; /api/healthchecks/node fails
with an alarm in effect, worded as rabbit_health_check's ``~p`` (checked against erl)."""

from __future__ import annotations

import base64
import datetime
import json
import shutil
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from cryptography import x509

import leveret
from leveret.management.health import alarm_reason, normalize_protocol
from tests.support.brokers import BrokerUnderTest, start_leveret
from tests.support.tlscerts import Pki, make_pki

GUEST = "Basic " + base64.b64encode(b"guest:guest").decode()


def get(url: str, context: ssl.SSLContext | None = None) -> tuple[int, bytes]:
    req = urllib.request.Request(url, headers={"Authorization": GUEST})
    try:
        with urllib.request.urlopen(req, context=context, timeout=30) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def tls_broker(tmp_path: Path, pki: Pki, ca: bool = True) -> BrokerUnderTest:
    flags = [*pki.listener_flags(), "--http-tls"]
    if ca:
        flags += ["--tls-ca", str(pki.ca)]
    return start_leveret(tmp_path / "data", extra=flags)


def test_the_listener_checks_list_leverets_listeners(tmp_path: Path) -> None:
    pki = make_pki(tmp_path / "pki")
    broker = tls_broker(tmp_path, pki)
    ctx = ssl.create_default_context(cafile=str(pki.ca))
    base = f"https://localhost:{broker.http_port}/api/health/checks"
    try:
        status, body = get(f"{base}/port-listener/1", ctx)
        assert status == 503
        # RabbitMQ's order: the plugins' listeners as they start, then AMQP's
        assert json.loads(body)["ports"] == [
            broker.http_port,
            broker.stream_port,
            broker.stream_tls_port,
            broker.prometheus_port,
            broker.port,
            broker.tls_port,
        ]
        assert 0 not in json.loads(body)["ports"]
        status, body = get(f"{base}/protocol-listener/clustering", ctx)
        assert status == 503
        assert json.loads(body) == {
            "status": "failed",
            "reason": "No active listener",
            "missing": "clustering",
            "protocols": [
                "https",
                "stream",
                "stream/ssl",
                "https/prometheus",
                "amqp",
                "amqp/ssl",
            ],
        }
        for asked, protocol in (("amqps", "amqp/ssl"), ("stream%2Fssl", "stream/ssl")):
            status, body = get(f"{base}/protocol-listener/{asked}", ctx)
            assert (status, json.loads(body)) == (200, {"status": "ok", "protocol": protocol})
        status, body = get(f"{base}/protocol-listener/http", ctx)
        assert status == 503  # the API is served over https only
        status, body = get(f"{base}/port-listener/{broker.tls_port}", ctx)
        assert (status, json.loads(body)) == (200, {"status": "ok", "port": broker.tls_port})
    finally:
        broker.stop()


def _expires(path: Path) -> str:
    cert = x509.load_pem_x509_certificate(path.read_bytes())
    when = cert.not_valid_after_utc
    return f"{when:%Y-%m-%d} {when.hour}:{when:%M:%S}"


def test_a_certificate_expiring_within_the_window_fails_the_check(tmp_path: Path) -> None:
    pki = make_pki(tmp_path / "pki", server_days=10)
    broker = tls_broker(tmp_path, pki)
    ctx = ssl.create_default_context(cafile=str(pki.ca))
    base = f"https://localhost:{broker.http_port}/api/health/checks/certificate-expiration"
    try:
        assert get(f"{base}/1/weeks", ctx) == (200, b'{"status":"ok"}')
        status, body = get(f"{base}/2/weeks", ctx)
        assert status == 503
        overview = json.loads(get(f"https://localhost:{broker.http_port}/api/overview", ctx)[1])

        def listener(protocol: str, port: int) -> dict[str, object]:
            return {
                "cacertfile": str(pki.ca),
                "cacertfile_expires_on": [],
                "certfile": str(pki.server_cert),
                "certfile_expires_on": [_expires(pki.server_cert)],
                "interface": "127.0.0.1",
                "node": overview["node"],
                "port": port,
                "protocol": protocol,
            }

        # the listeners with the certificate, the last first; the management listener's
        # files are under its ssl_opts, where RabbitMQ's check does not look
        assert json.loads(body) == {
            "status": "failed",
            "reason": "Certificates expiring",
            "expired": [
                listener("amqp/ssl", broker.tls_port),
                listener("https/prometheus", broker.prometheus_port),
                listener("stream/ssl", broker.stream_tls_port),
            ],
        }
        # the CA expires in ten years: its file is listed too within eleven
        status, body = get(f"{base}/11/years", ctx)
        assert status == 503
        assert len(json.loads(body)["expired"][0]["cacertfile_expires_on"]) == 1
        assert get(f"{base}/{10**30}/years", ctx)[0] == 503  # past the calendar's end
    finally:
        broker.stop()


def test_without_a_cacertfile_an_expiring_certificate_crashes_the_check(tmp_path: Path) -> None:
    """RabbitMQ's check prints each expiring listener's cacertfile; with none it crashes:
    an empty 500."""
    pki = make_pki(tmp_path / "pki", server_days=10)
    broker = tls_broker(tmp_path, pki, ca=False)
    ctx = ssl.create_default_context(cafile=str(pki.ca))
    base = f"https://localhost:{broker.http_port}/api/health/checks/certificate-expiration"
    try:
        assert get(f"{base}/1/days", ctx) == (200, b'{"status":"ok"}')
        assert get(f"{base}/1/months", ctx) == (500, b"")
    finally:
        broker.stop()


def test_healthchecks_node_fails_with_an_alarm_in_effect() -> None:
    with leveret.Broker(management=True, vm_memory_high_watermark="1MiB") as b:
        node = json.loads(get(f"{b.management_url}/api/overview")[1])["node"]
        deadline = time.monotonic() + 60
        while True:
            status, body = get(f"{b.management_url}/api/healthchecks/node")
            if status == 503 or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert status == 503, body
        assert json.loads(body) == {
            "status": "failed",
            "reason": alarm_reason(node, ["memory"]),
        }
        assert get(f"{b.management_url}/api/healthchecks/node/{node}")[0] == 503
        # the other checks do not look at alarms
        status, _ = get(f"{b.management_url}/api/health/checks/virtual-hosts")
        assert status == 200


@pytest.mark.skipif(shutil.which("erl") is None, reason="no Erlang here to compare with")
@pytest.mark.parametrize("length", [5, 20, 22, 23, 30, 60])
@pytest.mark.parametrize("resources", [["memory"], ["disk", "memory"], ["disk"]])
@pytest.mark.parametrize("quoted", [False, True])
def test_the_alarm_reason_is_erlangs(length: int, resources: list[str], quoted: bool) -> None:
    node = "rabbit@" + ("a-b" if quoted else "") + "h" * length
    terms = ",".join(f'{{resource_limit,{r},list_to_atom("{node}")}}' for r in resources)
    program = f'io:put_chars(io_lib:format("resource alarm(s) in effect:~p", [[{terms}]])), halt().'
    erl = subprocess.run(
        ["erl", "-noshell", "-eval", program], capture_output=True, text=True, timeout=60
    )
    assert erl.returncode == 0, erl.stderr
    assert alarm_reason(node, resources) == erl.stdout


def test_protocol_names_as_rabbitmq_reads_them() -> None:
    assert normalize_protocol("AMQP0.9.1") == "amqp"
    assert normalize_protocol("amqp1_0") == "amqp"
    assert normalize_protocol("Distribution") == "clustering"
    assert normalize_protocol("web-stomp/ssl") == "https/web-stomp"
    assert normalize_protocol("Stream/SSL") == "stream/ssl"


def test_the_date_is_erlangs() -> None:
    from leveret.management.health import _date

    assert _date(datetime.datetime(2026, 3, 4, 5, 6, 7)) == "2026-03-04 5:06:07"
