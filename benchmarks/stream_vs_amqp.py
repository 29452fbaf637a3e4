"""What a chunk-delivering protocol costs: RabbitMQ's stream protocol (port 5552) against
its AMQP 0-9-1 delivery of the same stream, broker CPU per record, in one run.

Over AMQP 0-9-1 a broker sends every stream message as three frames of its own
(``basic.deliver``, a content header with ``x-stream-offset`` spliced into the headers,
the body): work per message on both sides. The stream protocol sends the stored chunks
themselves (osiris chunks of AMQP 1.0-encoded messages, thousands per ``Deliver`` frame),
so the broker's cost per message nearly vanishes and the client walks the chunk.

This starts a RabbitMQ 3.10.8 node of its own (``tests/support/rabbitmq_cluster``: its own
name, ports, cookie and data; the stream plugin enabled on it only), fills a stream with
the pipeline benchmark's records, then reads it both ways and reports per record: the
broker's CPU (its Erlang VM, ``/proc``), and this client's CPU to walk the chunks and take
each record's body out (AMQP 1.0 ``data`` section), as the executor's reader would.

    python benchmarks/stream_vs_amqp.py [--records N] [--repeat K] [--json out.json]

Needs root and Debian's rabbitmq-server, as the cluster tests.
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import struct
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import pipeline_stages as stages  # noqa: E402
from pipeline import _declare, fill  # noqa: E402
from tests.support.ports import free_port  # noqa: E402
from tests.support.rabbitmq_cluster import RabbitCluster  # noqa: E402

_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")
# MagicVersion, ChunkType, NumEntries, NumRecords, Timestamp, Epoch, ChunkFirstOffset,
# ChunkCrc, DataLength, TrailerLength, Reserved
_CHUNK = struct.Struct(">BBHIqQQiIII")


def _string(s: str) -> bytes:
    raw = s.encode()
    return _U16.pack(len(raw)) + raw


class StreamClient:
    """The handful of stream-protocol commands a consumer needs (protocol version 1)."""

    def __init__(self, host: str, port: int, user: str = "guest", password: str = "guest"):
        self.sock = socket.create_connection((host, port), timeout=30)
        self.buf = bytearray()
        self.correlation = 0
        self.send(0x0011, _U32.pack(0))  # PeerProperties: none
        self.reply()
        self.send(0x0012, b"")  # SaslHandshake
        self.reply()
        self.send(0x0013, _string("PLAIN") + _U32.pack(len(f"\0{user}\0{password}"))
                  + f"\0{user}\0{password}".encode())  # fmt: skip
        self.reply()
        key, payload = self.frame()  # the server's Tune: frame max, heartbeat
        assert key == 0x0014, hex(key)
        frame_max, _heartbeat = struct.unpack(">II", payload[:8])
        self.raw(0x0014, struct.pack(">II", frame_max, 0))
        self.send(0x0015, _string("/"))  # Open
        self.reply()

    def raw(self, key: int, body: bytes) -> None:
        frame = struct.pack(">HH", key, 1) + body
        self.sock.sendall(_U32.pack(len(frame)) + frame)

    def send(self, key: int, body: bytes) -> None:
        self.correlation += 1
        self.raw(key, _U32.pack(self.correlation) + body)

    def frame(self) -> tuple[int, bytes]:
        while True:
            if len(self.buf) >= 4:
                size = _U32.unpack_from(self.buf)[0]
                if len(self.buf) >= 4 + size:
                    frame = bytes(self.buf[4 : 4 + size])
                    del self.buf[: 4 + size]
                    return _U16.unpack_from(frame)[0], frame[4:]
            data = self.sock.recv(1 << 20)
            if not data:
                raise EOFError("the broker closed the connection")
            self.buf += data

    def reply(self) -> bytes:
        key, payload = self.frame()
        assert key & 0x8000, hex(key)
        code = _U16.unpack_from(payload, 4)[0]
        assert code == 1, f"response code {code} to {key & 0x7FFF:#x}"
        return payload

    def subscribe(self, stream: str, credit: int) -> None:
        # subscription 1, offset type 1 (first), credit, no properties
        self.send(0x0007, b"\x01" + _string(stream) + _U16.pack(1) + _U16.pack(credit)
                  + _U32.pack(0))  # fmt: skip
        self.reply()

    def chunks(self, records: int) -> list[bytes]:
        """``Deliver`` frames until ``records`` records came, a credit back for each."""
        got = 0
        out = []
        while got < records:
            key, payload = self.frame()
            if key != 0x0008:
                continue
            out.append(payload)
            got += _CHUNK.unpack_from(payload, 1)[3]
            self.raw(0x0009, b"\x01" + _U16.pack(1))  # Credit: one more chunk
        return out

    def close(self) -> None:
        self.sock.close()


def bodies(deliver_frames: list[bytes]) -> int:
    """Walk every chunk and take out each message's body (its AMQP 1.0 data section), as
    a reader would; returns how many were not empty."""
    n = 0
    unpack_chunk = _CHUNK.unpack_from
    u32 = _U32.unpack_from
    for payload in deliver_frames:
        head = unpack_chunk(payload, 1)
        entries, length = head[2], head[8]
        pos = 1 + _CHUNK.size
        end = pos + length
        for _ in range(entries):
            size = u32(payload, pos)[0]
            if size & 0x80000000:  # a sub-batch: not written by AMQP 0-9-1 publishers
                raise ValueError("sub-batch entries are not expected here")
            msg = payload[pos + 4 : pos + 4 + size]
            at = msg.rfind(b"\x00\x53\x75")  # the data section's descriptor
            body = (
                msg[at + 5 : at + 5 + msg[at + 4]]
                if msg[at + 3] == 0xA0
                else msg[at + 8 : at + 8 + u32(msg, at + 4)[0]]
            )
            n += len(body) > 0
            pos += 4 + size
        assert pos <= end
    return n


def run(cluster: RabbitCluster, stream_port: int, records: int) -> dict[str, Any]:
    node = cluster.nodes[0]
    assert node.pid is not None
    stream = f"bench-{uuid.uuid4().hex[:8]}"
    _declare(node.url, stream)
    out: dict[str, Any] = {"records": records, "publish_per_s": fill(node.url, stream, records)}
    time.sleep(2)
    with stages.Meter(records, pid=node.pid, tree=False) as amqp:
        chunks, seconds = stages.raw_read("127.0.0.1", node.port, stream, records)
    out["amqp_0_9_1"] = {**amqp.result, "client_per_s": records / seconds,
                         "wire_bytes_per_record": sum(map(len, chunks)) / records}  # fmt: skip
    _, out["amqp_0_9_1_reader_walk"] = stages.time_cpu(lambda: stages.walk_blocks(chunks), records)
    client = StreamClient("127.0.0.1", stream_port)
    try:
        client.subscribe(stream, credit=8)
        t = time.perf_counter()
        with stages.Meter(records, pid=node.pid, tree=False) as proto:
            frames = client.chunks(records)
        seconds = time.perf_counter() - t
    finally:
        client.close()
    out["stream_protocol"] = {**proto.result, "client_per_s": records / seconds,
                              "chunks": len(frames)}  # fmt: skip
    _, out["stream_protocol_reader_bodies"] = stages.time_cpu(lambda: bodies(frames), records)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    stream_port = free_port()
    cluster = RabbitCluster(
        Path(tempfile.mkdtemp(prefix="leveret-stream-bench-")),
        size=1,
        plugins=("rabbitmq_stream",),
        conf=(f"stream.listeners.tcp.default = {stream_port}",),
    )
    cluster.start()
    try:
        runs = []
        for _ in range(args.repeat):
            result = run(cluster, stream_port, args.records)
            runs.append(result)
            print(json.dumps(result), flush=True)
    finally:
        cluster.stop()
    summary: dict[str, Any] = {"runs": runs}
    for way in ("amqp_0_9_1", "stream_protocol"):
        summary[way] = {
            key: statistics.median(r[way][key] for r in runs)
            for key in ("cpu_us", "client_per_s", "others_cores")
        }
    for key in ("amqp_0_9_1_reader_walk", "stream_protocol_reader_bodies"):
        summary[key] = statistics.median(r[key]["cpu_us"] for r in runs)
    print(json.dumps({k: v for k, v in summary.items() if k != "runs"}, indent=2))
    if args.json:
        args.json.write_text(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
