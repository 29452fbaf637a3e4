"""The command line: ``leveret ctl`` ends as ``rabbitmqctl`` 3.10.8 ends for the same usage
error, with its exit code and its error text; options go where rabbitmqctl takes them.

rabbitmqctl follows an error with "Arguments given:" and the verb's usage; Leveret prints the
error alone, as one line, so the comparison is of that line. For an invalid option rabbitmqctl
names each offending option on a line of its own (``--bogus : value``) under "Invalid options
for this command:"; Leveret's one line names the same option. Usage errors are found before
anything is sent to a broker: those command lines change nothing on either. The tests of
options that work (-s, add_vhost's and delete_queue's) change only their own vhosts."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.brokers import BrokerUnderTest
from tests.support.mgmt import Site, prepared

pytestmark = pytest.mark.rabbitmq

INVALID = "Error (argument validation): Invalid options for this command:"


def leveret_ctl(broker: BrokerUnderTest, *args: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "leveret.cli.main", "ctl", "--url", broker.http_url, *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60, env=dict(os.environ))


def rabbitmqctl(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["rabbitmqctl", *args], capture_output=True, text=True, timeout=60)


def headline(stderr: str) -> str:
    """The error line: rabbitmqctl starts some with a blank line and ends some with a space."""
    return next(line.strip() for line in stderr.splitlines() if line.strip())


@pytest.fixture
def both(leveret: BrokerUnderTest, rabbitmq: BrokerUnderTest) -> BrokerUnderTest:
    return leveret


SAME_LINE = [
    ["no_such_verb"],
    ["no_such_verb", "--bogus"],
    ["delete_user"],
    ["close_connection", "some-pid"],
    ["delete_user", "a", "b"],
    ["status", "extra"],
    ["list_users", "user"],  # list_users and list_permissions take no columns
    ["help", "list_queues", "extra"],
    ["list_queues", "bogus"],
]


@pytest.mark.parametrize("args", SAME_LINE, ids=" ".join)
def test_same_error_line(both: BrokerUnderTest, args: list[str]) -> None:
    """Unknown verb, missing and extra arguments, unknown columns: the same line, code 64."""
    ours, theirs = leveret_ctl(both, *args), rabbitmqctl(*args)
    assert (ours.returncode, theirs.returncode) == (64, 64)
    assert ours.stderr.splitlines() == [headline(theirs.stderr)]
    assert ours.stdout == theirs.stdout == ""


INVALID_OPTION = [
    (["list_queues", "--bogus"], "--bogus"),
    (["--bogus", "list_users"], "--bogus"),
    (["list_users", "-qx"], "-x"),
    (["list_users", "--if-empty"], "--if-empty"),  # delete_queue's, not list_users'
    (["delete_queue", "q", "--if-empty=x"], "--if-empty"),  # a flag takes no value
    (["list_queues", "-h"], "-h"),  # -h is help only before the verb
]


def invalid_on_both(
    both: BrokerUnderTest, args: list[str], option: str
) -> tuple[subprocess.CompletedProcess[str], subprocess.CompletedProcess[str]]:
    """``leveret ctl ARGS`` and ``rabbitmqctl ARGS``, both refused as invalid (exit code 64),
    RabbitMQ naming ``option``: what each did."""
    ours, theirs = leveret_ctl(both, *args), rabbitmqctl(*args)
    assert (ours.returncode, theirs.returncode) == (64, 64)
    lines = theirs.stderr.splitlines()
    assert lines[0] == INVALID
    assert lines[1].split(" : ")[0] == option
    return ours, theirs


@pytest.mark.parametrize(
    ("args", "option"), INVALID_OPTION, ids=[" ".join(a) for a, _ in INVALID_OPTION]
)
def test_invalid_option_names_the_same_option(
    both: BrokerUnderTest, args: list[str], option: str
) -> None:
    ours, theirs = invalid_on_both(both, args, option)
    assert ours.stderr.splitlines() == [f"Error (argument validation): invalid option {option}"]
    assert ours.stdout == theirs.stdout == ""


BAD_VALUE = [
    (["list_users", "-t", "abc"], "-t", "timeout must be a number"),
    (["list_users", "--timeout=abc"], "--timeout", "timeout must be a number"),
    (["list_users", "-t"], "-t", "option -t needs a value"),
    (["add_vhost", "--description"], "--description", "option --description needs a value"),
]


@pytest.mark.parametrize(
    ("args", "option", "text"), BAD_VALUE, ids=[" ".join(a) for a, _, _ in BAD_VALUE]
)
def test_bad_option_value(both: BrokerUnderTest, args: list[str], option: str, text: str) -> None:
    """rabbitmqctl calls an option without a value, or with one of the wrong type, invalid;
    Leveret says which of the two it is (exit code 64 both)."""
    ours, _ = invalid_on_both(both, args, option)
    assert ours.stderr.splitlines() == [f"Error (argument validation): {text}"]


def test_unknown_formatter(leveret: BrokerUnderTest) -> None:
    """rabbitmqctl 3.10.8 crashes on an unknown formatter (exit 1, an Elixir stack trace);
    Leveret refuses it as a usage error."""
    ours = leveret_ctl(leveret, "list_users", "--formatter", "bogus")
    assert ours.returncode == 64
    assert ours.stderr.splitlines() == ["Error (argument validation): unknown formatter bogus"]
    assert ours.stdout == ""


@pytest.mark.parametrize("args", [["help"], ["--help"]], ids=" ".join)
def test_help_is_success(both: BrokerUnderTest, args: list[str]) -> None:
    ours, theirs = leveret_ctl(both, *args), rabbitmqctl(*args)
    assert (ours.returncode, theirs.returncode) == (0, 0)
    assert ours.stderr == theirs.stderr == ""
    assert "list_queues" in ours.stdout and "list_queues" in theirs.stdout


@pytest.mark.parametrize(
    "args", [["help", "delete_queue"], ["delete_queue", "--help"]], ids=" ".join
)
def test_verb_help(both: BrokerUnderTest, args: list[str]) -> None:
    """A verb's help: its usage line and what it does, on stdout, exit code 0."""
    ours, theirs = leveret_ctl(both, *args), rabbitmqctl(*args)
    assert (ours.returncode, theirs.returncode) == (0, 0)
    assert ours.stderr == theirs.stderr == ""
    assert ours.stdout.startswith("Usage: leveret ctl delete_queue [OPTIONS]")
    assert "delete_queue" in theirs.stdout
    for option in ("--if-empty", "--if-unused"):
        assert option in ours.stdout and option in theirs.stdout


def test_no_verb_is_a_usage_error(both: BrokerUnderTest) -> None:
    """No verb: the usage on stderr, exit code 64."""
    ours, theirs = leveret_ctl(both), rabbitmqctl()
    assert (ours.returncode, theirs.returncode) == (64, 64)
    assert ours.stdout == theirs.stdout == ""
    assert "list_queues" in ours.stderr and "list_queues" in theirs.stderr


def test_help_for_an_unknown_verb(both: BrokerUnderTest) -> None:
    ours, theirs = leveret_ctl(both, "help", "no_such_verb"), rabbitmqctl("help", "no_such_verb")
    assert (ours.returncode, theirs.returncode) == (64, 64)
    assert ours.stderr.splitlines() == ["Command 'no_such_verb' not found."]
    assert "Command 'no_such_verb' not found." in theirs.stderr.splitlines()


def test_silent_drops_banner_and_header(leveret_site: Site, rabbitmq_site: Site) -> None:
    """-s/--silent is -q without the table header too."""
    for flag in ("-s", "--silent"):
        outputs = []
        for site in (leveret_site, rabbitmq_site):
            out = site.ctl("list_permissions", flag, "-p", site.vhost).stdout
            outputs.append(sorted(out.replace(site.user, "USER").splitlines()))
        assert outputs[0] == outputs[1] == ["USER\t^t-\t.*\t", "guest\t.*\t.*\t.*"], flag


def test_add_vhost_options_as_rabbitmqctl(leveret_site: Site, rabbitmq_site: Site) -> None:
    """add_vhost's own options, -d among them, before and after its argument, and global
    options after the verb. (rabbitmqctl 3.10.8 keeps --tags unsplit, one string, unless
    --default-queue-type is given too; the management API always splits them.)"""
    outputs = []
    for site in (leveret_site, rabbitmq_site):
        name = f"ctl-usage-{uuid.uuid4().hex[:8]}"
        try:
            added = site.ctl(
                "add_vhost",
                "-d",
                "for tests",
                name,
                "--tags",
                "a,b",
                "--default-queue-type",
                "classic",
                "-q",
            )
            listed = site.ctl("list_vhosts", "name", "description", "tags", "--silent")
        finally:
            site.ctl("delete_vhost", name, "-q", check=False)
        rows = [r for r in listed.stdout.splitlines() if r.startswith(name)]
        outputs.append((added.stdout, [r.replace(name, "NAME") for r in rows]))
    assert outputs[0] == outputs[1] == ("", ["NAME\tfor tests\t[a, b]"])


@pytest.fixture
def queues(leveret_site: Site, rabbitmq_site: Site) -> Iterator[tuple[Site, Site]]:
    """On each broker: 'full' holds a message, 'used' has a consumer, 'idle' neither."""

    def prepare(site: Site) -> Any:
        conn = site.connect()
        ch = conn.channel()
        for name in ("full", "used", "idle"):
            ch.queue_declare(name)
        ch.basic_publish("", "full", b"m")
        ch.basic_consume("used", lambda *a: None)
        conn.process_data_events(0.2)
        return conn

    with prepared((leveret_site, rabbitmq_site), prepare) as both:
        yield both


def test_delete_queue_conditions(queues: tuple[Site, Site]) -> None:
    """-e/--if-empty and -u/--if-unused (after delete_queue -u is --if-unused, not the API
    user): rabbitmqctl's banners, its refusals (exit code 64), and the queue left alone."""
    outputs = []
    for site in queues:
        steps = []
        for args in (["full", "-e"], ["used", "--if-unused", "--if-empty"], ["idle", "-u"]):
            result = site.ctl("delete_queue", *args, "-p", site.vhost, check=False)
            stderr = " ".join(result.stderr.split())  # rabbitmqctl: "Error:\nQueue is ..."
            steps.append((result.returncode, result.stdout.replace(site.vhost, "VHOST"), stderr))
        listed = site.ctl("list_queues", "name", "messages", "-p", site.vhost, "-q")
        steps.append((listed.returncode, "\n".join(sorted(listed.stdout.splitlines())), ""))
        outputs.append(steps)
    assert outputs[0] == outputs[1]
    assert outputs[0] == [
        (
            64,
            "Deleting queue 'full' on vhost 'VHOST' if queue is empty ...\n",
            "Error: Queue is not empty",
        ),
        (
            64,
            "Deleting queue 'used' on vhost 'VHOST' if queue is empty and if queue is unused ...\n",
            "Error: Queue is in use",
        ),
        (
            0,
            "Deleting queue 'idle' on vhost 'VHOST' if queue is unused ...\n"
            "Queue was successfully deleted with 0 ready messages\n",
            "",
        ),
        (0, "full\t1\nname\tmessages\nused\t0", ""),
    ]
