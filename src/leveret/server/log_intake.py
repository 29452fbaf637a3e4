"""Log records from outside AMQP (syslog, OpenTelemetry) published into the log system's
exchange: the one place both sources publish through.

A record is published as ``leveret emit-log`` publishes one: its JSON document
(:meth:`Record.to_json`), content type ``application/json``, delivery mode 1 (transient)
and a message id, with the routing key emit-log uses for the exchange's type (the severity,
or ``facility.severity`` for a topic exchange). So every receiver of the exchange, the
dashboard's Logs view and the lake's ingest read them with no change.

The exchange (``logs`` in vhost ``/`` by default: ``log_sources_exchange`` and
``log_sources_vhost``) is declared when it is missing as emit-log declares it (fanout, not
durable); one that exists keeps its type, and the key follows it. When it is a super
stream's, each record goes to the partition its host hashes to, as ``leveret emit-log
--super-stream --route-by host`` sends it (:mod:`leveret.logs.superstream`): the routing key
is that partition's binding key, so a sender's records keep their order in one partition.

Everything goes through the broker's operations with an :class:`Actor`: OTLP's is the
authenticated user (their write permission on the exchange is checked, and configure when
the exchange must be declared, as for emit-log); syslog, which has no authentication, acts
as the broker itself (:data:`INTERNAL_ACTOR`, RabbitMQ's ``rmq-internal``), as the
broker's own log exchange does. A configured user would look like access control and be
none: anyone who reaches the syslog port can send; who may is the bind address's and the
firewall's business, and where the records go is the operator's setting.

Counted per source: records received, published and refused, and refusals are logged at
most once per :data:`LOG_EVERY` seconds per source (with how many more there were)."""

from __future__ import annotations

import itertools
import logging
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from pamqp import commands

from leveret.broker import operations
from leveret.broker.events import INTERNAL_USER
from leveret.broker.message import Message
from leveret.broker.operations import Actor, super_streams
from leveret.broker.users import Permission
from leveret.logs.amqp import routing_key
from leveret.logs.record import CONTENT_TYPE, Record
from leveret.logs.superstream import partition_index
from leveret.protocol import errors, spec
from leveret.protocol.errors import AMQPError

if TYPE_CHECKING:
    from leveret.broker.broker import BrokerCore

log = logging.getLogger(__name__)

DEFAULT_VHOST = "/"
DEFAULT_EXCHANGE = "logs"
SOURCES = ("syslog", "otlp")
LOG_EVERY = 10.0  # seconds between two log lines about one source's refusals

# content-type, delivery-mode, message-id: the properties emit-log's pika publishes
_FLAGS = (0x8000 | 0x1000 | 0x0080).to_bytes(2, "big")
_HEAD = _FLAGS + bytes((len(CONTENT_TYPE),)) + CONTENT_TYPE.encode() + b"\x01"


def internal_actor(vhost: str) -> Actor:
    """The broker acting on its own behalf in ``vhost`` (what syslog publishes as)."""
    return Actor(INTERNAL_USER, Permission(INTERNAL_USER, vhost))


@dataclass
class SourceCounts:
    """One source's counters since the broker started."""

    received: int = 0
    published: int = 0
    refused: int = 0
    # refusals not logged yet (rate limit), and when the last line was written
    unlogged: int = 0
    last_logged: float = field(default=-1e9)


class LogIntake:
    """Publishes records into the configured exchange and counts them per source."""

    def __init__(
        self, broker: BrokerCore, vhost: str = DEFAULT_VHOST, exchange: str = DEFAULT_EXCHANGE
    ) -> None:
        self.broker = broker
        self.vhost = vhost
        self.exchange = exchange
        self.counts = {source: SourceCounts() for source in SOURCES}
        self._ids = itertools.count(1)
        self._id_prefix = uuid.uuid4().hex[:12]

    # ------------------------------------------------------------------ counting
    def received(self, source: str, n: int = 1) -> None:
        self.counts[source].received += n

    def refuse(self, source: str, reason: str, peer: str = "", n: int = 1) -> None:
        """Count ``n`` records of ``source`` refused for ``reason`` and log it, at most
        once per :data:`LOG_EVERY` seconds per source."""
        c = self.counts[source]
        c.refused += n
        now = time.monotonic()
        if now - c.last_logged < LOG_EVERY:
            c.unlogged += n
            return
        more = f" ({c.unlogged} more refused since the last report)" if c.unlogged else ""
        sender = f" from {peer}" if peer else ""
        log.warning("%s: refused a record%s: %s%s", source, sender, reason, more)
        c.unlogged = 0
        c.last_logged = now

    # ---------------------------------------------------------------- publishing
    def publish(self, source: str, records: Sequence[Record], actor: Actor) -> list[str | None]:
        """Publish ``records`` as ``actor``: for each, None when it was published, or why
        it was refused (counted, and logged). Raises the AMQPError that refuses them all:
        no such vhost, no write permission on the exchange (or no configure permission
        to declare it), an exchange that cannot be declared."""
        vhost = self.broker.vhosts.get(self.vhost)
        if vhost is None:
            raise errors.not_found(f"no vhost '{self.vhost}'")
        name = self.exchange
        operations.check_access(vhost, actor, "write", "exchange", name)
        exchange = vhost.exchanges.get(name)
        if exchange is None:
            method = spec.command(
                commands.Exchange.Declare, exchange=name, exchange_type="fanout", durable=False
            )
            exchange, _ = operations.declare_exchange(vhost, actor, method)
        kind = exchange.type_name
        keys: dict[tuple[str, str], str] = {}
        partitions = [k for _, k in super_streams.partition_keys(vhost, name)] if (
            super_streams.is_super_stream(exchange)
        ) else []  # fmt: skip
        out: list[str | None] = []
        counts = self.counts[source]
        for record in records:
            by = ("host", record.host) if partitions else (record.severity, record.facility)
            key = keys.get(by)
            if key is None:
                key = keys[by] = (
                    partitions[partition_index(record.host, len(partitions))]
                    if partitions
                    else routing_key(kind, record.severity, record.facility)
                )
            mid = f"{self._id_prefix}-{source}-{next(self._ids)}".encode()
            message = Message.from_parts(
                name, key, _HEAD + bytes((len(mid),)) + mid, record.to_json()
            )
            reason: str | None = None
            try:
                result = operations.publish(vhost, actor, name, message)
            except AMQPError as exc:  # too large, a topic permission: this record only
                reason = exc.reply_text
            else:
                if result.unstorable:
                    reason = "a queue bound to the exchange cannot store it"
                elif result.refused:
                    reason = "a queue bound to the exchange refused it (x-overflow)"
            if reason is None:
                counts.published += 1
            else:
                self.refuse(source, reason)
            out.append(reason)
        return out
