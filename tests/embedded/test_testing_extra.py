"""``leveret[testing]`` brings what the pytest plugin needs: pytest."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_testing_extra_brings_pytest() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    testing = project["optional-dependencies"]["testing"]
    assert any(req.replace(" ", "").startswith("pytest>=") for req in testing), testing
    plugin = project["entry-points"]["pytest11"]["leveret"]
    assert plugin == "leveret.testing.plugin"
    assert "leveret[testing]" in (ROOT / "docs" / "testing.md").read_text()
