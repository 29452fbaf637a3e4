"""The pytest plugin's options and failures, in a pytest run of its own (the plugin loaded
by its entry point when Leveret is installed with it, else with -p)."""

from __future__ import annotations

import importlib.metadata
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def plugin_args() -> list[str]:
    installed = any(e.name == "leveret" for e in importlib.metadata.entry_points(group="pytest11"))
    return [] if installed else ["-p", "leveret.testing.plugin"]


def pytest_in(directory: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env["PYTHONPATH"] = str(ROOT / "src")
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *plugin_args(), *args],
        cwd=directory,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_options_are_in_the_help(tmp_path: Path) -> None:
    out = pytest_in(tmp_path, "--help").stdout
    assert "--leveret-url=URL" in out
    assert "--leveret-management-url=URL" in out
    assert "leveret_url (string)" in out


def test_nothing_starts_unless_a_fixture_is_used(tmp_path: Path) -> None:
    (tmp_path / "test_plain.py").write_text(
        "import sys, threading\n"
        "def test_plain():\n"
        "    assert 'leveret.embedded' not in sys.modules\n"
        "    assert not [t for t in threading.enumerate() if t.name == 'leveret-broker']\n"
    )
    proc = pytest_in(tmp_path, "-q")
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_fixtures_in_process(tmp_path: Path) -> None:
    (tmp_path / "test_amqp.py").write_text(
        "import pika, leveret\n"
        "def test_broker(leveret_broker):\n"
        "    assert isinstance(leveret_broker, leveret.Broker)\n"
        "    assert not leveret_broker.management\n"
        "def test_url(amqp_url, amqp_vhost, leveret_broker):\n"
        "    assert amqp_url == leveret_broker.vhost_url(amqp_vhost)\n"
        "    assert amqp_vhost.startswith('test-test_url-')\n"
        "    pika.BlockingConnection(pika.URLParameters(amqp_url)).close()\n"
    )
    proc = pytest_in(tmp_path, "-q")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "2 passed" in proc.stdout


def test_a_url_that_is_not_amqp_is_refused(tmp_path: Path) -> None:
    (tmp_path / "test_amqp.py").write_text("def test_url(amqp_url):\n    pass\n")
    proc = pytest_in(tmp_path, "-q", "--leveret-url", "http://127.0.0.1:15672/")
    assert proc.returncode == 1
    assert "--leveret-url: not an AMQP URL: 'http://127.0.0.1:15672/'" in proc.stdout


def test_an_unreachable_management_api_is_a_plain_error(tmp_path: Path) -> None:
    (tmp_path / "test_amqp.py").write_text("def test_url(amqp_url):\n    pass\n")
    (tmp_path / "pytest.ini").write_text(
        "[pytest]\nleveret_url = amqp://guest:guest@127.0.0.1:1/\n"
        "leveret_management_url = http://127.0.0.1:1\n"
    )
    proc = pytest_in(tmp_path, "-q")
    assert proc.returncode == 1
    assert "--leveret-url: cannot reach the management API at http://127.0.0.1:1" in proc.stdout
    assert "Traceback" not in proc.stdout


def test_the_management_api_found_is_the_brokers_own(tmp_path: Path) -> None:
    """Found by a user: ``--leveret-url`` alone made the tests' vhosts through port 15672,
    another broker's (a RabbitMQ beside the Leveret under test), and failed with
    ``NOT_ALLOWED - vhost ... not found``. The management API is now the broker's own, found
    by its AMQP listener, or the run stops saying what it found where."""
    import leveret

    (tmp_path / "test_amqp.py").write_text(
        "import pika\n"
        "def test_url(amqp_url):\n"
        "    pika.BlockingConnection(pika.URLParameters(amqp_url)).close()\n"
    )
    with leveret.Broker(management=True) as broker:
        # the default candidates (AMQP port + 10000, then 15672) are not this broker's
        proc = pytest_in(tmp_path, "-q", "--leveret-url", broker.url)
        assert proc.returncode == 1, proc.stdout
        assert (
            f"--leveret-url: no management API of the broker at 127.0.0.1:{broker.port} found"
        ) in proc.stdout
        assert "give it with --leveret-management-url" in proc.stdout
        assert "Traceback" not in proc.stdout
        proc = pytest_in(
            tmp_path,
            "-q",
            "--leveret-url",
            broker.url,
            "--leveret-management-url",
            broker.management_url,
        )
        assert proc.returncode == 0, proc.stdout + proc.stderr


def test_the_management_api_beside_the_amqp_port_is_found() -> None:
    """A Leveret run beside a RabbitMQ as its README says (5673 and 15673): its AMQP port
    plus 10,000 is its management API."""
    import socket

    import leveret
    from leveret.testing.remote import RemoteBroker

    for _ in range(50):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            amqp = s.getsockname()[1]
        if amqp + 10000 >= 65536:
            continue
        broker = leveret.Broker(amqp, management=True, management_port=amqp + 10000)
        try:
            broker.start()
        except OSError:
            continue  # taken meanwhile: two other ports
        try:
            remote = RemoteBroker(broker.url)
            remote.locate()
            assert remote.management_url == f"http://127.0.0.1:{amqp + 10000}"
            assert "/" in remote.vhosts()
        finally:
            broker.stop()
        return
    raise AssertionError("no two free ports 10,000 apart")


def test_the_in_process_brokers_may_behave_as_rabbitmq_4_2(tmp_path: Path) -> None:
    (tmp_path / "test_version.py").write_text(
        "def test_version(leveret_broker, leveret_clock):\n"
        "    assert leveret_broker.rabbitmq_version == '4.2.9'\n"
        "    assert leveret_clock.rabbitmq_version == '4.2.9'\n"
    )
    proc = pytest_in(tmp_path, "-q", "--leveret-rabbitmq-version", "4.2")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    proc = pytest_in(tmp_path, "-q", "--leveret-rabbitmq-version", "4.1")
    assert proc.returncode != 0
    assert "--leveret-rabbitmq-version: invalid value for 'rabbitmq_version': '4.1'" in (
        proc.stdout
    )
