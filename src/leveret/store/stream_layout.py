"""Streams written by Leveret before it kept osiris's layout, converted at start.

The old layout (``*.seg`` and ``*.idx``, see :mod:`leveret.store.streams`) held each
record as ``offset | timestamp | length | crc32 | exchange, routing key, AMQP 0-9-1
property bytes, body``. Each record becomes the AMQP 1.0 message RabbitMQ 3.10 stores for
it (a record published over the stream protocol was kept as it came and is taken as it
is), with its offset; each old chunk becomes one osiris chunk with its timestamp.

The new files are written beside the old ones (``converting/``), a ``DONE`` mark is made
durable, then they take the old files' place: a crash at any point leaves either the old
layout whole (converted again at the next start) or a finished conversion to move in.
Consumers' offsets and publishers' sequences (the old ``tracking.json``) go in the trailer
of the last converted chunk, where they take no offset (osiris's place for tracking
written with messages); the file itself is taken in and removed when the converted log
is opened (:class:`leveret.store.osiris.OsirisLog`), which finds them all in the chunks."""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path

from leveret.broker.message import split_exchange_and_key
from leveret.broker.queues.stream_amqp10 import to_amqp10
from leveret.durable import fsync_path
from leveret.store.osiris import OsirisLog
from leveret.store.osiris_tracking import read_tracking_json
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
    fsync_path(directory)
    for old in (*directory.glob("*.seg"), *directory.glob("*.idx")):
        old.unlink()
    shutil.rmtree(work, ignore_errors=True)


def _write(directory: Path, work: Path) -> tuple[int, int]:
    old = SegmentLog(directory)  # cuts a torn tail, as the old code did at start
    new = OsirisLog(work, start=old.first)
    messages = chunks = 0
    spans = [
        (first, end, ts)
        for seg in old.segments
        for i, (first, _pos, ts) in enumerate(seg.chunks)
        if (end := seg.chunks[i + 1][0] if i + 1 < len(seg.chunks) else seg.end) > first
    ]
    try:
        for n, (first, end, ts) in enumerate(spans, 1):
            records = old.read(first, end - first, max_bytes=1 << 62)
            for _offset, _ts, exchange_and_key, properties, body in records:
                new.append(_as_amqp10(exchange_and_key, properties, body))
            if n == len(spans):  # the tracking rides in the last chunk's trailer
                _carry_tracking(directory / "tracking.json", new)
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


def _carry_tracking(path: Path, new: OsirisLog) -> None:
    """The old ``tracking.json``, if there is one to read, as tracking of ``new``."""
    try:
        offsets, sequences = read_tracking_json(path)
    except (OSError, ValueError):
        return  # left for the converted log to take in, or to warn about
    for reference, offset in offsets.items():
        new.store_offset(reference, offset)
    for reference, sequence in sequences.items():
        new.set_writer_sequence(reference, sequence)


def _as_amqp10(exchange_and_key: bytes, properties: bytes, body: bytes) -> bytes:
    if properties == _AMQP10_PROPERTIES:
        return body
    exchange, key = split_exchange_and_key(exchange_and_key, "replace")
    return to_amqp10(exchange, key, properties, body)
