"""The server process: start-up line, shutdown, persistence across restarts, users from
the config file, and guest's loopback rule."""

from __future__ import annotations

import signal
import socket
import threading
from pathlib import Path

import pika
import pytest

from tests.support.brokers import BrokerUnderTest, ensure_rabbitmq, start_leveret
from tests.support.cli import run_cli


def _non_loopback_address() -> str | None:
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect(("192.0.2.1", 9))  # no packet is sent for a UDP connect
            addr = s.getsockname()[0]
    except OSError:
        return None
    return None if addr.startswith("127.") else addr


def test_sigterm_sends_connection_forced(tmp_path: Path) -> None:
    broker = start_leveret(tmp_path)
    conn = pika.BlockingConnection(broker.pika_params())
    conn.channel()
    closed: list[tuple[int, str]] = []

    def wait() -> None:
        try:
            conn.process_data_events(10)
            conn.sleep(5)
        except pika.exceptions.ConnectionClosedByBroker as exc:
            closed.append((exc.reply_code, exc.reply_text))

    t = threading.Thread(target=wait)
    t.start()
    code = broker.stop(signal.SIGTERM)
    t.join(10)
    assert code == 0
    assert closed == [
        (320, "CONNECTION_FORCED - broker forced connection closure with reason 'shutdown'")
    ]


def test_durable_state_survives_restart(tmp_path: Path) -> None:
    broker = start_leveret(tmp_path)
    conn = pika.BlockingConnection(broker.pika_params())
    ch = conn.channel()
    ch.confirm_delivery()
    ch.exchange_declare("events", "topic", durable=True)
    ch.queue_declare("keep", durable=True, arguments={"x-max-length": 100})
    ch.queue_declare("transient")
    ch.queue_bind("keep", "events", routing_key="a.#")
    for i in range(5):
        ch.basic_publish("events", "a.b", f"p{i}".encode(), pika.BasicProperties(delivery_mode=2))
    ch.basic_publish("events", "a.b", b"not persistent")
    method, _, _ = ch.basic_get("keep")
    ch.basic_ack(method.delivery_tag)  # p0 is gone for good
    conn.close()
    broker.stop()

    again = start_leveret(tmp_path)
    conn = pika.BlockingConnection(again.pika_params())
    ch = conn.channel()
    ch.exchange_declare("events", "topic", passive=True)
    ok = ch.queue_declare("keep", durable=True, arguments={"x-max-length": 100}).method
    assert ok.message_count == 4
    bodies = []
    for _ in range(4):
        m, p, body = ch.basic_get("keep", auto_ack=True)
        bodies.append(body)
        assert m.redelivered and p.delivery_mode == 2
    assert bodies == [b"p1", b"p2", b"p3", b"p4"]
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        ch.queue_declare("transient", passive=True)
    assert info.value.reply_code == 404
    ch = conn.channel()
    ch.basic_publish("events", "a.c", b"routed after restart")
    assert ch.basic_get("keep", auto_ack=True)[2] == b"routed after restart"
    conn.close()
    again.stop()


def test_users_from_config_file(tmp_path: Path) -> None:
    config = tmp_path / "leveret.toml"
    config.write_text("""
[[vhosts]]
name = "/"

[[vhosts]]
name = "logs"

[[users]]
name = "alice"
password = "wonderland"
tags = ["management"]

[[permissions]]
user = "alice"
vhost = "logs"
configure = "^alice-.*"
write = ".*"
read = ".*"
""")
    broker = start_leveret(tmp_path / "data", extra=["--config", str(config)])
    try:
        creds = pika.PlainCredentials("alice", "wonderland")
        conn = pika.BlockingConnection(
            pika.ConnectionParameters(
                broker.host, broker.port, virtual_host="logs", credentials=creds
            )
        )
        ch = conn.channel()
        ch.queue_declare("alice-q", exclusive=True)
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
            ch.queue_declare("bob-q", exclusive=True)
        assert (info.value.reply_code, info.value.reply_text) == (
            403,
            "ACCESS_REFUSED - access to queue 'bob-q' in vhost 'logs' refused for user 'alice'",
        )
        conn.close()
        with pytest.raises(pika.exceptions.ProbableAccessDeniedError) as cinfo:
            pika.BlockingConnection(
                pika.ConnectionParameters(
                    broker.host, broker.port, virtual_host="/", credentials=creds
                )
            )
        assert "(530) \"NOT_ALLOWED - access to vhost '/' refused for user 'alice'\"" in str(
            cinfo.value
        )
    finally:
        broker.stop()


@pytest.mark.parametrize("which", ["leveret", "rabbitmq"])
def test_guest_only_from_loopback(tmp_path: Path, which: str) -> None:
    address = _non_loopback_address()
    if address is None:
        pytest.skip("this machine has no non-loopback IPv4 address")
    if which == "leveret":
        broker = start_leveret(tmp_path, extra=["--bind", "0.0.0.0"])
    else:
        found = ensure_rabbitmq()
        if found is None:
            pytest.skip("RabbitMQ is not installed here")
        broker = found
    try:
        with pytest.raises(pika.exceptions.ProbableAuthenticationError):
            pika.BlockingConnection(pika.ConnectionParameters(address, broker.port))
        pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", broker.port)).close()
    finally:
        if which == "leveret":
            broker.stop()


def test_bad_config_is_one_line(tmp_path: Path) -> None:
    result = run_cli("server", "--config", str(tmp_path / "missing.toml"), timeout=30)
    assert result.returncode != 0
    assert result.stderr.strip().splitlines() == [
        f"Error: config file not found: {tmp_path / 'missing.toml'}"
    ]


def test_port_in_use_is_one_line(leveret: BrokerUnderTest) -> None:
    result = run_cli("server", "--bind", "127.0.0.1", "--amqp-port", str(leveret.port), timeout=30)
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: cannot listen on")


def test_silent_peer_is_dropped(leveret: BrokerUnderTest) -> None:
    from tests.support.rawclient import RawClient

    with RawClient(leveret.host, leveret.port, timeout=10) as c:
        c.handshake(heartbeat=1)
        frames = []
        while (got := c.recv_frame()) is not None:
            frames.append(got[1].__class__.__name__)
        # heartbeats came, then, with none sent back, the socket was closed
        assert frames and set(frames) == {"Heartbeat"}


def test_congested_consumer_holds_back_its_publisher(leveret: BrokerUnderTest, name: str) -> None:
    """Credit flow: a consumer that does not read its socket stops the publisher feeding
    it, so the queue does not grow without bound."""
    from pamqp import body as pbody
    from pamqp import commands, frame, header

    from tests.support.rawclient import RawClient

    consumer = RawClient(leveret.host, leveret.port)
    consumer.handshake()
    consumer.open_channel()
    consumer.send_method(1, commands.Queue.Declare(queue=name, auto_delete=True))
    consumer.expect(commands.Queue.DeclareOk)
    consumer.send_method(1, commands.Basic.Consume(queue=name, no_ack=True))
    consumer.expect(commands.Basic.ConsumeOk)
    # the consumer now never reads again

    body = b"x" * 4096
    one = (
        frame.marshal(commands.Basic.Publish(exchange="", routing_key=name), 1)
        + frame.marshal(header.ContentHeader(body_size=len(body)), 1)
        + frame.marshal(pbody.ContentBody(body), 1)
    )
    batch = one * 64
    publisher = RawClient(leveret.host, leveret.port, timeout=30)
    publisher.handshake()
    publisher.open_channel()
    sent = 0
    stop = threading.Event()

    def publish() -> None:
        nonlocal sent
        try:
            while not stop.is_set() and sent < 100_000:
                publisher.send(batch)
                sent += 64
        except OSError:
            pass

    t = threading.Thread(target=publish, daemon=True)
    t.start()
    observer = pika.BlockingConnection(leveret.pika_params())
    obs = observer.channel()
    t.join(3)
    sent_then = sent
    count_then = obs.queue_declare(name, passive=True).method.message_count
    t.join(2)
    held = t.is_alive() and sent == sent_then  # stuck in a blocked send
    count = obs.queue_declare(name, passive=True).method.message_count
    stop.set()
    consumer.close()  # releases the publisher: its consumer and queue are gone
    t.join(10)
    publisher.close()
    observer.close()
    assert held and sent < 100_000
    # the queue stopped growing: what sits there is bounded by socket buffers
    assert count == count_then
    assert count * len(body) < 64 * 1024 * 1024


def test_stream_survives_restart_and_reports_its_end(tmp_path: Path) -> None:
    broker = start_leveret(tmp_path)
    conn = pika.BlockingConnection(broker.pika_params())
    ch = conn.channel()
    ch.queue_declare("logs-stream", durable=True, arguments={"x-queue-type": "stream"})
    ch.confirm_delivery()
    for i in range(50):
        ch.basic_publish("", "logs-stream", f"r{i}".encode())
    # Leveret's extension: a passive declare asking for x-stream-offsets gets the
    # committed end offset as message_count (RabbitMQ answers 0 for a stream)
    ok = ch.queue_declare("logs-stream", passive=True, arguments={"x-stream-offsets": True})
    assert ok.method.message_count == 50
    assert ch.queue_declare("logs-stream", passive=True).method.message_count == 0
    conn.close()
    broker.stop()

    again = start_leveret(tmp_path)
    conn = pika.BlockingConnection(again.pika_params())
    ch = conn.channel()
    ch.basic_qos(prefetch_count=100)
    got: list[tuple[int, bytes]] = []
    ch.basic_consume(
        "logs-stream",
        lambda c, m, p, b: (
            got.append((p.headers["x-stream-offset"], b)),
            c.basic_ack(m.delivery_tag),
        ),
        arguments={"x-stream-offset": 40},
    )
    deadline = 50
    while len(got) < 10 and deadline:
        conn.process_data_events(0.1)
        deadline -= 1
    assert got == [(i, f"r{i}".encode()) for i in range(40, 50)]
    ch.confirm_delivery()
    ch.basic_publish("", "logs-stream", b"after restart")
    while len(got) < 11 and deadline:
        conn.process_data_events(0.1)
        deadline -= 1
    assert got[-1] == (50, b"after restart")
    conn.close()
    again.stop()
