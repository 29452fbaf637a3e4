# Sourced by scripts/up and scripts/test (from the repository's root): where Leveret is
# installed. Debian's /usr/bin/python3 is "externally managed" (PEP 668): pip refuses to
# install into it, so Leveret goes into a virtualenv of its own, .venv.

# True when python3 is a system Python that pip must not install into.
python_externally_managed() {
    python3 - <<'PY'
import os, sys, sysconfig
in_venv = sys.prefix != sys.base_prefix
marker = os.path.join(sysconfig.get_path("stdlib"), "EXTERNALLY-MANAGED")
sys.exit(0 if not in_venv and os.path.exists(marker) else 1)
PY
}

# Make .venv with python3 -m venv unless it is there and has pip. Debian keeps venv's
# ensurepip in python3-venv, which is installed when missing (as root).
ensure_venv() {
    if [ -x .venv/bin/python ] && .venv/bin/python -m pip --version >/dev/null 2>&1; then
        return
    fi
    if ! python3 -c 'import ensurepip' >/dev/null 2>&1; then
        if [ "$(id -u)" -ne 0 ]; then
            echo "python3 cannot make a virtualenv: install python3-venv (as root," \
                "apt-get install python3-venv) or run this as root" >&2
            exit 1
        fi
        echo "Installing system packages: python3-venv"
        DEBIAN_FRONTEND=noninteractive apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >/dev/null
    fi
    rm -rf .venv
    echo "Making a virtualenv in .venv ($(python3 --version))"
    python3 -m venv .venv
}
