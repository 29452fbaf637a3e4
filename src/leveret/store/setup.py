"""Wire the on-disk stores into a broker: restore definitions and persistent messages at
start-up, then keep them up to date."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from leveret.broker.definitions import export_definitions, import_definitions
from leveret.broker.message import Message
from leveret.broker.queue import Entry, Queue
from leveret.broker.vhost import VirtualHost
from leveret.store.definitions import FileDefinitionStore
from leveret.store.messages import FileMessageStore


class Persistence:
    """Keeps the definitions file and the message log in step with the broker."""

    def __init__(self, broker: Any, data_dir: Path) -> None:
        self.broker = broker
        self.definitions = FileDefinitionStore(Path(data_dir) / "definitions.json")
        self.messages = FileMessageStore(Path(data_dir) / "msg_store")
        self._definitions_dirty = False

    def restore(self) -> None:
        data = self.definitions.load()
        if data is not None:
            import_definitions(self.broker, data)
        for vhost in self.broker.vhosts.values():
            self.watch(vhost)
        for vhost_name, queue_name, mid, exchange, rk, props, body in self.messages.load():
            vhost = self.broker.vhosts.get(vhost_name)
            q = vhost.queues.get(queue_name) if vhost else None
            if q is None:
                continue
            q.restore(Message.from_parts(exchange, rk, props, body), redelivered=True)
            q.ready[-1].store_id = mid

    def broker_changed(self, event: str, subject: Any) -> None:
        """Users, permissions or vhosts changed."""
        if event == "vhost.added":
            self.watch(subject)
        self._definitions_dirty = True

    def watch(self, vhost: VirtualHost) -> None:
        vhost.listeners.append(self._event)
        for q in vhost.queues.values():
            self._attach(q)

    def _attach(self, q: Queue) -> None:
        if q.durable:
            q.persist = self._persist
            q.on_removed = self._removed

    def _event(self, event: str, subject: Any) -> None:
        if event == "definitions":
            self._definitions_dirty = True
        elif event == "queue.created":
            self._attach(subject)
        elif event == "queue.deleted" and subject.durable:
            self.messages.drop_queue(subject.vhost, subject.name)

    def _persist(self, q: Queue, entry: Entry) -> None:
        m = entry.message
        if not m.persistent:
            return
        mid = self.messages.next_id
        self.messages.next_id = mid + 1
        entry.store_id = mid
        self.messages.add(q.vhost, q.name, mid, m.exchange, m.routing_key, m.properties, m.body)

    def _removed(self, q: Queue, entry: Entry) -> None:
        if entry.store_id:
            self.messages.remove(q.vhost, q.name, entry.store_id)
            entry.store_id = 0

    def sync(self) -> None:
        if self._definitions_dirty:
            self._definitions_dirty = False
            self.definitions.save(export_definitions(self.broker))
        self.messages.sync()

    def close(self) -> None:
        self.sync()
        self.messages.close()


def attach_stores(server: Any) -> None:
    """Give the server's broker on-disk persistence under ``config.data_dir``."""
    persistence = Persistence(server.broker, server.config.data_dir)
    persistence.restore()
    server.stores.append(persistence)
    server.broker.listeners.append(persistence.broker_changed)
