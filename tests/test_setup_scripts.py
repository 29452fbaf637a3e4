"""The README's two commands for a fresh machine work with Debian's own python3, which
refuses ``pip install`` outside a virtualenv (PEP 668, ``externally-managed-environment``)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SYSTEM_PYTHON = Path("/usr/bin/python3")


def _readme_commands() -> list[str]:
    setup = (ROOT / "README.md").read_text().split("## Set up", 1)[1].split("\n## ", 1)[0]
    return [block.strip() for block in re.findall(r"```sh\n(.*?)```", setup, re.S)]


def _externally_managed(python: Path) -> bool:
    probe = (
        "import os, sys, sysconfig; sys.exit(0 if sys.prefix == sys.base_prefix and "
        "os.path.exists(os.path.join(sysconfig.get_path('stdlib'), 'EXTERNALLY-MANAGED')) "
        "else 1)"
    )
    return subprocess.run([str(python), "-c", probe]).returncode == 0


def test_readme_has_two_commands_that_are_scripts() -> None:
    assert _readme_commands() == ["scripts/up", "scripts/test"]
    for script in ("scripts/up", "scripts/test"):
        assert os.access(ROOT / script, os.X_OK), script
    assert "scripts/test" in (ROOT / ".ci" / "run").read_text()


@pytest.mark.skipif(
    not SYSTEM_PYTHON.exists() or not _externally_managed(SYSTEM_PYTHON),
    reason="needs Debian's externally managed /usr/bin/python3",
)
def test_with_debians_python3_the_scripts_install_into_a_virtualenv(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python3").symlink_to(SYSTEM_PYTHON)
    env = {**os.environ, "PATH": f"{bin_dir}:/usr/bin:/bin"}
    env.pop("VIRTUAL_ENV", None)
    work = tmp_path / "checkout"
    work.mkdir()
    shutil.copytree(ROOT / "scripts" / "lib", work / "scripts" / "lib")
    script = (
        ". scripts/lib/python.sh\n"
        "python_externally_managed || { echo 'not detected'; exit 3; }\n"
        "ensure_venv\n"
        'export PATH="$PWD/.venv/bin:$PATH"\n'
        "if python_externally_managed; then echo 'still managed'; exit 4; fi\n"
        "python3 -m pip --version\n"
    )
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert str(work / ".venv") in done.stdout  # pip of the virtualenv, which installs
    # both scripts install through it
    for name in ("up", "test"):
        text = (ROOT / "scripts" / name).read_text()
        assert ". scripts/lib/python.sh" in text and "ensure_venv" in text
