"""Validation of queue and exchange arguments, with RabbitMQ's reasons."""

from __future__ import annotations

from typing import Any

from leveret.broker.errors import _show, type_name
from leveret.protocol import errors
from leveret.protocol.errors import AMQPError
from leveret.protocol.spec import type_of

# The queue arguments whose values must match on redeclaration (rabbit_amqqueue).
QUEUE_EQUIVALENCE_KEYS = (
    "x-expires",
    "x-message-ttl",
    "x-dead-letter-exchange",
    "x-dead-letter-routing-key",
    "x-max-length",
    "x-max-length-bytes",
    "x-max-priority",
    "x-overflow",
    "x-queue-mode",
    "x-queue-version",
    "x-single-active-consumer",
    "x-queue-type",
    "x-queue-master-locator",
)
EXCHANGE_EQUIVALENCE_KEYS = ("alternate-exchange",)


# Arguments RabbitMQ knows for other queue types only: refused on a classic queue.
OTHER_QUEUE_TYPE_ARGS = (
    "x-max-age",
    "x-stream-max-segment-size-bytes",
    "x-initial-cluster-size",
    "x-quorum-initial-group-size",
    "x-delivery-limit",
    "x-dead-letter-strategy",
    "x-max-in-memory-length",
    "x-max-in-memory-bytes",
    "x-queue-leader-locator",
)
_INTEGER_ARGS = (
    "x-expires",
    "x-message-ttl",
    "x-max-length",
    "x-max-length-bytes",
    "x-max-priority",
)
_MAX_TTL = 315360000000  # ten years in milliseconds, RabbitMQ's bound


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_str(v: Any) -> bool:
    """A long string ('S'; bytes when it is not UTF-8). RabbitMQ refuses a byte array
    ('x', a bytearray) wherever it wants a string."""
    return isinstance(v, (str, bytes))


def text(value: Any) -> str:
    """A string argument as text, whichever way the client sent it (AMQP long strings
    arrive as bytes from some clients, str from others)."""
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).decode("utf-8", "replace")
    return str(value)


def optional_text(value: Any) -> str | None:
    """:func:`text`, keeping None (an absent argument) as None."""
    return None if value is None else text(value)


def wire_type(table: dict[str, Any], key: str) -> str:
    """The type a client sent an argument as (or the nearest guess, for arguments that
    did not come off the wire)."""
    return type_of(table, key) or type_name(table[key])


def _reason(key: str, value: Any, wire: str) -> str | None:
    """RabbitMQ's ``~p`` of why an argument is refused, or None if it is fine."""
    if key in _INTEGER_ARGS:
        if not _is_int(value):
            return f'"expected integer, got {wire}"'
        if key == "x-expires" and value == 0:
            return "{value_zero,0}"
        if value < 0:
            return f"{{value_negative,{value}}}"
        if key in ("x-expires", "x-message-ttl") and value > _MAX_TTL:
            return f"{{value_too_large,{value}}}"
        if key == "x-max-priority" and value > 255:
            return f"{{max_value_exceeded,{value}}}"
    elif key == "x-dead-letter-routing-key":
        if not _is_str(value):
            return f"{{unacceptable_type,{wire}}}"
    elif key == "x-overflow":
        if not _is_str(value):
            return f"{{unacceptable_type,{wire}}}"
        if text(value) not in ("drop-head", "reject-publish", "reject-publish-dlx"):
            return "invalid_overflow"
    elif key == "x-queue-mode":
        if not _is_str(value) or text(value) not in ("default", "lazy"):
            return f"\"unsupported queue mode '{text(value)}'\""
    elif key == "x-queue-version":
        if value not in (1, 2):
            return f"\"unsupported queue version '{text(value)}'\""
    elif key in ("x-single-active-consumer",):
        if not isinstance(value, bool):
            return f"{{unacceptable_type,{wire}}}"
    elif key == "x-queue-type":
        if not _is_str(value):
            return f"{{unacceptable_type,{wire}}}"
        if text(value) not in ("classic", "quorum", "stream"):
            return f"\"unsupported queue type '{text(value)}'\""
    return None


def check_queue_arguments(name: str, vhost: str, arguments: dict[str, Any]) -> None:
    where = f"queue '{name}' in vhost '{vhost}'"
    dlx = arguments.get("x-dead-letter-exchange")
    if dlx is not None and not _is_str(dlx):
        raise errors.precondition_failed(
            f"invalid type '{wire_type(arguments, 'x-dead-letter-exchange')}' for arg "
            f"'x-dead-letter-exchange' in {where}"
        )
    for key, value in arguments.items():
        reason = _reason(key, value, wire_type(arguments, key))
        if reason is not None:
            raise errors.precondition_failed(f"invalid arg '{key}' for {where}: {reason}")
    if "x-dead-letter-routing-key" in arguments and dlx is None:
        raise errors.precondition_failed(
            f"invalid arg 'x-dead-letter-routing-key' for {where}: routing_key_but_no_dlx_defined"
        )
    for key in OTHER_QUEUE_TYPE_ARGS:
        if key in arguments:
            raise errors.precondition_failed(
                f"invalid arg '{key}' for {where} of queue type rabbit_classic_queue"
            )
    qtype = text(arguments.get("x-queue-type", "classic"))
    if qtype not in ("classic", "stream"):
        raise errors.precondition_failed(
            f"queue type '{qtype}' is not supported by this broker (declaring {where})"
        )


def assert_args_equivalence(
    kind: str,
    name: str,
    vhost: str,
    current: dict[str, Any],
    received: dict[str, Any],
    keys: tuple[str, ...],
) -> AMQPError | None:
    from leveret.broker.errors import inequivalent_arg

    for key in keys:
        old = current.get(key)
        new = received.get(key)
        if key == "x-queue-type":
            # classic is the default: saying so is the same as saying nothing
            if old is None and new is not None and text(new) == "classic":
                continue
            if new is None and old is not None and text(old) == "classic":
                continue
        if _norm(old) != _norm(new):
            return inequivalent_arg(
                kind,
                name,
                vhost,
                key,
                new,
                old,
                type_of(received, key),
                type_of(current, key),
            )
    return None


def _norm(v: Any) -> Any:
    return text(v) if isinstance(v, (bytes, bytearray)) else v


__all__ = [
    "EXCHANGE_EQUIVALENCE_KEYS",
    "QUEUE_EQUIVALENCE_KEYS",
    "_show",
    "assert_args_equivalence",
    "check_queue_arguments",
    "wire_type",
]
