"""Leveret: an AMQP 0-9-1 broker with RabbitMQ's messaging model."""

from __future__ import annotations

__version__ = "0.1.0"
