"""What a stream tracks beside its messages, as osiris 1.3.1 (RabbitMQ 3.10.8) keeps it in
the log: consumers' stored offsets, named publishers' last publishing ids (sequences), and
timestamps, each by a reference of at most 255 bytes.

Changes go in the trailer of the next user chunk, or, when no message is written with
them, in a tracking-delta chunk (one entry holding the same records). Each record is
``type u8 | reference size u8 | reference | value u64`` (type 0 sequence, 1 offset,
2 timestamp; a timestamp is signed). A segment starts with a tracking-snapshot chunk
holding the whole state (a sequence's record also holds the id of the chunk it was
written in, before its value); offsets below the stream's first offset, timestamps below
its first timestamp and all but the 255 newest sequences are left out of it.

The state is recovered by reading the chunks in log order: a snapshot replaces the state,
a delta or a trailer updates it (a sequence taking the id of the chunk it is in)."""

from __future__ import annotations

import json
import struct
from pathlib import Path

TRK_SEQUENCE = 0
TRK_OFFSET = 1
TRK_TIMESTAMP = 2
MAX_SEQUENCES = 255
_U64 = struct.Struct(">Q")
_SNAP_SEQ = struct.Struct(">QQ")  # chunk id, sequence
_MASK = 0xFFFFFFFFFFFFFFFF


def tracking_entry(kind: int, reference: str, value: int, chunk_id: int | None = None) -> bytes:
    """One tracking record: type (0 sequence, 1 offset, 2 timestamp), the reference, then
    the value (in a snapshot, a sequence is preceded by the chunk id it was written in)."""
    ref = reference.encode()[:255]
    head = bytes((kind, len(ref))) + ref
    if chunk_id is not None:
        head += _U64.pack(chunk_id)
    return head + _U64.pack(value & _MASK)


def read_tracking_json(path: Path) -> tuple[dict[str, int], dict[str, int]]:
    """The stored offsets and publisher sequences of the ``tracking.json`` an older
    Leveret kept beside a stream's files; OSError or ValueError if it cannot be read."""
    data = json.loads(path.read_text())
    try:
        offsets = {str(k): int(v) for k, v in data.get("offsets", {}).items()}
        sequences = {str(k): int(v) for k, v in data.get("sequences", {}).items()}
    except (TypeError, AttributeError) as exc:
        raise ValueError(f"not a tracking file: {exc}") from exc
    return offsets, sequences


def _records(data: bytes | memoryview, snapshot: bool) -> list[tuple[int, str, int, int]]:
    """(type, reference, value, chunk id or -1) of each whole record in ``data``; a record
    cut short or of an unknown type ends the list."""
    out: list[tuple[int, str, int, int]] = []
    pos, end = 0, len(data)
    while pos + 2 <= end:
        kind, size = data[pos], data[pos + 1]
        at = pos + 2 + size
        with_chunk = snapshot and kind == TRK_SEQUENCE
        nxt = at + (16 if with_chunk else 8)
        if kind > TRK_TIMESTAMP or nxt > end:
            break
        ref = bytes(data[pos + 2 : at]).decode("utf-8", "replace")
        if with_chunk:
            chunk_id, value = _SNAP_SEQ.unpack_from(data, at)
        else:
            chunk_id, (value,) = -1, _U64.unpack_from(data, at)
        if kind == TRK_TIMESTAMP and value > _MASK >> 1:
            value -= 1 << 64
        out.append((kind, ref, value, chunk_id))
        pos = nxt
    return out


class Tracking:
    """A stream's tracking state and what changed since it was last written."""

    __slots__ = ("offsets", "pending", "sequences", "timestamps")

    def __init__(self) -> None:
        self.offsets: dict[str, int] = {}
        self.sequences: dict[str, tuple[int, int]] = {}  # reference -> (chunk id, sequence)
        self.timestamps: dict[str, int] = {}
        self.pending: dict[tuple[int, str], int] = {}

    def is_empty(self) -> bool:
        return not (self.offsets or self.sequences or self.timestamps)

    def sequence(self, reference: str) -> int | None:
        got = self.sequences.get(reference)
        return None if got is None else got[1]

    def set(self, kind: int, reference: str, value: int) -> None:
        """A change, written at the next :meth:`flush`."""
        self.pending[(kind, reference)] = value
        if kind == TRK_OFFSET:
            self.offsets[reference] = value
        elif kind == TRK_TIMESTAMP:
            self.timestamps[reference] = value
        else:  # its chunk id is known once it is written
            self.sequences[reference] = (self.sequences.get(reference, (0, 0))[0], value)

    def flush(self, chunk_id: int) -> bytes:
        """The pending changes as trailer (or delta) records, in the chunk ``chunk_id``."""
        for kind, ref in self.pending:
            if kind == TRK_SEQUENCE:
                self.sequences[ref] = (chunk_id, self.sequences[ref][1])
        data = b"".join(tracking_entry(k, ref, v) for (k, ref), v in self.pending.items())
        self.pending.clear()
        return data

    def snapshot(self, first_offset: int, first_timestamp: int) -> bytes:
        """The whole state as a snapshot chunk holds it; what is left out of it (offsets
        below ``first_offset``, timestamps below ``first_timestamp``, the oldest
        sequences beyond 255) is dropped from the state too, as osiris drops it."""
        self.offsets = {r: o for r, o in self.offsets.items() if o >= first_offset}
        self.timestamps = {r: t for r, t in self.timestamps.items() if t >= first_timestamp}
        if len(self.sequences) > MAX_SEQUENCES:
            newest = sorted(self.sequences.items(), key=lambda item: item[1][0])
            self.sequences = dict(newest[-MAX_SEQUENCES:])
        self.pending.clear()
        return b"".join(
            [tracking_entry(TRK_SEQUENCE, r, s, c) for r, (c, s) in self.sequences.items()]
            + [tracking_entry(TRK_OFFSET, r, o) for r, o in self.offsets.items()]
            + [tracking_entry(TRK_TIMESTAMP, r, t) for r, t in self.timestamps.items()]
        )

    def load_snapshot(self, data: bytes | memoryview) -> None:
        """A snapshot chunk's records: the state from here on."""
        self.offsets, self.sequences, self.timestamps = {}, {}, {}
        self._apply(_records(data, snapshot=True), 0)

    def apply_trailer(self, chunk_id: int, data: bytes | memoryview) -> None:
        """A trailer's (or a delta chunk's) records, written in the chunk ``chunk_id``."""
        self._apply(_records(data, snapshot=False), chunk_id)

    def _apply(self, records: list[tuple[int, str, int, int]], chunk_id: int) -> None:
        for kind, ref, value, chunk in records:
            if kind == TRK_OFFSET:
                self.offsets[ref] = value
            elif kind == TRK_TIMESTAMP:
                self.timestamps[ref] = value
            else:
                self.sequences[ref] = (chunk if chunk >= 0 else chunk_id, value)
