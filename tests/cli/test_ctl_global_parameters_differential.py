"""``leveret ctl``'s global parameter verbs and set_cluster_name print what ``rabbitmqctl``
3.10.8 prints: the same command lines on both brokers, stdout, stderr and the exit code
compared (as test_ctl_operate_differential compares them). Each test's parameter has a
name of its own; internal_cluster_id's value (each broker has its own) is replaced by ID,
and other parameters (RabbitMQ is shared) are left out of the listings."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator

import pytest

from tests.cli.test_ctl_operate_differential import ctl
from tests.support.identity import cluster_name_held
from tests.support.mgmt import Site

pytestmark = pytest.mark.rabbitmq

CLUSTER_ID = re.compile(r"rabbitmq-cluster-id-[A-Za-z0-9_-]{22}")


@pytest.fixture
def sites(leveret_site: Site, rabbitmq_site: Site) -> Iterator[tuple[Site, Site]]:
    yield leveret_site, rabbitmq_site


def _kept(line: str, name: str) -> bool:
    """A listing's line about another parameter than the test's or internal_cluster_id."""
    row = re.match(r'^,?(?:\{"name":"([^"]*)"|([^\t]+)\t)', line)
    if row is None or line.startswith(("Listing", "name\tvalue")):
        return True
    return (row.group(1) or row.group(2)) in (name, "internal_cluster_id")


def run(site: Site, steps: list[list[str]], name: str) -> list[tuple[str, int, str, str]]:
    node = site.api.get("/api/overview")["node"]
    out = []
    for step in steps:
        code, stdout, stderr = ctl(site, [a.replace("NAME", name) for a in step])
        lines = [line for line in stdout.split("\n") if _kept(line, name)]
        # the JSON listing's first row has no comma, whichever parameter it is
        if len(lines) > 1 and lines[0] == "[" and lines[1].startswith(","):
            lines[1] = lines[1][1:]

        def norm(text: str) -> str:
            return CLUSTER_ID.sub("ID", text.replace(name, "NAME").replace(node, "NODE"))

        out.append((" ".join(step), code, norm("\n".join(lines)), norm(stderr).strip("\n")))
    return out


def compare(sites: tuple[Site, Site], steps: list[list[str]], name: str) -> None:
    try:
        ours, theirs = (run(site, steps, name) for site in sites)
    finally:
        for site in sites:
            site.api.delete(f"/api/global-parameters/{name}")
    for mine, reference in zip(ours, theirs, strict=True):
        assert mine == reference


GLOBAL_PARAMETER_STEPS = [
    ["clear_global_parameter", "NAME"],
    ["set_global_parameter", "NAME", '{"b":1,"a":[1,2],"c":{"z":1,"y":2}}'],
    ["list_global_parameters"],
    ["list_global_parameters", "--formatter", "json"],
    ["list_global_parameters", "-q"],
    ["list_global_parameters", "-s", "--no-table-headers"],
    ["set_global_parameter", "NAME", '"str"'],
    ["list_global_parameters", "-q"],
    ["set_global_parameter", "NAME", "{bad"],
    ["set_global_parameter", "-q", "NAME", "5"],
    ["list_global_parameters", "-q"],
    ["set_global_parameter", "NAME", "{}", "--formatter", "json"],
    ["list_global_parameters", "--formatter", "json"],
    ["set_global_parameter", "NAME", "null"],
    ["list_global_parameters", "-q"],
    ["clear_global_parameter", "NAME"],
    ["clear_global_parameter", "NAME"],
    ["clear_global_parameter", "-q", "NAME"],
    ["set_global_parameter", "NAME", "[]"],
    ["clear_global_parameter", "NAME", "--formatter", "json"],
    ["clear_global_parameter", "NAME", "--formatter", "json"],
]


def test_global_parameter_verbs(sites: tuple[Site, Site]) -> None:
    compare(sites, GLOBAL_PARAMETER_STEPS, f"gpctl-{uuid.uuid4().hex[:8]}")


@pytest.mark.parametrize(
    "args",
    [["set_global_parameter", "NAME"], ["set_global_parameter", "NAME", "1", "2"]],
)
def test_set_global_parameter_usage(sites: tuple[Site, Site], args: list[str]) -> None:
    """Too few or too many arguments: rabbitmqctl's usage error (64, its first line the
    same; rabbitmqctl's usage text follows), nothing set."""
    name = f"gpctl-{uuid.uuid4().hex[:8]}"
    ours, theirs = (ctl(site, [a.replace("NAME", name) for a in args]) for site in sites)
    assert ours[0] == theirs[0] == 64
    assert ours[2].split("\n")[0] == theirs[2].split("\n")[0]
    assert "argument validation" in ours[2]
    for site in sites:
        assert site.api.call("GET", f"/api/global-parameters/{name}")[0] == 404


def test_set_cluster_name(sites: tuple[Site, Site]) -> None:
    """set_cluster_name: its banner, and the name the API then shows; --formatter json's
    answer. The parameter cluster_name is deleted after (the node's name comes back)."""
    name = f"gpctl-cluster-{uuid.uuid4().hex[:8]}"
    steps = [
        ["set_cluster_name", "NAME"],
        ["list_global_parameters", "-q"],
        ["set_cluster_name", "-q", "NAME-2"],
        ["set_cluster_name", "--formatter", "json", "NAME-3"],
        ["clear_global_parameter", "cluster_name"],
    ]

    def scenario(site: Site) -> list[object]:
        out: list[object] = []
        try:
            for step in steps:
                out.append(run(site, [step], name)[0])
                shown = site.api.get("/api/cluster-name")["name"]
                out.append(shown.replace(name, "NAME") if shown.startswith(name) else "NODE")
        finally:
            site.api.delete("/api/global-parameters/cluster_name")
        return out

    with cluster_name_held(change=True):
        ours, theirs = (scenario(site) for site in sites)
    assert ours == theirs
