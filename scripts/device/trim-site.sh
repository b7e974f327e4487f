#!/usr/bin/env bash
# Trim a --target install of the carried wheels (argument: the folder) to what `argus up`
# (a Ray head + worker, job submission) and verl's SFT trainer need.
set -euo pipefail
site=$1
cd "$site"
rm -rf ray/jars ray/rllib ray/data ray/serve ray/train ray/tune ray/llm ray/air/tests ray/tests \
       ray/cpp
# the dashboard refuses to start without its build folder; its content is not needed
find ray/dashboard/client/build -mindepth 1 -delete
mkdir -p ray/dashboard/client/build/static
[ -f ray/dashboard/client/build/index.html ] || echo '<html></html>' > ray/dashboard/client/build/index.html
find ray -name '*.pyi' -delete
find . -name '__pycache__' -type d -prune -exec rm -rf {} +
rm -rf tests
