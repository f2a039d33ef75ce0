#!/usr/bin/env bash
# Start the Ray head on this node. Then train on this node with
#   ragen2-train cluster.address=auto cluster=gpu_8 ...
# or from anywhere with `ray job submit --address http://<head-ip>:<dashboard-port> ...`
# (launch/README.md). Other nodes join with launch/ray_worker.sh <head-ip>:<port>.
#
# Usage: launch/ray_head.sh [--block] [--port PORT] [PORT] [-- EXTRA_RAY_START_ARGS...]
#   --block   stay in the foreground until Ray stops (srun, containers, systemd)
#
# Environment (all optional):
#   RAY_PORT                GCS port the workers join on (default 6379; --port wins)
#   RAY_INCLUDE_DASHBOARD   true (default) | false; `ray job submit` needs it and `pip install "ray[default]"`
#   RAY_DASHBOARD_PORT      dashboard and job-submission port (default 8265)
#   RAY_DASHBOARD_HOST      address the dashboard binds (default 0.0.0.0: reachable for `ray job submit`)
#   RAY_NUM_GPUS            GPUs this node offers (default: $CUDA_VISIBLE_DEVICES, else nvidia-smi -L, else 0)
#   RAY_NUM_CPUS            CPUs this node offers (default: Ray counts them)
#   RAY_NODE_IP             IP advertised to the other nodes (default: the IPv4 address of
#                           RAY_IFNAME, else the first of `hostname -I`)
#   RAY_IFNAME              the fast network's interface (ib0, eth1, ...): where RAY_NODE_IP comes from
#   RAY_TEMP_DIR            Ray's session and log directory (default: Ray's, /tmp/ray)
#   RAY_OBJECT_STORE_BYTES  object store size in bytes (default: Ray's, 30% of memory)
#   RAY_AUTH_MODE           default "disabled" (token auth off inside a trusted cluster network)
#   RAY_START_ARGS          more `ray start` options, space-separated (e.g. --resources=...)
# Ray's workers on this node inherit this shell's environment: export the model and cache
# variables before starting Ray (HF_HOME and RAGEN2_CACHE on shared storage, HF_HUB_OFFLINE=1 and
# TRANSFORMERS_OFFLINE=1 where the model is pre-downloaded, NCCL_SOCKET_IFNAME and
# GLOO_SOCKET_IFNAME for the interface the ranks talk on).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source-path=SCRIPTDIR source=ray_common.sh
source "$here/ray_common.sh"

port="${RAY_PORT:-6379}"
block=()
extra=()
while [ $# -gt 0 ]; do
  case "$1" in
    --block) block=(--block); shift ;;
    --port) port="${2:?--port needs a value}"; shift 2 ;;
    --port=*) port="${1#--port=}"; shift ;;
    --) shift; extra=("$@"); break ;;
    -h|--help) ray_usage "$0"; exit 0 ;;
    [0-9]*) port="$1"; shift ;;
    *) echo "ray_head.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done

export RAY_AUTH_MODE="${RAY_AUTH_MODE:-disabled}"
mapfile -t common < <(ray_common_args)
ip="$(ray_node_ip)"
echo "ray head on ${ip:-this node}:$port with $(ray_gpus) GPUs; workers join with:" >&2
echo "  launch/ray_worker.sh ${ip:-<head-ip>}:$port" >&2
echo "jobs: ray job submit --address http://${ip:-<head-ip>}:${RAY_DASHBOARD_PORT:-8265} ..." >&2
exec ray start --head --port="$port" \
  --include-dashboard="${RAY_INCLUDE_DASHBOARD:-true}" --dashboard-host="${RAY_DASHBOARD_HOST:-0.0.0.0}" \
  --dashboard-port="${RAY_DASHBOARD_PORT:-8265}" \
  "${common[@]}" "${block[@]}" "${extra[@]}"
