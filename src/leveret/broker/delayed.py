"""The schedule of rabbitmq-delayed-message-exchange's messages, kept on disk.

A message published to an ``x-delayed-message`` exchange with an ``x-delay`` header of
1..2^32-1 ms waits here until it is due, then goes through its exchange (the header made
negative, as the plugin does) to the queues its bindings name then.

Time is cut into buckets of :data:`BUCKET_MS`. A scheduled message is appended at once to
its bucket's file (so it survives a restart and a kill -9: the bytes are in the
operating system's hands before the publish is confirmed, and ``sync`` makes them durable
with the broker's other writes); memory holds only the buckets due within
:data:`HORIZON_MS`, ordered by due time, and a count per bucket and per exchange, so a
million messages scheduled hours ahead take a few megabytes. A file records, beside each
bucket, which of its messages were delivered, so a restart delivers each once. Without a
directory (a broker in memory) the buckets are lists in memory.
"""

from __future__ import annotations

import contextlib
import heapq
import logging
import os
import struct
from collections import Counter, OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from leveret.broker.clock import wall_ms
from leveret.broker.message import Message
from leveret.durable import fsync_path
from leveret.protocol import table
from leveret.protocol.spec import decode_field

log = logging.getLogger(__name__)

BUCKET_MS = 250
HORIZON_MS = 5000
# Messages due more than FAR_MS ahead wait in minute-wide buckets first (a few files
# take a long spread of delays), and move to the fine buckets when they come near.
FAR_MS = 60_000
MAX_DELAY = 4294967295  # the plugin's bound: an Erlang timer's
_OPEN_FILES = 128

# due ms, sequence number, lengths of vhost, exchange, exchange_and_key, properties, body
_HEAD = struct.Struct(">qQHHIII")
_SEQ = struct.Struct(">Q")

# (due ms, seq, vhost, exchange, message)
Scheduled = tuple[int, int, str, str, Message]


def _encode(item: Scheduled) -> bytes:
    due, seq, vhost, exchange, m = item
    v, x = vhost.encode(), exchange.encode()
    return b"".join(
        (
            _HEAD.pack(
                due, seq, len(v), len(x), len(m.exchange_and_key), len(m.properties), len(m.body)
            ),
            v,
            x,
            m.exchange_and_key,
            m.properties,
            m.body,
        )
    )


def _decode(data: bytes) -> list[Scheduled]:
    """The records of a bucket file; a record cut short (a crash mid-write) ends it."""
    out: list[Scheduled] = []
    pos, end = 0, len(data)
    size = _HEAD.size
    while pos + size <= end:
        due, seq, lv, lx, lk, lp, lb = _HEAD.unpack_from(data, pos)
        p = pos + size
        stop = p + lv + lx + lk + lp + lb
        if stop > end:
            break
        vhost = data[p : p + lv].decode()
        p += lv
        exchange = data[p : p + lx].decode()
        p += lx
        exchange_and_key = data[p : p + lk]
        p += lk
        props = data[p : p + lp]
        p += lp
        body = data[p : p + lb]
        message = Message.stored(exchange_and_key, props, body, "replace")
        out.append((due, seq, vhost, exchange, message))
        pos = stop
    return out


class _Buckets:
    """Where buckets that are not yet due live: in memory."""

    def __init__(self) -> None:
        self._lists: dict[int, list[Scheduled]] = {}

    def add(self, bucket: int, item: Scheduled) -> None:
        self._lists.setdefault(bucket, []).append(item)

    def take(self, bucket: int) -> list[Scheduled]:
        return self._lists.pop(bucket, [])

    def delivered(self, bucket: int, seqs: list[int]) -> None:
        pass

    def done(self, bucket: int) -> None:
        pass

    def existing(self) -> list[tuple[int, list[Scheduled]]]:
        return []

    def flush(self) -> None:
        pass

    def dirty_paths(self) -> list[Path]:
        return []

    def sync(self) -> None:
        pass

    def close(self) -> None:
        pass


class _DiskBuckets(_Buckets):
    """Buckets as files: ``<start ms>.dl`` (records) and ``<start ms>.done`` (the
    sequence numbers delivered)."""

    def __init__(self, directory: Path) -> None:
        super().__init__()
        self.dir = directory
        self.dir.mkdir(parents=True, exist_ok=True)
        self._fds: OrderedDict[int, int] = OrderedDict()  # bucket -> open descriptor
        self._dirty: set[int] = set()  # written since the last fsync
        self._buffers: dict[int, list[bytes]] = {}  # not yet written, by bucket

    def _fd(self, bucket: int) -> int:
        fd = self._fds.get(bucket)
        if fd is not None:
            self._fds.move_to_end(bucket)
            return fd
        if len(self._fds) >= _OPEN_FILES:
            _old, old_fd = self._fds.popitem(last=False)
            os.close(old_fd)  # if dirty, sync() fsyncs it by its name
        fd = os.open(self.dir / f"{bucket}.dl", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self._fds[bucket] = fd
        return fd

    def add(self, bucket: int, item: Scheduled) -> None:
        buffer = self._buffers.get(bucket)
        if buffer is None:
            buffer = self._buffers[bucket] = []
        buffer.append(_encode(item))

    def flush(self) -> None:
        """Hand what was scheduled to the operating system (it then survives the
        process being killed): before publishes are confirmed, and before a bucket is
        read."""
        buffers, self._buffers = self._buffers, {}
        for bucket, records in buffers.items():
            os.write(self._fd(bucket), b"".join(records))
            self._dirty.add(bucket)

    def _read(self, bucket: int) -> list[Scheduled]:
        try:
            data = (self.dir / f"{bucket}.dl").read_bytes()
        except FileNotFoundError:
            return []
        items = _decode(data)
        try:
            done_raw = (self.dir / f"{bucket}.done").read_bytes()
        except FileNotFoundError:
            return items
        n = len(done_raw) // _SEQ.size
        done = {_SEQ.unpack_from(done_raw, i * _SEQ.size)[0] for i in range(n)}
        return [item for item in items if item[1] not in done]

    def take(self, bucket: int) -> list[Scheduled]:
        if bucket in self._buffers:
            self.flush()
        self._close(bucket)
        return self._read(bucket)

    def delivered(self, bucket: int, seqs: list[int]) -> None:
        data = b"".join(_SEQ.pack(s) for s in seqs)
        fd = os.open(self.dir / f"{bucket}.done", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            os.write(fd, data)
        finally:
            os.close(fd)

    def done(self, bucket: int) -> None:
        if bucket in self._buffers:
            self.flush()
        self._close(bucket)
        for suffix in (".dl", ".done"):
            (self.dir / f"{bucket}{suffix}").unlink(missing_ok=True)

    def _close(self, bucket: int) -> None:
        fd = self._fds.pop(bucket, None)
        if fd is not None:
            os.close(fd)
        self._dirty.discard(bucket)

    def existing(self) -> list[tuple[int, list[Scheduled]]]:
        out = []
        for path in sorted(self.dir.glob("*.dl")):
            with contextlib.suppress(ValueError):
                bucket = int(path.stem)
                out.append((bucket, self._read(bucket)))
        return out

    def dirty_paths(self) -> list[Path]:
        """The files written since they were last made durable (handed to
        :func:`fsync_paths`, off the event loop)."""
        self.flush()
        paths = [self.dir / f"{bucket}.dl" for bucket in self._dirty]
        self._dirty.clear()
        return paths

    def sync(self) -> None:
        """Make what was written durable (fsync), here and now."""
        self.flush()
        for bucket in list(self._dirty):
            fd = self._fds.get(bucket)
            if fd is not None:
                os.fsync(fd)
                continue
            with contextlib.suppress(FileNotFoundError):
                fsync_path(self.dir / f"{bucket}.dl")
        self._dirty.clear()

    def close(self) -> None:
        self.sync()
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()


class Scheduler:
    """The broker's delayed messages: scheduled, counted, and delivered when due."""

    def __init__(
        self,
        resolve: Callable[[str], Any],  # vhost name -> VirtualHost or None
        directory: Path | None = None,
    ) -> None:
        self._resolve = resolve
        self._store: _Buckets = _DiskBuckets(directory) if directory is not None else _Buckets()
        self._far: _Buckets = (
            _DiskBuckets(directory / "far") if directory is not None else _Buckets()
        )
        self._far_pending: Counter[int] = Counter()  # minute bucket -> messages in it
        # due, seq, bucket, vhost, exchange, then the message as plain values: tuples of
        # ints, strings and bytes only, which the garbage collector stops tracking, so
        # that a large schedule costs its collections nothing
        self._heap: list[tuple[int, int, int, str, str, str, str, bytes, bytes, bytes]] = []
        self._pending: Counter[int] = Counter()  # bucket -> messages not yet loaded
        self._loaded: dict[int, int] = {}  # bucket -> messages of it in the heap
        self._loaded_upto = -1  # every bucket up to this one is in memory
        self._fired: dict[int, list[int]] = {}
        self.counts: Counter[tuple[str, str]] = Counter()  # (vhost, exchange) -> waiting
        self._seq = 0
        # told of a new earliest due time (the server arms its timer)
        self.wakeup: Callable[[int], None] | None = None
        # when a list: how late (ms) each delivered message left the schedule
        self.lateness: list[int] | None = None
        self._recover()

    def _recover(self) -> None:
        # the far buckets, then the near: the same records, counted the same way
        for store, pending in ((self._far, self._far_pending), (self._store, self._pending)):
            for bucket, items in store.existing():
                if not items:
                    store.done(bucket)
                    continue
                pending[bucket] += len(items)
                for item in items:
                    self.counts[(item[2], item[3])] += 1
                    self._seq = max(self._seq, item[1])
        if self._pending:
            log.info("Delayed messages: %d scheduled, recovered", sum(self._pending.values()))

    # ------------------------------------------------------------ scheduling
    def schedule(self, vhost: str, exchange: str, message: Message, delay_ms: int) -> None:
        due = wall_ms() + delay_ms
        self._seq += 1
        item: Scheduled = (due, self._seq, vhost, exchange, message)
        self.counts[(vhost, exchange)] += 1
        if delay_ms > FAR_MS:
            far = due // FAR_MS
            self._far.add(far, item)
            self._far_pending[far] += 1
            if self.wakeup is not None:
                self.wakeup(far * FAR_MS - FAR_MS)
            return
        self._place(item)

    def _place(self, item: Scheduled) -> None:
        due = item[0]
        bucket = due // BUCKET_MS
        loaded = bucket <= self._loaded_upto
        if not loaded or isinstance(self._store, _DiskBuckets):
            self._store.add(bucket, item)  # on disk at once, loaded or not
        if loaded:
            self._push(bucket, item)
        else:
            self._pending[bucket] += 1
        if self.wakeup is not None:
            self.wakeup(due if loaded else bucket * BUCKET_MS - HORIZON_MS)

    def _push(self, bucket: int, item: Scheduled) -> None:
        due, seq, vhost, exchange, message = item
        m = message
        heapq.heappush(
            self._heap,
            (due, seq, bucket, vhost, exchange, m.exchange, m.routing_key,
             m.exchange_and_key, m.properties, m.body),
        )  # fmt: skip
        self._loaded[bucket] = self._loaded.get(bucket, 0) + 1

    def count(self, vhost: str, exchange: str) -> int:
        return self.counts.get((vhost, exchange), 0)

    def forget_exchange(self, vhost: str, exchange: str) -> None:
        """The exchange is gone: what it scheduled is no longer counted (and is dropped
        when due, unless an exchange of that name exists again)."""
        self.counts.pop((vhost, exchange), None)

    def next_due(self) -> int | None:
        """When something is next to happen: a due message, or a bucket to load."""
        candidates = []
        if self._heap:
            candidates.append(self._heap[0][0])
        if self._pending:
            candidates.append(min(self._pending) * BUCKET_MS - HORIZON_MS)
        if self._far_pending:
            candidates.append(min(self._far_pending) * FAR_MS - FAR_MS)
        return min(candidates) if candidates else None

    # ------------------------------------------------------------ delivering
    def tick(self) -> int:
        """Load the buckets coming due, deliver what is due; how many were delivered."""
        now = wall_ms()
        if self._far_pending:
            self._bring_near(now)
        self._load_upto((now + HORIZON_MS) // BUCKET_MS, now)
        delivered = 0
        heap = self._heap
        lateness = self.lateness
        while heap and heap[0][0] <= now:
            due, seq, bucket, vhost, exchange, mx, mk, eak, props, body = heapq.heappop(heap)
            self._deliver(vhost, exchange, Message(mx, mk, eak, props, body))
            if lateness is not None:
                lateness.append(wall_ms() - due)
            delivered += 1
            self._fired.setdefault(bucket, []).append(seq)
        for bucket, seqs in self._fired.items():
            left = self._loaded[bucket] - len(seqs)
            if left or bucket in self._pending:
                self._loaded[bucket] = left
                self._store.delivered(bucket, seqs)
            else:
                del self._loaded[bucket]
                self._store.done(bucket)
        self._fired.clear()
        return delivered

    def _bring_near(self, now: int) -> None:
        """Minute buckets that came within a minute move to the fine buckets (written
        there before their own file goes)."""
        near = [b for b in self._far_pending if b * FAR_MS - FAR_MS <= now]
        if not near:
            return
        for far in sorted(near):
            del self._far_pending[far]
            for item in self._far.take(far):
                self._place(item)
        self._store.flush()
        for far in near:
            self._far.done(far)

    def _load_upto(self, upto: int, now: int) -> None:
        """Bring the buckets up to ``upto`` into memory: those due within a bucket's
        width at once, the others one per call, so that reading a bucket never holds up
        the loop for long."""
        if upto <= self._loaded_upto:
            return
        urgent = (now + BUCKET_MS) // BUCKET_MS
        waiting = sorted(b for b in self._pending if b <= upto)
        spare = 1
        for bucket in waiting:
            if bucket > urgent:
                if not spare:
                    break
                spare -= 1
            del self._pending[bucket]
            items = self._store.take(bucket)
            if not items:
                self._store.done(bucket)
                continue
            for item in items:
                self._push(bucket, item)
        left = [b for b in self._pending if b <= upto]
        self._loaded_upto = min(left) - 1 if left else upto

    def _deliver(self, vhost_name: str, exchange: str, message: Message) -> None:
        key = (vhost_name, exchange)
        n = self.counts.get(key, 0)
        if n > 1:
            self.counts[key] = n - 1
        elif n:
            del self.counts[key]
        vhost = self._resolve(vhost_name)
        if vhost is None:
            return
        x = vhost.exchanges.get(exchange)
        if x is None or not getattr(x, "delays", False):
            return  # its exchange is gone: as the plugin, the message is dropped
        try:
            x.releasing = True  # it leaves the schedule: routed as it is
            try:
                vhost.publish_internal(exchange, message)
            finally:
                x.releasing = False
        except Exception:
            log.exception("delayed message to exchange '%s' in vhost '%s'", exchange, vhost_name)

    # ------------------------------------------------------------ the disk
    def flush(self) -> None:
        """What was scheduled goes to the operating system (before confirms go out)."""
        self._store.flush()
        self._far.flush()

    def sync(self) -> None:
        """And to the disk (fsync)."""
        self._store.sync()
        self._far.sync()

    def dirty_paths(self) -> list[Path]:
        """What to fsync to make the schedule durable, for a thread to do."""
        return [*self._store.dirty_paths(), *self._far.dirty_paths()]

    def close(self) -> None:
        self._store.close()
        self._far.close()


def fsync_paths(paths: list[Path]) -> None:
    """fsync each file (gone ones skipped): run in a thread, not on the event loop."""
    for path in paths:
        with contextlib.suppress(FileNotFoundError):
            fsync_path(path)


_KEY = b"\x07x-delay"
_LONE_DELAY = 13  # a headers table holding only x-delay as a signed 32-bit integer
_I32 = struct.Struct(">i")


def delay_of(message: Message) -> int | None:
    """The message's ``x-delay`` in ms when it is to wait (1..2^32-1), else None:
    rabbit_delayed_message_utils:get_delay, integers of any type, strings of digits and
    floats (truncated)."""
    props = message.properties
    if not props or not props[0] & 0x20 or _KEY not in props:
        return None
    fields = table.headers(props)
    raw = table.lookup(fields, "x-delay") if fields else None
    if raw is None:
        return None
    delay: Any = table.long_value(raw)
    if delay is None:
        tag = raw[:1]
        if tag == b"S":
            text = table.text(raw) or ""
            delay = int(text) if text.strip().lstrip("-").isdigit() else None
        elif tag in (b"d", b"f", b"D"):
            with contextlib.suppress(Exception):
                delay = int(decode_field(raw))
    if isinstance(delay, int) and 0 < delay <= MAX_DELAY:
        return delay
    return None


def prepare(message: Message) -> tuple[int, Message] | None:
    """When ``message`` is to wait: its delay, and the message as it will leave the
    schedule (``x-delay`` made negative, as rabbit_delayed_message_utils:swap_delay_header
    does, which also sorts the headers). None: it is routed now."""
    props = message.properties
    if not props or not props[0] & 0x20 or _KEY not in props:
        return None
    # the usual case: no content type or encoding before the headers, and x-delay, a
    # signed 32-bit integer, their only field: negated in place
    if (
        not props[0] & 0xC0
        and len(props) >= 19
        and props[2:6] == b"\x00\x00\x00\x0d"
        and props[6:15] == _KEY + b"I"
    ):
        delay = _I32.unpack_from(props, 15)[0]
        if 0 < delay <= MAX_DELAY:
            swapped = props[:15] + _I32.pack(-delay) + props[19:]
            return delay, message.with_properties(swapped)
        return None
    delay = delay_of(message)
    if delay is None:
        return None
    fields = table.headers(props) or []
    value = b"I" + _I32.pack(-delay) if delay <= 2**31 else table.long(-delay)
    swapped = table.with_headers(props, table.store(fields, "x-delay", value))
    return delay, message.with_properties(swapped)
