"""The code blocks of README.md and docs/*.md, and what the suite does with each, as
docs/README.md ("The examples are run") tells a writer.

Every fenced block is one of: runnable and run as written (``sh``, ``console``, ``python``:
tests/docs/runner.py); a file for the blocks after it (``<!-- file: NAME -->``); not code
(``text``); or not run, saying why (``<!-- not run: REASON -->``). HTML comments on the
lines right before a block say how it runs (``background, ready at:``, ``retry for:``,
``exits:``); standing alone, ``<!-- Ctrl-C -->`` stops the background commands, and
``<!-- examples beside: COMMAND, ready at: TEXT -->`` names what runs beside a document's
examples."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from markdown_it import MarkdownIt

ROOT = Path(__file__).resolve().parents[2]
DOCUMENTS = (ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")))

SHELL = frozenset({"sh", "bash", "shell"})
RUNNABLE = SHELL | {"console", "python"}
NOT_CODE = frozenset({"text"})

_COMMENT = re.compile(r"<!--\s*(.*?)\s*-->", re.S)
_READY = re.compile(r"(?P<what>.*?),\s*ready at:\s*(?P<ready>.+)", re.S)
_SECONDS = re.compile(r"(\d+)\s*s")
# the words a directive starts with: a comment that starts so and does not parse is a typo
_KEYWORDS = ("not run", "file", "background", "retry", "exits", "ctrl-c", "examples")


class DirectiveError(ValueError):
    """A comment that looks like a directive and is not one, or a block the suite cannot
    classify."""


@dataclass(frozen=True, slots=True)
class Block:
    """A fenced block, where it is, and what the comments before it say."""

    document: Path
    line: int  # 1-based, the opening fence's
    info: str  # the info string's first word, lower case ("" when none)
    text: str
    not_run: str | None = None  # the reason
    file: str | None = None
    background: bool = False
    ready: str | None = None
    retry: float | None = None  # seconds
    exits: int = 0

    @property
    def where(self) -> str:
        return f"{self.document.relative_to(ROOT)}:{self.line}"

    @property
    def runs(self) -> bool:
        """Run by the suite (as opposed to written to a file, marked, or not code)."""
        return self.info in RUNNABLE and self.not_run is None and self.file is None

    @property
    def is_test(self) -> bool:
        return self.info == "python" and bool(re.search(r"^(async )?def test_", self.text, re.M))


@dataclass(frozen=True, slots=True)
class Beside:
    """What runs beside a document's examples, as a user has it running in a terminal."""

    command: str
    ready: str


@dataclass(frozen=True, slots=True)
class Stop:
    """``<!-- Ctrl-C -->``: the background commands started so far are stopped here."""

    line: int


@dataclass(slots=True)
class Document:
    path: Path
    beside: Beside | None = None
    steps: list[Block | Stop] = field(default_factory=list)

    @property
    def blocks(self) -> list[Block]:
        return [s for s in self.steps if isinstance(s, Block)]

    @property
    def runs(self) -> bool:
        return any(b.runs for b in self.blocks)


def _directive(text: str) -> bool:
    """Looks like a directive (a misspelt one included): not any other comment."""
    return text.lower().startswith(_KEYWORDS)


def parse(path: Path) -> Document:
    """The document's blocks and standalone directives, in order."""
    doc = Document(path)
    tokens = MarkdownIt().parse(path.read_text())
    steps: list[tuple[int, Block | Stop]] = []
    # the comments of each HTML block, by the line after it: a fence there is theirs
    comments: dict[int, tuple[int, list[str]]] = {}
    for token in tokens:
        if token.type != "html_block" or token.map is None:
            continue
        start, end = token.map
        rest = []
        for comment in _COMMENT.findall(token.content):
            if comment.lower() == "ctrl-c":  # a stop, wherever it stands
                steps.append((start + 1, Stop(start + 1)))
            elif comment.lower().startswith("examples beside:"):
                doc.beside = _beside(path, start + 1, comment)
            else:
                rest.append(comment)
        comments[end] = (start, rest)
    attached: set[int] = set()
    for token in tokens:
        if token.type != "fence" or token.map is None:
            continue
        start = token.map[0]
        before: list[tuple[int, str]] = []
        while start in comments:  # the comments on the lines right before, in order
            attached.add(start)
            first, found = comments[start]
            before = [(first + 1, c) for c in found] + before
            start = first
        block = _block(path, token.map[0] + 1, token.info, token.content, before)
        steps.append((block.line, block))
    for end, (start, found) in comments.items():
        for comment in found:
            if end not in attached and _directive(comment):
                raise DirectiveError(f"{path.name}:{start + 1}: {comment!r} is not before a block")
    doc.steps = [step for _, step in sorted(steps, key=lambda s: s[0])]
    return doc


def _beside(path: Path, line: int, comment: str) -> Beside:
    found = _READY.fullmatch(comment.split(":", 1)[1].strip())
    if found is None:
        raise DirectiveError(f"{path.name}:{line}: say what it prints when ready")
    return Beside(found["what"].strip(), found["ready"].strip())


def _block(path: Path, line: int, info: str, text: str, comments: list[tuple[int, str]]) -> Block:
    kind = info.split()[0].lower() if info.strip() else ""
    settings: dict[str, object] = {}
    for at, comment in comments:
        key, _, value = comment.partition(":")
        key, value = key.strip().lower(), value.strip()
        if key == "not run" and value:
            settings["not_run"] = value
        elif key == "file" and value and not value.startswith("/") and ".." not in value:
            settings["file"] = value
        elif (ready := _READY.fullmatch(comment)) and ready["what"] == "background":
            settings["background"] = True
            settings["ready"] = ready["ready"].strip()
        elif key == "retry for" and (seconds := _SECONDS.fullmatch(value)):
            settings["retry"] = float(seconds[1])
        elif key == "exits" and value.isdigit():
            settings["exits"] = int(value)
        else:
            raise DirectiveError(f"{path.name}:{at}: cannot read the directive {comment!r}")
    block = Block(path, line, kind, text, **settings)  # type: ignore[arg-type]
    _check(block)
    return block


def _check(block: Block) -> None:
    """A block is run, written, marked or not code; what is said of it must fit."""
    where = block.where
    if not block.info:
        raise DirectiveError(f"{where}: a block says what it is (sh, console, python, text…)")
    if block.not_run is not None and (block.file or block.background or block.retry):
        raise DirectiveError(f"{where}: a block not run takes no other directive")
    if block.info in NOT_CODE and (block.not_run or block.file):
        raise DirectiveError(f"{where}: a text block is never run; it needs no directive")
    if block.info not in RUNNABLE | NOT_CODE and block.not_run is None and block.file is None:
        raise DirectiveError(
            f"{where}: ```{block.info} is not run: give it <!-- file: NAME --> for the "
            "blocks after it, or <!-- not run: REASON -->"
        )
    if block.background and block.info not in SHELL:
        raise DirectiveError(f"{where}: only shell blocks run in the background")
    if block.background and (block.retry or block.exits):
        raise DirectiveError(f"{where}: a background command runs until Ctrl-C")
    if block.is_test and (block.background or block.retry or block.exits):
        raise DirectiveError(f"{where}: a test file takes no directive but file")


def documents() -> list[Document]:
    return [parse(path) for path in DOCUMENTS]


@dataclass(frozen=True, slots=True)
class Command:
    """One ``$ `` command of a console block and the output it shows."""

    text: str
    expected: list[str]


def console(block: Block) -> list[Command]:
    """A console block's commands (``\\`` continues a command) and their output."""
    commands: list[Command] = []
    lines = block.text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if not line.startswith("$ "):
            if not commands:
                raise DirectiveError(f"{block.where}: a console block starts with '$ '")
            commands[-1].expected.append(line)
            i += 1
            continue
        command = line[2:]
        while command.endswith("\\") and i + 1 < len(lines):
            i += 1
            command += "\n" + lines[i]
        commands.append(Command(command, []))
        i += 1
    return commands


def output_pattern(expected: list[str]) -> re.Pattern[str]:
    """The expected lines as one pattern: ``…`` alone on a line matches any lines (none
    too), within a line any text; trailing blanks are not compared."""
    parts = []
    for line in expected:
        line = line.rstrip()
        if line == "…":
            parts.append(r"(?:[^\n]*\n)*?")
        else:
            parts.append(r"[^\n]*?".join(re.escape(p) for p in line.split("…")) + r"\n")
    return re.compile("".join(parts))


def matches(expected: list[str], output: str) -> bool:
    lines = "".join(line.rstrip() + "\n" for line in output.splitlines())
    return output_pattern(expected).fullmatch(lines) is not None
