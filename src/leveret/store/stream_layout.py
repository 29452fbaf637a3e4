"""Streams written by Leveret before it kept osiris's layout, converted at start.

The old layout (``*.seg`` and ``*.idx``, see :mod:`leveret.store.streams`) held each
record as ``offset | timestamp | length | crc32 | exchange, routing key, AMQP 0-9-1
property bytes, body``. Each record becomes the AMQP 1.0 message RabbitMQ 3.10 stores for
it (a record published over the stream protocol was kept as it came and is taken as it
is), with its offset; each old chunk becomes one osiris chunk with its timestamp.

The new files are written beside the old ones (``converting/``), a ``DONE`` mark is made
durable, then they take the old files' place: a crash at any point leaves either the old
layout whole (converted again at the next start) or a finished conversion to move in.
Consumers' offsets and publishers' sequences (``tracking.json``) are kept as they are."""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path

from leveret.broker.queues.stream_amqp10 import to_amqp10
from leveret.store.osiris import OsirisLog
from leveret.store.streams import SegmentLog

log = logging.getLogger(__name__)

_AMQP10_PROPERTIES = b"\xff\xff"  # how the old layout marked a stream-protocol message


def convert(directory: Path, label: str) -> None:
    """Convert the old-layout stream in ``directory`` (``label`` names it in the log)."""
    work = directory / "converting"
    done = work / "DONE"
    if not done.exists():
        shutil.rmtree(work, ignore_errors=True)
        for stray in (*directory.glob("*.segment"), *directory.glob("*.index")):
            stray.unlink()
        messages, chunks = _write(directory, work)
        with open(done, "wb") as f:
            f.write(f"{messages} {chunks}\n".encode())
            f.flush()
            os.fsync(f.fileno())
        log.warning(
            "%s: converted %d messages in %d chunks from the old on-disk layout to osiris's",
            label,
            messages,
            chunks,
        )
    for path in (*work.glob("*.segment"), *work.glob("*.index")):
        os.replace(path, directory / path.name)
    _fsync_dir(directory)
    for old in (*directory.glob("*.seg"), *directory.glob("*.idx")):
        old.unlink()
    shutil.rmtree(work, ignore_errors=True)


def _write(directory: Path, work: Path) -> tuple[int, int]:
    old = SegmentLog(directory)  # cuts a torn tail, as the old code did at start
    new = OsirisLog(work, start=old.first)
    messages = chunks = 0
    try:
        for seg in old.segments:
            for i, (first, _pos, ts) in enumerate(seg.chunks):
                end = seg.chunks[i + 1][0] if i + 1 < len(seg.chunks) else seg.end
                if end <= first:
                    continue
                records = old.read(first, end - first, max_bytes=1 << 62)
                for _offset, _ts, exchange_and_key, properties, body in records:
                    new.append(_as_amqp10(exchange_and_key, properties, body))
                new.sync(ts_ms=ts)
                messages += len(records)
                chunks += 1
        if new.committed != old.committed:
            raise ValueError(
                f"converted up to offset {new.committed}, the old log ends at {old.committed}"
            )
    finally:
        new.close()
        for s in old.segments:
            s.close()
    return messages, chunks


def _as_amqp10(exchange_and_key: bytes, properties: bytes, body: bytes) -> bytes:
    if properties == _AMQP10_PROPERTIES:
        return body
    elen = exchange_and_key[0]
    exchange = exchange_and_key[1 : 1 + elen].decode("utf-8", "replace")
    key = exchange_and_key[2 + elen :].decode("utf-8", "replace")
    return to_amqp10(exchange, key, properties, body)


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
