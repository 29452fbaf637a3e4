"""Content-header properties as RabbitMQ 3.10.8 reads them: malformed property lists
close the connection with INTERNAL_ERROR (the channel crashed decoding them), short
strings that are not UTF-8 are bytes (echoed as they came, in error texts too), and odd
but readable values (a huge timestamp, a delivery mode of 7, a cluster-id) pass through,
dead-lettering included. Found by the fuzzing in tests/server/test_fuzz_amqp.py. Raw
frames on both brokers, answers compared byte for byte."""

from __future__ import annotations

import struct
import time

import pytest
from pamqp import commands, frame

from tests.support.brokers import BrokerUnderTest
from tests.support.rawclient import RawClient


def raw_frame(kind: int, channel: int, payload: bytes) -> bytes:
    return struct.pack(">BHI", kind, channel, len(payload)) + payload + b"\xce"


def answer_bytes(c: RawClient) -> bytes:
    """Everything the broker sends until it goes quiet or ends the connection (raw:
    pamqp cannot read texts that are not UTF-8)."""
    time.sleep(0.2)
    c.sock.settimeout(0.5)
    data = c.buf
    c.buf = b""
    try:
        while chunk := c.sock.recv(65536):
            data += chunk
    except TimeoutError:
        pass
    else:
        data += b"<EOF>"
    return data


def publish_raw(
    broker: BrokerUnderTest, properties: bytes, queue: str = "", then: bytes = b""
) -> bytes:
    """Publish one message with these property bytes (to ``queue`` by the default
    exchange), then ``then``, and a qos round trip; what came back."""
    with RawClient(broker.host, broker.port) as c:
        c.handshake()
        c.open_channel(1)
        body = b"x"
        c.send(
            frame.marshal(commands.Basic.Publish(exchange="", routing_key=queue or "t-none"), 1)
            + raw_frame(2, 1, struct.pack(">HHQ", 60, 0, len(body)) + properties)
            + raw_frame(3, 1, body)
            + then
            + frame.marshal(commands.Basic.Qos(), 1)
        )
        return answer_bytes(c)


QOS_OK = raw_frame(1, 1, struct.pack(">I", commands.Basic.QosOk.index))
INTERNAL_ERROR = raw_frame(
    1,
    0,
    struct.pack(">IH", commands.Connection.Close.index, 541)
    + b"\x0eINTERNAL_ERROR"
    + b"\x00\x00\x00\x00",
)

MALFORMED = {
    "truncated content-type": struct.pack(">H", 0x8000) + b"\x05ab",
    "bytes left over": struct.pack(">H", 0x0000) + b"zz",
    "unknown tag in headers": struct.pack(">H", 0x2000) + b"\x00\x00\x00\x05\x01aQxx",
    "NaN double in headers": struct.pack(">H", 0x2000)
    + b"\x00\x00\x00\x0b\x01ad"
    + struct.pack(">d", float("nan")),
    "continuation bit (ignored, so bytes are left over)": struct.pack(">H", 0x8001)
    + b"\x00\x00\x00\x01a",
    "table length beyond the list": struct.pack(">H", 0x2000) + b"\x00\x00\x10\x00",
}


@pytest.mark.parametrize("props", MALFORMED.values(), ids=list(MALFORMED))
def test_malformed_properties_close_with_internal_error(
    broker: BrokerUnderTest, props: bytes
) -> None:
    assert publish_raw(broker, props) == INTERNAL_ERROR


NOT_UTF8 = {
    "expiration": (0x0100, b"PRECONDITION_FAILED - invalid expiration '\xff\xfe': no_integer"),
    "user-id": (
        0x0010,
        b"PRECONDITION_FAILED - user_id property set to '\xff\xfe' but "
        b"authenticated user was 'guest'",
    ),
}


@pytest.mark.parametrize("mode", [0, 3, 7, 255])
def test_an_unknown_delivery_mode_is_refused(broker: BrokerUnderTest, mode: int) -> None:
    text = f"PRECONDITION_FAILED - invalid message: {{delivery_mode_unknown,{mode}}}".encode()
    close = struct.pack(">IH", commands.Channel.Close.index, 406) + bytes([len(text)]) + text
    got = publish_raw(broker, struct.pack(">HB", 0x1000, mode))
    assert got == raw_frame(1, 1, close + struct.pack(">HH", 60, 40))


@pytest.mark.parametrize("prop", list(NOT_UTF8))
def test_short_strings_are_bytes_in_error_texts(broker: BrokerUnderTest, prop: str) -> None:
    flag, text = NOT_UTF8[prop]
    got = publish_raw(broker, struct.pack(">H", flag) + b"\x02\xff\xfe")
    close = struct.pack(">IH", commands.Channel.Close.index, 406) + bytes([len(text)]) + text
    assert got == raw_frame(1, 1, close + struct.pack(">HH", 60, 40))


READABLE = {
    "content-type not UTF-8": struct.pack(">H", 0x8000) + b"\x02\xff\xfe",
    "huge timestamp": struct.pack(">HQ", 0x0040, 2**64 - 1),
    "huge timestamp in headers": struct.pack(">H", 0x2000)
    + b"\x00\x00\x00\x0b\x01aT"
    + struct.pack(">Q", 2**63),
    "a cluster-id": struct.pack(">HB", 0x1004, 2) + b"\x02id",
    "header key not UTF-8": struct.pack(">H", 0x2000) + b"\x00\x00\x00\x04\x02\xff\xfeV",
}


@pytest.mark.parametrize("props", READABLE.values(), ids=list(READABLE))
def test_readable_properties_pass_through_and_dead_letter(
    broker: BrokerUnderTest, props: bytes, name: str
) -> None:
    """Published, delivered with the same property bytes, then rejected into a
    dead-letter queue (properties decoded and encoded again) and read from there."""
    with RawClient(broker.host, broker.port) as c:
        c.handshake()
        c.open_channel(1)
        c.send_method(1, commands.Queue.Declare(queue=f"{name}-dead", exclusive=True))
        c.expect(commands.Queue.DeclareOk)
        c.send_method(
            1,
            commands.Queue.Declare(
                queue=name,
                exclusive=True,
                arguments={
                    "x-dead-letter-exchange": "",
                    "x-dead-letter-routing-key": f"{name}-dead",
                },
            ),
        )
        c.expect(commands.Queue.DeclareOk)
        c.send(
            frame.marshal(commands.Basic.Publish(exchange="", routing_key=name), 1)
            + raw_frame(2, 1, struct.pack(">HHQ", 60, 0, 1) + props)
            + raw_frame(3, 1, b"x")
        )
        c.send_method(1, commands.Basic.Get(queue=name))
        got = answer_bytes(c)
        header = raw_frame(2, 1, struct.pack(">HHQ", 60, 0, 1) + props)
        assert header in got, got
        tag = struct.unpack_from(">Q", got, 7 + 4)[0]
        c.send_method(1, commands.Basic.Reject(delivery_tag=tag, requeue=False))
        c.send_method(1, commands.Basic.Get(queue=f"{name}-dead", no_ack=True))
        dead = answer_bytes(c)
        assert raw_frame(3, 1, b"x") in dead, dead
        assert b"x-death" in dead and b"<EOF>" not in dead
