"""Does an open Logs view slow the broker? The same log load with the dashboard's Logs
view closed and open, rounds alternating, medians and spreads reported.

The load, as the log system makes it: a producer publishes log records (JSON, ~230 bytes,
``application/json``, as ``emit-log`` sends them) to the fanout exchange ``logs`` with
publisher confirms (1000 in flight), paced at ``--rate`` records/s (10,000; 0 = as fast as
confirms come back); one receiver consumes from its own exclusive queue bound to ``logs``
(prefetch 1000, ``basic.ack(multiple)`` every 100), as ``receive-logs`` does. Producer and
receiver are the lean raw-socket clients of loadgen.py, each in its own process.

"Open" means a headless Chromium (Debian's, through Playwright) showing ``/logs`` for the
whole round: the view's AMQP consumer inside the broker's event loop, its SSE stream and a
browser rendering what arrives, all on this machine. ``--view sse`` reads the stream with
a plain socket instead (no rendering competing for the CPUs).

Per round: ``--warmup`` s unmeasured, then ``--seconds`` s measured: records/s confirmed
at the producer and delivered to the receiver, the broker's CPU (% of one core), the
browser's, and what the view received and what was dropped for it. Leveret is started
here (free ports, temporary data dir, stopped on exit).

    python benchmarks/logsview.py                      # 3 rounds each, 60 s, ~8 min
    python benchmarks/logsview.py --rounds 2 --seconds 20 --rate 0 --json out.json
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing as mp
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import loadgen
from fanout import cpu_seconds, machine_busy_seconds, wait_idle
from pamqp import body as amqp_body
from pamqp import commands, frame, header

CHROMIUM = os.environ.get("LEVERET_CHROMIUM", "/usr/bin/chromium")
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
RECEIVER = loadgen.CONSUMER0


def record_body(i: int) -> bytes:
    return json.dumps(
        {
            "ts": "2025-01-01T12:00:00.000000Z",
            "severity": ("info", "warning", "error")[i % 3],
            "facility": "daemon",
            "host": "bench-host",
            "app": "checkout",
            "pid": 4242,
            "message": f"order {i} placed, total 12.50 EUR, 3 items, payment accepted",
            "logger": "shop.checkout",
        },
        separators=(",", ":"),
    ).encode()


def publish_units(batch: int) -> bytes:
    props = commands.Basic.Properties(content_type="application/json", delivery_mode=1)
    out = []
    for i in range(batch):
        body = record_body(i)
        out.append(
            frame.marshal(commands.Basic.Publish(exchange="logs", routing_key="info"), 1)
            + frame.marshal(header.ContentHeader(0, len(body), props), 1)
            + frame.marshal(amqp_body.ContentBody(body), 1)
        )
    return b"".join(out)


def declare_logs(conn: loadgen.SetupConnection) -> None:
    # as emit-log and receive-logs declare it
    conn.rpc(
        commands.Exchange.Declare(exchange="logs", exchange_type="fanout"),
        commands.Exchange.DeclareOk,
    )


def producer(host: str, port: int, rate: float, counts: Any, ctl: Any, status: Any) -> None:
    """Publish paced records with confirms (at most 1000 unconfirmed)."""
    loadgen._worker_init()
    conn = None
    try:
        conn = loadgen.SetupConnection(host, port)
        declare_logs(conn)
        conn.rpc(commands.Confirm.Select(), commands.Confirm.SelectOk)
        batch, window = 50, 1000
        blob = memoryview(publish_units(batch))
        counter = loadgen.FrameCounter(bytes(conn.buf))
        counter.feed(0)
        sock = conn.sock
        loadgen.hot_socket(sock, wake=0.01)
        status.put(("ready", "producer", os.getpid()))
        published = 0
        start = time.monotonic()
        while not ctl[0]:
            full = published - counter.acked_upto + batch > window
            due = published + batch <= (time.monotonic() - start) * rate if rate else True
            try:  # take the confirms in; block briefly only when nothing can be sent
                n = sock.recv_into(
                    counter.space(), 0, 0 if (full or not due) else socket.MSG_DONTWAIT
                )
                if not n:
                    raise loadgen.BrokerClosed("connection closed by the broker")
                counter.feed(n)
                counts[loadgen.CONFIRMED] = counter.acked_upto
            except (BlockingIOError, InterruptedError, TimeoutError):
                pass
            if full or not due:
                continue
            if not loadgen.send_all(sock, blob, ctl):
                return
            published += batch
            counts[loadgen.PUBLISHED] = published
    except BaseException as exc:
        loadgen._report_error(status, "producer", exc)
        raise SystemExit(1) from None
    finally:
        if conn is not None:
            conn.close()


def receiver(host: str, port: int, counts: Any, ctl: Any, status: Any) -> None:
    loadgen._worker_init()
    conn = None
    try:
        conn = loadgen.SetupConnection(host, port)
        declare_logs(conn)
        ok = conn.rpc(commands.Queue.Declare(queue="", exclusive=True), commands.Queue.DeclareOk)
        conn.rpc(
            commands.Queue.Bind(queue=ok.queue, exchange="logs", routing_key=""),
            commands.Queue.BindOk,
        )
        conn.rpc(commands.Basic.Qos(prefetch_count=1000), commands.Basic.QosOk)
        conn.rpc(commands.Basic.Consume(queue=ok.queue), commands.Basic.ConsumeOk)
        counter = loadgen.FrameCounter(bytes(conn.buf))
        counter.feed(0)
        status.put(("ready", "receiver", os.getpid()))
        loadgen.consume_loop(
            conn.sock,
            counter,
            counts,
            RECEIVER,
            ctl,
            ack_every=100,
            lowat=loadgen.safe_lowat(300, 1000),
        )
    except BaseException as exc:
        loadgen._report_error(status, "receiver", exc)
        raise SystemExit(1) from None
    finally:
        if conn is not None:
            conn.close()


# ------------------------------------------------------------------ the broker
class Broker:
    def __init__(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="leveret-bench-logsview-"))
        cmd = [
            sys.executable,
            "-m",
            "leveret.cli.main",
            "server",
            "--amqp-port",
            "0",
            "--http-port",
            "0",
            "--prometheus-port",
            "0",
            "--stream-port",
            "0",
            "--bind",
            "127.0.0.1",
            "--data-dir",
            str(self.dir / "data"),
            "--log-level",
            "warning",
        ]
        self.proc = subprocess.Popen(
            cmd,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            start_new_session=True,
        )
        assert self.proc.stdout is not None
        self.http = ""
        for line in self.proc.stdout:
            if line.startswith("Management API listening on "):
                self.http = line.split(" on ", 1)[1].strip()
            if "Server startup complete" in line:
                self.port = int(line.strip().rsplit(":", 1)[1])
                return
        raise RuntimeError("leveret server did not start")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()


class View:
    """The Logs view, open: Chromium on /logs, or a socket reading the SSE stream."""

    def __init__(self, broker: Broker, kind: str) -> None:
        self.kind = kind
        self.received = 0
        self.dropped_broker = 0
        self.dropped_server = 0
        if kind == "browser":
            from playwright.sync_api import sync_playwright

            self._pw = sync_playwright().start()
            self.before = {int(e) for e in os.listdir("/proc") if e.isdigit()}
            self.browser = self._pw.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
            self.pids = []
            page = self.browser.new_page(viewport={"width": 1366, "height": 800})
            page.goto(broker.http + "/logs")
            page.fill("#username", "guest")
            page.fill("#password", "guest")
            page.click("#login button[type=submit]")
            page.wait_for_selector("#logs-status[data-status=live]", timeout=30_000)
            self.page = page
        elif kind == "queue":
            # not the view: only a queue as the view keeps its own (no limit, purged every
            # 0.25 s past 1000 records), never consumed, to tell routing from the view's work
            self.pids = []
            self.conn = loadgen.SetupConnection("127.0.0.1", broker.port)
            ok = self.conn.rpc(
                commands.Queue.Declare(queue="", exclusive=True), commands.Queue.DeclareOk
            )
            self.conn.rpc(
                commands.Queue.Bind(queue=ok.queue, exchange="logs", routing_key="#"),
                commands.Queue.BindOk,
            )
            self._stop = False
            import threading

            def purge() -> None:
                while not self._stop:
                    time.sleep(0.25)
                    n = self.conn.rpc(
                        commands.Queue.Declare(queue=ok.queue, passive=True),
                        commands.Queue.DeclareOk,
                    ).message_count
                    if n > 1000:
                        self.dropped_broker += self.conn.rpc(
                            commands.Queue.Purge(queue=ok.queue), commands.Queue.PurgeOk
                        ).message_count

            self.thread = threading.Thread(target=purge, daemon=True)
            self.thread.start()
        else:
            host, port = re.match(r"http://([^:]+):(\d+)", broker.http).groups()
            self.sock = socket.create_connection((host, int(port)))
            self.sock.sendall(
                b"GET /api/logs/stream HTTP/1.1\r\nHost: x\r\n"
                b"Authorization: Basic Z3Vlc3Q6Z3Vlc3Q=\r\n\r\n"
            )
            self.pids = []
            self.buf = b""
            self._stop = False
            import threading

            self.thread = threading.Thread(target=self._read, daemon=True)
            self.thread.start()
            deadline = time.monotonic() + 30
            while self.status != "live":
                if time.monotonic() > deadline:
                    raise RuntimeError("the Logs view's stream never went live")
                time.sleep(0.1)

    status = ""

    def _read(self) -> None:
        while not self._stop:
            chunk = self.sock.recv(1 << 16)
            if not chunk:
                return
            self.buf += chunk
            while b"\n\n" in self.buf:
                event, self.buf = self.buf.split(b"\n\n", 1)
                for line in event.split(b"\n"):  # chunked: chunk sizes are lines too
                    if line.startswith(b"data: "):
                        batch = json.loads(line[6:])
                        self.status = batch["status"]
                        self.received += len(batch["records"])
                        self.dropped_broker = batch["dropped"]["broker"]
                        self.dropped_server = batch["dropped"]["server"]

    def cpu(self) -> float:
        if self.kind != "browser":
            return 0.0
        # Chromium's processes (browser, zygotes, renderer, GPU/utility) and Playwright's
        # driver, started since the launch: not all are our descendants (zygotes re-parent)
        total = 0.0
        for entry in os.listdir("/proc"):
            if not entry.isdigit() or int(entry) in self.before:
                continue
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    cmd = f.read()
            except OSError:
                continue
            if b"chromium" in cmd or b"playwright" in cmd:
                total += cpu_seconds(int(entry)) or 0.0
        return total

    def counts(self) -> tuple[int, int]:
        """(received, dropped) so far, as the view shows them."""
        if self.kind == "queue":
            return 0, self.dropped_broker
        if self.kind == "browser":
            text = self.page.text_content("#logs-counts") or ""
            received = int(re.sub(r"[^\d]", "", text.split(" received")[0]) or 0)
            dropped = int(self.page.get_attribute("#logs-dropped", "data-total") or 0)
            return received, dropped
        return self.received, self.dropped_broker + self.dropped_server

    def close(self) -> None:
        if self.kind == "browser":
            self.browser.close()
            self._pw.stop()
        elif self.kind == "queue":
            self._stop = True
            self.thread.join(5)
            self.conn.close()
        else:
            self._stop = True
            self.sock.close()


@dataclass
class Round:
    view: str
    seconds: float
    published: float
    confirmed: float
    delivered: float
    broker_cpu: float
    view_cpu: float
    machine_busy: float
    view_received: int = 0
    view_dropped: int = 0
    backlog_end: int = 0


def run_round(broker: Broker, open_view: str | None, args: argparse.Namespace) -> Round:
    ctx = mp.get_context("fork")
    counts = ctx.RawArray("q", 8)
    ctl = ctx.RawArray("b", 1)
    status = ctx.Queue()
    view = View(broker, open_view) if open_view else None
    procs = [
        ctx.Process(target=receiver, args=("127.0.0.1", broker.port, counts, ctl, status)),
        ctx.Process(
            target=producer, args=("127.0.0.1", broker.port, args.rate, counts, ctl, status)
        ),
    ]
    procs[0].start()
    status.get(timeout=30)
    procs[1].start()
    status.get(timeout=30)
    try:
        time.sleep(args.warmup)
        v0 = view.counts() if view else (0, 0)
        t0, p0, c0, d0 = time.monotonic(), counts[0], counts[1], counts[RECEIVER]
        b0, w0, m0 = (
            cpu_seconds(broker.proc.pid) or 0,
            view.cpu() if view else 0,
            machine_busy_seconds(),
        )
        time.sleep(args.seconds)
        t1, p1, c1, d1 = time.monotonic(), counts[0], counts[1], counts[RECEIVER]
        b1, w1, m1 = (
            cpu_seconds(broker.proc.pid) or 0,
            view.cpu() if view else 0,
            machine_busy_seconds(),
        )
        v1 = view.counts() if view else (0, 0)
        dt = t1 - t0
        return Round(
            open_view or "closed",
            dt,
            (p1 - p0) / dt,
            (c1 - c0) / dt,
            (d1 - d0) / dt,
            100 * (b1 - b0) / dt,
            100 * (w1 - w0) / dt,
            100 * (m1 - m0) / dt,
            v1[0] - v0[0],
            v1[1] - v0[1],
            int(counts[0] - counts[RECEIVER]),
        )
    finally:
        ctl[0] = 1
        for p in procs:
            p.join(10)
            if p.is_alive():
                p.terminate()
        while not status.empty():
            msg = status.get()
            if msg[0] == "error":
                print(f"  {msg[1]}: {msg[2]}", file=sys.stderr)
        if view:
            view.close()
        time.sleep(args.pause)


def summary(rounds: list[Round], key: str) -> tuple[float, float, float]:
    values = [getattr(r, key) for r in rounds]
    return statistics.median(values), min(values), max(values)


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--rate", type=float, default=10_000, help="records/s (0: unpaced)")
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--warmup", type=float, default=5)
    ap.add_argument("--pause", type=float, default=3, help="seconds between rounds")
    ap.add_argument("--rounds", type=int, default=3, help="rounds with the view closed, and open")
    ap.add_argument("--view", choices=("browser", "sse", "queue"), default="browser")
    ap.add_argument("--wait-idle", type=float, default=0, help="wait up to N s for a quiet machine")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    broker = Broker()
    rounds: list[Round] = []
    try:
        for i in range(args.rounds * 2):
            # alternate, and swap which goes first every other pair
            open_first = (i // 2) % 2 == 1
            open_view = args.view if (i % 2 == 0) == open_first else None
            if args.wait_idle:
                wait_idle(args.wait_idle)
            r = run_round(broker, open_view, args)
            rounds.append(r)
            print(
                f"round {i + 1}: view {r.view:8} confirmed {r.confirmed:8.0f}/s "
                f"delivered {r.delivered:8.0f}/s broker CPU {r.broker_cpu:5.1f}% "
                f"view CPU {r.view_cpu:5.1f}% machine {r.machine_busy:5.1f}% "
                f"view got {r.view_received} dropped {r.view_dropped}",
                flush=True,
            )
    finally:
        broker.stop()
    closed = [r for r in rounds if r.view == "closed"]
    opened = [r for r in rounds if r.view != "closed"]
    print(
        f"\nrate {'unpaced' if not args.rate else f'{args.rate:.0f}/s'}, "
        f"{args.seconds:.0f} s measured per round, {args.rounds} rounds each; "
        f"median (min-max)"
    )
    for key, label in (
        ("confirmed", "confirmed/s"),
        ("delivered", "delivered/s"),
        ("broker_cpu", "broker CPU %"),
        ("view_cpu", "browser CPU %"),
        ("machine_busy", "machine busy %"),
    ):
        mc, lc, hc = summary(closed, key)
        mo, lo, ho = summary(opened, key)
        print(
            f"  {label:16} closed {mc:9.1f} ({lc:.1f}-{hc:.1f})"
            f"   open {mo:9.1f} ({lo:.1f}-{ho:.1f})"
            f"   open/closed {mo / mc if mc else float('nan'):.3f}"
        )
    got = summary(opened, "view_received")
    dropped = summary(opened, "view_dropped")
    print(f"  the view received {got[0]:.0f} records per round (median), dropped {dropped[0]:.0f}")
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "args": {k: str(v) for k, v in vars(args).items()},
                    "rounds": [asdict(r) for r in rounds],
                },
                indent=2,
            )
        )


if __name__ == "__main__":
    # SIGTERM unwinds like Ctrl-C, so the broker and the workers are stopped
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    with contextlib.suppress(KeyboardInterrupt):
        main()
