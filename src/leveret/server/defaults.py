"""The ports a broker listens on unless told otherwise: RabbitMQ's. One table, read by the
configuration and by the help of ``leveret server`` and ``leveret up`` (which import it and
nothing heavier, so that ``--help`` stays quick)."""

from __future__ import annotations

AMQP_PORT = 5672
AMQPS_PORT = 5671
STREAM_PORT = 5552
STREAM_TLS_PORT = 5551
HTTP_PORT = 15672
PROMETHEUS_PORT = 15692
