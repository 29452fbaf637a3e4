"""The asyncio.Protocol of the stream-protocol listener: joins a socket, a sans-IO stream
:class:`~leveret.protocol.stream.connection.ServerConnection` and a broker
:class:`~leveret.broker.stream_session.StreamSession`.

It does I/O only: bytes read go into the connection, events are handed to the session,
output is flushed once per loop tick. After a batch of publishes the stores are synced
before their confirms go out. A Deliver frame is written as its header and the chunk's
own bytes; while the socket does not drain (pause_writing) no chunk is read at all."""

from __future__ import annotations

import asyncio
import logging
import os
import time

from leveret.broker.ports import ChunkRef, Traffic
from leveret.broker.stream_session import StreamSession, count_error
from leveret.protocol.stream import encode
from leveret.protocol.stream import events as ev
from leveret.protocol.stream.connection import Phase, ServerConnection
from leveret.protocol.stream.spec import Code
from leveret.server.flow import FlowControl, Heartbeats, take_transport
from leveret.server.state import ServerState
from leveret.server.tls import (
    connection_details,
    connection_name,
    login_name,
    offered_mechanisms,
    peer_certificate,
)

log = logging.getLogger(__name__)


class StreamProtocol(asyncio.Protocol):
    def __init__(
        self,
        state: ServerState,
        advertised: tuple[str, int],
        frame_max: int,
        heartbeat: int,
        tls: bool = False,
        verify_peer: bool = False,
    ) -> None:
        self.state = state
        self.tls = tls
        self.verify_peer = verify_peer
        self.advertised = advertised
        self.loop = asyncio.get_running_loop()
        self.conn = ServerConnection(frame_max, heartbeat)
        self.transport: asyncio.Transport | None = None
        self.session: StreamSession | None = None
        self.traffic = Traffic()
        self._flush_scheduled = False
        self._ending = False
        # made with the transport, in connection_made
        self.flow: FlowControl
        self._heartbeats: Heartbeats
        self._timer: asyncio.TimerHandle | None = None
        self._sendfile_fd = -1  # the plain TCP socket chunks are sent to with sendfile

    # ----------------------------------------------------------- session output
    def send(self, data: bytes) -> None:
        self.conn.send(data)
        self._schedule()

    def send_chunk(self, subscription_id: int, chunk: ChunkRef) -> None:
        """A Deliver frame: its header, then the stored chunk. On a plain TCP socket whose
        transport has nothing queued, the chunk goes from the file to the socket with
        ``os.sendfile`` (no copy through Python); what the socket does not take at once,
        and everything on TLS, is read and queued on the transport (at most one chunk
        beyond the high-water mark: writing pauses the deliveries)."""
        transport = self.transport
        if transport is None:
            return
        pending = self.conn.data_to_send()  # what was queued before goes first
        header = encode.deliver_header(subscription_id, chunk.size)
        size, fd, position = chunk.size, chunk.fd, chunk.position
        sent = 0
        sock = self._sendfile_fd
        if sock >= 0 and transport.get_write_buffer_size() == 0:
            transport.write(pending + header if pending else header)
            if transport.get_write_buffer_size() == 0:
                try:
                    sent = os.sendfile(sock, fd, position, size)
                except BlockingIOError:
                    sent = 0
                except OSError:  # a socket sendfile refuses: read and write instead
                    self._sendfile_fd = -1
                    sent = 0
            if sent < size:
                transport.write(os.pread(fd, size - sent, position + sent))
        else:
            transport.writelines((pending, header, os.pread(fd, size, position)))
        traffic = self.traffic
        traffic.send_oct += len(pending) + len(header) + size
        traffic.send_cnt += 1
        self.flow.sent = time.monotonic()

    def writable(self) -> bool:
        return not self.flow.writing_paused and self.transport is not None and not self._ending

    def force_close(self, reason: str) -> None:
        """Management closes it: as rabbit_stream_reader stops on a shutdown call, the
        socket closes without a Close frame."""
        log.info("forcing stream connection %s closing: %s", self.name, reason)
        self._end()

    # --------------------------------------------------------------- transport
    @property
    def name(self) -> str:
        return connection_name(self.transport)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.flow = take_transport(transport, self.traffic)
        self._heartbeats = Heartbeats(self.loop, self.flow, self._send_heartbeat, self._silent)
        sock = transport.get_extra_info("socket")
        if not self.tls and sock is not None and hasattr(os, "sendfile"):
            self._sendfile_fd = sock.fileno()
        self.state.connections.add(self)
        # the broker's side of it from the start, as rabbit_stream_reader's process: one
        # that never gets as far as open is told of as it closes (connection.closed)
        peer = transport.get_extra_info("peername")
        local = transport.get_extra_info("sockname")
        self.session = StreamSession(
            self.state.broker,
            self,
            _address(peer),
            self.advertised,
            offered_mechanisms(self.state.mechanisms, self.tls and self.verify_peer),
            _address(local),
            self.traffic,
            connection_details(transport),
        )
        self._timer = self.loop.call_later(
            self.state.limits.handshake_timeout, self._handshake_timeout
        )

    def _handshake_timeout(self) -> None:
        self._timer = None
        if self.conn.phase is not Phase.OPEN and not self._ending:
            log.info("stream handshake timed out for %s", self.name)
            self._end()

    def connection_lost(self, exc: Exception | None) -> None:
        self.state.connections.discard(self)
        self._heartbeats.stop()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self.transport = None
        if self.session is not None:
            self.session.close()

    def pause_writing(self) -> None:
        """The peer does not read what we send: no chunk is read for it, and what it
        sends waits unread (its confirms would pile up here otherwise), as TCP back
        pressure holds a RabbitMQ stream connection."""
        self.flow.writing_paused = True
        self._update_reading()

    def resume_writing(self) -> None:
        self.flow.writing_paused = False
        self._update_reading()
        if self.session is not None:
            self.session.feed_all()
        if not self.flow.blocked:
            self.loop.call_soon(self._resume)

    def _update_reading(self) -> None:
        if self.transport is not None and not self._ending:
            self.flow.update()

    def _schedule(self) -> None:
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self.loop.call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_scheduled = False
        data = self.conn.data_to_send()
        if data and self.transport is not None:
            self.transport.write(data)
            self.traffic.send_oct += len(data)
            self.traffic.send_cnt += 1
            self.flow.sent = time.monotonic()

    def _end(self) -> None:
        """Flush what is left and close the socket."""
        if self._ending or self.transport is None:
            return
        self._ending = True
        self._heartbeats.stop()
        self._flush()
        if self.session is not None:
            self.session.close()
        self.transport.close()

    # ------------------------------------------------------------------- input
    def data_received(self, data: bytes) -> None:
        self.flow.heard = time.monotonic()
        self.traffic.recv_oct += len(data)
        self.traffic.recv_cnt += 1
        if self._ending:
            return
        self.conn.receive_data(data)
        self._process()

    def _process(self) -> None:
        conn = self.conn
        published = False
        flow = self.flow
        while not (flow.blocked or flow.writing_paused or self._ending):
            event = conn.next_event()
            if event is ev.NEED_DATA:
                break
            session = self.session
            try:
                if isinstance(event, ev.Publish):
                    if session is not None:
                        session.publish(event)
                        published = True
                elif session is not None and conn.phase is Phase.OPEN and _is_command(event):
                    session.handle(event)  # type: ignore[arg-type]
                    # as osiris's writer: a stored offset is written (a tracking chunk,
                    # or the trailer of this batch's chunk) once the batch is read
                    published = published or isinstance(event, ev.StoreOffset)
                else:
                    self._control(event)  # type: ignore[arg-type]
            except Exception:
                # a fault of ours: this connection ends, no other is touched
                log.exception("stream connection %s failed on %s", self.name, type(event).__name__)
                conn.send_close(Code.INTERNAL_ERROR, "internal error")
                break
        if published and self.session is not None:
            self.state.sync()  # on disk before confirms go out, and consumers see it
            self.session.flush_confirms()
        if conn.has_output():
            self._flush()
        if conn.closed and not self._ending:
            self._end()

    def _control(self, event: ev.Event) -> None:
        conn = self.conn
        if isinstance(event, ev.PeerProperties):
            assert self.session is not None
            props = self.session.peer_properties(event.properties)
            conn.send(encode.peer_properties(event.correlation_id, Code.OK, props))
        elif isinstance(event, ev.SaslHandshake):
            mechanisms = self.session.mechanisms if self.session else ()
            conn.send(encode.sasl_handshake(event.correlation_id, Code.OK, mechanisms))
        elif isinstance(event, ev.SaslAuthenticate):
            assert self.session is not None
            external, refusal = None, "connection peer presented no TLS (x.509) certificate"
            if event.mechanism == "EXTERNAL" and self.transport is not None:
                cert = peer_certificate(self.transport)
                if cert is not None:
                    external = login_name(cert, self.state.cert_login_from)
                    refusal = "no name found"  # (rabbit_auth_mechanism_ssl's words)
            code = self.session.authenticate(event.mechanism, event.data, external, refusal)
            conn.send(encode.sasl_authenticate(event.correlation_id, code))
            if code == Code.OK:
                conn.send_tune()
            else:
                conn.drop()  # as RabbitMQ: the connection fails after the answer
        elif isinstance(event, ev.Tune):
            if self.session is not None:
                self.session.tuned(event.frame_max, event.heartbeat)
            self._heartbeats.start(event.heartbeat)
        elif isinstance(event, ev.Open):
            assert self.session is not None
            code = self.session.open(event.virtual_host)
            props = self.session.connection_properties() if code == Code.OK else {}
            conn.send_open(event.correlation_id, code, props)
            if code == Code.OK and self._timer is not None:
                self._timer.cancel()
                self._timer = None
        elif isinstance(event, ev.Close):
            if self.session is not None:
                self.session.close()
            conn.send_close_response(event.correlation_id)
        elif isinstance(event, ev.CloseResponse):
            pass  # the connection is closed now: the socket ends after the flush
        elif isinstance(event, ev.UnknownFrame):
            log.warning("unknown stream command %#x from %s", event.key, self.name)
            count_error(self.state.broker, Code.UNKNOWN_FRAME)
            conn.send_close(Code.UNKNOWN_FRAME, "unknown frame")
        elif isinstance(event, ev.FrameTooLarge):
            log.warning("stream frame of %d bytes from %s: too large", event.size, self.name)
            count_error(self.state.broker, Code.FRAME_TOO_LARGE)
            conn.send_close(Code.FRAME_TOO_LARGE, "frame too large")
        elif isinstance(event, ev.ConnectionFailed):
            log.info("stream connection %s failed: %s", self.name, event.reason)

    # -------------------------------------------------------------- heartbeats
    def _send_heartbeat(self) -> None:
        self.conn.send_heartbeat()
        self._flush()

    def _silent(self, interval: int) -> None:
        log.error("closing stream connection %s: missed heartbeats", self.name)
        self._end()

    # ------------------------------------------------- driven by the server
    def set_blocked(self, blocked: bool, reason: str) -> None:
        """A resource alarm: stop reading (publishers wait), as RabbitMQ blocks."""
        if blocked == self.flow.blocked or self.transport is None or self._ending:
            return
        self.flow.blocked = blocked
        if self.session is not None:
            self.session.set_blocked(blocked)
        self._update_reading()
        if not blocked:
            self.loop.call_soon(self._resume)

    def _resume(self) -> None:
        if self.transport is not None and not self._ending:
            self._process()

    def shutdown(self, reason: str) -> None:
        if self.transport is None or self._ending:
            return
        if self.conn.phase is Phase.OPEN:
            self.conn.send_close(Code.OK, reason)
            self._flush()
        self._end()

    def abort(self) -> None:
        if self.transport is not None:
            self._flush()
            self.transport.close()


_CONTROL = (
    ev.PeerProperties,
    ev.SaslHandshake,
    ev.SaslAuthenticate,
    ev.Tune,
    ev.Open,
    ev.Close,
    ev.CloseResponse,
    ev.UnknownFrame,
    ev.FrameTooLarge,
    ev.ConnectionFailed,
)


def _address(address: object) -> tuple[str, int] | None:
    """A socket address as host and port (an IPv6 one has four parts)."""
    if isinstance(address, tuple) and len(address) >= 2:
        return str(address[0]), int(address[1])
    return None


def _is_command(event: object) -> bool:
    return not isinstance(event, _CONTROL)
