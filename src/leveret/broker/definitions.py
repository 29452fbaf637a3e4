"""Export and import of definitions in RabbitMQ's JSON shape (``rabbitmqctl
export_definitions``): users, vhosts, permissions, and the durable queues, exchanges and
bindings."""

from __future__ import annotations

from typing import Any

from leveret.broker.broker import COMPATIBLE_VERSION, Broker
from leveret.broker.events import Event
from leveret.broker.users import HASHING_ALGORITHM


def _jsonable(value: Any) -> Any:
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).decode("utf-8", "replace")
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_jsonable(v) for v in value]
    return value


def export_definitions(broker: Broker, durable_only: bool = True) -> dict[str, Any]:
    users = [
        {
            "name": u.name,
            "password_hash": u.password_hash,
            "hashing_algorithm": HASHING_ALGORITHM,
            "tags": list(u.tags),
            "limits": {},
        }
        for u in broker.users.users.values()
    ]
    vhosts = [
        {
            "name": v.name,
            "description": v.description,
            "tags": list(v.tags),
            "metadata": {"description": v.description, "tags": list(v.tags)},
        }
        for v in broker.vhosts.values()
    ]
    permissions = [
        {
            "user": p.user,
            "vhost": p.vhost,
            "configure": p.configure,
            "write": p.write,
            "read": p.read,
        }
        for p in broker.users.permissions.values()
    ]
    queues, exchanges, bindings = [], [], []
    for vhost in broker.vhosts.values():
        for q in vhost.queues.values():
            if (durable_only and not q.durable) or q.exclusive_owner is not None:
                continue
            queues.append(
                {
                    "name": q.name,
                    "vhost": vhost.name,
                    "durable": q.durable,
                    "auto_delete": q.auto_delete,
                    "arguments": _jsonable(q.arguments),
                }
            )
        for x in vhost.exchanges.values():
            if x.is_builtin or (durable_only and not x.durable):
                continue
            exchanges.append(
                {
                    "name": x.name,
                    "vhost": vhost.name,
                    "type": x.type_name,
                    "durable": x.durable,
                    "auto_delete": x.auto_delete,
                    "internal": x.internal,
                    "arguments": _jsonable(x.arguments),
                }
            )
        for b in vhost.bindings():
            dest = b.destination
            src = vhost.exchanges.get(b.source)
            if durable_only and not (
                getattr(dest, "durable", False) and src is not None and src.durable
            ):
                continue
            if getattr(dest, "exclusive_owner", None) is not None:
                continue
            bindings.append(
                {
                    "source": b.source,
                    "vhost": vhost.name,
                    "destination": dest.name,
                    "destination_type": dest.kind,
                    "routing_key": b.routing_key,
                    "arguments": _jsonable(b.arguments),
                }
            )
    return {
        "rabbit_version": COMPATIBLE_VERSION,
        "rabbitmq_version": COMPATIBLE_VERSION,
        "product_name": "Leveret",
        "product_version": COMPATIBLE_VERSION,
        "users": users,
        "vhosts": vhosts,
        "permissions": permissions,
        "topic_permissions": [],
        "parameters": [],
        "global_parameters": [],
        "policies": [],
        "queues": queues,
        "exchanges": exchanges,
        "bindings": bindings,
    }


def import_definitions(broker: Broker, data: dict[str, Any]) -> None:
    """Create what the definitions describe; existing objects are kept (as RabbitMQ)."""
    for v in data.get("vhosts", []):
        meta = v.get("metadata") or {}
        broker.add_vhost(
            v["name"],
            v.get("description", meta.get("description", "")),
            v.get("tags", meta.get("tags", [])),
        )
    for u in data.get("users", []):
        tags = u.get("tags", [])
        if isinstance(tags, str):
            tags = [t for t in tags.split(",") if t]
        broker.add_user(
            u["name"], password=u.get("password"), tags=tags, password_hash=u.get("password_hash")
        )
    for p in data.get("permissions", []):
        broker.set_permissions(
            p["user"], p["vhost"], p.get("configure", ""), p.get("write", ""), p.get("read", "")
        )
    for x in data.get("exchanges", []):
        vhost = broker.add_vhost(x.get("vhost", "/"))
        if x["name"] not in vhost.exchanges:
            vhost.declare_exchange(
                x["name"],
                x.get("type", "direct"),
                x.get("durable", True),
                x.get("auto_delete", False),
                x.get("internal", False),
                x.get("arguments") or {},
            )
    for q in data.get("queues", []):
        vhost = broker.add_vhost(q.get("vhost", "/"))
        if q["name"] not in vhost.queues:
            vhost.declare_queue(
                q["name"],
                q.get("durable", True),
                None,
                q.get("auto_delete", False),
                q.get("arguments") or {},
            )
    for b in data.get("bindings", []):
        vhost = broker.add_vhost(b.get("vhost", "/"))
        src = vhost.exchanges.get(b["source"])
        dest_kind = b.get("destination_type", "queue")
        dest = (vhost.queues if dest_kind == "queue" else vhost.exchanges).get(b["destination"])
        if src is not None and dest is not None and src.name != "":
            vhost.bind(src, dest, b.get("routing_key", ""), b.get("arguments") or {})
    broker.observers.emit(Event.DEFINITIONS_IMPORTED)
