#!/usr/bin/env bash
# Build .devrun/site.tar.xz: the Python packages that scripts/device/verl-on-gpu.sh needs and
# the GPU machine lacks (Ray, verl and their dependencies, Argus's own), for CPython 3.12 on
# x86-64, trimmed to fit the 64 MiB that travels. Run here, from anywhere; needs pip (with an
# index) and a python3.12 for the --target install. Wheels are kept in .whl/.
set -euo pipefail
cd "$(dirname "$0")/../.."
PY312=${PY312:-python3.12}
mkdir -p .whl .devrun
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_26_x86_64 \
  --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  --platform manylinux1_x86_64 -d .whl -r scripts/device/carry-requirements.txt
ls .whl/antlr4_python3_runtime-4.9.3-*.whl >/dev/null 2>&1 \
  || python3 -m pip wheel -q --no-deps -w .whl antlr4-python3-runtime==4.9.3
build=.devrun/site-build
rm -rf "$build"
"$PY312" -m pip install -q --no-index --no-deps --no-compile --target "$build" .whl/*.whl
bash scripts/device/trim-site.sh "$build"
tar -C "$build" -cf - . | xz -T0 -6 > .devrun/site.tar.xz
rm -rf "$build"
ls -la .devrun/site.tar.xz
