"""Every code block of README.md and docs/*.md is run by the suite, written to a file for
the blocks that run, or marked (``text``, ``<!-- not run: REASON -->``); and the rules the
runner reads the Markdown by (tests/docs/blocks.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.docs import blocks
from tests.docs.blocks import Block, DirectiveError, Stop


def test_every_block_is_run_or_marked() -> None:
    problems = []
    for path in blocks.DOCUMENTS:
        try:
            blocks.parse(path)
        except DirectiveError as exc:
            problems.append(str(exc))
    assert problems == []


def test_a_document_whose_examples_need_a_broker_says_what_runs_beside() -> None:
    for doc in blocks.documents():
        for block in doc.blocks:
            if block.runs and "localhost" in block.text and not doc.beside:
                started = any(b.background for b in doc.blocks if b.line < block.line)
                assert started, f"{block.where}: no broker beside it, none started before"


def _parse(tmp_path: Path, text: str) -> blocks.Document:
    doc = tmp_path / "doc.md"
    doc.write_text(text)
    return blocks.parse(doc)


def test_directives_before_a_block(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(blocks, "ROOT", tmp_path)
    doc = _parse(
        tmp_path,
        "<!-- examples beside: leveret server, ready at: Server startup complete -->\n"
        "# Title\n\n"
        "<!-- background, ready at: Waiting -->\n```sh\nleveret receive-logs\n```\n\n"
        "Text.\n<!-- retry for: 30 s -->\n<!-- exits: 1 -->\n```console\n$ false\n```\n\n"
        "<!-- Ctrl-C -->\n\n<!-- file: leveret.toml -->\n```toml\n[server]\n```\n\n"
        "<!-- not run: needs a cluster of three nodes -->\n```sh\nleveret x\n```\n\n"
        "```text\nanything\n```\n\n```python\ndef test_it():\n    pass\n```\n",
    )
    assert doc.beside == blocks.Beside("leveret server", "Server startup complete")
    bg, console, stop, toml, marked, text, test = doc.steps
    assert isinstance(bg, Block) and bg.background and bg.ready == "Waiting" and bg.runs
    assert isinstance(console, Block) and console.retry == 30 and console.exits == 1
    assert isinstance(stop, Stop)
    assert isinstance(toml, Block) and toml.file == "leveret.toml" and not toml.runs
    assert isinstance(marked, Block) and marked.not_run == "needs a cluster of three nodes"
    assert isinstance(text, Block) and not text.runs
    assert isinstance(test, Block) and test.runs and test.is_test


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("```\nleveret server\n```\n", "says what it is"),
        ("```toml\n[server]\n```\n", "is not run"),
        ("<!-- not run -->\n```sh\nx\n```\n", "cannot read"),
        ("<!-- backgroud -->\n```sh\nx\n```\n", "cannot read"),
        ("<!-- background, ready at: x -->\n\nText.\n", "is not before a block"),
        ("<!-- background, ready at: x -->\n```python\nx\n```\n", "only shell blocks"),
        ("<!-- background -->\n```sh\nleveret server\n```\n", "cannot read"),
        ("<!-- not run: why -->\n```text\nx\n```\n", "never run"),
        ("<!-- retry for: soon -->\n```sh\nx\n```\n", "cannot read"),
        ("<!-- examples beside: leveret server -->\n", "when ready"),
    ],
    ids=[
        "no info string",
        "toml unmarked",
        "no reason",
        "misspelt",
        "not before a block",
        "python in background",
        "no ready text",
        "text marked",
        "retry no seconds",
        "beside no ready text",
    ],
)
def test_what_the_runner_cannot_read_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str, said: str
) -> None:
    monkeypatch.setattr(blocks, "ROOT", tmp_path)
    with pytest.raises(DirectiveError, match=said):
        _parse(tmp_path, text)


def test_console_commands_and_their_output(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(blocks, "ROOT", tmp_path)
    doc = _parse(
        tmp_path, "```console\n$ leveret ctl \\\n    list_queues\nname\tmessages\n$ true\n```\n"
    )
    (block,) = doc.blocks
    first, second = blocks.console(block)
    assert first == blocks.Command("leveret ctl \\\n    list_queues", ["name\tmessages"])
    assert second == blocks.Command("true", [])


@pytest.mark.parametrize(
    ("expected", "output", "match"),
    [
        (
            ["Listing queues …", "…", "logs\t0"],
            "Listing queues for vhost / ...\na\t1\nlogs\t0\n",
            True,
        ),
        (["Listing queues …", "…", "logs\t0"], "Listing queues for vhost / ...\nlogs\t0\n", True),
        (["a…c"], "abc  \n", True),
        (["a…c"], "ab\nc\n", False),
        (["Sent 1 record"], "Sent 1 record\nand more\n", False),
        (["logs\t0"], "logs 0\n", False),
    ],
)
def test_expected_output(expected: list[str], output: str, match: bool) -> None:
    assert blocks.matches(expected, output) is match
