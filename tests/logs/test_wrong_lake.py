"""A command pointed at something that is not a log lake says so in one line, whichever
command it is. Found by a user: ``leveret logs search --lake leveret-data`` (the data
directory above the lake) printed a multi-line DuckDB ``Binder Error: Hive partition
mismatch``, and an empty directory printed nothing and exited 0."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

CLI = [sys.executable, "-m", "leveret.cli.main"]


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    """A data directory as ``leveret up`` leaves it: the lake below it, with partitions."""
    data = tmp_path / "leveret-data"
    part = data / "lake" / "date=2026-11-28" / "severity=info"
    part.mkdir(parents=True)
    (data / "lake" / "_spark_metadata").mkdir()
    (part / "part-0.parquet").write_bytes(b"PAR1")
    (data / "checkpoint").mkdir()
    (tmp_path / "empty").mkdir()
    return data


@pytest.mark.parametrize(
    "command",
    [
        ("logs", "search"),
        ("logs", "search", "disk full"),
        ("pipeline", "compact"),
        ("pipeline", "report"),
    ],
)
def test_not_a_lake_is_one_line(data_dir: Path, command: tuple[str, ...]) -> None:
    empty = data_dir.parent / "empty"
    for lake, expected in (
        (data_dir, f"no log lake at {data_dir}: the lake is {data_dir / 'lake'} "
                   f"(--lake {data_dir / 'lake'})"),
        (empty, f"no log lake at {empty} (run `leveret pipeline ingest` first)"),
    ):  # fmt: skip
        run = subprocess.run(
            [*CLI, *command, "--lake", str(lake)], capture_output=True, text=True, timeout=120
        )
        assert (run.returncode, run.stdout, run.stderr) == (1, "", f"Error: {expected}\n")
