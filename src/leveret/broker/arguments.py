"""Validation of queue and exchange arguments, with RabbitMQ's reasons."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from leveret.broker.errors import _show, type_name
from leveret.protocol import errors
from leveret.protocol.errors import AMQPError
from leveret.protocol.spec import type_of

# The queue arguments whose values must match on redeclaration: rabbit_amqqueue checks
# the queue type's queue_arguments, a classic queue's are these.
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
# The queue arguments a classic queue takes (rabbit_classic_queue:capabilities()): the
# same list RabbitMQ checks for equivalence on redeclaration.
CLASSIC_ARGS = frozenset(QUEUE_EQUIVALENCE_KEYS)
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


def check_queue_arguments(where: str, arguments: dict[str, Any], v4: bool = False) -> None:
    """A classic queue's declaration arguments, as RabbitMQ checks them (``where``
    names the queue as its error texts do); ``v4``: as RabbitMQ 4.2 does."""
    type_args = CLASSIC_ARGS_4 if v4 else CLASSIC_ARGS
    check_typed_arguments(where, arguments, type_args, "rabbit_classic_queue", v4)


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


# ------------------------------------------------------------------------------
# rabbit_amqqueue:check_declare_arguments, for the queue types that follow it to the
# letter (quorum): the validators of the arguments the type takes, in RabbitMQ's order,
# then every argument another type takes and this one does not is refused.

# Every queue argument some queue type takes (rabbit_queue_type:arguments(queue_arguments)).
KNOWN_QUEUE_ARGS = frozenset((*CLASSIC_ARGS, *OTHER_QUEUE_TYPE_ARGS))
_INTEGER_WIRE_TYPES = frozenset(
    ("byte", "short", "signedint", "long", "unsignedbyte", "unsignedshort", "unsignedint")
)
_LEADER_LOCATORS = ("client-local", "balanced", "random", "least-leaders")

# RabbitMQ 4.2's (v4.2.9 rabbit_amqqueue.erl:949-973 declare_args and consume_args, and the
# capabilities() of rabbit_classic_queue.erl:665-685, rabbit_quorum_queue.erl:525-545 and
# rabbit_stream_queue.erl:1482-1500): a classic queue takes x-queue-leader-locator, which
# may also be min-masters (rabbit_queue_location.erl:34-35); streams take
# x-stream-filter-size-bytes; consumers x-priority, and on streams x-stream-offset and the
# filters. x-cancel-on-ha-failover and x-credit are gone: no type knows them, nor refuses.
CLASSIC_ARGS_4 = CLASSIC_ARGS | {"x-queue-leader-locator"}
KNOWN_QUEUE_ARGS_4 = KNOWN_QUEUE_ARGS | {"x-stream-filter-size-bytes"}
_LEADER_LOCATORS_4 = (*_LEADER_LOCATORS, "min-masters")
CONSUMER_ARGS_4 = {
    "rabbit_classic_queue": frozenset(("x-priority",)),
    "rabbit_quorum_queue": frozenset(("x-priority",)),
    "rabbit_stream_queue": frozenset(
        ("x-stream-offset", "x-stream-filter", "x-stream-match-unfiltered")
    ),
}
KNOWN_CONSUMER_ARGS_4 = frozenset().union(*CONSUMER_ARGS_4.values())
_DLX_STRATEGIES = ("at-most-once", "at-least-once")


def _int_reason(value: Any, wire: str) -> str | None:
    if wire not in _INTEGER_WIRE_TYPES or not _is_int(value):
        return f'"expected integer, got {wire}"'
    return None


def _non_neg(value: Any, wire: str) -> str | None:
    reason = _int_reason(value, wire)
    if reason is None and value < 0:
        return f"{{value_negative,{value}}}"
    return reason


def _expiry(value: Any, wire: str, zero_allowed: bool) -> str | None:
    reason = _int_reason(value, wire)
    if reason is not None:
        return reason
    if not zero_allowed and value == 0:
        return "{value_zero,0}"
    if value < 0:
        return f"{{value_negative,{value}}}"
    if value > _MAX_TTL:
        return f"{{value_too_large,{value}}}"
    return None


def _one_of(value: Any, wire: str, known: tuple[str, ...], invalid: str) -> str | None:
    if not _is_str(value):
        return f"{{unacceptable_type,{wire}}}"
    return None if text(value) in known else invalid


# An argument's check: the reason RabbitMQ refuses (value, wire type) with, or None.
Validator = Callable[[Any, str], "str | None"]


def _declare_validators(arguments: dict[str, Any], v4: bool = False) -> list[tuple[str, Validator]]:
    """rabbit_amqqueue:declare_args(), in its order: key -> reason(value, wire type)."""
    has_dlx = "x-dead-letter-exchange" in arguments
    locators = _LEADER_LOCATORS_4 if v4 else _LEADER_LOCATORS

    def dlrk(v: Any, w: str) -> str | None:
        if not _is_str(v):
            return f"{{unacceptable_type,{w}}}"
        return None if has_dlx else "routing_key_but_no_dlx_defined"

    def max_age(v: Any, w: str) -> str | None:
        # rabbit_amqqueue:check_max_age: digits then a unit; no digits at all makes its
        # list_to_integer crash the channel
        if not _is_str(v):
            return f"{{unacceptable_type,{w}}}"
        raw = text(v)
        digits = len(raw) - len(raw.lstrip("0123456789"))
        if digits == 0:
            raise errors.Crash()
        value, unit = int(raw[:digits]), raw[digits:]
        return None if value > 0 and unit in ("Y", "M", "D", "h", "m", "s") else "invalid_max_age"

    def group_size(v: Any, w: str) -> str | None:
        reason = _non_neg(v, w)
        return "{value_zero,0}" if reason is None and v == 0 else reason

    return [
        ("x-expires", lambda v, w: _expiry(v, w, zero_allowed=False)),
        ("x-message-ttl", lambda v, w: _expiry(v, w, zero_allowed=True)),
        (
            "x-dead-letter-exchange",
            lambda v, w: None if _is_str(v) else f"{{unacceptable_type,{w}}}",
        ),
        ("x-dead-letter-routing-key", dlrk),
        (
            "x-dead-letter-strategy",
            lambda v, w: _one_of(v, w, _DLX_STRATEGIES, "invalid_dlx_strategy"),
        ),
        ("x-max-length", _non_neg),
        ("x-max-length-bytes", _non_neg),
        ("x-max-in-memory-length", _non_neg),
        ("x-max-in-memory-bytes", _non_neg),
        ("x-max-priority", lambda v, w: _reason("x-max-priority", v, w)),
        ("x-overflow", lambda v, w: _reason("x-overflow", v, w)),
        ("x-queue-mode", lambda v, w: _reason("x-queue-mode", v, w)),
        ("x-queue-version", lambda v, w: _reason("x-queue-version", v, w)),
        (
            "x-single-active-consumer",
            lambda v, w: None if isinstance(v, bool) else f"{{unacceptable_type,{w}}}",
        ),
        ("x-queue-type", lambda v, w: _reason("x-queue-type", v, w)),
        ("x-quorum-initial-group-size", group_size),
        ("x-max-age", max_age),
        ("x-stream-max-segment-size-bytes", _non_neg),
        *((("x-stream-filter-size-bytes", _non_neg),) if v4 else ()),
        ("x-initial-cluster-size", group_size),
        (
            "x-queue-leader-locator",
            lambda v, w: _one_of(v, w, locators, "invalid_queue_locator_arg"),
        ),
    ]


def check_typed_arguments(
    where: str,
    arguments: dict[str, Any],
    type_args: frozenset[str],
    rabbit_type: str,
    v4: bool = False,
) -> None:
    """Raise what rabbit_amqqueue:check_declare_arguments raises for a queue (``where``,
    as its error texts name it) of a type that takes ``type_args`` (``v4``: RabbitMQ
    4.2's validators and known arguments)."""
    dlx = arguments.get("x-dead-letter-exchange")
    if dlx is not None and not _is_str(dlx):  # rabbit_channel checks this one first
        raise errors.precondition_failed(
            f"invalid type '{wire_type(arguments, 'x-dead-letter-exchange')}' for arg "
            f"'x-dead-letter-exchange' in {where}"
        )
    if "x-queue-type" in arguments:  # checked before anything else
        reason = _reason(
            "x-queue-type", arguments["x-queue-type"], wire_type(arguments, "x-queue-type")
        )
        if reason is not None:
            raise errors.precondition_failed(f"invalid arg 'x-queue-type' for {where}: {reason}")
    known = KNOWN_QUEUE_ARGS_4 if v4 else KNOWN_QUEUE_ARGS
    _check_type_arguments(
        where, arguments, _declare_validators(arguments, v4), known, type_args, rabbit_type
    )


# Every consumer argument some queue type takes (rabbit_queue_type's consumer_arguments).
KNOWN_CONSUMER_ARGS = frozenset(
    ("x-priority", "x-cancel-on-ha-failover", "x-credit", "x-stream-offset")
)
# The consumer arguments' validators, in RabbitMQ's order (x-stream-offset's values are
# the stream's own business).
_CONSUME_VALIDATORS: list[tuple[str, Validator]] = [
    (
        "x-priority",
        lambda v, w: (
            None if w in _INTEGER_WIRE_TYPES and _is_int(v) else f'"expected integer, got {w}"'
        ),
    ),
    (
        "x-cancel-on-ha-failover",
        lambda v, w: None if v is None or isinstance(v, bool) else f"{{unacceptable_type,{w}}}",
    ),
]


def check_consume_arguments(
    where: str,
    arguments: dict[str, Any],
    type_args: frozenset[str],
    rabbit_type: str,
    v4: bool = False,
) -> None:
    """Raise what rabbit_amqqueue:check_consume_arguments raises for a basic.consume on a
    queue (``where``) of a type that takes ``type_args`` (``v4``: the type's consumer
    arguments in RabbitMQ 4.2 instead)."""
    if v4:
        _check_type_arguments(
            where,
            arguments,
            _CONSUME_VALIDATORS[:1],
            KNOWN_CONSUMER_ARGS_4,
            CONSUMER_ARGS_4[rabbit_type],
            rabbit_type,
        )
        return
    _check_type_arguments(
        where, arguments, _CONSUME_VALIDATORS, KNOWN_CONSUMER_ARGS, type_args, rabbit_type
    )


def _check_type_arguments(
    where: str,
    arguments: dict[str, Any],
    validators: list[tuple[str, Validator]],
    known: frozenset[str],
    type_args: frozenset[str],
    rabbit_type: str,
) -> None:
    """The validators of the arguments the type takes, in their order; then any of the
    ``known`` arguments another type takes and this one does not is refused."""
    for key, validate in validators:
        if key in type_args and key in arguments:
            reason = validate(arguments[key], wire_type(arguments, key))
            if reason is not None:
                raise errors.precondition_failed(f"invalid arg '{key}' for {where}: {reason}")
    for key in arguments:
        if key in known and key not in type_args:
            raise errors.precondition_failed(
                f"invalid arg '{key}' for {where} of queue type {rabbit_type}"
            )


def check_credit_argument(arguments: dict[str, Any], v4: bool = False) -> None:
    """x-credit: RabbitMQ 3.10's classic and quorum queues read it as a table (credit,
    drain) and over AMQP 0-9-1 do nothing more with it; any other value crashes the
    channel. RabbitMQ 4 does not read it (credit API v2)."""
    if not v4 and "x-credit" in arguments and not isinstance(arguments["x-credit"], dict):
        raise errors.Crash()
