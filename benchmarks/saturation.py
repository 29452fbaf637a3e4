"""Saturating and paced load from a compiled client: Leveret against RabbitMQ, same run.

The load generator is ``benchmarks/satgen/main.go`` on the unmodified amqp091-go client
(Debian's golang-github-rabbitmq-amqp091-go-dev, built here offline in GOPATH mode and
cached). One producer and N consumers, 100-byte bodies; the producer publishes as fast as
its confirm window allows (or as fast as the socket takes it, without confirms), or at a
fixed rate. It times every message from its publish to its delivery, and every publish to
its confirm, on one monotonic clock.

    python benchmarks/saturation.py                   # all cases, 3 rounds of 10 s
    python benchmarks/saturation.py --quick           # all cases, 1 round of 3 s
    python benchmarks/saturation.py --cases confirm,durable --rounds 5
    python benchmarks/saturation.py --leveret main=/tmp/lev-main/src --leveret branch=src

Each round runs every case on every broker, the brokers' order turning round by round;
Leveret is started fresh for each run (free ports, temporary data dir); RabbitMQ is the
node at ``--rabbitmq``. The table gives medians over the rounds with min-max spreads, and
the ratio of each Leveret to RabbitMQ computed per round (paired) then its median.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import fanout

HERE = Path(__file__).resolve().parent
SOURCE = HERE / "satgen" / "main.go"
GOCODE = Path(os.environ.get("LEVERET_GOCODE", "/usr/share/gocode"))
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "leveret-bench"
INSTALL_HINT = "scripts/install-interop-deps (golang-go, golang-github-rabbitmq-amqp091-go-dev)"


@dataclass(frozen=True, slots=True)
class Case:
    title: str
    flags: tuple[str, ...]
    latency_goal: bool = False  # p50 and p99 at or below RabbitMQ's
    paced: bool = False  # p99 at most half of RabbitMQ's; no rate ratio


CASES: dict[str, Case] = {
    "fanout": Case("fanout, 1 producer, 2 consumers, no acks", ("-consumers", "2", "-no-ack")),
    "confirm": Case(
        "fanout, confirm window 100, 2 consumers prefetch 100 with acks",
        ("-consumers", "2", "-confirm", "100", "-prefetch", "100"),
        latency_goal=True,
    ),
    "fanout10": Case("fanout 1→10 consumers, no acks", ("-consumers", "10", "-no-ack")),
    "paced": Case(
        "fanout at a fixed 1,000 msg/s (confirms, acks)",
        ("-consumers", "2", "-confirm", "100", "-prefetch", "100", "-rate", "1000"),
        paced=True,
    ),
    "durable": Case(
        "durable queue, persistent, confirm window 100, 1 consumer prefetch 100",
        ("-topology", "queue", "-persistent", "-confirm", "100", "-consumers", "1"),
        latency_goal=True,
    ),
    "durable-idle": Case(
        "same, no consumer",
        ("-topology", "queue", "-persistent", "-confirm", "100", "-consumers", "0"),
    ),
}


# ------------------------------------------------------------------ the generator
def build_generator() -> Path:
    """The satgen binary, built once per source and Go version (cached)."""
    go = shutil.which("go")
    if go is None:
        raise RuntimeError(f"the Go toolchain is not installed: {INSTALL_HINT}")
    if not (GOCODE / "src/github.com/rabbitmq/amqp091-go/channel.go").exists():
        raise RuntimeError(f"amqp091-go is not installed under {GOCODE}: {INSTALL_HINT}")
    version = subprocess.run([go, "version"], capture_output=True, text=True).stdout
    digest = hashlib.sha256(SOURCE.read_bytes() + version.encode()).hexdigest()[:16]
    binary = CACHE / f"satgen-{digest}"
    if binary.exists():
        return binary
    CACHE.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="satgen-", dir=CACHE))
    try:
        env = {
            **os.environ,
            "GO111MODULE": "off",
            "GOPATH": f"{work / 'gopath'}:{GOCODE}",
            "GOCACHE": str(CACHE / "gocache"),
            "GOFLAGS": "",
            "GOPROXY": "off",
            "CGO_ENABLED": "0",
        }
        out = work / "satgen"
        proc = subprocess.run(
            [go, "build", "-o", str(out), "."],
            cwd=SOURCE.parent,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        if proc.returncode != 0:
            raise RuntimeError(f"go build failed:\n{proc.stdout}{proc.stderr}")
        out.replace(binary)  # atomic: a concurrent build never sees half a binary
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return binary


# ------------------------------------------------------------------ one run
def rss_mib(pid: int) -> float | None:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def listener_pid(port: int) -> int | None:
    """The process listening on TCP ``port`` (RabbitMQ's beam.smp), from ``ss``."""
    try:
        out = subprocess.run(
            ["ss", "-ltnpH", f"sport = :{port}"], capture_output=True, text=True, timeout=5
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    for part in out.split("pid=")[1:]:
        return int(part.split(",")[0])
    return fanout.find_rabbitmq_pid()


class Sampler(threading.Thread):
    """The broker's peak RSS while the generator runs."""

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.pid = pid
        self.peak = 0.0
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.wait(0.2):
            self.peak = max(self.peak, rss_mib(self.pid) or 0.0)


@dataclass
class Run:
    broker: str  # "rabbitmq" or a Leveret label
    case: str
    round: int
    published: float = 0.0
    confirmed: float = 0.0
    delivered_min: float = 0.0  # the slowest consumer, per second
    deliver_ms: dict[str, float] = field(default_factory=dict)  # p50, p99, p999, max
    confirm_ms: dict[str, float] = field(default_factory=dict)
    cpu_broker: float = 0.0  # % of one core over the window
    cpu_generator: float = 0.0
    cpu_other: float = 0.0
    rss_rest: float = 0.0  # MiB before the load
    rss_peak: float = 0.0
    load: tuple[float, float, float] = (0.0, 0.0, 0.0)  # the machine's, before the run
    error: str | None = None


def _ms(summary: dict[str, Any]) -> dict[str, float]:
    if not summary.get("count"):
        return {}
    return {k: summary[k] / 1e6 for k in ("p50", "p99", "p999", "max")}


def run_case(
    binary: Path, url: str, pid: int, broker: str, case: str, rnd: int, args: argparse.Namespace
) -> Run:
    """One case against a running broker (``pid`` its process)."""
    run = Run(broker, case, rnd)
    run.rss_rest = rss_mib(pid) or 0.0
    run.load = os.getloadavg()
    name = f"satgen-{case}-{broker}-{rnd}-{os.getpid()}"
    cmd = [
        str(binary),
        "-url",
        url,
        "-name",
        name,
        "-warmup",
        str(args.warmup),
        "-seconds",
        str(args.seconds),
        *CASES[case].flags,
    ]
    sampler = Sampler(pid)
    sampler.start()
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        assert proc.stdout is not None
        before: tuple[float, float, float] | None = None
        result: dict[str, Any] = {}
        timeout = time.monotonic() + args.warmup + args.seconds + 120
        for line in proc.stdout:
            msg = json.loads(line)
            phase = msg.get("phase")
            if phase == "measuring":
                before = _cpu(pid, proc.pid)
            elif phase == "done" and before is not None:
                after = _cpu(pid, proc.pid)
                wall = after[3] - before[3]
                run.cpu_broker = 100 * (after[0] - before[0]) / wall
                run.cpu_generator = 100 * (after[1] - before[1]) / wall
                busy = 100 * (after[2] - before[2]) / wall
                run.cpu_other = max(0.0, busy - run.cpu_broker - run.cpu_generator)
            elif phase is None:
                result = msg
            if time.monotonic() > timeout:
                break
        proc.wait(30)
        if proc.returncode != 0 or not result:
            assert proc.stderr is not None
            run.error = f"satgen exited {proc.returncode}: {proc.stderr.read()[-500:]}"
            return run
    finally:
        sampler.done.set()
        if proc.poll() is None:
            proc.kill()
            proc.wait(5)
    run.rss_peak = max(sampler.peak, run.rss_rest)
    run.published = result["published_per_s"]
    run.confirmed = result["confirmed_per_s"]
    delivered = result["delivered_per_s"] or [0.0]
    run.delivered_min = min(delivered)
    run.deliver_ms = _ms(result["deliver_latency"])
    run.confirm_ms = _ms(result["confirm_latency"])
    if result.get("nacked"):
        run.error = f"{result['nacked']} publishes nacked"
    return run


def _cpu(broker: int, generator: int) -> tuple[float, float, float, float]:
    return (
        fanout.cpu_seconds(broker) or 0.0,
        fanout.cpu_seconds(generator) or 0.0,
        fanout.machine_busy_seconds(),
        time.monotonic(),
    )


def run_leveret(
    binary: Path, label: str, src: Path | None, case: str, rnd: int, args: argparse.Namespace
) -> Run:
    server = fanout.Leveret(src=src)
    try:
        server.start()
        assert server.pid is not None
        time.sleep(0.5)  # settled: what it holds at rest
        url = f"amqp://guest:guest@127.0.0.1:{server.port}/"
        return run_case(binary, url, server.pid, label, case, rnd, args)
    finally:
        server.stop()


# ------------------------------------------------------------------ the table
def _med(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


def _spread(values: Sequence[float], fmt: str) -> str:
    if len(values) < 2:
        return ""
    return f" ({format(min(values), fmt)}-{format(max(values), fmt)})"


def _lat(runs: list[Run], attr: str) -> str:
    out = []
    for key in ("p50", "p99", "p999"):
        values = [getattr(r, attr)[key] for r in runs if getattr(r, attr)]
        if not values:
            return "-"
        out.append(f"{_med(values):.3g}")
    return " / ".join(out)


def summarise(runs: list[Run], brokers: list[str]) -> list[dict[str, Any]]:
    """Per case and broker: medians and spreads; per Leveret label: paired ratios."""
    rows = []
    for case in dict.fromkeys(r.case for r in runs):
        row: dict[str, Any] = {"case": case, "brokers": {}, "ratios": {}}
        for broker in brokers:
            mine = [r for r in runs if r.case == case and r.broker == broker and not r.error]
            if not mine:
                continue
            row["brokers"][broker] = {
                "rounds": len(mine),
                "published": [r.published for r in mine],
                "delivered_min": [r.delivered_min for r in mine],
                "deliver_ms": {k: [r.deliver_ms.get(k) for r in mine] for k in ("p50", "p99")},
                "runs": mine,
            }
        rmq = {r.round: r for r in runs if r.case == case and r.broker == "rabbitmq"}
        for broker in brokers:
            if broker == "rabbitmq":
                continue
            pairs = [
                (r, rmq[r.round])
                for r in runs
                if r.case == case and r.broker == broker and r.round in rmq and not r.error
            ]
            pairs = [(a, b) for a, b in pairs if not b.error and b.published]
            if pairs:
                row["ratios"][broker] = [a.published / b.published for a, b in pairs]
        rows.append(row)
    return rows


def print_table(rows: list[dict[str, Any]], brokers: list[str]) -> None:
    leverets = [b for b in brokers if b != "rabbitmq"]
    print()
    print("Publish/s: median of the rounds (min-max). Latency publish→delivery, ms:")
    print("p50 / p99 / p99.9, medians of the rounds. Ratio: Leveret/RabbitMQ publish rate,")
    print("per round, median (min-max).")
    print()
    head = ["case"]
    for b in brokers:
        head += [f"{b} publish/s", f"{b} delivery ms"]
    head += [f"ratio {b}" for b in leverets]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for row in rows:
        case = CASES[row["case"]]
        cells = [case.title]
        for b in brokers:
            info = row["brokers"].get(b)
            if info is None:
                cells += ["-", "-"]
                continue
            pub = info["published"]
            cells.append(f"{_med(pub) / 1000:.1f}k{_spread([p / 1000 for p in pub], '.1f')}")
            cells.append(_lat(info["runs"], "deliver_ms"))
        for b in leverets:
            ratios = row["ratios"].get(b)
            cells.append(f"{_med(ratios):.2f}{_spread(ratios, '.2f')}" if ratios else "-")
        print("| " + " | ".join(cells) + " |")
    print()
    print("Per broker: slowest consumer/s, publish→confirm ms (p50 / p99 / p99.9), p99")
    print("publish→delivery spread, CPU % of a core (broker, generator, everything else),")
    print("RSS MiB at rest / peak (medians).")
    print()
    print("| case | broker | delivered/s | confirm ms | delivery p99 ms | CPU b/g/o | RSS |")
    print("|---|---|---|---|---|---|---|")
    for row in rows:
        for b in brokers:
            info = row["brokers"].get(b)
            if info is None:
                continue
            mine: list[Run] = info["runs"]
            p99 = [r.deliver_ms["p99"] for r in mine if r.deliver_ms]
            cpu = "/".join(
                f"{_med([getattr(r, a) for r in mine]):.0f}"
                for a in ("cpu_broker", "cpu_generator", "cpu_other")
            )
            rss = f"{_med([r.rss_rest for r in mine]):.0f} / {_med([r.rss_peak for r in mine]):.0f}"
            dmin = [r.delivered_min for r in mine]
            cells = [
                row["case"],
                b,
                f"{_med(dmin) / 1000:.1f}k" if any(dmin) else "-",
                _lat(mine, "confirm_ms"),
                f"{_med(p99):.3g}{_spread(p99, '.3g')}" if p99 else "-",
                cpu,
                rss,
            ]
            print("| " + " | ".join(cells) + " |")


# ------------------------------------------------------------------ main
def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cases", default=",".join(CASES), help="comma-separated: " + ", ".join(CASES))
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--seconds", type=float, default=10.0, help="measured, per run")
    p.add_argument("--warmup", type=float, default=2.0, help="not measured, before it")
    p.add_argument("--quick", action="store_true", help="one round of 3 s (1 s warm-up)")
    p.add_argument(
        "--leveret",
        action="append",
        default=[],
        metavar="LABEL=SRC",
        help="a Leveret to run from SRC (a src/ directory), repeatable; default: this tree",
    )
    p.add_argument("--no-rabbitmq", action="store_true")
    p.add_argument("--rabbitmq", default="127.0.0.1:5672", help="host:port (guest/guest)")
    p.add_argument("--json", type=Path, help="also write every run here")
    args = p.parse_args(argv)
    if args.quick:
        args.rounds, args.seconds, args.warmup = 1, 3.0, 1.0
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, fanout._terminate)
    cases = [c.strip() for c in args.cases.split(",") if c.strip()]
    if unknown := set(cases) - set(CASES):
        print(f"Error: unknown case: {', '.join(sorted(unknown))}", file=sys.stderr)
        return 2
    leverets: dict[str, Path | None] = {}
    for spec in args.leveret or ["leveret="]:
        label, _, src = spec.partition("=")
        leverets[label] = Path(src).resolve() if src else None
    brokers = list(leverets)
    host, _, port = args.rabbitmq.rpartition(":")
    rmq_version = None
    if not args.no_rabbitmq:
        why, rmq_version = fanout.rabbitmq_reachable(host, int(port))
        if why is None:
            brokers.append("rabbitmq")
        else:
            print(f"RabbitMQ skipped: {why}", file=sys.stderr)
    runs: list[Run] = []
    load_before = os.getloadavg()
    try:
        binary = build_generator()
        for rnd in range(1, args.rounds + 1):
            for case in cases:
                shift = (rnd - 1 + cases.index(case)) % len(brokers)
                for broker in brokers[shift:] + brokers[:shift]:
                    print(f"round {rnd}/{args.rounds}: {case} on {broker}...", file=sys.stderr)
                    if broker == "rabbitmq":
                        pid = listener_pid(int(port))
                        url = f"amqp://guest:guest@{host}:{port}/"
                        run = run_case(binary, url, pid or 0, broker, case, rnd, args)
                    else:
                        run = run_leveret(binary, broker, leverets[broker], case, rnd, args)
                    if run.error:
                        print(f"  error: {run.error}", file=sys.stderr)
                    runs.append(run)
    except KeyboardInterrupt:
        print("interrupted; everything started was stopped", file=sys.stderr)
        return 130
    except (RuntimeError, OSError) as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return 1
    rows = summarise(runs, brokers)
    commits = {b: fanout.leveret_commit(src) for b, src in leverets.items()}
    print(
        f"\n{datetime.now(UTC):%Y-%m-%d %H:%M} UTC, {os.cpu_count()} cores; "
        + ", ".join(f"{b} {c}" for b, c in commits.items())
        + (f", RabbitMQ {rmq_version}" if rmq_version else "")
        + f"; {args.rounds} round(s) of {args.seconds:g} s (+{args.warmup:g} s warm-up)"
    )
    # the 1-minute load average counts this benchmark's own broker and generator (about
    # 2 on a busy run); what other work took is in the CPU column "o" below
    loads = [r.load[0] for r in runs]
    print(
        "load average before: "
        + " ".join(f"{v:.2f}" for v in load_before)
        + "; after: "
        + " ".join(f"{v:.2f}" for v in os.getloadavg())
        + (f"; 1-min load at each run's start {min(loads):.2f}-{max(loads):.2f}" if loads else "")
    )
    print_table(rows, brokers)
    if args.json is not None:
        report = {
            "date": datetime.now(UTC).isoformat(timespec="seconds"),
            "commits": commits,
            "rabbitmq": rmq_version,
            "rounds": args.rounds,
            "seconds": args.seconds,
            "load_before": load_before,
            "runs": [r.__dict__ for r in runs],
        }
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    return 1 if any(r.error for r in runs) else 0


if __name__ == "__main__":
    sys.exit(main())
