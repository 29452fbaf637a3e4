"""What the authorisation matrices (tests/differential/test_permissions.py over AMQP,
tests/management/test_permissions_differential.py over HTTP) share: a vhost of their own
on a broker, users whose permission patterns allow or refuse each resource, and the
resources one case starts with.

Resource names say which permissions the main user has on them: ``e.cw.T`` is an
exchange it may configure and write but not read, ``q.n.T`` a queue it may do nothing
with (T: the case's own token). ``x(...)``/``q(...)`` exist when the case starts
(declared by guest; each queue holds one message), ``X(...)``/``Q(...)`` do not,
``xq(...)`` is an exclusive queue of guest's connection."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from pamqp import body, commands, frame, header

from tests.support.brokers import BrokerUnderTest
from tests.support.mgmt import Api, q
from tests.support.rawclient import RawClient

C = commands

# role -> (tags, permissions (configure, write, read) or None for none in the vhost)
USERS: dict[str, tuple[str, tuple[str, str, str] | None]] = {
    "main": (
        "management",
        (r"^[eq]\.c", r"^[eq]\.c?w|^amq\.default$", r"^[eq]\.c?w?r|^amq\.direct$"),
    ),
    "nodefault": ("management", (r"^[eq]\.c", r"^[eq]\.c?w", r"^[eq]\.c?w?r")),
    "empty": ("management", ("", "", "")),
    # RabbitMQ matches bytes (re:run without unicode): "." is one byte of "é"
    "bytes": ("management", (r"^e\.u\..$", r"^e\.u\..$", r"^e\.u\..$")),
    "none": ("management", None),
    "admin": ("administrator", None),
    "monitor": ("monitoring", None),
}
PASSWORD = "pw-matrix"
GEN_NAME = re.compile(r"amq\.gen-[A-Za-z0-9_-]{22}")


@dataclass
class Names:
    """The resources one case uses; existing ones are declared before it runs."""

    token: str = field(default_factory=lambda: uuid.uuid4().hex[:8])
    exchanges: dict[str, bool] = field(default_factory=dict)  # name -> internal
    queues: dict[str, None] = field(default_factory=dict)
    exclusive: dict[str, None] = field(default_factory=dict)
    bindings: list[tuple[str, str, str, str]] = field(default_factory=list)

    def _made(self, kind: str, perms: str, made: dict[str, Any], value: Any = None) -> str:
        """The name of a resource made before the case, kept in ``made``."""
        name = f"{kind}.{perms}.{self.token}"
        made[name] = value
        return name

    def x(self, perms: str, internal: bool = False) -> str:
        return self._made("e", perms, self.exchanges, internal)

    def X(self, perms: str) -> str:
        return f"e.{perms}.{self.token}.new"

    def q(self, perms: str) -> str:
        return self._made("q", perms, self.queues)

    def Q(self, perms: str) -> str:
        return f"q.{perms}.{self.token}.new"

    def xq(self, perms: str) -> str:
        return self._made("q", perms, self.exclusive)

    def bound(self, source: str, kind: str, destination: str, key: str = "k") -> str:
        """A binding guest makes before the case (``kind``: "q" or "e")."""
        self.bindings.append((source, kind, destination, key))
        return key


@dataclass
class Site:
    broker: BrokerUnderTest
    api: Api
    vhost: str
    users: dict[str, str]  # role -> user name
    admin: RawClient
    clients: dict[str, RawClient] = field(default_factory=dict)
    channel: int = 0

    def next_channel(self) -> int:
        self.channel += 1
        return self.channel

    def as_role(self, role: str) -> Api:
        return self.api.as_user(self.users[role], PASSWORD)

    def normalize(self, text: str, names: Names, role: str) -> str:
        text = text.replace(names.token, "T").replace(self.users[role], "U")
        return GEN_NAME.sub("amq.gen-X", text.replace(self.vhost, "V"))

    def prepare(self, names: Names) -> None:
        """Guest declares what the case expects to exist, one message in each queue."""
        a = self.admin
        for name, internal in names.exchanges.items():
            a.send_method(
                1, C.Exchange.Declare(exchange=name, exchange_type="direct", internal=internal)
            )
            a.expect(C.Exchange.DeclareOk)
        for name in names.queues:
            a.send_method(1, C.Queue.Declare(queue=name))
            a.expect(C.Queue.DeclareOk)
            a.send(
                frame.marshal(C.Basic.Publish(exchange="", routing_key=name), 1)
                + frame.marshal(header.ContentHeader(0, 1, C.Basic.Properties()), 1)
                + frame.marshal(body.ContentBody(b"m"), 1)
            )
        for name in names.exclusive:
            a.send_method(1, C.Queue.Declare(queue=name, exclusive=True))
            a.expect(C.Queue.DeclareOk)
        for source, kind, destination, key in names.bindings:
            if kind == "q":
                a.send_method(1, C.Queue.Bind(queue=destination, exchange=source, routing_key=key))
                a.expect(C.Queue.BindOk)
            else:
                a.send_method(
                    1, C.Exchange.Bind(destination=destination, source=source, routing_key=key)
                )
                a.expect(C.Exchange.BindOk)
        a.send_method(1, C.Basic.Qos())  # the publishes are in before the case starts
        a.expect(C.Basic.QosOk)


def make_site(broker: BrokerUnderTest) -> Iterator[Site]:
    """A vhost of the matrix's own with its users; guest's connection stays open (it
    owns the exclusive queues)."""
    api = Api(broker.http_url)
    tag = uuid.uuid4().hex[:8]
    vhost = f"perm-{tag}"
    assert api.put(f"/api/vhosts/{q(vhost)}") == 201
    api.put(f"/api/permissions/{q(vhost)}/guest", {"configure": ".*", "write": ".*", "read": ".*"})
    users = {role: f"perm-{tag}-{role}" for role in USERS}
    for role, (tags, perms) in USERS.items():
        assert api.put(f"/api/users/{q(users[role])}", {"password": PASSWORD, "tags": tags}) == 201
        if perms is not None:
            configure, write, read = perms
            assert (
                api.put(
                    f"/api/permissions/{q(vhost)}/{q(users[role])}",
                    {"configure": configure, "write": write, "read": read},
                )
                == 201
            )
    admin = RawClient(broker.host, broker.port)
    admin.handshake(vhost=vhost)
    admin.open_channel(1)
    site = Site(broker, api, vhost, users, admin)
    try:
        yield site
    finally:
        for c in [admin, *site.clients.values()]:
            c.close()
        api.delete(f"/api/vhosts/{q(vhost)}")
        for user in users.values():
            api.delete(f"/api/users/{q(user)}")
