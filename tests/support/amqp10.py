"""An AMQP 1.0 client for tests: python-qpid-proton's blocking connection, unmodified, with
sessions of the test's choosing (a proton BlockingConnection puts every link on one)."""

from __future__ import annotations

import contextlib
from typing import Any

from proton import Endpoint
from proton._utils import Fetcher  # not exported by proton.utils
from proton.utils import BlockingConnection, BlockingReceiver, BlockingSender

ACTIVE = Endpoint.REMOTE_ACTIVE
CLOSED = Endpoint.REMOTE_CLOSED


class Amqp10Client:
    """One AMQP 1.0 connection to ``vhost`` (the open's hostname ``vhost:<name>``, as
    RabbitMQ reads it), logged in with SASL PLAIN."""

    def __init__(
        self, host: str, port: int, vhost: str, user: str = "guest", password: str = "guest"
    ) -> None:
        self.blocking = BlockingConnection(
            f"amqp://{user}:{password}@{host}:{port}",
            allowed_mechs="PLAIN",
            virtual_host=f"vhost:{vhost}",
            timeout=30,
        )
        self.conn = self.blocking.conn

    def session(self, wait: bool = True) -> Any:
        """A new session, begun (and, with ``wait``, answered: begun or refused)."""
        session = self.conn.session()
        session.open()
        if wait:
            self.wait(lambda: bool(session.state & (ACTIVE | CLOSED)) or self.closed)
        return session

    def sender(self, session: Any, address: str) -> BlockingSender:
        return BlockingSender(
            self.blocking, self.blocking.container.create_sender(session, address)
        )

    def receiver(self, session: Any, address: str, credit: int) -> BlockingReceiver:
        fetcher = Fetcher(self.blocking, credit)
        link = self.blocking.container.create_receiver(session, address, handler=fetcher)
        return BlockingReceiver(self.blocking, link, fetcher, credit=credit)

    @property
    def closed(self) -> bool:
        """The broker closed the connection."""
        return bool(self.conn.state & CLOSED)

    def wait(self, condition: Any, timeout: float = 30) -> None:
        """Run the connection until ``condition()`` holds."""
        try:
            self.blocking.wait(condition, timeout=timeout)
        except Exception:
            if not condition():
                raise

    def pump(self, seconds: float = 0.3) -> None:
        """Let frames in flight go both ways for a moment."""
        with contextlib.suppress(Exception):  # its timeout: the moment passed
            self.blocking.wait(lambda: False, timeout=seconds)

    def close(self) -> None:
        with contextlib.suppress(Exception):  # already closed by the broker
            self.blocking.close()
