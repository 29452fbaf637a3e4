"""The switch on the command line: ``leveret server --rabbitmq-version`` and ``leveret up
--rabbitmq-version``, which passes it on to its broker (see
tests/embedded/rabbitmq42/ for what the 4.2 mode does)."""

from __future__ import annotations

import re
from pathlib import Path

import pika

from tests.support.cli import FREE_PORTS, read_banner, run_cli, running_up

BAD = "Error: invalid value for 'rabbitmq_version': '4.1' (one of 3.10.8, 4.2)"


def test_a_version_other_than_3_10_8_or_4_2_is_one_plain_line(tmp_path: Path) -> None:
    data = str(tmp_path / "data")
    done = run_cli("server", "--rabbitmq-version", "4.1", "--data-dir", data, cwd=tmp_path)
    assert (done.returncode, done.stderr) == (1, BAD + "\n")
    done = run_cli(
        "up", "--rabbitmq-version", "4.1", "--data-dir", str(tmp_path / "up"),
        "--no-ingest", "--no-receiver", *FREE_PORTS, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 1
    assert done.stderr.splitlines()[-1].startswith(BAD)


def test_up_passes_the_version_on_to_its_broker(tmp_path: Path) -> None:
    with running_up(
        "--rabbitmq-version", "4.2", "--data-dir", str(tmp_path / "data"),
        "--no-ingest", "--no-receiver", cwd=tmp_path,
    ) as up:  # fmt: skip
        banner = read_banner(up)
        found = re.search(r"AMQP\s+amqp://\S+@127\.0\.0\.1:(\d+)/", banner)
        assert found, banner
        conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", int(found.group(1))))
        assert conn._impl.server_properties["version"] == "4.2.9"
        conn.close()
