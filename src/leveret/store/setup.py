"""Wire the on-disk stores into a broker: restore definitions and persistent messages at
start-up, then keep them up to date."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import quote

from leveret.broker.definitions import export_definitions, import_definitions
from leveret.broker.message import Message
from leveret.broker.queue import Entry, Queue
from leveret.broker.stream import interval_ms
from leveret.broker.vhost import VirtualHost
from leveret.store.definitions import FileDefinitionStore
from leveret.store.messages import FileMessageStore
from leveret.store.streams import SegmentLog


class Persistence:
    """Keeps the definitions file and the message log in step with the broker."""

    def __init__(self, broker: Any, data_dir: Path) -> None:
        self.broker = broker
        self.definitions = FileDefinitionStore(Path(data_dir) / "definitions.json")
        self.messages = FileMessageStore(Path(data_dir) / "msg_store")
        self.streams_dir = Path(data_dir) / "streams"
        self.streams: dict[tuple[str, str], Any] = {}  # (vhost, name) -> StreamQueue
        self._watched: set[str] = set()
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
            entry = q.restore(Message.from_parts(exchange, rk, props, body), redelivered=True)
            entry.store_id = mid

    def broker_changed(self, event: str, subject: Any) -> None:
        """Users, permissions or vhosts changed."""
        if event == "vhost.added":
            self.watch(subject)
        self._definitions_dirty = True

    def watch(self, vhost: VirtualHost) -> None:
        if vhost.name in self._watched:
            return
        self._watched.add(vhost.name)
        vhost.listeners.append(self._event)
        vhost.stream_factory = self._open_stream
        for q in vhost.queues.values():
            self._attach(q)

    def _open_stream(self, vhost: str, name: str, arguments: dict[str, Any]) -> SegmentLog:
        age = arguments.get("x-max-age")
        if isinstance(age, bytes):
            age = age.decode()
        return SegmentLog(
            self.streams_dir / quote(vhost, safe="") / quote(name, safe=""),
            max_segment_bytes=int(arguments.get("x-stream-max-segment-size-bytes") or 500_000_000),
            max_bytes=arguments.get("x-max-length-bytes"),
            max_age_ms=interval_ms(age) if isinstance(age, str) else None,
        )

    def _attach(self, q: Queue) -> None:
        if q.is_stream:
            self.streams[(q.vhost, q.name)] = q
        elif q.durable:
            q.persist = self._persist
            q.on_removed = self._removed

    def _event(self, event: str, subject: Any) -> None:
        if event == "definitions":
            self._definitions_dirty = True
        elif event == "queue.created":
            self._attach(subject)
        elif event == "queue.deleted" and subject.is_stream:
            self.streams.pop((subject.vhost, subject.name), None)
            subject.log.delete()
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
        for stream in list(self.streams.values()):
            stream.sync()

    def close(self) -> None:
        self.sync()
        self.messages.close()
        for stream in self.streams.values():
            stream.log.close()


def attach_stores(server: Any) -> None:
    """Give the server's broker on-disk persistence under ``config.data_dir``."""
    persistence = Persistence(server.broker, server.config.data_dir)
    # listen first: vhosts created by the restore get their stream factory from it
    server.broker.listeners.append(persistence.broker_changed)
    persistence.restore()
    persistence._definitions_dirty = False
    server.stores.append(persistence)
