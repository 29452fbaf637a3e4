"""Every runnable example of README.md and docs/*.md, run as written: each document in a
network namespace of its own, its blocks in order (tests/docs/runner.py)."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.docs import blocks
from tests.docs.runner import DocumentRun, ExampleFailed
from tests.support.netns import NetNamespace, netns_available

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


@pytest.fixture
def ns() -> Iterator[NetNamespace]:
    """A network namespace of the test's own, where RabbitMQ's ports are free."""
    if not netns_available():
        message = "the examples run in network namespaces of their own (root, unshare --net)"
        if IN_CI:
            pytest.fail(message)
        pytest.skip(message)
    with NetNamespace() as namespace:
        yield namespace


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
def test_the_examples_run_as_written(path: Path, tmp_path: Path, ns: NetNamespace) -> None:
    doc = blocks.parse(path)
    run = DocumentRun(doc, tmp_path, ns)
    run.run()
    for timing in run.timings:
        print(f"{timing.seconds:6.1f} s  {timing.where}")
    assert run.ran == sum(1 for b in doc.blocks if b.runs)


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("```console\n$ echo hello\nhallo\n```\n", "not:\nhallo"),
        ("```sh\ntrue\nfalse\necho never\n```\n", "exit status 1, not 0"),
        ("<!-- exits: 3 -->\n```sh\nexit 4\n```\n", "exit status 4, not 3"),
        ("```python\ndef test_it():\n    assert 1 == 0\n```\n", "1 failed"),
        ("```python\nraise SystemExit('no')\n```\n", "exit status 1"),
        ("<!-- background, ready at: x -->\n```sh\necho x; sleep 100\n```\n", "status -2"),
        ("<!-- background, ready at: never -->\n```sh\necho hi\n```\n", "ended before printing"),
    ],
    ids=["output", "failure", "exit status", "test", "script", "ctrl-c", "never ready"],
)
def test_an_example_that_does_not_do_as_shown_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ns: NetNamespace, text: str, said: str
) -> None:
    monkeypatch.setattr(blocks, "ROOT", tmp_path)
    (tmp_path / "doc.md").write_text(text)
    (tmp_path / "work").mkdir()
    with pytest.raises(ExampleFailed, match=re.escape(said)):
        DocumentRun(blocks.parse(tmp_path / "doc.md"), tmp_path / "work", ns).run()


def test_what_a_document_shows_passes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ns: NetNamespace
) -> None:
    monkeypatch.setattr(blocks, "ROOT", tmp_path)
    (tmp_path / "doc.md").write_text(
        "```text\nshown, not run\n```\n\n"
        "<!-- file: words.txt -->\n```toml\na = 1\n```\n\n"
        "<!-- background, ready at: listening -->\n```sh\n"
        'python3 -c \'import signal,sys; print("listening", flush=True); '
        "signal.sigwait([signal.SIGINT])'\n```\n\n"
        "```console\n$ cat words.txt\na = 1\n$ printf 'a\\tb\\nc\\nd\\n'\na\tb\n…\n```\n\n"
        "<!-- Ctrl-C -->\n\n<!-- exits: 3 -->\n```sh\nexit 3\n```\n"
    )
    (tmp_path / "work").mkdir()
    run = DocumentRun(blocks.parse(tmp_path / "doc.md"), tmp_path / "work", ns)
    run.run()
    assert run.ran == 3
