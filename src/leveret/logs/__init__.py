"""The log system: a record schema, an emitter, receivers and a ``logging`` handler.

An AMQP *client* of any AMQP 0-9-1 broker (Leveret or RabbitMQ), built on pika; it reaches
a broker only over the network and never imports the broker's own packages.
"""

from __future__ import annotations

from leveret.logs.amqp import DEFAULT_EXCHANGE, DEFAULT_URL, ExchangeType, LogsError, routing_key
from leveret.logs.emitter import EmitResult, Emitter
from leveret.logs.handler import AMQPHandler
from leveret.logs.publisher import Publisher, PublisherStats
from leveret.logs.receiver import Subscription, receive
from leveret.logs.record import CONTENT_TYPE, SEVERITIES, Record
from leveret.logs.sinks import FileSink, TerminalSink

__all__ = [
    "CONTENT_TYPE",
    "DEFAULT_EXCHANGE",
    "DEFAULT_URL",
    "SEVERITIES",
    "AMQPHandler",
    "EmitResult",
    "Emitter",
    "ExchangeType",
    "FileSink",
    "LogsError",
    "Publisher",
    "PublisherStats",
    "Record",
    "Subscription",
    "TerminalSink",
    "receive",
    "routing_key",
]
