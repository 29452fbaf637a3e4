"""How RabbitMQ words what it saw on the wire: Erlang's printing of binaries and its
descriptions of bad frames, which clients receive in reply texts."""

from __future__ import annotations

_ERL_ESCAPES = {
    34: '\\"',
    92: "\\\\",
    10: "\\n",
    13: "\\r",
    9: "\\t",
    11: "\\v",
    8: "\\b",
    12: "\\f",
    27: "\\e",
}


def erlang_binary(data: bytes) -> str:
    """A binary as Erlang's ``~p`` prints it: ``<<"text">>`` when every byte is
    printable Latin-1, ``<<0,60,0,10>>`` otherwise."""
    if data and all(32 <= b <= 126 or 160 <= b <= 255 or b in _ERL_ESCAPES for b in data):
        text = "".join(_ERL_ESCAPES.get(b, chr(b)) for b in data)
        return f'<<"{text}">>'
    return "<<" + ",".join(str(b) for b in data) + ">>"


def frame_text(frame_type: int, payload: bytes, reason: str | None = None) -> str:
    """RabbitMQ's description of a bad frame."""
    which = "all" if len(payload) <= 16 else "first 16"
    text = f"type {frame_type}, {which} octets = {erlang_binary(payload[:16])}"
    return f"{text}: {reason}" if reason is not None else text
