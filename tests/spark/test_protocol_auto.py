"""``protocol=auto`` (the default): the driver reads over RabbitMQ's stream protocol when a
node's stream port answers, belongs to the same broker and holds the stream, else over AMQP
0-9-1; and the stream-protocol reader over TLS (``amqps://``: port 5551 by default, the same
``ssl_options`` as the AMQP 0-9-1 reader)."""

from __future__ import annotations

import tempfile
import uuid
from pathlib import Path
from urllib.parse import quote

import pytest

from leveret.spark.chunkreader import read_chunk_range
from leveret.spark.client import AmqpSourceError
from leveret.spark.options import ReadOptions
from leveret.spark.stream import choose_protocol
from leveret.spark.streamclient import Target
from tests.spark.conftest import declare_stream, delete_queue, emit_records, stream_port
from tests.support.brokers import BrokerUnderTest, start_leveret
from tests.support.ports import free_port
from tests.support.tlscerts import make_pki


def _auto(url: str, stream: str, port: int | None) -> tuple[str, str | None]:
    options = {"url": url, "stream": stream, "protocol": "auto"}
    if port is not None:
        options["streamPort"] = str(port)
    opts, client = choose_protocol(ReadOptions.parse(options))
    host = None
    if client is not None:
        host = f"{client.host}:{client.target.port}"
        client.close()
    return opts.protocol, host


def test_auto_is_the_default() -> None:
    opts = ReadOptions.parse({"stream": "logs"})
    assert (opts.protocol, opts.stream_port) == ("auto", None)
    assert Target.of("amqp://guest:guest@h/").port == 5552
    assert Target.of("amqps://guest:guest@h/").port == 5551
    assert Target.of("amqps://guest:guest@h/", 7000).port == 7000


def test_auto_reads_over_the_stream_port_that_holds_the_stream(
    broker: BrokerUnderTest, stream: str
) -> None:
    port = stream_port(broker)
    assert _auto(broker.url, stream, port) == ("stream", f"127.0.0.1:{port}")


def test_auto_falls_back_when_the_stream_port_does_not_hold_the_stream(
    broker: BrokerUnderTest,
) -> None:
    assert _auto(broker.url, f"no-such-{uuid.uuid4().hex[:8]}", stream_port(broker))[0] == "amqp"


def test_auto_falls_back_when_nothing_answers_on_the_stream_port(
    broker: BrokerUnderTest, stream: str
) -> None:
    assert _auto(broker.url, stream, free_port()) == ("amqp", None)


def test_auto_ignores_another_brokers_stream_port_even_with_a_stream_of_that_name(
    rabbitmq: BrokerUnderTest,
) -> None:
    """A Leveret's AMQP port with RabbitMQ's stream port: both hold a stream of that name,
    but the stream port is another cluster's (told apart by the cluster name both
    protocols announce)."""
    leveret = start_leveret(env={"LEVERET_NODE_NAME": f"leveret-{uuid.uuid4().hex[:6]}@vm"})
    name = f"spark-auto-{uuid.uuid4().hex[:8]}"
    rabbit_port = stream_port(rabbitmq)
    try:
        declare_stream(leveret, name)
        declare_stream(rabbitmq, name)
        assert _auto(leveret.url, name, rabbit_port) == ("amqp", None)
        assert _auto(rabbitmq.url, name, rabbit_port)[0] == "stream"
        assert _auto(leveret.url, name, leveret.stream_port)[0] == "stream"
    finally:
        delete_queue(rabbitmq, name)
        leveret.stop()


def test_auto_tries_the_next_node_of_a_url_list(leveret: BrokerUnderTest) -> None:
    """Several URLs (one cluster's nodes): a node whose stream port is shut is passed over."""
    stream = f"spark-auto-{uuid.uuid4().hex[:8]}"
    declare_stream(leveret, stream)
    dead = f"amqp://guest:guest@127.0.0.2:{free_port()}/"
    url = f"{dead},{leveret.url}"
    assert _auto(url, stream, leveret.stream_port) == ("stream", f"127.0.0.1:{leveret.stream_port}")
    emit_records(leveret.url, stream, range(50))
    batches = list(read_chunk_range(url, stream, 0, 50, stream_port=leveret.stream_port,
                                    records=True))  # fmt: skip
    assert sorted(int(m) for b in batches for m in b.column("message_id").to_pylist()) == list(
        range(50)
    )


def test_the_stream_reader_speaks_tls() -> None:
    root = Path(tempfile.mkdtemp(prefix="leveret-spark-tls-"))
    pki = make_pki(root / "pki", clients=("guest",))
    broker = start_leveret(
        root / "data",
        extra=["--tls-cert", str(pki.server_cert), "--tls-key", str(pki.server_key),
               "--tls-ca", str(pki.ca), "--amqps-port", "0"],
    )  # fmt: skip
    try:
        assert broker.stream_tls_port and broker.tls_port
        name = f"spark-tls-{uuid.uuid4().hex[:8]}"
        declare_stream(broker, name)
        emit_records(broker.url, name, range(300))
        ssl_options = quote(repr({"ca_certs": str(pki.ca), "server_hostname": "localhost"}))
        url = f"amqps://guest:guest@127.0.0.1:{broker.tls_port}/?ssl_options={ssl_options}"
        assert _auto(url, name, broker.stream_tls_port)[0] == "stream"
        rows = [
            r
            for b in read_chunk_range(
                url, name, 0, 300, stream_port=broker.stream_tls_port, records=True
            )
            for r in b.to_pylist()
        ]
        assert sorted(int(r["message_id"]) for r in rows) == list(range(300))
        # the plain port does not speak TLS, and a server that is not verified is refused
        with pytest.raises(AmqpSourceError):
            list(read_chunk_range(url, name, 0, 300, stream_port=broker.stream_port,
                                  stall_timeout=1.0))  # fmt: skip
        other = make_pki(root / "other")
        untrusted = quote(repr({"ca_certs": str(other.ca), "server_hostname": "localhost"}))
        bad = f"amqps://guest:guest@127.0.0.1:{broker.tls_port}/?ssl_options={untrusted}"
        with pytest.raises(AmqpSourceError, match="TLS with the stream port"):
            list(read_chunk_range(bad, name, 0, 300, stream_port=broker.stream_tls_port))
    finally:
        broker.stop()
