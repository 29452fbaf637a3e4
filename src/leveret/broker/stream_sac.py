"""Single active consumer for streams (RabbitMQ 3.11; rabbit_stream_sac_coordinator, as
4.2.9 has it, on one node): the consumers of a stream that subscribe with the same name
are a group, of which one at a time is active.

A group is keyed by (vhost, stream, name). A subscription to a super stream's partition
(the ``super-stream`` property) carries the partition's index in the super stream, and its
group rebalances: with ``n`` consumers, the one at ``index % n`` (in the order they came)
is active, so that a super stream's partitions spread over its consumers. Any other group
(index -1) keeps its active consumer until it leaves; then the oldest one waiting takes
over. A group's consumers all carry the same index (a subscription with another one is
refused).

Nothing here sends anything: each change returns :class:`Notice` values, what RabbitMQ's
coordinator sends to the connections as messages, and the caller hands them to their
owners after its own answer (a ConsumerUpdate request to the client, by the owner). A
consumer told to step down (an active one of a rebalanced group) stays active until its
client answers; its owner then calls :meth:`SacCoordinator.activate`, which activates the
group's new choice."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Protocol


class State(Enum):
    ACTIVE = "active"
    WAITING = "waiting"
    DEACTIVATING = "deactivating"  # told to step down, its client's answer awaited

    @property
    def counts_as_active(self) -> bool:
        return self is not State.WAITING


class SacOwner(Protocol):
    """The connection a group's consumer belongs to."""

    @property
    def name(self) -> str: ...


@dataclass(eq=False, slots=True)
class Member:
    owner: SacOwner
    subscription_id: int
    state: State

    @property
    def label(self) -> str:
        """rabbitmq-streams list_stream_group_consumers' state: ``active (connected)``."""
        return f"{self.state.value} (connected)"


@dataclass(eq=False, slots=True)
class Group:
    partition_index: int  # -1: not a super stream's partition
    members: list[Member] = field(default_factory=list)

    def active(self) -> Member | None:
        return next((m for m in self.members if m.state.counts_as_active), None)

    def choice(self) -> Member | None:
        """Who should be active: the first (-1), or the one at index % n."""
        if not self.members:
            return None
        if self.partition_index < 0:
            return self.members[0]
        return self.members[self.partition_index % len(self.members)]


@dataclass(frozen=True, slots=True)
class Notice:
    """What a consumer's connection is told: it becomes active, or (``stepping_down``)
    must stop reading and answer before the group's next choice is activated."""

    owner: SacOwner
    subscription_id: int
    stream: str
    name: str
    active: bool
    stepping_down: bool = False


class PartitionIndexConflict(ValueError):
    """A consumer whose partition index is not its group's."""


Key = tuple[str, str, str]  # vhost, stream, name


class SacCoordinator:
    """The broker's groups of single active consumers."""

    def __init__(self) -> None:
        self.groups: dict[Key, Group] = {}

    # ---------------------------------------------------------------- changes
    def register(
        self,
        vhost: str,
        stream: str,
        partition_index: int,
        name: str,
        owner: SacOwner,
        subscription_id: int,
    ) -> tuple[bool, list[Notice]]:
        """A consumer joins its group: whether it is active, and who to tell.
        :class:`PartitionIndexConflict` when its group has another index."""
        key = (vhost, stream, name)
        group = self.groups.get(key)
        if group is None:
            group = self.groups[key] = Group(partition_index)
        elif group.partition_index != partition_index:
            raise PartitionIndexConflict(key)
        member = _find(group, owner, subscription_id)
        if member is not None:
            return member.state.counts_as_active, []
        notices: list[Notice] = []
        if partition_index < 0 or not group.members:
            active = group.active() is None
            member = Member(owner, subscription_id, State.ACTIVE if active else State.WAITING)
            group.members.append(member)
            if active:
                notices.append(_notice(member, key, True))
        else:
            member = Member(owner, subscription_id, State.WAITING)
            group.members.append(member)
            notices = self._rebalance(group, key)
        return member.state.counts_as_active, notices

    def unregister(
        self, vhost: str, stream: str, name: str, owner: SacOwner, subscription_id: int
    ) -> list[Notice]:
        """A consumer leaves its group."""
        key = (vhost, stream, name)
        group = self.groups.get(key)
        member = None if group is None else _find(group, owner, subscription_id)
        if group is None or member is None:
            return []
        group.members.remove(member)
        return self._removed(group, key, member.state.counts_as_active)

    def activate(self, vhost: str, stream: str, name: str) -> list[Notice]:
        """A consumer that was told to step down answered (or went): the group's choice
        becomes active (RabbitMQ's activate_consumer)."""
        key = (vhost, stream, name)
        group = self.groups.get(key)
        if group is None:
            return []
        former = group.active()
        for m in group.members:
            m.state = State.WAITING
        chosen = group.choice()
        if chosen is None:
            return []
        chosen.state = State.ACTIVE
        return [] if chosen is former else [_notice(chosen, key, True)]

    def connection_down(self, owner: SacOwner) -> list[Notice]:
        """A connection closed: its consumers leave their groups."""
        notices: list[Notice] = []
        for key, group in list(self.groups.items()):
            gone = [m for m in group.members if m.owner is owner]
            if not gone:
                continue
            group.members = [m for m in group.members if m.owner is not owner]
            active_removed = any(m.state.counts_as_active for m in gone)
            notices += self._removed(group, key, active_removed)
        return notices

    def _removed(self, group: Group, key: Key, active_removed: bool) -> list[Notice]:
        if not group.members:
            del self.groups[key]
            return []
        if group.partition_index < 0:
            if not active_removed:
                return []
            first = group.members[0]
            for m in group.members:
                m.state = State.WAITING
            first.state = State.ACTIVE
            return [_notice(first, key, True)]
        current = group.active()
        if current is not None:
            chosen = group.choice()
            if chosen is None or chosen is current:
                return []
            current.state = State.DEACTIVATING
            return [_notice(current, key, False, stepping_down=True)]
        if not active_removed:
            return []  # the former active's answer is awaited
        chosen = group.choice()
        if chosen is None:
            return []
        chosen.state = State.ACTIVE
        return [_notice(chosen, key, True)]

    def _rebalance(self, group: Group, key: Key) -> list[Notice]:
        """A partition's group grew: its active consumer steps down if another one is
        now the choice (the choice is activated once it has answered)."""
        current = group.active()
        chosen = group.choice()
        if chosen is None:
            return []
        if current is None:
            chosen.state = State.ACTIVE
            return [_notice(chosen, key, True)]
        if chosen is current:
            return []
        current.state = State.DEACTIVATING
        return [_notice(current, key, False, stepping_down=True)]

    # ---------------------------------------------------------------- queries
    def is_active(self, vhost: str, stream: str, name: str, owner: SacOwner, sub: int) -> bool:
        group = self.groups.get((vhost, stream, name))
        member = None if group is None else _find(group, owner, sub)
        return member is not None and member.state.counts_as_active

    def consumer_groups(self, vhost: str) -> list[tuple[str, str, Group]]:
        """(stream, name, group) of each group of ``vhost``, in the order they were made."""
        return [(s, n, g) for (v, s, n), g in self.groups.items() if v == vhost]

    def group(self, vhost: str, stream: str, name: str) -> Group | None:
        return self.groups.get((vhost, stream, name))


def _find(group: Group, owner: SacOwner, subscription_id: int) -> Member | None:
    return next(
        (m for m in group.members if m.owner is owner and m.subscription_id == subscription_id),
        None,
    )


def _notice(m: Member, key: Key, active: bool, stepping_down: bool = False) -> Notice:
    return Notice(m.owner, m.subscription_id, key[1], key[2], active, stepping_down)
