"""AMQP 1.0 with RabbitMQ's official client against AMQP 0-9-1, on Leveret and beside
RabbitMQ 3.10.8's AMQP 0-9-1, measured in one run.

    python benchmarks/amqp10_clients.py [--messages N] [--rounds K] [--json out.json]

Each round, on a fresh Leveret (a ``leveret server`` subprocess in its RabbitMQ 4.2 mode
with AMQP 1.0 on, so the official client accepts it) and on the RabbitMQ 3.10.8 running on
127.0.0.1:5672, N messages of 100 bytes go into a fresh classic queue and are consumed back:

- **AMQP 1.0** (Leveret): ``rabbitmq-amqp-python-client``'s ``Publisher.publish``, which
  sends each message unsettled and waits for its outcome (the client's only way), then its
  ``Consumer`` with 100 credits, accepting each message;
- **AMQP 0-9-1** (Leveret, then RabbitMQ): pika, the same pattern: each publish waits for
  its confirm, then ``basic_consume`` with a prefetch of 100, acking each message.

Reported per case: publishes/s and deliveries/s at the client, and the broker's CPU per
message (user + system time of the broker's OS process over the phase, from /proc; for
RabbitMQ its beam.smp), medians of the rounds with the spread (min-max). Rounds
interleave the cases. Publishing one message at a time is bound by round trips, so the
rates say what an application of this client sees; the CPU per message says what each
protocol costs the broker.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pika

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "src"))

from tests.support.ports import free_port  # noqa: E402

BODY = b"x" * 100
TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU of a process so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def rabbitmq_pid() -> int | None:
    out = subprocess.run(["pgrep", "-f", "beam.smp.*rabbit"], capture_output=True, text=True)
    pids = [int(p) for p in out.stdout.split()]
    return pids[0] if pids else None


class Leveret:
    """A ``leveret server`` of this run's own, in RabbitMQ 4.2 mode with AMQP 1.0."""

    def __init__(self) -> None:
        self.dir = tempfile.TemporaryDirectory(prefix="amqp10-bench-")
        self.port = free_port()
        args = [
            sys.executable, "-m", "leveret.cli.main", "server",
            "--amqp-port", str(self.port), "--http-port", str(free_port()),
            "--prometheus-port", str(free_port()), "--stream-port", "0",
            "--data-dir", self.dir.name, "--rabbitmq-version", "4.2",
            "--plugins", "rabbitmq_amqp1_0",
        ]  # fmt: skip
        env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
        self.proc = subprocess.Popen(
            args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env
        )
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if "Server startup complete" in line:
                break
        else:
            raise RuntimeError("leveret server did not start")

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=30)
        self.dir.cleanup()


def declare(port: int, name: str) -> None:
    with pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", port)) as conn:
        conn.channel().queue_declare(name)


def measured(pid: int, phase: Callable[[], None], n: int) -> tuple[float, float]:
    """(messages per second, broker CPU microseconds per message) of one phase."""
    cpu, start = cpu_seconds(pid), time.perf_counter()
    phase()
    elapsed, used = time.perf_counter() - start, cpu_seconds(pid) - cpu
    return n / elapsed, used / n * 1e6


def amqp10_round(port: int, pid: int, n: int) -> dict[str, tuple[float, float]]:
    from rabbitmq_amqp_python_client import (
        AddressHelper,
        AMQPMessagingHandler,
        Environment,
        Event,
        Message,
    )

    queue = f"bench-{uuid.uuid4().hex[:8]}"
    declare(port, queue)
    env = Environment(uri=f"amqp://guest:guest@127.0.0.1:{port}/")
    conn = env.connection()
    conn.dial()
    address = AddressHelper.queue_address(queue)
    publisher = conn.publisher(address)

    def publish() -> None:
        for _ in range(n):
            publisher.publish(Message(body=BODY))

    out = {"publish": measured(pid, publish, n)}
    publisher.close()

    class Done(Exception):
        """Raised from the handler to leave run(), as the client's own tests do."""

    class Counter(AMQPMessagingHandler):
        def __init__(self) -> None:
            super().__init__()
            self.count = 0

        def on_amqp_message(self, event: Event) -> None:
            self.delivery_context.accept(event)
            self.count += 1
            if self.count == n:
                raise Done

    consumer = conn.consumer(address, message_handler=Counter(), credit=100)

    def consume() -> None:
        with contextlib.suppress(Done):  # the handler's way out of run()
            consumer.run()

    out["consume"] = measured(pid, consume, n)
    consumer.close()
    conn.close()
    env.close()
    return out


def amqp091_round(port: int, pid: int, n: int) -> dict[str, tuple[float, float]]:
    queue = f"bench-{uuid.uuid4().hex[:8]}"
    with pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", port)) as conn:
        ch = conn.channel()
        ch.queue_declare(queue)
        ch.confirm_delivery()

        def publish() -> None:
            for _ in range(n):
                ch.basic_publish("", queue, BODY)

        out = {"publish": measured(pid, publish, n)}
        ch.basic_qos(prefetch_count=100)
        seen = 0

        def on_message(channel: Any, method: Any, _props: Any, _body: bytes) -> None:
            nonlocal seen
            channel.basic_ack(method.delivery_tag)
            seen += 1
            if seen == n:
                channel.stop_consuming()

        ch.basic_consume(queue, on_message)
        out["consume"] = measured(pid, ch.start_consuming, n)
        ch.queue_delete(queue)
    return out


def summary(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    n = args.messages
    rabbit = rabbitmq_pid()
    cases: dict[str, list[dict[str, tuple[float, float]]]] = {}
    for r in range(args.rounds):
        leveret = Leveret()
        try:
            cases.setdefault("Leveret AMQP 1.0 (official client)", []).append(
                amqp10_round(leveret.port, leveret.proc.pid, n)
            )
            cases.setdefault("Leveret AMQP 0-9-1 (pika)", []).append(
                amqp091_round(leveret.port, leveret.proc.pid, n)
            )
        finally:
            leveret.stop()
        if rabbit is not None:
            cases.setdefault("RabbitMQ 3.10.8 AMQP 0-9-1 (pika)", []).append(
                amqp091_round(5672, rabbit, n)
            )
        print(f"round {r + 1}/{args.rounds} done", file=sys.stderr)
    report: dict[str, Any] = {"messages": n, "rounds": args.rounds, "cases": {}}
    print(f"{n} messages of {len(BODY)} bytes, {args.rounds} rounds: median (min-max)")
    print(f"{'case':38} {'publish/s':>22} {'µs CPU/publish':>20} {'consume/s':>22} "
          f"{'µs CPU/delivery':>20}")  # fmt: skip
    for case, rounds in cases.items():
        row: dict[str, Any] = {}
        cells = []
        for phase in ("publish", "consume"):
            rate = summary([r[phase][0] for r in rounds])
            cpu = summary([r[phase][1] for r in rounds])
            row[phase] = {"rate": rate, "cpu_us": cpu}
            cells.append(f"{rate['median']:>8,.0f} ({rate['min']:,.0f}-{rate['max']:,.0f})")
            cells.append(f"{cpu['median']:>6.0f} ({cpu['min']:.0f}-{cpu['max']:.0f})")
        report["cases"][case] = row
        print(f"{case:38} {cells[0]:>22} {cells[1]:>20} {cells[2]:>22} {cells[3]:>20}")
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
