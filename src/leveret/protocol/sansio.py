"""What every sans-IO connection here (AMQP 0-9-1, AMQP 1.0, the stream protocol) shares
with its owner: the marker that says no complete event is buffered yet, and the queue of
bytes to send.

No project imports and no I/O (the stream codec, which leveret.spark uses, imports it)."""

from __future__ import annotations


class NeedData:
    """No complete event (or frame) is buffered: feed more bytes."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "NEED_DATA"


NEED_DATA = NeedData()


class Output:
    """The bytes a connection's ``send_*`` methods queued, until its owner collects them
    (the connection sets ``_out`` to an empty list)."""

    _out: list[bytes]

    def data_to_send(self) -> bytes:
        """Every byte queued since the last call, at once; the queue is then empty."""
        out = self._out
        if not out:
            return b""
        data = b"".join(out)
        out.clear()
        return data

    def has_output(self) -> bool:
        return bool(self._out)
