"""Export and import of definitions in RabbitMQ's JSON shape (``rabbitmqctl
export_definitions``): users (with their limits), vhosts, permissions, topic permissions,
vhost limits and operator policies (as runtime parameters), global parameters, policies,
and the durable queues, exchanges and bindings."""

from __future__ import annotations

from typing import Any

from leveret.broker.broker import BrokerCore
from leveret.broker.events import INTERNAL_USER, DefinitionsImported
from leveret.broker.exchanges import Binding
from leveret.broker.operations import Actor, set_global_parameter
from leveret.broker.policies import make_policy
from leveret.broker.users import HASHING_ALGORITHM


def _jsonable(value: Any) -> Any:
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).decode("utf-8", "replace")
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_jsonable(v) for v in value]
    return value


def export_definitions(broker: BrokerCore, durable_only: bool = True) -> dict[str, Any]:
    users = [
        {
            "name": u.name,
            "password_hash": u.password_hash,
            "hashing_algorithm": HASHING_ALGORITHM,
            "tags": list(u.tags),
            "limits": dict(u.limits),
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
    topic_permissions = [
        {
            "user": p.user,
            "vhost": p.vhost,
            "exchange": p.exchange,
            "write": p.write,
            "read": p.read,
        }
        for p in broker.topic_permissions()
    ]
    parameters: list[dict[str, Any]] = []
    policies: list[dict[str, Any]] = []
    for vhost in broker.vhosts.values():
        if vhost.limits:
            parameters.append(
                {
                    "value": dict(vhost.limits),
                    "vhost": vhost.name,
                    "component": "vhost-limits",
                    "name": "limits",
                }
            )
        for op in sorted(vhost.policies.operator_policies.values(), key=lambda p: p.name):
            shown = op.as_json()
            parameters.append(
                {
                    "value": {
                        "pattern": shown["pattern"],
                        "definition": shown["definition"],
                        "priority": shown["priority"],
                        "apply-to": shown["apply-to"],
                    },
                    "vhost": vhost.name,
                    "component": "operator_policy",
                    "name": op.name,
                }
            )
        policies.extend(
            p.as_json() for p in sorted(vhost.policies.policies.values(), key=lambda p: p.name)
        )
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
    version = broker.compat.version
    return {
        "rabbit_version": version,
        "rabbitmq_version": version,
        "product_name": "Leveret",
        "product_version": version,
        "users": users,
        "vhosts": vhosts,
        "permissions": permissions,
        "topic_permissions": topic_permissions,
        "parameters": parameters,
        "global_parameters": [
            {"name": name, "value": value}
            for name, value in sorted(broker.global_parameters.items())
        ],
        "policies": policies,
        "queues": queues,
        "exchanges": exchanges,
        "bindings": bindings,
    }


def import_definitions(
    broker: BrokerCore, data: dict[str, Any], acting_user: str | None = None
) -> None:
    """Create what the definitions describe; existing objects are kept (as RabbitMQ).
    ``acting_user`` (who imports them through the API) gets full permissions in the
    vhosts the import creates, as rabbit_vhost:put_vhost grants them."""
    for v in data.get("vhosts", []):
        meta = v.get("metadata") or {}
        new = v["name"] not in broker.vhosts
        broker.add_vhost(
            v["name"],
            v.get("description", meta.get("description", "")),
            v.get("tags", meta.get("tags", [])),
        )
        if new and acting_user is not None and acting_user in broker.users.users:
            broker.set_permissions(acting_user, v["name"], ".*", ".*", ".*")
    for u in data.get("users", []):
        tags = u.get("tags", [])
        if isinstance(tags, str):
            tags = [t for t in tags.split(",") if t]
        broker.add_user(
            u["name"], password=u.get("password"), tags=tags, password_hash=u.get("password_hash")
        )
    for u in data.get("users", []):
        limits = u.get("limits")
        if isinstance(limits, dict) and limits:
            broker.set_user_limits(u["name"], _limits(limits))
    for p in data.get("permissions", []):
        broker.set_permissions(
            p["user"], p["vhost"], p.get("configure", ""), p.get("write", ""), p.get("read", "")
        )
    for t in data.get("topic_permissions", []):
        if t["user"] in broker.users.users and t["vhost"] in broker.vhosts:
            broker.set_topic_permissions(
                t["user"], t["vhost"], t["exchange"], t.get("write", ""), t.get("read", "")
            )
    for param in data.get("parameters", []):
        vhost = broker.add_vhost(param.get("vhost", "/"))
        component = param.get("component")
        value = param.get("value") or {}
        if component == "vhost-limits":
            vhost.set_limits(_limits(value))
        elif component == "operator_policy":
            vhost.set_policy(
                make_policy(
                    vhost.name,
                    param["name"],
                    value.get("pattern"),
                    value.get("definition"),
                    value.get("priority"),
                    value.get("apply-to"),
                    operator=True,
                    compat=broker.compat,
                )
            )
        else:
            raise ValueError(f"runtime parameter component {component!r} is not supported")
    # rabbit_definitions:add_global_parameter: set as the API sets one, by the importer
    importer = Actor(acting_user or INTERNAL_USER, None)
    for g in data.get("global_parameters", []):
        name = g.get("name", "undefined")  # RabbitMQ's name of a parameter without one
        if not isinstance(name, str):
            raise ValueError(f"global parameter name {name!r} is not a string")
        set_global_parameter(broker, importer, name, g.get("value"))
    for pol in data.get("policies", []):
        vhost = broker.add_vhost(pol.get("vhost", "/"))
        vhost.set_policy(
            make_policy(
                vhost.name,
                pol["name"],
                pol.get("pattern"),
                pol.get("definition"),
                pol.get("priority"),
                pol.get("apply-to"),
                compat=broker.compat,
            )
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
            key, arguments = b.get("routing_key", ""), dict(b.get("arguments") or {})
            vhost.bind(src, Binding(src.name, dest, key, arguments))
    broker.observers.emit(DefinitionsImported())


def _limits(value: dict[str, Any]) -> dict[str, int]:
    out: dict[str, int] = {}
    for key, limit in value.items():
        if isinstance(limit, bool) or not isinstance(limit, int):
            raise ValueError(f"{key} should be a number, actually was {limit!r}")
        out[str(key)] = limit
    return out
