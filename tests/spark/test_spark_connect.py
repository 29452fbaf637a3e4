"""``leveret pipeline ingest --remote sc://…``: the ingest as a Spark Connect client of the
connect server PySpark ships (``sbin/start-connect-server.sh``), from a client whose Python
has ``pyspark[connect]``'s libraries.

What Spark 4.3 allows, measured here: the ``amqp`` source registers over Connect and runs
when the server's Python has Leveret; when it has not, the code the client ships as an
artifact is enough for batch reads but not for a streaming one, whose planning on the
server does not see the session's artifacts. The second test pins that error.

Runs under CI and locally with LEVERET_CLUSTER_TESTS=1 (see tests/support/rabbitmq_cluster).
"""

from __future__ import annotations

import os
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
from tests.spark.spark_cluster import ROOT, SPARK_HOME, Process, spark_env, worker_python
from tests.support.brokers import BrokerUnderTest
from tests.support.ports import free_port, port_open
from tests.support.rabbitmq_cluster import WANTED

SOURCE = Path(leveret.__file__).resolve().parents[1]
RECORDS = 5000

# slow by nature (JVMs, clusters); bounded so a hang still ends
pytestmark = pytest.mark.timeout(1800)


@pytest.fixture(scope="module")
def client_python() -> Path:
    """A Python with PySpark (the system's) and Spark Connect's client libraries."""
    if not WANTED:
        pytest.skip("cluster tests run under CI, or with LEVERET_CLUSTER_TESTS=1")
    from importlib.metadata import version

    pin = f"pyspark[connect]=={version('pyspark')}"
    venv = ROOT / ".cache" / f"spark-connect-client-py{sys.version_info[0]}{sys.version_info[1]}"
    python = venv / "bin" / "python"
    if not (venv / "complete").exists():
        subprocess.run([sys.executable, "-m", "venv", "--clear", "--system-site-packages",
                        str(venv)], check=True, capture_output=True, timeout=300)  # fmt: skip
        subprocess.run([str(python), "-m", "pip", "install", "-q",
                        "--disable-pip-version-check", pin],
                       check=True, capture_output=True, timeout=1800)  # fmt: skip
        (venv / "complete").write_text(pin)
    return python


def _server(tmp: Path, python: str, with_leveret: bool) -> tuple[Process, int]:
    port = free_port()
    env = spark_env(SPARK_NO_DAEMONIZE="1", SPARK_LOG_DIR=str(tmp), SPARK_PID_DIR=str(tmp),
                    PYSPARK_PYTHON=python)  # fmt: skip
    env.pop("PYTHONPATH", None)
    if with_leveret:
        env["PYTHONPATH"] = str(SOURCE)
    log = tmp / "connect-server.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [str(SPARK_HOME / "sbin" / "start-connect-server.sh"), "--master", "local[2]",
             "--conf", f"spark.connect.grpc.binding.port={port}",
             "--conf", "spark.ui.enabled=false"],
            stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True,
        )  # fmt: skip
    server = Process(proc, log)
    deadline = time.monotonic() + 300
    while not port_open("127.0.0.1", port):
        if proc.poll() is not None or time.monotonic() > deadline:
            server.kill()
            raise RuntimeError("the connect server did not start: " + log.read_text()[-2000:])
        time.sleep(0.5)
    return server, port


@pytest.fixture
def stream(leveret: BrokerUnderTest) -> Iterator[str]:
    name = f"spark-connect-{uuid.uuid4().hex[:8]}"
    declare_stream(leveret, name)
    emit_records(leveret.url, name, range(RECORDS))
    yield name
    delete_queue(leveret, name)


def _ingest(
    client: Path, port: int, url: str, stream: str, tmp: Path
) -> subprocess.CompletedProcess[str]:
    driver = (
        f"import sys; sys.path.insert(0, {str(SOURCE)!r}); "
        "sys.argv[0] = 'leveret'; from leveret.cli.main import main; main()"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "SPARK_REMOTE")}
    return subprocess.run(
        [str(client), "-c", driver, "pipeline", "ingest", "--remote", f"sc://127.0.0.1:{port}",
         "--url", url, "--stream", stream, "--exchange", "", "--lake", str(tmp / "lake"),
         "--checkpoint", str(tmp / "cp"), "--trigger", "availableNow", "--max-restarts", "0",
         "--log-level", "warning"],
        capture_output=True, text=True, timeout=900, env=env,
    )  # fmt: skip


def test_ingest_over_spark_connect(
    spark: SparkSession, leveret: BrokerUnderTest, client_python: Path, stream: str,
    tmp_path: Path,
) -> None:  # fmt: skip
    server, port = _server(tmp_path, sys.executable, with_leveret=True)
    try:
        done = _ingest(client_python, port, leveret.url, stream, tmp_path)
    finally:
        server.kill()
    assert done.returncode == 0, done.stdout + done.stderr
    ids = Counter(int(r.message_id) for r in spark.read.parquet(str(tmp_path / "lake")).collect())
    assert set(ids) == set(range(RECORDS)) and set(ids.values()) == {1}


def test_a_streaming_ingest_over_connect_needs_leveret_on_the_server(
    leveret: BrokerUnderTest, client_python: Path, stream: str, tmp_path: Path
) -> None:
    server, port = _server(tmp_path, str(worker_python()), with_leveret=False)
    try:
        done = _ingest(client_python, port, leveret.url, stream, tmp_path)
    finally:
        server.kill()
    assert done.returncode == 1
    errors = [line for line in done.stderr.splitlines() if line.startswith("Error: ")]
    assert errors == ["Error: ingest failed: ModuleNotFoundError: No module named 'leveret'"], (
        done.stderr
    )
