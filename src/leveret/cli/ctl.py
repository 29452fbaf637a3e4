"""``leveret ctl``: rabbitmqctl's verbs, as a client of the management HTTP API.

The default output is what rabbitmqctl 3.10 prints for the same state: the banner lines,
a tab-separated header and rows. ``--quiet`` drops the banners, ``--no-table-headers``
the header, and ``--formatter json`` prints rabbitmqctl's JSON list. Errors are one line
on stderr with rabbitmqctl's exit codes.

Each verb is one function registered with ``@verb`` (``ctlapp``): its arguments and options
are its parameters, its docstring is its help. The listing verbs are registered from their
table in ``ctllist``."""

from __future__ import annotations

import json
import os
import sys
import time
import urllib.error
import urllib.request
from typing import Annotated, Any

import typer

from leveret.cli import ctlformat as fmt
from leveret.cli.ctlapp import run, verb
from leveret.cli.ctlclient import (
    DEFAULT_URL,
    EX_DATAERR,
    EX_NOUSER,
    EX_SOFTWARE,
    EX_UNAVAILABLE,
    EX_USAGE,
    Ctl,
    CtlError,
    HttpError,
    Options,
    put_permissions,
    q,
    user_and_vhost,
)
from leveret.cli.ctllist import listed_by_rabbitmqctl
from leveret.cli.ctloperate import set_vhost_limits
from leveret.cli.ctlstreams import add_super_stream

# the operator verbs (policies, limits, topic permissions) register as ctloperate loads
_OPERATOR_VERBS = (set_vhost_limits,)
_STREAM_VERBS = (add_super_stream,)  # the super stream verbs register as ctlstreams loads

OptionalArg = Annotated[str | None, typer.Argument(show_default=False)]
MoreArgs = Annotated[list[str] | None, typer.Argument(show_default=False)]


def _no_user(user: str) -> CtlError:
    return CtlError(f'User "{user}" does not exist', EX_NOUSER)


@verb("users")
def add_user(ctl: Ctl, username: str, password: OptionalArg = None) -> None:
    """Adds a user with no tags and no permissions; without PASSWORD, reads it from
    standard input."""
    ctl.banner(f'Adding user "{username}" ...')
    if ctl.client.user(username, missing=None) is not None:
        raise CtlError(f'User "{username}" already exists', EX_SOFTWARE)
    if password is None:
        password = sys.stdin.readline().rstrip("\n")
    ctl.client.request("PUT", f"/api/users/{q(username)}", {"password": password, "tags": ""})
    if not ctl.opts.quiet:
        print(
            "Done. Don't forget to grant the user permissions to some virtual hosts! "
            "See 'rabbitmqctl help set_permissions' to learn more."
        )


@verb("users")
def delete_user(ctl: Ctl, username: str) -> None:
    """Deletes a user."""
    ctl.banner(f'Deleting user "{username}" ...')
    ctl.client.request("DELETE", f"/api/users/{q(username)}", missing=_no_user(username))


@verb("users")
def change_password(ctl: Ctl, username: str, new_password: OptionalArg = None) -> None:
    """Changes a user's password; without NEW_PASSWORD, reads it from standard input."""
    ctl.banner(f'Changing password for user "{username}" ...')
    existing = ctl.client.user(username, missing=_no_user(username))
    password = sys.stdin.readline().rstrip("\n") if new_password is None else new_password
    ctl.client.request(
        "PUT", f"/api/users/{q(username)}", {"password": password, "tags": existing["tags"]}
    )


@verb("users")
def set_user_tags(ctl: Ctl, username: str, tags: MoreArgs = None) -> None:
    """Sets a user's tags (administrator, monitoring, management, ...), replacing the
    ones it has; no TAGS clears them."""
    tags = tags or []
    ctl.banner(f'Setting tags for user "{username}" to [{", ".join(tags)}] ...')
    existing = ctl.client.user(username, missing=_no_user(username))
    body: dict[str, Any] = {"tags": tags, "password_hash": existing["password_hash"]}
    ctl.client.request("PUT", f"/api/users/{q(username)}", body)


@verb("vhosts")
def add_vhost(
    ctl: Ctl,
    vhost: str,
    description: Annotated[
        str | None, typer.Option("-d", "--description", metavar="TEXT", help="What it is for.")
    ] = None,
    tags: Annotated[
        str | None, typer.Option("--tags", metavar="TAGS", help="Comma-separated.")
    ] = None,
    default_queue_type: Annotated[
        str | None,
        typer.Option(
            "--default-queue-type",
            metavar="TYPE",
            help="Sent as the API's defaultqueuetype, which Leveret does not keep yet.",
        ),
    ] = None,
) -> None:
    """Adds a virtual host (nothing happens if it exists)."""
    ctl.banner(f'Adding vhost "{vhost}" ...')
    body: dict[str, Any] = {}
    if description is not None:
        body["description"] = description
    if tags is not None:
        body["tags"] = tags
    if default_queue_type is not None:
        body["defaultqueuetype"] = default_queue_type  # the management API's field name
    if ctl.client.vhost(vhost, missing=None) is None:
        ctl.client.request("PUT", f"/api/vhosts/{q(vhost)}", body)
        # The API grants its caller permissions in a new vhost; rabbitmqctl does not.
        ctl.client.request("DELETE", f"/api/permissions/{q(vhost)}/{q(ctl.opts.username)}")


@verb("vhosts")
def delete_vhost(ctl: Ctl, vhost: str) -> None:
    """Deletes a virtual host and everything in it."""
    ctl.banner(f'Deleting vhost "{vhost}" ...')
    missing = CtlError(f"Virtual host '{vhost}' does not exist", EX_DATAERR)
    ctl.client.request("DELETE", f"/api/vhosts/{q(vhost)}", missing=missing)


@verb("vhosts")
def set_permissions(ctl: Ctl, username: str, conf: str, write: str, read: str) -> None:
    """Sets a user's configure, write and read permissions (regular expressions) in the
    virtual host given by -p."""
    vhost = ctl.opts.vhost
    ctl.banner(f'Setting permissions for user "{username}" in vhost "{vhost}" ...')
    user_and_vhost(ctl.client, username, vhost)
    body = {"configure": conf, "write": write, "read": read}
    put_permissions(
        ctl, "permissions", username, body, lambda exc: CtlError(exc.reason, EX_DATAERR)
    )


@verb("vhosts")
def clear_permissions(ctl: Ctl, username: str) -> None:
    """Takes a user's permissions in the virtual host given by -p away."""
    vhost = ctl.opts.vhost
    ctl.banner(f'Clearing permissions for user "{username}" in vhost "{vhost}" ...')
    user_and_vhost(ctl.client, username, vhost)
    ctl.client.request("DELETE", f"/api/permissions/{q(vhost)}/{q(username)}", missing=None)


@verb("queues")
def purge_queue(ctl: Ctl, queue: str) -> None:
    """Drops a queue's ready messages."""
    ctl.banner(f"Purging queue '{queue}' in vhost '{ctl.opts.vhost}' ...")
    path = f"/api/queues/{q(ctl.opts.vhost)}/{q(queue)}/contents"
    ctl.client.request("DELETE", path, missing=CtlError("Queue not found", EX_UNAVAILABLE))


@verb("queues")
def delete_queue(
    ctl: Ctl,
    queue_name: str,
    if_empty: Annotated[
        bool, typer.Option("-e", "--if-empty", help="Only if it has no messages.")
    ] = False,
    if_unused: Annotated[
        bool, typer.Option("-u", "--if-unused", help="Only if it has no consumers.")
    ] = False,
) -> None:
    """Deletes a queue, with -e only if it has no ready messages, with -u only if it has
    no consumers."""
    conditions = [c for c, given in (("empty", if_empty), ("unused", if_unused)) if given]
    ctl.banner(
        f"Deleting queue '{queue_name}' on vhost '{ctl.opts.vhost}' "
        + "and ".join(f"if queue is {c} " for c in conditions)
        + "..."
    )
    path = f"/api/queues/{q(ctl.opts.vhost)}/{q(queue_name)}"
    query = "&".join(f"if-{c}=true" for c in conditions)
    try:
        count = int(ctl.client.get(path).get("messages_ready", 0))
        ctl.client.request("DELETE", path + (f"?{query}" if query else ""))
    except HttpError as exc:
        if exc.status == 404:
            raise CtlError("Queue not found", EX_USAGE) from exc
        # the API's reasons: "queue 'q' in vhost 'v' not empty" / "... in use"
        if exc.status == 400 and exc.reason.endswith(" not empty"):
            raise CtlError("Queue is not empty", EX_USAGE) from exc
        if exc.status == 400 and exc.reason.endswith(" in use"):
            raise CtlError("Queue is in use", EX_USAGE) from exc
        raise CtlError(exc.reason, EX_SOFTWARE) from exc
    print(f"Queue was successfully deleted with {count} ready messages")


@verb("queues")
def close_connection(ctl: Ctl, connection_pid: str, explanation: str) -> None:
    """Closes a connection, named by its pid (list_connections pid) or its name, telling
    the client EXPLANATION."""
    client = ctl.client
    ctl.banner(f"Closing connection {connection_pid}, reason: {explanation}...")
    node = client.node_name()
    for conn in client.get("/api/connections"):
        name = conn.get("name", "")
        if not listed_by_rabbitmqctl(conn):
            continue  # not rabbitmqctl's to close (streams, RabbitMQ 3.10.8's AMQP 1.0)
        if connection_pid in (name, fmt.pid(node, name)):
            req_path = f"/api/connections/{q(name)}"
            req = urllib.request.Request(client.base + req_path, method="DELETE")
            req.add_header("Authorization", client.auth)
            req.add_header("X-Reason", explanation)
            try:
                urllib.request.urlopen(req, timeout=ctl.opts.timeout).close()
            except urllib.error.HTTPError as exc:
                raise CtlError(f"could not close connection {connection_pid}", EX_SOFTWARE) from exc
            return
    if connection_pid.startswith("<") and connection_pid.endswith(">"):
        return  # as rabbitmqctl: a pid no connection has closes nothing, and that is all
    raise CtlError(f"connection {connection_pid} not found", EX_DATAERR)


@verb("definitions")
def export_definitions(ctl: Ctl, path: str) -> None:
    """Writes the definitions (users, vhosts, permissions, queues, exchanges, bindings,
    ...) as JSON to PATH, or to standard output for '-'."""
    data = ctl.client.get("/api/definitions")
    text = json.dumps(data, separators=(",", ":"), sort_keys=True, ensure_ascii=False)
    if path == "-":
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    ctl.banner(f'Exporting definitions in JSON to a file at "{path}" ...')
    try:
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
    except OSError as exc:
        raise CtlError(f"could not write to {path}: {exc.strerror}", EX_DATAERR) from exc


@verb("definitions")
def import_definitions(ctl: Ctl, path: OptionalArg = None) -> None:
    """Imports definitions from a JSON file at PATH, or from standard input (no PATH or
    '-')."""
    source = "-" if path is None else path
    if source == "-":
        ctl.banner("Importing definitions in JSON from standard input ...")
        raw = sys.stdin.read()
    else:
        ctl.banner(f'Importing definitions in JSON from a file at "{source}" ...')
        try:
            with open(source, encoding="utf-8") as f:
                raw = f.read()
        except OSError as exc:
            raise CtlError(f"could not read {source}: {exc.strerror}", EX_DATAERR) from exc
    try:
        data = json.loads(raw)
    except ValueError as exc:
        raise CtlError(f"{source} is not valid JSON: {exc}", EX_DATAERR) from exc
    try:
        ctl.client.request("POST", "/api/definitions", data)
    except HttpError as exc:
        raise CtlError(f"failed to import definitions: {exc.reason}", EX_DATAERR) from exc
    if not ctl.opts.quiet:
        print(
            "Successfully started definition import. "
            "This process is asynchronous and can take some time."
        )


@verb("definitions")
def status(ctl: Ctl) -> None:
    """The node's runtime, alarms, memory, totals and listeners."""
    client = ctl.client
    overview = client.get("/api/overview")
    nodes = client.get("/api/nodes")
    node = nodes[0] if nodes else {}
    if ctl.opts.formatter == "json":
        print(json.dumps({"overview": overview, "node": node}, separators=(",", ":")))
        return
    ctl.banner(f"Status of node {overview.get('node')} ...")
    totals = overview.get("object_totals", {})
    lines = [
        "Runtime",
        "",
        f"OS PID: {node.get('os_pid', '')}",
        f"Uptime (seconds): {int(node.get('uptime', 0)) // 1000}",
        "Is under maintenance?: false",
        f"RabbitMQ version: {overview.get('rabbitmq_version')}",
        f"Product name: {overview.get('product_name')}",
        f"Product version: {overview.get('product_version')}",
        f"Node name: {overview.get('node')}",
        "",
        "Plugins",
        "",
        # RabbitMQ reads them from a file; Leveret's come from its configuration
        "Enabled plugin file: (none: --plugins, LEVERET_PLUGINS or plugins in the config)",
        "Enabled plugins:",
        "",
        *(f" * {name}" for name in node.get("enabled_plugins", [])),
        "",
        "Alarms",
        "",
        *_alarm_lines(node),
        "",
        "Memory",
        "",
        f"Total memory used: {int(node.get('mem_used', 0)) / 1e9:.4f} gb",
        "Calculation strategy: rss",
        f"Memory high watermark limit: {int(node.get('mem_limit', 0)) / 1e9:.4f} gb",
        "",
        *_disk_lines(node),
        "Totals",
        "",
        f"Connection count: {totals.get('connections', 0)}",
        f"Queue count: {totals.get('queues', 0)}",
        f"Virtual host count: {len(client.get('/api/vhosts'))}",
        "",
        "Listeners",
        "",
    ]
    for lst in overview.get("listeners", []):
        lines.append(
            f"Interface: {lst.get('ip_address')}, port: {lst.get('port')}, "
            f"protocol: {lst.get('protocol')}"
        )
    print("\n".join(lines))


def _alarm_lines(node: dict[str, Any]) -> list[str]:
    """rabbitmqctl status's alarms: one line per alarm in effect, or (none)."""
    name = node.get("name", "")
    lines = []
    if node.get("disk_free_alarm"):
        lines.append(f"Free disk space alarm on node {name}")
    if node.get("mem_alarm"):
        lines.append(f"Memory alarm on node {name}")
    return lines or ["(none)"]


def _gb(value: Any) -> str:
    return repr(round(int(value) / 1e9, 4))


def _disk_lines(node: dict[str, Any]) -> list[str]:
    if "disk_free" not in node:
        return []  # not measured (no data directory)
    return [
        "Free Disk Space",
        "",
        f"Low free disk space watermark: {_gb(node.get('disk_free_limit', 0))} gb",
        f"Free disk space: {_gb(node['disk_free'])} gb",
        "",
    ]


@verb("definitions")
def await_startup(ctl: Ctl) -> None:
    """Waits until the broker answers, for up to --timeout seconds."""
    deadline = time.monotonic() + ctl.opts.timeout
    while True:
        try:
            ctl.client.get("/api/overview")
            return
        except CtlError as exc:
            if exc.code != EX_UNAVAILABLE or time.monotonic() >= deadline:
                raise
        time.sleep(0.2)


def _set_tracing(ctl: Ctl, on: bool) -> None:
    """rabbitmqctl trace_on / trace_off: the management API's vhost ``tracing`` flag. As
    RabbitMQ, a vhost that does not exist is no error; Leveret has no API to remember
    its name, so nothing changes for it."""
    vhost = ctl.opts.vhost
    json_out = ctl.opts.formatter == "json"
    if not json_out:
        ctl.banner(f'{"Starting" if on else "Stopping"} tracing for vhost "{vhost}" ...')
    if ctl.client.vhost(vhost, missing=None) is not None:
        info = ctl.client.get(f"/api/vhosts/{q(vhost)}")
        body = {"description": info.get("description", ""), "tags": info.get("tags", [])}
        ctl.client.request("PUT", f"/api/vhosts/{q(vhost)}", {**body, "tracing": on})
    value = f"Trace {'enabled' if on else 'disabled'} for vhost {vhost}"
    if json_out:
        node = ctl.client.node_name()
        print(json.dumps({"node": node, "result": "ok", "value": value}, separators=(",", ":")))
    else:
        print(value)


@verb("monitoring")
def trace_on(ctl: Ctl) -> None:
    """Starts message tracing (the firehose) in the virtual host given by -p: copies of
    every publish and delivery there go to amq.rabbitmq.trace."""
    _set_tracing(ctl, True)


@verb("monitoring")
def trace_off(ctl: Ctl) -> None:
    """Stops message tracing in the virtual host given by -p."""
    _set_tracing(ctl, False)


def main(argv: list[str], env: dict[str, str] | None = None) -> int:
    """``leveret ctl ARGV``: the exit code. The environment gives the defaults of --url, -u
    and -p (LEVERET_CTL_URL, LEVERET_CTL_USERNAME, LEVERET_CTL_PASSWORD)."""
    environ = dict(os.environ) if env is None else env
    opts = Options(
        url=environ.get("LEVERET_CTL_URL") or DEFAULT_URL,
        username=environ.get("LEVERET_CTL_USERNAME") or "guest",
        password=environ.get("LEVERET_CTL_PASSWORD") or "guest",
    )
    return run(argv, opts)
