"""``leveret pipeline ingest --master spark://…`` on a standalone cluster of this machine
(a master and two workers from PySpark's ``spark-class``) whose executors' Python has
PySpark, pyarrow and pandas only: the job ships Leveret's code itself. One worker is killed
(``kill -9``, with its executor) mid-run; the lake still holds every record exactly once,
for Spark (which reads through the sink's log) and for pyarrow (which lists the directory):
the files the killed tasks completed but never committed are removed.

Runs under CI and locally with LEVERET_CLUSTER_TESTS=1 (see tests/support/rabbitmq_cluster).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

import leveret
from tests.spark.conftest import declare_stream, delete_queue, emit_records
from tests.spark.spark_cluster import Standalone, spark_env, worker_python
from tests.spark.test_ingest import _committed_batches
from tests.support.brokers import BrokerUnderTest
from tests.support.rabbitmq_cluster import WANTED

RECORDS = 30_000
SOURCE = Path(leveret.__file__).resolve().parents[1]

# slow by nature (JVMs, clusters); bounded so a hang still ends
pytestmark = pytest.mark.timeout(1800)


@pytest.fixture(scope="module")
def executor_python() -> Path:
    if not WANTED:
        pytest.skip("cluster tests run under CI, or with LEVERET_CLUSTER_TESTS=1")
    python = worker_python()
    env = spark_env()
    env.pop("PYTHONPATH", None)
    for module in ("leveret", "pika", "pamqp"):
        probe = subprocess.run([str(python), "-c", f"import {module}"], capture_output=True,
                               env=env)  # fmt: skip
        assert probe.returncode != 0, f"the workers' Python must not have {module}"
    for module in ("pyspark", "pyarrow", "pandas"):
        subprocess.run([str(python), "-c", f"import {module}"], check=True, env=env)
    return python


@pytest.fixture
def standalone(tmp_path: Path, executor_python: Path) -> Iterator[Standalone]:
    cluster = Standalone(tmp_path / "spark")
    cluster.root.mkdir()
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()


def _ingest(cluster: Standalone, python: Path, url: str, stream: str, tmp: Path,
            trigger: str, per_trigger: int,
            stream_port: int) -> subprocess.Popen[bytes]:  # fmt: skip
    # The driver imports this tree's Leveret through its own sys.path, not PYTHONPATH:
    # Spark passes PYTHONPATH on to the Python processes it starts, and those must find
    # Leveret only in the zip the job ships.
    env = spark_env(PYSPARK_PYTHON=str(python))
    env.pop("PYTHONPATH", None)
    driver = (
        f"import sys; sys.path.insert(0, {str(SOURCE)!r}); "
        "sys.argv[0] = 'leveret'; from leveret.cli.main import main; main()"
    )
    return subprocess.Popen(
        [sys.executable, "-c", driver, "pipeline", "ingest", "--url", url,
         "--stream", stream, "--stream-port", str(stream_port), "--exchange", "",
         "--lake", str(tmp / "lake"),
         "--checkpoint", str(tmp / "cp"), "--master", cluster.url, "--trigger", trigger,
         "--max-records-per-trigger", str(per_trigger), "--max-restarts", "10",
         "--conf", "spark.executor.memory=512m", "--conf", "spark.cores.max=2",
         "--conf", "spark.driver.host=127.0.0.1", "--log-level", "warning"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, start_new_session=True,
    )  # fmt: skip


def _listed_ids(lake: Path) -> Counter[int]:
    """The records' ids as a reader that lists the directory sees them (pyarrow's dataset
    discovery, as pandas, DuckDB and Trino read a Parquet directory)."""
    import pyarrow.dataset as ds

    table = ds.dataset(str(lake), format="parquet", partitioning="hive").to_table(
        columns=["message_id"]
    )
    return Counter(int(v) for v in table.column("message_id").to_pylist())


def test_ingest_on_a_standalone_cluster_survives_a_killed_worker(
    spark: SparkSession,
    leveret: BrokerUnderTest,
    standalone: Standalone,
    executor_python: Path,
    tmp_path: Path,
) -> None:
    stream = f"spark-standalone-{uuid.uuid4().hex[:8]}"
    declare_stream(leveret, stream)
    emit_records(leveret.url, stream, range(RECORDS))
    lake = tmp_path / "lake"
    # the default protocol (auto) reads Leveret's stream port: the executors read chunks
    proc = _ingest(standalone, executor_python, leveret.url, stream, tmp_path, "500ms", 2000,
                   leveret.stream_port)  # fmt: skip
    try:
        deadline = time.monotonic() + 600
        while _committed_batches(lake) < 2:
            assert proc.poll() is None, proc.communicate()[0].decode()
            assert time.monotonic() < deadline, "the ingest made no progress"
            time.sleep(0.1)
        standalone.nodes[0].kill()  # a worker and its executor, mid-run
        killed_at = _committed_batches(lake)
        while _committed_batches(lake) < killed_at + 2:
            assert proc.poll() is None, proc.communicate()[0].decode()
            assert time.monotonic() < deadline, "no progress after the worker died"
            time.sleep(0.1)
        assert _committed_batches(lake) * 2000 < RECORDS, "the kill came too late"
        proc.send_signal(signal.SIGTERM)
        out = proc.communicate(timeout=300)[0].decode()
        assert proc.returncode == 0, out
        # what a directory lister sees is what Spark sees: every committed record, once
        spark_ids = Counter(int(r.message_id) for r in spark.read.parquet(str(lake)).collect())
        assert sorted(_listed_ids(lake).elements()) == sorted(spark_ids.elements())
        assert [i for i, n in spark_ids.items() if n != 1] == []
        final = _ingest(standalone, executor_python, leveret.url, stream, tmp_path,
                        "availableNow", 10_000, leveret.stream_port)  # fmt: skip
        out = final.communicate(timeout=600)[0].decode()
        assert final.returncode == 0, out
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(30)
    ids = Counter(int(r.message_id) for r in spark.read.parquet(str(lake)).collect())
    assert set(ids) == set(range(RECORDS)), "a record is missing"
    assert [i for i, n in ids.items() if n != 1] == []
    listed = _listed_ids(lake)
    assert set(listed) == set(range(RECORDS)), "a record is missing for pyarrow"
    assert [i for i, n in listed.items() if n != 1] == []
    delete_queue(leveret, stream)
