#!/usr/bin/env bash
# Join this node to a Ray cluster started by launch/ray_head.sh.
#
# Usage: launch/ray_worker.sh [--block] HEAD_IP:PORT [-- EXTRA_RAY_START_ARGS...]
#   (or set RAY_HEAD_ADDRESS instead of HEAD_IP:PORT)
#   --block   stay in the foreground until Ray stops (srun, containers, systemd)
# The head may still be starting: joining is retried every 5 s for RAY_JOIN_TIMEOUT seconds.
#
# Environment (all optional):
#   RAY_HEAD_ADDRESS        HEAD_IP:PORT when not given as an argument
#   RAY_JOIN_TIMEOUT        seconds to keep retrying the join (default 300)
#   RAY_NUM_GPUS            GPUs this node offers (default: $CUDA_VISIBLE_DEVICES, else nvidia-smi -L, else 0)
#   RAY_NUM_CPUS            CPUs this node offers (default: Ray counts them)
#   RAY_NODE_IP             IP advertised to the other nodes (default: the IPv4 address of
#                           RAY_IFNAME, else the first of `hostname -I`)
#   RAY_IFNAME              the fast network's interface (ib0, eth1, ...): where RAY_NODE_IP comes from
#   RAY_TEMP_DIR            Ray's session and log directory (default: Ray's, /tmp/ray)
#   RAY_OBJECT_STORE_BYTES  object store size in bytes (default: Ray's, 30% of memory)
#   RAY_AUTH_MODE           default "disabled" (must match the head)
#   RAY_START_ARGS          more `ray start` options, space-separated (e.g. --resources=...)
# Ray's workers on this node inherit this shell's environment: export the model and cache
# variables before starting Ray (HF_HOME and RAGEN2_CACHE on shared storage, HF_HUB_OFFLINE=1 and
# TRANSFORMERS_OFFLINE=1 where the model is pre-downloaded, NCCL_SOCKET_IFNAME and
# GLOO_SOCKET_IFNAME for the interface the ranks talk on).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source-path=SCRIPTDIR source=ray_common.sh
source "$here/ray_common.sh"

address="${RAY_HEAD_ADDRESS:-}"
block=()
extra=()
while [ $# -gt 0 ]; do
  case "$1" in
    --block) block=(--block); shift ;;
    --) shift; extra=("$@"); break ;;
    -h|--help) ray_usage "$0"; exit 0 ;;
    -*) echo "ray_worker.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
    *) address="$1"; shift ;;
  esac
done
: "${address:?usage: launch/ray_worker.sh [--block] HEAD_IP:PORT (or set RAY_HEAD_ADDRESS)}"

export RAY_AUTH_MODE="${RAY_AUTH_MODE:-disabled}"
mapfile -t common < <(ray_common_args)
deadline=$(( $(date +%s) + ${RAY_JOIN_TIMEOUT:-300} ))
until ray start --address="$address" "${common[@]}" "${block[@]}" "${extra[@]}"; do
  if [ "$(date +%s)" -ge "$deadline" ]; then
    echo "ray_worker.sh: could not join $address within ${RAY_JOIN_TIMEOUT:-300} s" >&2
    exit 1
  fi
  echo "ray_worker.sh: head $address not ready, retrying in 5 s" >&2
  sleep 5
done
