"""Super streams for the log system: making one, finding its partitions through the
management API, and picking the partition a publisher writes to.

A super stream (RabbitMQ 3.11's, made by ``rabbitmq-streams add_super_stream`` on 3.10 too)
is AMQP 0-9-1 topology: a durable **direct exchange** with the argument ``x-super-stream:
true``, and its **partitions**, stream queues bound to it, each with one binding key and the
binding argument ``x-stream-partition-order`` (0, 1, ...) that orders them. A message
published to the exchange goes to the partition whose binding key is its routing key.

Which partition a record goes to
--------------------------------
RabbitMQ's stream clients route a super stream's messages in one of two ways: by *key*
(the Route command: the partitions the exchange binds a routing key to) or by *hash* (the
partitions from the Partitions command, in order; the one at ``murmur3(key) mod n``). The
log system hashes, for three reasons: the keys it routes by, an app's name or a host's, are
an open set (routing by key needs a binding per app, and a record of an app nobody bound
would be unroutable); a hash spreads them over the partitions as they come; and it is what
a stream client with its default strategy does with the same key, so an application that
publishes through RabbitMQ's Java stream client (``routing(msg -> app).hash()``) and one
that logs through :class:`~leveret.logs.handler.AMQPHandler` put one app's records in the
same partition. The hash is the one the RabbitMQ team's clients share: MurmurHash3 x86
32-bit, seed 104729, of the key's UTF-8 bytes, taken unsigned, modulo the number of
partitions; the Go client pins it with a table of keys and partitions that its tests say
the .NET and Java clients give too (tests/logs/test_superstream.py checks the same table).
The Java client clears the sign bit instead of taking the hash unsigned, which picks the
same partition whenever the count is a power of two. rstream, the community Python client,
hashes the UTF-16 key with the 128-bit MurmurHash3 and agrees with none of them.

Every record of one publisher has the same app and host, so the partition is chosen once
per connection; a publisher sends to the super stream's exchange with that partition's
binding key as the routing key (an AMQP 0-9-1 client has no other way to reach a
partition through the exchange).

Finding the partitions
----------------------
AMQP 0-9-1 cannot list an exchange's bindings, so a publisher reads them from the
management API (``GET /api/exchanges/{vhost}/{name}/bindings/source``), which gives each
partition's binding key as well as its order; the Spark ingest asks the stream protocol's
Partitions command first (:mod:`leveret.spark.superstream`). Both order the partitions as
RabbitMQ does: by ``x-stream-partition-order``, the bindings without one after, and only
bindings to stream queues count.
"""

from __future__ import annotations

import base64
import json
import urllib.error
import urllib.request
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any
from urllib.parse import quote, unquote, urlsplit

from leveret.logs.amqp import LogsError, describe, parameters, redact, split_urls

SUPER_STREAM_ARG = "x-super-stream"
ORDER_ARG = "x-stream-partition-order"
#: The stream clients' seed for MurmurHash3 (the Java, Go and .NET clients': do not change)
HASH_SEED = 104729
DEFAULT_PARTITIONS = 3  # rabbitmq-streams add_super_stream's default
MANAGEMENT_PORT = 15672
_TIMEOUT = 10.0


class RouteBy(StrEnum):
    """What a publisher hashes to choose its partition."""

    app = "app"
    host = "host"


@dataclass(frozen=True, slots=True)
class Partition:
    """One partition of a super stream: its stream and its binding key (None when only
    the stream is known, as the stream protocol's Partitions command tells it)."""

    stream: str
    key: str | None = None


def partition_index(key: str, partitions: int) -> int:
    """The partition (0 .. ``partitions`` - 1) that the stream clients' hash strategy
    picks for ``key`` (see the module)."""
    import mmh3  # not at the top: Spark's executors import this package without it

    if partitions < 1:
        raise ValueError("a super stream has at least one partition")
    return int(mmh3.hash(key.encode(), HASH_SEED, signed=False)) % partitions


def pick(partitions: Sequence[Partition], key: str) -> Partition:
    """The partition records routed by ``key`` go to."""
    return partitions[partition_index(key, len(partitions))]


def _order(binding: Mapping[str, Any]) -> tuple[int, int]:
    value = (binding.get("arguments") or {}).get(ORDER_ARG)
    try:
        return (0, int(value)) if value is not None else (1, 0)
    except (TypeError, ValueError):
        return (1, 0)


def ordered_partitions(
    bindings: Iterable[Mapping[str, Any]], streams: Iterable[str]
) -> list[Partition]:
    """The partitions of a super stream from its exchange's bindings (as the management
    API lists them) to the queues in ``streams`` (its stream queues), in RabbitMQ's order;
    a stream bound twice counts once, at its first place."""
    kept = set(streams)
    found = [b for b in bindings if b.get("destination_type") == "queue"
             and b.get("destination") in kept]  # fmt: skip
    found.sort(key=_order)  # stable: bindings without an order keep theirs
    out: list[Partition] = []
    seen: set[str] = set()
    for b in found:
        name = str(b["destination"])
        if name not in seen:
            seen.add(name)
            out.append(Partition(name, str(b.get("routing_key", ""))))
    return out


# ----------------------------------------------------------------------- the management API
@dataclass(frozen=True, slots=True)
class ManagementApi:
    """Where the management API is and who to be there: ``--management-url`` when given
    (credentials in it win), else ``http://<the broker URL's host>:15672``; the broker
    URL's user and vhost."""

    base: str
    user: str
    password: str
    vhost: str

    @classmethod
    def of(cls, url: str, management_url: str | None = None) -> ManagementApi:
        first = split_urls(url)[0]
        params = parameters(first)
        creds = params.credentials
        user, password = creds.username, creds.password
        if management_url:
            parts = urlsplit(management_url)
            if parts.scheme not in ("http", "https") or not parts.hostname:
                raise LogsError(
                    f"invalid management URL {redact(management_url)}: it must start with "
                    "http:// or https:// and name a host"
                )
            if parts.username is not None:
                user, password = unquote(parts.username), unquote(parts.password or "")
            netloc = parts.netloc.rsplit("@", 1)[-1]
            base = f"{parts.scheme}://{netloc}{parts.path.rstrip('/')}"
        else:
            host = params.host if ":" not in params.host else f"[{params.host}]"
            base = f"http://{host}:{MANAGEMENT_PORT}"
        return cls(base, user, password, params.virtual_host)

    def get(self, path: str, what: str) -> Any:
        """The JSON at ``path``; None for a 404; LogsError for anything else."""
        request = urllib.request.Request(self.base + path)
        token = base64.b64encode(f"{self.user}:{self.password}".encode()).decode()
        request.add_header("Authorization", f"Basic {token}")
        try:
            with urllib.request.urlopen(request, timeout=_TIMEOUT) as reply:
                return json.load(reply)
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                return None
            reason = ""
            try:
                body = json.loads(exc.read() or b"{}")
                reason = str(body.get("reason") or body.get("error") or "")
            except (ValueError, AttributeError, OSError):
                pass
            raise LogsError(
                f"{what}: the management API at {self.base} answered {exc.code}"
                + (f" ({reason})" if reason else "")
            ) from None
        except (urllib.error.URLError, OSError, ValueError) as exc:
            why = getattr(exc, "reason", exc)
            raise LogsError(
                f"{what}: cannot reach the management API at {self.base} ({why}); give its "
                "URL with --management-url",
                transient=True,
            ) from None

    def partitions(self, super_stream: str) -> list[Partition]:
        """The super stream's partitions (stream queues bound to its exchange), in order.
        LogsError when the exchange does not exist or binds no stream."""
        what = f"super stream {super_stream!r}"
        v, x = quote(self.vhost, safe=""), quote(super_stream, safe="")
        # RabbitMQ lists no bindings, not a 404, for an exchange that does not exist
        if self.get(f"/api/exchanges/{v}/{x}", what) is None:
            raise LogsError(f"{what} does not exist: no exchange {super_stream!r} in vhost "
                            f"{self.vhost!r} ({self.base})")  # fmt: skip
        bindings = self.get(f"/api/exchanges/{v}/{x}/bindings/source", what) or []
        queues = {str(b["destination"]) for b in bindings if b.get("destination_type") == "queue"}
        streams = []
        for name in sorted(queues):
            q = self.get(f"/api/queues/{v}/{quote(name, safe='')}?columns=name,type", what)
            if q is not None and q.get("type") == "stream":
                streams.append(name)
        found = ordered_partitions(bindings, streams)
        if not found:
            raise LogsError(f"{what} has no partitions: exchange {super_stream!r} binds no "
                            f"stream queue ({self.base})")  # fmt: skip
        return found

    def cluster_name(self) -> str | None:
        """The cluster's name as the management API tells it (None: it does not)."""
        got = self.get("/api/cluster-name", "the cluster's name")
        return str(got["name"]) if isinstance(got, dict) and "name" in got else None


@dataclass(frozen=True, slots=True)
class SuperStreamRoute:
    """How a publisher writes to a super stream: every record goes to the partition that
    ``key`` (its app's or host's name) hashes to, found afresh on each connection through
    the management API (``management_url``, see :class:`ManagementApi`)."""

    key: str
    management_url: str | None = None

    def binding_key(self, url: str, super_stream: str) -> tuple[str, str | None]:
        """The routing key that reaches the partition, from the super stream's bindings,
        and the name of the cluster whose management API told it (a publisher checks it is
        the one it connects to). LogsError when they cannot be read."""
        api = ManagementApi.of(url, self.management_url)
        chosen = pick(api.partitions(super_stream), self.key)
        assert chosen.key is not None  # the management API names every binding's key
        return chosen.key, api.cluster_name()


# ---------------------------------------------------------------------------- creating one
def partition_names(name: str, keys: Sequence[str]) -> list[str]:
    """``name-key`` for each binding key, as ``rabbitmq-streams add_super_stream`` names
    the partitions."""
    return [f"{name}-{k}" for k in keys]


def declare_super_stream(
    url: str,
    name: str,
    partitions: int = DEFAULT_PARTITIONS,
    binding_keys: Sequence[str] = (),
    arguments: Mapping[str, Any] | None = None,
) -> bool:
    """Make the super stream ``name`` over AMQP 0-9-1 as ``rabbitmq-streams
    add_super_stream`` makes it (works on RabbitMQ 3.10 and later, and on Leveret in
    either mode): the durable direct exchange with ``x-super-stream: true``, the streams
    ``name-0`` ... (or ``name-<key>`` for ``binding_keys``) with ``arguments`` (e.g.
    ``x-max-age``), each bound with its key (``0``, ``1``, ...) and
    ``x-stream-partition-order``. An exchange that exists is left as it is (False);
    True when it was made. LogsError when the broker refuses."""
    import pika
    import pika.exceptions

    keys = list(binding_keys) or [str(i) for i in range(partitions)]
    if len(set(keys)) != len(keys) or not keys:
        raise LogsError(f"super stream {name!r}: the binding keys must be distinct, at least one")
    first = split_urls(url)[0]
    try:
        conn = pika.BlockingConnection(parameters(first, connection_attempts=1,
                                                  socket_timeout=_TIMEOUT))  # fmt: skip
    except Exception as exc:  # pika raises many unrelated types for a failed connect
        raise describe(exc, first) from None
    try:
        ch = conn.channel()
        try:
            ch.exchange_declare(name, passive=True)
            return False
        except pika.exceptions.ChannelClosedByBroker as exc:
            if exc.reply_code != 404:
                raise LogsError(f"super stream {name!r}: {exc.reply_text}") from None
        ch = conn.channel()
        made: list[str] = []
        try:
            ch.exchange_declare(name, "direct", durable=True,
                                arguments={SUPER_STREAM_ARG: True})  # fmt: skip
            made.append(name)
            args = {"x-queue-type": "stream", **(arguments or {})}
            for order, (key, stream) in enumerate(zip(keys, partition_names(name, keys),
                                                      strict=True)):  # fmt: skip
                ch.queue_declare(stream, durable=True, arguments=args)
                made.append(stream)
                ch.queue_bind(stream, name, key, arguments={ORDER_ARG: order})
        except pika.exceptions.ChannelClosedByBroker as exc:
            # what was made goes again, as RabbitMQ's stream manager rolls back: a half-made
            # super stream would be taken for a whole one next time
            _remove(conn, made)
            raise LogsError(f"cannot make super stream {name!r}: {exc.reply_text}") from None
        return True
    except (pika.exceptions.AMQPError, OSError) as exc:  # the connection closed, or lost
        raise LogsError(f"cannot make super stream {name!r}: {describe(exc, first)}") from None
    finally:
        if conn.is_open:
            conn.close()


def _remove(conn: Any, made: Sequence[str]) -> None:
    """Delete the exchange (first of ``made``) and the streams made, as far as it goes."""
    import contextlib

    if not made or not conn.is_open:
        return
    with contextlib.suppress(Exception):
        ch = conn.channel()
        ch.exchange_delete(made[0])
        for stream in made[1:]:
            ch.queue_delete(stream)


__all__ = [
    "DEFAULT_PARTITIONS",
    "HASH_SEED",
    "ManagementApi",
    "Partition",
    "RouteBy",
    "SuperStreamRoute",
    "declare_super_stream",
    "ordered_partitions",
    "partition_index",
    "partition_names",
    "pick",
]
