#!/usr/bin/env bash
# Helpers sourced by launch/ray_head.sh and launch/ray_worker.sh (not run on its own).
# Functions: ray_usage (print a script's header comment), ray_gpus (GPUs this node offers),
# ray_node_ip (IP advertised to other nodes), ray_common_args (the `ray start` options both
# scripts share, one per line).

# GPUs this node offers Ray: $RAY_NUM_GPUS, else the entries of $CUDA_VISIBLE_DEVICES (SLURM and
# container runtimes set it), else the GPUs nvidia-smi lists, else 0.
ray_gpus() {
  if [ -n "${RAY_NUM_GPUS:-}" ]; then
    echo "$RAY_NUM_GPUS"
  elif [ -n "${CUDA_VISIBLE_DEVICES:-}" ] && [ "$CUDA_VISIBLE_DEVICES" != "NoDevFiles" ]; then
    echo "$CUDA_VISIBLE_DEVICES" | tr ',' '\n' | grep -c .
  elif command -v nvidia-smi >/dev/null 2>&1; then
    nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true
  else
    echo 0
  fi
}

# The IP the other nodes reach this one on: $RAY_NODE_IP, else the IPv4 address of interface
# $RAY_IFNAME (the fast network, e.g. ib0), else the first of `hostname -I`.
ray_node_ip() {
  if [ -n "${RAY_NODE_IP:-}" ]; then
    echo "$RAY_NODE_IP"
  elif [ -n "${RAY_IFNAME:-}" ]; then
    ip -4 -o addr show dev "$RAY_IFNAME" 2>/dev/null | awk '{split($4, a, "/"); print a[1]; exit}'
  else
    hostname -I 2>/dev/null | awk '{print $1}'
  fi
}

# `ray start` options common to head and workers, one per line (read with mapfile).
ray_common_args() {
  local ip
  ip="$(ray_node_ip)"
  echo "--num-gpus=$(ray_gpus)"
  if [ -n "$ip" ]; then echo "--node-ip-address=$ip"; fi
  if [ -n "${RAY_NUM_CPUS:-}" ]; then echo "--num-cpus=$RAY_NUM_CPUS"; fi
  if [ -n "${RAY_TEMP_DIR:-}" ]; then echo "--temp-dir=$RAY_TEMP_DIR"; fi
  if [ -n "${RAY_OBJECT_STORE_BYTES:-}" ]; then echo "--object-store-memory=$RAY_OBJECT_STORE_BYTES"; fi
  echo "--disable-usage-stats"
  if [ -n "${RAY_START_ARGS:-}" ]; then
    local -a more
    read -r -a more <<< "$RAY_START_ARGS"
    printf '%s\n' "${more[@]}"
  fi
}

# Print the comment block at the top of script $1 (its usage and environment variables).
ray_usage() {
  awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$1"
}
