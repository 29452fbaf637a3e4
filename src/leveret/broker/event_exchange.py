"""rabbitmq_event_exchange: the broker's events as messages on ``amq.rabbitmq.event``
(topic, durable, internal) in vhost ``/``, as RabbitMQ 3.10.8's plugin publishes them:
routing key ``queue.created``, ``consumer.deleted``, ``user.authentication.failure`` …,
the event's properties as headers (strings as longstr, integers as long, booleans,
arrays; a resource as its name plus ``vhost``; pids, IP addresses and other Erlang terms
as RabbitMQ prints them), ``timestamp_in_ms``, delivery mode 2, the timestamp property
in seconds and an empty body.

Events are collected as the broker emits them and published a moment later, once the
operation that caused them has finished (``flush``), so that they name who performed it.
Nothing is built while the exchange has no bindings, as in the plugin."""

from __future__ import annotations

import logging
import struct
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from leveret.broker import amqp10_events
from leveret.broker import events as ev
from leveret.broker.clock import wall_ms
from leveret.broker.erlterms import Term, atom, binary, ip_term, table_terms, term
from leveret.broker.events import API_ACTOR, INTERNAL_USER
from leveret.broker.message import Message
from leveret.protocol import table
from leveret.protocol.spec import TYPE_NAMES, type_of

if TYPE_CHECKING:
    from leveret.broker.consumer import Consumer
    from leveret.broker.exchanges.base import Binding, Exchange
    from leveret.broker.policies import Policy
    from leveret.broker.queues.base import Queue
    from leveret.broker.users import TopicPermission

log = logging.getLogger(__name__)

EXCHANGE = "amq.rabbitmq.event"
VHOST = "/"
# headers (0x2000), delivery-mode (0x1000), timestamp (0x0040)
_FLAGS = (0x2000 | 0x1000 | 0x0040).to_bytes(2, "big")
_EXCHANGE_AND_KEY_PREFIX = bytes((len(EXCHANGE),)) + EXCHANGE.encode()

Value = Any  # str, bytes, bool, int, float, list, Raw, Resource, Term


class Resource:
    """A #resource: its name under the key, and its vhost as ``vhost``."""

    __slots__ = ("name", "vhost")

    def __init__(self, vhost: str, name: str) -> None:
        self.vhost = vhost
        self.name = name

    @classmethod
    def of(cls, named: Any) -> Resource:
        """The resource of a queue or an exchange (its vhost and name)."""
        return cls(named.vhost, named.name)


def _field(value: Value) -> bytes:
    if isinstance(value, bool):
        return b"t" + (b"\x01" if value else b"\x00")
    if isinstance(value, int):
        return table.long(value)
    if isinstance(value, float):
        return b"d" + struct.pack(">d", value)
    if isinstance(value, (str, bytes)):
        return table.longstr(value)
    if isinstance(value, list):
        return table.array([_field(v) for v in value])
    if isinstance(value, dict):
        return table.table(encode_headers(list(value.items())))
    return table.longstr(str(value))


def _parameter_value(value: Any, top: bool = False) -> Value:
    """A parameter's value as the event exchange's fmt gives it: the proplist an object
    was made (top-level) a table, lists arrays, the atom null a longstr, and a map within
    as Erlang prints it."""
    if value is None:
        return "null"
    if isinstance(value, dict):
        if top:
            return {k: _parameter_value(v) for k, v in value.items()}
        return Term(term(value))
    if isinstance(value, list):
        return [_parameter_value(v) for v in value]
    return value


def encode_headers(props: list[tuple[str, Value]]) -> list[table.Field]:
    """rabbit_exchange_type_event:fmt_proplist: folded from the front, so the last
    property comes first; a resource is its name then ``vhost``."""
    out: list[table.Field] = []
    for key, value in props:
        if isinstance(value, Resource):
            out = [(key, table.longstr(value.name)), ("vhost", table.longstr(value.vhost)), *out]
        else:
            out.insert(0, (key, _field(value)))
    return out


# --------------------------------------------------------------- connections
# The TLS items an authentication event carries when the connection has them.
_AUTH_TLS_KEYS = (
    "ssl_protocol",
    "ssl_cipher",
    "peer_cert_issuer",
    "peer_cert_subject",
    "peer_cert_validity",
)
_AMQP_091 = Term("{0,9,1}")


def _is_stream(c: Any) -> bool:
    """A stream-protocol connection (rabbit_stream_reader's), not an AMQP 0-9-1 one."""
    return getattr(c, "protocol", None) == "stream"


def _protocol(c: Any) -> Value:
    """The info item protocol: the version tuple {0,9,1}, or <<"stream">>."""
    return "stream" if _is_stream(c) else _AMQP_091


def _tls(c: Any) -> dict[str, Any]:
    """What the transport says of the connection's TLS (nothing without it)."""
    return getattr(c, "transport_details", None) or {}


def _client_properties(c: Any) -> list[Value]:
    """The client's properties: an AMQP table as it came; a stream connection's peer
    properties are a map, listed in key order (rabbit_misc:to_amqp_table of a map)."""
    props: dict[str, Any] = getattr(c, "client_properties", None) or {}
    return table_terms(dict(sorted(props.items())) if _is_stream(c) else props)


def _user_provided_name(c: Any) -> list[tuple[str, Value]]:
    """augment_infos_with_user_provided_connection_name: the client's
    ``connection_name`` (a longstr, in an AMQP table) as ``user_provided_name``."""
    props: dict[str, Any] = getattr(c, "client_properties", None) or {}
    name = props.get("connection_name")
    if not isinstance(name, (str, bytes)) or type_of(props, "connection_name") not in (
        None,
        "longstr",
    ):
        return []
    return [("user_provided_name", name)]


class EventExchange:
    """Publishes the broker's events to ``amq.rabbitmq.event`` in vhost ``/``."""

    def __init__(self, broker: Any) -> None:
        self.broker = broker
        self._pending: list[tuple[str, list[tuple[str, Value]], int]] = []
        self._users = set(broker.users.users)
        self._policies: dict[str, dict[tuple[str, bool], Any]] = {}
        # vhosts with a vhost-limits parameter: it stays, empty, once its last limit goes
        self._limited = {v.name for v in broker.vhosts.values() if v.limits}
        # asks the event loop to flush soon (set by the server)
        self.schedule: Callable[[], None] | None = None
        broker.observers.subscribe(self.observe)
        vhost = broker.vhosts.get(VHOST)
        if vhost is not None:
            self._declare(vhost)
        for v in broker.vhosts.values():
            self._policies[v.name] = self._policy_map(v)

    # --------------------------------------------------------------- naming
    @property
    def node(self) -> str:
        return str(self.broker.node_name)

    def pid(self, *numbers: int) -> Term:
        """A pid as rabbit_misc:pid_to_string prints one: ``<node.N.N.N>``."""
        parts = [*numbers, 0, 0, 0][:3]
        return Term(f"<{self.node}.{parts[0]}.{parts[1]}.{parts[2]}>")

    def connection_pid(self, connection: Any) -> Term:
        return self.pid(1, int(getattr(connection, "id", 0)), 0)

    def channel_pid(self, channel: Any) -> Term:
        return self.pid(1, int(getattr(channel.host, "id", 0)), int(channel.number))

    def actor(self) -> str:
        return API_ACTOR.get() or str(getattr(self.broker, "actor", "") or INTERNAL_USER)

    # --------------------------------------------------------------- the exchange
    def _declare(self, vhost: Any) -> None:
        vhost.add_builtin_exchange(EXCHANGE, "topic", internal=True)

    def _bound(self) -> bool:
        vhost = self.broker.vhosts.get(VHOST)
        x = vhost.exchanges.get(EXCHANGE) if vhost is not None else None
        return bool(x is not None and x.bindings)

    def emit(self, key: str, props: list[tuple[str, Value]]) -> None:
        if not self._bound():
            return
        self._pending.append((key, props, wall_ms()))
        if len(self._pending) == 1 and self.schedule is not None:
            self.schedule()

    def flush(self) -> None:
        pending, self._pending = self._pending, []
        if not pending:
            return
        vhost = self.broker.vhosts.get(VHOST)
        if vhost is None:
            return
        for key, props, ts in pending:
            fields = encode_headers([("timestamp_in_ms", ts), *props])
            raw = _FLAGS + table.encode_table(fields) + b"\x02" + struct.pack(">Q", ts // 1000)
            k = key.encode()
            message = Message(
                EXCHANGE, key, _EXCHANGE_AND_KEY_PREFIX + bytes((len(k),)) + k, raw, b""
            )
            try:
                vhost.publish_internal(EXCHANGE, message)
            except Exception:
                log.exception("publishing event %s", key)

    # --------------------------------------------------------------- events
    def observe(self, event: ev.BrokerEvent) -> None:
        handler = _HANDLERS.get(type(event))
        if handler is not None:
            handler(self, event)

    def notify(
        self,
        key: str,
        props: list[tuple[str, Value]],
        rest: Sequence[tuple[str, Value]] = (),
        who: str | None = None,
    ) -> None:
        """rabbit_event:notify of an action: the event's items, who performed it (the
        actor, unless ``who`` names another), then ``rest``."""
        actor = self.actor() if who is None else who
        self.emit(key, [*props, ("user_who_performed_action", actor), *rest])

    def _limits(self, key: str, *rest: tuple[str, Value]) -> None:
        """A vhost's or a user's limits, the runtime parameter named ``limits``."""
        self.notify(key, [("name", "limits")], rest)

    def _vhost_added(self, event: ev.VhostAdded) -> None:
        vhost = event.vhost
        if vhost.name == VHOST:
            self._declare(vhost)
        self._policies[vhost.name] = self._policy_map(vhost)
        # its exchanges first, in the order RabbitMQ makes them
        for name in _BUILTIN_ORDER:
            x = vhost.exchanges.get(name)
            if x is not None:
                self._exchange_created(x)
        # the tags as rabbit_vhost parses them: a list of atoms
        tags: list[Value] = list(vhost.tags)
        self.notify(
            "vhost.created",
            [
                ("name", vhost.name),
                ("default_queue_type", "undefined"),
                (
                    "metadata",
                    Term(
                        f"#{{description => {binary(vhost.description)},"
                        f"tags => [{','.join(atom(t) for t in vhost.tags)}]}}"
                    ),
                ),
                ("tracing", bool(vhost.tracing)),
                ("cluster_state", {self.node: "running"}),
            ],
            [("description", vhost.description), ("tags", tags)],
        )

    def _alarm(self, key: str, event: ev.AlarmEvent) -> None:
        """rabbit_alarm's resource alarms: the source, and the node it is on."""
        self.emit(key, [("source", event.resource), ("node", self.node)])

    def _vhost_deleted(self, event: ev.VhostDeleted) -> None:
        """vhost.deleted, then what went with the vhost's record (rabbit_vhost:delete):
        its runtime parameters (the limits, the operator policies), its policies, and at
        last its supervisor (vhost.down)."""
        vhost = event.vhost
        self.notify("vhost.deleted", [("name", vhost.name)])
        if vhost.limits or vhost.name in self._limited:
            self._limited.discard(vhost.name)
            marker = [("vhost", vhost.name), ("component", "vhost-limits"), ("name", "limits")]
            self.notify("parameter.cleared", marker)
            self._limits("vhost.limits.cleared")
        # the operator policies (runtime parameters) first, then the policies
        for name, _ in sorted(self._policies.pop(vhost.name, {}), key=lambda key: not key[1]):
            self.notify("policy.cleared", [("name", name), ("vhost", vhost.name)])
        self.notify("vhost.down", [("name", vhost.name), ("node", self.node)], who=INTERNAL_USER)

    def _queue_created(self, q: Queue) -> None:
        owner = q.exclusive_owner
        self.notify(
            "queue.created",
            [
                ("name", Resource.of(q)),
                ("durable", bool(q.durable)),
                ("auto_delete", bool(q.auto_delete)),
                ("arguments", table_terms(q.arguments)),
                ("owner_pid", self.connection_pid(owner) if owner is not None else ""),
                ("exclusive", owner is not None),
            ],
        )

    def _exchange_created(self, x: Exchange) -> None:
        self.notify(
            "exchange.created",
            [
                ("name", Resource.of(x)),
                ("type", x.type_name),
                ("durable", bool(x.durable)),
                ("auto_delete", bool(x.auto_delete)),
                ("internal", bool(x.internal)),
                ("arguments", table_terms(x.arguments)),
                ("policy", x.policy.name if x.policy is not None else ""),
            ],
        )

    def _exchange_delete_marker(self, key: str, event: ev.ExchangeDeleteMarker) -> None:
        # RabbitMQ 3.10 marks an exchange.delete with a runtime parameter, set before the
        # exchange is looked up and cleared however the deletion ends
        value = [("value", True)] if key == "parameter.set" else []
        self.notify(
            key,
            [
                ("vhost", event.vhost),
                ("component", "exchange-delete-in-progress"),
                ("name", event.exchange),
                *value,
            ],
        )

    def _binding(self, key: str, b: Binding, who: str | None = None) -> None:
        # a binding that went with its queue comes with who removed it: RabbitMQ itself
        self.notify(
            key,
            [
                ("source_name", b.source),
                ("source_kind", "exchange"),
                ("destination_name", b.destination.name),
                ("destination_kind", b.destination.kind),
                ("routing_key", b.routing_key),
                ("arguments", table_terms(b.arguments)),
                ("vhost", getattr(b.destination, "vhost", "")),
            ],
            who=who,
        )

    def _consumer_items(self, c: Consumer) -> tuple[str, int, list[Term], Term]:
        """Its tag, prefetch, arguments and channel pid (an AMQP 1.0 link's as its
        RabbitMQ shows them)."""
        amqp10 = amqp10_events.consumer(self, c)
        if amqp10 is not None:
            return amqp10
        prefetch = int(getattr(c, "prefetch", 0) or 0)
        return c.tag, prefetch, table_terms(c.arguments), self.channel_pid(c.channel)

    def _consumer_created(self, c: Consumer) -> None:
        tag, prefetch, arguments, channel = self._consumer_items(c)
        self.notify(
            "consumer.created",
            [
                ("consumer_tag", tag),
                ("exclusive", bool(c.exclusive)),
                ("ack_required", not c.no_ack),
                ("channel", channel),
                ("queue", Resource.of(c.queue)),
                ("prefetch_count", prefetch),
                ("arguments", arguments),
            ],
        )

    def _consumer_deleted(self, c: Consumer) -> None:
        tag, _, _, channel = self._consumer_items(c)
        self.notify(
            "consumer.deleted",
            [
                ("consumer_tag", tag),
                ("channel", channel),
                ("queue", Resource.of(c.queue)),
            ],
        )

    # An AMQP 0-9-1 connection (rabbit_reader) and a stream-protocol one
    # (rabbit_stream_reader) tell of themselves alike; where their info items differ
    # (protocol, client properties, the keys of connection_created) see _is_stream.
    def _auth_props(self, c: Any, username: str | None) -> list[tuple[str, Value]]:
        """notify_auth_result: who (left out when there was no name to tell), then
        ?AUTH_NOTIFICATION_INFO_KEYS, those without a value ('', no TLS) left out."""
        peer = c.peer or ("", 0)
        local = c.local or ("", 0)
        tls = _tls(c)
        who: list[tuple[str, Value]] = [] if username is None else [("name", username)]
        return [
            ("connection_type", "network"),
            *who,
            ("host", ip_term(str(local[0]))),
            ("connection_name", c.name),
            ("peer_host", ip_term(str(peer[0]))),
            ("peer_port", int(peer[1])),
            ("protocol", _protocol(c)),
            ("auth_mechanism", c.auth_mechanism),
            ("ssl", bool(tls.get("ssl", False))),
            *[(key, tls[key]) for key in _AUTH_TLS_KEYS if tls.get(key)],
        ]

    def _authenticated(self, event: ev.UserAuthenticated) -> None:
        c = event.connection
        amqp10 = amqp10_events.auth_success(c)
        self.emit("user.authentication.success", amqp10 or self._auth_props(c, c.username))

    def _authentication_failed(self, event: ev.UserAuthenticationFailed) -> None:
        amqp10 = amqp10_events.auth_failure(event.connection, event.user)
        if amqp10 is not None:
            if amqp10:  # RabbitMQ 3.10.8's plugin tells of none
                self.emit("user.authentication.failure", amqp10)
            return
        # the plugin prints the reason, an Erlang string, as a list of character codes
        reason: list[Value] = [ord(ch) for ch in event.why]
        props = [*self._auth_props(event.connection, event.user), ("error", reason)]
        self.emit("user.authentication.failure", props)

    def _connection_opened(self, event: ev.ConnectionAuthorized) -> None:
        """connection_created: rabbit_reader's ?CREATION_EVENT_KEYS after {type,
        network}; rabbit_stream_reader's have no type and name protocol twice (after
        user and after vhost). A name the client gave comes first."""
        c: Any = event.connection  # what the sessions know beyond ConnectionInfo
        amqp10 = amqp10_events.connection_created(self, c)
        if amqp10 is not None:
            self.emit("connection.created", amqp10)
            return
        stream = _is_stream(c)
        peer = c.peer or ("", 0)
        local = c.local or ("", 0)
        tls = _tls(c)
        protocol = ("protocol", _protocol(c))
        self.notify(
            "connection.created",
            [
                *_user_provided_name(c),
                *([] if stream else [("type", "network")]),
                ("pid", self.connection_pid(c)),
                ("name", c.name),
                ("port", int(local[1])),
                ("peer_port", int(peer[1])),
                ("host", ip_term(str(local[0]))),
                ("peer_host", ip_term(str(peer[0]))),
                ("ssl", bool(tls.get("ssl", False))),
                ("peer_cert_subject", tls.get("peer_cert_subject", "")),
                ("peer_cert_issuer", tls.get("peer_cert_issuer", "")),
                ("peer_cert_validity", tls.get("peer_cert_validity", "")),
                ("auth_mechanism", c.auth_mechanism),
                ("ssl_protocol", tls.get("ssl_protocol", "")),
                ("ssl_key_exchange", tls.get("ssl_key_exchange", "")),
                ("ssl_cipher", tls.get("ssl_cipher", "")),
                ("ssl_hash", tls.get("ssl_hash", "")),
                protocol,
                ("user", c.username),
                ("vhost", c.vhost),
                *([protocol] if stream else []),
                ("timeout", int(getattr(c, "heartbeat", 0))),
                ("frame_max", int(getattr(c, "frame_max", 0))),
                ("channel_max", int(getattr(c, "channel_max", 0))),
                ("client_properties", _client_properties(c)),
                ("connected_at", int(getattr(c, "connected_at", 0))),
                ("node", self.node),
            ],
            who=c.username,
        )

    def _connection_closed(self, event: ev.ConnectionClosed) -> None:
        c = event.connection
        amqp10 = amqp10_events.connection_closed(self, c)
        if amqp10 is not None:
            self.emit("connection.closed", amqp10)
            return
        # rabbit_reader's (its start_connection's after) and rabbit_stream_reader's (its
        # terminate) tell of every connection, even one that sent nothing: the client
        # properties are empty before a start-ok (or peer properties)
        self.emit(
            "connection.closed",
            [
                *_user_provided_name(c),
                ("name", c.name),
                ("pid", self.connection_pid(c)),
                ("node", self.node),
                ("client_properties", _client_properties(c)),
            ],
        )

    def _channel_opened(self, ch: ev.ChannelInfo) -> None:
        host = ch.host
        self.notify(
            "channel.created",
            [
                ("pid", self.channel_pid(ch)),
                ("name", f"{host.name} ({ch.number})"),
                ("connection", self.connection_pid(host)),
                ("number", int(ch.number)),
                ("user", host.username),
                ("vhost", host.vhost),
            ],
            who=host.username,
        )

    def _user_changed(self, event: ev.UserChanged) -> None:
        name = event.user
        exists = name in self.broker.users.users
        known = name in self._users
        if exists and not known:
            self._users.add(name)
            self.notify("user.created", [("name", name)])
        elif known and not exists:
            self._users.discard(name)
            self.notify("user.deleted", [("name", name)])

    def _permission_changed(self, event: ev.PermissionChanged) -> None:
        user, vhost = event.user, event.vhost
        perm = self.broker.users.permission(user, vhost)
        if perm is not None:
            self.notify(
                "permission.created",
                [
                    ("user", user),
                    ("vhost", vhost),
                    ("configure", perm.configure),
                    ("write", perm.write),
                    ("read", perm.read),
                ],
            )
        else:
            self.notify("permission.deleted", [("user", user), ("vhost", vhost)])

    def _user_tags_set(self, event: ev.UserTagsSet) -> None:
        user = self.broker.users.users.get(event.user)
        tags: list[Value] = list(user.tags) if user is not None else []
        self.notify("user.tags.set", [("name", event.user), ("tags", tags)])

    def _topic_permission_set(self, perm: TopicPermission) -> None:
        self.notify(
            "topic.permission.created",
            [
                ("user", perm.user),
                ("vhost", perm.vhost),
                ("exchange", perm.exchange),
                ("write", perm.write),
                ("read", perm.read),
            ],
        )

    def _topic_permission_cleared(self, event: ev.TopicPermissionCleared) -> None:
        # RabbitMQ tells of one exchange's clearing as permission.deleted
        key = "topic.permission.deleted" if event.exchange is None else "permission.deleted"
        self.notify(key, [("user", event.user), ("vhost", event.vhost)])

    def _limits_changed(self, event: ev.VhostLimitsChanged) -> None:
        # a user's limits (UserLimitsChanged) are told of by user.limits.*
        vhost = event.vhost
        self._limited.add(vhost.name)
        limits: list[tuple[str, Value]] = list(vhost.limits.items())
        # the parameter's value is its proplist: an empty one is a list
        value: Value = dict(limits) if limits else []
        self.notify(
            "parameter.set",
            [
                ("vhost", vhost.name),
                ("component", "vhost-limits"),
                ("name", "limits"),
                ("value", value),
            ],
        )
        self._limits("vhost.limits.set", *limits)

    def _global_parameter(self, event: ev.GlobalParameterEvent) -> None:
        """rabbit_runtime_parameters' set_global and clear_global: both tell of it as
        parameter.set (component global), the clearing without a value."""
        props: list[tuple[str, Value]] = [("component", "global"), ("name", event.name)]
        if isinstance(event, ev.GlobalParameterSet):
            props.append(("value", _parameter_value(event.value, top=True)))
        self.notify("parameter.set", props, who=event.user)

    def _queue_policy_changed(self, event: ev.QueuePolicyChanged) -> None:
        """rabbit_policy:update_matched_objects: a queue whose policies changed with the
        policy being set (its definition comes along) or cleared."""
        q, policy = event.queue, event.policy
        props: list[tuple[str, Value]] = [
            ("name", Resource.of(q)),
            ("vhost", q.vhost),
            ("type", q.rabbit_type),
        ]
        if policy is None:
            self.notify("queue.policy.cleared", props)
        else:
            self.notify("queue.policy.updated", props, _definition(policy))

    @staticmethod
    def _policy_map(vhost: Any) -> dict[tuple[str, bool], Any]:
        policies = vhost.policies
        return {(name, op): p for op in (False, True) for name, p in policies.table(op).items()}

    def _policy_changed(self, event: ev.PolicyChanged) -> None:
        vhost = event.vhost
        before = self._policies.get(vhost.name, {})
        after = self._policy_map(vhost)
        self._policies[vhost.name] = after
        for key, p in after.items():
            if before.get(key) != p:
                self.notify("policy.set", [("name", p.name), ("vhost", vhost.name)], _definition(p))
        for key, p in before.items():
            if key not in after:
                self.notify("policy.cleared", [("name", p.name), ("vhost", vhost.name)])


def _definition(policy: Policy) -> list[tuple[str, Value]]:
    """What a policy says, as its events carry it after who set it."""
    return [
        ("pattern", policy.pattern),
        ("definition", dict(policy.definition)),
        ("priority", policy.priority),
        ("apply-to", policy.apply_to),
    ]


# the exchanges RabbitMQ declares in a new vhost, in its order
_BUILTIN_ORDER = (
    "",
    "amq.direct",
    "amq.topic",
    "amq.match",
    "amq.headers",
    "amq.fanout",
    "amq.rabbitmq.trace",
)


#: What each broker event means to the event exchange, by its handler.
_HANDLERS: dict[type[ev.BrokerEvent], Callable[[EventExchange, Any], None]] = {
    ev.VhostAdded: EventExchange._vhost_added,
    ev.VhostDeleted: EventExchange._vhost_deleted,
    ev.QueueCreated: lambda e, q: e._queue_created(q.queue),
    ev.QueueDeleted: lambda e, q: e.notify("queue.deleted", [("name", Resource.of(q.queue))]),
    ev.ExchangeCreated: lambda e, c: e._exchange_created(c.exchange),
    ev.ExchangeDeleteStarted: lambda e, m: e._exchange_delete_marker("parameter.set", m),
    ev.ExchangeDeleted: lambda e, d: e.notify(
        "exchange.deleted", [("name", Resource.of(d.exchange))], who=d.who
    ),
    ev.ExchangeDeleteFinished: lambda e, m: e._exchange_delete_marker("parameter.cleared", m),
    ev.BindingCreated: lambda e, b: e._binding("binding.created", b.binding),
    ev.BindingDeleted: lambda e, b: e._binding("binding.deleted", b.binding, b.who),
    ev.ConsumerCreated: lambda e, c: e._consumer_created(c.consumer),
    ev.ConsumerDeleted: lambda e, c: e._consumer_deleted(c.consumer),
    ev.UserAuthenticated: EventExchange._authenticated,
    ev.UserAuthenticationFailed: EventExchange._authentication_failed,
    ev.ConnectionAuthorized: EventExchange._connection_opened,
    ev.ConnectionClosed: EventExchange._connection_closed,
    ev.ChannelOpened: lambda e, c: e._channel_opened(c.channel),
    ev.ChannelClosed: lambda e, c: e.notify(
        "channel.closed", [("pid", e.channel_pid(c.channel))], who=c.channel.host.username
    ),
    ev.UserChanged: EventExchange._user_changed,
    ev.UserTagsSet: EventExchange._user_tags_set,
    ev.UserPasswordChanged: lambda e, u: e.notify("user.password.changed", [("name", u.user)]),
    ev.UserPasswordCleared: lambda e, u: e.notify("user.password.cleared", [("name", u.user)]),
    ev.UserLimitsSet: lambda e, u: e._limits(
        "user.limits.set", ("username", u.user), *sorted(u.limits.items())
    ),
    ev.UserLimitsCleared: lambda e, u: e._limits("user.limits.cleared", ("username", u.user)),
    ev.TopicPermissionSet: lambda e, t: e._topic_permission_set(t.permission),
    ev.TopicPermissionCleared: EventExchange._topic_permission_cleared,
    ev.VhostLimitsChanged: EventExchange._limits_changed,
    ev.PermissionChanged: EventExchange._permission_changed,
    ev.PolicyChanged: EventExchange._policy_changed,
    ev.QueuePolicyChanged: EventExchange._queue_policy_changed,
    ev.GlobalParameterSet: EventExchange._global_parameter,
    ev.GlobalParameterCleared: EventExchange._global_parameter,
    ev.AlarmSet: lambda e, a: e._alarm("alarm.set", a),
    ev.AlarmCleared: lambda e, a: e._alarm("alarm.cleared", a),
}

__all__ = ["EXCHANGE", "TYPE_NAMES", "EventExchange", "Resource", "Term", "ip_term"]
