"""The AMQP 1.0 engine choice, measured: Leveret's own sans-IO codec
(``leveret.protocol.amqp10``) against Apache Qpid Proton's C engine (``python-qpid-proton``:
``Transport`` push/peek/pop and ``Collector`` events), each in a minimal server that a real
AMQP 1.0 client (Proton's own reactor client, in a subprocess) publishes N small messages
to with settlement (unsettled transfers, each accepted by a disposition) and then consumes
the N back from with credit (170 at a time, topped up at half, as RabbitMQ 4 grants; each
delivery accepted by the client).

    python benchmarks/amqp10_engine.py [--messages N] [--repeat K] [--json out.json]

Reported per engine and phase: the server's CPU per transfer (``time.process_time`` of the
server process, which runs nothing but that server: the client is another process), as the
median of the rounds with the spread (min-max); rounds alternate between the engines. The
two servers do the same work: keep each message's bytes, accept what is published, send
the kept bytes back on a consumer's credit, settle what the client accepts. Neither routes
or stores anything: this is the cost of the protocol engine and its Python glue alone.
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import subprocess
import sys
import textwrap
import time
from collections import deque
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from leveret.protocol.amqp10.definitions import ACCEPTED, SaslCode  # noqa: E402
from leveret.protocol.amqp10.events import (  # noqa: E402
    AmqpHeaderReceived,
    AttachReceived,
    BeginReceived,
    CloseReceived,
    ConnectionFailed,
    DetachReceived,
    DispositionReceived,
    EndReceived,
    FlowReceived,
    NeedData,
    OpenReceived,
    SaslHeaderReceived,
    SaslInitReceived,
    TransferReceived,
)
from leveret.protocol.amqp10.server import ServerConnection  # noqa: E402

CREDIT = 170  # RabbitMQ 4's default max link credit
WINDOW = 400  # RabbitMQ 4's default max incoming window
BODY = b"x" * 64

CLIENT = textwrap.dedent(
    """
    import sys
    from proton import Message
    from proton.handlers import MessagingHandler
    from proton.reactor import Container

    url, n, phase = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    body = b"x" * 64

    class Publish(MessagingHandler):
        def __init__(self):
            super().__init__(auto_settle=True)
            self.sent = self.accepted = 0
        def on_start(self, event):
            conn = event.container.connect(url, allowed_mechs="ANONYMOUS", sasl_enabled=True)
            event.container.create_sender(conn, "/queues/bench")
        def on_sendable(self, event):
            while event.sender.credit and self.sent < n:
                event.sender.send(Message(body=body))
                self.sent += 1
        def on_accepted(self, event):
            self.accepted += 1
            if self.accepted == n:
                event.connection.close()

    class Consume(MessagingHandler):
        def __init__(self):
            super().__init__(prefetch=170, auto_accept=True)
            self.received = 0
        def on_start(self, event):
            conn = event.container.connect(url, allowed_mechs="ANONYMOUS", sasl_enabled=True)
            event.container.create_receiver(conn, "/queues/bench")
        def on_message(self, event):
            self.received += 1
            if self.received == n:
                event.connection.close()

    Container(Publish() if phase == "publish" else Consume()).run()
    """
)


class OwnEngine:
    """A minimal server on leveret.protocol.amqp10."""

    name = "leveret"

    def __init__(self, store: deque[bytes]) -> None:
        self.conn = ServerConnection()
        self.store = store
        self.transfers = 0
        self.senders: dict[tuple[int, int], int] = {}  # our sending links: credit

    def feed(self, data: bytes) -> bytes:
        conn = self.conn
        conn.receive_data(data)
        store = self.store
        while not isinstance(event := conn.next_event(), NeedData):
            if isinstance(event, TransferReceived):
                self.transfers += 1
                store.append(event.payload)
                ch = event.channel
                if not event.settled:
                    conn.send_disposition(ch, True, event.delivery_id, state=ACCEPTED)
                link = conn.link(ch, event.handle)
                if link.credit <= CREDIT // 2:
                    conn.grant_credit(ch, event.handle, CREDIT)
                if conn.session(ch).incoming_window <= WINDOW // 2:
                    conn.send_session_flow(ch, WINDOW)
            elif isinstance(event, DispositionReceived):
                self.transfers += event.last - event.first + 1
                if not event.settled:
                    conn.send_disposition(event.channel, False, event.first, event.last)
            elif isinstance(event, FlowReceived):
                if event.handle is not None and event.credit:
                    self._send(event.channel, event.handle)
            elif isinstance(event, SaslHeaderReceived):
                conn.send_sasl_mechanisms(("PLAIN", "ANONYMOUS"))
            elif isinstance(event, SaslInitReceived):
                conn.send_sasl_outcome(SaslCode.OK)
            elif isinstance(event, AmqpHeaderReceived):
                conn.send_amqp_header()
            elif isinstance(event, OpenReceived):
                conn.send_open("leveret", idle_time_out=30000)
            elif isinstance(event, BeginReceived):
                conn.send_begin(event.channel, incoming_window=WINDOW, handle_max=255)
            elif isinstance(event, AttachReceived):
                a = event.attach
                conn.send_attach(
                    event.channel, event.handle, source=a.source, target=a.target,
                    initial_delivery_count=0,
                )  # fmt: skip
                if conn.link(event.channel, event.handle).role:
                    conn.grant_credit(event.channel, event.handle, CREDIT)
            elif isinstance(event, DetachReceived):
                if not event.complete:
                    conn.send_detach(event.channel, event.handle, event.closed)
            elif isinstance(event, EndReceived):
                if not event.complete:
                    conn.send_end(event.channel)
            elif isinstance(event, CloseReceived):
                conn.send_close()
            elif isinstance(event, ConnectionFailed):
                raise RuntimeError(event.error)
        return conn.data_to_send()

    def _send(self, channel: int, handle: int) -> None:
        conn = self.conn
        link = conn.link(channel, handle)
        store = self.store
        tag = 0
        while link.credit > 0 and store:
            tag += 1
            conn.send_transfer(channel, handle, store.popleft(), tag.to_bytes(4, "big"))

    @property
    def done(self) -> bool:
        return self.conn.closed


class ProtonEngine:
    """The same server on Proton's engine (C), driven from Python."""

    name = "proton"

    def __init__(self, store: deque[bytes]) -> None:
        from proton import Collector, Connection, Transport

        self.proton = __import__("proton")
        self.store = store
        self.transfers = 0
        self.conn = Connection()
        self.collector = Collector()
        self.conn.collect(self.collector)
        self.transport = Transport(Transport.SERVER)
        self.transport.bind(self.conn)
        sasl = self.transport.sasl()
        sasl.allowed_mechs("ANONYMOUS")
        self.tag = 0

    def feed(self, data: bytes) -> bytes:
        p = self.proton
        Event = p.Event
        transport = self.transport
        if data:
            transport.push(data)
        else:
            transport.close_tail()
        collector = self.collector
        while (event := collector.peek()) is not None:
            kind = event.type
            if kind == Event.DELIVERY:
                delivery = event.delivery
                link = delivery.link
                if link.is_receiver:
                    # every whole delivery at the head of the link (one event may
                    # stand for several)
                    while (d := link.current) is not None and d.readable and not d.partial:
                        self.store.append(link.recv(d.pending))
                        self.transfers += 1
                        link.advance()  # before settling: settling the current advances too
                        if not d.settled:
                            d.update(p.Delivery.ACCEPTED)
                        d.settle()
                    if link.credit <= CREDIT // 2:
                        link.flow(CREDIT - link.credit)
                elif delivery.remote_state or delivery.settled:
                    self.transfers += 1
                    delivery.settle()
            elif kind == Event.LINK_FLOW:
                link = event.link
                if link.is_sender:
                    self._send(link)
            elif kind == Event.CONNECTION_REMOTE_OPEN:
                self.conn.container = "proton"
                self.conn.open()
            elif kind == Event.SESSION_REMOTE_OPEN:
                event.session.incoming_capacity = WINDOW * 2048
                event.session.open()
            elif kind == Event.LINK_REMOTE_OPEN:
                link = event.link
                link.source.copy(link.remote_source)
                link.target.copy(link.remote_target)
                link.open()
                if link.is_receiver:
                    link.flow(CREDIT)
                else:
                    self._send(link)
            elif kind == Event.LINK_REMOTE_CLOSE:
                event.link.close()
            elif kind == Event.SESSION_REMOTE_CLOSE:
                event.session.close()
            elif kind == Event.CONNECTION_REMOTE_CLOSE:
                self.conn.close()
            collector.pop()
        out = []
        while (pending := transport.pending()) > 0:
            out.append(transport.peek(pending))
            transport.pop(pending)
        return b"".join(out)

    def _send(self, link: Any) -> None:
        store = self.store
        while link.credit > 0 and store:
            self.tag += 1
            link.delivery(self.tag.to_bytes(4, "big"))
            link.send(store.popleft())
            link.advance()

    @property
    def done(self) -> bool:
        return bool(self.transport.closed) or self.transport.pending() < 0


def serve_once(engine: Any, listener: socket.socket, client: subprocess.Popen[bytes]) -> float:
    """Serve one client connection to its end; the server's CPU seconds for it."""
    sock, _ = listener.accept()
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    start = time.process_time()
    try:
        while True:
            data = sock.recv(262144)
            out = engine.feed(data)
            if out:
                sock.sendall(out)
            if not data or engine.done:
                break
    finally:
        cpu = time.process_time() - start
        sock.close()
        client.wait(timeout=120)
    return cpu


def round_(engine_cls: Any, n: int) -> dict[str, float]:
    store: deque[bytes] = deque()
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    url = f"amqp://127.0.0.1:{listener.getsockname()[1]}"
    result = {}
    for phase in ("publish", "consume"):
        engine = engine_cls(store)
        client = subprocess.Popen([sys.executable, "-c", CLIENT, url, str(n), phase])
        try:
            cpu = serve_once(engine, listener, client)
        finally:
            if client.poll() is None:
                client.kill()
                client.wait()
        if engine.transfers < n:
            raise RuntimeError(f"{engine.name} {phase}: {engine.transfers} of {n} transfers")
        result[phase] = cpu / n * 1e6
    listener.close()
    if store:
        raise RuntimeError(f"{len(store)} messages left")
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=20000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    engines = (OwnEngine, ProtonEngine)
    rounds: dict[str, dict[str, list[float]]] = {
        e.name: {"publish": [], "consume": []} for e in engines
    }
    for _ in range(args.repeat):
        for engine in engines:
            got = round_(engine, args.messages)
            for phase, value in got.items():
                rounds[engine.name][phase].append(value)
    report: dict[str, Any] = {"messages": args.messages, "repeat": args.repeat, "engines": {}}
    print(f"server CPU µs per transfer, {args.messages} messages, {args.repeat} rounds")
    print(f"{'engine':<10}{'phase':<10}{'median':>8}  spread")
    for name, phases in rounds.items():
        report["engines"][name] = {}
        for phase, values in phases.items():
            median = statistics.median(values)
            report["engines"][name][phase] = {"median": median, "all": values}
            print(f"{name:<10}{phase:<10}{median:8.1f}  {min(values):.1f}-{max(values):.1f}")
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
