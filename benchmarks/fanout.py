"""Fanout throughput: Leveret against RabbitMQ, same load, same run.

Scenarios (1 producer -> fanout exchange -> 2 server-named exclusive queues, one consumer
each, 100-byte bodies):

  a  no confirms, no-ack consumers
  b  publisher confirms (window of unconfirmed publishes), manual acks with prefetch 100,
     acked with multiple=true every ``--ack-every`` deliveries
  c  as b, but published at a fixed ``--rate`` that both brokers sustain, in batches of
     ``--rate-batch``: the confirm latency of a broker that is not saturated

With confirms (b, c) the producer times each batch from its send to the confirm that
covers all of it; the tables give the median, p99 and p99.9 of those latencies.

Leveret is started here (free ports, temporary data dir, a fresh broker per run);
RabbitMQ is used where reachable. The load generator (benchmarks/loadgen.py) runs one
process per role on blocking raw sockets; ``--self-test`` measures its own ceiling.

    python benchmarks/fanout.py [--seconds N] [--brokers leveret,rabbitmq] [--json out.json]
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import itertools
import json
import multiprocessing as mp
import os
import platform
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from array import array
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent))

import loadgen
import spy_summary

CTX = mp.get_context("fork")
CLK_TCK = os.sysconf("SC_CLK_TCK")
# Wide enough for the result tables when piped to a file (rich assumes 80 columns).
console = Console() if sys.stdout.isatty() else Console(width=132)

CASES = {
    "a": "no confirms, no-ack consumers",
    "b": "confirms + manual acks (prefetch)",
    "c": "confirms + manual acks (prefetch) at a fixed rate",
}


# ------------------------------------------------------------------- results
@dataclass
class CaseResult:
    broker: str
    case: str
    seconds: float
    published_per_s: float
    consumer_per_s: list[float]
    confirmed_per_s: float | None = None
    # per-second delivery rate of the slowest consumer: stability of the steady state
    consumer_min_1s: float = 0.0
    consumer_max_1s: float = 0.0
    backlog_end: int = 0  # published minus received by the slowest consumer
    broker_cpu_pct: float | None = None  # of one core
    generator_cpu_pct: float | None = None  # all generator processes, of one core
    # CPU used by everything else on the machine meanwhile (noise), of one core
    other_cpu_pct: float | None = None
    # publish -> confirm of each batch sent in the measured window, in ms
    confirm_ms_p50: float | None = None
    confirm_ms_p99: float | None = None
    confirm_ms_p999: float | None = None
    confirm_ms_max: float | None = None
    error: str | None = None

    @property
    def delivered_per_s(self) -> float:
        """Mean messages/s received per consumer."""
        if not self.consumer_per_s:
            return 0.0
        return sum(self.consumer_per_s) / len(self.consumer_per_s)


@dataclass
class SelfTest:
    producer_per_s: float
    producer_confirms_per_s: float
    consumer_noack_per_s: float
    consumer_ack_per_s: float
    parse_per_s: float
    notes: list[str] = field(default_factory=list)


# --------------------------------------------------------------- processes
def cpu_seconds(pid: int) -> float | None:
    """utime + stime of a process (all threads), from /proc."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def machine_busy_seconds() -> float:
    """CPU seconds spent not idle, summed over all cores, from /proc/stat."""
    with open("/proc/stat") as f:
        values = [int(v) for v in f.readline().split()[1:]]
    idle = values[3] + (values[4] if len(values) > 4 else 0)
    return (sum(values[:8]) - idle) / CLK_TCK


def wait_idle(max_wait: float, threshold: float = 25.0) -> float:
    """Wait (at most ``max_wait`` s) until the machine is nearly idle: other processes
    use under ``threshold`` % of one core over a 1 s sample. Returns the last sample."""
    deadline = time.monotonic() + max_wait
    told = False
    while True:
        before = machine_busy_seconds()
        time.sleep(1.0)
        busy = 100 * (machine_busy_seconds() - before)
        if busy <= threshold or time.monotonic() >= deadline:
            return busy
        if not told:
            console.print(f"[dim]machine busy ({busy:.0f}% of a core), waiting...[/dim]")
            told = True


def find_rabbitmq_pid() -> int | None:
    """The Erlang VM running RabbitMQ on this machine, if any."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmd = f.read()
        except OSError:
            continue
        if b"beam.smp" in cmd and b"rabbit" in cmd:
            return int(entry)
    return None


class Leveret:
    """``leveret server`` on a free port with a temporary data dir; optionally under
    cProfile. Always torn down by :meth:`stop` (SIGTERM, then SIGKILL)."""

    def __init__(self, profile_to: Path | None = None, src: Path | None = None) -> None:
        self.data_dir = Path(tempfile.mkdtemp(prefix="leveret-bench-"))
        self.log_path = self.data_dir / "server.log"
        self.process: subprocess.Popen[str] | None = None
        self.port = 0
        self.profile_to = profile_to
        self.src = src  # import leveret from here instead of the installed one

    def start(self, timeout: float = 30.0) -> None:
        runner = ["-m", "leveret.cli.main"]
        if self.profile_to is not None:
            runner = ["-m", "cProfile", "-o", str(self.profile_to), *runner]
        cmd = [
            sys.executable,
            *runner,
            "server",
            "--amqp-port",
            "0",
            "--bind",
            "127.0.0.1",
            "--data-dir",
            str(self.data_dir / "data"),
            "--log-level",
            "warning",
        ]
        # Free ports for the management listeners too (older builds ignore these).
        env = {
            **os.environ,
            "LEVERET_HTTP_PORT": "0",
            "LEVERET_PROMETHEUS_PORT": "0",
            "LEVERET_STREAM_PORT": "0",
        }
        if self.src is not None:
            env["PYTHONPATH"] = os.pathsep.join(
                p for p in (str(self.src), os.environ.get("PYTHONPATH", "")) if p
            )
        log = open(self.log_path, "w")  # noqa: SIM115 - handed to the child
        try:
            # Own session: Ctrl-C reaches only us; we stop the server ourselves.
            self.process = subprocess.Popen(
                cmd,
                stdout=subprocess.PIPE,
                stderr=log,
                text=True,
                env=env,
                start_new_session=True,
            )
        finally:
            log.close()
        stdout = self.process.stdout
        assert stdout is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            line = stdout.readline()
            if not line:
                break
            if match := re.search(r"amqp://[^\s:/]+:(\d+)", line):
                self.port = int(match.group(1))
                # Keep reading whatever else it prints, so a full pipe never blocks it.
                threading.Thread(target=stdout.read, daemon=True).start()
                return
        raise RuntimeError("leveret did not start: " + self.log_path.read_text()[-2000:])

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    def stop(self) -> None:
        proc = self.process
        try:
            if proc is not None and proc.poll() is None:
                proc.send_signal(signal.SIGTERM)  # graceful: cProfile writes its output
                proc.wait(15)
        except subprocess.TimeoutExpired:
            pass
        finally:  # also when a second Ctrl-C cuts the wait short
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait(5)
            shutil.rmtree(self.data_dir, ignore_errors=True)


@contextlib.contextmanager
def workers() -> Iterator[list[mp.process.BaseProcess]]:
    """Processes started inside are stopped on the way out, whatever happens."""
    procs: list[mp.process.BaseProcess] = []
    try:
        yield procs
    finally:
        try:
            for p in procs:
                p.join(timeout=4)  # they saw the stop flag: let them close their connections
        finally:  # even when a second Ctrl-C cuts the wait short
            for p in procs:
                if p.is_alive():
                    p.terminate()
                    p.join(timeout=2)
                if p.is_alive():
                    p.kill()
                    p.join()


def wait_ready(
    status: Any, roles: set[str], procs: Sequence[mp.process.BaseProcess], timeout: float = 15.0
) -> dict[str, int]:
    pids: dict[str, int] = {}
    deadline = time.monotonic() + timeout
    while roles - set(pids):
        left = deadline - time.monotonic()
        if left <= 0:
            raise RuntimeError(f"timed out waiting for {sorted(roles - set(pids))}")
        try:
            kind, role, info = status.get(timeout=min(left, 0.5))
        except Exception:
            if any(p.exitcode not in (None, 0) for p in procs):
                raise RuntimeError("a load generator process died during setup") from None
            continue
        if kind == "error":
            raise RuntimeError(f"{role}: {info}")
        pids[role] = info
    return pids


def check_errors(status: Any, latencies: array | None = None) -> str | None:
    """The errors the workers reported; their latency samples go into ``latencies``."""
    errors = []
    while True:
        try:
            kind, role, info = status.get(timeout=0.2)
        except Exception:
            break
        if kind == "error":
            errors.append(f"{role}: {info}")
        elif kind == "latency" and latencies is not None:
            latencies.frombytes(info)
    return "; ".join(errors) or None


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """The nearest-rank ``q`` quantile (0 < q <= 1) of values sorted ascending."""
    rank = max(1, -(-int(q * 1_000_000) * len(sorted_values) // 1_000_000))
    return sorted_values[rank - 1]


# ------------------------------------------------------------------ one run
@dataclass
class Load:
    seconds: float
    warmup: float
    body_size: int
    batch: int
    backlog: int
    confirm_window: int
    prefetch: int
    ack_every: int
    lowat: bool = True
    consumers: int = 2
    rate: float = 10_000.0  # case c: messages/s
    rate_batch: int = 10  # case c: publishes per send


def run_case(
    broker: str,
    host: str,
    port: int,
    case: str,
    load: Load,
    broker_pid: int | None,
    on_measure: Callable[[], None] | None = None,
) -> CaseResult:
    exchange = f"bench.fanout.{uuid.uuid4().hex[:12]}"
    counts = CTX.RawArray(ctypes.c_uint64, loadgen.N_COUNTERS)
    ctl = CTX.RawArray(ctypes.c_int, 1)
    status = CTX.Queue()
    slots = [loadgen.CONSUMER0 + i for i in range(load.consumers)]
    confirms = case in ("b", "c")
    prefetch = load.prefetch if confirms else 0
    # Deliveries the broker may have in flight to one consumer: the low-water mark of
    # the consumers' reads stays well below their bytes.
    in_flight = (load.prefetch - load.ack_every) if confirms else (load.backlog or 1000)
    if case == "c":  # at a low rate a consumer must not wait for a batch to fill
        in_flight = 0
    lowat = loadgen.safe_lowat(load.body_size, in_flight) if load.lowat else 0
    result = CaseResult(broker, case, load.seconds, 0.0, [])
    with workers() as procs:
        try:
            for slot in slots:
                procs.append(
                    CTX.Process(
                        target=loadgen.consumer_worker,
                        daemon=True,
                        args=(
                            host,
                            port,
                            exchange,
                            slot,
                            prefetch,
                            load.ack_every,
                            lowat,
                            counts,
                            ctl,
                            status,
                        ),
                    )
                )
                procs[-1].start()
            pids = wait_ready(status, {f"consumer{i}" for i in range(load.consumers)}, procs)
            procs.append(
                CTX.Process(
                    target=loadgen.producer_worker,
                    daemon=True,
                    args=(
                        host,
                        port,
                        exchange,
                        load.body_size,
                        load.rate_batch if case == "c" else load.batch,
                        load.confirm_window if confirms else 0,
                        load.backlog,
                        slots,
                        counts,
                        ctl,
                        status,
                        load.rate if case == "c" else 0.0,
                    ),
                )
            )
            procs[-1].start()
            pids.update(wait_ready(status, {"producer"}, procs))
            time.sleep(load.warmup)

            def snapshot() -> tuple[float, list[int], float | None, float | None, float]:
                gen = [cpu_seconds(pid) for pid in pids.values()]
                return (
                    time.monotonic(),
                    list(counts),
                    cpu_seconds(broker_pid) if broker_pid else None,
                    None if None in gen else sum(g for g in gen if g is not None),
                    machine_busy_seconds(),
                )

            if on_measure is not None:
                on_measure()
            first = snapshot()
            samples = [first]
            end = first[0] + load.seconds
            while (now := time.monotonic()) < end:
                time.sleep(min(1.0, end - now))
                samples.append(snapshot())
                if any(not p.is_alive() for p in procs):
                    break
            last = samples[-1]
        finally:
            ctl[0] = 1
        latencies = array("d")
        error = check_errors(status, latencies)
    elapsed = last[0] - first[0]
    if error or elapsed <= 0:
        result.error = error or "no measurement"
        return result
    c0, c1 = first[1], last[1]
    result.seconds = elapsed
    result.published_per_s = (c1[loadgen.PUBLISHED] - c0[loadgen.PUBLISHED]) / elapsed
    if confirms:
        result.confirmed_per_s = (c1[loadgen.CONFIRMED] - c0[loadgen.CONFIRMED]) / elapsed
    result.consumer_per_s = [(c1[s] - c0[s]) / elapsed for s in slots]
    per_second = []
    for a, b in itertools.pairwise(samples):
        dt = b[0] - a[0]
        if dt > 0.5:
            per_second.append(min(b[1][s] - a[1][s] for s in slots) / dt)
    if per_second:
        result.consumer_min_1s = min(per_second)
        result.consumer_max_1s = max(per_second)
    result.backlog_end = c1[loadgen.PUBLISHED] - min(c1[s] for s in slots)
    # (sent at, latency) pairs; only batches sent in the measured window
    window = sorted(
        latencies[i + 1] * 1000
        for i in range(0, len(latencies), 2)
        if first[0] <= latencies[i] <= last[0]
    )
    if window:
        result.confirm_ms_p50 = percentile(window, 0.5)
        result.confirm_ms_p99 = percentile(window, 0.99)
        result.confirm_ms_p999 = percentile(window, 0.999)
        result.confirm_ms_max = window[-1]
    if first[2] is not None and last[2] is not None:
        result.broker_cpu_pct = 100 * (last[2] - first[2]) / elapsed
    if first[3] is not None and last[3] is not None:
        result.generator_cpu_pct = 100 * (last[3] - first[3]) / elapsed
    if result.broker_cpu_pct is not None and result.generator_cpu_pct is not None:
        busy = 100 * (last[4] - first[4]) / elapsed
        result.other_cpu_pct = max(0.0, busy - result.broker_cpu_pct - result.generator_cpu_pct)
    return result


# ---------------------------------------------------------------- self-test
def _self_test_run(kind: str, seconds: float, load: Load) -> float:
    """Rate of the generator against a fake broker that costs next to nothing."""
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    counts = CTX.RawArray(ctypes.c_uint64, loadgen.N_COUNTERS)
    ctl = CTX.RawArray(ctypes.c_int, 1)
    status = CTX.Queue()
    unit = loadgen.publish_unit("bench.fanout.selftest00", load.body_size)
    with workers() as procs:
        try:
            if kind.startswith("producer"):
                window = load.confirm_window if kind == "producer-confirms" else 0
                procs.append(
                    CTX.Process(
                        target=loadgen.sink_worker,
                        daemon=True,
                        args=(listener, len(unit) if window else 0, ctl, status),
                    )
                )
                procs.append(
                    CTX.Process(
                        target=loadgen.self_test_producer,
                        daemon=True,
                        args=(port, unit, load.batch, window, counts, ctl, status),
                    )
                )
                slot = loadgen.PUBLISHED
            else:
                stream = canned_deliveries(load.body_size)[0]
                ack_every = load.ack_every if kind == "consumer-ack" else 0
                in_flight = load.prefetch - load.ack_every if ack_every else load.backlog or 1000
                lowat = loadgen.safe_lowat(load.body_size, in_flight) if load.lowat else 0
                procs.append(
                    CTX.Process(
                        target=loadgen.source_worker,
                        daemon=True,
                        args=(listener, stream, ctl, status),
                    )
                )
                procs.append(
                    CTX.Process(
                        target=loadgen.self_test_consumer,
                        daemon=True,
                        args=(port, ack_every, lowat, counts, ctl, status),
                    )
                )
                slot = loadgen.CONSUMER0
            for p in procs:
                p.start()
            listener.close()
            time.sleep(0.5)
            t0, n0 = time.perf_counter(), counts[slot]
            time.sleep(seconds)
            t1, n1 = time.perf_counter(), counts[slot]
        finally:
            ctl[0] = 1
            listener.close()
    error = check_errors(status)
    if error:
        raise RuntimeError(f"self-test {kind}: {error}")
    return (n1 - n0) / (t1 - t0)


def canned_deliveries(body_size: int, n: int = 1000) -> tuple[bytes, int]:
    tag = "amq.ctag-" + "x" * 22  # as long as RabbitMQ's server-named tags
    stream = b"".join(
        loadgen.deliver_unit(tag, "bench.fanout.selftest00", i, body_size) for i in range(1, n + 1)
    )
    return stream, n


def self_test(load: Load, seconds: float) -> SelfTest:
    stream, n = canned_deliveries(load.body_size)
    return SelfTest(
        producer_per_s=_self_test_run("producer", seconds, load),
        producer_confirms_per_s=_self_test_run("producer-confirms", seconds, load),
        consumer_noack_per_s=_self_test_run("consumer-noack", seconds, load),
        consumer_ack_per_s=_self_test_run("consumer-ack", seconds, load),
        parse_per_s=loadgen.parse_rate(stream, n, 1.0),
        notes=[
            "each figure: one generator process against a fake peer in another "
            "process over loopback TCP (2 processes on this machine's "
            f"{os.cpu_count()} cores); parse: in memory, no sockets"
        ],
    )


# ---------------------------------------------------------------- reporting
def _rate(x: float | None) -> str:
    return "-" if x is None else f"{x:,.0f}"


def _latency(r: CaseResult) -> str:
    if r.confirm_ms_p50 is None:
        return "-"
    return f"{r.confirm_ms_p50:.1f}/{r.confirm_ms_p99:.1f}/{r.confirm_ms_p999:.1f}"


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:.0f}%"


def print_self_test(st: SelfTest) -> None:
    table = Table(title="Generator ceiling, msg/s")
    table.add_column("one process against a fake peer")
    table.add_column("msg/s", justify="right")
    table.add_row("producer, no confirms", _rate(st.producer_per_s))
    table.add_row("producer, confirms (window)", _rate(st.producer_confirms_per_s))
    table.add_row("consumer, no-ack", _rate(st.consumer_noack_per_s))
    table.add_row("consumer, acks (multiple)", _rate(st.consumer_ack_per_s))
    table.add_row("frame parse, in memory", _rate(st.parse_per_s))
    console.print(table)


def median_runs(results: list[CaseResult]) -> list[CaseResult]:
    """Per broker and case, the run with the median delivery rate (lower median)."""
    groups: dict[tuple[str, str], list[CaseResult]] = {}
    for r in results:
        groups.setdefault((r.broker, r.case), []).append(r)
    out = []
    for runs in groups.values():
        good = sorted((r for r in runs if not r.error), key=lambda r: r.delivered_per_s)
        out.append(good[(len(good) - 1) // 2] if good else runs[0])
    return out


def print_results(results: list[CaseResult], load: Load, repeat: int) -> None:
    for case, title in CASES.items():
        rows = [r for r in results if r.case == case]
        if not rows:
            continue
        runs = f"median of {repeat} runs, " if repeat > 1 else ""
        table = Table(
            title=f"({case}) fanout 1 -> {load.consumers}, {load.body_size} B "
            f"bodies: {title}; msg/s, {runs}{load.seconds:g} s after "
            f"{load.warmup:g} s warm-up"
        )
        table.add_column("broker", no_wrap=True)
        table.add_column("published", justify="right")
        if case != "a":
            table.add_column("confirmed", justify="right")
        for i in range(load.consumers):
            table.add_column(f"consumer\n{i + 1}", justify="right")
        table.add_column("per\nconsumer", justify="right", style="bold")
        if case != "a":
            table.add_column("confirm ms\np50/p99/p99.9", justify="right", no_wrap=True)
        table.add_column("slowest 1 s\nmin-max", justify="right", no_wrap=True)
        table.add_column("backlog\nat end", justify="right")
        table.add_column("CPU\nbroker", justify="right")
        table.add_column("CPU\ngenerator", justify="right")
        table.add_column("CPU\nother", justify="right")
        for r in rows:
            if r.error:
                table.add_row(r.broker, f"[red]error: {r.error}[/red]")
                continue
            cells = [r.broker, _rate(r.published_per_s)]
            if case != "a":
                cells.append(_rate(r.confirmed_per_s))
            cells += [_rate(x) for x in r.consumer_per_s]
            cells += [_rate(r.delivered_per_s)]
            if case != "a":
                cells.append(_latency(r))
            cells += [
                f"{_rate(r.consumer_min_1s)}-{_rate(r.consumer_max_1s)}",
                f"{r.backlog_end:,}",
                _pct(r.broker_cpu_pct),
                _pct(r.generator_cpu_pct),
                _pct(r.other_cpu_pct),
            ]
            table.add_row(*cells)
        ratio = ratios(rows)
        if ratio is not None:
            cells = ["Leveret/RabbitMQ", f"{ratio['published']:.2f}"]
            if case != "a":
                cells.append(f"{ratio['confirmed']:.2f}")
            cells += [""] * load.consumers + [f"{ratio['delivered']:.2f}"]
            if case != "a" and "confirm_p99" in ratio:
                cells.append(f"p99 {ratio['confirm_p99']:.2f}")
            table.add_row(*cells, style="cyan")
        console.print(table)


def ratios(rows: list[CaseResult]) -> dict[str, float] | None:
    by = {r.broker: r for r in rows if not r.error}
    lev, rmq = by.get("leveret"), by.get("rabbitmq")
    if lev is None or rmq is None or not rmq.delivered_per_s or not rmq.published_per_s:
        return None
    out = {
        "delivered": lev.delivered_per_s / rmq.delivered_per_s,
        "published": lev.published_per_s / rmq.published_per_s,
    }
    if lev.confirmed_per_s is not None and rmq.confirmed_per_s:
        out["confirmed"] = lev.confirmed_per_s / rmq.confirmed_per_s
    if lev.confirm_ms_p99 is not None and rmq.confirm_ms_p99:
        out["confirm_p99"] = lev.confirm_ms_p99 / rmq.confirm_ms_p99
    return out


# --------------------------------------------------------------------- main
def rabbitmq_reachable(host: str, port: int) -> tuple[str | None, str]:
    """(None, version) when an AMQP handshake as guest works, else (why not, "")."""
    try:
        conn = loadgen.SetupConnection(host, port, timeout=3.0)
    except (OSError, loadgen.BrokerClosed) as exc:
        return f"{host}:{port} not reachable ({exc})", ""
    version = conn.server_properties.get("version", b"")
    conn.close()
    return None, version.decode() if isinstance(version, bytes) else str(version)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seconds", type=float, default=10.0, help="measured steady state")
    p.add_argument("--warmup", type=float, default=2.0, help="not measured, before it")
    p.add_argument(
        "--brokers", default="leveret,rabbitmq", help="comma-separated: leveret, rabbitmq"
    )
    p.add_argument("--cases", default="a,b,c", help="comma-separated: a, b, c")
    p.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="runs per broker and case, alternating brokers; report the median",
    )
    p.add_argument(
        "--wait-idle",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="before each run, wait up to this long for other processes to go quiet "
        "(shared machines); the 'CPU other' column shows what was left",
    )
    p.add_argument("--json", type=Path, help="also write the results here")
    p.add_argument(
        "--self-test", action="store_true", help="only measure the load generator's own ceiling"
    )
    p.add_argument(
        "--skip-self-test",
        action="store_true",
        help="do not measure the generator's ceiling before the brokers",
    )
    p.add_argument("--self-test-seconds", type=float, default=3.0)
    p.add_argument("--body-size", type=int, default=100)
    p.add_argument(
        "--batch", type=int, default=100, help="publishes per send() of the pre-built buffer"
    )
    p.add_argument(
        "--backlog",
        type=int,
        default=1000,
        help="most messages the producer may be ahead of the slowest "
        "consumer (0: unbounded, only TCP back-pressure and the broker's "
        "flow control)",
    )
    p.add_argument(
        "--confirm-window", type=int, default=1000, help="case b: most unconfirmed publishes"
    )
    p.add_argument("--prefetch", type=int, default=100, help="cases b, c: basic.qos per consumer")
    p.add_argument("--rate", type=float, default=10_000.0, help="case c: messages/s")
    p.add_argument("--rate-batch", type=int, default=10, help="case c: publishes per send")
    p.add_argument(
        "--ack-every",
        type=int,
        default=50,
        help="case b: one basic.ack(multiple) per this many deliveries",
    )
    p.add_argument(
        "--no-lowat",
        action="store_true",
        help="consumers wake for every segment (no SO_RCVLOWAT): costs the generator more CPU",
    )
    p.add_argument(
        "--leveret-src",
        type=Path,
        help="run Leveret from this src/ directory (e.g. a git worktree of another commit)",
    )
    p.add_argument("--rabbitmq", default="127.0.0.1:5672", help="host:port")
    p.add_argument(
        "--profile-dir",
        type=Path,
        help="run Leveret under cProfile; write <dir>/leveret-<case>-<run>.prof",
    )
    p.add_argument(
        "--py-spy-dir",
        type=Path,
        help="record Leveret with py-spy during each measurement; write "
        "<dir>/leveret-<case>-<run>.txt (collapsed stacks)",
    )
    return p.parse_args(argv)


def leveret_commit(src: Path | None = None) -> str | None:
    """HEAD of the checkout Leveret runs from (``src`` or the one this file lives in),
    with "+dirty" when its src/ has uncommitted edits."""
    root = src.resolve().parent if src is not None else Path(__file__).resolve().parent.parent
    try:
        head = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "--", "src"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None if src is None else f"from {src}"
    return head + ("+dirty" if dirty else "")


def _terminate(signum: int, _frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, _terminate)
    signal.signal(signal.SIGINT, signal.default_int_handler)  # even if started ignored
    load = Load(
        seconds=args.seconds,
        warmup=args.warmup,
        body_size=args.body_size,
        batch=args.batch,
        backlog=args.backlog,
        confirm_window=args.confirm_window,
        prefetch=args.prefetch,
        ack_every=args.ack_every,
        lowat=not args.no_lowat,
        rate=args.rate,
        rate_batch=args.rate_batch,
    )
    brokers = [b.strip() for b in args.brokers.split(",") if b.strip()]
    cases = [c.strip() for c in args.cases.split(",") if c.strip()]
    if unknown := (set(brokers) - {"leveret", "rabbitmq"}) | (set(cases) - set(CASES)):
        print(f"Error: unknown broker or case: {', '.join(sorted(unknown))}", file=sys.stderr)
        return 2
    report: dict[str, Any] = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": {
            "cores": os.cpu_count(),
            "python": platform.python_version(),
            "platform": platform.platform(),
        },
        "load": asdict(load),
        "leveret_commit": leveret_commit(args.leveret_src),
    }
    try:
        if not args.skip_self_test or args.self_test:
            console.print("[dim]measuring the load generator's ceiling...[/dim]")
            st = self_test(load, args.self_test_seconds)
            print_self_test(st)
            report["self_test"] = asdict(st)
        if args.self_test:
            return _write_json(args.json, report)
        results = run_all(args, load, brokers, cases)
    except KeyboardInterrupt:
        print("interrupted; everything started was stopped", file=sys.stderr)
        return 130
    except (RuntimeError, OSError) as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return 1
    report["rabbitmq_version"] = getattr(args, "rabbitmq_version", None)
    console.print(
        f"[dim]Leveret {report['leveret_commit']}, RabbitMQ "
        f"{report['rabbitmq_version'] or '-'} at {args.rabbitmq}; {os.cpu_count()} cores[/dim]"
    )
    summary = median_runs(results)
    report["repeat"] = args.repeat
    report["runs"] = [{**asdict(r), "delivered_per_s": r.delivered_per_s} for r in results]
    report["results"] = [{**asdict(r), "delivered_per_s": r.delivered_per_s} for r in summary]
    report["ratios"] = {c: ratios([r for r in summary if r.case == c]) for c in cases}
    print_results(summary, load, args.repeat)
    _write_json(args.json, report)
    return 1 if any(r.error for r in summary) else 0


def _write_json(path: Path | None, report: dict[str, Any]) -> int:
    if path is not None:
        path.write_text(json.dumps(report, indent=2) + "\n")
        console.print(f"[dim]wrote {path}[/dim]")
    return 0


def run_all(
    args: argparse.Namespace, load: Load, brokers: list[str], cases: list[str]
) -> list[CaseResult]:
    """Every case on every broker, ``--repeat`` times, brokers alternating."""
    results: list[CaseResult] = []
    rmq_host, _, rmq_port = args.rabbitmq.rpartition(":")
    for rep in range(args.repeat):
        for case in cases:
            for broker in brokers:
                if args.wait_idle:
                    wait_idle(args.wait_idle)
                console.print(
                    f"[dim]case {case} on {broker} (run {rep + 1}/{args.repeat})...[/dim]"
                )
                if broker == "leveret":
                    results.append(run_leveret(args, load, case, f"{case}-{rep + 1}"))
                    continue
                why, version = rabbitmq_reachable(rmq_host, int(rmq_port))
                if version:
                    args.rabbitmq_version = version
                if why is not None:
                    console.print(f"[yellow]skipping RabbitMQ: {why}[/yellow]")
                    continue
                results.append(
                    run_case("rabbitmq", rmq_host, int(rmq_port), case, load, find_rabbitmq_pid())
                )
    return results


def run_leveret(args: argparse.Namespace, load: Load, case: str, label: str) -> CaseResult:
    """One case on a fresh Leveret, optionally under cProfile or watched by py-spy."""
    profile_to = None
    if args.profile_dir is not None:
        args.profile_dir.mkdir(parents=True, exist_ok=True)
        profile_to = (args.profile_dir / f"leveret-{label}.prof").resolve()
    server = Leveret(profile_to, args.leveret_src)
    spies: list[subprocess.Popen[bytes]] = []

    def start_spy() -> None:
        if args.py_spy_dir is None or server.pid is None:
            return
        args.py_spy_dir.mkdir(parents=True, exist_ok=True)
        out = args.py_spy_dir / f"leveret-{label}.txt"
        spies.append(
            subprocess.Popen(
                [
                    "py-spy",
                    "record",
                    "--pid",
                    str(server.pid),
                    "--format",
                    "raw",
                    "--rate",
                    "250",
                    "--duration",
                    str(max(1, int(load.seconds))),
                    "--output",
                    str(out),
                    "--nonblocking",
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        )

    try:
        server.start()
        return run_case("leveret", "127.0.0.1", server.port, case, load, server.pid, start_spy)
    finally:
        try:
            for spy in spies:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    spy.wait(load.seconds + 15)
        finally:
            for spy in spies:
                if spy.poll() is None:
                    spy.kill()
                    spy.wait()
            server.stop()
        if spies and args.py_spy_dir is not None:
            out = args.py_spy_dir / f"leveret-{label}.txt"
            if out.exists():
                console.print(spy_summary.report(out, top=12), markup=False, highlight=False)


if __name__ == "__main__":
    sys.exit(main())
