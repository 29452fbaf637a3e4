"""rabbitmqadmin, the management API's own command-line client (served by RabbitMQ at
/cli/rabbitmqadmin), runs unmodified against Leveret and prints what it prints against
RabbitMQ for the same commands."""

from __future__ import annotations

import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from tests.support.brokers import BrokerUnderTest
from tests.support.mgmt import Site, rabbitmq_with_management

pytestmark = pytest.mark.rabbitmq


@pytest.fixture(scope="module")
def rabbitmqadmin(rabbitmq: BrokerUnderTest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    rabbitmq_with_management(rabbitmq)
    path = tmp_path_factory.mktemp("rabbitmqadmin") / "rabbitmqadmin"
    with urllib.request.urlopen(rabbitmq.http_url + "/cli/rabbitmqadmin", timeout=30) as resp:
        path.write_bytes(resp.read())
    return path


def run(admin: Path, site: Site, *args: str) -> str:
    cmd = [
        sys.executable,
        str(admin),
        "-H",
        site.broker.host,
        "-P",
        str(site.broker.http_port),
        "-V",
        site.vhost,
        *args,
    ]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, (cmd, result.stdout, result.stderr)
    return result.stdout.replace(site.vhost, "VHOST")


def table(text: str) -> list[str]:
    """A rabbitmqadmin table with its rows sorted (RabbitMQ's order is its own)."""
    lines = text.splitlines()
    if len(lines) < 4:
        return lines
    return lines[:3] + sorted(lines[3:-1]) + lines[-1:]


def test_rabbitmqadmin_sees_the_same(
    rabbitmqadmin: Path, leveret_site: Site, rabbitmq_site: Site
) -> None:
    outputs = []
    for site in (leveret_site, rabbitmq_site):
        out = [
            run(
                rabbitmqadmin,
                site,
                "declare",
                "queue",
                "name=adm-q",
                "durable=true",
                'arguments={"x-max-length": 10}',
            ),
            run(rabbitmqadmin, site, "declare", "exchange", "name=adm-x", "type=topic"),
            run(
                rabbitmqadmin,
                site,
                "declare",
                "binding",
                "source=adm-x",
                "destination=adm-q",
                "routing_key=a.#",
            ),
            run(
                rabbitmqadmin, site, "publish", "exchange=adm-x", "routing_key=a.b", "payload=hello"
            ),
            run(rabbitmqadmin, site, "publish", "exchange=adm-x", "routing_key=z", "payload=lost"),
            run(rabbitmqadmin, site, "get", "queue=adm-q", "ackmode=ack_requeue_true"),
            "\n".join(
                table(run(rabbitmqadmin, site, "list", "exchanges", "name", "type", "durable"))
            ),
            "\n".join(
                table(
                    run(
                        rabbitmqadmin,
                        site,
                        "list",
                        "bindings",
                        "source",
                        "destination",
                        "routing_key",
                    )
                )
            ),
            run(rabbitmqadmin, site, "purge", "queue", "name=adm-q"),
            run(
                rabbitmqadmin,
                site,
                "delete",
                "binding",
                "source=adm-x",
                "destination=adm-q",
                "destination_type=queue",
                "properties_key=a.%23",
            ),
            run(rabbitmqadmin, site, "delete", "exchange", "name=adm-x"),
            run(rabbitmqadmin, site, "delete", "queue", "name=adm-q"),
        ]
        outputs.append(out)
    assert outputs[0] == outputs[1]
