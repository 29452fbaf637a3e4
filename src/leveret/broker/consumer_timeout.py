"""RabbitMQ's consumer timeout (rabbit_channel:evaluate_consumer_timeout): a channel
whose oldest unacknowledged delivery went out longer than ``consumer_timeout`` ago is
closed with 406 PRECONDITION_FAILED, and its unacknowledged messages go back to their
queues. RabbitMQ looks at each channel on its tick (every minute by default); Leveret
looks on its housekeeping tick, a fifth of a second."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from leveret.broker.clock import now_ms
from leveret.protocol import errors

if TYPE_CHECKING:
    from leveret.broker.broker import BrokerCore

log = logging.getLogger(__name__)


def timed_out(channel: int, timeout: int) -> errors.AMQPError:
    return errors.precondition_failed(
        f"delivery acknowledgement on channel {channel} timed out. Timeout value used: "
        f"{timeout} ms. This timeout value can be configured, see consumers doc guide to "
        "learn more"
    )


def check(broker: BrokerCore) -> int:
    """Close every channel past the timeout; how many were closed."""
    timeout = broker.consumer_timeout
    if timeout is None:
        return 0
    due = now_ms() - timeout
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
            if delivery.at >= due:
                continue
            consumer = delivery.consumer.tag if delivery.consumer is not None else str(tag)
            log.warning(
                "Consumer %s on channel %d has timed out waiting for delivery "
                "acknowledgement. Timeout used: %d ms. This timeout value can be "
                "configured, see consumers doc guide to learn more",
                consumer,
                number,
                timeout,
            )
            fail(number, timed_out(number, timeout))
            closed += 1
    return closed
