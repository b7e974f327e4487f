#!/usr/bin/env bash
# Install everything the test suite needs, then run it. Works on a fresh Debian machine
# with Python >= 3.11 (run as root, or with sudo available, for the apt packages).
#
# Python: $PYTHON if set, else the active virtualenv's, else ./.venv (created if missing,
# the one the README's first command makes). Never the machine's own site-packages.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ -n "${PYTHON:-}" ]; then
  PY=$PYTHON
elif [ -n "${VIRTUAL_ENV:-}" ]; then
  PY="$VIRTUAL_ENV/bin/python"
else
  [ -x .venv/bin/python ] || python3 -m venv .venv
  PY=.venv/bin/python
fi
# Tests start `argus` and `ray` as a user would: from this interpreter's bin directory.
PATH="$(cd "$(dirname "$PY")" && pwd):$PATH"
export PATH

$PY -m pip install -q -e '.[test]'
# verl's own package gives us its shipped Hydra configs; its heavy deps (torch, vllm, ...)
# are not needed to compose configs, so install it without them.
$PY -m pip install -q --no-deps 'verl>=0.5,<1'

# Debian's chromium for the browser tests; shellcheck for the image scripts; bubblewrap
# for the opt-in job sandbox's test (tests/test_sandbox.py); postgresql (below).
need=()
command -v chromium >/dev/null 2>&1 || need+=(chromium)
command -v shellcheck >/dev/null 2>&1 || need+=(shellcheck)
command -v bwrap >/dev/null 2>&1 || need+=(bubblewrap)
# The OpenSSH clients (sftp, scp, ssh-keygen) for the SFTP door's tests (tests/sftp).
command -v sftp >/dev/null 2>&1 || need+=(openssh-client)
# Debian's postgresql for the PostgreSQL event log's tests (a throwaway server each run;
# its binaries live in /usr/lib/postgresql/<major>/bin, off the PATH).
command -v initdb >/dev/null 2>&1 || ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || need+=(postgresql)
if [ ${#need[@]} -gt 0 ]; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq && $SUDO apt-get install -y -qq "${need[@]}" >/dev/null
fi

# Two pytest-xdist workers (ARGUS_TEST_WORKERS to change; 0 runs in this process): most of
# the suite's wall time is spent waiting on Ray, subprocesses and servers, not computing.
# tests/conftest.py groups the tests so that each shared server (the session's Ray cluster,
# PostgreSQL) and each module's fixtures start in one worker only.
exec $PY -m pytest -n "${ARGUS_TEST_WORKERS:-2}" --dist loadgroup "$@"
