"""Every runnable example of README.md and docs/*.md, run as written: each document in a
network namespace of its own, its blocks in order (tests/docs/runner.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.docs import blocks
from tests.docs.runner import DocumentRun
from tests.support.netns import NetNamespace, netns_available

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


def _with_examples() -> list[Path]:
    found = []
    for path in blocks.DOCUMENTS:
        try:
            if blocks.parse(path).runs:
                found.append(path)
        except blocks.DirectiveError:
            found.append(path)  # the test says why
    return found


@pytest.mark.timeout(1200)
@pytest.mark.parametrize("path", _with_examples(), ids=lambda p: str(p.relative_to(blocks.ROOT)))
def test_the_examples_run_as_written(path: Path, tmp_path: Path) -> None:
    doc = blocks.parse(path)
    if not netns_available():
        message = "the examples run in network namespaces of their own (root, unshare --net)"
        if IN_CI:
            pytest.fail(message)
        pytest.skip(message)
    with NetNamespace() as ns:
        run = DocumentRun(doc, tmp_path, ns)
        run.run()
    for timing in run.timings:
        print(f"{timing.seconds:6.1f} s  {timing.where}")
    assert run.ran == sum(1 for b in doc.blocks if b.runs)
