"""The stream protocol over TLS: a listener of its own once a certificate is set, and SASL
EXTERNAL (the client certificate's name) where it verifies peers, as amqps does."""

from __future__ import annotations

import ssl
import tempfile
from pathlib import Path

from tests.support.brokers import start_leveret
from tests.support.streamclient import RawStreamClient
from tests.support.tlscerts import make_pki


def test_stream_over_tls_with_external() -> None:
    root = Path(tempfile.mkdtemp(prefix="leveret-stream-tls-"))
    pki = make_pki(root / "pki", clients=("guest", "nobody"))
    broker = start_leveret(
        root / "data",
        extra=[
            "--tls-cert", str(pki.server_cert),
            "--tls-key", str(pki.server_key),
            "--tls-ca", str(pki.ca),
            "--tls-verify-peer",
            "--amqps-port", "0",
        ],
        env={"LEVERET_AUTH_MECHANISMS": "PLAIN,AMQPLAIN,EXTERNAL"},
    )  # fmt: skip
    try:
        assert broker.stream_tls_port

        def context(client: str) -> ssl.SSLContext:
            ctx = ssl.create_default_context(cafile=str(pki.ca))
            ctx.load_cert_chain(*map(str, pki.client(client)))
            return ctx

        c = RawStreamClient("127.0.0.1", broker.stream_tls_port, context=context("guest"))
        try:
            assert c.handshake(mechanism="EXTERNAL") == 1
            assert c.mechanisms == ["AMQPLAIN", "EXTERNAL", "PLAIN"]
        finally:
            c.close()
        c = RawStreamClient("127.0.0.1", broker.stream_tls_port, context=context("nobody"))
        try:
            assert c.handshake(mechanism="EXTERNAL") == 8  # no such user
        finally:
            c.close()
        # the plain listener does not offer EXTERNAL
        c = RawStreamClient("127.0.0.1", broker.stream_port)
        try:
            assert c.handshake(mechanism="EXTERNAL") == 7
            assert "EXTERNAL" not in c.mechanisms
        finally:
            c.close()
    finally:
        broker.stop()
