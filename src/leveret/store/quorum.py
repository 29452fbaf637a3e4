"""A quorum queue's storage: its messages in a segment log with a chunk index (the same
log as streams), and what became of them in a state log.

Layout, one directory per queue::

    log/00000000000000000000.seg   messages, appended chunk by chunk (id = log offset)
    log/00000000000000000000.idx   chunk index
    state.log                      records of what happened to them since

A state record is ``kind (1) | id (8) [| count (4) or reason (1)]``: ``C`` checked out
to a consumer (delivered, not settled), ``S`` settled (acked, discarded, dropped,
expired, dead-lettered), ``R`` returned to the front of the queue with a delivery count,
``N`` the delivery count of a message appended by a requeue, ``D`` waiting to be
dead-lettered (at-least-once) for a reason, ``L`` every id below this one is settled.
Both files are written in batches and fsynced by :meth:`QuorumLog.sync`, which the
server calls before it sends publisher confirms, so a confirmed message is on disk. On
open both are replayed; a torn tail of either (a crash mid-write) is cut off; the state
log is rewritten with the live messages' state only, and log segments that hold no live
message any more are deleted (RabbitMQ's release cursor).
"""

from __future__ import annotations

import os
import shutil
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from leveret.broker.deadletter import REASONS
from leveret.broker.message import Message
from leveret.broker.ports import DEAD_LETTERED, OUT, READY, RETURNED
from leveret.store.streams import SegmentLog

_ID = struct.Struct(">cQ")
_ID_COUNT = struct.Struct(">cQI")
_ID_REASON = struct.Struct(">cQB")
SEGMENT_BYTES = 8 * 1024 * 1024  # small segments, so settled messages free disk soon


@dataclass(slots=True, eq=False)
class Recovered:
    """A :class:`~leveret.broker.ports.RecoveredMessage`."""

    id: int
    message: Message
    count: int | None
    ts_ms: int
    state: str
    reason: str = ""


class QuorumLog:
    """The :class:`~leveret.broker.ports.QuorumStore` of one quorum queue."""

    def __init__(self, directory: Path) -> None:
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.log = SegmentLog(self.dir / "log", max_segment_bytes=SEGMENT_BYTES)
        self.state_path = self.dir / "state.log"
        self._pending: list[bytes] = []
        self._state: BinaryIO | None = None

    # ------------------------------------------------------------- recovery
    def recover(self) -> list[Recovered]:
        """The live messages, in queue order: those returned to the front first (in the
        order they were returned), then those that were out with consumers (in order),
        then the rest as they were enqueued."""
        settled: set[int] = set()
        out: set[int] = set()
        counts: dict[int, int] = {}
        returned: dict[int, None] = {}
        dead: dict[int, str] = {}
        low = 0  # every id below it is settled
        for kind, mid, count in self._read_state():
            if kind == b"L":
                low = max(low, mid)
            elif kind == b"S":
                settled.add(mid)
                out.discard(mid)
                returned.pop(mid, None)
                dead.pop(mid, None)
            elif kind == b"D":
                out.discard(mid)
                returned.pop(mid, None)
                dead[mid] = REASONS[count] if count < len(REASONS) else "rejected"
            elif kind == b"C":
                out.add(mid)
                returned.pop(mid, None)
            elif kind == b"R":
                out.discard(mid)
                returned.pop(mid, None)
                returned[mid] = None
                counts[mid] = count
            elif kind == b"N":
                counts[mid] = count
        found: dict[int, Recovered] = {}
        offset = self.log.first
        while True:
            records = self.log.read(offset, 1024)
            if not records:
                break
            for rid, ts, exchange_and_key, props, body in records:
                offset = rid + 1
                if rid < low or rid in settled:
                    continue
                message = Message.stored(exchange_and_key, props, body)
                if rid in dead:
                    state = DEAD_LETTERED
                else:
                    state = RETURNED if rid in returned else OUT if rid in out else READY
                found[rid] = Recovered(rid, message, counts.get(rid), ts, state, dead.get(rid, ""))
        ordered = [r for r in found.values() if r.state == DEAD_LETTERED]
        ordered += [found[i] for i in returned if i in found]
        ordered += [r for r in found.values() if r.state == OUT]
        ordered += [r for r in found.values() if r.state == READY]
        self._compact(ordered)
        return ordered

    def _read_state(self) -> list[tuple[bytes, int, int]]:
        try:
            data = self.state_path.read_bytes()
        except FileNotFoundError:
            return []
        out: list[tuple[bytes, int, int]] = []
        pos = 0
        good = 0
        while pos < len(data):
            kind = data[pos : pos + 1]
            if kind in (b"C", b"S", b"L"):
                if pos + _ID.size > len(data):
                    break
                _k, mid = _ID.unpack_from(data, pos)
                out.append((kind, mid, 0))
                pos += _ID.size
            elif kind == b"D":
                if pos + _ID_REASON.size > len(data):
                    break
                _k, mid, reason = _ID_REASON.unpack_from(data, pos)
                out.append((kind, mid, reason))
                pos += _ID_REASON.size
            elif kind in (b"R", b"N"):
                if pos + _ID_COUNT.size > len(data):
                    break
                _k, mid, count = _ID_COUNT.unpack_from(data, pos)
                out.append((kind, mid, count))
                pos += _ID_COUNT.size
            else:
                break
            good = pos
        if good < len(data):  # a torn tail
            with open(self.state_path, "r+b") as f:
                f.truncate(good)
        return out

    def _compact(self, live: list[Recovered]) -> None:
        """Rewrite the state log with the live messages' state only (and which messages
        between them are settled), and delete the log segments below the oldest live
        message."""
        low = min((r.id for r in live), default=self.log.next_offset)
        alive = {r.id for r in live}
        records = [_ID.pack(b"L", low)]
        records += [_ID.pack(b"S", i) for i in range(low, self.log.next_offset) if i not in alive]
        for r in live:
            if r.state == DEAD_LETTERED:
                records.append(_ID_REASON.pack(b"D", r.id, _reason_code(r.reason)))
            elif r.state == RETURNED:
                records.append(_ID_COUNT.pack(b"R", r.id, r.count or 0))
            else:
                if r.count is not None:
                    records.append(_ID_COUNT.pack(b"N", r.id, r.count))
                if r.state == OUT:
                    records.append(_ID.pack(b"C", r.id))
        tmp = self.state_path.with_suffix(".tmp")
        with open(tmp, "wb") as f:
            f.write(b"".join(records))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.state_path)
        self.release(low)

    # ------------------------------------------------------------- writing
    def append(self, message: Message, count: int | None = None) -> int:
        mid = self.log.append(message.exchange_and_key, message.properties, message.body)
        if count is not None:
            self._pending.append(_ID_COUNT.pack(b"N", mid, count))
        return mid

    def checked_out(self, mid: int) -> None:
        self._pending.append(_ID.pack(b"C", mid))

    def settle(self, mid: int) -> None:
        self._pending.append(_ID.pack(b"S", mid))

    def returned(self, mid: int, count: int) -> None:
        self._pending.append(_ID_COUNT.pack(b"R", mid, count))

    def dead_lettered(self, mid: int, reason: str) -> None:
        self._pending.append(_ID_REASON.pack(b"D", mid, _reason_code(reason)))

    def release(self, below: int) -> None:
        """No message below id ``below`` is live: delete the segments that hold only
        such messages (never the one being written)."""
        log = self.log
        while len(log.segments) > 1 and log.segments[1].base <= below:
            oldest = log.segments.pop(0)
            oldest.close()
            oldest.path.unlink(missing_ok=True)
            oldest.idx_path.unlink(missing_ok=True)

    def sync(self) -> bool:
        """Make everything written since the last call durable (fsync). True if the
        message log took new messages."""
        grew = self.log.sync()
        if self._pending:
            if self._state is None:
                self._state = open(self.state_path, "ab")  # noqa: SIM115 - kept open
            self._state.write(b"".join(self._pending))
            self._pending.clear()
            self._state.flush()
            os.fsync(self._state.fileno())
        return grew

    def open_files(self) -> int:
        log = self.log
        files = [log._writer, log._idx_writer, self._state]
        files += [seg._reader for seg in log.segments]
        return sum(1 for f in files if f is not None)

    def close(self) -> None:
        self.sync()
        self.log.close()
        if self._state is not None:
            self._state.close()
            self._state = None

    def delete(self) -> None:
        self._pending.clear()
        if self._state is not None:
            self._state.close()
            self._state = None
        self.log.delete()
        shutil.rmtree(self.dir, ignore_errors=True)


def _reason_code(reason: str) -> int:
    return REASONS.index(reason) if reason in REASONS else 0
