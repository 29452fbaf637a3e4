"""A pytest plugin that scripts/conformance loads into each client library's own test run
(``-p leveret_conformance_plugin``). It changes no test: it leaves out the tests the
script names (TLS, outside hosts) and writes one outcome per test id to a JSON file.

Environment:
  LEVERET_CONFORMANCE_EXCLUDE  JSON list of regular expressions; a test whose id matches
                               one (re.search) is deselected.
  LEVERET_CONFORMANCE_REPORT   where to write {"outcomes": {test id: passed|failed|skipped},
                               "deselected": [test id, ...]}.
"""

from __future__ import annotations

import json
import os
import re
from typing import Any

_RANK = {"passed": 0, "skipped": 1, "failed": 2}

_outcomes: dict[str, str] = {}
_deselected: list[str] = []


def _record(nodeid: str, outcome: str) -> None:
    old = _outcomes.get(nodeid)
    if old is None or _RANK[outcome] > _RANK[old]:
        _outcomes[nodeid] = outcome


def pytest_collection_modifyitems(config: Any, items: list[Any]) -> None:
    patterns = [re.compile(p) for p in json.loads(os.environ.get(
        "LEVERET_CONFORMANCE_EXCLUDE", "[]"))]
    if not patterns:
        return
    keep, drop = [], []
    for item in items:
        (drop if any(p.search(item.nodeid) for p in patterns) else keep).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep
        _deselected.extend(item.nodeid for item in drop)


def pytest_collectreport(report: Any) -> None:
    if report.failed:
        _record(f"{report.nodeid}::<collection>", "failed")


def pytest_runtest_logreport(report: Any) -> None:
    if report.failed:
        _record(report.nodeid, "failed")
    elif report.skipped:
        # a skip, or an expected failure (xfail)
        _record(report.nodeid, "skipped")
    elif report.when == "call":
        _record(report.nodeid, "passed")


def pytest_sessionfinish(session: Any, exitstatus: int) -> None:
    path = os.environ.get("LEVERET_CONFORMANCE_REPORT")
    if not path:
        return
    with open(path, "w", encoding="utf-8") as f:
        json.dump({"outcomes": _outcomes, "deselected": _deselected}, f, indent=1,
                  sort_keys=True)
