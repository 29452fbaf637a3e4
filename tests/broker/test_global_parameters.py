"""Global runtime parameters in the broker (rabbit_runtime_parameters' global ones): how a
value is stored, the cluster name they give, the definitions they are exported and
imported with, the data directory that keeps them, and the event exchange's
parameter.set. No network: a BrokerCore, its operations and its Persistence."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from leveret.broker import operations
from leveret.broker.broker import BrokerCore
from leveret.broker.definitions import export_definitions, import_definitions
from leveret.broker.event_exchange import EventExchange, encode_headers
from leveret.broker.events import Observers
from leveret.broker.operations.global_parameters import INTERNAL_CLUSTER_ID, stored
from leveret.protocol import table
from leveret.store.setup import Persistence

ALICE = operations.Actor("alice", None)


def test_a_value_as_rabbitmq_stores_it() -> None:
    """An object is made a proplist (keys in order, [] when empty); objects within keep
    their keys in order; anything else as it came."""
    assert stored({"b": 1, "a": {"d": {}, "c": [{"y": 1, "x": 2}]}}) == {
        "a": {"c": [{"x": 2, "y": 1}], "d": {}},
        "b": 1,
    }
    assert list(stored({"b": 1, "a": 2})) == ["a", "b"]
    assert stored({}) == []
    assert [stored(v) for v in (None, "s", 1, 1.5, [], [{"b": 1, "a": 2}])] == [
        None,
        "s",
        1,
        1.5,
        [],
        [{"a": 2, "b": 1}],
    ]


def test_set_and_clear() -> None:
    b = BrokerCore(node_name="rabbit@test")
    assert b.cluster_name == "rabbit@test"
    assert operations.set_global_parameter(b, ALICE, "p", {"b": 1}) is True
    assert operations.set_global_parameter(b, ALICE, "p", {}) is False
    assert b.global_parameters == {"p": []}
    assert operations.clear_global_parameter(b, ALICE, "p") is True
    assert operations.clear_global_parameter(b, ALICE, "p") is False
    operations.set_cluster_name(b, ALICE, "mine")
    assert (b.cluster_name, b.cluster_name_value) == ("mine", "mine")
    assert b.server_properties()["cluster_name"] == "mine"
    operations.set_global_parameter(b, ALICE, "cluster_name", {"b": 1, "a": 2})
    assert b.cluster_name_value == {"a": 2, "b": 1}
    assert b.cluster_name == '{"a":2,"b":1}'  # what the protocols can announce
    operations.clear_global_parameter(b, ALICE, "cluster_name")
    assert b.cluster_name == "rabbit@test"


def test_definitions_export_and_import() -> None:
    b = BrokerCore(node_name="rabbit@test")
    operations.set_global_parameter(b, ALICE, "z", 1)
    operations.set_cluster_name(b, ALICE, "c1")
    assert export_definitions(b)["global_parameters"] == [
        {"name": "cluster_name", "value": "c1"},
        {"name": "z", "value": 1},
    ]
    other = BrokerCore(node_name="rabbit@other")
    import_definitions(
        other, {"global_parameters": [{"name": "cluster_name", "value": "c1"}, {"value": {}}]}
    )
    # a parameter without a name is RabbitMQ's "undefined"
    assert other.global_parameters == {"cluster_name": "c1", "undefined": []}
    assert other.cluster_name == "c1"
    with pytest.raises(ValueError):
        import_definitions(other, {"global_parameters": [{"name": 1, "value": 1}]})


def persistent(root: Path) -> tuple[BrokerCore, Persistence]:
    observers = Observers()
    persistence = Persistence(root)
    observers.subscribe(persistence.observe)
    broker = BrokerCore(node_name="rabbit@test", observers=observers, storage=persistence)
    persistence.restore(broker)
    operations.seed_internal_cluster_id(broker)
    return broker, persistence


def test_kept_in_the_data_directory(tmp_path: Path) -> None:
    """Set, cleared and seeded parameters are written with the definitions; after a
    restart the cluster name and the same internal_cluster_id are back."""
    b, persistence = persistent(tmp_path)
    cluster_id = b.global_parameters[INTERNAL_CLUSTER_ID]
    assert cluster_id.startswith("rabbitmq-cluster-id-") and len(cluster_id) == 42
    operations.set_cluster_name(b, ALICE, "kept")
    operations.set_global_parameter(b, ALICE, "gone", 1)
    persistence.sync()
    operations.clear_global_parameter(b, ALICE, "gone")
    persistence.close()
    again, persistence = persistent(tmp_path)
    try:
        assert again.global_parameters == {"cluster_name": "kept", INTERNAL_CLUSTER_ID: cluster_id}
        assert again.cluster_name == "kept"
    finally:
        persistence.close()


def test_event_exchange(monkeypatch: pytest.MonkeyPatch) -> None:
    """set_global and clear_global both tell of parameter.set, component global, by who
    acted (the clearing without a value); the value as the plugin's fmt encodes it."""
    b = BrokerCore(node_name="rabbit@test")
    b.add_vhost("/")
    x = EventExchange(b)
    monkeypatch.setattr(x, "_bound", lambda: True)
    out: list[tuple[str, list[tuple[str, Any]]]] = []

    def emit(key: str, props: list[tuple[str, Any]]) -> None:
        out.append((key, [(k, table.decode(v)) for k, v in encode_headers(props)]))

    monkeypatch.setattr(x, "emit", emit)
    operations.set_global_parameter(b, ALICE, "p", {"b": None, "a": {"y": 1}})
    operations.clear_global_parameter(b, ALICE, "p")
    assert out == [
        (
            "parameter.set",
            [
                ("user_who_performed_action", "alice"),
                ("value", {"a": '#{<<"y">> => 1}', "b": "null"}),
                ("name", "p"),
                ("component", "global"),
            ],
        ),
        (
            "parameter.set",
            [("user_who_performed_action", "alice"), ("name", "p"), ("component", "global")],
        ),
    ]
