"""Dead-lettering: the message a queue republishes to its dead-letter exchange when a
message is rejected, expires or overflows, with RabbitMQ's ``x-death`` history."""

from __future__ import annotations

from typing import Any

from pamqp import commands

from leveret.broker.message import Message


def dead_lettered(
    message: Message, queue: str, reason: str, exchange: str, routing_key: str | None
) -> Message:
    """``message`` as dead-lettered from ``queue`` for ``reason`` to ``exchange`` (with
    ``routing_key``, or the message's own keys when None)."""
    props = message.props
    new_props = commands.Basic.Properties(**{k: getattr(props, k) for k in props.__slots__})
    headers: dict[str, Any] = dict(props.headers or {})
    deaths = list(headers.get("x-death") or [])
    for death in deaths:
        if (
            isinstance(death, dict)
            and death.get("queue") == queue
            and death.get("reason") == reason
        ):
            death["count"] = int(death.get("count", 0)) + 1
            deaths.remove(death)
            deaths.insert(0, death)
            break
    else:
        death = {
            "count": 1,
            "reason": reason,
            "queue": queue,
            "exchange": message.exchange,
            "routing-keys": [message.routing_key],
        }
        if props.expiration:
            death["original-expiration"] = props.expiration
        deaths.insert(0, death)
    headers["x-death"] = deaths
    headers.setdefault("x-first-death-reason", reason)
    headers.setdefault("x-first-death-queue", queue)
    headers.setdefault("x-first-death-exchange", message.exchange)
    new_props.headers = headers
    new_props.expiration = None
    return message.with_route(exchange, routing_key or message.routing_key, new_props)
