"""The ``[lake]`` table of Leveret's TOML configuration file: how ``leveret up`` keeps the
lake (compaction, retention) and the alert rules the ingest evaluates::

    [lake]
    retention = "30d"          # drop date partitions older than this
    compact_every = "10m"      # leveret up runs `leveret pipeline compact` this often
    target_size = "128M"       # size of the files a compaction writes

    [[lake.alerts]]
    name = "shop errors"
    error_rate = 0.05          # more than 5 % error or critical records ...
    window = "5m"              # ... over the last 5 minutes ...
    per = "app"                # ... of one app (or "host")
    min_records = 20           # (not before 20 records in the window)

    [[lake.alerts]]
    name = "disk full"
    pattern = "No space left on device"   # a regular expression on the message

The broker's own settings in the same file ignore this table.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


class LakeConfigError(ValueError):
    """The ``[lake]`` table is not valid (one plain line)."""


_DURATION = re.compile(r"\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*")
_SCALE = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def seconds(text: str | int | float, what: str) -> float:
    """``30s``, ``5m``, ``1h``, ``2d`` (or a number of seconds) in seconds."""
    if isinstance(text, int | float) and not isinstance(text, bool):
        return float(text)
    m = _DURATION.fullmatch(str(text).lower())
    if m is None or float(m.group(1)) <= 0:
        raise LakeConfigError(f"{what}: {text!r} is not a duration (e.g. 30s, 5m, 1h)")
    return float(m.group(1)) * _SCALE[m.group(2) or "s"]


@dataclass(frozen=True, slots=True)
class AlertRule:
    """One alert rule: an error rate over a window per app or host, or a pattern."""

    name: str
    error_rate: float | None = None
    window: float = 300.0
    per: str = "app"
    min_records: int = 1
    pattern: str | None = None

    @property
    def kind(self) -> str:
        return "pattern" if self.pattern is not None else "error_rate"


@dataclass(frozen=True, slots=True)
class LakeConfig:
    retention: str | None = None
    compact_every: float | None = None
    target_size: str = "128M"
    alerts: tuple[AlertRule, ...] = field(default_factory=tuple)


def _rule(item: Any, n: int) -> AlertRule:
    if not isinstance(item, dict):
        raise LakeConfigError(f"[[lake.alerts]] #{n}: must be a table")
    known = {"name", "error_rate", "window", "per", "min_records", "pattern"}
    unknown = sorted(set(item) - known)
    if unknown:
        raise LakeConfigError(f"[[lake.alerts]] #{n}: unknown key '{unknown[0]}'")
    name = item.get("name")
    if not isinstance(name, str) or not name:
        raise LakeConfigError(f"[[lake.alerts]] #{n}: a rule needs a name")
    rate = item.get("error_rate")
    pattern = item.get("pattern")
    if (rate is None) == (pattern is None):
        raise LakeConfigError(f"alert {name!r}: give either error_rate or pattern")
    if pattern is not None:
        if not isinstance(pattern, str):
            raise LakeConfigError(f"alert {name!r}: pattern must be a string")
        try:
            re.compile(pattern)
        except re.error as exc:
            raise LakeConfigError(f"alert {name!r}: invalid pattern: {exc}") from None
        return AlertRule(name=name, pattern=pattern)
    if not isinstance(rate, int | float) or isinstance(rate, bool) or not 0 <= rate < 1:
        raise LakeConfigError(f"alert {name!r}: error_rate must be a fraction (0.05 is 5 %)")
    per = item.get("per", "app")
    if per not in ("app", "host"):
        raise LakeConfigError(f"alert {name!r}: per must be app or host")
    min_records = item.get("min_records", 1)
    if not isinstance(min_records, int) or min_records < 1:
        raise LakeConfigError(f"alert {name!r}: min_records must be a whole number ≥ 1")
    return AlertRule(
        name=name,
        error_rate=float(rate),
        window=seconds(item.get("window", "5m"), f"alert {name!r}: window"),
        per=per,
        min_records=min_records,
    )


def parse(table: Any) -> LakeConfig:
    if table is None:
        return LakeConfig()
    if not isinstance(table, dict):
        raise LakeConfigError("[lake] must be a table")
    known = {"retention", "compact_every", "target_size", "alerts"}
    unknown = sorted(set(table) - known)
    if unknown:
        raise LakeConfigError(f"[lake]: unknown key '{unknown[0]}'")
    retention = table.get("retention")
    if retention is not None:
        from leveret.logs.compaction import parse_retention

        try:
            parse_retention(str(retention))
        except ValueError as exc:
            raise LakeConfigError(f"[lake] retention: {exc}") from None
    every = table.get("compact_every")
    alerts = table.get("alerts") or []
    if not isinstance(alerts, list):
        raise LakeConfigError("[lake] alerts must be a list of tables ([[lake.alerts]])")
    rules = tuple(_rule(item, n) for n, item in enumerate(alerts, 1))
    names = [r.name for r in rules]
    if len(set(names)) != len(names):
        raise LakeConfigError("[[lake.alerts]]: two rules have the same name")
    return LakeConfig(
        retention=str(retention) if retention is not None else None,
        compact_every=seconds(every, "[lake] compact_every") if every is not None else None,
        target_size=str(table.get("target_size", "128M")),
        alerts=rules,
    )


def load(path: Path) -> LakeConfig:
    """The ``[lake]`` table of a configuration file (defaults when it has none)."""
    try:
        data = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise LakeConfigError(f"config file not found: {path}") from None
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise LakeConfigError(f"cannot read config file {path}: {exc}") from None
    try:
        return parse(data.get("lake"))
    except LakeConfigError as exc:
        raise LakeConfigError(f"config file {path}: {exc}") from None
