"""leveret.Broker and leveret.serve: the whole broker in the test process, reached by real
clients over real sockets."""

from __future__ import annotations

import asyncio
import base64
import json
import socket
import threading
import urllib.request
from pathlib import Path

import aio_pika
import pika
import pika.exceptions
import pytest

import leveret
from leveret.server.config import ConfigError


def connect(url: str) -> pika.BlockingConnection:
    return pika.BlockingConnection(pika.URLParameters(url))


def broker_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "leveret-broker"]


def test_with_block_starts_and_stops_it_on_a_free_port() -> None:
    with leveret.Broker() as b:
        assert b.running
        assert b.port > 0 and b.host == "127.0.0.1"
        assert b.url == f"amqp://guest:guest@127.0.0.1:{b.port}/%2F"
        conn = connect(b.url)
        ch = conn.channel()
        ch.queue_declare("q")
        ch.basic_publish("", "q", b"hello")
        method, _, body = ch.basic_get("q", auto_ack=True)
        assert method is not None and body == b"hello"
        assert broker_threads()
        port = b.port
    assert not b.running
    assert not broker_threads()
    with pytest.raises(pika.exceptions.ConnectionClosedByBroker, match="320"):
        conn.process_data_events(1)  # as a RabbitMQ shutting down
    with pytest.raises(OSError), socket.create_connection(("127.0.0.1", port), timeout=2):
        pass
    b.stop()  # stopping a stopped broker does nothing


def test_start_twice_refused_and_a_stopped_broker_starts_again() -> None:
    b = leveret.Broker().start()
    try:
        with pytest.raises(RuntimeError, match="already running"):
            b.start()
    finally:
        b.stop()
    with pytest.raises(RuntimeError, match="not running"):
        _ = b.url
    b.start()
    try:
        connect(b.url).close()
    finally:
        b.stop()


def test_a_port_in_use_is_raised_by_start_and_leaves_no_thread() -> None:
    with leveret.Broker() as first:
        second = leveret.Broker(first.port)
        with pytest.raises(OSError):
            second.start()
        assert not second.running
        assert len(broker_threads()) == 1


def test_in_memory_unless_a_data_dir_is_given(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    with leveret.Broker() as b:
        ch = connect(b.url).channel()
        ch.queue_declare("durable", durable=True)
        ch.basic_publish("", "durable", b"m", pika.BasicProperties(delivery_mode=2))
    assert list(tmp_path.iterdir()) == []
    with leveret.Broker() as b:
        ch = connect(b.url).channel()
        with pytest.raises(pika.exceptions.ChannelClosedByBroker, match="404"):
            ch.queue_declare("durable", passive=True)


def test_a_data_dir_keeps_durable_queues_and_persistent_messages(tmp_path: Path) -> None:
    with leveret.Broker(data_dir=tmp_path) as b:
        conn = connect(b.url)
        ch = conn.channel()
        ch.confirm_delivery()
        ch.queue_declare("kept", durable=True)
        ch.basic_publish("", "kept", b"persistent", pika.BasicProperties(delivery_mode=2))
        conn.close()
    with leveret.Broker(data_dir=tmp_path) as b:
        ch = connect(b.url).channel()
        method, _, body = ch.basic_get("kept", auto_ack=True)
        assert method is not None and body == b"persistent"


def test_reset_deletes_everything_but_what_it_started_with(tmp_path: Path) -> None:
    config = tmp_path / "leveret.toml"
    # As `leveret server --config`: a config that names vhosts makes no default user.
    config.write_text(
        """
[[vhosts]]
name = "/"
[[vhosts]]
name = "shop"
[[users]]
name = "alice"
password = "secret"
[[users]]
name = "guest"
password = "guest"
tags = ["administrator"]
[[permissions]]
user = "alice"
vhost = "shop"
[[permissions]]
user = "guest"
vhost = "/"
"""
    )
    with leveret.Broker(config=config) as b:
        assert b.vhosts() == ["/", "shop"]
        assert b.users() == ["alice", "guest"]
        conn = connect(b.url)
        ch = conn.channel()
        ch.exchange_declare("x", "fanout")
        ch.queue_declare("q")
        ch.queue_bind("q", "x")
        ch.basic_publish("x", "", b"m")
        b.add_vhost("extra")
        b.add_user("bob", "pw")
        b.set_permissions("guest", "shop")
        b.reset()
        # open connections are closed, as a vhost deletion closes them
        with pytest.raises(pika.exceptions.ConnectionClosedByBroker, match="320"):
            conn.process_data_events(2)
        assert b.vhosts() == ["/", "shop"]
        assert b.users() == ["alice", "guest"]
        conn = connect(b.url)
        with pytest.raises(pika.exceptions.ChannelClosedByBroker, match="404"):
            conn.channel().queue_declare("q", passive=True)
        with pytest.raises(pika.exceptions.ChannelClosedByBroker, match="404"):
            conn.channel().exchange_declare("x", passive=True)
        ch = conn.channel()
        ch.exchange_declare("amq.topic", "topic", passive=True)  # the built-ins are back
        # guest's permission in shop was not there at start: gone
        with pytest.raises(pika.exceptions.ProbableAccessDeniedError):
            connect(b.vhost_url("shop"))
        connect(b.vhost_url("shop", "alice", "secret")).close()


def test_reset_with_a_data_dir_drops_stored_messages_and_still_persists(tmp_path: Path) -> None:
    with leveret.Broker(data_dir=tmp_path) as b:
        ch = connect(b.url).channel()
        ch.confirm_delivery()
        ch.queue_declare("old", durable=True)
        ch.basic_publish("", "old", b"before", pika.BasicProperties(delivery_mode=2))
        b.reset()
        ch = connect(b.url).channel()
        ch.confirm_delivery()
        ch.queue_declare("new", durable=True)
        ch.basic_publish("", "new", b"after", pika.BasicProperties(delivery_mode=2))
    with leveret.Broker(data_dir=tmp_path) as b:
        ch = connect(b.url).channel()
        with pytest.raises(pika.exceptions.ChannelClosedByBroker, match="404"):
            ch.queue_declare("old", passive=True)
        ch = ch.connection.channel()
        method, _, body = ch.basic_get("new", auto_ack=True)
        assert method is not None and body == b"after"


def test_users_vhosts_and_permissions_from_python() -> None:
    with leveret.Broker() as b:
        b.add_vhost("orders")
        with pytest.raises(pika.exceptions.ProbableAccessDeniedError):
            connect(b.vhost_url("orders"))  # like rabbitmqctl add_vhost: no permissions yet
        b.set_permissions("guest", "orders")
        connect(b.vhost_url("orders")).close()
        b.add_user("carol", "pw", ["management"])
        b.set_permissions("carol", "orders", configure="^$", write=".*", read=".*")
        ch = connect(b.vhost_url("orders", "carol", "pw")).channel()
        with pytest.raises(pika.exceptions.ChannelClosedByBroker, match="403"):
            ch.queue_declare("mine")
        assert b.clear_permissions("carol", "orders")
        assert not b.clear_permissions("carol", "orders")
        with pytest.raises(pika.exceptions.ProbableAccessDeniedError):
            connect(b.vhost_url("orders", "carol", "pw"))
        with pytest.raises(ValueError, match="no user 'nobody'"):
            b.set_permissions("nobody", "orders")
        with pytest.raises(ValueError, match="no vhost 'nowhere'"):
            b.set_permissions("carol", "nowhere")
        with pytest.raises(ValueError, match="invalid regular expression"):
            b.set_permissions("carol", "orders", configure="(")
        assert b.delete_user("carol") and not b.delete_user("carol")
        assert b.delete_vhost("orders") and not b.delete_vhost("orders")
        assert b.vhosts() == ["/"]


def test_server_settings_as_keyword_arguments() -> None:
    users = [{"name": "dave", "password": "pw", "tags": ["administrator"]}]
    with leveret.Broker(heartbeat=7, default_user=False, users=users) as b:
        assert b.url == f"amqp://127.0.0.1:{b.port}/%2F"
        with pytest.raises(pika.exceptions.ProbableAuthenticationError):
            connect(f"amqp://guest:guest@127.0.0.1:{b.port}/%2F")
        b.set_permissions("dave", "/")
        params = pika.URLParameters(b.vhost_url("/", "dave", "pw"))
        conn = pika.BlockingConnection(params)
        assert conn._impl.params.heartbeat == 7  # negotiated down to the server's
        conn.close()
    with pytest.raises(ConfigError, match="unknown setting 'nonsense'"):
        leveret.Broker(nonsense=1)
    with pytest.raises(TypeError, match="port="):
        leveret.Broker(amqp_port=5672)


# Runs under this suite's filterwarnings=error, as many users' suites do: a warning in the
# broker's thread (aiohttp's NotAppKeyWarning for a str request key, once) would turn every
# management request into a 500.
def test_management_api_when_asked_for() -> None:
    with leveret.Broker() as b, pytest.raises(RuntimeError, match="management=True"):
        _ = b.management_url
    with leveret.Broker(management=True) as b:
        auth = base64.b64encode(b"guest:guest").decode()
        req = urllib.request.Request(
            f"{b.management_url}/api/vhosts", headers={"Authorization": f"Basic {auth}"}
        )
        with urllib.request.urlopen(req, timeout=10) as resp:
            assert [v["name"] for v in json.load(resp)] == ["/"]
        with urllib.request.urlopen(b.metrics_url, timeout=10) as resp:
            assert b"rabbitmq_" in resp.read()


def test_serve_runs_on_the_callers_loop() -> None:
    async def main() -> bytes:
        async with leveret.serve() as b:
            assert not broker_threads()
            b.add_vhost("async")  # from the loop's own thread
            b.set_permissions("guest", "async")
            conn = await aio_pika.connect(b.vhost_url("async"))
            async with conn:
                ch = await conn.channel()
                q = await ch.declare_queue("x")
                await ch.default_exchange.publish(aio_pika.Message(b"from asyncio"), "x")
                message = await q.get(timeout=5)
                # and from another thread, while the loop runs
                names = await asyncio.get_running_loop().run_in_executor(None, b.vhosts)
                assert names == ["/", "async"]
                return message.body

    assert asyncio.run(main()) == b"from asyncio"


def test_the_stream_protocol_on_a_free_port(tmp_path: Path) -> None:
    from leveret.protocol.stream import events as ev
    from tests.support.streamclient import RawStreamClient

    with leveret.Broker(data_dir=tmp_path) as broker, leveret.Broker() as other:
        assert broker.stream_port and other.stream_port
        assert broker.stream_port != other.stream_port
        c = RawStreamClient(broker.host, broker.stream_port)
        try:
            assert c.handshake() == 1
            assert c.request(ev.Create(c.next_id(), "events", {}), 0x0D)[0] == 1
        finally:
            c.close()
