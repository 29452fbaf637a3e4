"""Backlogs larger than memory: Leveret against RabbitMQ, same load, same watermark.

Each run fills ``--gib`` GiB of ``--size``-byte messages into one queue with no consumer,
then drains it with one consumer (manual acks, prefetch). Both brokers get the same
absolute memory high watermark (``--watermark``; RabbitMQ through its config file's
``vm_memory_high_watermark.absolute``, Leveret through ``--vm-memory-high-watermark``).
Reported per broker: publish rate (to the last confirm), drain rate, peak resident
memory while filling and while draining (the broker process: Leveret's Python, RabbitMQ's
beam.smp, sampled every 50 ms from /proc), how often and how long the publisher was
blocked (connection.blocked), and with ``--restart`` the time a restart takes after a
kill -9 with the backlog in place (persistent messages, durable queue), until the queue
answers with the whole backlog.

RabbitMQ runs as a node of the benchmark's own (tests/support/rabbitmq.py: its own node name,
ports and directories), never the shared one on 5672. Everything started is stopped on
exit.

    python benchmarks/backlog.py --gib 1 --watermark 256MiB --repeat 3 [--restart]
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import multiprocessing as mp
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from pamqp import body as amqp_body
from pamqp import commands, frame, header

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

import loadgen  # noqa: E402
from tests.support.rabbitmq import RabbitNode, rss_of  # noqa: E402

CTX = mp.get_context("fork")
MiB = 1024 * 1024
GiB = 1024 * MiB
QUEUE = "backlog"
BLOCKED = 0x000A003C
UNBLOCKED = 0x000A003D

# shared counters
PUBLISHED, CONFIRMED, DELIVERED, BLOCKS, BLOCKED_NOW = range(5)


def parse_size(text: str) -> int:
    m = re.fullmatch(r"(\d+)(KiB|MiB|GiB|KB|MB|GB)?", text)
    if m is None:
        raise argparse.ArgumentTypeError(f"not a size: {text}")
    unit = {"KiB": 1024, "MiB": MiB, "GiB": GiB, "KB": 1000, "MB": 10**6, "GB": 10**9}
    return int(m[1]) * unit.get(m[2] or "", 1)


# ------------------------------------------------------------------ brokers
class Broker:
    kind = ""
    port = 0
    pid = 0

    def start(self) -> None: ...

    def kill9(self) -> None: ...

    def close(self) -> None: ...


class LeveretBroker(Broker):
    kind = "leveret"

    def __init__(self, watermark: int, src: Path | None) -> None:
        self.watermark = watermark
        self.src = src
        self.home = Path(tempfile.mkdtemp(prefix="leveret-backlog-"))
        self.proc: subprocess.Popen[str] | None = None

    def start(self) -> None:
        env = {
            **os.environ,
            "LEVERET_HTTP_PORT": os.environ.get("LEVERET_HTTP_PORT", "0"),
            "LEVERET_PROMETHEUS_PORT": "0",
            "LEVERET_VM_MEMORY_HIGH_WATERMARK": f"{self.watermark // 1024}KiB",
        }
        if self.src is not None:
            env["PYTHONPATH"] = str(self.src)
        log = open(self.home / "server.log", "a")  # noqa: SIM115 - handed to the child
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "leveret.cli.main", "server", "--amqp-port", "0",
             "--stream-port", "0", "--bind", "127.0.0.1", "--data-dir", str(self.home / "data"),
             "--log-level", "warning"],
            stdout=subprocess.PIPE, stderr=log, text=True, env=env, start_new_session=True)
        log.close()
        assert self.proc.stdout is not None
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                break
            if m := re.search(r"listening on amqp://[^\s:/]+:(\d+)", line):
                self.port = int(m[1])
                self.pid = self.proc.pid
                threading.Thread(target=self.proc.stdout.read, daemon=True).start()
                return
        raise RuntimeError("leveret did not start: "
                           + (self.home / "server.log").read_text()[-2000:])

    def kill9(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(30)

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        shutil.rmtree(self.home, ignore_errors=True)


class RabbitMQBroker(Broker):
    kind = "rabbitmq"

    def __init__(self, watermark: int) -> None:
        self.node = RabbitNode(config={"vm_memory_high_watermark.absolute": str(watermark)})

    def start(self) -> None:
        self.node.start(timeout=600)
        self.port = self.node.port
        self.pid = self.node.pid

    def kill9(self) -> None:
        self.node.kill9()

    def close(self) -> None:
        self.node.close()


# ------------------------------------------------------------------ workers
class Counter(loadgen.FrameCounter):
    """Also counts connection.blocked / unblocked."""

    counts: Any = None

    def _method(self, index: int, pos: int, size: int) -> None:
        if index == BLOCKED:
            self.counts[BLOCKS] += 1
            self.counts[BLOCKED_NOW] = 1
        elif index == UNBLOCKED:
            self.counts[BLOCKED_NOW] = 0
        else:
            super()._method(index, pos, size)


def publish_unit(size: int, persistent: bool) -> bytes:
    props = commands.Basic.Properties(delivery_mode=2 if persistent else 1)
    return (
        frame.marshal(commands.Basic.Publish(exchange="", routing_key=QUEUE), 1)
        + frame.marshal(header.ContentHeader(0, size, props), 1)
        + frame.marshal(amqp_body.ContentBody(b"x" * size), 1)
    )


def producer(port: int, count: int, size: int, persistent: bool, window: int, batch: int,
             counts: Any, ctl: Any, status: Any) -> None:
    loadgen._worker_init()
    try:
        conn = loadgen.SetupConnection("127.0.0.1", port, timeout=600)
        conn.rpc(commands.Queue.Declare(queue=QUEUE, durable=persistent),
                 commands.Queue.DeclareOk)
        conn.rpc(commands.Confirm.Select(), commands.Confirm.SelectOk)
        counter = Counter(bytes(conn.buf))
        counter.counts = counts
        counter.feed(0)
        sock = conn.sock
        loadgen.hot_socket(sock)
        blob = memoryview(publish_unit(size, persistent) * batch)
        status.put(("ready", "producer", os.getpid()))
        published = 0
        while published < count and not ctl[0]:
            while published - counter.acked_upto + batch > window:
                try:
                    n = sock.recv_into(counter.space())
                except (BlockingIOError, InterruptedError):
                    if ctl[0]:
                        return
                    continue
                if not n:
                    raise loadgen.BrokerClosed("connection closed by the broker")
                counter.feed(n)
                counts[CONFIRMED] = counter.acked_upto
            if not loadgen.send_all(sock, blob, ctl):
                return
            published += batch
            counts[PUBLISHED] = published
        while counter.acked_upto < count and not ctl[0]:
            try:
                n = sock.recv_into(counter.space())
            except (BlockingIOError, InterruptedError):
                continue
            if not n:
                raise loadgen.BrokerClosed("connection closed by the broker")
            counter.feed(n)
            counts[CONFIRMED] = counter.acked_upto
        status.put(("done", "producer", os.getpid()))
        while not ctl[0]:
            time.sleep(0.05)
        conn.close()
    except BaseException as exc:
        loadgen._report_error(status, "producer", exc)
        raise SystemExit(1) from None


def consumer(port: int, prefetch: int, ack_every: int, counts: Any, ctl: Any,
             status: Any) -> None:
    loadgen._worker_init()
    try:
        conn = loadgen.SetupConnection("127.0.0.1", port, timeout=600)
        conn.rpc(commands.Basic.Qos(prefetch_count=prefetch), commands.Basic.QosOk)
        conn.rpc(commands.Basic.Consume(queue=QUEUE), commands.Basic.ConsumeOk)
        counter = loadgen.FrameCounter(bytes(conn.buf))
        counter.feed(0)
        status.put(("ready", "consumer", os.getpid()))
        loadgen.consume_loop(conn.sock, counter, counts, DELIVERED, ctl, ack_every)
        conn.close()
    except BaseException as exc:
        loadgen._report_error(status, "consumer", exc)
        raise SystemExit(1) from None


@contextlib.contextmanager
def processes() -> Iterator[list[mp.process.BaseProcess]]:
    procs: list[mp.process.BaseProcess] = []
    try:
        yield procs
    finally:
        for p in procs:
            p.join(timeout=5)
            if p.is_alive():
                p.kill()
                p.join()


class Sampler:
    """Peak RSS of a process, sampled every 50 ms in a thread."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            with contextlib.suppress(OSError, ValueError):
                self.peak = max(self.peak, rss_of(self.pid))
            time.sleep(0.05)

    def stop(self) -> int:
        self._stop.set()
        self._thread.join()
        return self.peak


def queue_depth(port: int) -> int:
    conn = loadgen.SetupConnection("127.0.0.1", port, timeout=600)
    try:
        ok = conn.rpc(commands.Queue.Declare(queue=QUEUE, passive=True),
                      commands.Queue.DeclareOk)
        return int(ok.message_count)
    finally:
        conn.close()


# ------------------------------------------------------------------ one run
@dataclass
class Result:
    broker: str
    count: int
    size: int
    watermark: int
    publish_s: float = 0.0
    drain_s: float = 0.0
    fill_peak_rss: int = 0
    drain_peak_rss: int = 0
    blocks: int = 0
    blocked_s: float = 0.0
    restart_s: float | None = None
    error: str | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def publish_rate(self) -> float:
        return self.count / self.publish_s if self.publish_s else 0.0

    @property
    def drain_rate(self) -> float:
        return self.count / self.drain_s if self.drain_s else 0.0


def _wait(status: Any, what: str, procs: list[mp.process.BaseProcess], ctl: Any,
          timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            kind, role, info = status.get(timeout=0.5)
        except Exception:
            if any(p.exitcode not in (None, 0) for p in procs):
                raise RuntimeError(f"{what}: a worker died") from None
            if time.monotonic() > deadline:
                raise RuntimeError(f"timed out waiting for {what}") from None
            continue
        if kind == "error":
            raise RuntimeError(f"{role}: {info}")
        if kind == what:
            return


def run_one(broker: Broker, args: argparse.Namespace) -> Result:
    count = args.gib * GiB // args.size // args.batch * args.batch
    res = Result(broker.kind, count, args.size, args.watermark)
    broker.start()
    try:
        counts = CTX.RawArray(ctypes.c_longlong, 8)
        ctl = CTX.RawArray(ctypes.c_int, 1)
        status = CTX.Queue()
        # fill
        with processes() as procs:
            p = CTX.Process(target=producer, args=(broker.port, count, args.size,
                                                   args.persistent, args.window, args.batch,
                                                   counts, ctl, status), daemon=True)
            p.start()
            procs.append(p)
            _wait(status, "ready", procs, ctl, 60)
            sampler = Sampler(broker.pid)
            t0 = time.monotonic()
            last = t0
            last_confirmed = -1
            blocked_since: float | None = None
            while counts[CONFIRMED] < count:
                time.sleep(0.02)
                now = time.monotonic()
                if counts[BLOCKED_NOW] and blocked_since is None:
                    blocked_since = now
                elif not counts[BLOCKED_NOW] and blocked_since is not None:
                    res.blocked_s += now - blocked_since
                    blocked_since = None
                if p.exitcode not in (None, 0):
                    raise RuntimeError("producer died: " + str(_drain_errors(status)))
                if now - last > 600:
                    raise RuntimeError(f"fill stalled at {counts[CONFIRMED]} of {count}")
                if counts[CONFIRMED] != last_confirmed:
                    last_confirmed = counts[CONFIRMED]
                    last = now
            res.publish_s = time.monotonic() - t0
            if blocked_since is not None:
                res.blocked_s += time.monotonic() - blocked_since
            res.blocks = counts[BLOCKS]
            res.fill_peak_rss = sampler.stop()
            ctl[0] = 1
        if args.restart:
            broker.kill9()
            t0 = time.monotonic()
            broker.start()
            while queue_depth(broker.port) < count:
                time.sleep(0.1)
            res.restart_s = time.monotonic() - t0
        depth = queue_depth(broker.port)
        if depth != count:
            res.notes.append(f"queue depth {depth} before the drain, expected {count}")
        # drain
        ctl[0] = 0
        counts[DELIVERED] = 0
        with processes() as procs:
            p = CTX.Process(target=consumer, args=(broker.port, args.prefetch, args.ack_every,
                                                   counts, ctl, status), daemon=True)
            p.start()
            procs.append(p)
            _wait(status, "ready", procs, ctl, 120)
            sampler = Sampler(broker.pid)
            t0 = time.monotonic()
            while counts[DELIVERED] < depth:
                time.sleep(0.02)
                if p.exitcode not in (None, 0):
                    raise RuntimeError("consumer died: " + str(_drain_errors(status)))
                if time.monotonic() - t0 > 3600:
                    raise RuntimeError(f"drain stalled at {counts[DELIVERED]} of {depth}")
            res.drain_s = time.monotonic() - t0
            res.drain_peak_rss = sampler.stop()
            ctl[0] = 1
    except RuntimeError as exc:
        res.error = str(exc)
    finally:
        broker.close()
    return res


def _drain_errors(status: Any) -> list[str]:
    out = []
    with contextlib.suppress(Exception):
        while True:
            kind, role, info = status.get_nowait()
            if kind == "error":
                out.append(f"{role}: {info}")
    return out


# ------------------------------------------------------------------ report
def _mib(x: float) -> str:
    return f"{x / MiB:,.0f}"


def summarize(results: list[Result], args: argparse.Namespace) -> dict[str, Any]:
    from rich.console import Console
    from rich.table import Table

    console = Console(width=140)
    table = Table(title=f"{args.gib} GiB of {args.size}-byte "
                        f"{'persistent' if args.persistent else 'transient'} messages, "
                        f"watermark {_mib(args.watermark)} MiB "
                        f"(medians of {args.repeat}; min-max)")
    for col in ("broker", "publish msg/s", "drain msg/s", "peak RSS fill MiB",
                "peak RSS drain MiB", "blocked (times / s)", "restart s"):
        table.add_column(col, justify="right")
    summary: dict[str, Any] = {}
    for kind in ("leveret", "rabbitmq"):
        rows = [r for r in results if r.broker == kind and r.error is None]
        if not rows:
            continue

        def med(values: list[float]) -> str:
            return (f"{statistics.median(values):,.0f} "
                    f"({min(values):,.0f}-{max(values):,.0f})")

        pub = [r.publish_rate for r in rows]
        dr = [r.drain_rate for r in rows]
        fill = [r.fill_peak_rss / MiB for r in rows]
        drain = [r.drain_peak_rss / MiB for r in rows]
        restart = [r.restart_s for r in rows if r.restart_s is not None]
        summary[kind] = {
            "publish_rate": statistics.median(pub), "drain_rate": statistics.median(dr),
            "fill_peak_rss_mib": max(fill), "drain_peak_rss_mib": max(drain),
            "restart_s": statistics.median(restart) if restart else None,
        }
        table.add_row(
            kind, med(pub), med(dr), med(fill), med(drain),
            f"{statistics.median([r.blocks for r in rows]):.0f} / "
            f"{statistics.median([r.blocked_s for r in rows]):.1f}",
            (f"{statistics.median(restart):.1f} ({min(restart):.1f}-{max(restart):.1f})"
             if restart else "-"))
    console.print(table)
    if "leveret" in summary and "rabbitmq" in summary:
        lev, rmq = summary["leveret"], summary["rabbitmq"]
        console.print(
            f"Leveret/RabbitMQ: publish {lev['publish_rate'] / rmq['publish_rate']:.2f}, "
            f"drain {lev['drain_rate'] / rmq['drain_rate']:.2f}"
            + (f", restart time {lev['restart_s'] / rmq['restart_s']:.2f}"
               if lev["restart_s"] and rmq["restart_s"] else ""))
    backlog = args.gib * GiB
    console.print(f"backlog / watermark = {backlog / args.watermark:.1f}; Leveret's peak RSS / "
                  f"watermark = "
                  + (f"{max(summary['leveret']['fill_peak_rss_mib'], summary['leveret']['drain_peak_rss_mib']) * MiB / args.watermark:.2f}"  # noqa: E501
                     if "leveret" in summary else "-"))
    for r in results:
        if r.error or r.notes:
            console.print(f"[red]{r.broker}: {r.error or ''} {' '.join(r.notes)}[/red]")
    return summary


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gib", type=int, default=1, help="backlog in GiB (default 1)")
    ap.add_argument("--size", type=int, default=4096, help="message body bytes (4096)")
    ap.add_argument("--watermark", type=parse_size, default=parse_size("256MiB"),
                    help="absolute memory high watermark for both brokers (256MiB)")
    ap.add_argument("--transient", dest="persistent", action="store_false",
                    help="transient messages to a non-durable queue (default: persistent "
                         "messages to a durable queue)")
    ap.add_argument("--restart", action="store_true",
                    help="kill -9 after the fill and time the restart (persistent only)")
    ap.add_argument("--window", type=int, default=1000, help="unconfirmed publishes (1000)")
    ap.add_argument("--batch", type=int, default=100, help="publishes per write (100)")
    ap.add_argument("--prefetch", type=int, default=1000, help="consumer prefetch (1000)")
    ap.add_argument("--ack-every", type=int, default=100, help="ack multiple every (100)")
    ap.add_argument("--repeat", type=int, default=1, help="runs per broker, alternating")
    ap.add_argument("--brokers", default="leveret,rabbitmq")
    ap.add_argument("--leveret-src", type=Path, help="import leveret from here")
    ap.add_argument("--json", type=Path, help="write every run here")
    args = ap.parse_args(argv)
    if args.restart and not args.persistent:
        ap.error("--restart needs persistent messages")
    kinds = args.brokers.split(",")
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    results: list[Result] = []
    for i in range(args.repeat):
        order = kinds if i % 2 == 0 else list(reversed(kinds))
        for kind in order:
            broker: Broker = (LeveretBroker(args.watermark, args.leveret_src)
                              if kind == "leveret" else RabbitMQBroker(args.watermark))
            print(f"run {i + 1}/{args.repeat}: {kind} ...", flush=True)
            r = run_one(broker, args)
            print(f"  publish {r.publish_rate:,.0f}/s drain {r.drain_rate:,.0f}/s peak RSS "
                  f"{_mib(r.fill_peak_rss)}/{_mib(r.drain_peak_rss)} MiB blocked {r.blocks} "
                  f"({r.blocked_s:.1f}s) restart {r.restart_s} {r.error or ''}", flush=True)
            results.append(r)
    summary = summarize(results, args)
    if args.json:
        args.json.write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()},
                                         "runs": [asdict(r) for r in results],
                                         "summary": summary}, indent=1))
    return 0 if all(r.error is None for r in results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
