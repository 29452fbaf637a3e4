"""The ingest of a super stream against the ingest of one stream, on a Spark standalone
cluster of two workers on this machine, measured in the same run; then the super stream's
ingest with a worker killed -9 mid-run, checked exactly-once.

1. A Leveret on free ports; a stream ``one`` and a super stream ``four`` of ``--partitions``
   (4) partitions, each filled with the same ``--records`` log records (the super stream's
   through its exchange, each app's records to the partition its name hashes to, as
   ``emit-log --super-stream`` sends them; the apps are chosen so that the partitions hold
   as many records each: the measure is of reading partitions side by side, not of a
   hash's skew).
2. A master and two workers (one core, 1 GiB each) from PySpark's ``spark-class``
   (``SPARK_HOME`` is the pyspark package); executors run this interpreter
   (``PYSPARK_PYTHON``), and the job ships Leveret's code as on any cluster.
3. One unmeasured query over each source (5,000 records a partition: the executors' Python
   workers and the JIT warmed), then ``--rounds`` rounds; each runs the ingest query
   (``start_ingest``: records parsed by the source, Parquet partitioned by date and
   severity, ``availableNow``, ``--batches`` equal micro-batches) from an empty checkpoint
   over each source, the order alternating between rounds. Two rates per run: the whole
   query's (start to end) and the warm one (the batches after the first, Spark's own batch
   durations). Each lake is counted (every record once). Reported: medians and spreads
   (min-max) over the rounds, and the ratio super stream / stream of the medians.
4. ``leveret pipeline ingest --super-stream --master spark://…`` as a process of its own
   on a fresh super stream (``--kill-records``), a worker killed -9 (with its executor)
   after two committed batches, the ingest stopped after two more and run again with
   ``availableNow``: every record in the lake once, for a reader that lists the directory
   and for one that reads the sink's log.

    python benchmarks/superstream.py [--records N] [--partitions P] [--rounds K]
                                     [--batches B] [--kill-records M] [--no-kill]
                                     [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ["PYTHONPATH"] = os.pathsep.join(
    p for p in (str(ROOT / "src"), os.environ.get("PYTHONPATH")) if p
)

import pika  # noqa: E402
from tests.spark.spark_cluster import Standalone, spark_env  # noqa: E402
from tests.support.brokers import BrokerUnderTest, start_leveret  # noqa: E402

from leveret.logs.superstream import declare_super_stream, partition_index  # noqa: E402
from leveret.spark.client import Outgoing, publish  # noqa: E402
from leveret.spark.pipeline import IngestConfig, start_ingest  # noqa: E402


def balanced_apps(partitions: int, per_partition: int = 8) -> list[str]:
    """App names, ``per_partition`` of them hashing to each partition."""
    out: list[str] = []
    seen = [0] * partitions
    i = 0
    while min(seen) < per_partition:
        app = f"app-{i}"
        k = partition_index(app, partitions)
        if seen[k] < per_partition:
            seen[k] += 1
            out.append(app)
        i += 1
    return out


def _body(i: int, app: str, ts: float) -> bytes:
    iso = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ts)) + f".{int(ts % 1 * 1e6):06d}Z"
    sev = ("info", "info", "warning", "error", "debug")[i % 5]
    return (
        f'{{"ts":"{iso}","severity":"{sev}","facility":"user","host":"bench",'
        f'"app":"{app}","pid":1,"message":"benchmark record {i}"}}'
    ).encode()


def fill(url: str, exchange: str, n: int, apps: list[str], partitions: int | None) -> float:
    """``n`` records to a stream (``partitions`` None: ``exchange`` is the stream's name,
    through the default exchange) or through a super stream's exchange, by app."""
    now = time.time()

    def items() -> Any:
        for i in range(n):
            app = apps[i % len(apps)]
            props = pika.BasicProperties(content_type="application/json", message_id=str(i))
            if partitions is None:
                yield Outgoing("", exchange, _body(i, app, now), props)
            else:
                key = str(partition_index(app, partitions))
                yield Outgoing(exchange, key, _body(i, app, now), props)

    t = time.perf_counter()
    publish(url, items(), window=5000, mandatory=True)
    return n / (time.perf_counter() - t)


def measure(spark: Any, broker: BrokerUnderTest, source: dict[str, str], n: int, batches: int,
            tmp: Path, starting: int = 0) -> dict[str, Any]:  # fmt: skip
    """One ingest query over ``source`` from an empty checkpoint; ``starting``: the offset
    it starts at (in each partition), its ``n`` records the rest."""
    cfg = IngestConfig(
        url=broker.url, lake=tmp / "lake", checkpoint=tmp / "cp", trigger="availableNow",
        max_records_per_trigger=-(-n // batches), declare=False, protocol="stream",
        stream_port=broker.stream_port, stream=source.get("stream"),
        super_stream=source.get("super_stream"), starting_offsets=str(starting),
    )  # fmt: skip
    t = time.perf_counter()
    query = start_ingest(spark, cfg)
    query.awaitTermination()
    elapsed = time.perf_counter() - t
    got = spark.read.parquet(str(cfg.lake)).select("message_id").distinct().count()
    total = spark.read.parquet(str(cfg.lake)).count()
    assert got == total == n, (got, total, n)
    done = [p for p in query.recentProgress if p["numInputRows"]]
    later = done[1:]
    warm = (
        sum(p["numInputRows"] for p in later)
        / sum(p["durationMs"]["triggerExecution"] / 1000 for p in later)
        if later
        else None
    )
    return {"per_s": n / elapsed, "seconds": elapsed, "warm_per_s": warm, "batches": len(done)}


def summary(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def _committed_batches(lake: Path) -> int:
    meta = lake / "_spark_metadata"
    return len([p for p in meta.iterdir() if p.name.isdigit()]) if meta.is_dir() else 0


def _ingest(cluster: Standalone, broker: BrokerUnderTest, name: str, tmp: Path, trigger: str,
            per_trigger: int, partitions: int) -> subprocess.Popen[bytes]:  # fmt: skip
    # this tree's sources: the session of the measures put the zip it ships first
    env = spark_env(PYSPARK_PYTHON=sys.executable, PYTHONPATH=str(ROOT / "src"))
    cmd = [sys.executable, "-m", "leveret.cli.main", "pipeline", "ingest", "--url", broker.url,
           "--super-stream", name, "--partitions", str(partitions),
           "--stream-port", str(broker.stream_port), "--lake", str(tmp / "lake"),
           "--checkpoint", str(tmp / "cp"), "--master", cluster.url, "--trigger", trigger,
           "--max-records-per-trigger", str(per_trigger), "--max-restarts", "10",
           "--conf", "spark.executor.memory=512m", "--conf", "spark.cores.max=2",
           "--conf", "spark.driver.host=127.0.0.1", "--log-level", "warning"]  # fmt: skip
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env,
                            start_new_session=True)  # fmt: skip


def _wait_batches(proc: subprocess.Popen[bytes], lake: Path, n: int, deadline: float) -> None:
    while _committed_batches(lake) < n:
        if proc.poll() is not None:
            raise AssertionError("the ingest ended: " + proc.communicate()[0].decode()[-3000:])
        if time.monotonic() > deadline:
            raise AssertionError("the ingest made no progress")
        time.sleep(0.1)


def _ids_listed(lake: Path) -> Counter[int]:
    import pyarrow.dataset as ds

    table = ds.dataset(str(lake), format="parquet", partitioning="hive").to_table(
        columns=["message_id"]
    )
    return Counter(int(v) for v in table.column("message_id").to_pylist())


def _ids_committed(lake: Path) -> Counter[int]:
    """The records of the files the sink's log names (as Spark reads the lake)."""
    import pyarrow.parquet as pq

    from leveret.logs.lake import SinkLog

    log = SinkLog(lake)
    log.refresh()
    out: Counter[int] = Counter()
    for path in log.files:
        local = path.removeprefix("file:")
        out.update(int(v) for v in pq.read_table(local, columns=["message_id"])
                   .column("message_id").to_pylist())  # fmt: skip
    return out


def kill_test(cluster: Standalone, broker: BrokerUnderTest, n: int, partitions: int,
              apps: list[str], tmp: Path) -> dict[str, Any]:  # fmt: skip
    """A worker killed -9 in the middle of a super stream's ingest: every record once."""
    name = "killed"
    per_trigger = max(1000, n // 15)
    proc = _ingest(cluster, broker, name, tmp, "500ms", per_trigger, partitions)
    lake = tmp / "lake"
    deadline = time.monotonic() + 900
    try:
        while not _exists(broker, name):
            if proc.poll() is not None:
                raise AssertionError("the ingest ended: " + proc.communicate()[0].decode())
            assert time.monotonic() < deadline, "no super stream made"
            time.sleep(0.1)
        fill(broker.url, name, n, apps, partitions)
        _wait_batches(proc, lake, 2, deadline)
        cluster.nodes[0].kill()  # a worker and its executor, mid-run
        killed_at = _committed_batches(lake)
        _wait_batches(proc, lake, killed_at + 2, deadline)
        assert _committed_batches(lake) * per_trigger < n, "the kill came too late"
        proc.send_signal(signal.SIGTERM)
        out = proc.communicate(timeout=300)[0].decode()
        assert proc.returncode == 0, out[-3000:]
        final = _ingest(cluster, broker, name, tmp, "availableNow", n, partitions)
        out = final.communicate(timeout=900)[0].decode()
        assert final.returncode == 0, out[-3000:]
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(30)
    listed, committed = _ids_listed(lake), _ids_committed(lake)
    result = {
        "records": n,
        "killed_after_batches": killed_at,
        "listed_missing": n - len(set(listed) & set(range(n))),
        "listed_twice": sum(1 for c in listed.values() if c > 1),
        "committed_missing": n - len(set(committed) & set(range(n))),
        "committed_twice": sum(1 for c in committed.values() if c > 1),
    }
    wrong = [v for k, v in result.items() if k.endswith(("missing", "twice"))]
    result["exactly_once"] = not any(wrong)
    return result


def _exists(broker: BrokerUnderTest, exchange: str) -> bool:
    conn = pika.BlockingConnection(pika.URLParameters(broker.url))
    try:
        conn.channel().exchange_declare(exchange, passive=True)
        return True
    except pika.exceptions.ChannelClosedByBroker:
        return False
    finally:
        if conn.is_open:
            conn.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--batches", type=int, default=4)
    ap.add_argument("--kill-records", type=int, default=60_000)
    ap.add_argument("--no-kill", action="store_true")
    ap.add_argument("--no-measure", action="store_true", help="only the killed-worker run")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()

    from leveret.spark.session import spark_session

    tmp = Path(tempfile.mkdtemp(prefix="leveret-superstream-"))
    broker = start_leveret(tmp / "leveret")
    cluster = Standalone(tmp / "spark")
    cluster.root.mkdir()
    results: dict[str, Any] = {"records": args.records, "partitions": args.partitions,
                               "rounds": args.rounds, "batches": args.batches,
                               "load_before": os.getloadavg()}  # fmt: skip
    try:
        apps = balanced_apps(args.partitions)
        conn = pika.BlockingConnection(pika.URLParameters(broker.url))
        conn.channel().queue_declare("one", durable=True, arguments={"x-queue-type": "stream"})
        conn.close()
        declare_super_stream(broker.url, "four", args.partitions)
        results["fill_per_s"] = {
            "one": fill(broker.url, "one", args.records, apps, None),
            "four": fill(broker.url, "four", args.records, apps, args.partitions),
        }
        print(f"filled: {results['fill_per_s']}", file=sys.stderr, flush=True)
        cluster.start()
        os.environ["PYSPARK_PYTHON"] = sys.executable
        spark = spark_session(cluster.url, "leveret-superstream-bench", {
            "spark.cores.max": "2", "spark.executor.memory": "1g",
            "spark.driver.host": "127.0.0.1", "spark.ui.enabled": "false",
        }, log_level="ERROR")  # fmt: skip
        sources = {"stream": {"stream": "one"}, "super stream": {"super_stream": "four"}}
        runs: dict[str, list[dict[str, Any]]] = {k: [] for k in sources}
        # not measured: the executors' first queries (their Python workers, the JIT)
        tail = args.records // args.partitions
        for name, source in sources.items():
            if not args.no_measure:
                warmup = min(5000, tail)
                n = warmup * (args.partitions if "super_stream" in source else 1)
                start = (args.records if "stream" in source else tail) - warmup
                measure(spark, broker, source, n, 2, tmp / f"warmup-{name[:5]}", start)
        for r in range(0 if args.no_measure else args.rounds):
            order = list(sources) if r % 2 == 0 else list(reversed(sources))
            for name in order:
                got = measure(spark, broker, sources[name], args.records, args.batches,
                              tmp / f"run-{r}-{name.replace(' ', '-')}")  # fmt: skip
                runs[name].append(got)
                warm = got["warm_per_s"] or 0
                print(f"round {r + 1} {name}: {got['per_s']:,.0f}/s whole, {warm:,.0f}/s warm",
                      file=sys.stderr, flush=True)  # fmt: skip
        spark.stop()  # its executors go: the killed-worker run gets the cores
        results["runs"] = runs
        if not args.no_measure:
            results["whole"] = {k: summary([x["per_s"] for x in v]) for k, v in runs.items()}
            results["warm"] = {k: summary([x["warm_per_s"] for x in v if x["warm_per_s"]])
                               for k, v in runs.items()}  # fmt: skip
            for what in ("whole", "warm"):
                s = results[what]
                results[what]["ratio"] = s["super stream"]["median"] / s["stream"]["median"]
        if not args.no_kill:
            results["worker_killed"] = kill_test(cluster, broker, args.kill_records,
                                                 args.partitions, apps, tmp / "kill")  # fmt: skip
        results["load_after"] = os.getloadavg()
    finally:
        cluster.stop()
        broker.stop()
    print(json.dumps({k: v for k, v in results.items() if k != "runs"}, indent=2, default=str))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2, default=str))


if __name__ == "__main__":
    main()
