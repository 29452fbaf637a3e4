"""``leveret ctl`` on its own: connections and channels, closing a connection, the JSON
formatter, definitions to standard output, and errors as one line with rabbitmqctl's
exit codes."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pika
import pytest

from tests.support.brokers import BrokerUnderTest
from tests.support.mgmt import Site
from tests.support.ports import free_port


def ctl(
    *args: str, url: str | None = None, env: dict[str, str] | None = None, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "leveret.cli.main", "ctl"]
    if url is not None:
        cmd += ["--url", url]
    full_env = dict(os.environ)
    full_env.update(env or {})
    return subprocess.run(
        [*cmd, *args], capture_output=True, text=True, timeout=60, env=full_env, input=stdin
    )


def test_connections_channels_and_close_connection(leveret_site: Site) -> None:
    site = leveret_site
    b = site.broker
    conn = site.connect()
    ch = conn.channel()
    ch.queue_declare("cq")
    ch.basic_consume("cq", lambda *a: None, consumer_tag="tag-1")
    local_port = conn._impl._transport._sock.getsockname()[1]

    out = ctl(
        "list_connections", "name", "user", "vhost", "protocol", "channels", "pid", url=b.http_url
    ).stdout.splitlines()
    assert out[:2] == ["Listing connections ...", "name\tuser\tvhost\tprotocol\tchannels\tpid"]
    row = next(line.split("\t") for line in out[2:] if site.vhost in line)
    assert row[0] == f"127.0.0.1:{local_port} -> 127.0.0.1:{b.port}"
    assert row[1:5] == ["guest", site.vhost, "{0,9,1}", "1"]
    pid = row[5]
    assert pid.startswith("<") and pid.endswith(">")

    chans = ctl(
        "list_channels", "pid", "connection", "number", "consumer_count", url=b.http_url
    ).stdout.splitlines()
    assert any(line.split("\t")[1:] == [pid, "1", "1"] for line in chans[2:])
    consumers = ctl("list_consumers", "-p", site.vhost, url=b.http_url).stdout.splitlines()
    assert consumers[0] == f"Listing consumers in vhost {site.vhost} ..."
    cells = consumers[2].split("\t")
    assert (cells[0], cells[2:]) == ("cq", ["tag-1", "true", "0", "true", "[]"])

    closed = ctl("close_connection", pid, "bye now", url=b.http_url)
    assert closed.returncode == 0
    assert closed.stdout == f"Closing connection {pid}, reason: bye now...\n"
    with pytest.raises(pika.exceptions.ConnectionClosed) as info:
        conn.process_data_events(2)
        ch.basic_publish("", "cq", b"x")
    assert info.value.reply_code == 320 and "bye now" in info.value.reply_text


def test_json_and_definitions_to_stdout(leveret_site: Site) -> None:
    url = leveret_site.broker.http_url
    users = json.loads(ctl("list_users", "--formatter", "json", url=url).stdout)
    assert {"user": "guest", "tags": ["administrator"]} in users
    assert {"user": leveret_site.user, "tags": ["management"]} in users
    defs = json.loads(ctl("export_definitions", "-", url=url).stdout)
    assert {"users", "vhosts", "permissions", "queues", "exchanges", "bindings"} <= set(defs)
    assert any(v["name"] == leveret_site.vhost for v in defs["vhosts"])


def test_environment_and_status(leveret: BrokerUnderTest) -> None:
    env = {
        "LEVERET_CTL_URL": leveret.http_url,
        "LEVERET_CTL_USERNAME": "guest",
        "LEVERET_CTL_PASSWORD": "guest",
    }
    result = ctl("status", env=env)
    assert result.returncode == 0
    assert result.stdout.startswith("Status of node ")
    assert ctl("await_startup", env=env).returncode == 0
    vhosts = ctl("list_vhosts", "name", "tags", env=env).stdout.splitlines()
    assert vhosts[:2] == ["Listing vhosts ...", "name\ttags"]
    assert "/\t[]" in vhosts


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["no_such_verb"], 64, "Command 'no_such_verb' not found."),
        (
            ["list_queues", "bogus"],
            64,
            "Error (argument validation): Info key(s) bogus are not supported",
        ),
        (
            ["list_users", "--bogus-flag"],
            64,
            "Error (argument validation): invalid option --bogus-flag",
        ),
        (["delete_user"], 64, "Error (argument validation): not enough arguments."),
        (["delete_user", "a", "b"], 64, "Error (argument validation): too many arguments."),
        (["delete_user", "nobody-here"], 67, 'Error: User "nobody-here" does not exist'),
        (["add_user", "guest", "x"], 70, 'Error: User "guest" already exists'),
        (
            ["delete_vhost", "no-such-vhost"],
            65,
            "Error: Virtual host 'no-such-vhost' does not exist",
        ),
        (
            ["set_permissions", "-p", "no-such-vhost", "guest", ".*", ".*", ".*"],
            69,
            "Error: Virtual host no-such-vhost does not exist",
        ),
        (["purge_queue", "no-such-queue"], 69, "Error: Queue not found"),
        (["delete_queue", "no-such-queue"], 64, "Error: Queue not found"),
    ],
)
def test_errors_are_one_line_with_rabbitmqctl_codes(
    leveret: BrokerUnderTest, args: list[str], code: int, message: str
) -> None:
    result = ctl(*args, url=leveret.http_url)
    assert result.returncode == code
    assert result.stderr.splitlines() == [message]
    assert "Traceback" not in result.stderr


def test_wrong_credentials(leveret: BrokerUnderTest) -> None:
    result = ctl("-u", "guest", "-p", "wrong", "list_users", url=leveret.http_url)
    assert result.returncode == 77
    assert result.stderr.splitlines() == [
        f"Error: authentication failed for user 'guest' at {leveret.http_url}: Login failed"
    ]


def test_broker_not_running() -> None:
    port = free_port()
    result = ctl("list_queues", url=f"http://127.0.0.1:{port}")
    assert result.returncode == 69
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and "Is the broker running" in lines[0]
    assert result.stdout.splitlines() == []
