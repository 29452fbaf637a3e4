"""Message deduplication, with the names of rabbitmq-message-deduplication (which LavinMQ
uses too): a message's ``x-deduplication-header`` header is its identity.

- An exchange of type ``x-message-deduplication`` routes as fanout, once per identity
  within its cache: ``x-cache-size`` entries at most (required), each kept ``x-cache-ttl``
  ms (the exchange's argument or the message's ``x-cache-ttl`` header; none: until pushed
  out), in memory or, with ``x-cache-persistence: disk``, on disk across restarts.
- A queue declared with ``x-message-deduplication: true`` (classic or quorum) takes a
  message only if no message with its identity is in it (ready or unacknowledged).

Messages without the header are never duplicates.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from collections import Counter, OrderedDict
from collections.abc import Hashable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from leveret.broker.clock import wall_ms
from leveret.protocol import errors, table
from leveret.protocol.spec import decode_field

if TYPE_CHECKING:
    from leveret.broker.message import Message

log = logging.getLogger(__name__)

HEADER = "x-deduplication-header"
TTL_HEADER = "x-cache-ttl"
QUEUE_ARGUMENT = "x-message-deduplication"
_HEADERS_FLAG = 0x20  # byte 0 of the property flags: headers (0x2000)


def _header(message: Message, name: str) -> bytes | None:
    props = message.properties
    if not props or not props[0] & _HEADERS_FLAG:
        return None
    fields = table.headers(props)
    return table.lookup(fields, name) if fields else None


def identity(message: Message) -> Hashable | None:
    """The message's deduplication identity: its header's value (None: no header)."""
    raw = _header(message, HEADER)
    if raw is None:
        return None
    try:
        value = decode_field(raw)
    except Exception:
        return ("raw", raw)
    if isinstance(value, bool):
        return ("bool", value)
    if isinstance(value, (bytes, bytearray)):
        return ("str", bytes(value))
    if isinstance(value, str):
        return ("str", value.encode())
    if isinstance(value, (int, float)):
        return ("num", value)
    return ("raw", raw)  # tables, arrays, decimals: by their bytes


def message_ttl(message: Message) -> int | None:
    raw = _header(message, TTL_HEADER)
    if raw is None:
        return None
    value = table.long_value(raw)
    if value is None:
        text = table.text(raw)
        value = int(text) if text is not None and text.strip().isdigit() else None
    return value if value is not None and value > 0 else None


def _positive(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if value > 0 else None
    if isinstance(value, (str, bytes)):
        text = value.decode() if isinstance(value, bytes) else value
        with contextlib.suppress(ValueError):
            number = int(text.strip())
            return number if number > 0 else None
    return None


def validate_exchange_arguments(arguments: dict[str, Any]) -> tuple[int, int | None, bool]:
    """The cache's size, TTL and whether it is on disk; refused as the plugin refuses."""
    size = _positive(arguments.get("x-cache-size"))
    if size is None:
        raise errors.precondition_failed(
            "Missing or invalid argument, 'x-cache-size' must be an integer greater than 0"
        )
    ttl = None
    if "x-cache-ttl" in arguments:
        ttl = _positive(arguments["x-cache-ttl"])
        if ttl is None:
            raise errors.precondition_failed(
                "Invalid argument, 'x-cache-ttl' must be an integer greater than 0"
            )
    persistence = arguments.get("x-cache-persistence", "memory")
    if isinstance(persistence, bytes):
        persistence = persistence.decode("utf-8", "replace")
    if persistence not in ("memory", "disk"):
        raise errors.precondition_failed(
            "Invalid argument, 'x-cache-persistence' must be either 'disk' or 'memory'"
        )
    return size, ttl, persistence == "disk"


class Cache:
    """An exchange's identities: each until it expires or the cache, full, pushes out its
    oldest. With a ``path`` every change is appended there, and the file is read back at
    start (expired entries dropped) and rewritten when it has grown well past the cache."""

    def __init__(self, size: int, ttl: int | None, path: Path | None = None) -> None:
        self.size = size
        self.ttl = ttl
        self._entries: OrderedDict[Hashable, int] = OrderedDict()  # identity -> expiry
        self._path = path
        self._log: Any = None
        self._logged = 0
        if path is not None:
            self._load(path)

    def __len__(self) -> int:
        return len(self._entries)

    def insert(self, key: Hashable, ttl: int | None = None) -> bool:
        """Remember ``key``; False when it is remembered already (a duplicate)."""
        now = wall_ms()
        expiry = self._entries.get(key)
        if expiry is not None:
            if expiry == 0 or expiry > now:
                return False
            del self._entries[key]
        ttl = ttl if ttl is not None else self.ttl
        at = now + ttl if ttl else 0
        while len(self._entries) >= self.size:
            self._purge_expired(now)
            if len(self._entries) >= self.size:
                self._entries.popitem(last=False)
        self._entries[key] = at
        if self._path is not None:
            self._append(key, at)
        return True

    def _purge_expired(self, now: int) -> None:
        for k in [k for k, at in self._entries.items() if at and at <= now]:
            del self._entries[k]

    # ------------------------------------------------------------ persistence
    def _load(self, path: Path) -> None:
        now = wall_ms()
        try:
            with open(path, encoding="utf-8") as f:
                for line in f:
                    try:
                        kind, value, at = json.loads(line)
                    except (ValueError, TypeError):
                        continue  # a line cut short by a crash
                    key = (kind, value.encode("latin-1") if kind in ("str", "raw") else value)
                    if at and at <= now:
                        self._entries.pop(key, None)
                        continue
                    self._entries.pop(key, None)
                    self._entries[key] = at
        except FileNotFoundError:
            pass
        while len(self._entries) > self.size:
            self._entries.popitem(last=False)
        self._rewrite()

    def _record(self, key: Hashable, at: int) -> str:
        assert isinstance(key, tuple)
        kind: str = key[0]
        value: Any = key[1]
        if isinstance(value, bytes):
            value = value.decode("latin-1")
        return json.dumps([kind, value, at]) + "\n"

    def _append(self, key: Hashable, at: int) -> None:
        if self._log is None:
            assert self._path is not None
            self._log = open(self._path, "a", encoding="utf-8")  # noqa: SIM115
        self._log.write(self._record(key, at))
        self._log.flush()  # in the OS's hands: survives the process being killed
        self._logged += 1
        if self._logged > 4 * self.size + 1000:
            self._rewrite()

    def _rewrite(self) -> None:
        assert self._path is not None
        self.close()
        self._path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self._path.with_suffix(".tmp")
        with open(tmp, "w", encoding="utf-8") as f:
            for key, at in self._entries.items():
                f.write(self._record(key, at))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self._path)
        self._logged = len(self._entries)

    def close(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None

    def drop(self) -> None:
        """The exchange is gone: its cache too."""
        self.close()
        self._entries.clear()
        if self._path is not None:
            self._path.unlink(missing_ok=True)


def queue_enabled(arguments: dict[str, Any]) -> bool:
    return arguments.get(QUEUE_ARGUMENT) is True


class QueueIdentities:
    """The identities of the messages in a queue, counted."""

    __slots__ = ("_present",)

    def __init__(self) -> None:
        self._present: Counter[Hashable] = Counter()

    def admit(self, message: Message) -> bool:
        """Whether the queue takes ``message`` (no message with its identity is in it);
        if so it is counted in."""
        key = identity(message)
        if key is None:
            return True
        if self._present[key]:
            return False
        self._present[key] += 1
        return True

    def left(self, message: Message) -> None:
        key = identity(message)
        if key is None:
            return
        n = self._present[key] - 1
        if n > 0:
            self._present[key] = n
        else:
            self._present.pop(key, None)

    def clear(self) -> None:
        self._present.clear()
