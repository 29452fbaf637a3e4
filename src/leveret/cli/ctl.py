"""``leveret ctl``: rabbitmqctl's verbs, as a client of the management HTTP API.

The default output is what rabbitmqctl 3.10 prints for the same state: the banner lines,
a tab-separated header and rows. ``--quiet`` drops the banners, ``--no-table-headers``
the header, and ``--formatter json`` prints rabbitmqctl's JSON list. Errors are one line
on stderr with rabbitmqctl's exit codes."""

from __future__ import annotations

import json
import os
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

from leveret.cli import ctlformat as fmt
from leveret.cli.ctlclient import (
    DEFAULT_URL,
    EX_DATAERR,
    EX_NOUSER,
    EX_OK,
    EX_SOFTWARE,
    EX_UNAVAILABLE,
    EX_USAGE,
    Client,
    CtlError,
    HttpError,
    Options,
    arity,
    banner_line,
    q,
)
from leveret.cli.ctllist import LISTINGS, list_user_permissions, node_name, run_listing


def _user_exists(client: Client, user: str) -> bool:
    try:
        client.get(f"/api/users/{q(user)}")
        return True
    except HttpError as exc:
        if exc.status == 404:
            return False
        raise


def _vhost_exists(client: Client, vhost: str) -> bool:
    try:
        client.get(f"/api/vhosts/{q(vhost)}")
        return True
    except HttpError as exc:
        if exc.status == 404:
            return False
        raise


def add_user(args: list[str], opts: Options, client: Client) -> int:
    arity(args, 1, 2)
    user = args[0]
    password = args[1] if len(args) > 1 else None
    banner_line(opts, f'Adding user "{user}" ...')
    if _user_exists(client, user):
        raise CtlError(f'User "{user}" already exists', EX_SOFTWARE)
    if password is None:
        password = sys.stdin.readline().rstrip("\n")
    client.request("PUT", f"/api/users/{q(user)}", {"password": password, "tags": ""})
    if not opts.quiet:
        print(
            "Done. Don't forget to grant the user permissions to some virtual hosts! "
            "See 'rabbitmqctl help set_permissions' to learn more."
        )
    return EX_OK


def delete_user(args: list[str], opts: Options, client: Client) -> int:
    arity(args, 1, 1)
    banner_line(opts, f'Deleting user "{args[0]}" ...')
    try:
        client.request("DELETE", f"/api/users/{q(args[0])}")
    except HttpError as exc:
        if exc.status == 404:
            raise CtlError(f'User "{args[0]}" does not exist', EX_NOUSER) from exc
        raise
    return EX_OK


def _existing_user(client: Client, user: str) -> dict[str, Any]:
    try:
        data: dict[str, Any] = client.get(f"/api/users/{q(user)}")
        return data
    except HttpError as exc:
        if exc.status == 404:
            raise CtlError(f'User "{user}" does not exist', EX_NOUSER) from exc
        raise


def change_password(args: list[str], opts: Options, client: Client) -> int:
    arity(args, 1, 2)
    user = args[0]
    banner_line(opts, f'Changing password for user "{user}" ...')
    existing = _existing_user(client, user)
    password = args[1] if len(args) > 1 else sys.stdin.readline().rstrip("\n")
    client.request("PUT", f"/api/users/{q(user)}", {"password": password, "tags": existing["tags"]})
    return EX_OK


def set_user_tags(args: list[str], opts: Options, client: Client) -> int:
    arity(args, 1, None)
    user, tags = args[0], args[1:]
    banner_line(opts, f'Setting tags for user "{user}" to [{", ".join(tags)}] ...')
    existing = _existing_user(client, user)
    body: dict[str, Any] = {"tags": tags, "password_hash": existing["password_hash"]}
    client.request("PUT", f"/api/users/{q(user)}", body)
    return EX_OK


def add_vhost(args: list[str], opts: Options, client: Client) -> int:
    arity(args, 1, 1)
    banner_line(opts, f'Adding vhost "{args[0]}" ...')
    body: dict[str, Any] = {}
    if "description" in opts.values:
        body["description"] = opts.values["description"]
    if "tags" in opts.values:
        body["tags"] = opts.values["tags"]
    if not _vhost_exists(client, args[0]):
        client.request("PUT", f"/api/vhosts/{q(args[0])}", body)
        # The API grants its caller permissions in a new vhost; rabbitmqctl does not.
        client.request("DELETE", f"/api/permissions/{q(args[0])}/{q(opts.username)}")
    return EX_OK


def delete_vhost(args: list[str], opts: Options, client: Client) -> int:
    arity(args, 1, 1)
    banner_line(opts, f'Deleting vhost "{args[0]}" ...')
    try:
        client.request("DELETE", f"/api/vhosts/{q(args[0])}")
    except HttpError as exc:
        if exc.status == 404:
            raise CtlError(f"Virtual host '{args[0]}' does not exist", EX_DATAERR) from exc
        raise
    return EX_OK


def _user_and_vhost(client: Client, user: str, vhost: str) -> None:
    if not _user_exists(client, user):
        raise CtlError(f"User {user} does not exist", EX_NOUSER)
    if not _vhost_exists(client, vhost):
        raise CtlError(f"Virtual host {vhost} does not exist", EX_UNAVAILABLE)


def set_permissions(args: list[str], opts: Options, client: Client) -> int:
    arity(args, 4, 4)
    user, conf, write, read = args
    banner_line(opts, f'Setting permissions for user "{user}" in vhost "{opts.vhost}" ...')
    _user_and_vhost(client, user, opts.vhost)
    try:
        client.request(
            "PUT",
            f"/api/permissions/{q(opts.vhost)}/{q(user)}",
            {"configure": conf, "write": write, "read": read},
        )
    except HttpError as exc:
        raise CtlError(exc.reason, EX_DATAERR) from exc
    return EX_OK


def clear_permissions(args: list[str], opts: Options, client: Client) -> int:
    arity(args, 1, 1)
    user = args[0]
    banner_line(opts, f'Clearing permissions for user "{user}" in vhost "{opts.vhost}" ...')
    _user_and_vhost(client, user, opts.vhost)
    try:
        client.request("DELETE", f"/api/permissions/{q(opts.vhost)}/{q(user)}")
    except HttpError as exc:
        if exc.status != 404:
            raise
    return EX_OK


def purge_queue(args: list[str], opts: Options, client: Client) -> int:
    arity(args, 1, 1)
    banner_line(opts, f"Purging queue '{args[0]}' in vhost '{opts.vhost}' ...")
    try:
        client.request("DELETE", f"/api/queues/{q(opts.vhost)}/{q(args[0])}/contents")
    except HttpError as exc:
        if exc.status == 404:
            raise CtlError("Queue not found", EX_UNAVAILABLE) from exc
        raise
    return EX_OK


def delete_queue(args: list[str], opts: Options, client: Client) -> int:
    arity(args, 1, 1)
    name = args[0]
    banner_line(opts, f"Deleting queue '{name}' on vhost '{opts.vhost}' ...")
    path = f"/api/queues/{q(opts.vhost)}/{q(name)}"
    try:
        count = int(client.get(path).get("messages_ready", 0))
        conditions = []
        if "if_empty" in opts.flags:
            conditions.append("if-empty=true")
        if "if_unused" in opts.flags:
            conditions.append("if-unused=true")
        client.request("DELETE", path + ("?" + "&".join(conditions) if conditions else ""))
    except HttpError as exc:
        if exc.status == 404:
            raise CtlError("Queue not found", EX_USAGE) from exc
        raise CtlError(exc.reason, EX_SOFTWARE) from exc
    print(f"Queue was successfully deleted with {count} ready messages")
    return EX_OK


def close_connection(args: list[str], opts: Options, client: Client) -> int:
    arity(args, 2, 2)
    target, reason = args
    banner_line(opts, f"Closing connection {target}, reason: {reason}...")
    node = node_name(client)
    for conn in client.get("/api/connections"):
        name = conn.get("name", "")
        if target in (name, fmt.pid(node, name)):
            req_path = f"/api/connections/{q(name)}"
            req = urllib.request.Request(client.base + req_path, method="DELETE")
            req.add_header("Authorization", client.auth)
            req.add_header("X-Reason", reason)
            try:
                urllib.request.urlopen(req, timeout=opts.timeout).close()
            except urllib.error.HTTPError as exc:
                raise CtlError(f"could not close connection {target}", EX_SOFTWARE) from exc
            return EX_OK
    raise CtlError(f"connection {target} not found", EX_DATAERR)


def export_definitions(args: list[str], opts: Options, client: Client) -> int:
    arity(args, 1, 1)
    data = client.get("/api/definitions")
    text = json.dumps(data, separators=(",", ":"), sort_keys=True, ensure_ascii=False)
    if args[0] == "-":
        sys.stdout.write(text)
        sys.stdout.flush()
        return EX_OK
    banner_line(opts, f'Exporting definitions in JSON to a file at "{args[0]}" ...')
    try:
        with open(args[0], "w", encoding="utf-8") as f:
            f.write(text)
    except OSError as exc:
        raise CtlError(f"could not write to {args[0]}: {exc.strerror}", EX_DATAERR) from exc
    return EX_OK


def import_definitions(args: list[str], opts: Options, client: Client) -> int:
    arity(args, 0, 1)
    source = args[0] if args else "-"
    if source == "-":
        banner_line(opts, "Importing definitions in JSON from standard input ...")
        raw = sys.stdin.read()
    else:
        banner_line(opts, f'Importing definitions in JSON from a file at "{source}" ...')
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
        client.request("POST", "/api/definitions", data)
    except HttpError as exc:
        raise CtlError(f"failed to import definitions: {exc.reason}", EX_DATAERR) from exc
    if not opts.quiet:
        print(
            "Successfully started definition import. "
            "This process is asynchronous and can take some time."
        )
    return EX_OK


def status(args: list[str], opts: Options, client: Client) -> int:
    arity(args, 0, 0)
    overview = client.get("/api/overview")
    nodes = client.get("/api/nodes")
    node = nodes[0] if nodes else {}
    if opts.formatter == "json":
        print(json.dumps({"overview": overview, "node": node}, separators=(",", ":")))
        return EX_OK
    banner_line(opts, f"Status of node {overview.get('node')} ...")
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
        "Alarms",
        "",
        "Free disk space alarm: false",
        f"Memory alarm: {'true' if node.get('mem_alarm') else 'false'}",
        "",
        "Memory",
        "",
        f"Total memory used: {int(node.get('mem_used', 0)) / 1e9:.4f} gb",
        "Calculation strategy: rss",
        f"Memory high watermark limit: {int(node.get('mem_limit', 0)) / 1e9:.4f} gb",
        "",
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
    return EX_OK


def await_startup(args: list[str], opts: Options, client: Client) -> int:
    arity(args, 0, 0)
    deadline = time.monotonic() + opts.timeout
    while True:
        try:
            client.get("/api/overview")
            return EX_OK
        except CtlError as exc:
            if exc.code != EX_UNAVAILABLE or time.monotonic() >= deadline:
                raise
        time.sleep(0.2)


VERBS: dict[str, Callable[[list[str], Options, Client], int]] = {
    "list_user_permissions": list_user_permissions,
    "add_user": add_user,
    "delete_user": delete_user,
    "change_password": change_password,
    "set_user_tags": set_user_tags,
    "add_vhost": add_vhost,
    "delete_vhost": delete_vhost,
    "set_permissions": set_permissions,
    "clear_permissions": clear_permissions,
    "purge_queue": purge_queue,
    "delete_queue": delete_queue,
    "close_connection": close_connection,
    "export_definitions": export_definitions,
    "import_definitions": import_definitions,
    "status": status,
    "await_startup": await_startup,
}

USAGE = """Usage: leveret ctl [--url URL] [-u USER] [-p PASSWORD] <command> [<command options>]

Talks to a running Leveret through its management API (default http://127.0.0.1:15672,
guest/guest; or LEVERET_CTL_URL, LEVERET_CTL_USERNAME, LEVERET_CTL_PASSWORD).

Options anywhere: -q/--quiet, --formatter table|json, --no-table-headers, -t/--timeout S.
After the command: -p/--vhost VHOST.

Commands:
  list_exchanges list_bindings list_queues list_connections list_channels list_consumers
  list_users list_vhosts list_permissions list_user_permissions
  add_user delete_user change_password set_user_tags
  add_vhost delete_vhost set_permissions clear_permissions
  purge_queue delete_queue close_connection
  export_definitions import_definitions status await_startup
"""


def parse(argv: list[str], env: dict[str, str]) -> tuple[str | None, list[str], Options]:
    opts = Options(
        url=env.get("LEVERET_CTL_URL") or DEFAULT_URL,
        username=env.get("LEVERET_CTL_USERNAME") or "guest",
        password=env.get("LEVERET_CTL_PASSWORD") or "guest",
    )
    verb: str | None = None
    args: list[str] = []
    i = 0

    def value(name: str) -> str:
        nonlocal i
        if "=" in argv[i] and argv[i].startswith("--"):
            return argv[i].split("=", 1)[1]
        i += 1
        if i >= len(argv):
            raise CtlError(f"(argument validation): option {name} needs a value", EX_USAGE)
        return argv[i]

    while i < len(argv):
        a = argv[i]
        opt = a.split("=", 1)[0] if a.startswith("--") else a
        if opt in ("-h", "--help", "help") and verb is None:
            return "help", [], opts
        if opt == "--url":
            opts.url = value(opt)
        elif opt == "--username" or (opt == "-u" and verb != "delete_queue"):
            opts.username = value(opt)
        elif opt == "--password" or (opt == "-p" and verb is None):
            opts.password = value(opt)
        elif opt in ("-p", "--vhost"):
            opts.vhost = value(opt)
        elif opt in ("-q", "--quiet", "--silent", "-s"):
            opts.quiet = True
        elif opt == "--formatter":
            opts.formatter = value(opt)
            if opts.formatter not in ("table", "json", "pretty_table"):
                raise CtlError(
                    f"(argument validation): unknown formatter {opts.formatter}", EX_USAGE
                )
        elif opt == "--no-table-headers":
            opts.table_headers = False
        elif opt in ("-t", "--timeout"):
            try:
                opts.timeout = float(value(opt))
            except ValueError as exc:
                raise CtlError("(argument validation): timeout must be a number", EX_USAGE) from exc
        elif opt in ("-n", "--node", "--longnames", "-l"):
            if opt in ("-n", "--node"):
                value(opt)
        elif opt in ("-e", "--if-empty"):
            opts.flags.add("if_empty")
        elif opt in ("-u", "--if-unused"):
            opts.flags.add("if_unused")
        elif opt in ("--description", "--tags", "--default-queue-type"):
            opts.values[opt[2:]] = value(opt)
        elif a.startswith("-") and a != "-":
            raise CtlError(f"(argument validation): invalid option {a}", EX_USAGE)
        elif verb is None:
            verb = a
        else:
            args.append(a)
        i += 1
    return verb, args, opts


def main(argv: list[str], env: dict[str, str] | None = None) -> int:
    environ = dict(os.environ) if env is None else env
    try:
        verb, args, opts = parse(argv, environ)
        if verb is None or verb == "help":
            sys.stdout.write(USAGE)
            return EX_OK if verb == "help" else EX_USAGE
        if verb not in LISTINGS and verb not in VERBS:
            raise CtlError(f"Command '{verb}' not found.", EX_USAGE, plain=True)
        client = Client(opts)
        if verb in LISTINGS:
            return run_listing(verb, args, opts, client)
        return VERBS[verb](args, opts, client)
    except CtlError as exc:
        sys.stdout.flush()
        message = exc.message
        sep = " " if message.startswith("(") else ": "
        print(message if exc.plain else f"Error{sep}{message}", file=sys.stderr)
        return exc.code
    except HttpError as exc:
        sys.stdout.flush()
        print(f"Error: {exc.reason or exc}", file=sys.stderr)
        return EX_SOFTWARE
