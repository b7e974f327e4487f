#!/usr/bin/env bash
# Real verl (0.9.1) SFT through Argus on a GPU machine: `argus up --gpus 1`, a tiny model and
# data made locally (argus.examples.tiny_lm), one SFT task submitted with the `argus` CLI and
# followed to its end, then `argus up` stopped by its PID. See scripts/device/README.md for
# how to build the carried packages (.devrun/site.tar.xz) and how to run it.
#
# Run from the repository root. Environment:
#   PY        the interpreter (default python3: the one that holds torch)
#   OUT       where evidence goes (default ./.devrun/out); at most 8 files are written
#   SITE_TAR  the carried packages (default .devrun/site.tar.xz); SITE=dir to use an
#             already unpacked tree instead (then nothing is unpacked)
#   DEVICE    verl's trainer.device (default cuda; cpu runs the same flow without a GPU)
#   STEPS     SFT steps (default 8)   DEADLINE_S  how long to follow the task (default 300)
#   PORT      the API's port (default 8080)   TASKS  SFT tasks submitted at once (default 1)
set -uo pipefail
cd "$(dirname "$0")/../.."
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 \
       WANDB_MODE=disabled TOKENIZERS_PARALLELISM=false RAY_USAGE_STATS_ENABLED=0
PY=${PY:-python3}
OUT=${OUT:-$PWD/.devrun/out}
DEVICE=${DEVICE:-cuda}
STEPS=${STEPS:-8}
DEADLINE_S=${DEADLINE_S:-300}
PORT=${PORT:-8080}
mkdir -p "$OUT"
LOG=$OUT/run.log
exec > >(tee -a "$LOG") 2>&1
t0=$(date +%s)
say() { echo "[$(( $(date +%s) - t0 ))s] $*"; }

# 1. The carried packages: unpacked to a folder that a .pth file puts on sys.path (not
# PYTHONPATH: a Ray job's runtime_env replaces PYTHONPATH, and the job's driver and verl's
# workers must import Ray, verl and Argus too). This checkout goes on sys.path the same way.
if [ -z "${SITE:-}" ]; then
  SITE=/tmp/site
  rm -rf "$SITE" && mkdir -p "$SITE"
  tar -xJf "${SITE_TAR:-.devrun/site.tar.xz}" -C "$SITE" 2>/dev/null \
    || "$PY" -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' \
         "${SITE_TAR:-.devrun/site.tar.xz}" "$SITE" \
    || { say "cannot unpack the carried packages"; exit 1; }
fi
PURELIB=$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
echo "$SITE" > "$PURELIB/zz-carried-site.pth"
echo "$PWD" > "$PURELIB/zz-argus-checkout.pth"
PY=$("$PY" -c 'import sys; print(sys.executable)')
# `ray` for Argus's node watchdogs (`ray start`): the carried Ray, run by this interpreter.
mkdir -p /tmp/argus-bin
printf '#!/bin/sh\nexec %s -m ray.scripts.scripts "$@"\n' "$PY" > /tmp/argus-bin/ray
chmod +x /tmp/argus-bin/ray
export PATH=/tmp/argus-bin:$PATH ARGUS_RAY_BIN=/tmp/argus-bin/ray
argus() { "$PY" -m argus "$@"; }
say "unpacked; versions:"
"$PY" - <<'EOF'
import sys, importlib
print("python", sys.version.split()[0], sys.executable)
for m in ("torch", "ray", "verl", "transformers", "tensordict", "litestar", "msgspec", "hydra", "omegaconf"):
    try:
        print(f"  {m} {importlib.import_module(m).__version__}")
    except Exception as e:  # noqa: BLE001
        print(f"  {m}: {type(e).__name__}: {e}")
import torch
print("  cuda available:", torch.cuda.is_available(),
      torch.cuda.get_device_name(0) if torch.cuda.is_available() else "")
EOF
command -v nvidia-smi >/dev/null && nvidia-smi

# 2. argus up, in the background; stopped by its PID whatever happens.
DATA=.argus
rm -rf "$DATA"
UP_PID=
SMI_PID=
stop_all() {
  [ -n "$SMI_PID" ] && kill "$SMI_PID" 2>/dev/null
  if [ -n "$UP_PID" ] && kill -0 "$UP_PID" 2>/dev/null; then
    say "stopping argus up (pid $UP_PID)"
    kill -TERM "$UP_PID"
    for _ in $(seq 1 40); do kill -0 "$UP_PID" 2>/dev/null || break; sleep 1; done
    kill -0 "$UP_PID" 2>/dev/null && { say "argus up still there after 40 s: SIGKILL"; kill -KILL "$UP_PID"; }
    wait "$UP_PID" 2>/dev/null
    say "argus up stopped"
  fi
  UP_PID=
}
trap stop_all EXIT
trap 'exit 130' INT TERM
say "argus up --gpus 1 --port $PORT"
"$PY" -m argus up --gpus 1 --port "$PORT" > "$OUT/up.log" 2>&1 &
UP_PID=$!
for _ in $(seq 1 150); do
  grep -q "cluster ready" "$OUT/up.log" && break
  kill -0 "$UP_PID" 2>/dev/null || { say "argus up exited"; tail -50 "$OUT/up.log"; exit 1; }
  sleep 1
done
grep -q "cluster ready" "$OUT/up.log" || { say "cluster not ready in 150 s"; tail -50 "$OUT/up.log"; exit 1; }
say "$(grep 'worker joined' "$OUT/up.log")"
export ARGUS_URL=http://127.0.0.1:$PORT ARGUS_TOKEN
ARGUS_TOKEN=$(cat "$DATA/admin.token")

# 3. A user, and a tiny model and data in their home.
ALICE=$(argus users create alice --name Alice | awk '/token \(shown once\)/ {print $NF}')
[ -n "$ALICE" ] || { say "no token for alice"; exit 1; }
HOME_A=$DATA/shared/users/alice
"$PY" -m argus.examples.tiny_lm "$HOME_A/models/tiny" "$HOME_A/datasets/tiny" >/dev/null || exit 1
ARGUS_TOKEN=$ALICE
if command -v nvidia-smi >/dev/null; then
  nvidia-smi --query-gpu=timestamp,name,utilization.gpu,memory.used,memory.total --format=csv -l 2 \
    > "$OUT/nvidia-smi.csv" 2>&1 &
  SMI_PID=$!
  ( while sleep 3; do nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv,noheader; done ) \
    >> "$OUT/nvidia-smi.csv" 2>&1 &
  SMI_PID="$SMI_PID $!"
fi

# 4. SFT tasks: TASKS of them submitted at once (default 1; with 2 on one GPU the second
# waits until the first has given its GPU back: a gang is admitted only when it fits), each
# followed to its end (bounded), then the evidence. Each override is one Hydra override,
# after those Argus generates.
write_spec() {  # write_spec NAME OVERRIDE...
  local name=$1; shift
  {
    echo "name: $name"
    cat <<EOF
workload: sft
nnodes: 1
n_gpus_per_node: 1
model_id: \$HOME/models/tiny
train_file: \$HOME/datasets/tiny/train.parquet
val_file: \$HOME/datasets/tiny/val.parquet
train_batch_size: 4
micro_batch_size_per_gpu: 2
total_epochs: 2
total_training_steps: $STEPS
test_freq: 4
save_freq: $STEPS
extra_overrides:
EOF
    for o in "$@"; do echo "  - \"$o\""; done
  } > "$DATA/$name.yaml"
  cat "$DATA/$name.yaml"
  argus submit --validate "$DATA/$name.yaml"
}
STATE=
collect() {  # collect TASK NAME: follow it to its end, then its evidence; sets STATE
  local task=$1 name=$2
  echo "#### $task ($name)" >> "$OUT/events.txt"
  timeout "$DEADLINE_S" "$PY" -m argus watch "$task" >> "$OUT/events.txt" 2>&1
  say "argus watch $task exited $?"
  {
    echo "#### $task ($name)"
    echo "## argus tasks"; argus tasks
    echo; echo "## argus cluster"; argus cluster
    echo; echo "## argus show $task"; argus show "$task"
    echo; echo "## argus spec $task"; argus spec "$task"
    echo; echo "## argus files ls jobs/$task--a01"; argus files ls "jobs/$task--a01"
    echo; echo "## argus replay explain $task"; argus replay explain "$task"
    echo; echo "## argus replay verify"; argus replay verify
    echo
  } >> "$OUT/task.txt" 2>&1
  { echo "#### $task ($name)"; argus logs "$task" -n 3000; } >> "$OUT/driver.log" 2>&1
  say "the step lines of its driver log:"
  argus logs "$task" -n 3000 2>&1 | grep -E "step:|Final validation|Total time|Error|error" | grep -v Warning | tail -30
  { echo "#### $task ($name)"; cat "$HOME_A/jobs/$task--a01/metrics.jsonl"; } >> "$OUT/metrics.jsonl" 2>&1
  STATE=$(argus show "$task" --json 2>/dev/null | "$PY" -c 'import json,sys; print(json.load(sys.stdin)["state"])' 2>/dev/null)
  say "task $task ended: ${STATE:-unknown}"
}
run_sft() {  # run_sft NAME OVERRIDE...: TASKS tasks of this spec, submitted at once, then followed
  local name=$1 task ids=() ok=1
  write_spec "$@"
  for _ in $(seq 1 "${TASKS:-1}"); do
    task=$(argus submit "$DATA/$name.yaml") || { say "submit refused"; STATE=; return 1; }
    say "submitted $task ($name)"
    ids+=("$task")
  done
  for task in "${ids[@]}"; do
    collect "$task" "$name"
    [ "$STATE" = SUCCEEDED ] || ok=0
  done
  [ "$ok" = 1 ] || STATE=FAILED
}
# Neither flash-attn nor vLLM here: PyTorch's SDPA attention, padded (not packed) batches,
# no torch.compile. verl's trainer.device defaults to cuda.
run_sft "tiny-sft-padded-$DEVICE" "+model.override_config.attn_implementation=sdpa" \
  "model.use_remove_padding=False" "engine.use_torch_compile=False" "trainer.device=$DEVICE"
if [ "$STATE" != SUCCEEDED ] && [ "${FALLBACK:-1}" = 1 ] && [ $(( $(date +%s) - t0 )) -lt "${FALLBACK_BEFORE_S:-240}" ]; then
  say "the first variant did not succeed; again with verl's defaults for padding and compile (packed batches)"
  run_sft "tiny-sft-packed-$DEVICE" "+model.override_config.attn_implementation=sdpa" "trainer.device=$DEVICE"
fi
cat "$OUT/events.txt"
[ -n "$SMI_PID" ] && kill $SMI_PID 2>/dev/null; SMI_PID=
FINAL=$STATE
stop_all
# the Ray nodes' own logs, in case a task failed
tail -n 80 "$DATA"/logs/*.log > "$OUT/node-logs.txt" 2>&1
say "done: last task ${FINAL:-unknown}"
[ "$FINAL" = SUCCEEDED ]
