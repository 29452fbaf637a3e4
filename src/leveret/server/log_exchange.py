"""The broker's own log on ``amq.rabbitmq.log``, as RabbitMQ's ``log.exchange``
(rabbit_logger_exchange_h): every record of Leveret's loggers at or above the level is
published to that topic exchange in the default vhost, with the level as routing key
(``debug``, ``info``, ``warning``, ``error``, ``critical``), ``text/plain``, the record's
time as the timestamp property (seconds) and a ``node`` header. The body is the line
RabbitMQ's text formatter writes, each line of the message prefixed the same way::

    2026-11-22 22:52:55.608321+00:00 [warning] <leveret.server.amqp> missed heartbeats ...

where RabbitMQ puts the Erlang process that logged, Leveret puts the logger's name.

Records are published on the event loop, after whatever logged them has finished (as
RabbitMQ's logger hands them to another process): logging never re-enters the broker."""

from __future__ import annotations

import asyncio
import datetime
import logging
import struct
import threading

from leveret.broker.broker import DEFAULT_VHOST, LOG_EXCHANGE, BrokerCore
from leveret.broker.message import Message
from leveret.protocol import table

LEVELS = {
    logging.DEBUG: "debug",
    logging.INFO: "info",
    logging.WARNING: "warning",
    logging.ERROR: "error",
    logging.CRITICAL: "critical",
}
# content-type, headers, timestamp
_FLAGS = (0x8000 | 0x2000 | 0x0040).to_bytes(2, "big")
_CONTENT_TYPE = b"\x0atext/plain"
_u64 = struct.Struct(">Q")


def level_name(levelno: int) -> str:
    """RabbitMQ's level for a Python logging level (levels between are rounded down)."""
    for number in sorted(LEVELS, reverse=True):
        if levelno >= number:
            return LEVELS[number]
    return "debug"


def format_body(record: logging.LogRecord, text: str) -> bytes:
    when = datetime.datetime.fromtimestamp(record.created, datetime.UTC)
    prefix = (
        when.strftime("%Y-%m-%d %H:%M:%S.%f")
        + f"+00:00 [{level_name(record.levelno)}] <{record.name}> "
    )
    return "".join(prefix + line + "\n" for line in text.splitlines() or [""]).encode()


def log_message(record: logging.LogRecord, text: str, node: str) -> Message:
    properties = b"".join(
        (
            _FLAGS,
            _CONTENT_TYPE,
            table.encode_table([("node", table.longstr(node))]),
            _u64.pack(int(record.created)),
        )
    )
    return Message.from_parts(
        LOG_EXCHANGE, level_name(record.levelno), properties, format_body(record, text)
    )


class LogExchangeHandler(logging.Handler):
    """Publishes log records to ``amq.rabbitmq.log``; install with :meth:`install`."""

    def __init__(self, broker: BrokerCore, loop: asyncio.AbstractEventLoop, level: int) -> None:
        super().__init__(level)
        self.broker = broker
        self.loop = loop
        self._thread = threading.get_ident()

    def emit(self, record: logging.LogRecord) -> None:
        try:
            text = record.getMessage()
            if record.exc_info:
                text += "\n" + logging.Formatter().formatException(record.exc_info)
            message = log_message(record, text, self.broker.node_name)
            if threading.get_ident() == self._thread:
                self.loop.call_soon(self._publish, message)
            else:
                self.loop.call_soon_threadsafe(self._publish, message)
        except RuntimeError:
            pass  # the loop is closed: the broker is stopping
        except Exception:  # pragma: no cover - logging must never break the broker
            self.handleError(record)

    def _publish(self, message: Message) -> None:
        vhost = self.broker.vhosts.get(DEFAULT_VHOST)
        if vhost is not None:
            vhost.publish_internal(LOG_EXCHANGE, message)

    @classmethod
    def install(
        cls, broker: BrokerCore, loop: asyncio.AbstractEventLoop, level: str
    ) -> LogExchangeHandler:
        """Attach to Leveret's loggers (not third parties' such as aiohttp's access log)."""
        handler = cls(broker, loop, logging.getLevelName(level.upper()))
        logging.getLogger("leveret").addHandler(handler)
        return handler

    def uninstall(self) -> None:
        logging.getLogger("leveret").removeHandler(self)
