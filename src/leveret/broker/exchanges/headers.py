"""Headers exchange: match message headers against binding arguments.

``x-match`` is ``all`` (the default), ``any``, ``all-with-x`` or ``any-with-x``. Binding
arguments whose name starts with ``x-`` take part only in the ``-with-x`` variants. A
binding argument of type void matches on the header's presence alone; otherwise the header
must hold an equal value (numbers compare across types, as Erlang's ``==`` does)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from leveret.broker.arguments import text as arg_text
from leveret.broker.exchanges.base import Binding, Destination, Exchange
from leveret.protocol import errors
from leveret.protocol.spec import type_of

if TYPE_CHECKING:
    from leveret.broker.message import Message

_MODES = ("all", "any", "all-with-x", "any-with-x")


def _same(pattern: Any, value: Any) -> bool:
    """Erlang's ``==`` on the values: numbers compare numerically across integer and
    float types, a bool equals only a bool, a string only a string."""
    if isinstance(pattern, bool) or isinstance(value, bool):
        return type(pattern) is type(value) and pattern == value
    if isinstance(pattern, (int, float)) and isinstance(value, (int, float)):
        return pattern == value
    text = (str, bytes, bytearray)
    if isinstance(pattern, text) and isinstance(value, text):
        a = pattern.encode() if isinstance(pattern, str) else bytes(pattern)
        b = value.encode() if isinstance(value, str) else bytes(value)
        return a == b
    return type(pattern) is type(value) and bool(pattern == value)


def _mode(arguments: dict[str, Any]) -> str:
    return arg_text(arguments.get("x-match", "all"))


def headers_match(arguments: dict[str, Any], headers: dict[str, Any]) -> bool:
    mode = _mode(arguments)
    with_x = mode.endswith("-with-x")
    want_all = mode.startswith("all")
    matched_any = False
    for key, pattern in arguments.items():
        if key == "x-match" or (key.startswith("x-") and not with_x):
            continue
        present = key in headers
        ok = present and (pattern is None or _same(pattern, headers[key]))
        if want_all and not ok:
            return False
        if ok:
            matched_any = True
            if not want_all:
                return True
    return want_all or matched_any


class HeadersExchange(Exchange):
    type_name = "headers"

    def __post_init__(self) -> None:
        super().__post_init__()
        self._bindings: list[Binding] = []

    def validate_binding(self, binding: Binding) -> None:
        if "x-match" in binding.arguments:
            raw = binding.arguments["x-match"]
            mode = arg_text(raw) if isinstance(raw, (str, bytes, bytearray)) else raw
            if not isinstance(mode, str):
                wire = type_of(binding.arguments, "x-match") or "long"
                raise errors.precondition_failed(
                    f"Invalid x-match field type {wire} (value {mode}); expected longstr"
                )
            if mode not in _MODES:
                raise errors.precondition_failed(
                    f'Invalid x-match field value <<"{mode}">>; '
                    "expected all, any, all-with-x, or any-with-x"
                )

    def _index_add(self, binding: Binding) -> None:
        self._bindings.append(binding)

    def _index_remove(self, binding: Binding) -> None:
        self._bindings.remove(binding)

    def route(self, message: Message) -> list[Destination]:
        if not self._bindings:
            return []
        headers = message.headers
        out: dict[Destination, None] = {}
        for b in self._bindings:
            if b.destination not in out and headers_match(b.arguments, headers):
                out[b.destination] = None
        return list(out)
