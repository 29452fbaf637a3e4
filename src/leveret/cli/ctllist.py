"""``leveret ctl``'s list verbs: rabbitmqctl's columns, banners and both formatters. Each
listing is a row of ``LISTINGS``, registered as a verb from it."""

from __future__ import annotations

import sys
from collections.abc import Callable, Collection
from dataclasses import dataclass
from functools import partial
from typing import Annotated, Any

import typer

from leveret.broker.errors import type_name
from leveret.cli import ctlformat as fmt
from leveret.cli.ctlapp import verb
from leveret.cli.ctlclient import (
    EX_NOUSER,
    EX_USAGE,
    Client,
    Ctl,
    CtlError,
    Options,
    q,
)

Extract = Callable[[dict[str, Any], str], Any]


def _get(key: str) -> Extract:
    return lambda item, node: item.get(key)


def _args(key: str) -> Extract:
    return lambda item, node: item.get(key) or {}


def _conn_pid(item: dict[str, Any], node: str) -> str:
    return fmt.pid(node, item.get("name", ""))


def _chan_pid(item: dict[str, Any], node: str) -> str:
    conn = (item.get("connection_details") or {}).get("name", "")
    return fmt.pid(node, conn, int(item.get("number", 0)))


def _consumer_chan_pid(item: dict[str, Any], node: str) -> str:
    details = item.get("channel_details") or {}
    return fmt.pid(node, details.get("connection_name", ""), int(details.get("number", 0)))


def _owner_pid(item: dict[str, Any], node: str) -> str:
    details = item.get("owner_pid_details")
    return fmt.pid(node, details["name"]) if details else ""


TABLE_KEYS = {"arguments", "client_properties"}


@dataclass
class Listing:
    summary: str
    path: Callable[[Options], str]
    banner: Callable[[Options], list[str]]
    default: list[str]
    columns: dict[str, Extract]
    takes_columns: bool = True  # list_users and list_permissions take none, as rabbitmqctl's
    keep: Callable[[dict[str, Any]], bool] | None = None  # which items it lists


def _plain(*names: str) -> dict[str, Extract]:
    return {n: _get(n) for n in names}


QUEUE_COLUMNS: dict[str, Extract] = {
    **_plain(
        "name",
        "durable",
        "auto_delete",
        "exclusive",
        "messages_ready",
        "messages_unacknowledged",
        "messages",
        "messages_ready_ram",
        "messages_unacknowledged_ram",
        "messages_ram",
        "messages_persistent",
        "message_bytes",
        "message_bytes_ready",
        "message_bytes_unacknowledged",
        "message_bytes_ram",
        "message_bytes_persistent",
        "head_message_timestamp",
        "consumers",
        "consumer_utilisation",
        "consumer_capacity",
        "memory",
        "state",
        "type",
        "policy",
        "exclusive_consumer_tag",
        "effective_policy_definition",
        "operator_policy",
    ),
    "arguments": _args("arguments"),
    "pid": lambda item, node: fmt.pid(node, "queue:" + item.get("name", "")),
    "owner_pid": _owner_pid,
    "exclusive_consumer_pid": lambda item, node: "",
    "slave_pids": lambda item, node: "",
    "synchronised_slave_pids": lambda item, node: "",
    "disk_reads": lambda item, node: 0,
    "disk_writes": lambda item, node: 0,
    # a quorum queue's (its one node here); nothing for other types
    "leader": lambda item, node: item.get("leader", ""),
    "members": lambda item, node: item.get("members", ""),
    "online": lambda item, node: item.get("online", ""),
}

# the info item protocol as rabbitmqctl prints it, by the management API's rendering
_PROTOCOL_TERMS = {"AMQP 0-9-1": "{0,9,1}", "AMQP 1-0": "{1,0}"}


def listed_by_rabbitmqctl(item: dict[str, Any]) -> bool:
    """A connection rabbitmqctl lists (rabbit_networking's): a network one. Not a stream
    connection, nor RabbitMQ 3.10.8's AMQP 1.0 sessions' direct connections (measured:
    list_connections shows neither); RabbitMQ 4.2's AMQP 1.0 connections are."""
    return item.get("type") == "network"


CONNECTION_COLUMNS: dict[str, Extract] = {
    **_plain(
        "name",
        "port",
        "host",
        "peer_port",
        "peer_host",
        "ssl",
        "ssl_protocol",
        "ssl_key_exchange",
        "ssl_cipher",
        "ssl_hash",
        "peer_cert_subject",
        "peer_cert_issuer",
        "peer_cert_validity",
        "state",
        "channels",
        "auth_mechanism",
        "user",
        "vhost",
        "timeout",
        "frame_max",
        "channel_max",
        "connected_at",
    ),
    "pid": _conn_pid,
    "protocol": lambda item, node: _PROTOCOL_TERMS.get(item.get("protocol", ""), "{0,9,1}"),
    "client_properties": _args("client_properties"),
    "recv_oct": lambda item, node: item.get("recv_oct", 0),
    "recv_cnt": lambda item, node: item.get("recv_cnt", 0),
    "send_oct": lambda item, node: item.get("send_oct", 0),
    "send_cnt": lambda item, node: item.get("send_cnt", 0),
    "send_pend": lambda item, node: item.get("send_pend", 0),
}

CHANNEL_COLUMNS: dict[str, Extract] = {
    **_plain(
        "name",
        "number",
        "user",
        "vhost",
        "transactional",
        "confirm",
        "consumer_count",
        "messages_unacknowledged",
        "messages_uncommitted",
        "acks_uncommitted",
        "messages_unconfirmed",
        "prefetch_count",
        "global_prefetch_count",
    ),
    "pid": _chan_pid,
    "connection": lambda item, node: fmt.pid(
        node, (item.get("connection_details") or {}).get("name", "")
    ),
}

LISTINGS: dict[str, Listing] = {
    "list_exchanges": Listing(
        "The exchanges of a virtual host.",
        lambda o: f"/api/exchanges/{q(o.vhost)}",
        lambda o: [f"Listing exchanges for vhost {o.vhost} ..."],
        ["name", "type"],
        {
            **_plain("name", "type", "durable", "auto_delete", "internal", "policy"),
            "arguments": _args("arguments"),
            # x-delayed-message exchanges (rabbitmq_delayed_message_exchange's info item)
            "messages_delayed": lambda item, node: item.get("messages_delayed", ""),
        },
    ),
    "list_bindings": Listing(
        "The bindings of a virtual host.",
        lambda o: f"/api/bindings/{q(o.vhost)}",
        lambda o: [f"Listing bindings for vhost {o.vhost}..."],
        [
            "source_name",
            "source_kind",
            "destination_name",
            "destination_kind",
            "routing_key",
            "arguments",
        ],
        {
            "source_name": _get("source"),
            "source_kind": lambda item, node: "exchange",
            "destination_name": _get("destination"),
            "destination_kind": _get("destination_type"),
            "routing_key": _get("routing_key"),
            # RabbitMQ keeps binding arguments sorted (and others in the client's order)
            "arguments": lambda item, node: dict(sorted((item.get("arguments") or {}).items())),
        },
    ),
    "list_queues": Listing(
        "The queues of a virtual host.",
        lambda o: f"/api/queues/{q(o.vhost)}",
        lambda o: [f"Timeout: {o.timeout} seconds ...", f"Listing queues for vhost {o.vhost} ..."],
        ["name", "messages"],
        QUEUE_COLUMNS,
    ),
    "list_connections": Listing(
        "The AMQP connections.",
        lambda o: "/api/connections",
        lambda o: ["Listing connections ..."],
        ["user", "peer_host", "peer_port", "state"],
        CONNECTION_COLUMNS,
        keep=listed_by_rabbitmqctl,
    ),
    "list_channels": Listing(
        "The channels of every connection.",
        lambda o: "/api/channels",
        lambda o: ["Listing channels ..."],
        ["pid", "user", "consumer_count", "messages_unacknowledged"],
        CHANNEL_COLUMNS,
    ),
    "list_consumers": Listing(
        "The consumers of a virtual host's queues.",
        lambda o: f"/api/consumers/{q(o.vhost)}",
        lambda o: [f"Listing consumers in vhost {o.vhost} ..."],
        [
            "queue_name",
            "channel_pid",
            "consumer_tag",
            "ack_required",
            "prefetch_count",
            "active",
            "arguments",
        ],
        {
            "queue_name": lambda item, node: (item.get("queue") or {}).get("name"),
            "channel_pid": _consumer_chan_pid,
            "consumer_tag": _get("consumer_tag"),
            "ack_required": _get("ack_required"),
            "prefetch_count": _get("prefetch_count"),
            "active": _get("active"),
            "activity_status": _get("activity_status"),
            "exclusive": _get("exclusive"),
            "arguments": _args("arguments"),
        },
    ),
    "list_users": Listing(
        "The users and their tags.",
        lambda o: "/api/users",
        lambda o: ["Listing users ..."],
        ["user", "tags"],
        {"user": _get("name"), "tags": _get("tags")},
        takes_columns=False,
    ),
    "list_vhosts": Listing(
        "The virtual hosts.",
        lambda o: "/api/vhosts",
        lambda o: ["Listing vhosts ..."],
        ["name"],
        {
            **_plain("name", "description", "tracing", "default_queue_type"),
            "tags": _get("tags"),
            "cluster_state": lambda item, node: item.get("cluster_state") or {},
        },
    ),
    "list_permissions": Listing(
        "Who may do what in a virtual host.",
        lambda o: f"/api/vhosts/{q(o.vhost)}/permissions",
        lambda o: [f'Listing permissions for vhost "{o.vhost}" ...'],
        ["user", "configure", "write", "read"],
        _plain("user", "configure", "write", "read"),
        takes_columns=False,
    ),
}


def _chosen(columns: list[str], default: list[str], known: Collection[str]) -> list[str]:
    """The columns asked for (the default ones when none are); an unknown one is refused
    as rabbitmqctl refuses it."""
    columns = columns or default
    unknown = [c for c in columns if c not in known]
    if unknown:
        raise CtlError(
            f"(argument validation): Info key(s) {','.join(unknown)} are not supported",
            EX_USAGE,
        )
    return columns


def run_listing(spec: Listing, columns: list[str], ctl: Ctl) -> None:
    opts, client = ctl.opts, ctl.client
    columns = _chosen(columns, spec.default, spec.columns)
    items = client.get(spec.path(opts), missing=[])
    if spec.keep is not None:
        items = [item for item in items or [] if spec.keep(item)]
    needs_node = any(c in ("pid", "channel_pid", "connection", "owner_pid") for c in columns)
    node = client.node_name() if needs_node else ""
    rows = [[(c, spec.columns[c](item, node)) for c in columns] for item in items or []]
    out = sys.stdout
    if opts.formatter == "json":
        out.write(
            fmt.json_rows(
                [{c: fmt.typed(v) if c in TABLE_KEYS else v for c, v in row} for row in rows]
            )
        )
        return
    if not opts.quiet:
        for line in spec.banner(opts):
            out.write(line + "\n")
    if rows and opts.table_headers:
        out.write("\t".join(columns) + "\n")
    for row in rows:
        out.write("\t".join(fmt.cell(v) for _, v in row) + "\n")


Columns = Annotated[list[str] | None, typer.Argument(metavar="COLUMN", show_default=False)]


def _with_columns(
    run: Callable[[list[str], Ctl], None], summary: str, known: Collection[str], default: list[str]
) -> Callable[[Ctl, list[str] | None], None]:
    """A listing verb that takes the columns to show, ``run(columns, ctl)``."""

    def listing(ctl: Ctl, columns: Columns = None) -> None:
        run(columns or [], ctl)

    listing.__doc__ = (
        f"{summary}\n\nCOLUMN is one of {', '.join(sorted(known))} (default: {' '.join(default)})."
    )
    return listing


def _listing_with_columns(spec: Listing) -> Callable[[Ctl, list[str] | None], None]:
    return _with_columns(partial(run_listing, spec), spec.summary, spec.columns, spec.default)


def _listing(spec: Listing) -> Callable[[Ctl], None]:
    def listing(ctl: Ctl) -> None:
        run_listing(spec, [], ctl)

    listing.__doc__ = f"{spec.summary}\n\nColumns: {' '.join(spec.default)}."
    return listing


for _name, _spec in LISTINGS.items():
    if _spec.takes_columns:
        verb("listing", name=_name)(_listing_with_columns(_spec))
    else:
        verb("listing", name=_name)(_listing(_spec))


@verb("listing")
def list_user_permissions(ctl: Ctl, username: str) -> None:
    """One user's permissions in every virtual host."""
    perms = ctl.client.get(
        f"/api/users/{q(username)}/permissions",
        missing=CtlError(f'User "{username}" does not exist', EX_NOUSER),
    )
    rows = [{k: p[k] for k in ("vhost", "configure", "write", "read")} for p in perms]
    if ctl.opts.formatter == "json":
        sys.stdout.write(fmt.json_rows(rows))
        return
    ctl.banner(f'Listing permissions for user "{username}" ...')
    if rows and ctl.opts.table_headers:
        print("vhost\tconfigure\twrite\tread")
    for r in rows:
        print("\t".join(r.values()))


# ---------------------------------------------------------------------- streams
# rabbitmqctl's (and rabbitmq-streams') list_stream_connections, list_stream_consumers
# and list_stream_publishers: rabbit_stream's info keys, read from the management API's
# /api/stream/* answers. Their default formatter is pretty_table.
PID, IP, PROPERTIES, CLIENT = "pid", "ip", "properties", "client"


@dataclass
class StreamListing:
    summary: str
    path: Callable[[Options], str]
    banner: str
    columns: dict[str, tuple[str, str | None]]  # column -> (API field, kind)
    default: list[str] | None = None  # the columns shown by default; None: all of them

    @property
    def default_columns(self) -> list[str]:
        return list(self.columns) if self.default is None else self.default


def _stream_value(item: dict[str, Any], field: str) -> Any:
    value: Any = item
    for part in field.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return value


def _erlang_map(props: dict[str, Any], pretty: bool) -> str:
    """A map of strings as rabbitmqctl prints it: ``#{<<"k">> => <<"v">>}`` in a pretty
    table, ``#{k => v}`` in a plain one."""
    show = fmt.erlang_binary if pretty else str
    return "#{" + ",".join(f"{show(k)} => {show(str(v))}" for k, v in sorted(props.items())) + "}"


def _stream_cell(kind: str | None, value: Any, node: str, formatter: str) -> Any:
    pretty = formatter == "pretty_table"
    if kind == PID:
        if pretty:
            return fmt.local_pid(str(value or ""))
        pid = fmt.pid(node, str(value or ""))
        return "#PID" + pid if formatter == "json" else pid
    if kind == IP:
        if formatter == "table":
            return fmt.cell(value)
        parts = fmt.ip_tuple(str(value or ""))
        if formatter == "json":
            return parts if parts is not None else value
        return "{" + ",".join(map(str, parts)) + "}" if parts is not None else fmt.cell(value)
    if kind == PROPERTIES:
        props = value if isinstance(value, dict) else {}
        return props if formatter == "json" else _erlang_map(props, pretty)
    if kind == CLIENT:
        # a map in rabbit_stream_reader: by key
        props = dict(sorted(value.items())) if isinstance(value, dict) else {}
        if formatter == "json":
            return fmt.typed(props)
        if pretty:
            return "".join(
                f"{{{fmt.erlang_binary(k)},{type_name(v)},{fmt.erlang_binary(str(v))}}}"
                for k, v in props.items()
            )
        return fmt.cell(props)
    if value is None:  # what the stream reader shows as '' (TLS fields without TLS)
        value = ""
    return value if formatter == "json" else fmt.cell(value)


def _subscriptions(client: Client) -> dict[str, int]:
    """Subscriptions by connection name (the API shows them as consumers)."""
    counts: dict[str, int] = {}
    for c in client.get("/api/stream/consumers") or []:
        name = (c.get("connection_details") or {}).get("name", "")
        counts[name] = counts.get(name, 0) + 1
    return counts


def run_stream_listing(spec: StreamListing, columns: list[str], ctl: Ctl) -> None:
    opts, client = ctl.opts, ctl.client
    columns = _chosen(columns, spec.default_columns, spec.columns)
    formatter = opts.formatter if opts.formatter_given else "pretty_table"
    items = client.get(spec.path(opts), missing=[]) or []
    if "subscriptions" in columns:
        counts = _subscriptions(client)
        for item in items:
            item["subscriptions"] = counts.get(str(item.get("name", "")), 0)
    node = client.node_name() if any(spec.columns[c][1] == PID for c in columns) else ""
    rows = [
        [
            _stream_cell(
                spec.columns[c][1], _stream_value(item, spec.columns[c][0]), node, formatter
            )
            for c in columns
        ]
        for item in items
    ]
    out = sys.stdout
    if formatter == "json":
        out.write(fmt.json_rows([dict(zip(columns, row, strict=True)) for row in rows]))
        return
    if not opts.quiet:
        out.write(spec.banner + "\n")
    if formatter == "pretty_table":
        out.write(fmt.pretty_table(columns, [[str(v) for v in row] for row in rows]))
        return
    if rows and opts.table_headers:
        out.write("\t".join(columns) + "\n")
    for row in rows:
        out.write("\t".join(str(v) for v in row) + "\n")


StreamColumns = dict[str, tuple[str, str | None]]


def _fields(*names: str) -> StreamColumns:
    """Columns that are the API's fields of the same names, shown as they are."""
    return {n: (n, None) for n in names}


def _per_vhost(what: str, own_id: str, columns: StreamColumns) -> StreamListing:
    """The stream consumers or publishers of the virtual host given by -p: the connection,
    the id, the stream, then ``columns``."""
    return StreamListing(
        f"Lists all stream {what} for a vhost.",
        lambda o: f"/api/stream/{what}/{q(o.vhost)}",
        f"Listing stream {what} ...",
        {
            "connection_pid": ("connection_details.name", PID),
            **_fields(own_id),
            "stream": ("queue.name", None),
            **columns,
        },
    )


STREAM_LISTINGS: dict[str, StreamListing] = {
    "list_stream_connections": StreamListing(
        "Lists stream connections.",
        lambda o: "/api/stream/connections",
        "Listing stream connections ...",
        {
            "conn_name": ("name", None),
            **_fields("port", "peer_port"),
            "host": ("host", IP),
            **_fields("peer_cert_issuer", "peer_cert_subject", "peer_cert_validity"),
            "peer_host": ("peer_host", IP),
            **_fields("user", "vhost", "subscriptions", "ssl", "ssl_cipher", "ssl_hash"),
            **_fields("ssl_key_exchange", "ssl_protocol"),
            "connection_state": ("state", None),
            "auth_mechanism": ("auth_mechanism", None),
            "heartbeat": ("timeout", None),
            "frame_max": ("frame_max", None),
            "client_properties": ("client_properties", CLIENT),
            "connected_at": ("connected_at", None),
        },
        ["conn_name"],
    ),
    "list_stream_consumers": _per_vhost(
        "consumers",
        "subscription_id",
        {
            "messages_consumed": ("consumed", None),
            **_fields("offset", "offset_lag", "credits"),
            "properties": ("properties", PROPERTIES),
        },
    ),
    "list_stream_publishers": _per_vhost(
        "publishers",
        "publisher_id",
        {
            **_fields("reference"),
            "messages_published": ("published", None),
            "messages_confirmed": ("confirmed", None),
            "messages_errored": ("errored", None),
        },
    ),
}


def _stream_listing(spec: StreamListing) -> Callable[[Ctl, list[str] | None], None]:
    return _with_columns(
        partial(run_stream_listing, spec), spec.summary, spec.columns, spec.default_columns
    )


for _name, _stream_spec in STREAM_LISTINGS.items():
    verb("listing", name=_name)(_stream_listing(_stream_spec))
