"""RabbitMQ 3.10.8's error texts, one constructor per situation, so every part of the
broker words the same failure the same way."""

from __future__ import annotations

from typing import Any

from leveret.protocol import errors as e
from leveret.protocol.errors import AMQPError


def _r(kind: str, name: str, vhost: str) -> str:
    return f"{kind} '{name}' in vhost '{vhost}'"


def no_exchange(name: str, vhost: str) -> AMQPError:
    return e.not_found(f"no {_r('exchange', name, vhost)}")


def no_queue(name: str, vhost: str) -> AMQPError:
    return e.not_found(f"no {_r('queue', name, vhost)}")


def type_name(value: Any) -> str:
    """The AMQP field-table type RabbitMQ names in its inequivalence messages."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        # pamqp folds the wire's integer types into int; clients send 32-bit values as
        # 'I' (signedint) and wider ones as 'l' (long), which is what RabbitMQ names.
        return "signedint" if -(2**31) <= value < 2**31 else "long"
    if isinstance(value, float):
        return "double"
    if isinstance(value, (str, bytes, bytearray)):
        return "longstr"
    if isinstance(value, dict):
        return "table"
    if isinstance(value, list):
        return "array"
    if value is None:
        return "void"
    return "longstr"


def _show(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).decode("utf-8", "replace")
    return str(value)


def inequivalent_flag(
    kind: str, name: str, vhost: str, arg: str, received: Any, current: Any
) -> AMQPError:
    return e.precondition_failed(
        f"inequivalent arg '{arg}' for {_r(kind, name, vhost)}: "
        f"received '{_show(received)}' but current is '{_show(current)}'"
    )


def inequivalent_arg(
    kind: str,
    name: str,
    vhost: str,
    arg: str,
    received: Any,
    current: Any,
    received_type: str | None = None,
    current_type: str | None = None,
) -> AMQPError:
    """RabbitMQ quotes bare values when both sides have one, and names the wire type of
    the one that is there when the other is missing."""
    if received is not None and current is not None:
        return e.precondition_failed(
            f"inequivalent arg '{arg}' for {_r(kind, name, vhost)}: "
            f"received '{_show(received)}' but current is '{_show(current)}'"
        )

    def side(v: Any, wire: str | None) -> str:
        if v is None:
            return "none"
        return f"the value '{_show(v)}' of type '{wire or type_name(v)}'"

    return e.precondition_failed(
        f"inequivalent arg '{arg}' for {_r(kind, name, vhost)}: "
        f"received {side(received, received_type)} but current is "
        f"{side(current, current_type)}"
    )


def reserved_name(kind: str, name: str) -> AMQPError:
    return e.access_refused(f"{kind} name '{name}' contains reserved prefix 'amq.*'")


def exclusive_locked(name: str, vhost: str) -> AMQPError:
    return e.resource_locked(
        f"cannot obtain exclusive access to locked {_r('queue', name, vhost)}. It could be "
        "originally declared on another connection or the exclusive property value does "
        "not match that of the original declaration."
    )


def access_refused(
    kind: str, name: str, vhost: str, user: str, permission: str | None = None
) -> AMQPError:
    """A resource refused; from 3.13 (RabbitMQ 4.2 mode here) the text names the
    ``permission`` (v4.2.9 rabbit_access_control.erl:343: "~s access to ~ts refused")."""
    what = f"{permission} access" if permission is not None else "access"
    return e.access_refused(f"{what} to {_r(kind, name, vhost)} refused for user '{user}'")
