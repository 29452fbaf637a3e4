"""Instructions per message through Leveret's AMQP edge, in-process, without sockets.

core_path.py drives the broker session directly; this drives the server's own
``AMQPEdge`` objects (the code a socket's reads and writes go through: the sans-IO
connection, the session, the flushes on the event loop) with fake transports, so that
what a saturating client costs per message is counted, acks and confirms included:

  ack      a producer with confirms publishes to a fanout exchange, 100 publishes per
           read; two consumers (prefetch 100) ack every delivery with its own
           basic.ack (per-message acks), one read behind: each read acks what they
           had before the producer's last read. So every message waits in its queue
           until an ack gives credit back, as under a saturating producer.
  noack    the same without confirms, no-ack consumers.
  durable  a durable queue, persistent messages, confirms, one consumer as in ``ack``
           (the message store's writes and fsyncs run for real, in a temporary dir).

    python benchmarks/edge_path.py --callgrind [--leveret-src OTHER/src ...]
    python benchmarks/edge_path.py --runs 5        # CPU microseconds instead

Instructions do not depend on the machine's load: a change can be measured before and
after on a busy machine. Syscalls (the real socket reads and writes) are not counted.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

CASES = ("ack", "noack", "durable")


def driver(messages: int, case: str) -> float:
    """Run in a child process with the chosen src first on sys.path; CPU seconds."""
    import asyncio
    import struct
    import time

    from pamqp import commands, frame
    from pamqp.body import ContentBody
    from pamqp.header import ContentHeader, ProtocolHeader

    from leveret.server.amqp import AMQPEdge
    from leveret.server.app import Server
    from leveret.server.config import Config

    data_dir = tempfile.mkdtemp(prefix="edge-path-")

    class Transport:
        """What an edge uses of a uvloop transport; writes are kept for the client."""

        def __init__(self, port: int) -> None:
            self.out: list[bytes] = []
            self.port = port

        def write(self, data: bytes) -> None:
            self.out.append(data)

        def take(self) -> bytes:
            data = b"".join(self.out)
            self.out.clear()
            return data

        def get_extra_info(self, name: str, default: Any = None) -> Any:
            if name == "peername":
                return ("127.0.0.1", self.port)
            if name == "sockname":
                return ("127.0.0.1", 5672)
            return default

        def set_write_buffer_limits(self, high: int, low: int) -> None:
            pass

        def get_write_buffer_size(self) -> int:
            return 0

        def pause_reading(self) -> None:
            pass

        def resume_reading(self) -> None:
            pass

        def is_closing(self) -> bool:
            return False

        def close(self) -> None:
            pass

    def m(channel: int, method: Any) -> bytes:
        return bytes(frame.marshal(method, channel))

    head = struct.Struct(">BHI")
    deliver_index = commands.Basic.Deliver.index

    def deliveries(data: bytes) -> int:
        """How many basic.deliver frames ``data`` holds (a frame-header walk)."""
        n = pos = 0
        while pos < len(data):
            kind, _, size = head.unpack_from(data, pos)
            if kind == 1 and struct.unpack_from(">I", data, pos + 7)[0] == deliver_index:
                n += 1
            pos += 8 + size
        return n

    async def run() -> float:
        server = Server(Config(data_dir=Path(data_dir)))
        server.loop = asyncio.get_running_loop()
        server.setup_broker()

        async def connect(port: int) -> tuple[AMQPEdge, Transport]:
            edge = AMQPEdge(server.state)
            t = Transport(port)
            edge.connection_made(t)  # type: ignore[arg-type]
            edge.data_received(bytes(ProtocolHeader().marshal()))
            auth = "\0guest\0guest"
            for method in (
                commands.Connection.StartOk(client_properties={}, mechanism="PLAIN", response=auth),
                commands.Connection.TuneOk(channel_max=2047, frame_max=131072, heartbeat=0),
                commands.Connection.Open(virtual_host="/"),
            ):
                edge.data_received(m(0, method))
            edge.data_received(m(1, commands.Channel.Open()))
            await asyncio.sleep(0)
            t.take()
            return edge, t

        durable = case == "durable"
        producer, _ = await connect(1)
        setup = b""
        if durable:
            setup += m(1, commands.Queue.Declare(queue="edge-path", durable=True))
        else:
            setup += m(1, commands.Exchange.Declare(exchange="edge-path", exchange_type="fanout"))
        if case != "noack":
            setup += m(1, commands.Confirm.Select())
        producer.data_received(setup)
        consumers = []
        for i in range(1 if durable else 2):
            edge, t = await connect(10 + i)
            queue = "edge-path" if durable else f"edge-path-{i}"
            cmds = b""
            if not durable:
                cmds += m(1, commands.Queue.Declare(queue=queue, exclusive=True))
                cmds += m(1, commands.Queue.Bind(queue=queue, exchange="edge-path"))
            if case != "noack":
                cmds += m(1, commands.Basic.Qos(prefetch_count=100))
            cmds += m(1, commands.Basic.Consume(queue=queue, no_ack=case == "noack"))
            edge.data_received(cmds)
            await asyncio.sleep(0)
            t.take()
            consumers.append([edge, t, 0, 0])  # edge, transport, tags acked, tags seen

        if durable:
            publish = m(1, commands.Basic.Publish(exchange="", routing_key="edge-path"))
            props = commands.Basic.Properties(delivery_mode=2)
        else:
            publish = m(1, commands.Basic.Publish(exchange="edge-path", routing_key=""))
            props = commands.Basic.Properties()
        one = publish
        one += m(1, ContentHeader(body_size=100, properties=props))
        one += m(1, ContentBody(b"x" * 100))
        batch = one * 100
        ack = struct.Struct(">BHIIQB")

        def acks(first: int, n: int) -> bytes:
            return b"".join(
                ack.pack(1, 1, 13, commands.Basic.Ack.index, tag, 0) + b"\xce"
                for tag in range(first, first + n)
            )

        delivered = 0
        start = time.process_time()
        for _ in range(messages // 100):
            producer.data_received(batch)
            await asyncio.sleep(0)
            # the consumers ack what they took in the last round (tags 1, 2, ...): one
            # read behind the producer, so every message waits for credit in its queue
            # and goes out when an ack gives it back, as under a saturating producer
            for c in consumers:
                edge, t, acked, seen = c
                if case != "noack" and seen > acked:
                    edge.data_received(acks(acked + 1, seen - acked))
                    c[2] = seen
            await asyncio.sleep(0)
            for c in consumers:
                got = deliveries(c[1].take())
                delivered += got
                c[3] += got
        used = time.process_time() - start
        for c in consumers:
            delivered += deliveries(c[1].take())
        expected = (messages // 100) * 100 * len(consumers)
        assert delivered >= expected - 100 * len(consumers), (delivered, expected)
        if server.persistence is not None:
            server.persistence.close()
        return used

    try:
        try:
            import uvloop
        except ImportError:
            return asyncio.run(run())
        return uvloop.run(run())
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)


def _child_code(call: str) -> str:
    return (
        "import sys, json; sys.path.insert(0, sys.argv[1]); sys.path.insert(0, sys.argv[2]);"
        f"import edge_path; {call}"
    )


def child(src: str, messages: int, case: str) -> float:
    here = str(Path(__file__).resolve().parent)
    code = _child_code("print(json.dumps(edge_path.driver(int(sys.argv[3]), sys.argv[4])))")
    proc = subprocess.run(
        [sys.executable, "-c", code, src, here, str(messages), case],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONPATH": src},
    )
    return float(json.loads(proc.stdout.strip().splitlines()[-1]))


def callgrind(src: str, messages: int, case: str) -> int:
    """Instructions of a run minus those of a run with 200 messages (start-up)."""
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not installed (apt-get install valgrind)")
    here = str(Path(__file__).resolve().parent)

    def instructions(n: int) -> int:
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "cg.out"
            subprocess.run(
                [
                    "valgrind",
                    "--tool=callgrind",
                    f"--callgrind-out-file={out}",
                    sys.executable,
                    "-c",
                    _child_code("edge_path.driver(int(sys.argv[3]), sys.argv[4])"),
                    src,
                    here,
                    str(n),
                    case,
                ],
                capture_output=True,
                check=True,
                env={**os.environ, "PYTHONPATH": src},
            )
            for line in out.read_text().splitlines():
                if line.startswith(("summary:", "totals:")):
                    return int(line.split()[1])
        raise RuntimeError("no totals in callgrind's output")

    return instructions(messages + 200) - instructions(200)


def main() -> None:
    here = Path(__file__).resolve().parent.parent / "src"
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--leveret-src",
        type=Path,
        action="append",
        default=[],
        help="also measure this src/ (repeatable); this checkout's is always measured",
    )
    p.add_argument("--messages", type=int, default=50_000)
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--cases", default=",".join(CASES))
    p.add_argument("--callgrind", action="store_true", help="count instructions instead")
    args = p.parse_args()
    sources = [str(s.resolve()) for s in args.leveret_src] + [str(here)]
    for case in args.cases.split(","):
        print(f"case {case}")
        for src in sources:
            if args.callgrind:
                n = min(args.messages, 10_000)
                total = callgrind(src, n, case)
                print(f"  {src}: {total / n:,.0f} instructions per published message")
                continue
            samples = [
                child(src, args.messages, case) / args.messages * 1e6 for _ in range(args.runs)
            ]
            print(
                f"  {src}: median {statistics.median(samples):.2f} us CPU per published "
                f"message (min {min(samples):.2f}, max {max(samples):.2f}, {args.runs} runs)"
            )


if __name__ == "__main__":
    main()
