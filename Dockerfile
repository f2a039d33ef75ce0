# GPU image for cluster runs (the CPU path needs no image: `make train` / `make test`).
# vLLM 0.33 ships CUDA 13 wheels and pins torch 2.14.0; flash-attn builds from source here.
# Build: docker build -t ragen2:gpu .   Run: docker run --gpus all --shm-size 16g ragen2:gpu ragen2-train cluster=...
FROM nvidia/cuda:13.0.1-cudnn-devel-ubuntu24.04

ENV DEBIAN_FRONTEND=noninteractive PIP_NO_CACHE_DIR=1 PYTHONUNBUFFERED=1 RAY_AUTH_MODE=disabled
RUN apt-get update && apt-get install -y --no-install-recommends \
        python3 python3-venv python3-dev build-essential git ninja-build \
    && rm -rf /var/lib/apt/lists/*
RUN python3 -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH

WORKDIR /workspace/ragen2
# torch first and pinned (the version vLLM pins), then the project with its GPU extra.
RUN pip install --upgrade pip && pip install torch==2.14.0
COPY pyproject.toml README.md ./
COPY ragen2 ragen2
COPY envs envs
COPY configs configs
COPY launch launch
RUN pip install -e ".[gpu,test]"

CMD ["ragen2-train", "--help"]
