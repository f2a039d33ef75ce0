#!/usr/bin/env bash
# Join a Ray cluster started by launch/ray_head.sh. Usage: launch/ray_worker.sh <head-ip>:<port>
set -euo pipefail
: "${1:?usage: launch/ray_worker.sh <head-ip>:<port>}"
export RAY_AUTH_MODE="${RAY_AUTH_MODE:-disabled}"
ray start --address="$1"
