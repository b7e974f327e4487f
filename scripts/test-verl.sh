#!/usr/bin/env bash
# The real-verl tests (tests/verl): verl 0.9.1 with torch 2.13.0's CPU build, run through
# Argus on the usual test cluster up to verl's first GPU call. Their own virtualenv
# (.venv-verl, about 2.3 GB: torch, transformers, verl's dependencies), so the main suite's
# environment stays light; a separate CI step (README "Tests"), about 5 minutes.
#
# Python: $PYTHON if set, else ./.venv-verl (created if missing).
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${PYTHON:-.venv-verl/bin/python}
[ -x "$PY" ] || python3 -m venv .venv-verl
PATH="$(cd "$(dirname "$PY")" && pwd):$PATH"
export PATH

# In two steps, verl's plain dependencies first: asked for verl[verl-core] at once, pip
# backtracks for more than 5 minutes (and no end was seen); this way it takes about one.
$PY -m pip install -q -e '.[test]' 'verl==0.9.1' 'torch==2.13.0'
$PY -m pip install -q -e '.[verl]'
# Every test must run: a missing module fails the collection (ARGUS_REQUIRE_VERL), and a
# skipped or absent test fails the script (the JUnit report's counts).
report="$(mktemp /tmp/argus-verl-report-XXXXXX.xml)"
trap 'rm -f "$report"' EXIT
ARGUS_REQUIRE_VERL=1 $PY -m pytest -m verl tests/verl --junitxml="$report" "$@"
$PY - "$report" <<'PY'
import sys
import xml.etree.ElementTree as ET

suite = ET.parse(sys.argv[1]).getroot()
suite = suite if suite.tag == "testsuite" else suite.find("testsuite")
tests, skipped = int(suite.get("tests", 0)), int(suite.get("skipped", 0))
if tests == 0 or skipped:
    sys.exit(f"FAILED: {tests} verl tests ran, {skipped} skipped: every one must run")
print(f"{tests} verl tests ran, none skipped")
PY
