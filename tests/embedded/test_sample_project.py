"""The pytest plugin as a user gets it: Leveret built and installed (not editable) into a
virtualenv, and a project of the user's (sample_project/, copied out) whose tests use the
fixtures without any configuration. Its tests all use the queue name "orders"; they pass
only if every test has a vhost of its own, also two at a time under pytest-xdist and against
an outside broker (RabbitMQ, or a Leveret server) through --leveret-url.

Building Leveret's wheel and installing it with its dependencies into a fresh virtualenv
takes one to two minutes (everything from PyPI); each run of the sample project about 5 s."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from leveret.testing.remote import RemoteBroker
from tests.docs import blocks
from tests.support.brokers import BrokerUnderTest, ensure_rabbitmq_management

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = Path(__file__).resolve().parent / "sample_project"
# the sample project's test extra, and xdist for running its tests two at a time
TEST_REQUIREMENTS = ("pytest", "pytest-asyncio", "aio-pika", "pytest-xdist==3.8.0")
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
# The test examples of docs/testing.md, as printed there, go into the project's tests/
# too: the aio-pika one needs pytest-asyncio, which the project has and Leveret's own test
# environment does not (tests/docs/ runs the others).
DOC_TESTS = [b for b in blocks.parse(ROOT / "docs" / "testing.md").blocks if b.is_test]
# sample_project/tests: test_orders.py (6 parametrized + 3), and the documentation's tests
SAMPLE_TESTS = 9 + sum(len(re.findall(r"^(?:async )?def test_", b.text, re.M)) for b in DOC_TESTS)


def user_env() -> dict[str, str]:
    """The environment of a user's shell: not this checkout's PYTHONPATH, no pytest state."""
    return {
        k: v
        for k, v in os.environ.items()
        if k != "PYTHONPATH" and not k.startswith(("PYTEST_", "LEVERET_"))
    }


def run(cmd: list[str], cwd: Path | None = None, timeout: float = 300) -> str:
    proc = subprocess.run(
        cmd, cwd=cwd, env=user_env(), capture_output=True, text=True, timeout=timeout, check=False
    )
    assert proc.returncode == 0, f"{cmd}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc.stdout


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A virtualenv of its own with Leveret installed from a wheel of this tree, as a user
    installs it, and the sample project's test requirements."""
    base = tmp_path_factory.mktemp("user")
    source = base / "leveret-source"
    source.mkdir()
    shutil.copytree(
        ROOT / "src", source / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info")
    )
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    # a wheel, built as pip builds one for a user (setuptools from PyPI, isolated)
    run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--disable-pip-version-check",
            "--no-deps",
            "-w",
            str(base / "dist"),
            str(source),
        ]
    )
    (wheel,) = (base / "dist").glob("leveret-*.whl")
    env_dir = base / "venv"
    run([sys.executable, "-m", "venv", str(env_dir)])
    python = env_dir / "bin" / "python"
    # Leveret with its dependencies, and what the project's tests use, from PyPI
    proc = subprocess.run(
        [
            str(python),
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            str(wheel),
            *TEST_REQUIREMENTS,
        ],
        env=user_env(),
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
    if proc.returncode != 0:
        message = f"cannot install Leveret and {TEST_REQUIREMENTS}: {proc.stderr[-1000:]}"
        if IN_CI:
            pytest.fail(message)
        pytest.skip(message)
    return python


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A fresh copy of the user's project."""
    target = tmp_path / "orders-sample"
    shutil.copytree(SAMPLE, target, ignore=shutil.ignore_patterns("__pycache__"))
    for block in DOC_TESTS:
        (target / "tests" / f"test_docs_testing_{block.line}.py").write_text(block.text)
    return target


def outcomes(output: str) -> dict[str, int]:
    return {word: int(n) for n, word in re.findall(r"(\d+) (passed|failed|skipped|error)", output)}


def test_the_plugin_is_the_installed_one(venv: Path) -> None:
    out = run(
        [
            str(venv),
            "-c",
            "import importlib.metadata as m, leveret.testing.plugin as p;"
            "print([e.value for e in m.entry_points(group='pytest11') "
            "if e.name == 'leveret'][0]); print(p.__file__)",
        ]
    )
    entry, path = out.split()
    assert entry == "leveret.testing.plugin"
    assert Path(path).is_relative_to(venv.parent.parent), path  # the venv's, not this tree's


def test_fixtures_isolate_tests_in_process(venv: Path, project: Path) -> None:
    out = run([str(venv), "-m", "pytest", "-p", "no:cacheprovider", "-q"], cwd=project)
    assert outcomes(out) == {"passed": SAMPLE_TESTS}, out


def test_fixtures_isolate_parallel_tests(venv: Path, project: Path) -> None:
    out = run([str(venv), "-m", "pytest", "-p", "no:cacheprovider", "-q", "-n", "2"], cwd=project)
    counts = outcomes(out)
    # the last test skips on a worker that ran none of the others
    assert counts.get("failed", 0) == 0 and counts.get("error", 0) == 0, out
    assert counts["passed"] + counts.get("skipped", 0) == SAMPLE_TESTS, out
    assert counts["passed"] >= SAMPLE_TESTS - 1, out


@pytest.fixture
def outside(broker: BrokerUnderTest) -> Iterator[RemoteBroker]:
    """The broker of the ``broker`` fixture (a Leveret server, the reference RabbitMQ) as the
    plugin's --leveret-url sees it."""
    if broker.name == "rabbitmq" and not ensure_rabbitmq_management():
        pytest.skip("RabbitMQ's management plugin is not available")
    yield RemoteBroker(f"amqp://guest:guest@{broker.host}:{broker.port}/", broker.http_url)


def sample_vhosts(remote: RemoteBroker) -> set[str]:
    return {
        v
        for v in remote.vhosts()
        if v.startswith(
            ("test-test_each_test_sees", "test-test_the_url_is", "test-test_with_aio_pika")
        )
    }


def test_fixtures_against_an_outside_broker(
    venv: Path, project: Path, outside: RemoteBroker
) -> None:
    before = sample_vhosts(outside)
    out = run(
        [
            str(venv),
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "-q",
            "-n",
            "2",
            "--leveret-url",
            outside.url,
            "--leveret-management-url",
            outside.management_url,
        ],
        cwd=project,
    )
    counts = outcomes(out)
    assert counts.get("failed", 0) == 0 and counts.get("error", 0) == 0, out
    assert counts["passed"] >= SAMPLE_TESTS - 1, out
    # every vhost the tests made was deleted through the management API
    assert sample_vhosts(outside) == before


def test_the_ini_option_points_the_fixtures_outside(
    venv: Path, project: Path, outside: RemoteBroker
) -> None:
    ini = project / "pytest.ini"
    ini.write_text(
        f"[pytest]\ntestpaths = tests\npythonpath = .\nleveret_url = {outside.url}\n"
        f"leveret_management_url = {outside.management_url}\n"
    )
    out = run(
        [str(venv), "-m", "pytest", "-p", "no:cacheprovider", "-k", "with_aio_pika"], cwd=project
    )
    assert f"leveret: AMQP fixtures against {outside.url}" in out
    assert outcomes(out) == {"passed": 1}, out
