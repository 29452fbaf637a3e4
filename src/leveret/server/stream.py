"""The stream protocol's edge: a socket, a sans-IO stream
:class:`~leveret.protocol.stream.connection.ServerConnection` and a broker
:class:`~leveret.broker.stream_session.StreamSession` (see :mod:`leveret.server.edge` for
what every edge does). Every frame goes to the session's table; after a batch of publishes
the stores are synced before their confirms go out. A Deliver frame is written as its
header and the chunk's own bytes (:mod:`leveret.server.sendfile`); while the socket does not
drain (pause_writing) no chunk is read at all, nor what the peer sends."""

from __future__ import annotations

import asyncio
import logging
import os
import time

from leveret.broker.ports import ChunkRef
from leveret.broker.stream_session import StreamSession
from leveret.protocol.stream import encode
from leveret.protocol.stream import events as ev
from leveret.protocol.stream.chunk import HEADER_SIZE
from leveret.protocol.stream.connection import ServerConnection
from leveret.protocol.stream.spec import Code
from leveret.server.edge import OVER, Edge, address
from leveret.server.sendfile import FileSender
from leveret.server.state import Listener, ServerState

log = logging.getLogger(__name__)


class StreamEdge(Edge):
    protocol_name = "stream"
    conn: ServerConnection
    session: StreamSession

    def __init__(
        self,
        state: ServerState,
        listener: Listener,
        advertised: tuple[str, int],
        frame_max: int,
        heartbeat: int,
    ) -> None:
        super().__init__(state, listener)
        self.advertised = advertised
        self.conn = ServerConnection(frame_max, heartbeat)
        self._files: FileSender  # made with the transport

    # ----------------------------------------------------------- session output
    def send(self, data: bytes) -> None:
        self.conn.send(data)
        self.schedule()

    def send_chunk(
        self, subscription_id: int, chunk: ChunkRef, committed: int | None = None
    ) -> None:
        """A Deliver frame (of version 2 with the ``committed`` chunk id): its header, then
        the stored chunk's bytes as they are on disk, after what was queued before. A
        chunk's Bloom filter, between its header and its data, is not sent (osiris sends
        the header as stored, then the data)."""
        transport = self.transport
        if transport is None:
            return
        head = self.conn.data_to_send() + encode.deliver_header(
            subscription_id, chunk.size, committed
        )
        position, size = chunk.position, chunk.size
        if chunk.filter_size:
            head += os.pread(chunk.fd, HEADER_SIZE, position)
            position += HEADER_SIZE + chunk.filter_size
            size -= HEADER_SIZE
        self._files.send(transport, head, chunk.fd, position, size)
        traffic = self.traffic
        traffic.send_oct += len(head) + size
        traffic.send_cnt += 1
        self.flow.sent = time.monotonic()

    def writable(self) -> bool:
        return not self.flow.writing_paused and self.phase not in OVER and bool(self.transport)

    def force_close(self, reason: str) -> None:
        """Management closes it: without a Close frame, as rabbit_stream_reader."""
        log.info("forcing stream connection %s closing: %s", self.name, reason)
        self.session.close()
        self.end(wait_for_peer=False)

    def opened(self) -> None:
        self.stop_timer()

    # ---------------------------------------------------------------- the edge
    def greet(self, transport: asyncio.BaseTransport) -> None:
        self._files = FileSender(transport, self.listener.tls)
        # the broker's side of it from the start, as rabbit_stream_reader's process: one
        # that never gets as far as open is told of as it closes (connection.closed)
        self.session = StreamSession(
            self.state.broker,
            self.endpoint(transport),
            address(transport.get_extra_info("peername")),
            self.advertised,
            address(transport.get_extra_info("sockname")),
            self.traffic,
        )

    @property
    def open(self) -> bool:
        return self.conn.open

    def writing_paused(self, paused: bool) -> None:
        """A peer that does not read is sent no chunk and is not read (its confirms would
        pile up), as TCP back pressure holds a RabbitMQ stream connection."""
        self.flow.writing_paused = paused
        if self.transport is not None and self.phase not in OVER:
            self.flow.update()
        if not paused:
            self.session.feed_all()
            if not self.flow.blocked:
                self.loop.call_soon(self.resume)

    def process(self) -> None:
        conn = self.conn
        session = self.session
        flow = self.flow
        while not (flow.blocked or flow.writing_paused or self.phase in OVER):
            event = conn.next_event()
            if isinstance(event, ev.NeedData):
                break
            try:
                session.handle(event)
            except Exception:
                # a fault of ours: this connection ends, no other is touched
                log.exception("stream connection %s failed on %s", self.name, type(event).__name__)
                conn.send_close(Code.INTERNAL_ERROR, "internal error")
                break
        if session.needs_sync:
            self.state.sync()  # on disk before confirms go out, and consumers see it
            session.flush_confirms()
        if conn.has_output():
            self.flush()
        if conn.closed:
            # after answering the peer's close, its end of the socket comes next
            self.end(wait_for_peer=conn.draining)

    def closing(self, reason: str) -> None:
        self.conn.send_close(Code.OK, reason)
        self.flush()
        self.session.close()
        self.end(wait_for_peer=False)
