"""A reason as RabbitMQ's management API words a failed call it formats with ``~p``.

``rabbit_stream_super_stream_mgmt`` answers a failed create with
``bad_request(io_lib:format("~p", [Reason]))``: the reason is a deep character list, not a
flat string, so ``rabbit_web_dispatch_access_control:format_reason`` (v4.2.9) prints *that
list* with ``~tp``. A client sees the list's own text, e.g. for
``{reference_already_exists, "there is already an exchange named s"}``::

    [[123,["reference_already_exists",44,"\\"there is already an exchange named s\\""],125]]

broken over lines as ``io_lib_pretty`` lays out a term wider than 80 columns. This module
builds the deep list ``io_lib:format("~p", ...)`` makes of the terms RabbitMQ's stream
manager answers (an atom, ``{Atom, String}``, ``{Atom, {String}}``) and lays it out. The
shapes are those of Erlang/OTP 25's ``io_lib`` (checked against ``erl`` in the tests);
characters outside ASCII are not modelled."""

from __future__ import annotations

from dataclasses import dataclass

# a deep list: characters run together as a string, integers, and lists of them
Deep = str | int | list["Deep"]

LINE_LENGTH = 80  # io_lib_pretty's default line length

_ESCAPES = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t"}


@dataclass(frozen=True, slots=True)
class Atom:
    """An Erlang atom (written bare)."""

    name: str


Term = Atom | str | tuple["Term", ...]


def _quoted(text: str) -> str:
    return '"' + "".join(_ESCAPES.get(c, c) for c in text) + '"'


def _written(term: Term) -> Deep:
    """What ``io_lib:format("~p", ...)`` makes of a term that fits on a line."""
    if isinstance(term, Atom):
        return term.name
    if isinstance(term, str):
        return _quoted(term)
    parts: list[Deep] = []
    for k, item in enumerate(term):
        if k:
            parts.append(44)  # ","
        parts.append(_written(item))
    return [123, parts, 125]  # "{", the elements, "}"


def deep_format(term: Term) -> list[Deep]:
    """``io_lib:format("~p", [Term])``'s deep list (the term printed on one line)."""
    return [_written(term)]


def _flat(d: Deep) -> str:
    if isinstance(d, int):
        return str(d)
    if isinstance(d, str):
        return _quoted(d)
    return "[" + ",".join(_flat(x) for x in d) + "]"


def _element(d: Deep, col: int, closers: int) -> tuple[str, int]:
    """io_lib_pretty's pp_element: a leaf that fits is written, with its width; anything
    else is laid out and counts as the whole line (what follows it starts a new one)."""
    flat = _flat(d)
    if not isinstance(d, list) and len(flat) < LINE_LENGTH - col - closers:
        return flat, len(flat)
    return _pp(d, col, closers), LINE_LENGTH


def _pp(d: Deep, col: int, closers: int) -> str:
    """``d`` laid out from column ``col`` with ``closers`` brackets after it: on one line
    when it fits; else a list's first element after its ``[``, then each leaf on the same
    line while it fits, and each list (and each leaf that does not fit) on a line of its
    own, indented under the first."""
    flat = _flat(d)
    if not isinstance(d, list) or len(flat) < LINE_LENGTH - col - closers:
        return flat
    start = col + 1
    indent = " " * start
    last = len(d) - 1
    # what follows an element on its line: a comma, or after the last the closers
    text, width = _element(d[0], start, closers + 1 if last == 0 else 1)
    out = ["[", text]
    at = start + width
    for k, item in enumerate(d[1:], 1):
        trail = closers + 1 if k == last else 1
        size = len(_flat(item)) + 1  # with the comma before it
        if not isinstance(item, list) and size + trail < LINE_LENGTH - at:
            out.append("," + _flat(item))
            at += size
        else:
            text, width = _element(item, start, trail)
            out.append(",\n" + indent + text)
            at = start + width
    out.append("]")
    return "".join(out)


def reason_text(term: Term) -> str:
    """The ``reason`` of the management API's answer for a failure ``term``."""
    # the printed term counts one closer more than it shows (a term of 79 characters is
    # broken, one of 76 is not: checked against erl)
    return _pp(deep_format(term), 0, 1)
