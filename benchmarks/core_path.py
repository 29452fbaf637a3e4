"""CPU per message on Leveret's publish -> deliver path, in-process, without sockets.

Bytes of basic.publish frames go into the sans-IO connection; its events go to a broker
session whose output only counts; a fanout exchange routes each message to two queues,
each with a consumer (no-ack, case a; or prefetch and acks, case b). What it reports is
CPU time (``time.process_time``) per published message, which a busy machine disturbs
far less than wall-clock rates; with ``--callgrind`` it runs under valgrind and reports
instructions per message, which does not depend on the machine's load at all.

Works on this checkout and on older ones (``--leveret-src``), so a change can be measured
before and after in the same conditions:

    python benchmarks/core_path.py --leveret-src /path/to/old/src --runs 5
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


def driver(messages: int, case: str) -> float:
    """Run in a child process with the chosen src on sys.path; CPU seconds used."""
    import time

    from pamqp import commands, frame
    from pamqp.body import ContentBody
    from pamqp.header import ContentHeader

    try:
        from leveret.broker.broker import BrokerCore as Broker
    except ImportError:  # an older checkout
        from leveret.broker.broker import Broker  # type: ignore[attr-defined,no-redef]
    from leveret.broker.session import Session
    from leveret.protocol import connection as connmod

    class Out:
        def __init__(self) -> None:
            self.delivered = 0
            self.acks: list[tuple[int, int]] = []

        def send_method(self, channel: int, method: Any) -> None:
            pass

        def send_content(self, channel: int, method: Any, properties: bytes, body: bytes) -> None:
            pass

        def send_deliver(
            self,
            channel: int,
            tag: bytes,
            dtag: int,
            redelivered: bool,
            ek: bytes,
            p: bytes,
            b: bytes,
        ) -> None:
            self.delivered += 1
            conn.send_deliver(channel, tag, dtag, redelivered, ek, p, b)
            if case == "b" and dtag % 50 == 0:
                self.acks.append((channel, dtag))

        def send_basic_ack(self, channel: int, delivery_tag: int, multiple: bool) -> None:
            conn.send_basic_ack(channel, delivery_tag, multiple)

        def close_channel(self, channel: int, error: Any) -> None:
            raise AssertionError(error)

        def close_connection(self, error: Any) -> None:
            raise AssertionError(error)

    broker = Broker.with_defaults()
    out = Out()
    session = Session(broker, out, ("127.0.0.1", 1), ("127.0.0.1", 2))
    assert session.authenticate("PLAIN", b"\0guest\0guest", {}) is None
    assert session.open_vhost("/") is None
    for number in (1, 2, 3):
        session.channel_opened(number)
    handle = session.handle
    handle(1, commands.Exchange.Declare(exchange="bench", exchange_type="fanout"))
    for number, queue in ((2, "q1"), (3, "q2")):
        handle(1, commands.Queue.Declare(queue=queue))
        handle(1, commands.Queue.Bind(queue=queue, exchange="bench"))
        if case == "b":
            handle(number, commands.Basic.Qos(prefetch_count=100))
        handle(number, commands.Basic.Consume(queue=queue, no_ack=case == "a"))
    if case == "b":
        handle(1, commands.Confirm.Select())

    new_api = hasattr(connmod.ServerConnection, "next_event")
    if new_api:
        conn = connmod.ServerConnection()
        conn._state = connmod.State.OPEN  # the handshake is not what is measured
        conn._channels[1] = connmod.ChannelState.OPEN
        conn.open_channels.add(1)
    else:
        conn = connmod.ServerConnection({})
        conn.state = connmod.State.OPEN
        conn.open_channels.add(1)

    one = bytes(frame.marshal(commands.Basic.Publish(exchange="bench", routing_key=""), 1))
    one += bytes(
        frame.marshal(ContentHeader(body_size=100, properties=commands.Basic.Properties()), 1)
    )
    one += bytes(frame.marshal(ContentBody(b"x" * 100), 1))
    batch = one * 100  # one read from a socket: 100 publishes

    def dispatch(events: list[Any]) -> None:
        for event in events:
            session.publish(
                event.channel,
                event.exchange,
                event.routing_key,
                event.mandatory,
                event.immediate,
                event.exchange_and_key,
                event.properties,
                event.body,
            )

    from leveret.protocol.events import PublishReceived

    unpack = issubclass(PublishReceived, tuple)  # newer trees: a named tuple

    start = time.process_time()
    for _ in range(messages // 100):
        if new_api:
            conn.receive_data(batch)
            while True:
                event = conn.next_event()
                if type(event) is not PublishReceived:
                    break
                if unpack:  # as server/amqp.py hands a publish on
                    session.publish(*event)
                    continue
                session.publish(
                    event.channel,
                    event.exchange,
                    event.routing_key,
                    event.mandatory,
                    event.immediate,
                    event.exchange_and_key,
                    event.properties,
                    event.body,
                )
        else:
            dispatch(conn.receive_data(batch))
        session.flush_confirms()
        for channel, dtag in out.acks:
            session.handle(channel, commands.Basic.Ack(delivery_tag=dtag, multiple=True))
        out.acks.clear()
        conn.data_to_send()
    used = time.process_time() - start
    assert out.delivered == 2 * (messages // 100) * 100, out.delivered
    return used


def child(src: str, messages: int, case: str) -> float:
    code = (
        "import sys, json; sys.path.insert(0, sys.argv[1]); sys.path.insert(0, sys.argv[2]);"
        "import core_path; print(json.dumps(core_path.driver(int(sys.argv[3]), sys.argv[4])))"
    )
    here = str(Path(__file__).resolve().parent)
    proc = subprocess.run(
        [sys.executable, "-c", code, src, here, str(messages), case],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONPATH": src},
    )
    return float(json.loads(proc.stdout.strip().splitlines()[-1]))


def callgrind(src: str, messages: int, case: str) -> int:
    """Instructions of a run (minus those of a run with no messages: start-up)."""
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not installed (apt-get install valgrind)")

    def instructions(n: int) -> int:
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "cg.out"
            code = (
                "import sys; sys.path.insert(0, sys.argv[1]); sys.path.insert(0, sys.argv[2]);"
                "import core_path; core_path.driver(int(sys.argv[3]), sys.argv[4])"
            )
            here = str(Path(__file__).resolve().parent)
            subprocess.run(
                [
                    "valgrind",
                    "--tool=callgrind",
                    f"--callgrind-out-file={out}",
                    sys.executable,
                    "-c",
                    code,
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
                if line.startswith("summary:") or line.startswith("totals:"):
                    return int(line.split()[1])
        raise RuntimeError("no totals in callgrind's output")

    return instructions(messages) - instructions(0)


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
    p.add_argument("--messages", type=int, default=100_000)
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--cases", default="a,b")
    p.add_argument("--callgrind", action="store_true", help="count instructions instead")
    args = p.parse_args()
    sources = [str(s.resolve()) for s in args.leveret_src] + [str(here)]
    for case in args.cases.split(","):
        print(
            f"case {case}: {'no-ack consumers' if case == 'a' else 'confirms, prefetch 100, acks'}"
        )
        for src in sources:
            if args.callgrind:
                n = min(args.messages, 20_000)
                total = callgrind(src, n, case)
                print(f"  {src}: {total / n:,.0f} instructions per published message")
                continue
            samples = []
            for _ in range(args.runs):
                samples.append(child(src, args.messages, case) / args.messages * 1e6)
            print(
                f"  {src}: median {statistics.median(samples):.2f} us CPU per published message "
                f"(min {min(samples):.2f}, max {max(samples):.2f}, {args.runs} runs)"
            )


if __name__ == "__main__":
    main()
