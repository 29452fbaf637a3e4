"""A Spark standalone cluster on this machine: a master and workers started from PySpark's
own ``bin/spark-class`` (``SPARK_HOME`` is the pyspark package), every process in a session
of its own so that a worker is killed with everything it runs (its executor and their
Python workers), as when its machine dies.

The executors run a Python that has PySpark, pyarrow and pandas only (and what those
depend on): a virtualenv made here with pip, of the versions this interpreter has, kept
under ``.cache/`` between runs. Leveret reaches them only as the zip the job ships.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import pyspark

from tests.support import jvm
from tests.support.ports import free_port

SPARK_HOME = Path(pyspark.__file__).resolve().parent
ROOT = Path(__file__).resolve().parents[2]
WORKER_PACKAGES = ("pyspark", "pyarrow", "pandas")


def worker_python(cache: Path = ROOT / ".cache") -> Path:
    """A virtualenv's interpreter with only PySpark, pyarrow and pandas (same versions as
    here), made once."""
    from importlib.metadata import version

    pins = [f"{name}=={version(name)}" for name in WORKER_PACKAGES]
    tag = "-".join([f"py{sys.version_info[0]}{sys.version_info[1]}", *pins]).replace("==", "")
    venv = cache / f"spark-worker-{tag}"
    python = venv / "bin" / "python"
    if (venv / "complete").exists():
        return python
    cache.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True,
                   capture_output=True, timeout=300)  # fmt: skip
    subprocess.run([str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check",
                    *pins], check=True, capture_output=True, timeout=1800)  # fmt: skip
    (venv / "complete").write_text("\n".join(pins))
    return python


def spark_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYSPARK_", "SPARK_"))}
    env.update(
        SPARK_HOME=str(SPARK_HOME),
        SPARK_LOCAL_IP="127.0.0.1",
        SPARK_SUBMIT_OPTS=jvm.SUBMIT_OPTS,
        SPARK_DAEMON_JAVA_OPTS=jvm.DAEMON_OPTS,
        **extra,
    )
    return env


@dataclass
class Process:
    proc: subprocess.Popen[bytes]
    log: Path

    def kill(self) -> None:
        """SIGKILL to its whole session: the JVM and everything it started."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(30)


@dataclass
class Standalone:
    root: Path
    workers: int = 2
    port: int = field(default_factory=free_port)
    ui_port: int = field(default_factory=free_port)
    master: Process | None = None
    nodes: list[Process] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    def _spawn(self, name: str, *args: str) -> Process:
        log = self.root / f"{name}.log"
        with open(log, "wb") as out:
            proc = subprocess.Popen(
                [str(SPARK_HOME / "bin" / "spark-class"), *args],
                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                env=spark_env(SPARK_LOG_DIR=str(self.root), SPARK_WORKER_DIR=str(self.root)),
                start_new_session=True,
            )  # fmt: skip
        return Process(proc, log)

    def start(self) -> None:
        try:
            self.master = self._spawn(
                "master", "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                "--port", str(self.port), "--webui-port", str(self.ui_port),
            )  # fmt: skip
            for i in range(self.workers):
                self.nodes.append(self._spawn(
                    f"worker{i}", "org.apache.spark.deploy.worker.Worker", self.url,
                    "--host", "127.0.0.1", "--cores", "1", "--memory", "1g",
                    "--webui-port", str(free_port()), "--work-dir", str(self.root / f"work{i}"),
                ))  # fmt: skip
            self.wait_workers(self.workers)
        except BaseException:
            self.stop()
            raise

    def alive_workers(self) -> int:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.ui_port}/json/", timeout=5) as r:
                return int(json.load(r)["aliveworkers"])
        except (OSError, ValueError, KeyError):
            return 0

    def wait_workers(self, count: int, timeout: float = 300) -> None:
        deadline = time.monotonic() + timeout
        while self.alive_workers() < count:
            for p in [self.master, *self.nodes]:
                if p is not None and p.proc.poll() is not None:
                    raise RuntimeError(f"{p.log.name} exited: {p.log.read_text()[-2000:]}")
            if time.monotonic() > deadline:
                raise RuntimeError("the workers did not register with the master")
            time.sleep(0.5)

    def stop(self) -> None:
        for p in [*self.nodes, self.master]:
            if p is not None:
                p.kill()
