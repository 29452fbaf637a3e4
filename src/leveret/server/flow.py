"""Flow control and the heartbeat monitor of one client connection, apart from the
protocol that reads and writes its socket (as uvicorn keeps its ``FlowControl``).

Reading a socket pauses for any of RabbitMQ's reasons: credit flow holds a publisher whose
consumers' sockets do not drain, a resource alarm blocks a publisher, and a stream peer
that does not read what it is sent is not read either. Reading resumes once no reason is
left. A peer that is not read is not expected to be heard: the heartbeat monitor's clock
of the peer stands still while reading is paused, and restarts when reading does."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from leveret.broker.ports import Traffic


class Readable(Protocol):
    """The part of a transport that flow control drives."""

    def pause_reading(self) -> None: ...

    def resume_reading(self) -> None: ...


class FlowControl:
    """Why a connection's socket is not read, and when the peer was last heard from and
    last sent something (the heartbeat monitor's clocks)."""

    __slots__ = ("_transport", "blocked", "heard", "held", "sent", "writing_paused")

    def __init__(self, transport: Readable) -> None:
        self._transport = transport
        self.held = False  # credit flow: a consumer this publisher feeds is congested
        self.blocked = False  # a resource alarm blocks this publisher
        self.writing_paused = False  # the peer does not read what it is sent
        self.heard = self.sent = time.monotonic()

    @property
    def paused(self) -> bool:
        return self.held or self.blocked or self.writing_paused

    def hold(self) -> None:
        self.held = True
        self._transport.pause_reading()

    def release(self) -> bool:
        """Credit came back. True when nothing else keeps reading paused."""
        self.held = False
        self.update()
        return not self.paused

    def block(self, blocked: bool) -> None:
        self.blocked = blocked
        self.update()

    def stop(self) -> None:
        """The conversation is over: what the peer still sends is read, and dropped."""
        self.held = self.blocked = self.writing_paused = False

    def update(self) -> None:
        """Pause or resume reading, as the reasons say."""
        if self.paused:
            self._transport.pause_reading()
        else:
            self.heard = time.monotonic()  # the heartbeat monitor resumes now
            self._transport.resume_reading()

    def silence(self, now: float) -> float:
        """Seconds since the peer was last heard, not counting while it is not read."""
        if self.paused:
            self.heard = now
        return now - self.heard


def take_transport(transport: asyncio.BaseTransport, traffic: Traffic) -> FlowControl:
    """A new connection's socket: its write buffer bounds (pause writing above 4 MiB,
    resume below 1 MiB), ``traffic`` told how much waits in it, and its flow control.
    uvloop's transports do not subclass asyncio.Transport, hence no isinstance check."""
    transport.set_write_buffer_limits(  # type: ignore[attr-defined]
        high=4 * 1024 * 1024, low=1024 * 1024
    )
    traffic.pending = transport.get_write_buffer_size  # type: ignore[attr-defined]
    return FlowControl(transport)  # type: ignore[arg-type]


class Heartbeats:
    """Every half interval: a heartbeat goes out when nothing else did, and a peer silent
    for two intervals is reported (``missed``), once."""

    __slots__ = ("_every", "_flow", "_handle", "_loop", "_missed", "_send")

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        flow: FlowControl,
        send: Callable[[], None],
        missed: Callable[[int], None],
    ) -> None:
        self._loop = loop
        self._flow = flow
        self._send = send
        self._missed = missed
        self._handle: asyncio.TimerHandle | None = None
        self._every = 0.0

    def start(self, interval: int, send_every: float | None = None) -> None:
        """Monitor at the interval negotiated (none when 0). ``send_every``: how often
        the peer wants to hear from us, when it is not the interval (AMQP 1.0's idle
        timeout of each side is its own); by default half the interval."""
        self.stop()
        self._every = send_every if send_every is not None else interval / 2
        tick = min(interval / 2, self._every) if interval > 0 else self._every / 2
        if tick > 0:
            self._handle = self._loop.call_later(tick, self._tick, interval)

    def stop(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def _tick(self, interval: int) -> None:
        self._handle = None
        flow = self._flow
        now = time.monotonic()
        if interval > 0 and flow.silence(now) > 2 * interval:
            self._missed(interval)
            return
        every = self._every
        if every > 0 and now - flow.sent >= every:
            self._send()
        tick = min(interval / 2, every) if interval > 0 and every > 0 else interval / 2 or every
        self._handle = self._loop.call_later(tick, self._tick, interval)
