"""HTTPS for the dashboard has its own peer verification, as RabbitMQ's management.ssl.*:
an AMQP listener that demands client certificates (--tls-verify-peer
--tls-fail-if-no-peer-cert) does not make the dashboard demand one from a browser;
[management_tls] asks for client certificates only when it says so."""

from __future__ import annotations

import base64
import json
import socket
import ssl
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.support.brokers import BrokerUnderTest, start_leveret
from tests.support.tlscerts import Pki, make_pki


def _overview(broker: BrokerUnderTest, pki: Pki, client: str | None = None) -> dict[str, object]:
    ctx = ssl.create_default_context(cafile=str(pki.ca))
    if client is not None:
        ctx.load_cert_chain(*map(str, pki.client(client)))
    req = urllib.request.Request(f"https://localhost:{broker.http_port}/api/overview")
    req.add_header("Authorization", "Basic " + base64.b64encode(b"guest:guest").decode())
    with urllib.request.urlopen(req, context=ctx, timeout=30) as resp:
        return json.loads(resp.read())  # type: ignore[no-any-return]


def _tls_flags(pki: Pki) -> list[str]:
    return [*pki.listener_flags(verify_peer=True), "--tls-fail-if-no-peer-cert", "--http-tls"]


def test_amqp_peer_verification_does_not_reach_the_dashboard(tmp_path: Path) -> None:
    pki = make_pki(tmp_path / "pki")
    broker = start_leveret(tmp_path / "data", extra=_tls_flags(pki))
    try:
        assert broker.https
        assert "node" in _overview(broker, pki)  # a browser without a client certificate
        # the AMQP listener still refuses a client without one: no connection.start
        ctx = ssl.create_default_context(cafile=str(pki.ca))
        try:
            with (
                socket.create_connection(("127.0.0.1", broker.tls_port), timeout=10) as sock,
                ctx.wrap_socket(sock, server_hostname="localhost") as tls,
            ):
                tls.sendall(b"AMQP\x00\x00\x09\x01")
                answer = tls.recv(1024)  # TLS 1.3: the refusal comes with the first read
        except (ssl.SSLError, OSError):
            answer = b""
        assert answer == b""
    finally:
        broker.stop()


def test_management_tls_asks_for_client_certificates_only_when_it_says_so(
    tmp_path: Path,
) -> None:
    pki = make_pki(tmp_path / "pki", clients=("alice",))
    config = tmp_path / "leveret.toml"
    config.write_text('[management_tls]\nverify = "verify_peer"\nfail_if_no_peer_cert = true\n')
    broker = start_leveret(tmp_path / "data", extra=[*_tls_flags(pki), "--config", str(config)])
    try:
        with pytest.raises((urllib.error.URLError, ssl.SSLError, ConnectionError)):
            _overview(broker, pki)
        assert "node" in _overview(broker, pki, client="alice")
    finally:
        broker.stop()
