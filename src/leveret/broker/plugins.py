"""Plugins, named as RabbitMQ names them.

Leveret builds its plugins in; what the configuration says is which are enabled.
Those that add no objects of their own (exchange types, deduplication) are on from the
start; the event exchange declares ``amq.rabbitmq.event`` in every vhost, so it stays off
until enabled, as in RabbitMQ, where listings would otherwise differ.
"""

from __future__ import annotations

from collections.abc import Iterable

# What a Leveret broker always serves: its management API, metrics and stream protocol.
BUILT_IN = (
    "rabbitmq_management",
    "rabbitmq_prometheus",
    "rabbitmq_stream",
    "rabbitmq_stream_management",
)
CONSISTENT_HASH = "rabbitmq_consistent_hash_exchange"
EVENT_EXCHANGE = "rabbitmq_event_exchange"
# AMQP 1.0 on the AMQP listeners (RabbitMQ 3.x's plugin; RabbitMQ 4 serves it in its core)
AMQP_1_0 = "rabbitmq_amqp1_0"
DELAYED_MESSAGE = "rabbitmq_delayed_message_exchange"
DEDUPLICATION = "rabbitmq_message_deduplication"

# On unless disabled: they add no objects of their own.
ON_BY_DEFAULT: tuple[str, ...] = (CONSISTENT_HASH, DELAYED_MESSAGE, DEDUPLICATION)
# Off unless enabled.
OPTIONAL: tuple[str, ...] = (EVENT_EXCHANGE, AMQP_1_0)
KNOWN: tuple[str, ...] = (*BUILT_IN, *ON_BY_DEFAULT, *OPTIONAL)


class UnknownPlugin(ValueError):
    """A plugin name Leveret does not have."""


def parse(value: str | Iterable[str]) -> tuple[str, ...]:
    """Plugin names from a list or a comma- or space-separated string, checked."""
    if isinstance(value, str):
        names = [n for n in value.replace(",", " ").split() if n]
    else:
        names = list(value)
    out: list[str] = []
    for name in names:
        if not isinstance(name, str) or name not in KNOWN:
            raise UnknownPlugin(
                f"unknown plugin '{name}' (Leveret has: {', '.join(sorted(KNOWN))})"
            )
        if name not in out:
            out.append(name)
    return tuple(out)


def enabled(requested: Iterable[str] = ()) -> tuple[str, ...]:
    """The plugins enabled: the built-in ones, those on by default, and those asked for,
    in that order."""
    out = [*BUILT_IN, *ON_BY_DEFAULT]
    out.extend(n for n in requested if n not in out)
    return tuple(out)
