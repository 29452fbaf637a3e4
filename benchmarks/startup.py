"""Startup time: from asking for a broker to its first accepted AMQP connection.

- in-process: ``leveret.Broker().start()`` in a fresh Python process, to a client of the
  same process reading the first byte of ``connection.start`` (what the pytest plugin's
  session fixture pays once). Measured for the first broker of the process, which still
  loads what ``start()`` needs, and for a later one; ``import leveret.embedded`` separately,
  cut into the libraries it loads.
- subprocess: ``leveret server`` (``python -m leveret.cli.main server``: AMQP, management
  API and metrics listeners) from spawning it to that first byte.
- RabbitMQ: ``rabbitmq-server`` of a node of our own (its own name, directories, no plugins,
  in a network namespace of its own so 5672 is free there; epmd started first and counted)
  from spawning it to that first byte. Needs root; left out otherwise.

Every sample is a new process. Reported: median and range (min-max) over ``--repeat`` runs
(``--rabbitmq-repeat`` for RabbitMQ, which takes seconds each).

    python benchmarks/startup.py [--repeat 15] [--rabbitmq-repeat 3] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.support.netns import NetNamespace, RabbitMQNode, netns_available  # noqa: E402
from tests.support.ports import free_port  # noqa: E402

HEADER = b"AMQP\x00\x00\x09\x01"
# Children import from cached bytecode, as an installed package does (this machine sets
# PYTHONDONTWRITEBYTECODE, which would make every import compile Leveret's sources).
CHILD_ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}

# One in-process sample, printed as JSON. perf_counter throughout; the client reads the
# first byte of the broker's connection.start (frame type 1).
CHILD = r"""
import json, socket, sys, time
HEADER = b"AMQP\x00\x00\x09\x01"
out = {}

def first_byte(port):
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(HEADER)
    assert s.recv(1) == b"\x01"
    s.close()

spawned = float(sys.argv[1])
t = time.perf_counter()
import leveret.embedded
out["import leveret.embedded"] = time.perf_counter() - t
for label in ("first", "later"):
    t0 = time.perf_counter()
    broker = leveret.embedded.Broker()
    broker.start()
    t1 = time.perf_counter()
    first_byte(broker.port)
    t2 = time.perf_counter()
    if label == "first":
        # what a user measures: the import and the first broker, and with the interpreter
        out["import + first Broker(): first connection"] = t2 - t
        out["python started + import + first Broker(): first connection"] = time.time() - spawned
    broker.stop()
    out[f"{label} Broker(): start() returned"] = t1 - t0
    out[f"{label} Broker(): first connection"] = t2 - t0
print(json.dumps(out))
"""

# What the imports cost, by top-level package: self time from python -X importtime of
# what the first Broker() loads (uvloop and the thread pool come with start()).
IMPORTS = "import sys; sys.stderr.write('MARK\\n'); import leveret.embedded, uvloop, " \
    "concurrent.futures.thread"


def import_attribution() -> dict[str, float]:
    proc = subprocess.run([sys.executable, "-X", "importtime", "-c", IMPORTS],
                          capture_output=True, text=True, check=True, timeout=120,
                          env=CHILD_ENV)
    cost: dict[str, float] = {}
    _, _, after = proc.stderr.partition("MARK\n")  # not what site loads before any code
    for line in after.splitlines():
        fields = line.removeprefix("import time:").split("|")
        if len(fields) != 3 or not fields[0].strip().isdigit():
            continue
        top = fields[2].strip().split(".")[0]
        cost[top] = cost.get(top, 0.0) + int(fields[0]) / 1e6
    return cost


def in_process_sample() -> dict[str, float]:
    proc = subprocess.run([sys.executable, "-c", CHILD, str(time.time())], capture_output=True,
                          text=True, check=True, timeout=120, env=CHILD_ENV)
    result: dict[str, float] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
            s.sendall(HEADER)
            return s.recv(1) == b"\x01"
    except OSError:
        return False


def subprocess_sample() -> float:
    port = free_port()
    data_dir = tempfile.mkdtemp(prefix="leveret-startup-")
    cmd = [sys.executable, "-m", "leveret.cli.main", "server", "--amqp-port", str(port),
           "--http-port", "0", "--prometheus-port", "0", "--stream-port", "0",
           "--bind", "127.0.0.1", "--data-dir", data_dir]
    started = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env=CHILD_ENV)
    try:
        while not answers(port):
            if proc.poll() is not None:
                raise RuntimeError(f"leveret server exited with {proc.returncode}")
            if time.perf_counter() - started > 60:
                raise RuntimeError("leveret server did not answer in 60 s")
            time.sleep(0.002)
        return time.perf_counter() - started
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
        shutil.rmtree(data_dir, ignore_errors=True)


def rabbitmq_sample() -> float:
    with NetNamespace() as netns:
        node = RabbitMQNode(netns, 5672)
        try:
            return node.start()
        finally:
            node.stop()


def summary(values: list[float]) -> str:
    ms = sorted(v * 1000 for v in values)
    return f"{statistics.median(ms):9.1f} ms  ({ms[0]:.1f}-{ms[-1]:.1f}, n={len(ms)})"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--rabbitmq-repeat", type=int, default=3)
    parser.add_argument("--json", type=Path, help="write every sample here")
    args = parser.parse_args()

    env_path = os.environ.get("PYTHONPATH", "")
    print(f"Python {platform.python_version()} on {platform.machine()}, "
          f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}; "
          f"PYTHONPATH={env_path or '(none)'}", flush=True)
    in_process_sample()  # unmeasured: writes the bytecode caches
    subprocess_sample()
    samples: dict[str, list[float]] = {}
    imports: dict[str, list[float]] = {}
    # interleave the kinds so a busy spell of the machine hits them alike
    for _ in range(args.repeat):
        for package, seconds in import_attribution().items():
            imports.setdefault(package, []).append(seconds)
        for key, value in in_process_sample().items():
            samples.setdefault(f"in-process: {key}", []).append(value)
        samples.setdefault("subprocess: leveret server to first connection", []).append(
            subprocess_sample())
    if not RabbitMQNode.available():
        print("RabbitMQ: rabbitmq-server is not installed; left out")
    elif not netns_available():
        print("RabbitMQ: no network namespaces here (needs root); left out")
    else:
        for _ in range(args.rabbitmq_repeat):
            samples.setdefault("RabbitMQ: rabbitmq-server to first connection", []).append(
                rabbitmq_sample())

    width = max(len(k) for k in samples)
    print()
    for key, values in samples.items():
        print(f"{key:<{width}}  {summary(values)}")
    print("\nimports, self time by package (median of the runs, largest first):")
    medians = {p: statistics.median(v + [0.0] * (args.repeat - len(v))) for p, v in imports.items()}
    shown = sorted(medians.items(), key=lambda kv: -kv[1])[:8]
    for package, seconds in shown:
        print(f"  {package:<24} {seconds * 1000:7.1f} ms")
    rest = sum(medians.values()) - sum(v for _, v in shown)
    total = sum(medians.values()) * 1000
    print(f"  {'(the others)':<24} {rest * 1000:7.1f} ms; all: {total:.1f} ms")
    first = statistics.median(samples["in-process: first Broker(): first connection"])
    sub = statistics.median(samples["subprocess: leveret server to first connection"])
    print(f"\nsubprocess / in-process (first Broker()): {sub / first:.1f}x")
    rabbit = samples.get("RabbitMQ: rabbitmq-server to first connection")
    if rabbit:
        print(f"RabbitMQ / in-process (first Broker()): {statistics.median(rabbit) / first:.0f}x")
    print(f"load average at the end: {os.getloadavg()[0]:.1f}")
    if args.json:
        args.json.write_text(json.dumps(samples, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
