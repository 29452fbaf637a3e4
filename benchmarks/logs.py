"""The log system's throughput and the logging handler's latency, Leveret against RabbitMQ.

For each broker, in the same run:

  emit-log          ``leveret emit-log < FILE`` of N lines, no receiver bound: records/s over
                    the command's wall time (start-up and the final confirms included)
  emit-log -> file  the same with one ``receive-logs --to FILE`` bound: records/s until the
                    receiver's file holds all N lines (end to end)
  handler           ``logger.info`` N times in a burst with ``AMQPHandler`` attached and a
                    ``receive-logs --to FILE`` counting: the application's calls/s, records/s
                    until every record is confirmed, records/s until the receiver has them
                    all, and each call's latency (p50 / p99 / p99.9 / max, calls over 1 ms)
  handler alone     the same burst with nothing bound and no receiver running: the
                    handler's own cost, without a receiver competing for the CPUs
  thread alone      the same with ``AMQPHandler(process=False)``: publishing from a thread
                    in the application's interpreter instead of the shipper process
  pinned            both again with the application on a core of its own (CPU 0) and the
                    broker and the shipper on the others, as when the broker runs elsewhere:
                    what is left is the handler's own blocking, not the scheduler's
  baseline          the same burst through a handler that only encodes the record (no
                    buffer, no I/O thread): the latency the machine gives any logging call

Leveret is started here (free port, temporary data dir); RabbitMQ is used at --rabbitmq when
it answers. The emitter, receivers and broker share this machine's cores: the load average
is reported, because other work on the machine shows up in every number, latency above all.

    python benchmarks/logs.py [--records 100000] [--brokers leveret,rabbitmq] [--json out.json]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

from leveret.logs import AMQPHandler
from leveret.logs.record import HOST, Record, rfc3339, severity_for_level

CLI = [sys.executable, "-m", "leveret.cli.main"]


@dataclass
class Result:
    broker: str
    records: int
    emit_rate: float = 0.0
    emit_to_file_rate: float = 0.0
    handler_call_rate: float = 0.0
    handler_confirmed_rate: float = 0.0
    handler_delivered_rate: float = 0.0
    handler_delivered: int = 0
    handler_dropped: int = 0
    latency_us: dict[str, float] = field(default_factory=dict)
    alone_call_rate: float = 0.0
    alone_confirmed_rate: float = 0.0
    alone_latency_us: dict[str, float] = field(default_factory=dict)
    thread_call_rate: float = 0.0
    thread_confirmed_rate: float = 0.0
    thread_latency_us: dict[str, float] = field(default_factory=dict)
    pinned_process_latency_us: dict[str, float] = field(default_factory=dict)
    pinned_thread_latency_us: dict[str, float] = field(default_factory=dict)
    baseline_latency_us: dict[str, float] = field(default_factory=dict)
    load_before: float = 0.0
    load_after: float = 0.0


# ------------------------------------------------------------------ brokers


@contextlib.contextmanager
def leveret_broker() -> Iterator[tuple[str, int]]:
    data = tempfile.mkdtemp(prefix="leveret-bench-logs-")
    cmd = [*CLI, "server", "--amqp-port", "0", "--http-port", "0", "--prometheus-port", "0",
           "--stream-port", "0", "--bind", "127.0.0.1", "--data-dir", data,
           "--log-level", "warning"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert proc.stdout is not None
        deadline = time.monotonic() + 30
        url = None
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line and proc.poll() is not None:
                raise RuntimeError("leveret server exited")
            if "Server startup complete" in line:
                port = int(line.strip().rsplit(":", 1)[1])
                url = f"amqp://guest:guest@127.0.0.1:{port}/"
                break
        if url is None:
            raise RuntimeError("leveret server did not start")
        # keep draining its output so it never blocks on a full pipe
        import threading

        threading.Thread(target=lambda: [None for _ in proc.stdout or ()], daemon=True).start()
        yield url, proc.pid
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
        if proc.stdout is not None:
            proc.stdout.close()


def reachable(url: str) -> bool:
    import pika

    try:
        pika.BlockingConnection(pika.URLParameters(url)).close()
        return True
    except Exception:
        return False


# ------------------------------------------------------------------ helpers


class FileReceiver:
    """``receive-logs --to FILE``, ready when it says so."""

    def __init__(self, url: str, exchange: str, path: Path) -> None:
        self.path = path
        self.proc = subprocess.Popen(
            [*CLI, "receive-logs", "--url", url, "--exchange", exchange, "--to", str(path)],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        )
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            if "Waiting for logs" in line:
                return
        raise RuntimeError("receive-logs did not start")

    def lines(self) -> int:
        try:
            with open(self.path, "rb") as f:
                return sum(buf.count(b"\n") for buf in iter(lambda: f.read(1 << 20), b""))
        except FileNotFoundError:
            return 0

    def wait_for(self, n: int, timeout: float = 600) -> float:
        """Monotonic time at which the file held ``n`` lines (polled every 20 ms)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.lines() >= n:
                return time.monotonic()
            time.sleep(0.02)
        raise RuntimeError(f"receiver has {self.lines()} of {n} records")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        if self.proc.stderr is not None:
            self.proc.stderr.close()


def run_emit(url: str, exchange: str, source: Path) -> float:
    """Seconds ``emit-log < source`` took; raises if it did not exit 0."""
    with open(source, "rb") as stdin:
        start = time.monotonic()
        result = subprocess.run([*CLI, "emit-log", "--url", url, "--exchange", exchange],
                                stdin=stdin, capture_output=True, text=True)
        took = time.monotonic() - start
    if result.returncode != 0:
        raise RuntimeError(f"emit-log failed: {result.stderr.strip()}")
    return took


def percentiles(samples: list[float]) -> dict[str, float]:
    s = sorted(samples)
    n = len(s)
    return {
        "p50": s[n // 2] * 1e6,
        "p99": s[min(n - 1, int(n * 0.99))] * 1e6,
        "p99.9": s[min(n - 1, int(n * 0.999))] * 1e6,
        "max": s[-1] * 1e6,
        "mean": statistics.fmean(s) * 1e6,
        "over_1ms": float(sum(1 for x in s if x > 0.001)),
    }


def burst(logger: logging.Logger, n: int) -> tuple[float, list[float]]:
    """Log ``n`` records as fast as the loop goes; (seconds, per-call latencies)."""
    latencies = [0.0] * n
    clock = time.perf_counter
    info = logger.info
    start = clock()
    for i in range(n):
        t = clock()
        info("burst record %d of the benchmark", i)
        latencies[i] = clock() - t
    return clock() - start, latencies


class EncodeOnlyHandler(logging.Handler):
    """What AMQPHandler.emit does before its buffer: build and encode the record."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        Record(ts=rfc3339(record.created), severity=severity_for_level(record.levelno),
               facility="user", host=HOST, app="bench", pid=record.process or 0,
               message=record.getMessage(), logger=record.name).to_json()
        self.count += 1


def fresh_logger(handler: logging.Handler) -> logging.Logger:
    logger = logging.getLogger(f"bench.{uuid.uuid4().hex[:8]}")
    logger.propagate = False
    logger.setLevel(logging.INFO)
    logger.addHandler(handler)
    return logger


# ------------------------------------------------------------------ one broker


def pin(pid: int, cpus: set[int]) -> None:
    """Every thread of process ``pid`` onto ``cpus``."""
    for tid in os.listdir(f"/proc/{pid}/task"):
        with contextlib.suppress(OSError):
            os.sched_setaffinity(int(tid), cpus)


def rabbitmq_pid() -> int | None:
    found = subprocess.run(["pgrep", "-f", "beam.smp"], capture_output=True, text=True)
    pids = found.stdout.split()
    return int(pids[0]) if pids else None


def alone(url: str, n: int, *, process: bool,
          pinned_broker: int | None = None) -> tuple[float, float, dict[str, float]]:
    """A burst through a handler with nothing bound: (calls/s, confirmed/s, latencies).
    With ``pinned_broker``, this process (every thread of it, the handler's own included)
    runs on CPU 0 alone, as an application given one core, and the broker (that pid) and
    the shipper on the other CPUs."""
    everywhere = os.sched_getaffinity(0)
    rest = everywhere - {0}
    if pinned_broker is not None:
        pin(os.getpid(), {0})
        pin(pinned_broker, rest)
    handler = AMQPHandler(
        url, exchange=f"bench-logs-{uuid.uuid4().hex[:8]}", timeout=600, process=process
    )
    if pinned_broker is not None and process:
        pin(handler._publisher._proc.pid, rest)  # type: ignore[union-attr]
    try:
        deadline = time.monotonic() + 30
        while not handler.stats.connected and time.monotonic() < deadline:
            time.sleep(0.01)
        start = time.monotonic()
        took, latencies = burst(fresh_logger(handler), n)
        handler.flush()
        confirmed = handler.stats.confirmed / (time.monotonic() - start)
        return n / took, confirmed, percentiles(latencies)
    finally:
        handler.close()
        if pinned_broker is not None:
            pin(os.getpid(), everywhere)
            pin(pinned_broker, everywhere)


def measure(name: str, url: str, n: int, workdir: Path, broker_pid: int | None) -> Result:
    result = Result(broker=name, records=n, load_before=os.getloadavg()[0])
    source = workdir / "lines.txt"
    if not source.exists():
        source.write_text("".join(f"{i:07d} benchmark log line from a file\n" for i in range(n)))

    # emit-log, nothing bound
    ex = f"bench-logs-{uuid.uuid4().hex[:8]}"
    result.emit_rate = n / run_emit(url, ex, source)

    # emit-log to a file receiver, end to end
    ex = f"bench-logs-{uuid.uuid4().hex[:8]}"
    receiver = FileReceiver(url, ex, workdir / f"{name}-emit.jsonl")
    try:
        start = time.monotonic()
        run_emit(url, ex, source)
        result.emit_to_file_rate = n / (receiver.wait_for(n) - start)
    finally:
        receiver.stop()

    # the handler, counted on a receiver
    ex = f"bench-logs-{uuid.uuid4().hex[:8]}"
    receiver = FileReceiver(url, ex, workdir / f"{name}-handler.jsonl")
    handler = AMQPHandler(url, exchange=ex, timeout=600)
    try:
        deadline = time.monotonic() + 30
        while not handler.stats.connected and time.monotonic() < deadline:
            time.sleep(0.01)
        logger = fresh_logger(handler)
        start = time.monotonic()
        took, latencies = burst(logger, n)
        handler.flush()
        confirmed_at = time.monotonic()
        stats = handler.stats
        delivered_at = receiver.wait_for(stats.confirmed)
        result.handler_call_rate = n / took
        result.handler_confirmed_rate = stats.confirmed / (confirmed_at - start)
        result.handler_delivered_rate = stats.confirmed / (delivered_at - start)
        result.handler_delivered = receiver.lines()
        result.handler_dropped = stats.dropped
        result.latency_us = percentiles(latencies)
    finally:
        handler.close()
        receiver.stop()

    # the handler alone (nothing bound, no receiver competing for the CPUs), as a shipper
    # process and as a thread
    result.alone_call_rate, result.alone_confirmed_rate, result.alone_latency_us = alone(
        url, n, process=True)
    result.thread_call_rate, result.thread_confirmed_rate, result.thread_latency_us = alone(
        url, n, process=False)
    cpus = os.sched_getaffinity(0)
    if broker_pid is not None and len(cpus) >= 2 and 0 in cpus:
        result.pinned_process_latency_us = alone(url, n, process=True, pinned_broker=broker_pid)[2]
        result.pinned_thread_latency_us = alone(url, n, process=False, pinned_broker=broker_pid)[2]

    # baseline: encoding only
    base = EncodeOnlyHandler()
    _, latencies = burst(fresh_logger(base), n)
    result.baseline_latency_us = percentiles(latencies)
    result.load_after = os.getloadavg()[0]
    return result


# ------------------------------------------------------------------ report


def report(results: list[Result]) -> None:
    def row(label: str, values: list[str]) -> None:
        print(f"  {label:<38}" + "".join(f"{v:>16}" for v in values))

    print()
    row("", [r.broker for r in results])
    row("records", [f"{r.records:,}" for r in results])
    row("emit-log from a file, records/s", [f"{r.emit_rate:,.0f}" for r in results])
    row("emit-log -> receive-logs --to, rec/s", [f"{r.emit_to_file_rate:,.0f}" for r in results])
    row("handler: logging calls/s", [f"{r.handler_call_rate:,.0f}" for r in results])
    row("handler: confirmed records/s", [f"{r.handler_confirmed_rate:,.0f}" for r in results])
    row("handler: at the receiver, records/s", [f"{r.handler_delivered_rate:,.0f}"
                                                for r in results])
    row("handler: delivered / dropped", [f"{r.handler_delivered:,} / {r.handler_dropped}"
                                         for r in results])
    for key in ("p50", "p99", "p99.9", "max"):
        row(f"handler call latency {key}, us", [f"{r.latency_us[key]:,.1f}" for r in results])
    row("handler calls over 1 ms", [f"{r.latency_us['over_1ms']:,.0f}" for r in results])
    row("handler alone: calls/s", [f"{r.alone_call_rate:,.0f}" for r in results])
    row("handler alone: confirmed records/s", [f"{r.alone_confirmed_rate:,.0f}"
                                               for r in results])
    for key in ("p50", "p99", "p99.9", "max"):
        row(f"handler alone: latency {key}, us",
            [f"{r.alone_latency_us[key]:,.1f}" for r in results])
    row("handler alone: calls over 1 ms", [f"{r.alone_latency_us['over_1ms']:,.0f}"
                                           for r in results])
    row("thread alone: calls/s", [f"{r.thread_call_rate:,.0f}" for r in results])
    row("thread alone: confirmed records/s", [f"{r.thread_confirmed_rate:,.0f}"
                                              for r in results])
    for key in ("p50", "p99", "p99.9", "max"):
        row(f"thread alone: latency {key}, us",
            [f"{r.thread_latency_us[key]:,.1f}" for r in results])
    row("thread alone: calls over 1 ms", [f"{r.thread_latency_us['over_1ms']:,.0f}"
                                          for r in results])
    for label, attr in (("pinned, shipper", "pinned_process_latency_us"),
                        ("pinned, thread", "pinned_thread_latency_us")):
        if all(getattr(r, attr) for r in results):
            for key in ("p99", "p99.9", "max"):
                row(f"{label}: latency {key}, us",
                    [f"{getattr(r, attr)[key]:,.1f}" for r in results])
            row(f"{label}: calls over 1 ms",
                [f"{getattr(r, attr)['over_1ms']:,.0f}" for r in results])
    for key in ("p50", "p99", "max"):
        row(f"baseline (encode only) {key}, us",
            [f"{r.baseline_latency_us[key]:,.1f}" for r in results])
    row("baseline calls over 1 ms", [f"{r.baseline_latency_us['over_1ms']:,.0f}"
                                     for r in results])
    row("load average before / after", [f"{r.load_before:.1f} / {r.load_after:.1f}"
                                        for r in results])
    if len(results) == 2 and results[1].emit_rate:
        a, b = results
        print()
        print(f"  {a.broker}/{b.broker}: emit-log {a.emit_rate / b.emit_rate:.2f}, "
              f"emit-log -> file {a.emit_to_file_rate / b.emit_to_file_rate:.2f}, "
              f"handler at the receiver "
              f"{a.handler_delivered_rate / b.handler_delivered_rate:.2f}")
    print(f"\n  {os.cpu_count()} CPUs; Python {sys.version.split()[0]}; "
          f"switch interval {sys.getswitchinterval() * 1e3:.0f} ms")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else "")
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--brokers", default="leveret,rabbitmq")
    parser.add_argument("--rabbitmq", default="amqp://guest:guest@127.0.0.1:5672/")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args(argv)
    logging.getLogger("pika").setLevel(logging.CRITICAL)

    results: list[Result] = []
    with tempfile.TemporaryDirectory(prefix="bench-logs-") as tmp:
        workdir = Path(tmp)
        for name in args.brokers.split(","):
            if name == "leveret":
                print("leveret: starting a server ...", flush=True)
                with leveret_broker() as (url, pid):
                    results.append(measure("leveret", url, args.records, workdir, pid))
            elif name == "rabbitmq":
                if not reachable(args.rabbitmq):
                    print(f"rabbitmq: not reachable at {args.rabbitmq}; skipped")
                    continue
                print("rabbitmq: measuring ...", flush=True)
                results.append(measure("rabbitmq", args.rabbitmq, args.records, workdir,
                                       rabbitmq_pid()))
            else:
                parser.error(f"unknown broker {name!r}")
    if not results:
        return 1
    report(results)
    if args.json:
        args.json.write_text(json.dumps([asdict(r) for r in results], indent=2))
    return 0


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(main())
    sys.exit(130)

