"""What RabbitMQ 4 changed in quorum queues (its 4.2 mode here; see quorum.py for the
rest): the delivery limit a queue ends up with, and which messages are of a high
priority."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from leveret.broker.policies import erlang_max, erlang_min

if TYPE_CHECKING:
    from leveret.broker.message import Message
    from leveret.broker.policies import Policy

_PRIORITY_FLAG = 0x08  # byte 0 of the property flags: priority (0x0800)


def _int(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    return value


def lower_unless_unlimited(a: Any, b: Any) -> Any:
    """RabbitMQ 4's rule for two delivery limits (rabbit_quorum_queue:resolve_delivery_limit,
    rabbit_policies:merge_policy_value at v4.2.9): a negative one means unlimited, and then
    the larger wins (the more conservative); otherwise the smaller."""
    if (_int(a) is not None and a < 0) or (_int(b) is not None and b < 0):
        return erlang_max(a, b)
    return erlang_min(a, b)


def delivery_limit(
    arguments: Mapping[str, Any],
    policy: Policy | None,
    operator: Policy | None,
    default: int,
) -> int | None:
    """The delivery limit in force (None: no limit), as get_delivery_limit at v4.2.9
    (rabbit_quorum_queue.erl:1777-1800) and rabbit_fifo:update_config (rabbit_fifo.erl:
    202-208): the policies' and the argument's by :func:`lower_unless_unlimited`;
    ``default`` when none sets one or the value is not an integer; a negative one is none."""
    value = policy.definition.get("delivery-limit") if policy is not None else None
    op_value = operator.definition.get("delivery-limit") if operator is not None else None
    if value is None or op_value is None:
        value = op_value if value is None else value
    else:
        value = lower_unless_unlimited(value, op_value)
    argument = arguments.get("x-delivery-limit")
    if value is None or argument is None:
        value = argument if value is None else value
    else:
        value = lower_unless_unlimited(value, argument)
    limit = _int(value)
    if limit is None:
        limit = default
    return limit if limit >= 0 else None


def high_priority(message: Message) -> bool:
    """A priority above 4: a quorum queue's high priority from 4.0 (v4.2.9
    rabbit_fifo.erl:2987-2999 priority_tag)."""
    props = message.properties
    if len(props) < 2 or not props[0] & _PRIORITY_FLAG:
        return False
    return (message.props.priority or 0) > 4
