#!/usr/bin/env bash
# The pure-Python wheels launch/gpu_check.py needs on a bare CUDA machine (one with torch and
# transformers but none of ragen2's other dependencies), built here and carried with the checkout:
#
#     bash launch/gpu_check_wheels.sh WHEEL_DIR      # then: bash launch/gpu_check.sh OUT WHEEL_DIR
#
# omegaconf (ragen2.config), its antlr4 runtime (an sdist: built into a wheel here), gymnasium
# (the env registry ragen2.config validates against) with farama-notifications and cloudpickle. All
# are pure Python (~0.7 MB together); versions as in the project's own venv.
set -euo pipefail
DIR="${1:?usage: gpu_check_wheels.sh WHEEL_DIR}"
PY="${PYTHON:-python3}"
mkdir -p "$DIR"
"$PY" -m pip download -q --no-deps --only-binary=:all: -d "$DIR" \
  omegaconf==2.3.1 gymnasium==1.4.0 farama-notifications==0.0.6 cloudpickle==3.1.3
"$PY" -m pip wheel -q --no-deps -w "$DIR" antlr4-python3-runtime==4.9.3
ls -l "$DIR"
