"""What every sans-IO connection here (AMQP 0-9-1, AMQP 1.0, the stream protocol) shares
with its owner: the marker that says no complete event is buffered yet.

No project imports and no I/O (the stream codec, which leveret.spark uses, imports it)."""

from __future__ import annotations


class NeedData:
    """No complete event (or frame) is buffered: feed more bytes."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "NEED_DATA"


NEED_DATA = NeedData()
