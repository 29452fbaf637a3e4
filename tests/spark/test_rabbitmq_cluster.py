"""The log system and the pipeline on a three-node RabbitMQ 3.10.8 cluster, with a node
killed (``kill -9``) while records are being emitted, received and ingested.

- The ``logs`` stream of the lake is replicated on all three nodes
  (``--stream-replicas 3``, ``x-initial-cluster-size``); its leader is on node 2.
- Two ``emit-log`` processes get every node's URL: E1 starting with node 1, E2 with node 2.
- Two ``receive-logs`` processes: R1 on a quorum queue (replicated), starting with node 1;
  R2 on a temporary queue, starting with node 2.
- ``pipeline ingest`` reads the stream starting with node 1.
- Node 1 is killed mid-run: E1, R1 and the ingest move to another node.

What must hold: E2 (whose node stays) has every record confirmed; E1 may end with records
that were in flight on node 1 unconfirmed, and says how many. Every record confirmed is in
the lake, and nothing is there twice; each receiver's file holds every record confirmed,
once (R1's quorum queue keeps what it had not acked; R2's node stays).

These tests run under CI and locally with LEVERET_CLUSTER_TESTS=1 (see
tests/support/rabbitmq_cluster.py).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from leveret.spark.pipeline import ensure_log_stream
from tests.logs.conftest import Receiver, read_records
from tests.spark.test_ingest import _committed_batches
from tests.support.rabbitmq_cluster import RabbitCluster, require_cluster_tests
from tests.support.waiting import wait_for

CLI = [sys.executable, "-m", "leveret.cli.main"]
RECORDS = int(os.environ.get("LEVERET_CLUSTER_RECORDS", "20000"))  # per emitter

# slow by nature (JVMs, clusters); bounded so a hang still ends
pytestmark = pytest.mark.timeout(1800)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RabbitCluster]:
    require_cluster_tests()
    # rabbitmq_stream on every node: the ingest reads the stream over the stream protocol
    c = RabbitCluster(tmp_path_factory.mktemp("rabbitmq-cluster"), stream=True)
    c.start()
    try:
        yield c
    finally:
        c.stop()


def _url_args(urls: list[str]) -> list[str]:
    return [arg for u in urls for arg in ("--url", u)]


class Emitter:
    """``emit-log`` fed ``count`` lines at a steady pace through its stdin."""

    def __init__(self, urls: list[str], exchange: str, tag: str, count: int) -> None:
        self.tag = tag
        self.count = count
        self.fed = 0
        self.proc = subprocess.Popen(
            [*CLI, "emit-log", *_url_args(urls), "--exchange", exchange, "--app", tag],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )  # fmt: skip
        self.thread = threading.Thread(target=self._feed, daemon=True)
        self.thread.start()

    def _feed(self) -> None:
        assert self.proc.stdin is not None
        step = 250
        for start in range(0, self.count, step):
            stop = min(start + step, self.count)
            lines = "".join(f"{self.tag}-{i}\n" for i in range(start, stop))
            try:
                self.proc.stdin.write(lines.encode())
                self.proc.stdin.flush()
            except BrokenPipeError:
                break
            self.fed = stop
            time.sleep(0.05)  # about 5,000 records/s: long enough to be cut by a kill
        self.proc.stdin.close()
        self.proc.stdin = None  # communicate() leaves it alone

    def finish(self) -> tuple[int, str]:
        self.thread.join(300)
        out, err = self.proc.communicate(timeout=300)
        return self.proc.returncode, (out + err).decode()


def _confirmed(emitter: Emitter, code: int, output: str) -> int:
    """How many records the emitter reports confirmed."""
    if code == 0:
        assert f"Sent {emitter.count} records" in output, output
        return emitter.count
    m = re.search(r"confirmed (\d+) of (\d+) records", output)
    assert m is not None and "in flight when a connection was lost" in output, output
    assert int(m.group(2)) == emitter.count, output
    return int(m.group(1))


def _ids(messages: list[str], tag: str) -> list[int]:
    return [int(m.split("-")[1]) for m in messages if m.startswith(f"{tag}-")]


def _ingest(
    urls: list[str], stream: str, exchange: str, tmp: Path, trigger: str, stream_port: int
) -> subprocess.Popen[bytes]:
    """The ingest with the default protocol (auto): the stream port of the first URL's node;
    the stream's other nodes come from its Metadata (each has a stream port of its own)."""
    return subprocess.Popen(
        [*CLI, "pipeline", "ingest", *_url_args(urls), "--stream", stream, "--exchange", exchange,
         "--stream-port", str(stream_port),
         "--stream-replicas", "3", "--lake", str(tmp / "lake"), "--checkpoint", str(tmp / "cp"),
         "--master", "local[2]", "--trigger", trigger, "--max-restarts", "20",
         "--log-level", "warning"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip


def test_emit_receive_and_ingest_lose_nothing_when_a_node_is_killed(
    spark: SparkSession, cluster: RabbitCluster, tmp_path: Path
) -> None:
    tag = uuid.uuid4().hex[:6]
    exchange, stream = f"logs-{tag}", f"lake-{tag}"
    from_1, from_2 = cluster.urls(0), cluster.urls(1)
    # the stream is declared through node 2: its leader is there (client-local), and it
    # has replicas on the other two
    ensure_log_stream(",".join(from_2), stream, exchange, replicas=3)

    r1 = Receiver(
        [
            *_url_args(from_1),
            "--exchange",
            exchange,
            "--queue",
            f"q-{tag}",
            "--durable",
            "--queue-type",
            "quorum",
            "--to",
            str(tmp_path / "r1.jsonl"),
        ]
    )
    r2 = Receiver([*_url_args(from_2), "--exchange", exchange,
                   "--to", str(tmp_path / "r2.jsonl")])  # fmt: skip
    receivers = [r1, r2]
    ingest = _ingest(from_1, stream, exchange, tmp_path, "500ms", cluster.nodes[0].stream_port)
    emitters: list[Emitter] = []
    try:
        for r in receivers:
            r.wait_ready()
        e1 = Emitter(from_1, exchange, "e1", RECORDS)
        e2 = Emitter(from_2, exchange, "e2", RECORDS)
        emitters = [e1, e2]
        deadline = time.monotonic() + 300
        while min(e1.fed, e2.fed) < RECORDS // 3 or _committed_batches(tmp_path / "lake") < 1:
            assert time.monotonic() < deadline, "no progress before the kill"
            assert ingest.poll() is None, ingest.communicate()[0].decode()
            time.sleep(0.05)
        cluster.kill(cluster.nodes[0])  # E1's, R1's and the ingest's node

        code1, out1 = e1.finish()
        code2, out2 = e2.finish()
        confirmed1 = _confirmed(e1, code1, out1)
        assert code2 == 0, out2  # its node stayed up
        assert confirmed1 >= RECORDS // 3, out1

        # the receivers get everything confirmed (R2's file also what E1 had in flight,
        # when node 1 had routed it before it died)
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            got = [[r["message"] for r in read_records(tmp_path / f"r{i}.jsonl")]
                   for i in (1, 2)]  # fmt: skip
            if all(len(_ids(g, "e2")) >= RECORDS and len(_ids(g, "e1")) >= confirmed1
                   for g in got):  # fmt: skip
                break
            time.sleep(0.5)
        time.sleep(2)  # anything redelivered late would show up as a duplicate now
        for r in receivers:
            assert r.stop() == 0, "".join(r.stderr)

        # the lake: the streaming ingest is stopped, a last run takes the rest
        ingest.send_signal(signal.SIGTERM)
        out = ingest.communicate(timeout=300)[0].decode()
        assert ingest.returncode == 0, out
        final = _ingest(cluster.urls(1), stream, exchange, tmp_path, "availableNow",
                        cluster.nodes[1].stream_port)  # fmt: skip
        out = final.communicate(timeout=600)[0].decode()
        assert final.returncode == 0, out
    finally:
        for e in emitters:
            if e.proc.poll() is None:
                e.proc.kill()
                e.proc.wait(10)
        for r in receivers:
            if r.proc.poll() is None:
                r.proc.kill()
                r.proc.wait(10)
            r.close()
        if ingest.poll() is None:
            os.killpg(ingest.pid, signal.SIGKILL)
            ingest.wait(30)

    lake = spark.read.parquet(str(tmp_path / "lake")).select("message", "message_id").collect()
    copies = Counter(r.message_id for r in lake)
    assert [m for m, n in copies.items() if n > 1] == [], "a record is in the lake twice"
    messages = [r.message for r in lake]
    assert sorted(_ids(messages, "e2")) == list(range(RECORDS))
    e1_in_lake = _ids(messages, "e1")
    assert len(e1_in_lake) >= confirmed1 and set(e1_in_lake) <= set(range(RECORDS))
    for i in (1, 2):
        records = read_records(tmp_path / f"r{i}.jsonl")
        written = Counter(json.dumps(r, sort_keys=True) for r in records)
        assert [k for k, n in written.items() if n > 1] == [], f"R{i} wrote a record twice"
        got = [r["message"] for r in records]
        assert sorted(_ids(got, "e2")) == list(range(RECORDS)), f"R{i} misses E2's records"
        assert len(_ids(got, "e1")) >= confirmed1, f"R{i} misses E1's confirmed records"
    cluster.restart(cluster.nodes[0])


def test_the_log_handler_fails_over_to_another_node(cluster: RabbitCluster, tmp_path: Path) -> None:
    """AMQPHandler given every node keeps shipping when its node dies: what it had in
    flight is sent again on the next node (at-least-once; a receiver drops the copy by
    message id)."""
    if not all(n.alive for n in cluster.nodes):
        cluster.restart(next(n for n in cluster.nodes if not n.alive))
    tag = uuid.uuid4().hex[:6]
    exchange = f"handler-{tag}"
    # the receiver's temporary queue on node 2, away from any node the handler may use
    receiver = Receiver([*_url_args(cluster.urls(2)), "--exchange", exchange,
                         "--to", str(tmp_path / "r.jsonl")])  # fmt: skip
    script = f"""
import dataclasses, json, logging, sys, time
from leveret.logs import AMQPHandler
h = AMQPHandler({cluster.urls(0)!r}, exchange={exchange!r}, timeout=120)
log = logging.getLogger("app"); log.addHandler(h); log.setLevel(logging.INFO)
for i in range(4000):
    log.info("h-%d", i)
    if i == 1000:
        h.flush()  # connected, and what it had confirmed
        print("half", h.stats.node, flush=True); sys.stdin.readline()
    time.sleep(0.0005)
h.close()
print(json.dumps(dataclasses.asdict(h.stats)), flush=True)
"""
    try:
        receiver.wait_ready()
        app = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, text=True)  # fmt: skip
        assert app.stdout is not None and app.stdin is not None
        half, on = app.stdout.readline().split()
        assert half == "half"
        # the node it is on: node 0 unless that one refused it at first (just restarted)
        node = next(n for n in cluster.nodes if f":{n.port}/" in on)
        cluster.kill(node)
        app.stdin.write("\n")
        app.stdin.flush()
        out, _ = app.communicate(timeout=300)
        assert app.returncode == 0, out
        stats = json.loads(out)
        assert (stats["confirmed"], stats["dropped"]) == (4000, 0), out
        assert stats["reconnects"] >= 1, out
        wait_for(lambda: len(read_records(tmp_path / "r.jsonl")) >= 4000, 120, 0.2)
        assert receiver.stop() == 0
    finally:
        if receiver.proc.poll() is None:
            receiver.proc.kill()
            receiver.proc.wait(10)
        receiver.close()
    got = [r["message"] for r in read_records(tmp_path / "r.jsonl")]
    assert sorted(_ids(got, "h")) == list(range(4000))
    cluster.restart(node)
