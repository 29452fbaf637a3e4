"""Validation of queue and exchange arguments, with RabbitMQ's reasons."""

from __future__ import annotations

from typing import Any

from leveret.broker.errors import _show, type_name
from leveret.protocol import errors
from leveret.protocol.errors import AMQPError

# The queue arguments whose values must match on redeclaration (rabbit_amqqueue).
QUEUE_EQUIVALENCE_KEYS = (
    "x-expires",
    "x-message-ttl",
    "x-dead-letter-exchange",
    "x-dead-letter-routing-key",
    "x-max-length",
    "x-max-length-bytes",
    "x-max-in-memory-length",
    "x-max-in-memory-bytes",
    "x-max-priority",
    "x-overflow",
    "x-queue-mode",
    "x-queue-version",
    "x-single-active-consumer",
    "x-queue-type",
    "x-quorum-initial-group-size",
    "x-max-age",
    "x-stream-max-segment-size-bytes",
    "x-initial-cluster-size",
    "x-queue-leader-locator",
    "x-queue-master-locator",
)
EXCHANGE_EQUIVALENCE_KEYS = ("alternate-exchange",)


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_str(v: Any) -> bool:
    return isinstance(v, (str, bytes, bytearray))


def _text(v: Any) -> str:
    return bytes(v).decode() if isinstance(v, (bytes, bytearray)) else str(v)


def _reason(key: str, value: Any) -> str | None:
    """The Erlang-style reason RabbitMQ reports for a bad argument, or None if fine."""
    unacceptable = f"{{unacceptable_type,{type_name(value)}}}"
    if key in ("x-expires",):
        if not _is_int(value):
            return unacceptable
        if value == 0:
            return "{value_zero,0}"
        if value < 0:
            return f"{{value_negative,{value}}}"
    elif key in (
        "x-message-ttl",
        "x-max-length",
        "x-max-length-bytes",
        "x-max-priority",
        "x-max-in-memory-length",
        "x-max-in-memory-bytes",
        "x-delivery-limit",
    ):
        if not _is_int(value):
            return unacceptable
        if value < 0:
            return f"{{value_negative,{value}}}"
        if key == "x-max-priority" and value > 255:
            return f"{{value_too_big,{value}}}"
    elif key in ("x-dead-letter-exchange", "x-dead-letter-routing-key"):
        if not _is_str(value):
            return unacceptable
    elif key == "x-overflow":
        if not _is_str(value):
            return unacceptable
        if _text(value) not in ("drop-head", "reject-publish", "reject-publish-dlx"):
            return f'{{invalid_value,<<"{_text(value)}">>}}'
    elif key == "x-queue-mode":
        if not _is_str(value):
            return unacceptable
        if _text(value) not in ("default", "lazy"):
            return f'{{invalid_value,<<"{_text(value)}">>}}'
    elif key == "x-single-active-consumer":
        if not isinstance(value, bool):
            return unacceptable
    elif key == "x-queue-type" and not _is_str(value):
        return unacceptable
    return None


def check_queue_arguments(name: str, vhost: str, arguments: dict[str, Any]) -> None:
    for key, value in arguments.items():
        reason = _reason(key, value)
        if reason is not None:
            raise errors.precondition_failed(
                f"invalid arg '{key}' for queue '{name}' in vhost '{vhost}': {reason}"
            )
    if "x-dead-letter-routing-key" in arguments and "x-dead-letter-exchange" not in arguments:
        raise errors.precondition_failed(
            f"invalid arg 'x-dead-letter-routing-key' for queue '{name}' in vhost '{vhost}': "
            '{no_dlx,<<"x-dead-letter-routing-key">>}'
        )
    qtype = _text(arguments.get("x-queue-type", "classic"))
    if qtype != "classic":
        raise errors.precondition_failed(
            f"invalid arg 'x-queue-type' for queue '{name}' in vhost '{vhost}': "
            f'{{unsupported_queue_type,<<"{qtype}">>}}'
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
            old = old if old is not None else "classic"
            new = new if new is not None else old
        if _norm(old) != _norm(new):
            return inequivalent_arg(kind, name, vhost, key, new, old)
    return None


def _norm(v: Any) -> Any:
    if isinstance(v, (bytes, bytearray)):
        return bytes(v).decode("utf-8", "replace")
    return v


__all__ = [
    "EXCHANGE_EQUIVALENCE_KEYS",
    "QUEUE_EQUIVALENCE_KEYS",
    "_show",
    "assert_args_equivalence",
    "check_queue_arguments",
]
