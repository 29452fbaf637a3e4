"""Ingest rates of the log sources (syslog over UDP and TCP, OTLP/HTTP protobuf and JSON)
beside ``leveret emit-log``'s, into one Leveret in the same run.

Each case sends N records into the ``logs`` exchange of a Leveret started here (free ports,
temporary data dir, ``--syslog-port 0``), with one queue bound to it:

  emit-log        ``leveret emit-log < FILE`` of N lines (AMQP with confirms: the baseline)
  syslog/udp      RFC 5424 datagrams from one Python socket, at most --window records ahead
                  of what the queue holds (a UDP sender has no flow control: unpaced, the
                  kernel's receive buffer overflows and datagrams are lost)
  syslog/tcp      RFC 5424, octet-counted (RFC 6587), written down one TCP connection
  otlp/protobuf   ExportLogsServiceRequest bodies of --batch records (the SDK exporter's
                  default batch is 512), POSTed one after another on one keep-alive session
  otlp/json       the same requests in OTLP's JSON encoding

A case's rate is N over the time from its first byte sent to the moment the bound queue
holds all N (polled every 10 ms with a passive queue.declare); then a consumer drains the
queue and its count must be exactly N, or the run is reported as failed. Cases alternate
run by run (--repeat, default 5) and the table shows the median and the min-max spread.

    python benchmarks/log_sources.py [--records 20000] [--repeat 5] [--json out.json]
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import pika
import requests
from google.protobuf import json_format
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import (
    ExportLogsServiceRequest,
)
from tests.support.brokers import BrokerUnderTest, start_leveret

CLI = [sys.executable, "-m", "leveret.cli.main"]
QUEUE = "bench-log-sources"
HOST = socket.gethostname()
AUTH = ("guest", "guest")


def text(i: int) -> str:
    return f"benchmark record {i:08d}: request served in 12 ms by worker 3"


class Counter:
    """The queue bound to ``logs``: how many it holds, and a drain that counts them."""

    def __init__(self, url: str) -> None:
        self.conn = pika.BlockingConnection(pika.URLParameters(url))
        self.ch = self.conn.channel()
        self.ch.exchange_declare("logs", "fanout")
        self.ch.queue_declare(QUEUE, auto_delete=False)
        self.ch.queue_bind(QUEUE, "logs")
        self.ch.queue_purge(QUEUE)

    def depth(self) -> int:
        return int(self.ch.queue_declare(QUEUE, passive=True).method.message_count)

    def wait_for(self, n: int, timeout: float = 300) -> float:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.depth() >= n:
                return time.monotonic()
            self.conn.sleep(0.01)
        raise RuntimeError(f"the queue holds {self.depth()} of {n} records")

    def drain(self) -> int:
        """Consume everything (no-ack) and count it: the consumer's count."""
        count = 0
        for method, _props, _body in self.ch.consume(QUEUE, auto_ack=True, inactivity_timeout=1):
            if method is None:
                break
            count += 1
        self.ch.cancel()
        return count

    def close(self) -> None:
        self.ch.queue_delete(QUEUE)
        self.conn.close()


def syslog_5424(i: int) -> bytes:
    return (f"<134>1 2026-11-29T01:00:00.000000Z {HOST} bench {os.getpid()} - - {text(i)}").encode()


def run_udp(broker: BrokerUnderTest, counter: Counter, n: int, window: int) -> float:
    messages = [syslog_5424(i) for i in range(n)]
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    addr = ("127.0.0.1", broker.syslog_port)
    start = time.monotonic()
    sent = 0
    step = max(1, window // 4)
    while sent < n:
        end = min(n, sent + step)
        for m in messages[sent:end]:
            sock.sendto(m, addr)
        sent = end
        stuck = time.monotonic() + 30
        while sent - counter.depth() > window:
            if time.monotonic() > stuck:
                raise RuntimeError(f"{sent - counter.depth()} datagrams lost (of {sent} sent)")
            counter.conn.sleep(0.001)
    took = counter.wait_for(n) - start
    sock.close()
    return took


def run_tcp(broker: BrokerUnderTest, counter: Counter, n: int, _window: int) -> float:
    frames = b"".join(b"%d %s" % (len(m), m) for m in (syslog_5424(i) for i in range(n)))
    start = time.monotonic()
    with socket.create_connection(("127.0.0.1", broker.syslog_port)) as s:
        s.sendall(frames)
        took = counter.wait_for(n) - start
    return took


def otlp_requests(n: int, batch: int) -> list[ExportLogsServiceRequest]:
    out = []
    base = time.time_ns()
    for first in range(0, n, batch):
        doc = {
            "resourceLogs": [
                {
                    "resource": {
                        "attributes": [
                            {"key": "service.name", "value": {"stringValue": "bench"}},
                            {"key": "host.name", "value": {"stringValue": HOST}},
                            {"key": "process.pid", "value": {"intValue": os.getpid()}},
                        ]
                    },
                    "scopeLogs": [
                        {
                            "scope": {"name": "bench.logger"},
                            "logRecords": [
                                {
                                    "timeUnixNano": base + i,
                                    "severityNumber": 9,
                                    "severityText": "INFO",
                                    "body": {"stringValue": text(i)},
                                    "traceId": "5b8efff798038103d269b633813fc60c",
                                    "spanId": "eee19b7ec3c1b174",
                                }
                                for i in range(first, min(n, first + batch))
                            ],
                        }
                    ],
                }
            ]
        }
        r = ExportLogsServiceRequest()
        ids = doc["resourceLogs"][0]["scopeLogs"][0]["logRecords"]  # type: ignore[index]
        for lr in ids:
            lr["traceId"] = "W47/95gDgQPSabYzgT/GDA=="  # the same ids, base64 for ParseDict
            lr["spanId"] = "7uGbfsPBsXQ="
        json_format.ParseDict(doc, r)
        out.append(r)
    return out


def run_otlp(kind: str, batch: int) -> Callable[[BrokerUnderTest, Counter, int, int], float]:
    def run(broker: BrokerUnderTest, counter: Counter, n: int, _window: int) -> float:
        reqs = otlp_requests(n, batch)
        if kind == "protobuf":
            bodies = [r.SerializeToString() for r in reqs]
            ctype = "application/x-protobuf"
        else:
            bodies = [_otlp_json(r) for r in reqs]
            ctype = "application/json"
        url = f"{broker.http_url}/v1/logs"
        session = requests.Session()
        session.auth = AUTH
        headers = {"Content-Type": ctype}
        start = time.monotonic()
        for body in bodies:
            r = session.post(url, data=body, headers=headers, timeout=60)
            if r.status_code != 200:
                raise RuntimeError(f"OTLP answered {r.status_code}: {r.text[:200]}")
        took = counter.wait_for(n) - start
        session.close()
        return took

    return run


def _otlp_json(r: ExportLogsServiceRequest) -> bytes:
    doc = json_format.MessageToDict(r)
    for rl in doc["resourceLogs"]:
        for sl in rl["scopeLogs"]:
            for lr in sl["logRecords"]:
                lr["traceId"] = base64.b64decode(lr["traceId"]).hex()
                lr["spanId"] = base64.b64decode(lr["spanId"]).hex()
    return json.dumps(doc, separators=(",", ":")).encode()


def run_emit_log(tmp: Path) -> Callable[[BrokerUnderTest, Counter, int, int], float]:
    def run(broker: BrokerUnderTest, counter: Counter, n: int, _window: int) -> float:
        source = tmp / f"emit-{n}.txt"
        if not source.exists():
            source.write_text("".join(f"info: {text(i)}\n" for i in range(n)))
        with open(source, "rb") as stdin:
            start = time.monotonic()
            done = subprocess.run(
                [*CLI, "emit-log", "--url", broker.url], stdin=stdin, capture_output=True
            )
            if done.returncode != 0:
                raise RuntimeError(f"emit-log failed: {done.stderr.decode().strip()}")
            return counter.wait_for(n) - start

    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=20_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--batch", type=int, default=512, help="records per OTLP request")
    parser.add_argument("--window", type=int, default=500, help="UDP records in flight")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="leveret-bench-sources-"))
    cases: dict[str, Callable[[BrokerUnderTest, Counter, int, int], float]] = {
        "emit-log (AMQP)": run_emit_log(tmp),
        "syslog/udp": run_udp,
        "syslog/tcp": run_tcp,
        "otlp/protobuf": run_otlp("protobuf", args.batch),
        "otlp/json": run_otlp("json", args.batch),
    }
    broker = start_leveret(tmp / "data", extra=["--syslog-port", "0"])
    rates: dict[str, list[float]] = {name: [] for name in cases}
    failures: list[str] = []
    try:
        load_before = os.getloadavg()[0]
        for rep in range(args.repeat):
            order = list(cases) if rep % 2 == 0 else list(reversed(cases))
            for name in order:
                counter = Counter(broker.url)
                try:
                    try:
                        took = cases[name](broker, counter, args.records, args.window)
                    except RuntimeError as exc:
                        failures.append(f"{name}: {exc}")
                        continue
                    got = counter.drain()
                    if got != args.records:
                        failures.append(f"{name}: the consumer counted {got} of {args.records}")
                        continue
                    rates[name].append(args.records / took)
                    print(f"run {rep + 1} {name}: {args.records / took:,.0f} records/s", flush=True)
                finally:
                    counter.close()
        load_after = os.getloadavg()[0]
    finally:
        broker.stop()
    print()
    print(f"{args.records:,} records a run, {args.repeat} runs, load {load_before:.1f} -> "
          f"{load_after:.1f}")  # fmt: skip
    base = statistics.median(rates["emit-log (AMQP)"]) if rates["emit-log (AMQP)"] else 0.0
    print("| source | records/s, median | min - max | / emit-log |")
    print("|---|---:|---:|---:|")
    for name, values in rates.items():
        if not values:
            continue
        med = statistics.median(values)
        ratio = f"{med / base:.2f}" if base else "-"
        print(f"| {name} | {med:,.0f} | {min(values):,.0f} - {max(values):,.0f} | {ratio} |")
    for f in failures:
        print("FAILED:", f)
    if args.json:
        args.json.write_text(json.dumps({"records": args.records, "rates": rates,
                                         "failures": failures}, indent=1))  # fmt: skip
    if failures:
        sys.exit(1)


if __name__ == "__main__":
    main()
