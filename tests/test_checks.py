"""The project's own checks (lint, types, import direction) are part of the suite."""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_import_direction() -> None:
    result = subprocess.run(["lint-imports"], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_lint_and_types() -> None:
    for cmd in (["ruff", "check", "src", "tests"], ["ruff", "format", "--check", "src"], ["mypy"]):
        result = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
        assert result.returncode == 0, " ".join(cmd) + "\n" + result.stdout + result.stderr
