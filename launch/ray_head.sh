#!/usr/bin/env bash
# Start the Ray head on this node; then run `ragen2-train cluster.address=auto ...` here.
# Usage: launch/ray_head.sh [port]   (workers join with launch/ray_worker.sh <head-ip>:<port>)
set -euo pipefail
PORT="${1:-6379}"
export RAY_AUTH_MODE="${RAY_AUTH_MODE:-disabled}"
ray start --head --port="$PORT" --include-dashboard=false
echo "workers: launch/ray_worker.sh $(hostname -I | awk '{print $1}'):$PORT"
