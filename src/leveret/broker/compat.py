"""Which RabbitMQ Leveret behaves as: 3.10.8 (the default) or 4.2, chosen once at start
(``leveret server --rabbitmq-version 4.2``, ``rabbitmq_version = "4.2"``).

One :class:`RabbitMQ` per broker says it; the few places whose behaviour differs between
the two ask it (``broker.compat``, ``vhost.compat``), by what differs, never by comparing
version strings. What each difference is, and the RabbitMQ source it comes from, is in
docs/compatibility.md ("RabbitMQ 4.2 mode").

RabbitMQ 4's deprecated features (rabbit_deprecated_features, from 3.13) live here too: each
has a deprecation phase in 4.2.9 and may be permitted or denied in the configuration
(rabbitmq.conf's ``deprecated_features.permit.<name> = true|false``). RabbitMQ 3.10.8 has no
such subsystem."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum

log = logging.getLogger(__name__)

# The switch's values, and the release each one reports (the tag its behaviour is read from).
SERIES = ("3.10.8", "4.2")
DEFAULT_SERIES = "3.10.8"
_RELEASE = {"3.10.8": "3.10.8", "4.2": "4.2.9"}

MIB = 1024 * 1024


class Phase(StrEnum):
    """A deprecated feature's deprecation phase (rabbit_deprecated_features)."""

    PERMITTED_BY_DEFAULT = "permitted_by_default"
    DENIED_BY_DEFAULT = "denied_by_default"
    DISCONNECTED = "disconnected"
    REMOVED = "removed"


_BLOG = "https://blog.rabbitmq.com/posts/2021/08/4.0-deprecation-announcements/"


@dataclass(frozen=True, slots=True)
class DeprecatedFeature:
    """One of RabbitMQ's deprecated features as 4.2.9 declares it (its
    ``-rabbit_deprecated_feature`` attribute): the phase, the application that provides it,
    its documentation and, for some, messages of its own."""

    name: str
    phase: Phase
    provided_by: str = "rabbit"
    doc_url: str = ""
    when_permitted: str | None = None
    when_denied: str | None = None
    when_removed: str | None = None

    def warning(self, permitted: bool) -> str:
        """rabbit_deprecated_features:get_warning: the feature's own message, else the one
        generated for its phase (generate_warnings1)."""
        if self.phase in (Phase.DISCONNECTED, Phase.REMOVED):
            return self.when_removed or (
                f"Feature `{self.name}` is removed; its use is not possible anymore.\n"
                "If RabbitMQ refuses to start because of this, you need to downgrade "
                "RabbitMQ and make sure the feature is not used at all before upgrading again."
            )
        own = self.when_permitted if permitted else self.when_denied
        if own is not None:
            return own
        n = self.name
        if self.phase is Phase.PERMITTED_BY_DEFAULT and permitted:
            return (
                f"Feature `{n}` is deprecated.\n"
                "By default, this feature can still be used for now.\n"
                "Its use will not be permitted by default in a future minor RabbitMQ version "
                "and the feature will be removed from a future major RabbitMQ version; "
                "actual versions to be determined.\n"
                "To continue using this feature when it is not permitted by default, set "
                "the following parameter in your configuration:\n"
                f'    "deprecated_features.permit.{n} = true"\n'
                "To test RabbitMQ as if the feature was removed, set this in your "
                "configuration:\n"
                f'    "deprecated_features.permit.{n} = false"'
            )
        if self.phase is Phase.PERMITTED_BY_DEFAULT:
            return (
                f"Feature `{n}` is deprecated.\n"
                "Its use is not permitted per the configuration (overriding the default, "
                "which is permitted):\n"
                f'    "deprecated_features.permit.{n} = false"\n'
                "Its use will not be permitted by default in a future minor RabbitMQ version "
                "and the feature will be removed from a future major RabbitMQ version; "
                "actual versions to be determined.\n"
                "To continue using this feature when it is not permitted by default, set "
                "the following parameter in your configuration:\n"
                f'    "deprecated_features.permit.{n} = true"'
            )
        if permitted:
            return (
                f"Feature `{n}` is deprecated.\n"
                "Its use is permitted per the configuration (overriding the default, which "
                "is not permitted):\n"
                f'    "deprecated_features.permit.{n} = true"\n'
                "The feature will be removed from a future major RabbitMQ version, "
                "regardless of the configuration."
            )
        return (
            f"Feature `{n}` is deprecated.\n"
            "By default, this feature is not permitted anymore.\n"
            "The feature will be removed from a future major RabbitMQ version, regardless "
            "of the configuration; actual version to be determined.\n"
            "To continue using this feature when it is not permitted by default, set the "
            "following parameter in your configuration:\n"
            f'    "deprecated_features.permit.{n} = true"'
        )


# Every -rabbit_deprecated_feature of RabbitMQ 4.2.9 (git grep rabbit_deprecated_feature
# v4.2.9 -- deps/), by name: rabbit_amqp_session.erl:21,35, rabbit_amqqueue.erl:115,
# rabbit_channel.erl:239, rabbit_mirror_queue_misc.erl:19, rabbit_mnesia.erl:105,
# rabbit_queue_location.erl:25, rabbit_mgmt_agent_config.erl:13.
DEPRECATED_FEATURES_4_2: dict[str, DeprecatedFeature] = {
    f.name: f
    for f in (
        DeprecatedFeature(
            "amqp_address_v1",
            Phase.PERMITTED_BY_DEFAULT,
            doc_url="https://www.rabbitmq.com/docs/amqp#addresses",
            when_permitted="RabbitMQ AMQP address version 1 is deprecated. "
            "Clients should use RabbitMQ AMQP address version 2.",
            when_denied="RabbitMQ AMQP address version 1 is unsupported. "
            "Clients must use RabbitMQ AMQP address version 2.",
        ),
        DeprecatedFeature(
            "amqp_filter_set_bug",
            Phase.PERMITTED_BY_DEFAULT,
            doc_url="https://docs.oasis-open.org/amqp/core/v1.0/os/"
            "amqp-core-messaging-v1.0-os.html#type-filter-set",
        ),
        DeprecatedFeature(
            "classic_queue_mirroring",
            Phase.REMOVED,
            doc_url=_BLOG + "#removal-of-classic-queue-mirroring",
            when_removed="Classic mirrored queues have been removed.\n",
        ),
        DeprecatedFeature(
            "global_qos", Phase.PERMITTED_BY_DEFAULT, doc_url=_BLOG + "#removal-of-global-qos"
        ),
        DeprecatedFeature(
            "management_metrics_collection",
            Phase.PERMITTED_BY_DEFAULT,
            provided_by="rabbitmq_management_agent",
            doc_url=_BLOG + "#disable-metrics-delivery-via-the-management-api--ui",
        ),
        DeprecatedFeature(
            "queue_master_locator",
            Phase.PERMITTED_BY_DEFAULT,
            when_permitted="queue-master-locator is deprecated. queue-leader-locator should be "
            "used instead (allowed values are 'client-local' and 'balanced')",
        ),
        DeprecatedFeature(
            "ram_node_type", Phase.PERMITTED_BY_DEFAULT, doc_url=_BLOG + "#removal-of-ram-nodes"
        ),
        DeprecatedFeature(
            "transient_nonexcl_queues",
            Phase.PERMITTED_BY_DEFAULT,
            doc_url=_BLOG + "#removal-of-transient-non-exclusive-queues",
        ),
    )
}

# rabbit_deprecated_features:maybe_log_warning logs a feature's use at most once a day
_LOG_INTERVAL = 24 * 3600.0


class CompatError(ValueError):
    """A version or a deprecated-feature setting that cannot be used (one line)."""


@dataclass(frozen=True, slots=True)
class RabbitMQ:
    """The RabbitMQ release the broker behaves as, and the deprecated features the
    configuration permits or denies (RabbitMQ 4's ``deprecated_features.permit.*``)."""

    series: str = DEFAULT_SERIES
    permit: tuple[tuple[str, bool], ...] = ()
    # RabbitMQ 4.x behaviour (a field, not a property: the publish path reads it)
    v4: bool = field(init=False, repr=False)
    # when each deprecated feature's use was last logged (monotonic seconds)
    _logged: dict[str, float] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "v4", self.series != "3.10.8")

    @property
    def version(self) -> str:
        """The version reported to clients: server properties, the management API,
        rabbitmqctl (4.2 mode reports 4.2.9, the release its behaviour is read from)."""
        return _RELEASE[self.series]

    # ------------------------------------------------------------------ defaults
    @property
    def max_message_size(self) -> int:
        """The default max_message_size: 128 MiB in 3.10.8 (deps/rabbit/Makefile:119), 16
        MiB from 4.0 (v4.2.9 deps/rabbit/Makefile:111; release-notes/4.0.1.md)."""
        return 16 * MIB if self.v4 else 128 * MIB

    @property
    def auth_mechanisms(self) -> tuple[str, ...]:
        """The SASL mechanisms offered by default: PLAIN and AMQPLAIN in 3.10.8, and
        ANONYMOUS from 4.0 (v4.2.9 deps/rabbit/Makefile:52, with anonymous_login_user and
        anonymous_login_pass guest)."""
        return ("PLAIN", "AMQPLAIN", "ANONYMOUS") if self.v4 else ("PLAIN", "AMQPLAIN")

    @property
    def frame_min_size(self) -> int:
        """?FRAME_MIN_SIZE: the smallest frame_max a client may ask for in tune-ok and the
        frame limit before it: 4096 in 3.10.8, 8192 from 4.1 (v4.2.9
        deps/rabbit_common/include/rabbit_framing.hrl:14; release-notes/4.1.0.md)."""
        return 8192 if self.v4 else 4096

    @property
    def quorum_delivery_limit(self) -> int | None:
        """A quorum queue's delivery limit when neither argument nor policy sets one: none
        in 3.10.8, 20 from 4.0 (v4.2.9 rabbit_quorum_queue.erl:131 ?DEFAULT_DELIVERY_LIMIT)."""
        return 20 if self.v4 else None

    # ------------------------------------------------------- deprecated features
    @property
    def deprecated_features(self) -> Mapping[str, DeprecatedFeature]:
        """RabbitMQ's deprecated features (none in 3.10.8: the subsystem came in 3.13)."""
        return DEPRECATED_FEATURES_4_2 if self.v4 else {}

    def permitted(self, name: str) -> bool:
        """rabbit_deprecated_features:is_permitted_nolog: the phase's default, unless the
        configuration says otherwise (a removed feature is never permitted)."""
        feature = self.deprecated_features.get(name)
        if feature is None:
            return True
        if feature.phase in (Phase.DISCONNECTED, Phase.REMOVED):
            return False
        default = feature.phase is Phase.PERMITTED_BY_DEFAULT
        return dict(self.permit).get(name, default)

    def is_permitted(self, name: str) -> bool:
        """rabbit_deprecated_features:is_permitted: as :meth:`permitted`, and the use is
        logged (a warning when permitted, an error when denied), once a day per feature."""
        allowed = self.permitted(name)
        feature = self.deprecated_features.get(name)
        if feature is None:
            return allowed
        now = time.monotonic()
        last = self._logged.get(name)
        if last is None or now - last >= _LOG_INTERVAL:
            self._logged[name] = now
            level = logging.WARNING if allowed else logging.ERROR
            log.log(level, "Deprecated features: `%s`: %s", name, feature.warning(allowed))
        return allowed

    def warning(self, name: str) -> str:
        """rabbit_deprecated_features:get_warning/1, as a denied feature's error texts
        carry it."""
        return self.deprecated_features[name].warning(self.permitted(name))


def rabbitmq(series: str = DEFAULT_SERIES, permit: Iterable[tuple[str, bool]] = ()) -> RabbitMQ:
    """The :class:`RabbitMQ` for a switch value and ``deprecated_features.permit`` settings;
    :class:`CompatError` for a value other than 3.10.8 or 4.2, for a feature RabbitMQ 4.2
    does not know, or for any permit setting with 3.10.8 (which has no deprecated
    features)."""
    if series not in SERIES:
        raise CompatError(
            f"invalid value for 'rabbitmq_version': {series!r} (one of {', '.join(SERIES)})"
        )
    pairs = tuple(permit)
    if pairs and series == "3.10.8":
        raise CompatError(
            "deprecated_features.permit: RabbitMQ 3.10.8 has no deprecated features "
            '(they came with RabbitMQ 3.13; set rabbitmq_version = "4.2")'
        )
    for name, _ in pairs:
        if name not in DEPRECATED_FEATURES_4_2:
            raise CompatError(
                f"deprecated_features.permit.{name}: no such deprecated feature (one of "
                f"{', '.join(sorted(DEPRECATED_FEATURES_4_2))})"
            )
    return RabbitMQ(series, pairs)


RABBITMQ_3_10 = RabbitMQ()
