"""``leveret ctl``'s operator verbs print what ``rabbitmqctl`` 3.10.8 prints: policies and
operator policies, vhost and user limits, topic permissions. The same command lines run on
both brokers, each in a vhost and with a user of the test's own; stdout, the exit code and
the error text are compared line by line (the vhost and user names replaced by VHOST and
USER). Rows RabbitMQ lists in no particular order are compared sorted."""

from __future__ import annotations

import contextlib
import io
import re
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from leveret.cli.ctl import main as ctl_main
from tests.support.mgmt import Site

pytestmark = pytest.mark.rabbitmq


@pytest.fixture
def sites(leveret_site: Site, rabbitmq_site: Site) -> Iterator[tuple[Site, Site]]:
    yield leveret_site, rabbitmq_site


HEADERS = {
    "vhost\tname\tpattern\tapply-to\tdefinition\tpriority",
    "user\texchange\twrite\tread",
    "vhost\tlimits",
    "user\tlimits",
    "[",
}

# rabbitmqctl logs some failures on stderr with a time stamp before its error
LOG_LINE = re.compile(r"^\s*\d\d:\d\d:\d\d\.\d+ \[\w+\] .*$", re.M)


def ctl(site: Site, args: list[str]) -> tuple[int, str, str]:
    """rabbitmqctl on RabbitMQ; on Leveret, ``leveret ctl``'s main in this process (the
    same HTTP requests, without a Python start-up per command line)."""
    if site.broker.name == "rabbitmq":
        result = site.ctl(*args, check=False)
        return result.returncode, result.stdout, result.stderr
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = ctl_main(args, env={"LEVERET_CTL_URL": site.broker.http_url})
    return code, out.getvalue(), err.getvalue()


def run(site: Site, steps: list[list[str]]) -> list[tuple[str, int, list[str], list[str]]]:
    out = []
    for step in steps:
        args = [a.replace("VHOST", site.vhost).replace("USER", site.user) for a in step]
        code, stdout_text, stderr_text = ctl(site, args)

        def norm(text: str) -> str:
            return text.replace(site.vhost, "VHOST").replace(site.user, "USER")

        stdout = norm(stdout_text).split("\n")
        # a listing's rows come in no particular order: keep the first line (banner or
        # header) in place, sort the rest (JSON rows without their leading comma)
        head = 0
        while head < len(stdout) and (
            stdout[head].startswith("Listing") or stdout[head] in HEADERS
        ):
            head += 1
        stdout = stdout[:head] + sorted(line.lstrip(",") for line in stdout[head:])
        stderr = LOG_LINE.sub("", norm(stderr_text)).strip("\n").split("\n")
        out.append((" ".join(step), code, stdout, stderr))
    return out


def compare(sites: tuple[Site, Site], steps: list[list[str]]) -> None:
    # each broker's command lines in order, the two brokers side by side
    with ThreadPoolExecutor(2) as pool:
        ours, theirs = pool.map(lambda site: run(site, steps), sites)
    for mine, reference in zip(ours, theirs, strict=True):
        assert mine == reference


POLICY_STEPS = [
    ["list_policies", "-p", "VHOST"],
    ["list_policies", "-p", "VHOST", "--formatter", "json"],
    ["set_policy", "-p", "VHOST", "p1", "^a", '{"max-length":5,"message-ttl":100}'],
    [
        "set_policy",
        "-p",
        "VHOST",
        "--priority",
        "3",
        "--apply-to",
        "queues",
        "p2",
        "^b",
        '{"max-length":5}',
    ],
    ["set_policy", "-p", "VHOST", "-q", "p4", "^c", '{"dead-letter-exchange":"dlx"}'],
    [
        "set_policy",
        "-p",
        "VHOST",
        "--apply-to",
        "exchanges",
        "--priority",
        "7",
        "p5",
        ".*",
        '{"alternate-exchange":"ae"}',
    ],
    ["set_policy", "-p", "VHOST", "p3", "^a", '{"max-length":-1}'],
    ["set_policy", "-p", "VHOST", "p3", "^a", '{"foo":1,"bar":[1,2]}'],
    ["set_policy", "-p", "VHOST", "p3", "^a", '{"queue-mode":"sideways"}'],
    ["set_policy", "-p", "VHOST", "p3", "^a", '{"expires":0}'],
    ["set_policy", "-p", "VHOST", "p3", "^a", '{"max-age":"1Q"}'],
    ["set_policy", "-p", "VHOST", "p3", "^a", "{bad"],
    ["set_policy", "-p", "VHOST", "p3", "[", '{"max-length":1}'],
    ["set_policy", "-p", "VHOST", "p3", "a)", '{"max-length":1}'],
    ["set_policy", "-p", "VHOST", "--apply-to", "bogus", "p3", "^a", '{"max-length":1}'],
    ["set_policy", "-p", "VHOST", "p3", "^a", "{}"],
    ["list_policies", "-p", "VHOST"],
    ["list_policies", "-p", "VHOST", "--formatter", "json"],
    ["list_policies", "-p", "VHOST", "-q"],
    ["list_policies", "-p", "VHOST", "-s"],
    ["list_policies", "-p", "VHOST", "--no-table-headers"],
    ["clear_policy", "-p", "VHOST", "p1"],
    ["clear_policy", "-p", "VHOST", "p1"],
    ["clear_policy", "-p", "VHOST", "-q", "p2"],
    ["list_policies", "-p", "VHOST"],
]


def test_policy_verbs(sites: tuple[Site, Site]) -> None:
    compare(sites, POLICY_STEPS)


def test_policy_verbs_on_a_missing_vhost(sites: tuple[Site, Site]) -> None:
    compare(
        sites,
        [
            ["set_policy", "-p", "VHOST-gone", "p", "^a", '{"max-length":1}'],
            ["list_policies", "-p", "VHOST-gone"],
            ["clear_policy", "-p", "VHOST-gone", "p"],
        ],
    )


OPERATOR_STEPS = [
    ["list_operator_policies", "-p", "VHOST"],
    ["list_operator_policies", "-p", "VHOST", "--formatter", "json"],
    ["set_operator_policy", "-p", "VHOST", "o1", "^a", '{"max-length":5,"expires":1000}'],
    ["set_operator_policy", "-p", "VHOST", "--priority", "2", "o2", "^b", '{"delivery-limit":3}'],
    ["set_operator_policy", "-p", "VHOST", "o3", "^a", '{"overflow":"drop-head"}'],
    ["set_operator_policy", "-p", "VHOST", "o3", "^a", '{"message-ttl":-5}'],
    ["list_operator_policies", "-p", "VHOST"],
    ["list_operator_policies", "-p", "VHOST", "--formatter", "json"],
    ["clear_operator_policy", "-p", "VHOST", "o1"],
    ["clear_operator_policy", "-p", "VHOST", "o1"],
    ["list_operator_policies", "-p", "VHOST", "-q"],
]


def test_operator_policy_verbs(sites: tuple[Site, Site]) -> None:
    compare(sites, OPERATOR_STEPS)


VHOST_LIMIT_STEPS = [
    ["list_vhost_limits", "-p", "VHOST"],
    ["list_vhost_limits", "-p", "VHOST", "--formatter", "json"],
    ["set_vhost_limits", "-p", "VHOST", '{"max-connections":5}'],
    ["set_vhost_limits", "-p", "VHOST", '{"max-queues":10}'],
    ["list_vhost_limits", "-p", "VHOST"],
    ["set_vhost_limits", "-p", "VHOST", '{"max-connections":5,"max-queues":-1}'],
    ["list_vhost_limits", "-p", "VHOST"],
    ["list_vhost_limits", "-p", "VHOST", "-q"],
    ["list_vhost_limits", "-p", "VHOST", "--formatter", "json"],
    ["set_vhost_limits", "-p", "VHOST", '{"max-queues":1.5}'],
    ["set_vhost_limits", "-p", "VHOST", '{"max-queues":"x"}'],
    ["set_vhost_limits", "-p", "VHOST", '{"foo":1}'],
    ["set_vhost_limits", "-p", "VHOST", "{bad"],
    ["set_vhost_limits", "-p", "VHOST-gone", '{"max-queues":1}'],
    ["list_vhost_limits", "-p", "VHOST-gone"],
    ["clear_vhost_limits", "-p", "VHOST"],
    ["list_vhost_limits", "-p", "VHOST"],
    ["clear_vhost_limits", "-p", "VHOST"],
    ["clear_vhost_limits", "-p", "VHOST-gone"],
]


def test_vhost_limit_verbs(sites: tuple[Site, Site]) -> None:
    compare(sites, VHOST_LIMIT_STEPS)


def test_list_vhost_limits_global(sites: tuple[Site, Site]) -> None:
    """Every vhost's limits: other tests' vhosts may have some on RabbitMQ, so the rows
    compared are this test's."""
    outputs = []
    for site in sites:
        site.ctl("set_vhost_limits", "-p", site.vhost, '{"max-queues":3}')
        result = site.ctl("list_vhost_limits", "--global")
        lines = result.stdout.replace(site.vhost, "VHOST").splitlines()
        outputs.append(lines[:2] + [line for line in lines[2:] if line.startswith("VHOST\t")])
        json_out = site.ctl("list_vhost_limits", "--global", "--formatter", "json").stdout
        assert '{"vhost":"' + site.vhost + '","limits":"{\\"max-queues\\":3}"}' in json_out
    assert (
        outputs[0]
        == outputs[1]
        == ["Listing limits for all vhosts ...", "vhost\tlimits", 'VHOST\t{"max-queues":3}']
    )


USER_LIMIT_STEPS = [
    ["list_user_limits", "--user", "USER"],
    ["list_user_limits", "--user", "USER", "--formatter", "json"],
    ["set_user_limits", "USER", '{"max-connections":2}'],
    ["set_user_limits", "USER", '{"max-channels":3}'],
    ["list_user_limits", "--user", "USER"],
    ["list_user_limits", "--user", "USER", "--formatter", "json"],
    ["set_user_limits", "USER", '{"max-channels":3,"max-connections":-1}'],
    ["list_user_limits", "--user", "USER", "-q"],
    ["set_user_limits", "USER", '{"max-channels":"x"}'],
    ["set_user_limits", "USER", '{"foo":1}'],
    ["set_user_limits", "USER", "{bad"],
    ["set_user_limits", "USER", "{}"],
    ["set_user_limits", "USER-gone", '{"max-channels":1}'],
    ["list_user_limits", "--user", "USER-gone"],
    ["clear_user_limits", "USER", "foo"],
    ["clear_user_limits", "USER", "max-channels"],
    ["list_user_limits", "--user", "USER"],
    ["clear_user_limits", "USER", "all"],
    ["list_user_limits", "--user", "USER"],
    ["clear_user_limits", "USER-gone", "all"],
]


def test_user_limit_verbs(sites: tuple[Site, Site]) -> None:
    compare(sites, USER_LIMIT_STEPS)


TOPIC_STEPS = [
    ["list_topic_permissions", "-p", "VHOST"],
    ["list_topic_permissions", "-p", "VHOST", "--formatter", "json"],
    ["list_user_topic_permissions", "USER"],
    ["set_topic_permissions", "-p", "VHOST", "USER", "amq.topic", "^a", "^b"],
    ["set_topic_permissions", "-p", "VHOST", "USER", "logs", "", ".*"],
    ["set_topic_permissions", "-p", "VHOST", "USER", "logs", "^x", ".*"],
    ["set_topic_permissions", "-p", "VHOST", "USER-gone", "logs", "a", ".*"],
    ["set_topic_permissions", "-p", "VHOST-gone", "USER", "logs", "a", ".*"],
    ["list_topic_permissions", "-p", "VHOST"],
    ["list_topic_permissions", "-p", "VHOST", "-q"],
    ["list_topic_permissions", "-p", "VHOST", "--formatter", "json"],
    ["list_user_topic_permissions", "USER"],
    ["list_user_topic_permissions", "USER", "--formatter", "json"],
    ["list_user_topic_permissions", "USER-gone"],
    ["list_topic_permissions", "-p", "VHOST-gone"],
    ["clear_topic_permissions", "-p", "VHOST", "USER", "logs"],
    ["clear_topic_permissions", "-p", "VHOST", "USER", "logs"],
    ["list_topic_permissions", "-p", "VHOST"],
    ["clear_topic_permissions", "-p", "VHOST", "USER-gone"],
    ["clear_topic_permissions", "-p", "VHOST-gone", "USER"],
    ["clear_topic_permissions", "-p", "VHOST", "USER"],
    ["list_user_topic_permissions", "USER"],
]


def test_topic_permission_verbs(sites: tuple[Site, Site]) -> None:
    compare(sites, TOPIC_STEPS)


def test_invalid_topic_regexp(sites: tuple[Site, Site]) -> None:
    """rabbitmqctl prints the Erlang term RabbitMQ refused the pattern with."""
    compare(sites, [["set_topic_permissions", "-p", "VHOST", "USER", "t3", "[", ".*"]])
