"""Stream-protocol clients held open while a test looks at a broker's management API or
``ctl``: the unmodified rstream client publishing to and reading from one stream of the
test's own vhost, on Leveret or on RabbitMQ 3.10.8 (its rabbitmq_stream and
rabbitmq_stream_management plugins, enabled here if they are not)."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import subprocess
import time
import uuid
import warnings
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import pytest

from tests.conftest import IN_CI
from tests.support.brokers import RABBITMQ_STREAM_PORT, ensure_rabbitmq_stream
from tests.support.mgmt import Site
from tests.support.rabbitmq import debian_script
from tests.support.waiting import wait_for

PUBLISHED = 3  # messages, each confirmed before the next: one chunk each on both brokers


def stream_port(site: Site) -> int:
    """The site's stream listener; on RabbitMQ, its plugins enabled if need be."""
    if site.broker.name != "rabbitmq" or site.broker.stream_port:
        return site.broker.stream_port  # Leveret, or a RabbitMQ node of the test's own
    if not ensure_rabbitmq_stream() or not _stream_management(site):
        if IN_CI:
            pytest.fail("RabbitMQ's stream management plugin could not be enabled")
        pytest.skip("RabbitMQ's stream management plugin is not available")
    return RABBITMQ_STREAM_PORT


def _stream_management(site: Site) -> bool:
    def answers() -> bool:
        return site.api.call("GET", "/api/stream/connections")[0] == 200

    if answers():
        return True
    plugins = debian_script("rabbitmq-plugins")
    if plugins is None:
        return False
    subprocess.run(
        [plugins, "enable", "rabbitmq_stream_management"],
        check=False,
        capture_output=True,
        timeout=120,
    )
    return wait_for(answers, 60, 0.5)


class StreamClients:
    """A producer connection (its publisher ``pub-ref`` sent :data:`PUBLISHED`
    messages) and a consumer connection (one subscription from the first offset, with
    the property k=v, that received them all), each named by its client; rstream's
    consumer opens a locator connection beside its own. They run on a loop of their own
    that runs only while they start and stop: in between the connections stay open, idle
    (no thread of theirs runs beside the test's, parsing modules as pytest's does)."""

    def __init__(self, site: Site, tag: str) -> None:
        from rstream import Consumer, Producer

        self.site = site
        self.stream = f"s-{tag}"
        self.producer_name = f"prod-{tag}"
        self.consumer_name = f"cons-{tag}"
        self.loop = asyncio.new_event_loop()
        port = stream_port(site)
        common: dict[str, Any] = {
            "vhost": site.vhost,
            "username": "guest",
            "password": "guest",
            "load_balancer_mode": True,
        }
        self.received = 0
        self.producer = Producer("127.0.0.1", port, connection_name=self.producer_name, **common)
        self.consumer = Consumer("127.0.0.1", port, connection_name=self.consumer_name, **common)
        try:
            self.run(self._start())
        except BaseException:
            with contextlib.suppress(Exception):
                self.close()  # no connection of a failed start outlives the test
            raise

    def run(self, coro: Any, timeout: float = 30) -> Any:
        return self.loop.run_until_complete(asyncio.wait_for(coro, timeout))

    async def _start(self) -> None:
        from rstream import ConsumerOffsetSpecification, OffsetType

        await self.producer.start()
        await self.producer.create_stream(self.stream)
        for i in range(PUBLISHED):
            await self.producer.send_wait(self.stream, f"m{i}".encode(), publisher_name="pub-ref")
        await self.consumer.start()

        async def on_message(msg: Any, ctx: Any) -> None:
            self.received += 1

        await self.consumer.subscribe(
            self.stream,
            on_message,
            offset_specification=ConsumerOffsetSpecification(OffsetType.FIRST, None),
            properties={"k": "v"},
        )
        deadline = time.monotonic() + 10
        while self.received < PUBLISHED and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        assert self.received == PUBLISHED

    def settled(self, timeout: float = 20) -> None:
        """Until the management API shows the publisher's confirms and the consumer's
        deliveries (RabbitMQ's figures arrive with its statistics, every second)."""
        v = quote(self.site.vhost, safe="")

        def done() -> bool:
            pubs = self.site.api.get(f"/api/stream/publishers/{v}")
            cons = self.site.api.get(f"/api/stream/consumers/{v}")
            conns = self.site.api.get(f"/api/stream/connections/{v}")
            return (
                [p.get("confirmed") for p in pubs] == [PUBLISHED]
                and [c.get("consumed") for c in cons] == [PUBLISHED]
                and len(conns) == 3
                # a connection's statistics come a moment after its creation event
                and all("state" in c and "channels" in c for c in conns)
            )

        assert wait_for(done, timeout, 0.2), self.site.broker.name

    def close(self) -> None:
        async def stop() -> None:
            # best effort: a connection (or the vhost) may be gone already; the stream
            # goes with the test's vhost anyway
            with contextlib.suppress(Exception):
                await self.consumer.close()
            with contextlib.suppress(Exception):
                await self.producer.delete_stream(self.stream, missing_ok=True)
            with contextlib.suppress(Exception):
                await self.producer.close()

        try:
            self.run(stop())
        finally:
            # what the clients leave (reader tasks, a connection the test closed) ends here,
            # its exceptions retrieved: none is reported later from a finalizer, in the
            # middle of something else
            loop = self.loop

            async def drain() -> None:
                tasks = asyncio.all_tasks() - {asyncio.current_task()}
                for task in tasks:
                    task.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
                await loop.shutdown_asyncgens()

            loop.run_until_complete(drain())
            # the clients go now, sockets and all, not in the middle of something else (a
            # finalizer reporting an unclosed socket then can break pytest's own parsing)
            self.producer = self.consumer = None
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", ResourceWarning)
                gc.collect()
                loop.close()
                gc.collect()


@contextlib.contextmanager
def stream_clients_on(*sites: Site) -> Iterator[list[tuple[Site, StreamClients]]]:
    """``StreamClients`` on each site (one tag for all), settled; closed at the end."""
    tag = uuid.uuid4().hex[:8]
    pairs: list[tuple[Site, StreamClients]] = []
    try:
        for site in sites:
            pairs.append((site, StreamClients(site, tag)))
        for _, clients in pairs:
            clients.settled()
        yield pairs
    finally:
        for _, clients in pairs:
            clients.close()
