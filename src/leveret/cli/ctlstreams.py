"""``leveret ctl add_super_stream`` and ``delete_super_stream``, as ``rabbitmq-streams``
of RabbitMQ 4.2.9 prints them (rabbitmq_stream's AddSuperStreamCommand and
DeleteSuperStreamCommand, and rabbitmq_cli's error printing).

The options are checked as the command's ``validate`` checks them, in its order and with
its texts (``Error (argument validation): ~c"..."``, exit code 64). A super stream is
created through the management API's ``PUT /api/stream/super-streams/{vhost}/{name}``
(RabbitMQ 4.2's; the broker's super stream operations make it, as the acting user), and
deleted as the stream manager deletes one: the exchange, then each stream bound to it.
A failure the stream manager reports is printed as the CLI prints its ``{error, Reason}``
(``Error:`` and the reason as Elixir inspects it, exit code 70).

Both need a broker in RabbitMQ 4.2 mode: the management API of the default mode has no
super stream endpoint, as RabbitMQ 3.10.8's has none (its ``rabbitmq-streams`` makes one
over Erlang distribution, which ``leveret ctl`` does not speak)."""

from __future__ import annotations

import json
import re
from typing import Annotated, Any

import typer

from leveret.cli.ctlapp import option_value, verb
from leveret.cli.ctlclient import (
    EX_SOFTWARE,
    EX_UNAVAILABLE,
    EX_USAGE,
    Ctl,
    CtlError,
    HttpError,
    q,
)

MAX_PARTITIONS = 1000  # rabbit_stream_utils ?MAX_SUPER_STREAM_PARTITIONS
# rabbit_resource_monitor_misc:parse_information_unit at v4.2.9 (its alternatives, in
# order: the first that lets the whole value match wins)
_SIZE = re.compile(
    r"(?P<num>[0-9]+)(?P<unit>kB|Ki|Mi|Gi|Ti|Pi|KB|MB|GB|TB|PB|kb|ki|mb|gb|tb|pb|Kb|Mb|Gb|Tb"
    r"|Pb|kiB|KiB|MiB|GiB|TiB|PiB|kib|mib|gib|tib|pib|KIB|MIB|GIB|TIB|PIB|k|K|m|M|g|G|p|P)?"
)
_BINARY = {"k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4, "p": 1024**4 * 2014}
_DECIMAL = {"k": 1000, "m": 1000**2, "g": 1000**3, "t": 1000**4, "p": 1000**5}
# rabbit_date_time:parse_duration
_DURATION = re.compile(
    r"[-+]?P(?:(?P<years>[0-9]+)Y)?(?:(?P<months>[0-9]+)M)?(?:(?P<days>[0-9]+)D)?"
    r"(?:T(?:(?P<hours>[0-9]+)H)?(?:(?P<minutes>[0-9]+)M)?(?:(?P<seconds>[0-9]+(?:\.[0-9]+)?)S)?)?"
)
LEADER_LOCATORS = ("client-local", "balanced", "random", "least-leaders")


def information_unit(value: str) -> int | None:
    """A size in bytes (None: not one). ``Ki``-style units are powers of 1024, ``k`` and
    ``KB`` powers of 1000, as Kubernetes reads them (RabbitMQ 3.13 on)."""
    m = _SIZE.fullmatch(value)
    if m is None:
        return None
    unit = m["unit"] or ""
    if not unit:
        return int(m["num"])
    table = _BINARY if "i" in unit.lower() else _DECIMAL
    return int(m["num"]) * table[unit[0].lower()]


def duration_seconds(value: str) -> int | None:
    """An ISO 8601 duration in seconds, a year 365 days and a month 30 (None: not one)."""
    m = _DURATION.fullmatch(value)
    if m is None:
        return None

    def part(key: str) -> int:
        text = m[key] or ""
        digits = re.match(r"[0-9]+", text)  # string:to_integer: the leading digits
        return int(digits[0]) if digits else 0

    return (
        part("years") * 365 * 86400
        + part("months") * 30 * 86400
        + part("days") * 86400
        + part("hours") * 3600
        + part("minutes") * 60
        + part("seconds")
    )


# ------------------------------------------------------------ Elixir's printing
def _charlist(text: str) -> str:
    return '~c"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _parse_term(text: str) -> Any:
    """An Erlang term of atoms, strings and tuples, as ``~p`` wrote it (tuples come back
    as tuples, atoms as ``_Atom``)."""
    pos = 0

    def term() -> Any:
        nonlocal pos
        c = text[pos]
        if c == "{":
            pos += 1
            items: list[Any] = []
            while text[pos] != "}":
                items.append(term())
                if text[pos] == ",":
                    pos += 1
            pos += 1
            return tuple(items)
        if c == '"':
            end = pos + 1
            out: list[str] = []
            while text[end] != '"':
                if text[end] == "\\":
                    end += 1
                    out.append({"n": "\n", "t": "\t", "r": "\r"}.get(text[end], text[end]))
                else:
                    out.append(text[end])
                end += 1
            pos = end + 1
            return "".join(out)
        m = re.compile(r"[a-z][A-Za-z0-9_@]*").match(text, pos)
        if m is None:
            raise ValueError(text)
        pos = m.end()
        return _Atom(m[0])

    return term()


class _Atom(str):
    """An Erlang atom read back from a reason."""


def _inspect(value: Any, indent: int = 0) -> str:
    """Elixir's ``inspect``: atoms ``:name``, printable charlists ``~c"..."``, tuples
    ``{a, b}``, broken one element a line when wider than 80 columns."""
    if isinstance(value, _Atom):
        return ":" + value
    if isinstance(value, str):
        return _charlist(value)
    parts = [_inspect(v, indent + 1) for v in value]
    flat = "{" + ", ".join(parts) + "}"
    if indent + len(flat) <= 80 or len(parts) < 2:
        return flat
    return "{" + (",\n" + " " * (indent + 1)).join(parts) + "}"


def reason_output(reason: Any) -> str:
    """How rabbitmq_cli prints an ``{error, Reason}``: an atom or a string as text
    (String.Chars), anything else inspected."""
    if isinstance(reason, str):
        return str(reason)
    return _inspect(reason)


def _manager_reason(http_reason: str) -> Any:
    """The stream manager's reason behind the management API's answer: the API prints
    ``io_lib:format("~p", [Reason])``'s deep list; its characters run together are the
    term."""
    try:
        deep = json.loads(http_reason)
    except ValueError:
        return None

    def chars(d: Any) -> str:
        if isinstance(d, int):
            return chr(d)
        if isinstance(d, str):
            return d
        return "".join(chars(x) for x in d)

    try:
        return _parse_term(chars(deep))
    except (ValueError, IndexError):
        return None


# -------------------------------------------------------------------- verbs
def _validation(detail: str) -> CtlError:
    return CtlError(f"(argument validation): {_charlist(detail)}", EX_USAGE)


def _require_42(ctl: Ctl, verb_name: str) -> None:
    """The super stream endpoint is RabbitMQ 4.2's; the default mode has none."""
    overview = ctl.client.get("/api/overview") or {}
    version = str(overview.get("rabbitmq_version", ""))
    if version.startswith("3."):
        raise CtlError(
            f"{verb_name} needs a broker in RabbitMQ 4.2 mode (leveret server "
            f"--rabbitmq-version 4.2): RabbitMQ {version}'s management API has no "
            "/api/stream/super-streams",
            EX_UNAVAILABLE,
        )


_partitions_option = option_value(
    int, "Invalid options for this command:\n--partitions : not an integer"
)
_cluster_size_option = option_value(
    int, "Invalid options for this command:\n--initial-cluster-size : not an integer"
)


def _stream_arguments(
    max_length_bytes: str | None,
    max_age: str | None,
    segment_size: str | None,
    leader_locator: str | None,
    initial_cluster_size: int | None,
) -> dict[str, str]:
    """validate_stream_arguments, in its order, then stream_arguments: the partitions'
    arguments as the stream manager takes them."""
    args: dict[str, str] = {}
    if max_length_bytes is not None:
        size = information_unit(max_length_bytes)
        if size is None:
            raise _validation(
                "Invalid value for --max-length-bytes, valid example values: 100gb, 50mb"
            )
        args["max-length-bytes"] = str(size)
    if max_age is not None:
        seconds = duration_seconds(max_age)
        if seconds is None:
            raise _validation(
                "Invalid value for --max-age, the value must a ISO 8601 duration, e.g. e.g. "
                "PT10M30S for 10 minutes 30 seconds, P5DT8H for 5 days 8 hours."
            )
        args["max-age"] = f"{seconds}s"
    if segment_size is not None:
        size = information_unit(segment_size)
        if size is None:
            raise _validation(
                "Invalid value for --stream-max-segment-size-bytes, valid example values: "
                "100gb, 50mb"
            )
        args["stream-max-segment-size-bytes"] = str(size)
    if leader_locator is not None:
        if leader_locator not in LEADER_LOCATORS:
            raise _validation(
                "Invalid value for --leader-locator, valid values are client-local, balanced."
            )
        args["queue-leader-locator"] = leader_locator
    if initial_cluster_size is not None:
        if initial_cluster_size <= 0:
            raise _validation(
                "Invalid value for --initial-cluster-size, the value must be positive."
            )
        args["initial-cluster-size"] = str(initial_cluster_size)
    return args


def _error(reason: Any) -> CtlError:
    """The stream manager's ``{error, Reason}``: "Error:" and the reason below it."""
    return CtlError("Error:\n" + reason_output(reason), EX_SOFTWARE, plain=True)


def _failed(exc: HttpError) -> CtlError:
    """A refused create, as the CLI prints the stream manager's error."""
    reason = exc.reason
    if exc.status == 400:
        term = _manager_reason(reason)
        if term is not None:
            return _error(term)
        if reason.startswith("The partition number must not exceed"):
            # the API checks the maximum first; the manager answers it in a tuple
            return _error((_Atom("validation_failed"), (reason,)))
    return _error(reason)


@verb("streams")
def add_super_stream(
    ctl: Ctl,
    name: str,
    partitions: Annotated[
        int | None,
        typer.Option(
            "--partitions", parser=_partitions_option, metavar="N", help="How many (default 3)."
        ),
    ] = None,
    binding_keys: Annotated[
        str | None,
        typer.Option("--binding-keys", metavar="KEYS", help="Comma-separated, e.g. a,b,c."),
    ] = None,
    routing_keys: Annotated[
        str | None, typer.Option("--routing-keys", metavar="KEYS", help="As --binding-keys.")
    ] = None,
    max_length_bytes: Annotated[
        str | None,
        typer.Option("--max-length-bytes", metavar="SIZE", help="Each partition's, e.g. 20gb."),
    ] = None,
    max_age: Annotated[
        str | None,
        typer.Option("--max-age", metavar="DURATION", help="ISO 8601, e.g. PT10M30S, P5DT8H."),
    ] = None,
    stream_max_segment_size_bytes: Annotated[
        str | None,
        typer.Option("--stream-max-segment-size-bytes", metavar="SIZE", help="e.g. 500mb."),
    ] = None,
    leader_locator: Annotated[
        str | None,
        typer.Option("--leader-locator", metavar="WHERE", help="client-local or balanced."),
    ] = None,
    initial_cluster_size: Annotated[
        int | None,
        typer.Option(
            "--initial-cluster-size",
            parser=_cluster_size_option,
            metavar="N",
            help="Replicas of each partition.",
        ),
    ] = None,
) -> None:
    """Adds a super stream: an exchange and its partition streams (--partitions, 3 by
    default, named NAME-0, NAME-1, ...; or NAME-KEY for each of --binding-keys)."""
    # merge_defaults, then validate, in their order
    if routing_keys is not None and binding_keys is None:
        binding_keys, routing_keys = routing_keys, None
    if routing_keys is not None and binding_keys is not None:
        raise _validation("Specify --binding-keys only.")
    if partitions is not None and binding_keys is not None:
        raise _validation("Specify --partitions or --binding-keys, not both.")
    if partitions is None and binding_keys is None:
        partitions = 3
    if partitions is not None and partitions < 1:
        raise _validation("The partition number must be greater than 0")
    arguments = _stream_arguments(
        max_length_bytes, max_age, stream_max_segment_size_bytes, leader_locator,
        initial_cluster_size,
    )  # fmt: skip
    _require_42(ctl, "add_super_stream")
    ctl.banner("Adding a super stream...")
    body: dict[str, Any] = {"arguments": arguments}
    if partitions is not None:
        body["partitions"] = partitions
    else:
        body["binding-keys"] = binding_keys
    path = f"/api/stream/super-streams/{q(ctl.opts.vhost)}/{q(name)}"
    try:
        ctl.client.request("PUT", path, body)
    except HttpError as exc:
        raise _failed(exc) from exc
    print(f"Super stream {name} has been created")


def _partitions_of(ctl: Ctl, name: str) -> list[str] | None:
    """The streams bound to the exchange, by their partition order (None: no exchange)."""
    v, x = q(ctl.opts.vhost), q(name)
    if ctl.client.get(f"/api/exchanges/{v}/{x}", missing=None) is None:
        return None
    bindings = ctl.client.get(f"/api/exchanges/{v}/{x}/bindings/source", missing=[]) or []

    def order(b: dict[str, Any]) -> tuple[int, int]:
        value = (b.get("arguments") or {}).get("x-stream-partition-order")
        return (0, value) if isinstance(value, int) else (1, 0)

    out: list[str] = []
    for b in sorted(bindings, key=order):
        if b.get("destination_type") == "queue" and b["destination"] not in out:
            out.append(b["destination"])
    return out


@verb("streams")
def delete_super_stream(ctl: Ctl, name: str) -> None:
    """Deletes a super stream: its exchange and the streams bound to it."""
    _require_42(ctl, "delete_super_stream")
    ctl.banner("Deleting a super stream...")
    partitions = _partitions_of(ctl, name)
    if partitions is None:
        # super_stream_partitions: no such exchange
        raise _error("stream_not_found")
    v = q(ctl.opts.vhost)
    # as rabbit_stream_manager:delete_super_stream: the exchange, then each partition;
    # what is already gone is passed over (RabbitMQ logs it and goes on)
    ctl.client.request("DELETE", f"/api/exchanges/{v}/{q(name)}", missing=None)
    for stream in partitions:
        ctl.client.request("DELETE", f"/api/queues/{v}/{q(stream)}", missing=None)
    print(f"Super stream {name} has been deleted")
