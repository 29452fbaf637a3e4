"""The broker: virtual hosts, users, live sessions, and what it advertises to clients."""

from __future__ import annotations

import logging
import platform
import socket
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import leveret
from leveret.broker.users import UserDatabase
from leveret.broker.vhost import VirtualHost

if TYPE_CHECKING:
    from leveret.broker.session import Session

log = logging.getLogger(__name__)

# The RabbitMQ release whose behaviour Leveret reproduces; clients that branch on the
# server version see this one.
COMPATIBLE_VERSION = "3.10.8"

CAPABILITIES: dict[str, Any] = {
    "publisher_confirms": True,
    "exchange_exchange_bindings": True,
    "basic.nack": True,
    "consumer_cancel_notify": True,
    "connection.blocked": True,
    "consumer_priorities": True,
    "authentication_failure_close": True,
    "per_consumer_qos": True,
    "direct_reply_to": True,
}


class Broker:
    def __init__(self, node_name: str | None = None) -> None:
        self.node_name = node_name or f"leveret@{socket.gethostname().split('.')[0]}"
        self.vhosts: dict[str, VirtualHost] = {}
        self.users = UserDatabase()
        self.sessions: dict[int, Session] = {}
        self._next_session = 1
        self.cluster_name = self.node_name
        # Told of changes to vhosts, users and permissions: (event, subject).
        self.listeners: list[Callable[[str, Any], None]] = []
        # Told when a session opens ("opened") or goes ("closed"), e.g. to keep its counters.
        self.session_listeners: list[Callable[[str, Session], None]] = []

    def changed(self, event: str, subject: Any = None) -> None:
        for listener in self.listeners:
            listener(event, subject)

    @classmethod
    def with_defaults(cls, node_name: str | None = None) -> Broker:
        """A broker as RabbitMQ starts: vhost '/', user guest/guest (administrator)."""
        b = cls(node_name)
        b.add_vhost("/")
        b.users.add_user("guest", "guest", ["administrator"])
        b.users.set_permissions("guest", "/", ".*", ".*", ".*")
        return b

    def add_vhost(
        self, name: str, description: str = "", tags: list[str] | None = None
    ) -> VirtualHost:
        vhost = self.vhosts.get(name)
        if vhost is None:
            vhost = VirtualHost(name, description, tags)
            self.vhosts[name] = vhost
            self.changed("vhost.added", vhost)
        return vhost

    def delete_vhost(self, name: str) -> bool:
        vhost = self.vhosts.pop(name, None)
        if vhost is None:
            return False
        for session in list(self.sessions.values()):
            if session.vhost == name:
                session.force_close("vhost deleted")
        for queue in list(vhost.queues.values()):
            vhost.remove_queue(queue)
        for key in [k for k in self.users.permissions if k[1] == name]:
            del self.users.permissions[key]
        self.changed("vhost.deleted", vhost)
        return True

    def server_properties(self) -> dict[str, Any]:
        return {
            "capabilities": dict(CAPABILITIES),  # in RabbitMQ's order, kept on the wire
            "cluster_name": self.cluster_name,
            "copyright": "Copyright (c) the Leveret authors",
            "information": f"Leveret {leveret.__version__}, an AMQP 0-9-1 broker that behaves "
            f"as RabbitMQ {COMPATIBLE_VERSION}",
            "platform": f"Python {platform.python_version()}",
            "product": "Leveret",
            "version": COMPATIBLE_VERSION,
        }

    def register(self, session: Session) -> int:
        sid = self._next_session
        self._next_session += 1
        self.sessions[sid] = session
        for listener in self.session_listeners:
            listener("opened", session)
        return sid

    def unregister(self, session: Session) -> None:
        if self.sessions.pop(session.id, None) is not None:
            for listener in self.session_listeners:
                listener("closed", session)
