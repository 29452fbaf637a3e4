"""``x-message-deduplication``: rabbitmq-message-deduplication's exchange. Routes as fanout,
each identity (the ``x-deduplication-header`` header) once within its cache (see
:mod:`leveret.broker.dedup`)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from leveret.broker import dedup
from leveret.broker.exchanges.fanout import FanoutExchange

if TYPE_CHECKING:
    from leveret.broker.exchanges.base import Destination
    from leveret.broker.message import Message

PLUGIN = "rabbitmq_message_deduplication"


class DeduplicationExchange(FanoutExchange):
    type_name = "x-message-deduplication"
    description = "Message Deduplication Exchange."

    def __post_init__(self) -> None:
        super().__post_init__()
        size, ttl, on_disk = dedup.validate_exchange_arguments(self.arguments)
        self._on_disk = on_disk
        self.cache = dedup.Cache(size, ttl)

    def attach(self, vhost: Any) -> None:
        if not self._on_disk or vhost.storage is None:
            return
        directory = vhost.storage.plugin_dir(PLUGIN) / quote(vhost.name, safe="")
        path = directory / f"{quote(self.name, safe='')}.cache"
        if not self.durable:
            # a transient exchange's cache is of an exchange that did not survive
            Path(path).unlink(missing_ok=True)
        self.cache = dedup.Cache(self.cache.size, self.cache.ttl, path)

    def detach(self) -> None:
        self.cache.drop()

    def route(self, message: Message) -> list[Destination]:
        key = dedup.identity(message)
        if key is not None and not self.cache.insert(key, dedup.message_ttl(message)):
            return []
        return super().route(message)
