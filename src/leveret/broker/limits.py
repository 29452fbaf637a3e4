"""Vhost limits and user limits, as RabbitMQ validates them (rabbit_vhost_limit,
rabbit_auth_backend_internal): which names there are and what a value must be."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from leveret.broker.erlterms import pairs, term
from leveret.protocol import errors

if TYPE_CHECKING:
    from leveret.broker.vhost import VirtualHost

VHOST_LIMITS = ("max-connections", "max-queues")
USER_LIMITS = ("max-connections", "max-channels")


def limit_error(name: str, value: Any, known: tuple[str, ...], what: str) -> str | None:
    """rabbit_parameter_validation:proplist's word on one limit (``what`` is "limits" for a
    vhost's, "user-limits" for a user's), or None when it is fine."""
    if name not in known:
        return f"Unrecognised terms {pairs([(name, value)])} in {what}"
    if isinstance(value, bool) or not isinstance(value, int):
        return f"{name} should be a number, actually was {term(value)}"
    return None


def check_queue_limit(vhost: VirtualHost, name: str) -> None:
    """Refuse a new queue beyond the vhost's max-queues, as rabbit_channel does."""
    limit = vhost.limit("max-queues")
    if limit is not None and len(vhost.queues) + 1 > limit:
        raise errors.precondition_failed(
            f"cannot declare queue '{name}': queue limit in vhost '{vhost.name}' "
            f"({limit}) is reached"
        )
