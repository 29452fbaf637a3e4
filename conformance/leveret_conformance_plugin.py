"""A pytest plugin that scripts/conformance loads into each client library's own test run
(``-p leveret_conformance_plugin``). It changes no test: it leaves out the tests the
script names (TLS, outside hosts) and writes one outcome per test id to a JSON file.

Environment:
  LEVERET_CONFORMANCE_EXCLUDE  JSON list of regular expressions; a test whose id matches
                               one (re.search) is deselected.
  LEVERET_CONFORMANCE_REPORT   where to write {"outcomes": {test id: passed|failed|skipped},
                               "deselected": [test id, ...], "messages": {test id: the
                               first line of what failed it (or why it was skipped)},
                               "details": {test id: the error lines (pytest's "E" lines) of
                               every exception in its traceback, causes included}}.
                               Beside it, REPORT.partial gets a JSON line as the run
                               goes: {"collected": [...]}, then {"started": id} and
                               {"finished": id, "outcome", "message", "details"} for each
                               test; what a run that crashed got through.
  LEVERET_CONFORMANCE_DONE     a JSON list of test ids an earlier run that crashed got
                               through: deselected, and not counted as deselected.
"""

from __future__ import annotations

import json
import os
import re
from typing import Any

_RANK = {"passed": 0, "skipped": 1, "failed": 2}

_outcomes: dict[str, str] = {}
_messages: dict[str, str] = {}
_details: dict[str, str] = {}
_deselected: list[str] = []
_MESSAGE_MAX = 400
_DETAILS_MAX = 4000


def _record(nodeid: str, outcome: str, report: Any = None, prefix: str = "") -> None:
    old = _outcomes.get(nodeid)
    if old is None or _RANK[outcome] > _RANK[old]:
        _outcomes[nodeid] = outcome
        _messages.pop(nodeid, None)
        _details.pop(nodeid, None)
        if report is not None:
            _messages[nodeid] = prefix + _message(report)
            _details[nodeid] = _error_lines(report)


def _error_lines(report: Any) -> str:
    """The "E" lines of the report's traceback: each exception's type and message, the
    ones it was raised from or during included."""
    text = str(getattr(report, "longreprtext", "") or "")
    lines = [ln[1:].strip() for ln in text.splitlines() if ln.startswith("E ")]
    return "\n".join(lines)[:_DETAILS_MAX]


def _message(report: Any) -> str:
    """The gist of a failure or skip: the exception's message (its first line), as the
    short test summary shows it."""
    crash = getattr(report.longrepr, "reprcrash", None)
    if crash is not None and getattr(crash, "message", ""):
        text = str(crash.message)
    elif isinstance(report.longrepr, tuple) and len(report.longrepr) == 3:
        text = str(report.longrepr[2])  # a skip: (file, line, reason)
    else:
        lines = [ln for ln in str(report.longreprtext or "").splitlines() if ln.strip()]
        text = lines[-1] if lines else ""
    first = text.strip().splitlines()[0] if text.strip() else ""
    return first[:_MESSAGE_MAX]


def _partial(line: dict[str, Any]) -> None:
    path = os.environ.get("LEVERET_CONFORMANCE_REPORT")
    if path:
        with open(path + ".partial", "a", encoding="utf-8") as f:
            f.write(json.dumps(line) + "\n")


def pytest_collection_modifyitems(config: Any, items: list[Any]) -> None:
    patterns = [
        re.compile(p) for p in json.loads(os.environ.get("LEVERET_CONFORMANCE_EXCLUDE", "[]"))
    ]
    done = set(json.loads(os.environ.get("LEVERET_CONFORMANCE_DONE", "[]")))
    keep, drop, skip = [], [], []
    for item in items:
        if item.nodeid in done:
            skip.append(item)
        elif any(p.search(item.nodeid) for p in patterns):
            drop.append(item)
        else:
            keep.append(item)
    if drop or skip:
        config.hook.pytest_deselected(items=drop + skip)
        items[:] = keep
        _deselected.extend(item.nodeid for item in drop)
    _partial({"collected": [item.nodeid for item in keep]})


def pytest_runtest_logstart(nodeid: str, location: Any) -> None:
    _partial({"started": nodeid})


def pytest_collectreport(report: Any) -> None:
    if report.failed:
        _record(f"{report.nodeid}::<collection>", "failed", report)


def pytest_runtest_logreport(report: Any) -> None:
    if report.failed:
        _record(report.nodeid, "failed", report, f"{report.when}: ")
    elif report.skipped:
        # a skip, or an expected failure (xfail)
        _record(report.nodeid, "skipped", report)
    elif report.when == "call":
        _record(report.nodeid, "passed")
    if report.when == "teardown":
        nodeid = report.nodeid
        _partial(
            {
                "finished": nodeid,
                "outcome": _outcomes.get(nodeid, "passed"),
                "message": _messages.get(nodeid, ""),
                "details": _details.get(nodeid, ""),
            }
        )


def pytest_sessionfinish(session: Any, exitstatus: int) -> None:
    path = os.environ.get("LEVERET_CONFORMANCE_REPORT")
    if not path:
        return
    with open(path, "w", encoding="utf-8") as f:
        json.dump(
            {
                "outcomes": _outcomes,
                "deselected": _deselected,
                "messages": _messages,
                "details": _details,
            },
            f,
            indent=1,
            sort_keys=True,
        )
