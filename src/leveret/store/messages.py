"""Persistent messages of durable queues in an append-only log.

Each record is ``kind (1 byte) | length (4) | payload``. ``A`` adds a message to a queue,
``R`` removes one, ``D`` drops a whole queue. On start the log is replayed (a torn record
at the tail, left by a crash mid-write, is ignored), and rewritten with the survivors only.
Writes are buffered and made durable by :meth:`sync`, which the server calls once per
batch of input before it sends publisher confirms."""

from __future__ import annotations

import os
import struct
from pathlib import Path
from typing import BinaryIO

_rec = struct.Struct(">cI")
_id = struct.Struct(">Q")
_len = struct.Struct(">I")

Record = tuple[str, str, int, str, str, bytes, bytes]


def _sstr(s: str) -> bytes:
    raw = s.encode()
    return _len.pack(len(raw)) + raw


def _add_record(
    vhost: str,
    queue: str,
    message_id: int,
    exchange: str,
    routing_key: str,
    properties: bytes,
    body: bytes,
) -> bytes:
    payload = b"".join(
        (
            _id.pack(message_id),
            _sstr(vhost),
            _sstr(queue),
            _sstr(exchange),
            _sstr(routing_key),
            _len.pack(len(properties)),
            properties,
            _len.pack(len(body)),
            body,
        )
    )
    return _rec.pack(b"A", len(payload)) + payload


def _read_str(buf: bytes, pos: int) -> tuple[bytes, int]:
    (n,) = _len.unpack_from(buf, pos)
    pos += 4
    return buf[pos : pos + n], pos + n


class FileMessageStore:
    def __init__(self, directory: Path) -> None:
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.path = self.dir / "messages.log"
        self._pending: list[bytes] = []
        self._file: BinaryIO | None = None
        self.next_id = 1

    def _open(self) -> None:
        if self._file is None:
            self._file = open(self.path, "ab")  # noqa: SIM115 - kept open for appends

    def add(
        self,
        vhost: str,
        queue: str,
        message_id: int,
        exchange: str,
        routing_key: str,
        properties: bytes,
        body: bytes,
    ) -> None:
        self._pending.append(
            _add_record(vhost, queue, message_id, exchange, routing_key, properties, body)
        )

    def remove(self, vhost: str, queue: str, message_id: int) -> None:
        payload = _id.pack(message_id) + _sstr(vhost) + _sstr(queue)
        self._pending.append(_rec.pack(b"R", len(payload)) + payload)

    def drop_queue(self, vhost: str, queue: str) -> None:
        payload = _sstr(vhost) + _sstr(queue)
        self._pending.append(_rec.pack(b"D", len(payload)) + payload)

    def sync(self) -> None:
        if not self._pending:
            return
        self._open()
        assert self._file is not None
        self._file.write(b"".join(self._pending))
        self._pending.clear()
        self._file.flush()
        os.fsync(self._file.fileno())

    def load(self) -> list[Record]:
        """Replay the log, compact it, and return the surviving messages in order."""
        live: dict[tuple[str, str, int], Record] = {}
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            data = b""
        pos = 0
        while pos + 5 <= len(data):
            kind, length = _rec.unpack_from(data, pos)
            start = pos + 5
            if start + length > len(data):
                break  # torn tail
            p = data[start : start + length]
            pos = start + length
            if kind == b"A":
                (mid,) = _id.unpack_from(p, 0)
                q = 8
                vhost, q = _read_str(p, q)
                queue, q = _read_str(p, q)
                exchange, q = _read_str(p, q)
                rk, q = _read_str(p, q)
                props, q = _read_str(p, q)
                body, q = _read_str(p, q)
                live[(vhost.decode(), queue.decode(), mid)] = (
                    vhost.decode(),
                    queue.decode(),
                    mid,
                    exchange.decode(),
                    rk.decode(),
                    bytes(props),
                    bytes(body),
                )
                self.next_id = max(self.next_id, mid + 1)
            elif kind == b"R":
                (mid,) = _id.unpack_from(p, 0)
                vhost, q = _read_str(p, 8)
                queue, q = _read_str(p, q)
                live.pop((vhost.decode(), queue.decode(), mid), None)
            elif kind == b"D":
                vhost, q = _read_str(p, 0)
                queue, q = _read_str(p, q)
                v, n = vhost.decode(), queue.decode()
                for key in [k for k in live if k[0] == v and k[1] == n]:
                    del live[key]
            else:
                break
        records = sorted(live.values(), key=lambda r: r[2])
        self._rewrite(records)
        return records

    def _rewrite(self, records: list[Record]) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
        tmp = self.path.with_suffix(".tmp")
        with open(tmp, "wb") as f:
            for record in records:
                f.write(_add_record(*record))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)

    def close(self) -> None:
        self.sync()
        if self._file is not None:
            self._file.close()
            self._file = None
