"""The broker: virtual hosts, users, live connections, and what it advertises to clients."""

from __future__ import annotations

import json
import logging
import platform
import socket
from collections import Counter
from typing import TYPE_CHECKING, Any

import leveret
from leveret.broker import plugins
from leveret.broker.auth_attempts import AuthAttempts
from leveret.broker.compat import RABBITMQ_3_10, RabbitMQ
from leveret.broker.events import (
    ConnectionClosed,
    ConnectionOpened,
    GlobalParameterCleared,
    GlobalParameterSet,
    Observers,
    PermissionChanged,
    TopicPermissionChanged,
    TopicPermissionCleared,
    TopicPermissionSet,
    UserChanged,
    UserEvent,
    UserLimitsChanged,
    UserLimitsCleared,
    UserLimitsSet,
    UserPasswordChanged,
    UserPasswordCleared,
    UserTagsSet,
    VhostAdded,
    VhostChanged,
    VhostDeleted,
)
from leveret.broker.interceptors import Interceptors
from leveret.broker.memory import MemoryBudget, release
from leveret.broker.reply_to import DirectReplyTo
from leveret.broker.stream_sac import SacCoordinator
from leveret.broker.users import (
    TopicPermission,
    User,
    UserDatabase,
    hash_password,
    new_user_hash,
)
from leveret.broker.vhost import VirtualHost
from leveret.protocol import spec

if TYPE_CHECKING:
    from leveret.broker.ports import ConnectionInfo, Storage

log = logging.getLogger(__name__)

# The RabbitMQ release whose behaviour Leveret reproduces by default; clients that branch
# on the server version see this one, or the one of ``BrokerCore.compat`` (4.2 mode).
COMPATIBLE_VERSION = RABBITMQ_3_10.version

DEFAULT_VHOST = "/"
# the global parameter that names the cluster (rabbit_nodes:set_cluster_name)
CLUSTER_NAME = "cluster_name"
_MISSING = object()
LOG_EXCHANGE = "amq.rabbitmq.log"

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


def default_node_name() -> str:
    """RabbitMQ's default node name: rabbit@ and the short host name (tools build
    /api/nodes/rabbit@<host> paths from it)."""
    return f"rabbit@{socket.gethostname().split('.')[0]}"


class BrokerCore:
    """The broker's domain state: vhosts, users, connections and the observers of its
    events. The server (``server.app.Server``) runs one; ``management.runner.ManagedServer``
    adds the HTTP listeners; ``leveret.Broker`` (embedded.py) runs all that in a thread."""

    def __init__(
        self,
        node_name: str | None = None,
        observers: Observers | None = None,
        storage: Storage | None = None,
        max_message_size: int = spec.DEFAULT_MAX_MESSAGE_SIZE,
        compat: RabbitMQ = RABBITMQ_3_10,
    ) -> None:
        # the RabbitMQ it behaves as (3.10.8 or 4.2): what the places that differ ask
        self.compat = compat
        # who SASL ANONYMOUS logs in as (rabbit's anonymous_login_user and _pass)
        self.anonymous_login: tuple[str, str] = ("guest", "guest")
        self.node_name = node_name or default_node_name()
        self.observers = observers or Observers()
        self.storage = storage
        self.max_message_size = max_message_size
        # ready message bodies the classic queues hold in memory, and how many they may
        self.memory = MemoryBudget()
        self.vhosts: dict[str, VirtualHost] = {}
        self.users = UserDatabase()
        # the login attempts of every protocol (rabbit_core_metrics' auth_attempt_*)
        self.auth_attempts = AuthAttempts()
        self.connections: dict[int, ConnectionInfo] = {}
        self._next_connection = 1
        # what stream-protocol connections counted, live and gone (rabbit_global_counters'
        # protocol="stream" figures): messages_received, messages_confirmed,
        # messages_delivered, and stream_error_<code name> per error answered
        self.stream_counters: Counter[str] = Counter()
        # the groups of streams' single active consumers (RabbitMQ 3.11, 4.2 mode)
        self.stream_groups = SacCoordinator()
        # the global runtime parameters by name (rabbit_runtime_parameters' global ones:
        # cluster_name, internal_cluster_id, …), their values as the JSON RabbitMQ shows
        self.global_parameters: dict[str, Any] = {}
        self.replies = DirectReplyTo(self.node_name)
        # vhosts traced (rabbit_trace keeps names: a vhost made later under one is traced)
        self.traced_vhosts: set[str] = set()
        # log.exchange: the broker's log on amq.rabbitmq.log in the default vhost
        self.log_exchange = False
        # the plugins enabled, by RabbitMQ's names (see leveret.broker.plugins)
        self.plugins: tuple[str, ...] = plugins.enabled()
        # RabbitMQ's consumer_timeout in ms (None: off), checked by consumer_timeout.check
        self.consumer_timeout: int | None = 1_800_000
        # plugin state every vhost sees, by plugin name (set up by the server)
        self.extensions: dict[str, Any] = {}
        # the user performing the operation at hand (user_who_performed_action of events)
        self.actor = ""
        # message_interceptors.incoming (RabbitMQ 3.12+): what publishes are stamped with
        self._interceptors: Interceptors | None = None

    @classmethod
    def with_defaults(cls, node_name: str | None = None) -> BrokerCore:
        """A broker as RabbitMQ starts: vhost '/', user guest/guest (administrator)."""
        b = cls(node_name)
        b.add_vhost("/")
        b.add_user("guest", "guest", ["administrator"])
        b.set_permissions("guest", "/", ".*", ".*", ".*")
        return b

    @property
    def interceptors(self) -> Interceptors | None:
        return self._interceptors

    @interceptors.setter
    def interceptors(self, interceptors: Interceptors | None) -> None:
        """The incoming interceptors, for every vhost (None or none active: off)."""
        self._interceptors = interceptors if interceptors and interceptors.active else None
        for vhost in self.vhosts.values():
            vhost.interceptors = self._interceptors

    # ------------------------------------------------------------------ vhosts
    def add_vhost(
        self, name: str, description: str = "", tags: list[str] | None = None
    ) -> VirtualHost:
        vhost = self.vhosts.get(name)
        if vhost is None:
            vhost = VirtualHost(
                name,
                description,
                tags,
                self.observers,
                self.storage,
                self.max_message_size,
                self.replies,
                self.node_name,
                self.memory,
            )
            vhost.compat = self.compat
            vhost.tracing = name in self.traced_vhosts
            vhost.interceptors = self._interceptors
            vhost.extensions.update(self.extensions)
            if self.log_exchange and name == DEFAULT_VHOST:
                # as rabbit_logger_exchange_h: topic, durable, internal
                vhost.add_builtin_exchange(LOG_EXCHANGE, "topic", internal=True)
            self.vhosts[name] = vhost
            self.observers.emit(VhostAdded(vhost))
        return vhost

    def set_tracing(self, name: str, on: bool) -> None:
        """rabbit_trace:start / stop for a vhost (by name, as RabbitMQ keeps it)."""
        if on == (name in self.traced_vhosts):
            log.info("Tracing is already %s for vhost '%s'", "enabled" if on else "disabled", name)
            return
        log.info("%s tracing for vhost '%s'", "Enabling" if on else "Disabling", name)
        if on:
            self.traced_vhosts.add(name)
        else:
            self.traced_vhosts.discard(name)
        vhost = self.vhosts.get(name)
        if vhost is not None:
            vhost.tracing = on

    def release_memory(self) -> int:
        """Memory is short: queues page, those holding the most first, until what they
        hold is within the budget's limit. The bytes released."""
        return release(self.memory, (q for v in self.vhosts.values() for q in v.queues.values()))

    def update_vhost(self, vhost: VirtualHost, description: str, tags: list[str]) -> None:
        vhost.description = description
        vhost.tags = list(tags)
        self.observers.emit(VhostChanged(vhost))

    def delete_vhost(self, name: str) -> bool:
        """Delete a vhost in RabbitMQ's order (rabbit_vhost:delete), each step told of: its
        permissions first (no new connection gets in), then each queue and each exchange,
        then the vhost itself; its connections are closed last (320)."""
        vhost = self.vhosts.get(name)
        if vhost is None:
            return False
        for user in [u for u, v in self.users.permissions if v == name]:
            self.clear_permissions(user, name)
        for user in dict.fromkeys(u for u, _ in vhost.topic_permissions):
            self.clear_topic_permissions(user, name)
        for queue in list(vhost.queues.values()):
            vhost.remove_queue(queue)
        for exchange in list(vhost.exchanges):
            vhost.delete_exchange(exchange)
        del self.vhosts[name]
        self.observers.emit(VhostDeleted(vhost))
        for connection in list(self.connections.values()):
            if connection.vhost == name:
                connection.force_close("vhost deleted")
        return True

    # ------------------------------------------------------- users, permissions
    def add_user(
        self,
        name: str,
        password: str | None = None,
        tags: list[str] | None = None,
        password_hash: str | None = None,
    ) -> None:
        self.users.add(User(name, new_user_hash(password, password_hash), list(tags or [])))
        self.observers.emit(UserChanged(name))

    def put_user(
        self,
        name: str,
        tags: list[str],
        password: str | None = None,
        password_hash: str | None = None,
    ) -> bool:
        """The management API's PUT of a user (rabbit_auth_backend_internal:put_user):
        made, or updated in place (its limits kept). An existing user given neither a
        password nor a hash has its password cleared. True when the user is new."""
        user = self.users.users.get(name)
        if user is None:
            self.add_user(name, password, tags, password_hash)
            if tags:
                self.observers.emit(UserTagsSet(name))
            return True
        told: tuple[type[UserEvent], ...]
        if password is not None:
            user.password_hash = hash_password(password)
            told = (UserPasswordChanged, UserTagsSet)
        elif password_hash is not None:
            user.password_hash = password_hash
            told = ()  # a hash is set as it is, and RabbitMQ tells no one
        else:
            user.password_hash = ""
            told = (UserTagsSet, UserPasswordCleared)
        user.tags = list(tags)
        self.observers.emit(UserChanged(name))
        for event in told:
            self.observers.emit(event(name))
        return False

    def delete_user(self, name: str) -> bool:
        if not self.users.delete_user(name):
            return False
        for vhost in self.vhosts.values():
            for key in [k for k in vhost.topic_permissions if k[0] == name]:
                del vhost.topic_permissions[key]
        self.observers.emit(UserChanged(name))
        return True

    def set_user_limits(self, name: str, limits: dict[str, int]) -> None:
        user = self.users.users.get(name)
        if user is not None:
            user.limits = dict(limits)
            self.observers.emit(UserLimitsChanged(name))

    def set_user_limit(self, name: str, limit: str, value: int) -> None:
        """One limit of a user (kept in key order, as internal_user's map)."""
        user = self.users.users.get(name)
        if user is not None:
            self.set_user_limits(name, dict(sorted({**user.limits, limit: value}.items())))
            self.observers.emit(UserLimitsSet(name, {limit: value}))

    def clear_user_limit(self, name: str, limit: str) -> None:
        """One limit of a user; RabbitMQ tells of the clearing even of a limit not set."""
        user = self.users.users.get(name)
        if user is not None:
            if limit in user.limits:
                self.set_user_limits(name, {k: x for k, x in user.limits.items() if k != limit})
            self.observers.emit(UserLimitsCleared(name))

    def set_permissions(self, user: str, vhost: str, configure: str, write: str, read: str) -> None:
        self.users.set_permissions(user, vhost, configure, write, read)
        self.observers.emit(PermissionChanged(user, vhost))

    def clear_permissions(self, user: str, vhost: str) -> bool:
        if not self.users.clear_permissions(user, vhost):
            return False
        self.observers.emit(PermissionChanged(user, vhost))
        return True

    # ---------------------------------------------------------- topic permissions
    def set_topic_permissions(
        self, user: str, vhost: str, exchange: str, write: str, read: str
    ) -> None:
        v = self.vhosts[vhost]
        perm = TopicPermission(user, vhost, exchange, write, read)
        v.topic_permissions[(user, exchange)] = perm
        self.observers.emit(TopicPermissionChanged(user, vhost))
        self.observers.emit(TopicPermissionSet(perm))

    def clear_topic_permissions(self, user: str, vhost: str, exchange: str | None = None) -> bool:
        """One exchange's topic permission of a user in a vhost, or all of them."""
        v = self.vhosts.get(vhost)
        if v is None:
            return False
        keys = [
            k
            for k in v.topic_permissions
            if k[0] == user and (exchange is None or k[1] == exchange)
        ]
        for key in keys:
            del v.topic_permissions[key]
        if keys:
            self.observers.emit(TopicPermissionChanged(user, vhost))
            self.observers.emit(TopicPermissionCleared(user, vhost, exchange))
        return bool(keys)

    def topic_permissions(
        self, user: str | None = None, vhost: str | None = None
    ) -> list[TopicPermission]:
        out: list[TopicPermission] = []
        for v in self.vhosts.values():
            if vhost is None or v.name == vhost:
                out.extend(
                    p for p in v.topic_permissions.values() if user is None or p.user == user
                )
        return out

    # ------------------------------------------------------------------ limits
    def open_connections(self, vhost: str | None = None, user: str | None = None) -> int:
        """Connections past connection.open, in a vhost or of a user."""
        return sum(
            1
            for c in self.connections.values()
            if c.vhost
            and (vhost is None or c.vhost == vhost)
            and (user is None or c.username == user)
        )

    def user_channels(self, user: str) -> int:
        return sum(c.channel_count for c in self.connections.values() if c.username == user)

    def user_limit(self, user: str, name: str) -> int | None:
        """A user's limit in force (a negative one is none)."""
        u = self.users.users.get(user)
        value = u.limits.get(name) if u is not None else None
        return value if value is not None and value >= 0 else None

    # ------------------------------------------------------- global parameters
    @property
    def cluster_name_value(self) -> Any:
        """rabbit_nodes:cluster_name, as the management API shows it: the global parameter
        cluster_name, whatever JSON it was set to, else the node's name."""
        return self.global_parameters.get(CLUSTER_NAME, self.node_name)

    @property
    def cluster_name(self) -> str:
        """The cluster name as the protocols announce it (compact JSON when the parameter
        was set to other than a string)."""
        value = self.cluster_name_value
        if isinstance(value, str):
            return value
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False)

    def set_global_parameter(self, name: str, value: Any, user: str) -> bool:
        """Set a global parameter (a value as RabbitMQ stores it); True when it is new."""
        new = name not in self.global_parameters
        self.global_parameters[name] = value
        self.observers.emit(GlobalParameterSet(name, user, value))
        return new

    def clear_global_parameter(self, name: str, user: str) -> bool:
        """Clear a global parameter; False when there was none."""
        if self.global_parameters.pop(name, _MISSING) is _MISSING:
            return False
        self.observers.emit(GlobalParameterCleared(name, user))
        return True

    @property
    def rabbitmq_version(self) -> str:
        """The RabbitMQ version it reports to clients (3.10.8, or 4.2.9 in 4.2 mode)."""
        return self.compat.version

    # ------------------------------------------------------------- connections
    def server_properties(self) -> dict[str, Any]:
        """connection.start's server properties (rabbit_reader:server_properties): the same
        keys and capabilities in 3.10.8 and 4.2.9 (v4.2.9 rabbit_reader.erl:214-257); the
        version is the one it behaves as."""
        version = self.compat.version
        return {
            "capabilities": dict(CAPABILITIES),  # in RabbitMQ's order, kept on the wire
            "cluster_name": self.cluster_name,
            "copyright": "Copyright (c) the Leveret authors",
            "information": f"Leveret {leveret.__version__}, an AMQP 0-9-1 broker that behaves "
            f"as RabbitMQ {version}",
            "platform": f"Python {platform.python_version()}",
            "product": "Leveret",
            "version": version,
        }

    def next_connection_id(self) -> int:
        cid = self._next_connection
        self._next_connection += 1
        return cid

    def register(self, connection: ConnectionInfo) -> None:
        self.connections[connection.id] = connection
        self.observers.emit(ConnectionOpened(connection))

    def unregister(self, connection: ConnectionInfo) -> None:
        if self.connections.pop(connection.id, None) is not None:
            self.observers.emit(ConnectionClosed(connection))
