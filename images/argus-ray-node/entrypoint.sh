#!/usr/bin/env bash
# Entrypoint of the argus-ray-node image (seed 003 §3.4): fill in the §3.3 environment
# defaults, render the supervisord config for ARGUS_ROLE=head|worker, and run supervisord
# in the foreground. supervisord keeps the watchdog alive; the watchdog keeps Ray alive.
#
#   argus-entrypoint.sh                 render and exec supervisord -n
#   argus-entrypoint.sh --render-only   render, print the config path, exit (for tests)
set -euo pipefail

die() { echo "argus-entrypoint: $*" >&2; exit 2; }

role="${ARGUS_ROLE:-}"
case "$role" in
  head) program="argus_head_watchdog"; sub="head" ;;
  worker) program="argus_worker_watchdog"; sub="worker" ;;
  *) die "ARGUS_ROLE must be head or worker (got '${role}')" ;;
esac

# Seed 003 §3.3 defaults. Exported: supervisord passes its environment to the watchdog,
# which reads these same variables (argus/nodepool/config.py).
export ARGUS_SHARED_ROOT="${ARGUS_SHARED_ROOT:-/private}"
export ARGUS_CLUSTER_NAME="${ARGUS_CLUSTER_NAME:-argus-ray}"
export ARGUS_HEAD_IP_FILE="${ARGUS_HEAD_IP_FILE:-${ARGUS_SHARED_ROOT}/ray/discovery/${ARGUS_CLUSTER_NAME}/head.json}"
export ARGUS_RAY_PORT="${ARGUS_RAY_PORT:-6379}"
export ARGUS_DASHBOARD_PORT="${ARGUS_DASHBOARD_PORT:-8265}"
export ARGUS_TTL_S="${ARGUS_TTL_S:-60}"
export ARGUS_REFRESH_S="${ARGUS_REFRESH_S:-10}"
export ARGUS_POLL_S="${ARGUS_POLL_S:-5}"
# Empty: the watchdog detects the address (route towards the head, or the default route).
export ARGUS_NODE_IP="${ARGUS_NODE_IP:-}"
export ARGUS_WORKER_RESOURCES_KV="${ARGUS_WORKER_RESOURCES_KV:-worker_node=100}"
export ARGUS_RAY_EXTRA_ARGS="${ARGUS_RAY_EXTRA_ARGS:-}"
export ARGUS_LOG_DIR="${ARGUS_LOG_DIR:-${ARGUS_SHARED_ROOT}/common/logs}"
export ARGUS_NODE_NAME="${ARGUS_NODE_NAME:-$(hostname)}"
export ARGUS_NODE_LOG_DIR="${ARGUS_NODE_LOG_DIR:-${ARGUS_LOG_DIR}/nodes/${ARGUS_CLUSTER_NAME}/${ARGUS_NODE_NAME}}"
export RAY_USAGE_STATS_ENABLED="${RAY_USAGE_STATS_ENABLED:-0}"

# Image-level knobs (not in the seed): where supervisord keeps its socket and config, and
# the command that runs a watchdog.
run_dir="${ARGUS_SUPERVISOR_DIR:-/run/argus}"
node_command="${ARGUS_NODE_COMMAND:-argus node}"
conf="${run_dir}/supervisord.conf"

mkdir -p "$run_dir"
# The shared log directory is best effort: a missing mount must not stop the node.
sup_log="${ARGUS_NODE_LOG_DIR}/supervisord.log"
if ! mkdir -p "$ARGUS_NODE_LOG_DIR" 2>/dev/null || ! touch "$sup_log" 2>/dev/null; then
  echo "argus-entrypoint: cannot write ${ARGUS_NODE_LOG_DIR}; supervisord logs to ${run_dir}" >&2
  sup_log="${run_dir}/supervisord.log"
fi

# supervisord expands %(...)s in its config: escape % in values taken from the environment.
esc() { printf '%s' "${1//%/%%}"; }

cat >"$conf" <<CONF
; Rendered by argus-entrypoint.sh for ARGUS_ROLE=${role}; do not edit, it is rewritten
; at every container start.
[supervisord]
nodaemon=true
logfile=$(esc "$sup_log")
logfile_maxbytes=20MB
logfile_backups=3
pidfile=$(esc "$run_dir")/supervisord.pid
childlogdir=$(esc "$run_dir")

[unix_http_server]
file=$(esc "$run_dir")/supervisor.sock
chmod=0700

[rpcinterface:supervisor]
supervisor.rpcinterface_factory = supervisor.rpcinterface:make_main_rpcinterface

[supervisorctl]
serverurl=unix://$(esc "$run_dir")/supervisor.sock

[program:${program}]
command=$(esc "$node_command") ${sub}
autostart=true
; Restart whatever the exit code: the head watchdog exits non-zero when Ray dies, and a
; worker watchdog only exits when something is badly wrong.
autorestart=true
startsecs=3
startretries=20
; The watchdog stops its Ray process group on SIGTERM (grace ARGUS_STOP_GRACE_S, 15 s).
stopsignal=TERM
stopwaitsecs=40
; Watchdog decisions and Ray's output to the container's stdout (docker logs); the
; watchdog also writes them to ARGUS_NODE_LOG_DIR on the shared filesystem.
stdout_logfile=/dev/stdout
stdout_logfile_maxbytes=0
redirect_stderr=true
CONF

if [ "${1:-}" = "--render-only" ]; then
  echo "$conf"
  exit 0
fi
exec supervisord -n -c "$conf"
