"""The broker's storage on disk: durable definitions, persistent messages of durable
classic queues, the paging area of classic queues, and stream logs, under one data
directory. :class:`Persistence` is the :class:`~leveret.broker.ports.Storage` the
broker is built with, and an observer of its events; it restores everything at start-up
and keeps it up to date after.

Layout: ``leveret.lock`` (:mod:`leveret.store.lock`: one broker per directory),
``definitions.json``, ``msg_store/`` (:mod:`leveret.store.messages`),
``msg_store_transient/`` (page files, :mod:`leveret.store.paging`; emptied at every
start), ``streams/`` (:mod:`leveret.store.streams`)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any
from urllib.parse import quote

from leveret.broker.arguments import text
from leveret.broker.definitions import export_definitions, import_definitions
from leveret.broker.entry import Entry
from leveret.broker.events import (
    BrokerEvent,
    DefinitionChanged,
    DefinitionsImported,
    GlobalParameterCleared,
    GlobalParameterSet,
    PermissionChanged,
    PolicyChanged,
    QueueCreated,
    QueueDeleted,
    TopicPermissionChanged,
    UserChanged,
    UserLimitsChanged,
    VhostAdded,
    VhostChanged,
    VhostDeleted,
    VhostLimitsChanged,
)
from leveret.broker.queues import Queue
from leveret.broker.queues.stream import interval_ms
from leveret.store.definitions import FileDefinitionStore
from leveret.store.lock import DataDirLock
from leveret.store.messages import FsyncJob, MessageLog, Recovered
from leveret.store.osiris import OsirisLog
from leveret.store.paging import PageFiles
from leveret.store.quorum import QuorumLog
from leveret.store.stream_layout import convert as convert_layout

# Events after which the definitions file is written again.
_DEFINITION_EVENTS: frozenset[type[BrokerEvent]] = frozenset(
    (
        DefinitionChanged,
        VhostAdded,
        VhostChanged,
        VhostDeleted,
        UserChanged,
        PermissionChanged,
        TopicPermissionChanged,
        PolicyChanged,
        VhostLimitsChanged,
        UserLimitsChanged,
        DefinitionsImported,
        GlobalParameterSet,
        GlobalParameterCleared,
    )
)


class QueueMessages:
    """The persistent messages of one durable classic queue, in the shared message log."""

    def __init__(self, log: MessageLog, qid: int, recovered: Recovered | None) -> None:
        self._log = log
        self._qid = qid
        self.recovered = recovered  # taken by the queue's pager

    def add(self, entry: Entry) -> None:
        m = entry.message
        entry.store_id = self._log.add(self._qid, m.exchange_and_key, m.properties, m.body)

    def remove(self, store_id: int) -> None:
        self._log.remove(self._qid, store_id)

    def drop(self) -> None:
        self._log.drop_queue(self._qid)


class Persistence:
    """Keeps the definitions file, the message log, the paging area and the stream logs."""

    def __init__(self, data_dir: Path) -> None:
        # first: nothing under the directory is touched while another broker holds it
        self.lock = DataDirLock(Path(data_dir))
        try:
            self.definitions = FileDefinitionStore(Path(data_dir) / "definitions.json")
            self.messages = MessageLog(Path(data_dir) / "msg_store")
        except BaseException:
            self.lock.release()
            raise
        self.transient_dir = Path(data_dir) / "msg_store_transient"
        # pages of a previous run are of messages that did not survive it
        shutil.rmtree(self.transient_dir, ignore_errors=True)
        self.streams_dir = Path(data_dir) / "streams"
        self.quorum_dir = Path(data_dir) / "quorum"
        self.data_dir = Path(data_dir)
        # queues that keep a log of their own (streams, quorum queues), synced with every batch
        self.logs: dict[tuple[str, str], Queue] = {}
        self._recovered: dict[int, Recovered] = {}
        self._pagers = 0
        self._definitions_dirty = False
        self._broker: Any = None

    # ---------------------------------------------------------------- Storage
    def queue_store(self, vhost: str, queue: str) -> QueueMessages:
        qid = self.messages.queue_id(vhost, queue)
        return QueueMessages(self.messages, qid, self._recovered.pop(qid, None))

    def pager(self, vhost: str, queue: str, store: Any) -> PageFiles:
        self._pagers += 1
        recovered = None
        if isinstance(store, QueueMessages):
            recovered, store.recovered = store.recovered, None
        return PageFiles(self.transient_dir, f"{self._pagers:08d}", self.messages, recovered)

    def open_stream(self, vhost: str, queue: str, arguments: dict[str, Any]) -> OsirisLog:
        age = arguments.get("x-max-age")
        label = f"stream '{queue}' in vhost '{vhost}'"
        return OsirisLog(
            self.streams_dir / quote(vhost, safe="") / quote(queue, safe=""),
            convert=lambda directory: convert_layout(directory, label),
            max_segment_bytes=int(arguments.get("x-stream-max-segment-size-bytes") or 500_000_000),
            max_bytes=arguments.get("x-max-length-bytes"),
            max_age_ms=interval_ms(text(age)) if isinstance(age, (str, bytes)) else None,
        )

    def quorum_store(self, vhost: str, queue: str) -> QuorumLog:
        return QuorumLog(self.quorum_dir / quote(vhost, safe="") / quote(queue, safe=""))

    def plugin_dir(self, plugin: str) -> Path:
        path = self.data_dir / "plugins" / plugin
        path.mkdir(parents=True, exist_ok=True)
        return path

    # ------------------------------------------------------------- lifecycle
    def restore(self, broker: Any) -> None:
        """Persistent messages first (each durable queue takes its own as it is
        declared), then the definitions that declare the queues."""
        self._broker = broker
        self._recovered = self.messages.recover()
        data = self.definitions.load()
        if data is not None:
            import_definitions(broker, data)
        # messages of queues that no longer exist
        declared = {(v.name, q.name) for v in broker.vhosts.values() for q in v.queues.values()}
        for qid, key in list(self.messages.queues.items()):
            if key not in declared:
                self.messages.drop_queue(qid)
        self._recovered.clear()
        self.messages.sync()
        self._definitions_dirty = False

    def observe(self, event: BrokerEvent) -> None:
        if type(event) in _DEFINITION_EVENTS:
            self._definitions_dirty = True
        if isinstance(event, QueueCreated) and event.queue.keeps_log:
            self.logs[(event.queue.vhost, event.queue.name)] = event.queue
        elif isinstance(event, QueueDeleted):
            self.logs.pop((event.queue.vhost, event.queue.name), None)

    def sync(self) -> None:
        """Everything written so far is durable when this returns."""
        job = self.write()
        if job is not None:
            job.run()

    def write(self) -> FsyncJob | None:
        """As :meth:`sync`, except the message log's fsync: it is returned as a job to
        run, in order, in another thread (group commit; None: nothing to fsync). The
        definitions and the queues' own logs are made durable here and now."""
        if self._definitions_dirty and self._broker is not None:
            self._definitions_dirty = False
            self.definitions.save(export_definitions(self._broker))
        job = self.messages.write()
        for queue in list(self.logs.values()):
            queue.sync()
        return job

    def close(self) -> None:
        try:
            self.sync()
            self.messages.close()
            for queue in self.logs.values():
                queue.close()
        finally:
            self.lock.release()
