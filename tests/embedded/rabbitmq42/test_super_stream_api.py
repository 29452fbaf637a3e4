"""``PUT /api/stream/super-streams/{vhost}/{name}``, RabbitMQ 4.2's management endpoint for
super streams, over HTTP against Leveret in its 4.2 mode; the default mode answers the path
as RabbitMQ 3.10.8's management answers any path it does not serve.

Pinned to v4.2.9's deps/rabbitmq_stream_management/src/rabbit_stream_super_stream_mgmt.erl
(first in v4.2.0): allowed_methods PUT and OPTIONS (46-47); accept_content checks configure
on the exchange first (59-68, "Access refused." 401), then the body: partitions or binding
keys (164-195), the node (84-90, 124-128), the partitions' number (197-220), the
management permissions (130-142), then rabbit_stream_manager:create_super_stream, whose
``{error, Reason}`` is answered as ``bad_request(io_lib:format("~p", [Reason]))`` (159-161)
and printed by rabbit_web_dispatch_access_control:format_reason as a deep list."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import leveret
from leveret.management.erlterm import Atom, Term, reason_text
from leveret.protocol.stream import events as ev
from leveret.protocol.stream.spec import Code
from tests.embedded.rabbitmq42.support import api
from tests.support.streamclient import RawStreamClient


@pytest.fixture(scope="module")
def b42() -> Iterator[leveret.Broker]:
    with (
        tempfile.TemporaryDirectory() as d,
        leveret.Broker(rabbitmq_version="4.2", data_dir=Path(d), management=True) as b,
    ):
        api(b, "PUT", "/api/users/alice", {"password": "alice", "tags": "management"})
        api(b, "PUT", "/api/permissions/%2F/alice", {"configure": "^s-.*", "write": ".*",
                                                      "read": ".*"})  # fmt: skip
        api(b, "PUT", "/api/users/bob", {"password": "bob", "tags": "management"})
        # configure on the exchange, not on its partitions
        api(b, "PUT", "/api/users/carol", {"password": "carol", "tags": "management"})
        api(b, "PUT", "/api/permissions/%2F/carol", {"configure": "^s-[0-9a-f]{8}$",
                                                      "write": ".*", "read": ".*"})  # fmt: skip
        # an administrator without permissions in the vhost
        api(b, "PUT", "/api/users/dave", {"password": "dave", "tags": "administrator"})
        yield b


def _name() -> str:
    return f"s-{uuid.uuid4().hex[:8]}"


def put(b: leveret.Broker, name: str, body: Any, user: str = "guest") -> tuple[int, Any]:
    return api(b, "PUT", f"/api/stream/super-streams/%2F/{name}", body, user)


def test_a_super_stream_made_over_http_is_one_the_stream_protocol_knows(
    b42: leveret.Broker,
) -> None:
    """204; the exchange, its streams and bindings as rabbit_stream_manager makes them;
    Partitions and Route answer from them (a real stream client)."""
    name = _name()
    body = {"binding-keys": "amer, emea,apac", "arguments": {"max-length-bytes": 1000000}}
    assert put(b42, name, body) == (204, None)
    _, exchanges = api(b42, "GET", "/api/exchanges/%2F")
    x = next(x for x in exchanges if x["name"] == name)
    assert (x["type"], x["durable"], x["arguments"]) == ("direct", True, {"x-super-stream": True})
    _, queues = api(b42, "GET", "/api/queues/%2F")
    mine = {q["name"]: q["arguments"] for q in queues if q["name"].startswith(name)}
    assert set(mine) == {f"{name}-amer", f"{name}-emea", f"{name}-apac"}
    assert all(a["x-queue-type"] == "stream" for a in mine.values())
    assert all(a["x-max-length-bytes"] == 1000000 for a in mine.values())
    c = RawStreamClient("127.0.0.1", b42.stream_port)
    try:
        assert c.handshake() == Code.OK
        c.send(ev.Partitions(c.next_id(), name))
        assert c.reply(ev.PartitionsResponse).streams == (
            f"{name}-amer", f"{name}-emea", f"{name}-apac"
        )  # fmt: skip
        c.send(ev.Route(c.next_id(), "emea", name))
        assert c.reply(ev.RouteResponse).streams == (f"{name}-emea",)
    finally:
        c.close()


def test_partitions_as_a_number_or_a_string_of_one(b42: leveret.Broker) -> None:
    a, b = _name(), _name()
    assert put(b42, a, {"partitions": 2})[0] == 204
    assert put(b42, b, {"partitions": "3"})[0] == 204
    _, bindings = api(b42, "GET", f"/api/exchanges/%2F/{b}/bindings/source")
    assert [(x["destination"], x["routing_key"], x["arguments"]) for x in bindings] == [
        (f"{b}-{k}", str(k), {"x-stream-partition-order": k}) for k in range(3)
    ]


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        ({}, "Must specify partitions or binding keys"),
        ({"partitions": 2, "binding-keys": "a"}, "Specify partitions or binding keys, not both"),
        ({"partitions": 0}, "The partition number must be greater than 0"),
        ({"partitions": "-1"}, "The partition number must be greater than 0"),
        ({"partitions": "two"}, "The partitions must be a number"),
        ({"partitions": 2.5}, "The partitions must be a number"),
        ({"partitions": 1001}, "The partition number must not exceed 1000"),
        ({"binding-keys": " , ,"}, "The number of binding keys must be greater than 0"),
        ({"binding-keys": "," * 1000}, "The number of binding keys must not exceed 1000"),
        ({"partitions": 1, "node": "elsewhere@nowhere"},
         "Node elsewhere@nowhere is not a cluster member"),
    ],
)  # fmt: skip
def test_the_bodies_it_refuses(b42: leveret.Broker, body: Any, reason: str) -> None:
    name = _name()
    assert put(b42, name, body) == (400, {"error": "bad_request", "reason": reason})
    _, exchanges = api(b42, "GET", "/api/exchanges/%2F")
    assert name not in [x["name"] for x in exchanges]


def test_a_body_that_is_not_an_object(b42: leveret.Broker) -> None:
    assert put(b42, _name(), "3") == (400, {"error": "bad_request", "reason": (
        "invalid payload: the request body JSON-decoded to a string. "
        "Is the input doubly-JSON-encoded?")})  # fmt: skip
    assert put(b42, _name(), [3]) == (400, {"error": "bad_request", "reason": "not_json"})


def test_this_nodes_name_is_a_cluster_member(b42: leveret.Broker) -> None:
    _, nodes = api(b42, "GET", "/api/nodes")
    node = nodes[0]["name"]
    assert put(b42, _name(), {"partitions": 1, "node": node})[0] == 204
    assert put(b42, _name(), {"partitions": 1, "node": node.partition("@")[0]})[0] == 204


def test_what_the_stream_manager_refuses_is_answered_as_its_term(b42: leveret.Broker) -> None:
    """{error, Reason} printed with ~p: a deep list, which format_reason prints as a list."""
    name = _name()
    assert put(b42, name, {"partitions": 1})[0] == 204
    status, body = put(b42, name, {"partitions": 1})
    assert status == 400
    assert body["reason"] == reason_text(
        (Atom("reference_already_exists"), f"there is already an exchange named {name}")
    )
    assert body["reason"].startswith('[[123,\n  ["reference_already_exists",44,')
    other = _name()
    status, body = put(b42, other, {"binding-keys": "a,a"})
    assert body["reason"] == reason_text(
        (Atom("validation_failed"), (f"Duplicate partition names found {other}-a{other}-a",))
    )
    status, body = put(b42, "amq.s", {"partitions": 1})
    assert body["reason"] == reason_text(
        (Atom("validation_failed"), ("amq.s-0 is not a correct partition names",))
    )


def test_permissions(b42: leveret.Broker) -> None:
    """Configure on the exchange first, then on the partitions ("Access refused.", 401);
    a user without access to the vhost hears of nothing there (404); a vhost that does
    not exist: no one has permissions in it."""
    refused = (401, {"error": "not_authorised", "reason": "Access refused."})
    assert put(b42, "x-" + _name(), {"partitions": 1}, user="alice") == refused
    assert put(b42, _name(), {"partitions": 1}, user="alice")[0] == 204
    assert put(b42, _name(), {"partitions": 1}, user="bob") == (
        404, {"error": "not_found", "reason": "Not Found"}
    )  # fmt: skip
    status, body = api(b42, "PUT", "/api/stream/super-streams/nowhere/s", {"partitions": 1})
    assert (status, body) == refused
    # check_super_stream_management_permitted: configure on each partition too
    name = _name()
    assert put(b42, name, {"partitions": 2}, user="carol") == refused
    assert put(b42, name, {"partitions": 2}, user="dave") == refused
    _, exchanges = api(b42, "GET", "/api/exchanges/%2F")
    assert name not in [x["name"] for x in exchanges]


def test_no_delete_on_the_path(b42: leveret.Broker) -> None:
    """allowed_methods: PUT and OPTIONS; the super stream stays."""
    name = _name()
    assert put(b42, name, {"partitions": 1})[0] == 204
    assert api(b42, "DELETE", f"/api/stream/super-streams/%2F/{name}")[0] == 405
    assert api(b42, "GET", f"/api/stream/super-streams/%2F/{name}")[0] == 405
    assert api(b42, "GET", f"/api/exchanges/%2F/{name}")[0] == 200


def test_the_default_mode_has_no_such_path() -> None:
    """RabbitMQ 3.10.8's management has no super stream endpoint: the path is answered
    as any path Leveret's API does not serve, and nothing is made."""
    with (
        tempfile.TemporaryDirectory() as d,
        leveret.Broker(data_dir=Path(d), management=True) as b,
    ):
        assert put(b, "s", {"partitions": 1}) == api(b, "PUT", "/api/no-such-path/x", {})
        assert api(b, "GET", "/api/exchanges/%2F/s")[0] == 404


# ------------------------------------------------------------ the reason's layout
def _erl_layout(term: Term) -> str:
    def erl(t: Term) -> str:
        if isinstance(t, Atom):
            return t.name
        if isinstance(t, str):
            return '"' + t.replace("\\", "\\\\").replace('"', '\\"') + '"'
        return "{" + ",".join(erl(x) for x in t) + "}"

    prog = (
        f'D = io_lib:format("~p", [{erl(term)}]), '
        'io:format("~s", [list_to_binary(lists:flatten(io_lib:format("~tp", [D])))]), halt().'
    )
    return subprocess.run(
        ["erl", "-noshell", "-eval", prog], capture_output=True, text=True, check=True
    ).stdout


@pytest.mark.skipif(shutil.which("erl") is None, reason="needs Erlang (RabbitMQ 3.10.8's)")
@pytest.mark.parametrize("length", [1, 20, 38, 39, 40, 52, 61, 62, 63, 90, 140])
def test_the_layout_is_erlangs(length: int) -> None:
    """format_reason's ~tp of io_lib:format's ~p deep list, as Erlang lays it out (the
    OTP that runs the RabbitMQ 3.10.8 here), around each width where a line breaks."""
    name = "s" * length
    for term in (
        (Atom("reference_already_exists"), f"there is already an exchange named {name}"),
        (Atom("validation_failed"), (f"Duplicate partition names found {name}",)),
        (Atom("validation_failed"), f'a "quoted" \\ {name}'),
        Atom("validation_failed"),
    ):
        assert reason_text(term) == _erl_layout(term)
