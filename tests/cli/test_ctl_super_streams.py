"""``leveret ctl add_super_stream`` and ``delete_super_stream`` as subprocesses against
Leveret in its RabbitMQ 4.2 mode: what ``rabbitmq-streams`` of RabbitMQ 4.2.9 prints and
its exit codes, and super streams a stream client can use.

There is no RabbitMQ 4 here: the texts are pinned to v4.2.9's
deps/rabbitmq_stream/src/Elixir.RabbitMQ.CLI.Ctl.Commands.AddSuperStreamCommand.erl
(validate 54-136, merge_defaults 138-144, stream_arguments 206-247, banner 275-276,
"Super stream ~ts has been created" 268-270, output: exit_software 278-279) and
DeleteSuperStreamCommand.erl (run, banner, output), printed as deps/rabbitmq_cli's
rabbitmqctl.ex prints them: "Error (argument validation): " and the inspected detail
(349-354, format_validation_error catch-all 418), exit 64; "Error:" and the reason, as a
string when it is one, inspected otherwise (601-605, helpers.ex string_or_inspect), exit
70. The default mode has no super stream endpoint: the verbs say so in one line."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import leveret
from leveret.cli.ctlstreams import duration_seconds, information_unit
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
        yield b


def ctl(b: leveret.Broker, *args: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "leveret.cli.main", "ctl", "--url", b.management_url, *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60, env=dict(os.environ))


def _name() -> str:
    return f"ss-{uuid.uuid4().hex[:8]}"


def _partitions(b: leveret.Broker, name: str, key: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The super stream's partitions and the streams ``key`` routes to, as a stream client
    asks for them."""
    c = RawStreamClient("127.0.0.1", b.stream_port)
    try:
        assert c.handshake() == Code.OK
        c.send(ev.Partitions(c.next_id(), name))
        partitions = c.reply(ev.PartitionsResponse).streams
        c.send(ev.Route(c.next_id(), key, name))
        return partitions, c.reply(ev.RouteResponse).streams
    finally:
        c.close()


def _queues(b: leveret.Broker, name: str) -> dict[str, dict[str, object]]:
    _, queues = api(b, "GET", "/api/queues/%2F")
    return {q["name"]: q["arguments"] for q in queues if q["name"].startswith(name + "-")}


def test_add_with_three_partitions_by_default(b42: leveret.Broker) -> None:
    name = _name()
    r = ctl(b42, "add_super_stream", name)
    assert (r.returncode, r.stdout, r.stderr) == (
        0, f"Adding a super stream...\nSuper stream {name} has been created\n", ""
    )  # fmt: skip
    assert _partitions(b42, name, "2") == ((f"{name}-0", f"{name}-1", f"{name}-2"),
                                          (f"{name}-2",))  # fmt: skip
    _, exchange = api(b42, "GET", f"/api/exchanges/%2F/{name}")
    assert (exchange["type"], exchange["arguments"]) == ("direct", {"x-super-stream": True})
    assert sorted(_queues(b42, name)) == [f"{name}-0", f"{name}-1", f"{name}-2"]


def test_add_with_binding_keys_and_stream_arguments(b42: leveret.Broker) -> None:
    """stream_arguments: sizes in bytes (gb: 10^9, Mi: 2^20), the age in seconds."""
    name = _name()
    r = ctl(b42, "-q", "add_super_stream", name, "--binding-keys", "amer, emea",
            "--max-length-bytes", "2gb", "--max-age", "P1DT1H",
            "--stream-max-segment-size-bytes", "50Mi", "--leader-locator", "client-local",
            "--initial-cluster-size", "1")  # fmt: skip
    assert (r.returncode, r.stdout, r.stderr) == (0, f"Super stream {name} has been created\n", "")
    assert _partitions(b42, name, "emea") == ((f"{name}-amer", f"{name}-emea"), (f"{name}-emea",))
    arguments = _queues(b42, name)[f"{name}-amer"]
    assert arguments["x-max-length-bytes"] == 2_000_000_000
    assert arguments["x-max-age"] == "90000s"
    assert arguments["x-stream-max-segment-size-bytes"] == 50 * 1024 * 1024
    assert arguments["x-queue-leader-locator"] == "client-local"


def test_routing_keys_are_binding_keys(b42: leveret.Broker) -> None:
    """merge_defaults: --routing-keys (3.10's name) taken as --binding-keys."""
    name = _name()
    assert ctl(b42, "add_super_stream", name, "--routing-keys", "a,b").returncode == 0
    assert _partitions(b42, name, "b") == ((f"{name}-a", f"{name}-b"), (f"{name}-b",))


@pytest.mark.parametrize(
    ("args", "detail"),
    [
        (["--partitions", "0"], '~c"The partition number must be greater than 0"'),
        (["--partitions", "2", "--binding-keys", "a"],
         '~c"Specify --partitions or --binding-keys, not both."'),
        (["--partitions", "2", "--routing-keys", "a"],
         '~c"Specify --partitions or --binding-keys, not both."'),
        (["--binding-keys", "a", "--routing-keys", "a"], '~c"Specify --binding-keys only."'),
        (["--max-length-bytes", "2 gb"],
         '~c"Invalid value for --max-length-bytes, valid example values: 100gb, 50mb"'),
        (["--max-age", "10m"],
         '~c"Invalid value for --max-age, the value must a ISO 8601 duration, e.g. e.g. '
         'PT10M30S for 10 minutes 30 seconds, P5DT8H for 5 days 8 hours."'),
        (["--stream-max-segment-size-bytes", "x"],
         '~c"Invalid value for --stream-max-segment-size-bytes, valid example values: '
         '100gb, 50mb"'),
        (["--leader-locator", "nearest"],
         '~c"Invalid value for --leader-locator, valid values are client-local, balanced."'),
        (["--initial-cluster-size", "0"],
         '~c"Invalid value for --initial-cluster-size, the value must be positive."'),
    ],
)  # fmt: skip
def test_argument_validation(b42: leveret.Broker, args: list[str], detail: str) -> None:
    name = _name()
    r = ctl(b42, "add_super_stream", name, *args)
    assert (r.returncode, r.stdout) == (64, "")
    assert r.stderr == f"Error (argument validation): {detail}\n"
    assert api(b42, "GET", f"/api/exchanges/%2F/{name}")[0] == 404


def test_no_name_is_not_enough_arguments(b42: leveret.Broker) -> None:
    r = ctl(b42, "add_super_stream")
    assert (r.returncode, r.stderr) == (64, "Error (argument validation): not enough arguments.\n")
    r = ctl(b42, "delete_super_stream", "a", "b")
    assert (r.returncode, r.stderr) == (64, "Error (argument validation): too many arguments.\n")


def test_what_the_stream_manager_refuses(b42: leveret.Broker) -> None:
    """create_super_stream's {error, Reason}, inspected, exit code 70."""
    name = _name()
    assert ctl(b42, "add_super_stream", name, "--partitions", "1").returncode == 0
    r = ctl(b42, "add_super_stream", name, "--partitions", "1")
    assert (r.returncode, r.stdout) == (70, "Adding a super stream...\n")
    assert r.stderr == (
        f'Error:\n{{:reference_already_exists, ~c"there is already an exchange named {name}"}}\n'
    )
    other = _name()
    r = ctl(b42, "add_super_stream", other, "--binding-keys", "a,a")
    # wider than Inspect's 80 columns: broken after the first element
    assert r.stderr == (
        "Error:\n{:validation_failed,\n"
        f' {{~c"Duplicate partition names found {other}-a{other}-a"}}}}\n'
    )
    r = ctl(b42, "add_super_stream", other, "--partitions", "1001")
    assert (r.returncode, r.stderr) == (
        70, 'Error:\n{:validation_failed, {~c"The partition number must not exceed 1000"}}\n'
    )  # fmt: skip
    assert api(b42, "GET", f"/api/exchanges/%2F/{other}")[0] == 404


def test_delete(b42: leveret.Broker) -> None:
    """The exchange and its partitions go; a second delete: stream_not_found (an atom,
    printed as text), exit code 70."""
    name = _name()
    assert ctl(b42, "add_super_stream", name, "--binding-keys", "x,y").returncode == 0
    r = ctl(b42, "delete_super_stream", name)
    assert (r.returncode, r.stdout, r.stderr) == (
        0, f"Deleting a super stream...\nSuper stream {name} has been deleted\n", ""
    )  # fmt: skip
    assert _queues(b42, name) == {}
    assert api(b42, "GET", f"/api/exchanges/%2F/{name}")[0] == 404
    r = ctl(b42, "delete_super_stream", name)
    assert (r.returncode, r.stdout, r.stderr) == (
        70, "Deleting a super stream...\n", "Error:\nstream_not_found\n"
    )  # fmt: skip


def test_in_another_vhost(b42: leveret.Broker) -> None:
    vhost = f"v-{uuid.uuid4().hex[:6]}"
    api(b42, "PUT", f"/api/vhosts/{vhost}")
    api(b42, "PUT", f"/api/permissions/{vhost}/guest", {"configure": ".*", "write": ".*",
                                                        "read": ".*"})  # fmt: skip
    name = _name()
    assert ctl(b42, "add_super_stream", name, "--vhost", vhost, "--partitions", "2").returncode == 0
    _, queues = api(b42, "GET", f"/api/queues/{vhost}")
    assert sorted(q["name"] for q in queues) == [f"{name}-0", f"{name}-1"]
    assert ctl(b42, "delete_super_stream", name, "-p", vhost).returncode == 0
    assert api(b42, "GET", f"/api/queues/{vhost}")[1] == []


def test_the_default_mode_has_no_super_stream_endpoint() -> None:
    """One line, exit code 69 (unavailable), and nothing made."""
    with (
        tempfile.TemporaryDirectory() as d,
        leveret.Broker(data_dir=Path(d), management=True) as b,
    ):
        for verb in ("add_super_stream", "delete_super_stream"):
            r = ctl(b, verb, "s")
            assert (r.returncode, r.stdout) == (69, "")
            assert r.stderr.count("\n") == 1
            assert "RabbitMQ 4.2 mode" in r.stderr
        assert api(b, "GET", "/api/exchanges/%2F/s")[0] == 404


def test_rstream_publishes_and_consumes_through_a_super_stream_ctl_made(
    b42: leveret.Broker,
) -> None:
    """rstream's super stream producer routes by key (RouteQuery) into the partitions the
    ctl verb made; a consumer of each partition reads what went there."""
    rstream = pytest.importorskip("rstream")
    name = _name()
    assert ctl(b42, "add_super_stream", name, "--binding-keys", "amer,emea").returncode == 0

    async def scenario() -> list[tuple[str, bytes]]:
        async def key(message: object) -> str:
            body = message.body if hasattr(message, "body") else message
            return bytes(body).split(b":")[0].decode()  # type: ignore[call-overload]

        common = {"username": "guest", "password": "guest", "load_balancer_mode": True}
        # rstream 1.1.1 keeps the first RouteQuery's answer for every key after it: a
        # producer for each key
        for routing_key, texts in (("amer", (b"amer:1", b"amer:3")), ("emea", (b"emea:2",))):
            producer = rstream.SuperStreamProducer(
                "127.0.0.1", b42.stream_port, super_stream=name, routing_extractor=key,
                routing=rstream.RouteType.Key, **common,
            )  # fmt: skip
            async with producer:
                for text in texts:
                    assert text.startswith(routing_key.encode())
                    await producer.send(rstream.AMQPMessage(body=text))
        got: list[tuple[str, bytes]] = []

        def collect(partition: str) -> Any:
            async def on_message(msg: Any, context: Any) -> None:
                got.append((partition, bytes(msg.body)))

            return on_message

        consumer = rstream.Consumer("127.0.0.1", b42.stream_port, **common)
        async with consumer:
            await consumer.start()
            for partition in (f"{name}-amer", f"{name}-emea"):
                await consumer.subscribe(
                    partition, collect(partition), decoder=rstream.amqp_decoder,
                    offset_specification=rstream.ConsumerOffsetSpecification(
                        rstream.OffsetType.FIRST, None),
                )  # fmt: skip
            for _ in range(100):  # until the three have come (or 100 turns)
                if len(got) >= 3:
                    break
                await asyncio.sleep(0.1)
        return got

    got = asyncio.run(scenario())
    assert sorted(got) == [
        (f"{name}-amer", b"amer:1"), (f"{name}-amer", b"amer:3"), (f"{name}-emea", b"emea:2")
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("text", "size"),
    [("10", 10), ("2gb", 2 * 10**9), ("1k", 1000), ("3KB", 3000), ("5KiB", 5 * 1024),
     ("50Mi", 50 * 1024**2), ("1PiB", 1024**4 * 2014), ("2 gb", None), ("1.5gb", None),
     ("gb", None), ("2tb", 2 * 10**12)],
)  # fmt: skip
def test_sizes_as_parse_information_unit_reads_them(text: str, size: int | None) -> None:
    """v4.2.9 rabbit_resource_monitor_misc:parse_information_unit (PiB's multiplier as
    written there: 1024^4 * 2014)."""
    assert information_unit(text) == size


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("P1DT1H", 90000), ("PT10M30S", 630), ("P1Y2M", 365 * 86400 + 60 * 86400),
     ("PT1.5S", 1), ("P", 0), ("+PT1S", 1), ("10m", None), ("PT", 0), ("P1W", None)],
)  # fmt: skip
def test_durations_as_the_cli_reads_them(text: str, seconds: int | None) -> None:
    """rabbit_date_time:parse_duration, then AddSuperStreamCommand's duration_to_seconds
    (a year 365 days, a month 30; seconds' fraction dropped by string:to_integer)."""
    assert duration_seconds(text) == seconds
