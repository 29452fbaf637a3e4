"""Output that is not a terminal (a pipe, a file, a CI log): lines are not broken at 80
columns, and help texts are not broken mid-sentence."""

from __future__ import annotations

import os
import re
from pathlib import Path

from tests.support.cli import read_banner, run_cli, running_up


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    env["NO_COLOR"] = "1"
    return env


def test_up_banner_keeps_each_command_on_one_line(tmp_path: Path) -> None:
    with running_up("--no-ingest", "--no-receiver", cwd=tmp_path, env=_env()) as up:
        lines = read_banner(up).splitlines()
        assert any(line.startswith("Report") for line in lines), lines
        send = next(line for line in lines if line.startswith("Send logs"))
        assert re.fullmatch(r"Send logs\s+\S*leveret emit-log --url amqp://\S+ 'info: hello'", send)
        report = next(line for line in lines if line.startswith("Report"))
        assert re.fullmatch(r"Report\s+\S*leveret pipeline report --lake \S+ --out \S+", report), (
            report
        )


COMMANDS = [
    ["server"],
    ["up"],
    ["emit-log"],
    ["receive-logs"],
    ["pipeline", "ingest"],
    ["pipeline", "report"],
]


def test_help_texts_are_not_broken_mid_sentence() -> None:
    """A help paragraph is wrapped to the width as a whole: no line of it stops after a
    few words where the source's docstring had a line break."""
    for command in COMMANDS:
        done = run_cli(*command, "--help", timeout=60, env=_env())
        assert done.returncode == 0, done.stderr
        prose = done.stdout.split("╭", 1)[0].splitlines()[2:]  # after the usage line
        blocks: list[list[str]] = [[]]
        for line in prose:
            if line.strip():
                blocks[-1].append(line.strip())
            else:
                blocks.append([])
        for block in blocks:
            for line in block[:-1]:
                assert len(line) >= 60, (command, block)
