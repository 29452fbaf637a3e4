"""The fields of a block of deliveries (:class:`~leveret.spark.wire.Deliveries`), taken
out column by column with numpy: one pass per field for the whole block, not a Python loop
per message.

A delivery is ``basic.deliver`` (consumer tag, delivery tag, redelivered, exchange, routing
key), a content header (class, weight, body size, property flags, the properties present
in flag order) and the body. :class:`Fields` computes every field's position for all
deliveries at once; strings become Arrow arrays through one gather of their bytes.

The stream offset is the ``x-stream-offset`` entry of the headers table. Both brokers put
it first when it is the only header (the usual case: the log system sends none), RabbitMQ
sorts it among others and Leveret appends it; a table whose first entry is not it is
decoded with pamqp, one message at a time.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
from pamqp import decode

from leveret.protocol.frames import BASIC_PROPERTIES
from leveret.spark.wire import Deliveries, Positions, be16, be32, be64

U8 = npt.NDArray[np.uint8]
Mask = npt.NDArray[np.bool_]

#: The first entry of a headers table when it is the stream offset: key and type ``l``.
OFFSET_ENTRY = np.frombuffer(b"\x0fx-stream-offsetl", np.uint8)
NO_OFFSET = -1

# basic's properties as the columns name them (pamqp's message_type is "type"): flag,
# name, type
PROPERTIES = tuple(
    (flag, "type" if name == "message_type" else name, kind)
    for flag, name, kind in BASIC_PROPERTIES
)


def gather(a: U8, start: Positions, length: Positions, extra: int = 0) -> tuple[U8, Positions]:
    """The byte ranges ``a[start:start+length+extra]`` back to back, and their offsets
    (n+1, the last the total), in one fancy-indexing pass."""
    n = len(start)
    offsets = np.zeros(n + 1, np.int64)
    np.cumsum(length + extra, out=offsets[1:])
    total = int(offsets[-1])
    if total == 0:
        return np.zeros(0, np.uint8), offsets
    idx = np.repeat(start - offsets[:-1], length + extra) + np.arange(total, dtype=np.int64)
    return a[idx], offsets


def _bitmap(valid: Mask | None) -> pa.Buffer | None:
    if valid is None or bool(valid.all()):
        return None
    return pa.py_buffer(np.packbits(valid, bitorder="little"))


def string_array(data: U8, offsets: Positions, valid: Mask | None = None) -> pa.Array:
    """A UTF-8 string array over gathered bytes; a value that is not UTF-8 is decoded with
    replacement characters (as pika decodes short strings)."""
    n = len(offsets) - 1
    nulls = 0 if valid is None else int(n - valid.sum())
    arr = pa.StringArray.from_buffers(
        n,
        pa.py_buffer(offsets.astype(np.int32)),
        pa.py_buffer(data),
        _bitmap(valid),
        nulls,
    )
    try:
        arr.validate(full=True)
        return arr
    except pa.ArrowInvalid:
        raw = bytes(data)
        values = [
            raw[int(offsets[i]) : int(offsets[i + 1])].decode("utf-8", "replace")
            if valid is None or valid[i]
            else None
            for i in range(n)
        ]
        return pa.array(values, pa.string())


def binary_array(data: U8, offsets: Positions) -> pa.Array:
    return pa.Array.from_buffers(
        pa.binary(),
        len(offsets) - 1,
        [None, pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(data)],
    )


class Fields:
    """Where every field of every delivery of a block is (positions into ``a``)."""

    def __init__(self, block: Deliveries) -> None:
        self.block = block
        a = self.a = np.frombuffer(block.data, np.uint8)
        self.n = n = len(block)
        s = block.starts
        # basic.deliver: frame head (7), class and method (4), consumer tag, delivery tag
        # (8), redelivered (1), exchange, routing key
        m = s + 11
        tag = m + 1 + a[m].astype(np.int64)
        self.redelivered: Mask = (a[tag + 8] & 1).astype(np.bool_)
        self.exchange = tag + 10
        self.exchange_len = a[tag + 9].astype(np.int64)
        rk = self.exchange + self.exchange_len
        self.routing_key = rk + 1
        self.routing_key_len = a[rk].astype(np.int64)
        # content header: frame head, class, weight, body size, flags, properties
        h = s + 8 + be32(a, s + 3)
        self.body_size = be64(a, h + 11)
        flags = be16(a, h + 19)
        p = h + 21
        self.present: dict[str, Mask] = {}
        self.start: dict[str, Positions] = {}
        self.length: dict[str, Positions] = {}
        last = len(a) - 1
        for flag, name, kind in PROPERTIES:
            there = (flags & flag) != 0
            self.present[name] = there
            if not there.any():
                self.start[name] = p
                self.length[name] = np.zeros(n, np.int64)
                continue
            q = np.minimum(p, last)
            if kind == "shortstr":
                size = np.where(there, a[q], 0).astype(np.int64)
                self.start[name], self.length[name] = p + 1, size
                p = p + np.where(there, 1 + size, 0)
            elif kind == "table":
                size = np.where(there, be32(a, np.minimum(p, last - 3)), 0)
                self.start[name], self.length[name] = p + 4, size
                p = p + np.where(there, 4 + size, 0)
            elif kind == "octet":
                self.start[name], self.length[name] = p, there.astype(np.int64)
                p = p + there
            else:
                self.start[name], self.length[name] = p, np.where(there, 8, 0)
                p = p + np.where(there, 8, 0)
        self.offset_only: Mask = np.zeros(n, np.bool_)  # set by offsets()
        # the bodies: in ``block.bodies``, each followed by a newline
        self.body_offsets = np.zeros(n + 1, np.int64)
        np.cumsum(self.body_size + 1, out=self.body_offsets[1:])

    # ------------------------------------------------------------------ fields

    def offsets(self) -> Positions:
        """Each delivery's ``x-stream-offset`` (NO_OFFSET where it has none)."""
        a = self.a
        start, size = self.start["headers"], self.length["headers"]
        out = np.full(self.n, NO_OFFSET, np.int64)
        candidates = size >= 25
        if candidates.any():
            idx = np.minimum(start[:, None] + np.arange(len(OFFSET_ENTRY)), len(a) - 1)
            first = candidates & (a[idx] == OFFSET_ENTRY).all(axis=1)
            if first.any():
                out[first] = be64(a, start[first] + len(OFFSET_ENTRY))
        else:
            first = candidates
        # the table is that one entry and nothing else
        self.offset_only = first & (size == 25)
        for i in np.flatnonzero(self.present["headers"] & ~first):
            table = self._table(int(i))
            value = table.get("x-stream-offset")
            if isinstance(value, int) and not isinstance(value, bool):
                out[i] = value
        return out

    def _table(self, i: int) -> dict[str, Any]:
        start, size = int(self.start["headers"][i]), int(self.length["headers"][i])
        table: dict[str, Any] = decode.field_table(self.block.data[start - 4 : start + size])[1]
        return table

    def headers(self, i: int) -> dict[str, Any]:
        """The headers table of delivery ``i`` (empty if it has none)."""
        return self._table(i) if self.present["headers"][i] else {}

    def strings(self, start: Positions, length: Positions, valid: Mask | None = None) -> pa.Array:
        data, offsets = gather(self.a, start, length)
        return string_array(data, offsets, valid)

    def prop_string(self, name: str, rows: Positions | None = None) -> pa.Array:
        there, start, size = self.present[name], self.start[name], self.length[name]
        if rows is not None:
            there, start, size = there[rows], start[rows], size[rows]
        return self.strings(start, size, there)

    def prop_octet(self, name: str) -> tuple[Positions, Mask]:
        there = self.present[name]
        return np.where(there, self.a[np.minimum(self.start[name], len(self.a) - 1)], 0), there

    def timestamp(self) -> tuple[Positions, Mask]:
        """The timestamp property (seconds since the epoch) and where it is present."""
        there = self.present["timestamp"]
        if not there.any():
            return np.zeros(self.n, np.int64), there
        pos = np.minimum(self.start["timestamp"], len(self.a) - 8)
        return np.where(there, be64(self.a, pos), 0), there

    def bodies(self) -> tuple[U8, Positions]:
        """Every body, each followed by a newline, and where each starts (n+1 offsets)."""
        return np.frombuffer(self.block.bodies, np.uint8), self.body_offsets

    def body_array(self, rows: Positions | None = None) -> pa.Array:
        """The bodies (of ``rows``) as a binary array."""
        data, offsets = self.bodies()
        if rows is None:
            rows = np.arange(self.n, dtype=np.int64)
        picked, picked_offsets = gather(data, offsets[:-1][rows], self.body_size[rows])
        return binary_array(picked, picked_offsets)

    def routing_keys(self, rows: Positions | None = None) -> pa.Array:
        start, size = self.routing_key, self.routing_key_len
        if rows is not None:
            start, size = start[rows], size[rows]
        return self.strings(start, size)

    def exchanges(self, rows: Positions | None = None) -> pa.Array:
        start, size = self.exchange, self.exchange_len
        if rows is not None:
            start, size = start[rows], size[rows]
        return self.strings(start, size)
