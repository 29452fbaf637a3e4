"""The verbs' registry, in process: every verb is listed by ``leveret ctl help`` and has help
of its own (its docstring), and the global options reach every verb."""

from __future__ import annotations

import pytest

from leveret.cli import ctl
from leveret.cli.ctlapp import app


def verbs() -> list[str]:
    return [c.name for c in app.registered_commands if c.name and c.name != "help"]


def test_every_verb_is_listed(capsys: pytest.CaptureFixture[str]) -> None:
    assert ctl.main(["help"], env={}) == 0
    listed = capsys.readouterr().out.split("Commands:\n", 1)[1].split()
    assert sorted(listed) == sorted(verbs())
    assert len(listed) == len(set(listed)) >= 25


@pytest.mark.parametrize("verb", verbs())
def test_every_verb_has_help(verb: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert ctl.main([verb, "--help"], env={}) == 0
    out = capsys.readouterr()
    assert out.err == ""
    lines = out.out.splitlines()
    assert lines[0].startswith(f"Usage: leveret ctl {verb} [OPTIONS]")
    # the docstring's first line, after the usage (which may take two lines)
    assert out.out.split("\n\n")[1].strip()
    for option in (
        "-q, --quiet",
        "--formatter FORMATTER",
        "-t, --timeout SECONDS",
        "--url URL",
        "--password PASSWORD",
    ):
        assert option in out.out
    # after the verb -p is the vhost and -u the API user, unless the verb has its own -u
    assert "-p, --vhost VHOST" in out.out
    assert ("-u, --if-unused" if verb == "delete_queue" else "-u, --username USER") in out.out
