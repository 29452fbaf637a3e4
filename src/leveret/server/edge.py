"""The asyncio edge of every protocol: one :class:`Edge` per client socket, joining it to a
sans-IO connection and a broker session. It does I/O only (uvicorn's shape): read, write,
schedule. What an event means, from the handshake to the close, is the session's table;
a protocol's edge adds only its sans-IO connection, how its events reach its session, and
its own output (AMQP 0-9-1's deliveries, the stream protocol's chunks).

What every edge shares:

- One :class:`Phase` tells where the socket is in its life.
- **connection_max**: the listener's :class:`~leveret.server.state.Slots`. At the limit a new
  connection is not served, nor read, until a place frees (as RabbitMQ's Ranch listener),
  and its handshake clock has not started.
- **Writes** are coalesced: the connection's output is flushed once per loop tick (sooner
  when a protocol says so), and counted (the management API's octets and packets).
- **Timers**: the handshake's, then the grace periods of an ending.
- :class:`~leveret.server.flow.FlowControl` pulls no further events while the connection is
  held (credit flow), blocked (a resource alarm) or its peer does not read: what the peer
  sent waits in the buffer, reading pauses, and the heartbeat monitor pauses with it.
- **Every ending is graceful**, never a reset: after the conversation's close the socket
  stays open, its input read and dropped, until the peer closes its side (or a timeout),
  so that frames still in flight never meet a closed socket.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from enum import Enum, auto
from functools import partial
from typing import Any, ClassVar, Protocol

from leveret.broker.ports import Endpoint, Traffic
from leveret.server.flow import FlowControl, Heartbeats, take_transport
from leveret.server.state import CLOSING_TIMEOUT, PLAIN_LISTENER, Listener, ServerState
from leveret.server.tls import (
    certificate_login,
    connection_details,
    connection_name,
    offered_mechanisms,
)

log = logging.getLogger(__name__)

#: How long credit flow may hold a publisher on a queue's backlog before that queue is
#: taken for one whose consumers are not draining it (see leveret.broker.queues.backlog):
#: long enough for consumers that ack to drain a backlog on a busy machine, short enough
#: that a publisher feeding a stalled consumer barely notices.
HOLD_PATIENCE = 0.05


class Phase(Enum):
    """Where a client's socket is in its life (the protocol's own states are its sans-IO
    connection's)."""

    WAITING = auto()  # accepted at connection_max: not served, not read, until a place frees
    SERVING = auto()  # the conversation runs, from the protocol header to its close
    PEER_DONE = auto()  # the peer ended its side: ours ends once our output is flushed
    ENDING = auto()  # the conversation is over: the TCP connection is being ended
    LOST = auto()  # the transport is gone


OVER = frozenset((Phase.ENDING, Phase.LOST))


class SansIO(Protocol):
    """What the edge uses of a protocol's sans-IO connection."""

    def receive_data(self, data: bytes) -> None: ...

    def data_to_send(self) -> bytes: ...

    def has_output(self) -> bool: ...

    def send_heartbeat(self) -> None: ...

    def drop(self) -> None:
        """End without a word."""
        ...

    @property
    def closed(self) -> bool: ...


class SessionPort(Protocol):
    """What the edge tells a protocol's broker session."""

    def close(self) -> None: ...

    def set_blocked(self, blocked: bool, reason: str) -> None: ...

    def give_up_holds(self) -> None:
        """Credit flow held this publisher on a queue's backlog past the patience: those
        queues let it go (their consumers are not draining them)."""
        ...


class Confirming(Protocol):
    """A session whose publishers wait for what they published to be on disk: AMQP 0-9-1
    confirms, AMQP 1.0 outcomes."""

    def flush_confirms(self) -> None:
        """Everything is durable: what waits goes out."""
        ...

    def defer_confirms(self, generation: int) -> None:
        """What waits now waits for the store's ``generation`` to be on disk."""
        ...

    def release_confirms(self, durable: int) -> None:
        """The store is on disk up to ``durable``: what waited for it goes out."""
        ...


class Edge(asyncio.Protocol):
    """One client socket. A protocol's edge makes its connection and session, pulls the
    connection's events into the session (:meth:`process`), says when the handshake is
    over (:meth:`open`) and how to end for a broker shutdown (:meth:`closing`)."""

    #: what the protocol is called in the log
    protocol_name: ClassVar[str] = "AMQP"

    conn: SansIO
    session: SessionPort

    def __init__(self, state: ServerState, listener: Listener = PLAIN_LISTENER) -> None:
        self.state = state
        self.listener = listener
        self.loop = asyncio.get_running_loop()
        self.phase = Phase.WAITING
        self.transport: asyncio.Transport | None = None
        self.traffic = Traffic()
        # made with the transport, in connection_made
        self.flow: FlowControl
        self._heartbeats: Heartbeats
        self._flush_handle: asyncio.Handle | None = None
        self._timer: asyncio.TimerHandle | None = None  # handshake, close grace, ending
        self._patience: asyncio.TimerHandle | None = None  # a hold by a queue's backlog
        self._awaiting = 0  # the last store generation this connection's confirms wait for

    # ------------------------------------------------------ confirms, group commit
    def confirm_when_durable(self, session: Confirming) -> None:
        """What this batch published is made durable (the store writes now and starts its
        fsync in a thread: group commit) before its confirms go out, and before stream
        consumers see it."""
        generation = self.state.commit()
        if not generation:
            session.flush_confirms()
            return
        session.defer_confirms(generation)
        if generation != self._awaiting:
            self._awaiting = generation
            self.state.when_durable(generation, partial(self._durable, session))

    def _durable(self, session: Confirming, generation: int) -> None:
        if self.phase in OVER or self.transport is None:
            return
        session.release_confirms(generation)
        if self.conn.has_output():
            self.flush()

    # ----------------------------------------------------- what a protocol adds
    def greet(self, transport: asyncio.BaseTransport) -> None:
        """The transport is here: make the session (``self.session``)."""
        raise NotImplementedError

    def process(self) -> None:
        """Pull the connection's events into the session until none is buffered or flow
        control stops; end the socket when the conversation is over."""
        raise NotImplementedError

    @property
    def open(self) -> bool:
        """The handshake is over (its clock stops)."""
        raise NotImplementedError

    def closing(self, reason: str) -> None:
        """Broker shutdown of a connection that is open: the protocol's close."""
        self.drop()

    def writing_paused(self, paused: bool) -> None:
        """The transport's write buffer crossed its high-water mark (or fell back)."""

    def closing_timeout(self) -> int:
        """How long an ending waits for the peer's end of the socket: the heartbeat
        interval agreed (at most 30 s, as RabbitMQ)."""
        return int(getattr(self.conn, "heartbeat", 0))

    def endpoint(self, transport: asyncio.BaseTransport) -> Endpoint[Any, Any]:
        """What the session is told of this socket: the connection, this edge, the SASL
        mechanisms its listener offers (EXTERNAL where it verifies client certificates),
        the transport's details and who its client certificate names."""
        listener = self.listener
        return Endpoint(
            self.conn,
            self,
            offered_mechanisms(self.state.mechanisms, listener.tls and listener.verify_peer),
            connection_details(transport),
            partial(certificate_login, transport, self.state.cert_login_from),
        )

    # ---------------------------------------------------------------- transport
    @property
    def name(self) -> str:
        return connection_name(self.transport)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.flow = flow = take_transport(transport, self.traffic)
        self._heartbeats = Heartbeats(self.loop, flow, self._send_heartbeat, self._silent)
        self.greet(transport)
        slots = self.listener.slots
        if slots.full():
            # As RabbitMQ's listener at connection_max: not served until a place frees;
            # what the client sends waits unread, and its handshake clock has not started.
            transport.pause_reading()  # type: ignore[attr-defined]
            slots.waiting.append(self)
            return
        self._serve()

    def hand_over(self, edge: Edge, data: bytes) -> None:
        """The protocol header says another protocol speaks on this socket (AMQP 1.0 on
        the AMQP port, as RabbitMQ 4 chooses by the header): ``edge`` takes the socket,
        its place under connection_max and its handshake clock, and ``data``, what was
        read so far. This edge is done without a trace."""
        transport = self.transport
        assert transport is not None and self.phase is Phase.SERVING
        self.stop_timer()
        self._heartbeats.stop()
        self.state.connections.discard(self)
        self.transport = None
        self.phase = Phase.LOST
        transport.set_protocol(edge)
        edge.transport = transport
        edge.traffic = self.traffic
        edge.flow = self.flow
        edge._heartbeats = Heartbeats(self.loop, edge.flow, edge._send_heartbeat, edge._silent)
        edge.greet(transport)
        edge.phase = Phase.SERVING
        self.state.connections.add(edge)
        edge.set_timer(self.state.limits.handshake_timeout, edge._handshake_timeout)
        edge.conn.receive_data(data)
        edge.process()

    def admit(self) -> None:
        """A place freed under connection_max: serve this connection, and read what it
        sent while it waited."""
        if self.phase is not Phase.WAITING or self.transport is None:
            return
        self._serve()
        self.transport.resume_reading()
        self.loop.call_soon(self.resume)

    def _serve(self) -> None:
        """Count it, start its handshake clock, read it."""
        self.phase = Phase.SERVING
        self.listener.slots.active += 1
        self.state.connections.add(self)
        self.set_timer(self.state.limits.handshake_timeout, self._handshake_timeout)

    def later(self, delay: float, callback: Callable[[], None]) -> None:
        """Run ``callback`` on the loop after ``delay`` seconds (a session's own timers)."""
        self.loop.call_later(delay, callback)

    def set_timer(self, delay: float, callback: Any) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer = self.loop.call_later(delay, callback)

    def stop_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _handshake_timeout(self) -> None:
        self._timer = None
        if not self.open and self.phase not in OVER:
            log.info("%s handshake timed out for %s", self.protocol_name, self.name)
            self.drop()

    # ------------------------------------------------------------- credit flow
    def hold(self) -> None:
        """Credit flow holds this publisher: its socket is not read until it is released
        (:meth:`released`). A hold by a queue's backlog is given up after
        :data:`HOLD_PATIENCE`."""
        self.flow.hold()
        if self._patience is None:
            self._patience = self.loop.call_later(HOLD_PATIENCE, self._impatient)

    def released(self) -> None:
        """Credit came back: read again, and handle what waited in the buffer."""
        if self._patience is not None:
            self._patience.cancel()
            self._patience = None
        if self.phase not in OVER and self.flow.release():
            self.loop.call_soon(self.resume)

    def _impatient(self) -> None:
        self._patience = None
        if self.flow.held and self.phase not in OVER:
            self.session.give_up_holds()

    def schedule(self) -> None:
        """Output to flush at the end of this turn of the loop."""
        if self._flush_handle is None:
            self._flush_handle = self.loop.call_soon(self.flush)

    def flush(self) -> None:
        self._flush_handle = None
        data = self.conn.data_to_send()
        transport = self.transport
        if data and transport is not None:
            transport.write(data)
            self.flow.sent = time.monotonic()
            traffic = self.traffic
            traffic.send_oct += len(data)
            traffic.send_cnt += 1

    def pause_writing(self) -> None:
        self.writing_paused(True)

    def resume_writing(self) -> None:
        self.writing_paused(False)

    def eof_received(self) -> bool:
        """The peer closed its side: we finish ours once our output is flushed."""
        if self.phase is Phase.SERVING:
            self.phase = Phase.PEER_DONE
        self.session.close()
        self.flush()
        return False  # the transport closes itself after flushing

    def connection_lost(self, exc: Exception | None) -> None:
        state = self.state
        slots = self.listener.slots
        if self.phase is Phase.WAITING:
            slots.waiting.remove(self)
        elif self in state.connections:
            state.connections.discard(self)
            slots.active -= 1
            while slots.waiting and not slots.full():
                slots.waiting.pop(0).admit()
        self.phase = Phase.LOST
        self._heartbeats.stop()
        self.stop_timer()
        if self._patience is not None:
            self._patience.cancel()
            self._patience = None
        self.transport = None
        self.session.close()
        self.lost()
        state.sync()

    def lost(self) -> None:
        """The transport is gone: what the connection keeps for it goes."""

    def abort(self) -> None:
        """End at once (shutdown, after the grace period)."""
        if self.transport is not None:
            self.flush()
            self.transport.close()

    # ------------------------------------------------------------------- ending
    def end(self, wait_for_peer: bool, eof: bool = False) -> None:
        """The conversation is over: flush what is left, then end the TCP connection
        gracefully. With ``wait_for_peer`` the socket stays open, its input dropped, until
        the peer closes its side (or a timeout): closing a socket with unread input would
        send the peer a reset instead of an end-of-file."""
        transport = self.transport
        if self.phase in OVER or transport is None:
            return
        peer_done = self.phase is Phase.PEER_DONE
        self.phase = Phase.ENDING
        self.flow.stop()  # what the peer still sends is read, and dropped
        self._heartbeats.stop()
        self.flush()
        if not wait_for_peer or peer_done:
            transport.close()
            return
        if eof and transport.can_write_eof():
            transport.write_eof()
        transport.resume_reading()  # input is read and dropped until the peer's end
        heartbeat = self.closing_timeout()
        timeout = heartbeat if 0 < heartbeat < CLOSING_TIMEOUT else None
        self.set_timer(timeout or CLOSING_TIMEOUT, transport.close)

    def drop(self) -> None:
        """End without a word, as RabbitMQ does for some handshake errors."""
        self.conn.drop()
        self.session.close()
        self.end(wait_for_peer=False)

    # -------------------------------------------------------------------- input
    def data_received(self, data: bytes) -> None:
        self.flow.heard = time.monotonic()
        traffic = self.traffic
        traffic.recv_oct += len(data)
        traffic.recv_cnt += 1
        # While the connection drains after a close, input is still read (AMQP 0-9-1
        # answers a further connection.close); the connection drops what it does not take.
        self.conn.receive_data(data)
        if self.phase is Phase.WAITING:
            # not served yet (connection_max): keep it, unread, until admitted (uvloop may
            # read once even though reading was paused in connection_made)
            if self.transport is not None:
                self.transport.pause_reading()
            return
        self.process()

    def resume(self) -> None:
        """Handle what waited in the buffer (after credit came back, an alarm cleared, a
        place freed)."""
        if self.phase not in OVER and self.transport is not None:
            self.process()

    # --------------------------------------------------------------- heartbeats
    def start_heartbeats(self, interval: int, send_every: float | None = None) -> None:
        self._heartbeats.start(interval, send_every)

    def _send_heartbeat(self) -> None:
        self.conn.send_heartbeat()
        self.flush()

    def _silent(self, interval: int) -> None:
        # as RabbitMQ's readers word it, at its level
        log.error(
            "closing %s connection (%s):\nmissed heartbeats from client, timeout: %ds",
            self.protocol_name,
            self.name,
            interval,
        )
        self.drop()

    # ------------------------------------------------------- resource alarms
    def alarm_raised(self) -> None:
        """A resource alarm began: most protocols block a publisher at its next publish
        (see :meth:`set_blocked`); an edge that acts at once says so here."""

    def set_blocked(self, blocked: bool, reason: str) -> None:
        """A resource alarm blocks this connection's publishers (its socket is not read),
        or no longer does."""
        if blocked == self.flow.blocked or self.phase in OVER or self.transport is None:
            return
        self.flow.block(blocked)
        self.session.set_blocked(blocked, reason)  # its state, and the client is told
        if not blocked and not self.flow.paused:
            self.loop.call_soon(self.resume)

    def shutdown(self, reason: str) -> None:
        """Broker shutdown: the protocol's close to a client whose connection is open."""
        if self.phase in OVER:
            return
        if self.open:
            self.closing(reason)
        else:
            self.drop()


def address(address: object) -> tuple[str, int] | None:
    """A socket address as host and port (an IPv6 one has four parts)."""
    if isinstance(address, tuple) and len(address) >= 2:
        return str(address[0]), int(address[1])
    return None
