"""What one AMQP 1.0 session did, counted for the management API and the metrics, and
how the rest of the broker sees it (:mod:`leveret.broker.amqp10_presence`).

RabbitMQ 3.10.8's rabbitmq_amqp1_0 plugin runs each session over an AMQP 0-9-1 channel
of a direct connection of its own: that channel's figures (publish, confirm, deliver,
ack …) are what its management API shows of the session. They are counted here, where
the session's halves publish, deliver and settle."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(eq=False, slots=True)
class SessionFigures:
    """A session's counters, as the plugin's backing channel counts them."""

    publish: int = 0  # transfers routed into an exchange
    confirm: int = 0  # publishes confirmed (an outcome sent for an unsettled transfer)
    drop_unroutable: int = 0  # publishes no queue took
    deliver: int = 0  # transfers to consumers (the backing consume acknowledges them)
    redeliver: int = 0  # of them, messages delivered before
    ack: int = 0  # deliveries settled as accepted (or sent settled)
    # the backing channel is in confirm mode: a publisher link attached unsettled
    confirm_mode: bool = False
    # the direct connection standing for the session (its presence: RabbitMQ 3.10.8's
    # shape), or None
    direct: Any = None

    def published(self, routed: bool) -> None:
        self.publish += 1
        if not routed:
            self.drop_unroutable += 1

    def delivered(self, redelivered: bool, settled: bool) -> None:
        """A transfer to a consumer; one sent settled is acknowledged at once (the
        plugin acknowledges it to its channel as it goes out)."""
        self.deliver += 1
        if redelivered:
            self.redeliver += 1
        if settled:
            self.ack += 1
