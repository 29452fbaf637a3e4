"""The broker's storage on disk: durable definitions, persistent messages of durable
classic queues, and stream logs, under one data directory. :class:`Persistence` is the
:class:`~leveret.broker.ports.Storage` the broker is built with, and an observer of its
events; it restores everything at start-up and keeps it up to date after."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import quote

from leveret.broker.arguments import text
from leveret.broker.definitions import export_definitions, import_definitions
from leveret.broker.entry import Entry
from leveret.broker.events import Event
from leveret.broker.message import Message
from leveret.broker.queues import Queue, StreamQueue
from leveret.broker.queues.stream import interval_ms
from leveret.store.definitions import FileDefinitionStore
from leveret.store.messages import FileMessageStore
from leveret.store.streams import SegmentLog

# Events after which the definitions file is written again.
_DEFINITION_EVENTS = frozenset(
    (
        Event.DEFINITION_CHANGED,
        Event.VHOST_ADDED,
        Event.VHOST_CHANGED,
        Event.VHOST_DELETED,
        Event.USER_CHANGED,
        Event.PERMISSION_CHANGED,
        Event.TOPIC_PERMISSION_CHANGED,
        Event.POLICY_CHANGED,
        Event.LIMITS_CHANGED,
        Event.DEFINITIONS_IMPORTED,
    )
)


class QueueMessages:
    """The persistent messages of one durable classic queue, in the shared message log."""

    def __init__(
        self,
        log: FileMessageStore,
        vhost: str,
        queue: str,
        recovered: list[tuple[Message, int]],
    ) -> None:
        self._log = log
        self._vhost = vhost
        self._queue = queue
        self._recovered = recovered

    def recover(self) -> list[tuple[Message, int]]:
        recovered, self._recovered = self._recovered, []
        return recovered

    def add(self, entry: Entry) -> None:
        m = entry.message
        mid = self._log.next_id
        self._log.next_id = mid + 1
        entry.store_id = mid
        self._log.add(
            self._vhost, self._queue, mid, m.exchange, m.routing_key, m.properties, m.body
        )

    def remove(self, entry: Entry) -> None:
        self._log.remove(self._vhost, self._queue, entry.store_id)

    def drop(self) -> None:
        self._log.drop_queue(self._vhost, self._queue)


class Persistence:
    """Keeps the definitions file, the message log and the stream logs."""

    def __init__(self, data_dir: Path) -> None:
        self.definitions = FileDefinitionStore(Path(data_dir) / "definitions.json")
        self.messages = FileMessageStore(Path(data_dir) / "msg_store")
        self.streams_dir = Path(data_dir) / "streams"
        self.streams: dict[tuple[str, str], StreamQueue] = {}
        self._recovered: dict[tuple[str, str], list[tuple[Message, int]]] = {}
        self._definitions_dirty = False
        self._broker: Any = None

    # ---------------------------------------------------------------- Storage
    def queue_store(self, vhost: str, queue: str) -> QueueMessages:
        recovered = self._recovered.pop((vhost, queue), [])
        return QueueMessages(self.messages, vhost, queue, recovered)

    def open_stream(self, vhost: str, queue: str, arguments: dict[str, Any]) -> SegmentLog:
        age = arguments.get("x-max-age")
        return SegmentLog(
            self.streams_dir / quote(vhost, safe="") / quote(queue, safe=""),
            max_segment_bytes=int(arguments.get("x-stream-max-segment-size-bytes") or 500_000_000),
            max_bytes=arguments.get("x-max-length-bytes"),
            max_age_ms=interval_ms(text(age)) if isinstance(age, (str, bytes)) else None,
        )

    # ------------------------------------------------------------- lifecycle
    def restore(self, broker: Any) -> None:
        """Persistent messages first (each durable queue takes its own as it is
        declared), then the definitions that declare the queues."""
        self._broker = broker
        for vhost, queue, mid, exchange, rk, props, body in self.messages.load():
            message = Message.from_parts(exchange, rk, props, body)
            self._recovered.setdefault((vhost, queue), []).append((message, mid))
        data = self.definitions.load()
        if data is not None:
            import_definitions(broker, data)
        # messages of queues that no longer exist
        for vhost, queue in list(self._recovered):
            self.messages.drop_queue(vhost, queue)
        self._recovered.clear()
        self._definitions_dirty = False

    def observe(self, event: Event, subject: Any) -> None:
        if event in _DEFINITION_EVENTS:
            self._definitions_dirty = True
        if event is Event.QUEUE_CREATED and isinstance(subject, StreamQueue):
            self.streams[(subject.vhost, subject.name)] = subject
        elif event is Event.QUEUE_DELETED and isinstance(subject, Queue):
            self.streams.pop((subject.vhost, subject.name), None)

    def sync(self) -> None:
        if self._definitions_dirty and self._broker is not None:
            self._definitions_dirty = False
            self.definitions.save(export_definitions(self._broker))
        self.messages.sync()
        for stream in list(self.streams.values()):
            stream.sync()

    def close(self) -> None:
        self.sync()
        self.messages.close()
        for stream in self.streams.values():
            stream.log.close()
