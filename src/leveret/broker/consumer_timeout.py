"""RabbitMQ's consumer timeout (rabbit_channel:evaluate_consumer_timeout): a channel
whose oldest unacknowledged delivery went out longer than ``consumer_timeout`` ago is
closed with 406 PRECONDITION_FAILED, and its unacknowledged messages go back to their
queues. RabbitMQ looks at each channel on its tick (every minute by default); Leveret
looks on its housekeeping tick, a fifth of a second.

From 3.12 (RabbitMQ 4.2 mode here) the timeout is that delivery's queue's when it has one:
the smaller of its ``x-consumer-timeout`` argument and its policies' ``consumer-timeout``
(v4.2.9 rabbit_channel.erl:2854-2893), else the node's."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from leveret.broker.clock import now_ms
from leveret.broker.policies import resolve, smaller
from leveret.protocol import errors

if TYPE_CHECKING:
    from leveret.broker.broker import BrokerCore
    from leveret.broker.queues import Queue

log = logging.getLogger(__name__)


def timed_out(channel: int, timeout: int) -> errors.AMQPError:
    return errors.precondition_failed(
        f"delivery acknowledgement on channel {channel} timed out. Timeout value used: "
        f"{timeout} ms. This timeout value can be configured, see consumers doc guide to "
        "learn more"
    )


def _queue_timeout(queue: Queue, node: int | None) -> int | None:
    """get_queue_consumer_timeout: the queue's, else the node's; a value that is no
    integer times nothing out (evaluate_consumer_timeout1's is_integer guard)."""
    value = resolve(
        "consumer-timeout", queue.arguments, queue.policy, queue.operator_policy, smaller
    )
    if value is None:
        return node
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def check(broker: BrokerCore) -> int:
    """Close every channel past the timeout; how many were closed."""
    timeout = broker.consumer_timeout
    v4 = broker.compat.v4
    if timeout is None and not v4:
        return 0
    now = now_ms()
    closed = 0
    for connection in list(broker.connections.values()):
        channels = getattr(connection, "channels", None)
        fail = getattr(connection, "fail", None)
        if not channels or fail is None:
            continue
        for number, ch in list(channels.items()):
            unacked = getattr(ch, "unacked", None)
            if not unacked:
                continue
            tag, delivery = next(iter(unacked.items()))
            used = _queue_timeout(delivery.queue, timeout) if v4 else timeout
            if used is None or delivery.at >= now - used:
                continue
            consumer = delivery.consumer.tag if delivery.consumer is not None else str(tag)
            if v4:
                log.warning(
                    "Consumer '%s' on channel %d and %s has timed out waiting for a "
                    "consumer acknowledgement of a delivery with delivery tag = %d. Timeout "
                    "used: %d ms. This timeout value can be configured, see consumers doc "
                    "guide to learn more",
                    consumer,
                    number,
                    delivery.queue.where,
                    tag,
                    used,
                )
            else:
                log.warning(
                    "Consumer %s on channel %d has timed out waiting for delivery "
                    "acknowledgement. Timeout used: %d ms. This timeout value can be "
                    "configured, see consumers doc guide to learn more",
                    consumer,
                    number,
                    used,
                )
            fail(number, timed_out(number, used))
            closed += 1
    return closed
