"""``leveret ctl``'s operator verbs, as rabbitmqctl 3.10.8 prints them: policies and
operator policies, vhost and user limits, topic permissions, global parameters and the
cluster name. Each is a client of the management API (``/api/policies``,
``/api/operator-policies``, ``/api/vhost-limits``, ``/api/user-limits``,
``/api/topic-permissions``, ``/api/global-parameters``, ``/api/cluster-name``)."""

from __future__ import annotations

import html
import json
import sys
from collections.abc import Iterable
from typing import Annotated, Any

import typer

from leveret.broker.limits import USER_LIMITS, VHOST_LIMITS, limit_error
from leveret.cli import ctlformat as fmt
from leveret.cli.ctlapp import option_value, verb
from leveret.cli.ctlclient import (
    EX_DATAERR,
    EX_UNAVAILABLE,
    Ctl,
    CtlError,
    HttpError,
    put_permissions,
    q,
    user_and_vhost,
)

POLICY_COLUMNS = ("vhost", "name", "pattern", "apply-to", "definition", "priority")


def _error(text: str, code: int = EX_UNAVAILABLE) -> CtlError:
    """rabbitmqctl's "Error:" and the broker's text on the next line."""
    return CtlError(f"Error:\n{text}", code, plain=True)


def _no_vhost(vhost: str) -> CtlError:
    return CtlError(f"Virtual host '{vhost}' does not exist", EX_DATAERR, plain=True)


def _json(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        raise _error("JSON decoding error. Reason: badarg") from None


def _compact(value: Any) -> str:
    """A definition or limits as rabbitmqctl prints them: compact JSON, keys in order."""
    return json.dumps(value, separators=(",", ":"), sort_keys=True, ensure_ascii=False)


_priority = option_value(int, "priority must be an integer")


def _apply_to(value: str) -> str:
    return value


def _rows(ctl: Ctl, header: tuple[str, ...] | None, rows: list[list[str]]) -> None:
    """A table as rabbitmqctl prints these listings: the header unless asked not to, and
    an empty line when there is nothing."""
    out = sys.stdout
    if not rows:
        out.write("\n")
        return
    if header is not None and ctl.opts.table_headers:
        out.write("\t".join(header) + "\n")
    for row in rows:
        out.write("\t".join(row) + "\n")


def _json_rows(rows: list[dict[str, Any]]) -> None:
    sys.stdout.write(fmt.json_rows(rows) if rows else "[]\n")


# --------------------------------------------------------------------- policies
Priority = Annotated[
    int,
    typer.Option("--priority", parser=_priority, metavar="N", help="Higher wins (default 0)."),
]
ApplyTo = Annotated[
    str,
    typer.Option("--apply-to", parser=_apply_to, metavar="WHAT", help="queues, exchanges or all."),
]


def _set_policy(
    ctl: Ctl,
    operator: bool,
    name: str,
    pattern: str,
    definition: str,
    priority: int,
    apply_to: str,
) -> None:
    vhost = ctl.opts.vhost
    what = "operator policy override" if operator else "policy"
    ctl.banner(
        f'Setting {what} "{name}" for pattern "{pattern}" to "{definition}" with priority '
        f'"{priority}" for vhost "{vhost}" ...'
    )
    body = {
        "pattern": pattern,
        "definition": _json(definition),
        "priority": priority,
        "apply-to": apply_to,
    }
    path = "operator-policies" if operator else "policies"
    try:
        ctl.client.request("PUT", f"/api/{path}/{q(vhost)}/{q(name)}", body)
    except HttpError as exc:
        if exc.status == 404:
            raise _no_vhost(vhost) from exc
        # the policy endpoint escapes its answer for HTML; rabbitmqctl's is plain
        raise _error(html.unescape(exc.reason).rstrip("\n") + "\n") from exc


def _clear_policy(ctl: Ctl, operator: bool, name: str) -> None:
    vhost = ctl.opts.vhost
    what = "operator policy" if operator else "policy"
    ctl.banner(f'Clearing {what} "{name}" on vhost "{vhost}" ...')
    path = "operator-policies" if operator else "policies"
    ctl.client.request(
        "DELETE", f"/api/{path}/{q(vhost)}/{q(name)}", missing=_error("Parameter does not exist")
    )


def _list_policies(ctl: Ctl, operator: bool) -> None:
    vhost = ctl.opts.vhost
    what = "operator policy overrides" if operator else "policies"
    path = "operator-policies" if operator else "policies"
    json_out = ctl.opts.formatter == "json"
    if not json_out:
        ctl.banner(f'Listing {what} for vhost "{vhost}" ...')
    items = ctl.client.get(f"/api/{path}/{q(vhost)}", missing=_no_vhost(vhost))
    items = sorted(items, key=lambda p: p["priority"])  # lowest priority first
    if json_out:
        _json_rows(
            [
                {**{k: p[k] for k in POLICY_COLUMNS}, "definition": _compact(p["definition"])}
                for p in items
            ]
        )
        return
    rows = [
        [
            p["vhost"],
            p["name"],
            p["pattern"],
            p["apply-to"],
            _compact(p["definition"]),
            fmt.cell(p["priority"]),
        ]
        for p in items
    ]
    _rows(ctl, POLICY_COLUMNS, rows)


def _policy_verbs(operator: bool, set_doc: str, clear_doc: str, list_doc: str) -> None:
    """Register the set, clear and list verbs of policies (or of operator policies)."""
    kind = "operator_policy" if operator else "policy"
    kinds = "operator_policies" if operator else "policies"

    def set_(
        ctl: Ctl,
        name: str,
        pattern: str,
        definition: str,
        priority: Priority = 0,
        apply_to: ApplyTo = "all",
    ) -> None:
        _set_policy(ctl, operator, name, pattern, definition, priority, apply_to)

    def clear(ctl: Ctl, name: str) -> None:
        _clear_policy(ctl, operator, name)

    def list_(ctl: Ctl) -> None:
        _list_policies(ctl, operator)

    for fn, verb_name, doc in (
        (set_, f"set_{kind}", set_doc),
        (clear, f"clear_{kind}", clear_doc),
        (list_, f"list_{kinds}", list_doc),
    ):
        fn.__doc__ = doc
        verb("policies", name=verb_name)(fn)


_policy_verbs(
    False,
    """Sets a policy in the virtual host given by -p: queues and exchanges whose names
    match PATTERN (a regular expression) take DEFINITION (a JSON object of keys such as
    max-length, message-ttl, dead-letter-exchange).""",
    "Clears a policy in the virtual host given by -p.",
    "The policies of the virtual host given by -p, lowest priority first.",
)
_policy_verbs(
    True,
    """Sets an operator policy in the virtual host given by -p: its limits (expires,
    message-ttl, max-length, max-length-bytes, delivery-limit) win over a policy's where
    they are stricter.""",
    "Clears an operator policy in the virtual host given by -p.",
    "The operator policies of the virtual host given by -p.",
)


# ------------------------------------------------------------------ vhost limits
def _list_every_limit(ctl: Ctl, who: str) -> None:
    """The limits of every virtual host (``who`` "vhost") or user ("user") that has some,
    as --global lists them."""
    json_out = ctl.opts.formatter == "json"
    if not json_out:
        ctl.banner(f"Listing limits for all {who}s ...")
    items = ctl.client.get(f"/api/{who}-limits")
    if json_out:
        _json_rows([{who: i[who], "limits": _compact(i["value"])} for i in items])
        return
    _rows(ctl, (who, "limits"), [[i[who], _compact(i["value"])] for i in items])


def _limits(ctl: Ctl, who: str, name: str, missing: Any) -> dict[str, Any] | None:
    """The limits of the virtual host (``who`` "vhost") or user ("user") ``name``; for one
    that does not exist, ``missing`` (raised if an exception)."""
    items = ctl.client.get(f"/api/{who}-limits/{q(name)}", missing=missing)
    if items is None:
        return None
    return dict(items[0]["value"]) if items else {}


def _delete_limits(ctl: Ctl, who: str, name: str, keys: Iterable[str]) -> None:
    for key in keys:
        ctl.client.request("DELETE", f"/api/{who}-limits/{q(name)}/{q(key)}")


def _put_limits(ctl: Ctl, who: str, name: str, limits: Iterable[tuple[str, Any]]) -> None:
    for key, value in limits:
        ctl.client.request("PUT", f"/api/{who}-limits/{q(name)}/{q(key)}", {"value": value})


def _vhost_limits(ctl: Ctl, vhost: str) -> dict[str, Any] | None:
    return _limits(ctl, "vhost", vhost, None)


@verb("limits")
def set_vhost_limits(ctl: Ctl, definition: str) -> None:
    """Sets the limits of the virtual host given by -p (a JSON object of max-connections
    and max-queues; a negative value is no limit), replacing the ones it has."""
    vhost = ctl.opts.vhost
    ctl.banner(f'Setting vhost limits to "{definition}" for vhost "{vhost}" ...')
    limits = _json(definition)
    if not isinstance(limits, dict):
        raise _error("Validation failed\n\nlimits must be a JSON object\n")
    current = _vhost_limits(ctl, vhost)
    if current is None:
        raise _no_vhost(vhost)
    for key, value in sorted(limits.items()):
        err = limit_error(key, value, VHOST_LIMITS, "limits")
        if err is not None:
            raise _error(f"Validation failed\n\n{err}\n")
    _delete_limits(ctl, "vhost", vhost, [key for key in current if key not in limits])
    # each PUT puts its limit first: the last one set is listed first
    _put_limits(ctl, "vhost", vhost, sorted(limits.items(), reverse=True))


@verb("limits")
def clear_vhost_limits(ctl: Ctl) -> None:
    """Clears every limit of the virtual host given by -p."""
    vhost = ctl.opts.vhost
    ctl.banner(f'Clearing vhost "{vhost}" limits ...')
    current = _vhost_limits(ctl, vhost)
    if not current:
        raise _error("Parameter does not exist")
    _delete_limits(ctl, "vhost", vhost, current)


@verb("limits")
def list_vhost_limits(
    ctl: Ctl,
    all_vhosts: Annotated[
        bool, typer.Option("--global", help="Every virtual host's limits.")
    ] = False,
) -> None:
    """The limits of the virtual host given by -p, or of every one (--global)."""
    if all_vhosts:
        _list_every_limit(ctl, "vhost")
        return
    json_out = ctl.opts.formatter == "json"
    vhost = ctl.opts.vhost
    if not json_out:
        ctl.banner(f'Listing limits for vhost "{vhost}" ...')
    limits = _vhost_limits(ctl, vhost)
    if limits is None:
        raise _no_vhost(vhost)
    if json_out:
        if not limits:
            sys.stdout.write("[]\n")
            return
        node = ctl.client.node_name()
        answer = {"node": node, "result": "ok", "value": _compact(limits)}
        sys.stdout.write(json.dumps(answer, separators=(",", ":")) + "\n")
        return
    sys.stdout.write((_compact(limits) if limits else "") + "\n")


# ------------------------------------------------------------------- user limits
def _no_user(user: str) -> CtlError:
    return _error(f'{{:no_such_user, "{user}"}}')


def _user_limits(ctl: Ctl, user: str) -> dict[str, Any]:
    return _limits(ctl, "user", user, _no_user(user)) or {}


@verb("limits")
def set_user_limits(ctl: Ctl, username: str, definition: str) -> None:
    """Sets limits of a user (a JSON object of max-connections and max-channels; a
    negative value is no limit); the limits it does not name stay."""
    ctl.banner(f'Setting user limits to "{definition}" for user "{username}" ...')
    limits = _json(definition)
    if not isinstance(limits, dict):
        raise _error("limits must be a JSON object")
    for key, value in sorted(limits.items()):
        err = limit_error(key, value, USER_LIMITS, "user-limits")
        if err is not None:
            raise _error(err)
    _user_limits(ctl, username)  # the user must exist
    _put_limits(ctl, "user", username, sorted(limits.items()))


@verb("limits")
def clear_user_limits(ctl: Ctl, username: str, limit_name: str) -> None:
    """Clears a limit of a user (max-connections, max-channels), or all of them (all)."""
    if limit_name == "all":
        ctl.banner(f'Clearing all limits for user "{username}" ...')
    else:
        ctl.banner(f'Clearing "{limit_name}" limit for user "{username}" ...')
    current = _user_limits(ctl, username)
    names = list(current) if limit_name == "all" else [limit_name]
    _delete_limits(ctl, "user", username, [key for key in names if key in current])


@verb("limits")
def list_user_limits(
    ctl: Ctl,
    user: Annotated[
        str | None, typer.Option("--user", metavar="USER", help="Whose limits.")
    ] = None,
    all_users: Annotated[bool, typer.Option("--global", help="Every user's limits.")] = False,
) -> None:
    """The limits of a user (--user, default the one ctl logs in as), or of every user
    that has some (--global)."""
    if all_users:
        _list_every_limit(ctl, "user")
        return
    json_out = ctl.opts.formatter == "json"
    name = user or ctl.opts.username
    if not json_out:
        ctl.banner(f'Listing limits for user "{name}" ...')
    limits = _user_limits(ctl, name)
    if json_out:
        sys.stdout.write(json.dumps({"message": _compact(limits)}, separators=(",", ":")) + "\n")
        return
    sys.stdout.write(_compact(limits) + "\n")


# ------------------------------------------------------------- topic permissions
def _topic_permissions_refused(exc: HttpError) -> CtlError:
    """The API's refusal of topic permissions as rabbitmqctl prints it: a pattern that is
    not a regular expression as Erlang's re reports it."""
    reason = exc.body.get("reason") if isinstance(exc.body, dict) else None
    if isinstance(reason, list) and reason and reason[0] == "invalid_regexp":
        codes, at = reason[2]
        message = "".join(map(chr, codes))
        return _error(f"{{:invalid_regexp, \"{reason[1]}\", {{'{message}', {at}}}}}")
    return _error(exc.reason)


@verb("topic permissions")
def set_topic_permissions(ctl: Ctl, user: str, exchange: str, write: str, read: str) -> None:
    """Sets what routing keys a user may publish with (WRITE) and bind with (READ) on a
    topic exchange of the virtual host given by -p (regular expressions; {username} and
    {vhost} are filled in)."""
    vhost = ctl.opts.vhost
    ctl.banner(
        f'Setting topic permissions on "{exchange}" for user "{user}" in vhost "{vhost}" ...'
    )
    user_and_vhost(ctl.client, user, vhost, _error)
    body = {"exchange": exchange, "write": write, "read": read}
    put_permissions(ctl, "topic-permissions", user, body, _topic_permissions_refused)


@verb("topic permissions")
def clear_topic_permissions(
    ctl: Ctl, username: str, exchange: Annotated[str | None, typer.Argument()] = None
) -> None:
    """Clears a user's topic permissions in the virtual host given by -p: on EXCHANGE, or
    on every exchange."""
    vhost = ctl.opts.vhost
    if exchange is None:
        ctl.banner(f'Clearing topic permissions for user "{username}" in vhost "{vhost}" ...')
    else:
        ctl.banner(
            f'Clearing topic permissions on "{exchange}" for user "{username}" in vhost '
            f'"{vhost}" ...'
        )
    user_and_vhost(ctl.client, username, vhost, _error)
    path = f"/api/topic-permissions/{q(vhost)}/{q(username)}"
    current = ctl.client.get(path, missing=None)
    if current is None:
        return  # nothing to clear: rabbitmqctl says nothing either
    if exchange is None:
        ctl.client.request("DELETE", path)
        return
    keep = [p for p in current if p["exchange"] != exchange]
    if len(keep) == len(current):
        return
    # the API clears a user's topic permissions in a vhost together: set back the others
    ctl.client.request("DELETE", path)
    for p in keep:
        ctl.client.request(
            "PUT", path, {"exchange": p["exchange"], "write": p["write"], "read": p["read"]}
        )


@verb("topic permissions")
def list_topic_permissions(ctl: Ctl) -> None:
    """The topic permissions of the virtual host given by -p."""
    vhost = ctl.opts.vhost
    json_out = ctl.opts.formatter == "json"
    if not json_out:
        ctl.banner(f'Listing topic permissions for vhost "{vhost}" ...')
    items = ctl.client.get(f"/api/vhosts/{q(vhost)}/topic-permissions", missing=_no_vhost(vhost))
    keys = ("user", "exchange", "write", "read")
    if json_out:
        _json_rows([{k: p[k] for k in keys} for p in items])
        return
    _rows(ctl, keys, [[p[k] for k in keys] for p in items])


@verb("topic permissions")
def list_user_topic_permissions(ctl: Ctl, username: str) -> None:
    """A user's topic permissions in every virtual host."""
    json_out = ctl.opts.formatter == "json"
    if not json_out:
        ctl.banner(f'Listing topic permissions for user "{username}" ...')
    items = ctl.client.get(
        f"/api/users/{q(username)}/topic-permissions", missing=_no_user(username)
    )
    keys = ("vhost", "exchange", "write", "read")
    if json_out:
        _json_rows([{k: p[k] for k in keys} for p in items])
        return
    _rows(ctl, None, [[p[k] for k in keys] for p in items])


# ------------------------------------------------------------- global parameters
def _ok(ctl: Ctl) -> None:
    """What rabbitmqctl prints of a command that succeeded, under ``--formatter json``."""
    if ctl.opts.formatter == "json":
        node = ctl.client.node_name()
        sys.stdout.write(json.dumps({"node": node, "result": "ok"}, separators=(",", ":")) + "\n")


def _json_banner(ctl: Ctl, line: str) -> None:
    """The banner, which ``--formatter json`` drops too."""
    if ctl.opts.formatter != "json":
        ctl.banner(line)


@verb("parameters")
def set_global_parameter(ctl: Ctl, name: str, value: str) -> None:
    """Sets a global runtime parameter to VALUE (JSON)."""
    _json_banner(ctl, f'Setting global runtime parameter "{name}" to "{value}" ...')
    ctl.client.request("PUT", f"/api/global-parameters/{q(name)}", {"value": _json(value)})
    _ok(ctl)


@verb("parameters")
def clear_global_parameter(ctl: Ctl, name: str) -> None:
    """Clears a global runtime parameter."""
    _json_banner(ctl, f'Clearing global runtime parameter "{name}" ...')
    missing = _error("Parameter does not exist")
    ctl.client.request("DELETE", f"/api/global-parameters/{q(name)}", missing=missing)
    _ok(ctl)


@verb("parameters")
def list_global_parameters(ctl: Ctl) -> None:
    """The global runtime parameters (cluster_name, internal_cluster_id, ...), their
    values as JSON."""
    json_out = ctl.opts.formatter == "json"
    if not json_out:
        ctl.banner("Listing global runtime parameters ...")
    rows = [[p["name"], _compact(p["value"])] for p in ctl.client.get("/api/global-parameters")]
    if json_out:
        _json_rows([{"name": name, "value": value} for name, value in rows])
        return
    _rows(ctl, ("name", "value"), rows)


@verb("parameters")
def set_cluster_name(ctl: Ctl, name: str) -> None:
    """Sets the cluster's name (the global parameter cluster_name), which clients see."""
    _json_banner(ctl, f"Setting cluster name to {name} ...")
    ctl.client.request("PUT", "/api/cluster-name", {"name": name})
    _ok(ctl)
