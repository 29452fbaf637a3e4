"""The broker's events: what each operation tells its observers, as typed events in order,
and how an observer picks the events it handles (by their class)."""

from __future__ import annotations

import dataclasses

import pytest

from leveret.broker import events as ev
from leveret.broker.broker import BrokerCore
from leveret.broker.policies import Policy


def _broker() -> tuple[BrokerCore, list[ev.BrokerEvent]]:
    seen: list[ev.BrokerEvent] = []
    broker = BrokerCore(observers=ev.Observers([seen.append]))
    broker.add_vhost("/")
    seen.clear()
    return broker, seen


def test_observers_hear_every_event_in_the_order_they_subscribed() -> None:
    heard: list[tuple[str, ev.BrokerEvent]] = []
    observers = ev.Observers([lambda e: heard.append(("first", e))])
    observers.subscribe(lambda e: heard.append(("second", e)))
    event = ev.AlarmSet("memory")
    observers.emit(event)
    assert heard == [("first", event), ("second", event)]


def test_events_are_frozen() -> None:
    event = ev.QueueDeclared("/", "q")
    with pytest.raises(dataclasses.FrozenInstanceError):
        event.queue = "other"  # type: ignore[misc]


def test_a_users_operations_tell_what_they_did() -> None:
    broker, seen = _broker()
    broker.add_user("ann", "secret")
    broker.set_user_limit("ann", "max-connections", 3)
    broker.clear_user_limit("ann", "max-channels")
    broker.put_user("ann", ["monitoring"])
    assert seen == [
        ev.UserChanged("ann"),
        ev.UserLimitsChanged("ann"),
        ev.UserLimitsSet("ann", {"max-connections": 3}),
        ev.UserLimitsCleared("ann"),
        ev.UserChanged("ann"),
        ev.UserTagsSet("ann"),
        ev.UserPasswordCleared("ann"),
    ]


def test_permissions_are_told_of_by_user_and_vhost() -> None:
    broker, seen = _broker()
    broker.add_user("ann", "secret")
    seen.clear()
    broker.set_permissions("ann", "/", ".*", ".*", ".*")
    broker.set_topic_permissions("ann", "/", "amq.topic", "^a", "^b")
    broker.clear_topic_permissions("ann", "/", "amq.topic")
    assert seen[:2] == [ev.PermissionChanged("ann", "/"), ev.TopicPermissionChanged("ann", "/")]
    assert isinstance(seen[2], ev.TopicPermissionSet)
    assert (seen[2].permission.user, seen[2].permission.exchange) == ("ann", "amq.topic")
    assert seen[3:] == [
        ev.TopicPermissionChanged("ann", "/"),
        ev.TopicPermissionCleared("ann", "/", "amq.topic"),
    ]


def test_a_policy_tells_of_each_queue_it_changed_then_of_the_vhost() -> None:
    broker, seen = _broker()
    vhost = broker.vhosts["/"]
    q, _ = vhost.declare_queue("q1")
    seen.clear()
    policy = Policy("/", "ttl", "^q", {"message-ttl": 1000})
    vhost.set_policy(policy)
    vhost.clear_policy("ttl")
    assert seen == [
        ev.QueuePolicyChanged(q, policy),
        ev.PolicyChanged(vhost),
        ev.QueuePolicyChanged(q, None),
        ev.PolicyChanged(vhost),
    ]


def test_an_exchange_delete_is_marked_and_tells_of_what_went() -> None:
    broker, seen = _broker()
    vhost = broker.vhosts["/"]
    vhost.declare_exchange("x", "fanout")
    seen.clear()
    vhost.delete_exchange("x")
    assert [type(e) for e in seen] == [
        ev.ExchangeDeleteStarted,
        ev.ExchangeDeleted,
        ev.ExchangeDeleteFinished,
    ]
    assert seen[0] == ev.ExchangeDeleteStarted("/", "x")
    deleted = seen[1]
    assert isinstance(deleted, ev.ExchangeDeleted)
    assert (deleted.exchange.name, deleted.who) == ("x", None)
