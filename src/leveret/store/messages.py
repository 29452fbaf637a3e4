"""Persistent messages of durable classic queues: segment files shared by all queues.

Layout, under the message store's directory::

    queues.json     the durable queues that keep messages here: id -> [vhost, name]
    00000001.seg    message records, appended in publish order
    00000001.ack    positions (u32) in 00000001.seg of records since removed

A record is ``b"A" | queue id (u32) | exchange-and-key length (u16) | properties length
(u32) | body length (u32) | exchange-and-key | properties | body``. A message's store id
is where its record lies: ``segment << 40 | position``; ids grow in publish order.

Appends are buffered; :meth:`MessageLog.sync` writes them and fsyncs (the queue table
first when it changed) before publisher confirms go out. Removals are appended to the
segment's ack file at the same time without an fsync: after a crash an acknowledged
message can come back, never a confirmed one go missing (at least once, as RabbitMQ). A
segment whose messages are all removed is deleted; a new segment starts every
:data:`SEGMENT_BYTES`.

On start the segments are scanned reading record headers only (bodies are skipped, never
loaded): each queue gets the ids and record lengths of its live messages, in order, and
reads them back from here when it needs them (:mod:`leveret.store.paging`). A torn
record at the end, left by a crash mid-write, is cut off; appending resumes in a new
segment. A log in the earlier single-file format (``messages.log``) is converted once."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import struct
from array import array
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

log = logging.getLogger(__name__)

SEGMENT_BYTES = 16 * 1024 * 1024
SHIFT = 40
POSITION = (1 << SHIFT) - 1

_HEAD = struct.Struct(">cIHII")  # kind, queue id, ek length, properties length, body length
HEAD = _HEAD.size
_U32 = struct.Struct("<I")
_SCAN_BLOCK = 1024 * 1024
_SKIP = 64 * 1024  # after a record this large, the scan reads just the next header


@dataclass
class Recovered:
    """One queue's live messages found on start: ids and record lengths, in order."""

    ids: array[int] = field(default_factory=lambda: array("Q"))
    lengths: array[int] = field(default_factory=lambda: array("I"))
    body_bytes: int = 0


Record = tuple[bytes, bytes, bytes]  # exchange-and-key, properties, body


class MessageLog:
    """The segment files of the message store and the table of the queues using it."""

    def __init__(self, directory: Path) -> None:
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self._table_path = self.dir / "queues.json"
        self.queues: dict[int, tuple[str, str]] = {}
        self._ids: dict[tuple[str, str], int] = {}
        self._next_queue = 1
        self._table_dirty = False
        self._load_table()
        # live messages per segment, and per queue per segment
        self.live: Counter[int] = Counter()
        self.queue_live: dict[int, Counter[int]] = {}
        self._segment = 0  # the segment being appended to
        self._size = 0  # its size, pending appends included
        self._written = 0  # how much of it is written to the file
        self._writer: int | None = None
        self._pending: list[bytes] = []
        self._unsynced: set[int] = set()  # fds written since the last fsync
        self._retired: list[int] = []  # writers of earlier segments, closed at sync
        self._acks: dict[int, list[int]] = {}
        self._dead: set[int] = set()  # segments to delete at the next sync
        self._readers: dict[int, int] = {}
        self._ack_fd: tuple[int, int] | None = None  # (segment, fd) of an open ack file

    # ------------------------------------------------------------ the queue table
    def _load_table(self) -> None:
        try:
            data = json.loads(self._table_path.read_text())
        except FileNotFoundError:
            return
        except (OSError, ValueError) as exc:
            log.error("message store: cannot read %s (%s); starting empty", self._table_path, exc)
            return
        self._next_queue = int(data.get("next", 1))
        for key, (vhost, name) in data.get("queues", {}).items():
            qid = int(key)
            self.queues[qid] = (vhost, name)
            self._ids[(vhost, name)] = qid

    def _save_table(self) -> None:
        data = {
            "next": self._next_queue,
            "queues": {str(k): list(v) for k, v in sorted(self.queues.items())},
        }
        tmp = self._table_path.with_suffix(".tmp")
        with open(tmp, "w") as f:
            json.dump(data, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self._table_path)
        self._table_dirty = False

    def queue_id(self, vhost: str, name: str) -> int:
        """The id of a durable queue's messages: the one it had before a restart, or a
        new one."""
        qid = self._ids.get((vhost, name))
        if qid is None:
            qid = self._next_queue
            self._next_queue += 1
            self.queues[qid] = (vhost, name)
            self._ids[(vhost, name)] = qid
            self._table_dirty = True
        self.queue_live.setdefault(qid, Counter())
        return qid

    def drop_queue(self, qid: int) -> None:
        """Forget a queue and all its messages: its records no longer count."""
        key = self.queues.pop(qid, None)
        if key is not None:
            self._ids.pop(key, None)
            self._table_dirty = True
        for seg, n in self.queue_live.pop(qid, Counter()).items():
            self._release(seg, n)

    # ------------------------------------------------------------------ writing
    def add(self, qid: int, exchange_and_key: bytes, properties: bytes, body: bytes) -> int:
        """Append a message; its store id."""
        if self._writer is None or self._size >= SEGMENT_BYTES:
            self._roll()
        head = _HEAD.pack(b"A", qid, len(exchange_and_key), len(properties), len(body))
        store_id = (self._segment << SHIFT) | self._size
        self._pending += (head, exchange_and_key, properties, body)
        self._size += HEAD + len(exchange_and_key) + len(properties) + len(body)
        self.live[self._segment] += 1
        self.queue_live[qid][self._segment] += 1
        return store_id

    def remove(self, qid: int, store_id: int) -> None:
        seg = store_id >> SHIFT
        per_queue = self.queue_live.get(qid)
        if per_queue is None or per_queue[seg] <= 0:
            return  # the queue was dropped, or already gone
        per_queue[seg] -= 1
        self._acks.setdefault(seg, []).append(store_id & POSITION)
        self._release(seg, 1)

    def _release(self, seg: int, n: int) -> None:
        left = self.live[seg] - n
        if left > 0:
            self.live[seg] = left
            return
        del self.live[seg]
        if seg != self._segment:
            self._dead.add(seg)

    def _path(self, seg: int, suffix: str = ".seg") -> Path:
        return self.dir / f"{seg:08d}{suffix}"

    def _roll(self) -> None:
        self._flush()
        old = self._segment
        if self._writer is not None:
            self._retired.append(self._writer)
        self._segment = max(old, self._last_segment()) + 1
        self._writer = os.open(self._path(self._segment), os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        self._size = self._written = 0
        if old and old not in self.live:
            self._dead.add(old)

    def _last_segment(self) -> int:
        last = 0
        for path in self.dir.glob("*.seg"):
            with contextlib.suppress(ValueError):
                last = max(last, int(path.stem))
        return last

    def _flush(self) -> None:
        """Write pending appends to the segment file (no fsync)."""
        if not self._pending or self._writer is None:
            return
        data = b"".join(self._pending)
        self._pending.clear()
        view = memoryview(data)
        while view:
            n = os.write(self._writer, view)
            view = view[n:]
        self._written = self._size
        self._unsynced.add(self._writer)

    def sync(self) -> None:
        """Make appends durable (fsync), write removals, delete emptied segments."""
        job = self.write()
        if job is not None:
            job.run()

    def write(self) -> FsyncJob | None:
        """All of :meth:`sync` but the fsync: write pending appends and removals, delete
        emptied segments. What the appends need to be durable is returned as a job that
        may run in another thread (None: nothing was appended since the last one); the
        writer keeps appending meanwhile. Jobs must run one at a time, in order."""
        if self._table_dirty:
            self._save_table()
        if self._pending:
            self._flush()
        job = None
        if self._unsynced or self._retired:
            job = FsyncJob(list(self._unsynced), self._retired)
            self._unsynced = set()
            self._retired = []
        if self._acks:
            for seg, positions in self._acks.items():
                if seg in self._dead or seg not in self.live:
                    continue
                os.write(self._ack_file(seg), array("I", positions).tobytes())
            self._acks.clear()
        if self._dead:
            for seg in self._dead:
                self._delete_segment(seg)
            self._dead.clear()
        return job

    def _ack_file(self, seg: int) -> int:
        """The open ack file of ``seg`` (one kept open: removals come mostly to one
        segment at a time, the oldest)."""
        if self._ack_fd is not None:
            if self._ack_fd[0] == seg:
                return self._ack_fd[1]
            os.close(self._ack_fd[1])
        fd = os.open(self._path(seg, ".ack"), os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        self._ack_fd = (seg, fd)
        return fd

    def _delete_segment(self, seg: int) -> None:
        fd = self._readers.pop(seg, None)
        if fd is not None:
            os.close(fd)
        if self._ack_fd is not None and self._ack_fd[0] == seg:
            os.close(self._ack_fd[1])
            self._ack_fd = None
        for suffix in (".seg", ".ack"):
            with contextlib.suppress(FileNotFoundError):
                self._path(seg, suffix).unlink()

    # ------------------------------------------------------------------ reading
    def _reader(self, seg: int) -> int:
        fd = self._readers.get(seg)
        if fd is None:
            fd = os.open(self._path(seg), os.O_RDONLY)
            self._readers[seg] = fd
        return fd

    def read(self, ids: array[int], lengths: array[int], start: int, end: int) -> list[Record]:
        """The records ``ids[start:end]`` (their lengths given), in order; runs of
        records that lie back to back are read with one read each."""
        if self._pending and (ids[end - 1] >> SHIFT) == self._segment:
            self._flush()
        out: list[Record] = []
        i = start
        while i < end:
            seg = ids[i] >> SHIFT
            first = ids[i] & POSITION
            j = i + 1
            span = lengths[i]
            while j < end and ids[j] == ids[j - 1] + lengths[j - 1] and span < _SCAN_BLOCK:
                span += lengths[j]
                j += 1
            buf = os.pread(self._reader(seg), span, first)
            pos = 0
            for _ in range(i, j):
                out.append(_decode(buf, pos))
                _, _, ek_len, props_len, body_len = _HEAD.unpack_from(buf, pos)
                pos += HEAD + ek_len + props_len + body_len
            i = j
        return out

    # ------------------------------------------------------------------ recovery
    def recover(self) -> dict[int, Recovered]:
        """Scan the segments (headers only) for the live messages of each queue in the
        table; delete segments with none. Convert a log of the earlier format."""
        found: dict[int, Recovered] = {}
        segments = sorted(int(p.stem) for p in self.dir.glob("*.seg") if p.stem.isdigit())
        queues = self.queues
        for seg in segments:
            acked = self._acked(seg)
            per_queue: dict[int, int] = {}
            base = seg << SHIFT
            last_qid = -1
            rec = Recovered()
            for qid, pos, length, body_len in self._scan(seg):
                if pos in acked or qid not in queues:
                    continue
                if qid != last_qid:
                    last_qid = qid
                    rec = found.get(qid) or found.setdefault(qid, Recovered())
                rec.ids.append(base | pos)
                rec.lengths.append(length)
                rec.body_bytes += body_len
                per_queue[qid] = per_queue.get(qid, 0) + 1
            if not per_queue:
                self._delete_segment(seg)
                continue
            self.live[seg] = sum(per_queue.values())
            for qid, n in per_queue.items():
                self.queue_live.setdefault(qid, Counter())[seg] = n
        self._segment = segments[-1] if segments else 0
        legacy = self.dir / "messages.log"
        if legacy.exists():
            self._convert(legacy, found)
        return found

    def _acked(self, seg: int) -> set[int]:
        try:
            raw = self._path(seg, ".ack").read_bytes()
        except FileNotFoundError:
            return set()
        raw = raw[: len(raw) - len(raw) % 4]  # a torn last entry
        return set(array("I", raw))

    def _scan(self, seg: int) -> Iterator[tuple[int, int, int, int]]:
        """(queue id, position, record length, body length) of each whole record. Small
        records are read a block at a time; after a large one, only the next header."""
        path = self._path(seg)
        size = path.stat().st_size
        fd = os.open(path, os.O_RDONLY)
        unpack = _HEAD.unpack_from
        try:
            pos = 0
            buf = b""
            base = 0  # file position of buf[0]
            length = 0
            while pos + HEAD <= size:
                if pos + HEAD > base + len(buf):
                    base = pos
                    buf = os.pread(fd, HEAD if length > _SKIP else _SCAN_BLOCK, pos)
                kind, qid, ek_len, props_len, body_len = unpack(buf, pos - base)
                length = HEAD + ek_len + props_len + body_len
                if kind != b"A" or pos + length > size:
                    break
                yield qid, pos, length, body_len
                pos += length
        finally:
            os.close(fd)
        if pos < size:
            log.warning("message store: %s ends in a torn record; cut at %d", path, pos)
            os.truncate(path, pos)

    def _convert(self, legacy: Path, found: dict[int, Recovered]) -> None:
        """Move the messages of a log in the earlier format into segments."""
        records = list(_legacy_records(legacy))
        for vhost, queue, exchange, rk, props, body in records:
            qid = self.queue_id(vhost, queue)
            ek = _short(exchange) + _short(rk)
            store_id = self.add(qid, ek, props, body)
            rec = found.setdefault(qid, Recovered())
            rec.ids.append(store_id)
            rec.lengths.append(HEAD + len(ek) + len(props) + len(body))
            rec.body_bytes += len(body)
        self.sync()
        legacy.unlink()
        log.info("message store: converted %d messages from %s", len(records), legacy)

    def close(self) -> None:
        self.sync()
        if self._writer is not None:
            os.close(self._writer)
            self._writer = None
        if self._ack_fd is not None:
            os.close(self._ack_fd[1])
            self._ack_fd = None
        for fd in self._readers.values():
            os.close(fd)
        self._readers.clear()


class FsyncJob:
    """What makes appends written so far durable: fsync the files they went to, then
    close the writers of the segments finished since (no one writes to those any more).
    Runs in any thread."""

    __slots__ = ("fds", "retired")

    def __init__(self, fds: list[int], retired: list[int]) -> None:
        self.fds = fds
        self.retired = retired

    def merge(self, later: FsyncJob) -> None:
        """Take on what a later job has to do (one fsync for both: group commit)."""
        self.fds.extend(fd for fd in later.fds if fd not in self.fds)
        self.retired.extend(later.retired)

    def run(self) -> None:
        for fd in self.fds:
            os.fsync(fd)
        for fd in self.retired:
            os.close(fd)


def _decode(buf: bytes, pos: int) -> Record:
    _, _, ek_len, props_len, body_len = _HEAD.unpack_from(buf, pos)
    a = pos + HEAD
    b = a + ek_len
    c = b + props_len
    return buf[a:b], buf[b:c], buf[c : c + body_len]


def _short(s: str) -> bytes:
    raw = s.encode()
    return bytes((len(raw),)) + raw


def _legacy_records(path: Path) -> Iterator[tuple[str, str, str, str, bytes, bytes]]:
    """The surviving messages of the earlier single-file log (kind | length | payload;
    ``A`` adds, ``R`` removes, ``D`` drops a queue), in order."""
    rec = struct.Struct(">cI")
    u32 = struct.Struct(">I")
    data = path.read_bytes()

    def text(p: bytes, q: int) -> tuple[bytes, int]:
        (n,) = u32.unpack_from(p, q)
        return p[q + 4 : q + 4 + n], q + 4 + n

    live: dict[tuple[str, str, int], tuple[str, str, str, str, bytes, bytes]] = {}
    pos = 0
    while pos + 5 <= len(data):
        kind, length = rec.unpack_from(data, pos)
        p = data[pos + 5 : pos + 5 + length]
        if len(p) < length:
            break
        pos += 5 + length
        if kind == b"A":
            (mid,) = struct.unpack_from(">Q", p, 0)
            vhost, q = text(p, 8)
            queue, q = text(p, q)
            exchange, q = text(p, q)
            rk, q = text(p, q)
            props, q = text(p, q)
            body, q = text(p, q)
            v, n = vhost.decode(), queue.decode()
            live[(v, n, mid)] = (v, n, exchange.decode(), rk.decode(), props, body)
        elif kind == b"R":
            (mid,) = struct.unpack_from(">Q", p, 0)
            vhost, q = text(p, 8)
            queue, q = text(p, q)
            live.pop((vhost.decode(), queue.decode(), mid), None)
        elif kind == b"D":
            vhost, q = text(p, 0)
            queue, q = text(p, q)
            v, n = vhost.decode(), queue.decode()
            for key in [k for k in live if k[0] == v and k[1] == n]:
                del live[key]
        else:
            break
    for key in sorted(live, key=lambda k: k[2]):
        yield live[key]
