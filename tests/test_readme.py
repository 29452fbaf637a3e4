"""The README describes this repository: the documents it names are in it, and its
Compatibility section does not call unimplemented what the README documents as done."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()


def test_the_documents_the_readme_names_are_in_the_repository() -> None:
    named = set(re.findall(r"`((?:[\w.-]+/)*[\w-]+\.md)`", README))
    assert named, "the README names no documents"
    assert [n for n in sorted(named) if not (ROOT / n).exists()] == []


def test_compatibility_does_not_call_documented_features_unimplemented() -> None:
    compatibility = README.split("## Compatibility", 1)[1].split("\n## ", 1)[0]
    assert "Not implemented yet" not in compatibility
    for feature in ("Policies", "topic permissions", "x-queue-mode: lazy"):
        assert feature in README.split("## Compatibility", 1)[0], feature
