"""The resource limits' value types, as RabbitMQ reads them: sizes with units
(vm_memory_high_watermark's absolute form, disk_free_limit), the memory watermark and the
free disk limit."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

# rabbit_resource_monitor_misc:parse_information_unit: a size, with an optional unit
_SIZE = re.compile(
    r"^(?P<num>[0-9]+)(?P<unit>kB|KB|MB|GB|kb|mb|gb|Kb|Mb|Gb|kiB|KiB|MiB|GiB|kib|mib|gib"
    r"|KIB|MIB|GIB|k|K|m|M|g|G)?$"
)
_UNITS = {
    **dict.fromkeys(("k", "K", "kiB", "KiB", "KIB", "kib"), 1024),
    **dict.fromkeys(("m", "M", "MiB", "MIB", "mib"), 1024**2),
    **dict.fromkeys(("g", "G", "GiB", "GIB", "gib"), 1024**3),
    **dict.fromkeys(("KB", "kB", "kb", "Kb"), 1000),
    **dict.fromkeys(("MB", "mb", "Mb"), 1000**2),
    **dict.fromkeys(("GB", "gb", "Gb"), 1000**3),
}
_MEM_RELATIVE = re.compile(r"^\{?\s*mem_relative\s*[,:= ]\s*([0-9.]+)\s*\}?$")


def parse_size(value: Any) -> int:
    """A size in bytes as RabbitMQ reads one: an integer, or digits with a unit (k, KiB,
    MiB, GiB, K/M/G are powers of 1024; kB, MB, GB powers of 1000)."""
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    m = _SIZE.match(str(value).strip()) if isinstance(value, str) else None
    if m is None:
        raise ValueError(value)
    return int(m["num"]) * _UNITS.get(m["unit"] or "", 1)


@dataclass(frozen=True, slots=True)
class MemoryWatermark:
    """vm_memory_high_watermark: a fraction of the machine's RAM, or an absolute size."""

    relative: float | None = 0.4
    absolute: int | None = None

    @classmethod
    def parse(cls, value: Any) -> MemoryWatermark:
        """``0.4`` (a fraction, at most 1.0), ``512MiB`` / ``2GB`` / a number of bytes
        with a unit, or a table ``{relative = 0.4}`` / ``{absolute = "512MiB"}`` (as
        rabbitmq.conf's ``vm_memory_high_watermark.relative/.absolute``)."""
        if isinstance(value, MemoryWatermark):
            return value
        if isinstance(value, dict) and len(value) == 1:
            ((kind, v),) = value.items()
            if kind == "absolute":
                return cls(None, parse_size(v))
            if kind == "relative":
                return cls(_fraction(v), None)
            raise ValueError(value)
        if isinstance(value, str) and _SIZE.match(value.strip()) and not value.strip().isdigit():
            return cls(None, parse_size(value))
        return cls(_fraction(value), None)

    def limit(self, total_memory: int) -> int:
        """The limit in bytes on a machine with ``total_memory`` of RAM (an absolute
        limit above it is capped, as vm_memory_monitor does)."""
        if self.absolute is not None:
            return min(self.absolute, total_memory)
        return int((self.relative or 0.0) * total_memory)

    def __str__(self) -> str:
        return str(self.absolute) if self.absolute is not None else str(self.relative)


@dataclass(frozen=True, slots=True)
class DiskFreeLimit:
    """disk_free_limit: an absolute size (default 50 MB, as RabbitMQ), or relative to
    the machine's RAM (``{mem_relative, 1.0}``)."""

    absolute: int | None = 50_000_000
    mem_relative: float | None = None

    @classmethod
    def parse(cls, value: Any) -> DiskFreeLimit:
        """``50MB`` / ``1GiB`` / a number of bytes; ``{mem_relative, 1.5}`` (also
        ``mem_relative:1.5``); or a table ``{absolute = "50MB"}`` / ``{relative = 1.5}``
        (rabbitmq.conf's ``disk_free_limit.absolute/.relative``)."""
        if isinstance(value, DiskFreeLimit):
            return value
        if isinstance(value, dict) and len(value) == 1:
            ((kind, v),) = value.items()
            if kind == "absolute":
                return cls(parse_size(v), None)
            if kind in ("relative", "mem_relative"):
                return cls(None, _non_negative(v))
            raise ValueError(value)
        if isinstance(value, str):
            m = _MEM_RELATIVE.match(value.strip())
            if m is not None:
                return cls(None, _non_negative(m[1]))
        return cls(parse_size(value), None)

    def limit(self, total_memory: int) -> int:
        if self.absolute is not None:
            return self.absolute
        return round((self.mem_relative or 0.0) * total_memory)

    def __str__(self) -> str:
        if self.absolute is not None:
            return str(self.absolute)
        return f"{{mem_relative, {self.mem_relative}}}"


def _non_negative(value: Any) -> float:
    if isinstance(value, bool):
        raise ValueError(value)
    f = float(value)
    if not f >= 0:
        raise ValueError(value)
    return f


def _fraction(value: Any) -> float:
    f = _non_negative(value)
    if f > 1.0:
        raise ValueError(value)
    return f
