"""``leveret up --config FILE`` runs its broker with that configuration, as
``leveret server --config`` does (up had no such option)."""

from __future__ import annotations

import re
from pathlib import Path

import pika

from tests.support.cli import read_banner, running_up


def test_up_takes_the_brokers_config_file(tmp_path: Path) -> None:
    config = tmp_path / "leveret.toml"
    config.write_text(
        '[[users]]\nname = "alice"\npassword = "secret"\ntags = ["management"]\n\n'
        '[[permissions]]\nuser = "alice"\nvhost = "/"\n'
        'configure = ".*"\nwrite = ".*"\nread = ".*"\n'
    )
    with running_up("--config", str(config), "--no-ingest", "--no-receiver", cwd=tmp_path) as up:
        banner = read_banner(up)
        found = re.search(r"AMQP\s+amqp://\S+@127\.0\.0\.1:(\d+)/", banner)
        assert found, banner
        params = pika.ConnectionParameters(
            "127.0.0.1", int(found.group(1)), credentials=pika.PlainCredentials("alice", "secret")
        )
        conn = pika.BlockingConnection(params)
        conn.channel().queue_declare("", exclusive=True)
        conn.close()
