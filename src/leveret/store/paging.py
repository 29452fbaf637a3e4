"""Where classic queues page ready messages: the :class:`~leveret.broker.ports.Pager`.

A queue's paged messages are runs, oldest first, of two kinds:

- messages the durable message store holds (a :class:`_Stored` run: their store ids and
  record lengths, read back from the store's segments): what a durable queue kept from
  before a restart, and persistent messages of a durable queue paged out since, which
  are not written a second time;
- page files in the transient area for everything else, written by this process and
  dropped at the next start. Each file is appended to in batches and read back front to
  back, so only a few numbers per file stay in memory, plus the store ids of persistent
  messages (for a purge to remove them from the durable store).

A page record is ``length (u32) | seq (u64) | store id (u64) | expires at (i64) |
delivery count (u32) | flags (u8) | exchange-and-key length (u16) | properties length
(u32) | exchange-and-key | properties | body``. Reads are sequential: one ``pread`` per
read-ahead, and the kernel is told to fetch the next one meanwhile
(``POSIX_FADV_WILLNEED``). The files are read with ``pread``, not mapped, so pages of
the files never count in the process's resident memory."""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import struct
from array import array
from collections import deque
from pathlib import Path

from leveret.broker.entry import Entry
from leveret.broker.message import Message, split_exchange_and_key
from leveret.store.messages import HEAD, MessageLog, Recovered

log = logging.getLogger(__name__)

PAGE_FILE_BYTES = 16 * 1024 * 1024  # a new page file after this many bytes
_REC = struct.Struct(">IQQqIBHI")
_REC_SIZE = _REC.size
_LEN = 4  # the length field, not counted in itself
_REDELIVERED = 0x01
_MIN_READ = 64 * 1024
_WRITE_CHUNK = 1024 * 1024
_fadvise = getattr(os, "posix_fadvise", None)


class _Stored:
    """Messages the durable store holds, read back from its segments: recovered ones
    (numbered 1..count, redelivered) or paged-out ones (their numbers in ``seqs``)."""

    __slots__ = ("bytes", "count", "ids", "lengths", "next", "seqs")

    def __init__(self, recovered: Recovered | None = None) -> None:
        if recovered is not None:
            self.ids = recovered.ids
            self.lengths = recovered.lengths
            self.bytes = recovered.body_bytes
            self.seqs: array[int] | None = None
        else:
            self.ids = array("Q")
            self.lengths = array("I")
            self.bytes = 0
            self.seqs = array("Q")
        self.count = len(self.ids)
        self.next = 0


class _File:
    """One page file: appended to at its end, read from its front."""

    __slots__ = (
        "bytes",
        "count",
        "fd",
        "ids",
        "ids_next",
        "path",
        "pbytes",
        "read_pos",
        "write_pos",
    )

    def __init__(self, path: Path) -> None:
        self.path = path
        self.fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
        self.write_pos = 0
        self.read_pos = 0
        self.count = 0
        self.bytes = 0
        self.pbytes = 0  # body bytes of persistent messages
        self.ids = array("Q")  # store ids of persistent messages, in order
        self.ids_next = 0

    def drop(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self.fd)
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()


class PageFiles:
    """The pager of one classic queue."""

    def __init__(
        self,
        directory: Path,
        name: str,
        store: MessageLog | None = None,
        recovered: Recovered | None = None,
    ) -> None:
        self._dir = directory
        self._name = name
        self._store = store
        self._runs: deque[_Stored | _File] = deque()
        self._writing: _File | None = None
        self._files = 0
        self.count = 0
        self.bytes = 0
        self._pcount = 0
        self._pbytes = 0
        self._recovered = False
        if recovered is not None and recovered.ids and store is not None:
            run = _Stored(recovered)
            self._runs.append(run)
            self.count = self._pcount = run.count
            self.bytes = self._pbytes = run.bytes
            self._recovered = True

    @property
    def persistent(self) -> tuple[int, int]:
        return self._pcount, self._pbytes

    @property
    def recovered(self) -> bool:
        return self._recovered

    # ------------------------------------------------------------------ writing
    def write(self, entries: list[Entry]) -> bool:
        if not entries:
            return True
        if self._store is not None and all(_stored_as_is(e) for e in entries):
            self._write_stored(entries)
            return True
        f = self._writing
        if f is not None and self._runs[-1] is not f:
            f = None  # something was paged behind it since: a new file
        try:
            if f is None or f.write_pos >= PAGE_FILE_BYTES:
                f = self._new_file()
        except OSError as exc:
            log.error("paging: cannot create a page file in %s: %s", self._dir, exc)
            return False
        start = f.write_pos
        ids = array("Q")
        pbytes = size = 0
        pack = _REC.pack
        parts: list[bytes] = []
        pending = 0
        at = start
        try:
            for e in entries:
                m = e.message
                ek = m.exchange_and_key
                props = m.properties
                body = m.body
                n = len(body)
                parts.append(
                    pack(
                        _REC_SIZE - _LEN + len(ek) + len(props) + n,
                        e.seq,
                        e.store_id,
                        e.expires_at,
                        e.delivery_count,
                        _REDELIVERED if e.redelivered else 0,
                        len(ek),
                        len(props),
                    )
                )
                parts += (ek, props, body)
                size += n
                pending += n
                if e.store_id:
                    ids.append(e.store_id)
                    pbytes += n
                if pending >= _WRITE_CHUNK:
                    # written a chunk at a time: no copy of a whole page-out in memory
                    at = _write_all(f.fd, b"".join(parts), at)
                    parts.clear()
                    pending = 0
            if parts:
                at = _write_all(f.fd, b"".join(parts), at)
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.ftruncate(f.fd, start)
            if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
                log.error("paging: cannot write %s: %s", f.path, exc)
            return False
        f.write_pos = at
        f.count += len(entries)
        f.bytes += size
        f.ids.extend(ids)
        f.pbytes += pbytes
        self.count += len(entries)
        self.bytes += size
        self._pcount += len(ids)
        self._pbytes += pbytes
        return True

    def _write_stored(self, entries: list[Entry]) -> None:
        """Persistent messages already in the durable store: page out their place."""
        run = self._runs[-1] if self._runs else None
        if not isinstance(run, _Stored) or run.seqs is None:
            run = _Stored()
            self._runs.append(run)
        assert run.seqs is not None
        size = 0
        for e in entries:
            m = e.message
            n = len(m.body)
            run.ids.append(e.store_id)
            run.lengths.append(HEAD + len(m.exchange_and_key) + len(m.properties) + n)
            run.seqs.append(e.seq)
            size += n
        run.count += len(entries)
        run.bytes += size
        self.count += len(entries)
        self.bytes += size
        self._pcount += len(entries)
        self._pbytes += size

    def _new_file(self) -> _File:
        self._dir.mkdir(parents=True, exist_ok=True)
        self._files += 1
        f = _File(self._dir / f"{self._name}-{self._files:06d}.pg")
        self._writing = f
        self._runs.append(f)
        return f

    # ------------------------------------------------------------------ reading
    def read(self, max_bytes: int) -> list[Entry]:
        out: list[Entry] = []
        got = 0
        while self._runs and (not out or got < max_bytes):
            run = self._runs[0]
            if isinstance(run, _Stored):
                got += self._read_stored(run, max_bytes - got, out)
                done = run.next >= len(run.ids)
                if done and run.seqs is None:
                    self._recovered = False
            else:
                got += self._read_file(run, max_bytes - got, out)
                done = run.read_pos >= run.write_pos
                if done:
                    run.drop()
                    if run is self._writing:
                        self._writing = None
            if done:
                self._runs.popleft()
        return out

    def _read_stored(self, run: _Stored, max_bytes: int, out: list[Entry]) -> int:
        assert self._store is not None
        start = end = run.next
        span = 0
        n = len(run.ids)
        while end < n and (span < max_bytes or end == start):
            span += run.lengths[end]
            end += 1
        records = self._store.read(run.ids, run.lengths, start, end)
        got = 0
        last_ek = b""
        names = ("", "")
        seqs = run.seqs
        recovered = seqs is None
        ids = run.ids
        for i, (ek, props, body) in enumerate(records, start):
            if ek != last_ek:
                last_ek = ek
                names = split_exchange_and_key(ek)
            entry = Entry(
                Message(names[0], names[1], ek, props, body),
                i + 1 if seqs is None else seqs[i],
            )
            entry.redelivered = recovered
            entry.store_id = ids[i]
            out.append(entry)
            got += len(body)
        run.next = end
        run.count -= end - start
        run.bytes -= got
        self.count -= end - start
        self.bytes -= got
        self._pcount -= end - start
        self._pbytes -= got
        return got

    def _read_file(self, f: _File, max_bytes: int, out: list[Entry]) -> int:
        want = min(max(max_bytes, _MIN_READ), f.write_pos - f.read_pos)
        buf = os.pread(f.fd, want, f.read_pos)
        if len(buf) >= _REC_SIZE:
            (length,) = struct.unpack_from(">I", buf, 0)
            if length + _LEN > len(buf):  # one record larger than the read
                buf = os.pread(f.fd, length + _LEN, f.read_pos)
        pos = got = count = pcount = pbytes = 0
        unpack = _REC.unpack_from
        last_ek = b""
        names = ("", "")
        end = len(buf)
        while pos + _REC_SIZE <= end and (count == 0 or got < max_bytes):
            length, seq, store_id, expires, deliveries, flags, ek_len, props_len = unpack(buf, pos)
            nxt = pos + _LEN + length
            if nxt > end:
                break
            a = pos + _REC_SIZE
            b = a + ek_len
            c = b + props_len
            ek = buf[a:b]
            if ek != last_ek:
                last_ek = ek
                names = split_exchange_and_key(ek)
            body = buf[c:nxt]
            entry = Entry(Message(names[0], names[1], ek, buf[b:c], body), seq, expires)
            entry.store_id = store_id
            entry.delivery_count = deliveries
            entry.redelivered = bool(flags & _REDELIVERED)
            out.append(entry)
            got += len(body)
            count += 1
            if store_id:
                pcount += 1
                pbytes += len(body)
            pos = nxt
        if count == 0 and f.write_pos > f.read_pos:
            # what is left cannot be read back: count it gone rather than loop on it
            log.error("paging: %s is damaged at %d; %d messages lost", f.path, f.read_pos, f.count)
            count, got, pcount, pbytes = f.count, f.bytes, len(f.ids) - f.ids_next, f.pbytes
            pos = f.write_pos - f.read_pos
        f.read_pos += pos
        f.count -= count
        f.bytes -= got
        f.ids_next += pcount
        f.pbytes -= pbytes
        self.count -= count
        self.bytes -= got
        self._pcount -= pcount
        self._pbytes -= pbytes
        if _fadvise is not None and f.read_pos < f.write_pos:
            with contextlib.suppress(OSError):
                _fadvise(f.fd, f.read_pos, max_bytes, os.POSIX_FADV_WILLNEED)
        return got

    # ------------------------------------------------------------------ emptying
    def clear(self) -> list[int]:
        ids: list[int] = []
        for run in self._runs:
            if isinstance(run, _Stored):
                ids.extend(run.ids[run.next :])
            else:
                ids.extend(run.ids[run.ids_next :])
        self.close()
        return ids

    def close(self) -> None:
        for run in self._runs:
            if isinstance(run, _File):
                run.drop()
        self._runs.clear()
        self._writing = None
        self.count = self.bytes = self._pcount = self._pbytes = 0
        self._recovered = False


def _stored_as_is(e: Entry) -> bool:
    """A message the durable store holds whose entry says nothing the store does not
    (never delivered, no expiry): paged out by its place in the store alone."""
    return bool(e.store_id) and not e.redelivered and not e.expires_at and not e.delivery_count


def _write_all(fd: int, data: bytes, at: int) -> int:
    """Write all of ``data`` at ``at``; where it ended."""
    view = memoryview(data)
    while view:
        n = os.pwrite(fd, view, at)
        view = view[n:]
        at += n
    return at
