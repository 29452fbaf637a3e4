"""Every way a connection ends: the client reads everything the broker sent (close-ok,
connection.close), on Leveret as on RabbitMQ 3.10.8, and Leveret then ends the TCP
connection with end-of-file, never a reset.

A reset destroys what the peer has not read yet: the kernel sends RST when a socket is
closed with unread input in it, or always when SO_LINGER is {on, 0}. RabbitMQ 3.10.8 sets
exactly that on its AMQP sockets (``tcp_listen_options`` default ``{linger, {true, 0}}``),
and avoids losing frames by timing: it closes only once the client has ended its side
(EOF), or after the client's close-ok. A client that keeps reading after it half-closed
therefore sees RST from RabbitMQ after the frames; that is RabbitMQ's, and this test allows
it there. Leveret closes with FIN in every case, and only after it has read all the input
that came before (so never under unread input): the reading ends in EOF.

Each ending runs in a loop on both brokers, over a raw socket, so that what the client
reads is exactly what the broker sent."""

from __future__ import annotations

import socket
import struct
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field

import pika
import pytest
from pamqp import commands, frame
from pamqp.body import ContentBody
from pamqp.header import ContentHeader

from tests.support.brokers import BrokerUnderTest, start_leveret
from tests.support.mgmt import Api
from tests.support.rawclient import RawClient

pytestmark = pytest.mark.rabbitmq

LOOPS = 5


@dataclass
class Reading:
    """What a client read until the broker's end: frames, then how the stream ended."""

    frames: list[str] = field(default_factory=list)
    ending: str = ""  # "eof", "reset" or "timeout"


def read_to_end(c: RawClient, timeout: float = 40.0) -> Reading:
    out = Reading()
    c.sock.settimeout(timeout)
    while True:
        while len(c.buf) >= 7:
            (size,) = struct.unpack(">I", c.buf[3:7])
            if len(c.buf) < size + 8:
                break
            used, _, value = frame.unmarshal(c.buf)
            c.buf = c.buf[used:]
            name = type(value).__name__
            if name != "Heartbeat":
                out.frames.append(name)
        try:
            chunk = c.sock.recv(65536)
        except ConnectionResetError:
            out.ending = "reset"
            return out
        except TimeoutError:
            out.ending = "timeout"
            return out
        if not chunk:
            out.ending = "eof"
            return out
        c.buf += chunk


def m(method: object, channel: int = 0) -> bytes:
    return bytes(frame.marshal(method, channel))


CLOSE = m(commands.Connection.Close(reply_code=200, reply_text="bye", class_id=0, method_id=0))
CLOSE_OK = m(commands.Connection.CloseOk())
HEARTBEAT = b"\x08\x00\x00\x00\x00\x00\x00\xce"


def publishes(n: int, channel: int = 1) -> bytes:
    one = m(commands.Basic.Publish(exchange="amq.fanout", routing_key=""), channel)
    one += m(ContentHeader(body_size=3, properties=commands.Basic.Properties()), channel)
    one += m(ContentBody(b"abc"), channel)
    return one * n


def opened(broker: BrokerUnderTest, heartbeat: int = 0, name: str = "") -> RawClient:
    c = RawClient(broker.host, broker.port, timeout=10)
    props = {"product": "rawclient", "capabilities": {"authentication_failure_close": True}}
    if name:
        props["connection_name"] = name
    c.send(b"AMQP\x00\x00\x09\x01")
    c.expect(commands.Connection.Start)
    c.send_method(
        0,
        commands.Connection.StartOk(
            client_properties=props, mechanism="PLAIN", response="\0guest\0guest", locale="en_US"
        ),
    )
    tune = c.expect(commands.Connection.Tune)
    c.send_method(
        0,
        commands.Connection.TuneOk(
            channel_max=tune.channel_max, frame_max=tune.frame_max, heartbeat=heartbeat
        ),
    )
    c.send_method(0, commands.Connection.Open(virtual_host="/"))
    c.expect(commands.Connection.OpenOk)
    c.open_channel(1)
    return c


# ----------------------------------------------------------- client-initiated
def client_close(broker: BrokerUnderTest) -> Reading:
    """connection.close, then the client closes its side once it has close-ok."""
    with opened(broker) as c:
        c.send(CLOSE)
        c.expect(commands.Connection.CloseOk)
        c.sock.shutdown(socket.SHUT_WR)
        return read_to_end(c)


def read_then_half_close(c: RawClient) -> Reading:
    """What comes in 2 s, then the client ends its side of the socket: all of it, and how
    the broker ended the connection."""
    reading = read_to_end(c, timeout=2.0)
    c.sock.shutdown(socket.SHUT_WR)
    rest = read_to_end(c)
    return Reading(reading.frames + rest.frames, rest.ending)


def repeated_close(broker: BrokerUnderTest) -> Reading:
    """Two connection.close frames at once (several threads closing one connection)."""
    with opened(broker) as c:
        c.send(CLOSE + CLOSE + CLOSE)
        # the client has its close-ok; it ends its side, the broker ends its side
        return read_then_half_close(c)


def close_under_traffic(broker: BrokerUnderTest) -> Reading:
    """connection.close with publishes, acks and heartbeats still arriving after it."""
    with opened(broker) as c:
        ack = m(commands.Basic.Ack(delivery_tag=1, multiple=False), 1)
        c.send(publishes(20) + CLOSE + publishes(200) + ack + HEARTBEAT * 5 + publishes(200))
        return read_then_half_close(c)


def half_close(broker: BrokerUnderTest) -> Reading:
    """connection.close and an immediate half-close of the client's socket."""
    with opened(broker) as c:
        c.send(CLOSE)
        c.sock.shutdown(socket.SHUT_WR)
        return read_to_end(c)


# ----------------------------------------------------------- server-initiated
def hard_error(broker: BrokerUnderTest) -> Reading:
    """A connection error (a second channel.open), with publishes still in flight
    behind it; the client answers the broker's close with close-ok."""
    with opened(broker) as c:
        c.send(m(commands.Channel.Open(), 1) + publishes(100))
        frames = []
        while True:
            got = c.recv_frame()
            assert got is not None, "the broker ended without connection.close"
            frames.append(type(got[1]).__name__)
            if isinstance(got[1], commands.Connection.Close):
                break
        c.send(CLOSE_OK)
        reading = read_to_end(c)
        return Reading(frames + reading.frames, reading.ending)


def forced_close(broker: BrokerUnderTest) -> Reading:
    """close_connection from the management API (rabbitmqctl close_connection); the
    client answers close-ok."""
    name = f"endings-{time.monotonic_ns()}"
    with opened(broker, name=name) as c:
        api = Api(broker.http_url)
        conn_name = wait_for_connection(api, name)
        api.call("DELETE", f"/api/connections/{urllib.parse.quote(conn_name, safe='')}")
        close = c.expect(commands.Connection.Close)
        c.send(CLOSE_OK)
        reading = read_to_end(c)
        return Reading([type(close).__name__, *reading.frames], reading.ending)


def close_ok_never_comes(broker: BrokerUnderTest) -> Reading:
    """The broker closes, the client never answers: it still reads the close, then EOF."""
    name = f"endings-{time.monotonic_ns()}"
    with opened(broker, heartbeat=2, name=name) as c:
        api = Api(broker.http_url)
        conn_name = wait_for_connection(api, name)
        api.call("DELETE", f"/api/connections/{urllib.parse.quote(conn_name, safe='')}")
        return read_to_end(c)


def lost_heartbeat(broker: BrokerUnderTest) -> Reading:
    """A client that negotiates heartbeats and then goes silent."""
    with opened(broker, heartbeat=1) as c:
        return read_to_end(c)


def wait_for_connection(api: Api, name: str) -> str:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        status, conns = api.call("GET", "/api/connections")
        for conn in conns if status == 200 else []:
            if (conn.get("client_properties") or {}).get("connection_name") == name:
                return str(conn["name"])
        time.sleep(0.2)
    raise AssertionError(f"connection {name} never showed in the management API")


ENDINGS: dict[str, tuple[Callable[[BrokerUnderTest], Reading], list[str]]] = {
    "client close": (client_close, []),
    # every connection.close gets its close-ok, as rabbit_reader answers in closed state
    "repeated close": (repeated_close, ["CloseOk", "CloseOk", "CloseOk"]),
    "close under traffic": (close_under_traffic, ["CloseOk"]),
    "half close": (half_close, ["CloseOk"]),
    "hard error": (hard_error, ["Close"]),
    "forced close": (forced_close, ["Close"]),
    "close-ok never comes": (close_ok_never_comes, ["Close"]),
    "lost heartbeat": (lost_heartbeat, []),
}


@pytest.mark.parametrize("ending", list(ENDINGS))
def test_every_ending_is_graceful(broker: BrokerUnderTest, ending: str) -> None:
    scenario, expected = ENDINGS[ending]
    loops = 1 if ending in ("lost heartbeat", "close-ok never comes") else LOOPS
    for _ in range(loops):
        reading = scenario(broker)
        if broker.name == "leveret":
            assert reading == Reading(expected, "eof"), (ending, reading)
        elif reading.ending == "reset" and ending == "half close":
            # RabbitMQ answers close-ok and closes at once, with linger 0, on the FIN
            # that came with the close: the reset can overtake the close-ok (measured)
            assert reading.frames == expected[: len(reading.frames)], reading
        else:
            assert reading.frames == expected, (ending, reading)
            assert reading.ending in ("eof", "reset"), (ending, reading)


def test_channel_frames_after_its_close_are_dropped_until_close_ok(
    broker: BrokerUnderTest,
) -> None:
    """A channel error with more methods already on their way on the same channel: they
    get no answer until the client's close-ok, then the number is free again."""
    with opened(broker) as c:
        bad = m(commands.Basic.Consume(queue="no-such-queue-endings"), 1)
        more = (
            m(commands.Basic.Qos(prefetch_count=5), 1)
            + publishes(10)
            + m(commands.Queue.Declare(queue="", exclusive=True), 1)
        )
        c.send(bad + more)
        close = c.expect(commands.Channel.Close)
        assert close.reply_code == 404
        c.send(m(commands.Channel.CloseOk(), 1) + m(commands.Channel.Open(), 1))
        c.expect(commands.Channel.OpenOk)  # nothing of what came between was answered
        c.send(CLOSE)
        c.expect(commands.Connection.CloseOk)
        c.sock.shutdown(socket.SHUT_WR)
        ending = read_to_end(c).ending
        assert ending == "eof" or (broker.name == "rabbitmq" and ending == "reset")


def test_shutdown_is_graceful() -> None:
    """The broker stops (SIGTERM): 320 CONNECTION_FORCED, close-ok, then end-of-file.
    Leveret only: the shared reference RabbitMQ is not stopped by tests."""
    broker = start_leveret()
    try:
        clients = [opened(broker) for _ in range(3)]
        broker.process.send_signal(15)  # type: ignore[union-attr]
        for c in clients:
            close = c.expect(commands.Connection.Close)
            assert close.reply_code == 320
            c.send(CLOSE_OK)
            assert read_to_end(c).ending == "eof"
            c.close()
    finally:
        broker.stop()


def test_pika_close_while_publishing(broker: BrokerUnderTest) -> None:
    for _ in range(LOOPS):
        conn = pika.BlockingConnection(broker.pika_params())
        ch = conn.channel()
        for _ in range(500):
            ch.basic_publish("amq.fanout", "", b"x" * 100)
        conn.close()  # raises StreamLostError if the broker reset the connection


def test_pika_sees_a_forced_close_not_a_lost_stream(broker: BrokerUnderTest) -> None:
    name = f"pika-endings-{time.monotonic_ns()}"
    conn = pika.BlockingConnection(broker.pika_params(client_properties={"connection_name": name}))
    api = Api(broker.http_url)
    conn_name = wait_for_connection(api, name)
    api.call("DELETE", f"/api/connections/{urllib.parse.quote(conn_name, safe='')}")
    with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as closed:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            conn.process_data_events(0.2)
    assert closed.value.reply_code == 320


def test_a_stream_connection_ends_gracefully_after_the_clients_close() -> None:
    """The stream edge ends as the AMQP one does (one edge for both): after answering a
    client's Close it reads and drops what the client still sends, and ends with EOF once
    the client has ended its side, never under unread input (a reset). Leveret only:
    RabbitMQ's stream sockets close with linger 0, as its AMQP ones."""
    from leveret.protocol.stream import events as sev
    from tests.support.streamclient import RawStreamClient

    broker = start_leveret(extra=["--stream-port", "0"])
    try:
        assert broker.stream_port
        c = RawStreamClient("127.0.0.1", broker.stream_port)
        assert c.handshake() == 1
        code, _ = c.request(sev.Close(c.next_id(), 1, "bye"), 0x16)
        assert code == 1
        # late frames after the close: read and dropped, the socket still open
        for _ in range(3):
            c.sock.sendall(b"\x00\x00\x00\x04\x00\x17\x00\x01")  # heartbeat
        time.sleep(0.5)
        c.sock.shutdown(socket.SHUT_WR)
        c.sock.settimeout(10)
        assert c.sock.recv(100) == b""  # EOF, not ConnectionResetError
        c.close()
    finally:
        broker.stop()
