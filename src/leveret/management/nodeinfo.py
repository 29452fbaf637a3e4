"""What ``/api/nodes`` tells of the node beyond its resources, as RabbitMQ 3.10.8's
rabbit_mgmt_external_stats does: the SASL mechanisms it knows, where it keeps its data,
the configuration file it read, where it logs, and its cluster links (none: one node)."""

from __future__ import annotations

import logging
import os
import sys
from typing import TYPE_CHECKING, Any

from leveret.broker.broker import DEFAULT_VHOST, LOG_EXCHANGE
from leveret.server.log_exchange import LogExchangeHandler

if TYPE_CHECKING:
    from leveret.management.context import Management

# Each mechanism's description(), as its rabbit_auth_mechanism_* module gives it (the
# same in 3.10.8 and 4.2.9). EXTERNAL is rabbitmq_auth_mechanism_ssl's, whose description
# names the plugin. Listed in the order RabbitMQ 3.10.8's registry shows the built-in
# ones (AMQPLAIN before PLAIN); RabbitMQ's own demo mechanism, RABBIT-CR-DEMO, Leveret
# does not have.
MECHANISMS = {
    "AMQPLAIN": "QPid AMQPLAIN mechanism",
    "PLAIN": "SASL PLAIN authentication mechanism",
    "EXTERNAL": "TLS peer verification-based authentication plugin. "
    "Used in combination with the EXTERNAL SASL mechanism.",
    "ANONYMOUS": "SASL ANONYMOUS authentication mechanism",
}


def auth_mechanisms(enabled: tuple[str, ...], v4: bool) -> list[dict[str, Any]]:
    """Every mechanism the node has, enabled when the configuration lists it (RabbitMQ:
    membership of rabbit's auth_mechanisms). ANONYMOUS came with RabbitMQ 4.0."""
    return [
        {"name": name, "description": description, "enabled": name in enabled}
        for name, description in MECHANISMS.items()
        if v4 or name != "ANONYMOUS"
    ]


def log_locations() -> list[str]:
    """Where Leveret's log goes, named as rabbit_prelaunch_logging:log_locations names
    its handlers' destinations: a file by its path, ``<stdout>``/``<stderr>``, the log
    exchange as ``exchange:`` and its resource; sorted. Without a handler, Python's last
    resort writes warnings to stderr."""
    out: set[str] = set()
    handlers = 0
    logger: logging.Logger | None = logging.getLogger("leveret")
    while logger is not None:
        for handler in logger.handlers:
            handlers += 1
            location = _location(handler)
            if location is not None:
                out.add(location)
        logger = logger.parent if logger.propagate else None
    if not handlers and logging.lastResort is not None:
        out.add("<stderr>")
    return sorted(out)


def _location(handler: logging.Handler) -> str | None:
    if isinstance(handler, logging.FileHandler):
        return os.path.abspath(handler.baseFilename)
    if isinstance(handler, LogExchangeHandler):
        # "exchange:~p" of the exchange's #resource record
        return f'exchange:{{resource,<<"{DEFAULT_VHOST}">>,exchange,<<"{LOG_EXCHANGE}">>}}'
    if isinstance(handler, logging.StreamHandler):
        stream = handler.stream
        if stream is sys.stdout or stream is sys.__stdout__:
            return "<stdout>"
        if stream is sys.stderr or stream is sys.__stderr__:
            return "<stderr>"
    return None  # a handler of no place RabbitMQ would name (a test's capture, say)


def node_info(m: Management) -> dict[str, Any]:
    """The node's mechanisms, data directory (left out when Leveret keeps everything in
    memory: it has none), configuration files, log locations and cluster links."""
    config = m.server.config
    out: dict[str, Any] = {
        "auth_mechanisms": auth_mechanisms(m.server.state.mechanisms, m.broker.compat.v4),
        "log_files": log_locations(),
        "config_files": [] if config.config_file is None else [str(config.config_file)],
        "cluster_links": [],
    }
    if config.data_dir is not None:
        out["db_dir"] = str(config.data_dir.absolute())
    return out
