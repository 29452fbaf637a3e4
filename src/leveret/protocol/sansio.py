"""What every sans-IO connection here (AMQP 0-9-1, AMQP 1.0, the stream protocol) shares
with its owner: the marker that says no complete event is buffered yet, the buffer of
bytes read and the queue of bytes to send; the state machine of the two AMQP connections.

No project imports and no I/O (the stream codec, which leveret.spark uses, imports it)."""

from __future__ import annotations

from collections.abc import Mapping
from enum import Enum
from typing import Generic, TypeVar

_S = TypeVar("_S", bound=Enum)
_T = TypeVar("_T", bound=Enum)


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


class Input:
    """The bytes read from the peer and not yet parsed: ``_in[_pos:]`` (the connection
    sets ``_in`` to ``b""`` and ``_pos`` to 0). Immutable bytes: a slice of them is what
    an event carries, with no second copy."""

    _in: bytes
    _pos: int

    def _buffer(self, data: bytes) -> None:
        """Add bytes read; the parsed head goes now, so the unparsed tail (less than a
        frame, as a rule) is copied once per read."""
        if self._pos:
            self._in = self._in[self._pos :] + data
            self._pos = 0
        else:
            self._in += data


class LocalProtocolError(Exception):
    """The owner asked the connection to send something its state does not allow."""


class Machine(Input, Generic[_S, _T]):
    """A connection's state, moved by its table (the class sets ``TRANSITIONS``,
    ``CLOSED`` and ``DROP``): ``TRANSITIONS[state][trigger]`` is the next state, and a
    trigger the table lacks there is the owner's mistake. Once ``CLOSED``, the unread
    bytes are let go."""

    TRANSITIONS: Mapping[_S, Mapping[_T, _S]]
    CLOSED: _S
    DROP: _T  # ends the conversation without a word
    _state: _S

    @property
    def state(self) -> _S:
        return self._state

    def _move(self, trigger: _T) -> None:
        nxt = self.TRANSITIONS[self._state].get(trigger)
        if nxt is None:
            raise LocalProtocolError(f"{trigger.name} in state {self._state.name}")
        self._state = nxt
        if nxt is self.CLOSED:
            self._in = b""
            self._pos = 0

    def drop(self) -> None:
        """End without another word (RabbitMQ's answer to some handshake errors and to
        bytes that cannot be framed)."""
        self._move(self.DROP)
