"""Global runtime parameters, as rabbit_runtime_parameters keeps them (set_global,
clear_global) and rabbit_nodes names the cluster by one (set_cluster_name): a name and
any JSON value, no validation. The management API, ``leveret ctl`` (through it) and a
definitions import set them here; the broker keeps them, tells its observers (the store,
the event exchange) and announces the cluster name."""

from __future__ import annotations

import base64
import logging
import uuid
from typing import TYPE_CHECKING, Any

from leveret.broker.broker import CLUSTER_NAME
from leveret.broker.erlterms import pairs, term
from leveret.broker.events import INTERNAL_USER

if TYPE_CHECKING:
    from leveret.broker.broker import BrokerCore
    from leveret.broker.operations.actor import Actor

log = logging.getLogger(__name__)

#: rabbit_nodes' ?INTERNAL_CLUSTER_ID_PARAM_NAME, seeded at the first start
INTERNAL_CLUSTER_ID = "internal_cluster_id"


def _keys_in_order(value: Any) -> Any:
    """Objects within a value with their keys in order, as RabbitMQ's JSON encoder writes
    the maps it decoded."""
    if isinstance(value, dict):
        return {k: _keys_in_order(value[k]) for k in sorted(value)}
    if isinstance(value, list):
        return [_keys_in_order(v) for v in value]
    return value


def stored(value: Any) -> Any:
    """A JSON value as RabbitMQ stores a global parameter's: an object is made a proplist
    (maps:to_list), which shows as the object with its keys in order, and as ``[]`` when
    empty; anything else as it came."""
    if isinstance(value, dict) and not value:
        return []
    return _keys_in_order(value)


def set_global_parameter(broker: BrokerCore, actor: Actor, name: str, value: Any) -> bool:
    """rabbit_runtime_parameters:set_global: any name, any value. True when it is new."""
    value = stored(value)
    shown = pairs(list(value.items())) if isinstance(value, dict) else term(value)
    log.debug("Setting global parameter '%s' to %s", name, shown)
    return broker.set_global_parameter(name, value, actor.username)


def clear_global_parameter(broker: BrokerCore, actor: Actor, name: str) -> bool:
    """rabbit_runtime_parameters:clear_global; False when there is no such parameter."""
    return broker.clear_global_parameter(name, actor.username)


def set_cluster_name(broker: BrokerCore, actor: Actor, name: str) -> None:
    """rabbit_nodes:set_cluster_name: the global parameter cluster_name."""
    set_global_parameter(broker, actor, CLUSTER_NAME, name)


def seed_internal_cluster_id(broker: BrokerCore) -> None:
    """rabbit_nodes:seed_internal_cluster_id at start-up: an id kept with the definitions
    from the first start on (rabbit_guid:binary, "rabbitmq-cluster-id-" and 16 random
    bytes in unpadded URL-safe base64)."""
    if INTERNAL_CLUSTER_ID in broker.global_parameters:
        return
    token = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
    cluster_id = f"rabbitmq-cluster-id-{token}"
    log.info("Initialising internal cluster ID to '%s'", cluster_id)
    broker.set_global_parameter(INTERNAL_CLUSTER_ID, cluster_id, INTERNAL_USER)
