"""``leveret pipeline ingest`` from a virtualenv that is not activated: its ``bin/leveret``
called by full path with a PATH that does not lead to it (as pipx, a systemd service or a
cron job run it). Spark must start its Python workers with the interpreter that has
Leveret, not with ``python3`` from PATH: here PATH has only the system's ``/usr/bin`` and
``/bin``, whose ``python3`` (if any) has neither Leveret nor PySpark.

The virtualenv sees the system's site-packages for PySpark and the other libraries, and has
Leveret itself installed into it from a copy of this source tree (not editable), so the
``leveret`` it imports is its own."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from tests.spark.conftest import delete_queue, filled_stream
from tests.spark.test_ingest import _finish, _ingest, _kill_after_batches
from tests.support.brokers import BrokerUnderTest

ROOT = Path(__file__).resolve().parents[2]

# slow by nature (JVMs, clusters); bounded so a hang still ends
pytestmark = pytest.mark.timeout(1800)


@pytest.fixture(scope="session")
def venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A virtualenv (system site-packages visible) with this tree's Leveret installed."""
    where = tmp_path_factory.mktemp("install")
    source = where / "source"
    source.mkdir()
    shutil.copytree(ROOT / "src", source / "src", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    env = where / "venv"
    subprocess.run(
        [sys.executable, "-m", "venv", "--system-site-packages", str(env)],
        check=True, capture_output=True, timeout=120,
    )  # fmt: skip
    subprocess.run(
        [str(env / "bin" / "python"), "-m", "pip", "install", "-q", "--no-deps",
         "--disable-pip-version-check", str(source)],
        check=True, capture_output=True, timeout=300,
    )  # fmt: skip
    return env


def _bare_env() -> dict[str, str]:
    """The environment of a service: no virtualenv on PATH, nothing that names a Python."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYSPARK_", "PYTHON"))}
    env.pop("VIRTUAL_ENV", None)
    env["PATH"] = "/usr/bin:/bin"
    if "JAVA_HOME" not in env and shutil.which("java") is None:
        pytest.skip("no java")
    return env


def test_the_virtualenv_imports_its_own_leveret(venv: Path) -> None:
    found = subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import leveret; print(leveret.__file__)"],
        capture_output=True, text=True, check=True, env=_bare_env(),
    ).stdout.strip()  # fmt: skip
    assert found.startswith(str(venv)), found
    on_path = shutil.which("python3", path="/usr/bin:/bin")
    if on_path is not None:  # the python3 Spark would otherwise start has no Leveret
        probe = subprocess.run(
            [on_path, "-c", "import leveret"], capture_output=True, env=_bare_env()
        )
        assert probe.returncode != 0


def test_ingest_from_an_unactivated_virtualenv_is_exactly_once(
    spark: SparkSession, leveret: BrokerUnderTest, venv: Path, tmp_path: Path
) -> None:
    total = 20_000
    stream = filled_stream(leveret, "spark-venv", total)
    cli = [str(venv / "bin" / "leveret")]
    env = _bare_env()
    lake = tmp_path / "lake"
    proc = _ingest(leveret.url, tmp_path, "--stream", stream, trigger="200ms",
                   per_trigger=2000, cli=cli, env=env)  # fmt: skip
    _kill_after_batches(proc, lake, 2)
    _finish(_ingest(leveret.url, tmp_path, "--stream", stream, trigger="availableNow",
                    per_trigger=5000, cli=cli, env=env))  # fmt: skip
    ids = Counter(int(r.message_id) for r in spark.read.parquet(str(lake)).collect())
    assert set(ids) == set(range(total)), "a record is missing"
    assert [i for i, n in ids.items() if n != 1] == []
    delete_queue(leveret, stream)
