"""The cluster launch files: shell syntax, the sbatch and RayJob shapes, the Dockerfile's pins.

No SLURM, Kubernetes or Docker here: scripts are parsed (bash -n, shellcheck and hadolint when
installed), manifests loaded, pins compared with pyproject.toml; the sbatch script runs once
against stand-in ``srun`` / ``scontrol`` commands and a real local Ray head.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from tests.ports import port_clash, spare_port

ROOT = Path(__file__).resolve().parents[1]
LAUNCH = ROOT / "launch"
SCRIPTS = [LAUNCH / "setup_venv.sh", LAUNCH / "ray_common.sh", LAUNCH / "ray_head.sh",
           LAUNCH / "ray_worker.sh", LAUNCH / "slurm" / "ragen2.sbatch"]
# torch each GPU vLLM release pins (its wheel metadata) and the CUDA major version of that torch
VLLM_TORCH = {"0.33.0": ("2.14.0", 13)}


def dockerfile() -> str:
    return (ROOT / "Dockerfile").read_text()


def docker_args() -> dict[str, str]:
    return {m[1]: m[2].strip('"') for m in re.finditer(r"^ARG (\w+)=(\S+)", dockerfile(), re.M)}


def extra(name: str) -> dict[str, Requirement]:
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    reqs = meta["optional-dependencies"][name] if name != "" else meta["dependencies"]
    return {Requirement(r).name: Requirement(r) for r in reqs}


# ----------------------------------------------------------------------------- shell scripts
@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_script_parses(script):
    assert script.read_text().startswith("#!/usr/bin/env bash\n")
    proc = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


@pytest.mark.skipif(shutil.which("shellcheck") is None, reason="shellcheck not installed")
def test_shellcheck_is_clean():
    proc = subprocess.run(["shellcheck", "-x", *map(str, SCRIPTS)], capture_output=True,
                          text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout


def test_launch_scripts_are_executable():
    for s in (LAUNCH / "ray_head.sh", LAUNCH / "ray_worker.sh", LAUNCH / "slurm" / "ragen2.sbatch"):
        assert os.access(s, os.X_OK), s


def test_help_prints_the_environment_variables():
    for name, var in (("ray_head.sh", "RAY_DASHBOARD_PORT"), ("ray_worker.sh", "RAY_JOIN_TIMEOUT")):
        out = subprocess.run(["bash", str(LAUNCH / name), "--help"], capture_output=True,
                             text=True, check=True).stdout
        assert var in out and "--block" in out and "set -euo" not in out


def test_gpu_detection_order(tmp_path):
    """RAY_NUM_GPUS, else CUDA_VISIBLE_DEVICES, else nvidia-smi, else 0."""
    (tmp_path / "nvidia-smi").write_text("#!/bin/sh\necho 'GPU 0: H200 (UUID: a)'\n"
                                         "echo 'GPU 1: H200 (UUID: b)'\n")
    (tmp_path / "nvidia-smi").chmod(0o755)

    def gpus(env: dict[str, str], with_smi: bool) -> str:
        path = f"{tmp_path}:/usr/bin:/bin" if with_smi else "/usr/bin:/bin"
        cmd = f"source {LAUNCH / 'ray_common.sh'} && ray_gpus"
        return subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, check=True,
                              env={"PATH": path, **env}).stdout.strip()

    assert gpus({"RAY_NUM_GPUS": "3", "CUDA_VISIBLE_DEVICES": "0"}, True) == "3"
    assert gpus({"CUDA_VISIBLE_DEVICES": "4,5,6"}, True) == "3"
    assert gpus({}, True) == "2"
    assert gpus({}, False) == "0"


# ---------------------------------------------------------------------------------- SLURM
def sbatch_text() -> str:
    return (LAUNCH / "slurm" / "ragen2.sbatch").read_text()


def test_sbatch_directives_come_before_any_command():
    lines = sbatch_text().splitlines()
    first_cmd = next(i for i, ln in enumerate(lines[1:], 1) if ln.strip() and not ln.startswith("#"))
    directives = [i for i, ln in enumerate(lines) if ln.startswith("#SBATCH")]
    assert directives and max(directives) < first_cmd  # sbatch stops reading at the first command
    text = "\n".join(lines[i] for i in directives)
    for opt in ("--nodes=", "--gpus-per-node=", "--ntasks-per-node=1", "--job-name="):
        assert opt in text


def test_sbatch_starts_ray_waits_trains_and_stops():
    """No run: the sbatch script is only read."""
    text = sbatch_text()
    assert "launch/ray_head.sh --block" in text and "launch/ray_worker.sh --block" in text
    assert "launch/wait_for_nodes.py" in text and "trap stop_ray EXIT" in text
    lines = text.splitlines()
    i = next(i for i, ln in enumerate(lines) if ln.startswith("head_argv ragen2-train"))
    train = " ".join(lines[i:i + 3])
    assert 'cluster.address="$address"' in train and train.rstrip().endswith('"${argv[@]}" &')
    assert 'hydra.run.dir="$run_dir" trainer.resume=true' in train  # a fixed dir, resumed
    assert "cluster.device=cuda" in text


def test_sbatch_requeues_on_its_warning_signal():
    """--signal=B:USR1@T reaches the batch shell; it forwards USR1 to ragen2-train, which
    checkpoints and exits 75, and the script requeues the job (--requeue allows it)."""
    text = sbatch_text()
    directives = {ln.split()[1].split("=")[0]: ln.split()[1] for ln in text.splitlines()
                  if ln.startswith("#SBATCH")}
    assert directives["--requeue"] == "--requeue"
    assert re.fullmatch(r"--signal=B:USR1@(\d+)", directives["--signal"])
    assert int(directives["--signal"].rsplit("@", 1)[1]) >= 120
    assert directives["--open-mode"] == "--open-mode=append"  # a requeued job appends its log
    assert "trap 'forward USR1' USR1" in text and "trap 'forward TERM' TERM" in text
    assert 'kill -s USR1 "$train_pid"' in text and 'scontrol requeue "$SLURM_JOB_ID"' in text
    assert '[ "$got_signal" = USR1 ]' in text  # scancel (TERM) checkpoints but is not requeued
    from ragen2.preempt import PREEMPTED_EXIT

    assert f'"$status" -eq {PREEMPTED_EXIT}' in text
    # the job id survives a requeue, so the requeued job finds its checkpoints
    assert 'run_dir="${RAGEN2_RUN_DIR:-$PWD/outputs/slurm-${SLURM_JOB_ID:-local}}"' in text


def test_sbatch_sets_offline_caches_network_and_containers():
    """No run: the sbatch script is only read."""
    text = sbatch_text()
    for line in ('export HF_HUB_OFFLINE="${HF_HUB_OFFLINE:-1}"',
                 'export TRANSFORMERS_OFFLINE="${TRANSFORMERS_OFFLINE:-$HF_HUB_OFFLINE}"',
                 'export NCCL_SOCKET_IFNAME="${NCCL_SOCKET_IFNAME:-$RAGEN2_IFNAME}"',
                 'export GLOO_SOCKET_IFNAME="${GLOO_SOCKET_IFNAME:-$RAGEN2_IFNAME}"'):
        assert line in text, line
    assert "apptainer exec --nv" in text and "--container-image=" in text
    # every srun launch line and the driver go through the container wrapper
    for ln in text.splitlines():
        if ln.lstrip().startswith(("srun ", "RAY_NODE_IP=")) and "launch/ray_" in text:
            if "hostname" in ln or "ray_node_ip" in ln or "bash -c" in ln:
                continue  # the head's address: a host tool
            assert '"${step_opts[@]}"' in ln, ln
    body = "\n".join(ln for ln in text.splitlines() if not ln.startswith("#"))
    assert re.search(r'"\$\{wrap\[@\]\}" bash launch/ray_head.sh', body)
    assert re.search(r'"\$\{wrap\[@\]\}" bash launch/ray_worker.sh', body)
    assert "head_argv python launch/wait_for_nodes.py" in body and "head_argv ragen2-train" in body


@pytest.mark.e2e
def test_sbatch_runs_against_stand_in_slurm(tmp_path):
    """No run: a stand-in replaces ragen2-train. srun/scontrol stand-ins on one node: Ray head up, wait, train (a stand-in), Ray down."""
    bin_ = stand_in_slurm(tmp_path, scontrol="#!/usr/bin/env bash\necho localhost\n",
                          ragen2_train=f"#!/usr/bin/env bash\necho \"$@\" > {tmp_path}/train_args\n"
                                       "exit 3\n")
    for _ in range(3):  # a Ray port taken before the head bound it: again, on new ports
        ray_dir = Path(tempfile.mkdtemp(prefix="r2sb", dir="/tmp"))  # Unix sockets: short paths
        port, client_port = spare_port(), spare_port()  # another test run may hold Ray's defaults
        env = sbatch_env(bin_, ray_dir, RAY_PORT=str(port), RAY_NUM_CPUS="1",
                         RAY_START_ARGS=f"--ray-client-server-port={client_port}")
        # its own session, so whatever it leaves behind can be found (and ended) by session id
        job = subprocess.Popen(["bash", str(LAUNCH / "slurm" / "ragen2.sbatch"), "seed=3"],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               env=env, cwd=tmp_path, start_new_session=True)
        out, clash = "", False
        try:
            out, _ = job.communicate(timeout=240)
            time.sleep(2)
            left = session_pids(job.pid)
            clash = job.returncode != 3 and port_clash(out, ray_dir)
        finally:
            end_sessions([job], ray_dir)
        if not clash:
            break
    assert not clash, "a Ray port was taken on every attempt"
    assert job.returncode == 3, out  # ragen2-train's exit status comes through
    assert "ray node" in out and "1 CPU" in out, out
    assert (tmp_path / "train_args").read_text().split() == [
        f"cluster.address=127.0.0.1:{port}", "cluster.device=cuda", "cluster.backend=nccl",
        f"hydra.run.dir={ROOT}/outputs/slurm-local", "trainer.resume=true", "seed=3"]
    assert left == [], f"processes of the job still running: {left}"


@pytest.mark.e2e
@pytest.mark.parametrize("sig", ["USR1", "TERM"])
def test_sbatch_forwards_usr1_and_requeues(tmp_path, sig):
    """No run: a stand-in replaces ragen2-train. The warning signal: USR1 to the batch shell reaches ragen2-train (a stand-in that exits 75
    as the real one does after its checkpoint) and the job is requeued. TERM (scancel) is passed
    on as USR1 too, but the job is not requeued."""
    bin_ = stand_in_slurm(
        tmp_path,
        scontrol=f"#!/usr/bin/env bash\nif [ \"$1\" = requeue ]; then echo \"$@\" > "
                 f"{tmp_path}/requeued; else echo localhost; fi\n",
        ragen2_train=f"#!/usr/bin/env bash\necho \"$@\" > {tmp_path}/train_args\n"
                     f"trap 'echo USR1 > {tmp_path}/got; exit 75' USR1\n"
                     f"touch {tmp_path}/started\nwhile :; do sleep 0.1; done\n")
    for _ in range(3):  # a Ray port taken before the head bound it: again, on new ports
        ray_dir = Path(tempfile.mkdtemp(prefix="r2sq", dir="/tmp"))
        port, client_port = spare_port(), spare_port()
        env = sbatch_env(bin_, ray_dir, drop=("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"),
                         SLURM_JOB_ID="4242", SLURM_RESTART_COUNT="1",
                         RAGEN2_RUN_DIR=str(tmp_path / "run"), RAY_PORT=str(port),
                         RAY_NUM_CPUS="1", RAY_START_ARGS=f"--ray-client-server-port={client_port}")
        job = subprocess.Popen(["bash", str(LAUNCH / "slurm" / "ragen2.sbatch"), "seed=3"],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               env=env, cwd=tmp_path, start_new_session=True)
        clash = False
        try:
            deadline = time.monotonic() + 240
            while not (tmp_path / "started").exists():
                if job.poll() is not None:  # it ended before ragen2-train started
                    early = job.stdout.read()
                    clash = port_clash(early, ray_dir)
                    assert clash, early
                    break
                assert time.monotonic() < deadline, "ragen2-train never started"
                time.sleep(0.2)
            else:
                # USR1: what SLURM does at --signal=B:USR1@T
                job.send_signal(getattr(signal, f"SIG{sig}"))
                out, _ = job.communicate(timeout=120)
                time.sleep(2)
                left = session_pids(job.pid)
        finally:
            end_sessions([job], ray_dir)
        if not clash:
            break
    assert not clash, "a Ray port was taken on every attempt"
    assert (tmp_path / "got").read_text().strip() == "USR1"  # the trainer always gets USR1
    assert f"ragen2-train exited with 75 (after SIG{sig})" in out, out
    if sig == "USR1":
        assert job.returncode == 0, out
        assert (tmp_path / "requeued").read_text().split() == ["requeue", "4242"], out
        assert "restart 2" in out, out
    else:
        assert job.returncode == 75 and not (tmp_path / "requeued").exists(), out
    args = (tmp_path / "train_args").read_text().split()
    assert f"hydra.run.dir={tmp_path / 'run'}" in args and "trainer.resume=true" in args
    assert left == [], f"processes of the job still running: {left}"


def session_pids(sid: int) -> list[int]:
    """Processes of session ``sid`` (a job started with start_new_session=True)."""
    ps = subprocess.run(["ps", "-eo", "pid=,sid="], capture_output=True, text=True).stdout
    return [int(p) for p, s in (ln.split() for ln in ps.splitlines()) if int(s) == sid]


#: stand-in srun: drop srun's options, then become the command (so SIGTERM reaches `ray start --block`)
_SRUN = ("#!/usr/bin/env bash\nwhile [[ $# -gt 0 && $1 == -* ]]; do\n"
         "  case $1 in -w) shift 2 ;; *) shift ;; esac\ndone\nexec \"$@\"\n")


def stand_in_slurm(tmp_path: Path, *, scontrol: str, ragen2_train: str) -> Path:
    """A bin directory of executable stand-ins for one node: srun, hostname (127.0.0.1) and the
    given ``scontrol`` and ``ragen2-train`` script bodies."""
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    stubs = {"scontrol": scontrol, "srun": _SRUN, "hostname": "#!/usr/bin/env bash\necho 127.0.0.1\n",
             "ragen2-train": ragen2_train}
    for name, body in stubs.items():
        (bin_ / name).write_text(body)
        (bin_ / name).chmod(0o755)
    return bin_


def sbatch_env(bin_: Path, ray_dir: Path, drop: tuple[str, ...] = (), **extra: str) -> dict[str, str]:
    """The sbatch script's environment on the stand-in node (``extra`` on top), without the
    variables of a surrounding Ray, GPU allocation or SLURM job (and ``drop``)."""
    env = {**os.environ, "PATH": f"{bin_}:{Path(sys.executable).parent}:{os.environ['PATH']}",
           "SLURM_JOB_NODELIST": "localhost", "SLURM_SUBMIT_DIR": str(ROOT),
           "RAY_INCLUDE_DASHBOARD": "false", "RAY_TEMP_DIR": str(ray_dir),
           "RAGEN2_JOIN_TIMEOUT": "120", **extra}
    for k in ("RAY_ADDRESS", "CUDA_VISIBLE_DEVICES", "SLURM_GPUS_PER_NODE", "SLURM_CPUS_PER_TASK",
              *drop):
        env.pop(k, None)
    return env


def end_sessions(jobs: list[subprocess.Popen], ray_dir: Path) -> None:
    """SIGKILL whatever the jobs' sessions left running; remove the Ray temp dir."""
    for job in jobs:
        for pid in session_pids(job.pid):
            os.kill(pid, signal.SIGKILL)
    shutil.rmtree(ray_dir, ignore_errors=True)


# -------------------------------------------------------------------------------- KubeRay
def manifests() -> dict[str, dict]:
    docs = yaml.safe_load_all((LAUNCH / "kuberay" / "rayjob.yaml").read_text())
    return {d["kind"]: d for d in docs}


def rayjob() -> dict:
    return manifests()["RayJob"]


def test_shared_volume_reaches_every_pod():
    """Rank 0 (a GPU worker) writes checkpoints; all ranks read the cache: one RWX volume."""
    pvc = manifests()["PersistentVolumeClaim"]
    assert pvc["apiVersion"] == "v1" and pvc["spec"]["accessModes"] == ["ReadWriteMany"]
    cluster = rayjob()["spec"]["rayClusterSpec"]
    pods = [cluster["headGroupSpec"]] + cluster["workerGroupSpecs"]
    for group in pods:
        pod = group["template"]["spec"]
        claims = {v["name"]: v.get("persistentVolumeClaim", {}).get("claimName")
                  for v in pod["volumes"]}
        mounts = {m["name"]: m["mountPath"] for m in pod["containers"][0]["volumeMounts"]}
        assert claims["shared"] == pvc["metadata"]["name"] and mounts["shared"] == "/shared"
    env = yaml.safe_load(rayjob()["spec"]["runtimeEnvYAML"])["env_vars"]
    assert env["RAGEN2_CACHE"].startswith("/shared/") and env["HF_HOME"].startswith("/shared/")
    assert "hydra.run.dir=/shared/" in rayjob()["spec"]["entrypoint"]


def test_rayjob_shape():
    """No run: the RayJob manifest is only read."""
    job = rayjob()
    assert job["apiVersion"] == "ray.io/v1" and job["kind"] == "RayJob"
    spec = job["spec"]
    assert spec["entrypoint"].startswith("ragen2-train ")
    assert "cluster.address=auto" in spec["entrypoint"]
    cluster = spec["rayClusterSpec"]
    head = cluster["headGroupSpec"]["template"]["spec"]["containers"][0]
    assert "nvidia.com/gpu" not in head["resources"].get("limits", {})
    (gpu,) = cluster["workerGroupSpecs"]
    worker = gpu["template"]["spec"]["containers"][0]
    n = worker["resources"]["limits"]["nvidia.com/gpu"]
    assert int(n) > 0 and gpu["rayStartParams"]["num-gpus"] == n
    assert worker["resources"]["requests"]["nvidia.com/gpu"] == n
    assert {head["image"], worker["image"]} == {"ragen2:latest"}
    assert cluster["rayVersion"] == docker_args()["RAY_VERSION"]


def test_rayjob_entrypoint_keys_and_presets_exist():
    from ragen2.compose import check_override_keys

    overrides = rayjob()["spec"]["entrypoint"].split()[1:]
    check_override_keys([o for o in overrides if not o.startswith(("hydra.", "+"))])
    for o in overrides:
        group, _, value = o.partition("=")
        group = group.lstrip("+")
        if "." not in group:  # a preset: configs/<group>/<value>.yaml
            assert (ROOT / "configs" / group / f"{value}.yaml").exists(), o
    world = next(int(o.split("=")[1]) for o in overrides if o.startswith("cluster.learner_world_size"))
    gpus = sum(int(g["replicas"]) * int(g["rayStartParams"]["num-gpus"])
               for g in rayjob()["spec"]["rayClusterSpec"]["workerGroupSpecs"])
    assert world <= gpus  # colocated: one GPU per learner rank


# --------------------------------------------------------------------------------- Docker
def test_dockerfile_base_is_a_pinned_cuda_devel_image():
    froms = re.findall(r"^FROM\s+(\S+)", dockerfile(), re.M)
    assert len(froms) == 1
    m = re.fullmatch(r"nvidia/cuda:(\d+)\.(\d+)\.(\d+)-(?:cudnn-)?devel-ubuntu\d+\.\d+", froms[0])
    assert m, f"FROM {froms[0]}: want nvidia/cuda:X.Y.Z-devel-ubuntuNN.NN (a pinned tag, never latest)"
    vllm = docker_args()["VLLM_VERSION"]
    assert int(m[1]) == VLLM_TORCH[vllm][1], "nvcc must match torch's CUDA major to build flash-attn"


def test_dockerfile_pins_match_pyproject():
    args = docker_args()
    gpu = extra("gpu")
    assert gpu["vllm"].specifier == SpecifierSet(f"=={args['VLLM_VERSION']}")
    assert args["TORCH_VERSION"] == VLLM_TORCH[args["VLLM_VERSION"]][0]
    assert Version(args["FLASH_ATTN_VERSION"]) in extra("flash")["flash-attn"].specifier
    # the gpu extra installs without building anything: flash-attn (sdists only, compiled
    # against the installed torch with --no-build-isolation) is the optional `flash` extra
    assert "flash-attn" not in gpu
    # the transformers range the image resolves with is the project's own
    tf = re.search(r'"transformers([^"]+)"', dockerfile())[1]
    project_tf = extra("")["transformers"].specifier
    assert SpecifierSet(tf) == project_tf
    both = project_tf & SpecifierSet(">=5.16.1,<5.21")  # vllm 0.33's own range
    assert any(Version(v) in both for v in ("5.16.1", "5.17.0", "5.18.0", "5.19.0"))


def test_dockerfile_installs_are_pinned_and_torch_is_frozen():
    text = dockerfile()
    steps = re.split(r"^RUN ", text, flags=re.M)
    vllm_step = next(i for i, s in enumerate(steps) if '"vllm==' in s)
    assert 'torch==${TORCH_VERSION}' in steps[vllm_step]
    constraint = text.index("ENV PIP_CONSTRAINT=")
    assert text.index('"flash-attn==') > constraint
    assert text.index("pip install --no-cache-dir -e") > constraint
    assert "--no-build-isolation" in text and "FLASH_ATTENTION_FORCE_BUILD=TRUE" in text
    for req in re.findall(r'pip install[^\n]*(?:\\\n[^\n]*)*', text):
        for spec in re.findall(r'"([A-Za-z][\w.\[\],-]*[^"]*)"', req):
            if not spec.startswith((".", "/")):
                assert re.search(r"[=<>]=?", spec), f"unpinned pip requirement {spec!r}"


def test_dockerfile_runs_as_a_user_with_caches_and_a_command():
    """No run: the Dockerfile is only read."""
    text = dockerfile()
    user = re.findall(r"^USER\s+(\S+)", text, re.M)
    assert user and user[-1] not in ("root", "0")
    assert not re.search(r"^ENTRYPOINT", text, re.M)  # KubeRay replaces the command
    assert re.search(r"^CMD \[\"ragen2-train\"", text, re.M)
    assert "HF_HOME=" in text and "RAGEN2_CACHE=" in text


def test_dockerignore_keeps_sources_and_drops_state():
    ignored = {ln.strip() for ln in (ROOT / ".dockerignore").read_text().splitlines()
               if ln.strip() and not ln.startswith("#")}
    for p in (".venv", ".git", ".cache", "outputs", "multirun"):
        assert p in ignored
    for p in ("ragen2", "configs", "envs", "launch", "pyproject.toml", "README.md"):
        assert p not in ignored


def test_flash_attn_is_an_opt_in_build_argument():
    """The default image builds nothing: flash-attn (compiled against CUDA 13, which
    flash-attention does not build for yet: #2064, #1815) only with WITH_FLASH_ATTN=1. The two
    RUN steps' shell logic runs here with `pip` and `python` stubbed out."""
    assert docker_args()["WITH_FLASH_ATTN"] == "0"
    steps = re.split(r"^RUN ", dockerfile(), flags=re.M)
    flash = next(s for s in steps if '"flash-attn==' in s)
    project = next(s for s in steps if "pip install --no-cache-dir -e" in s)

    def run(step: str, value: str) -> str:
        body = step.split("\n\n")[0].split("\nUSER")[0]
        script = ("pip() { echo \"pip $*\"; }; python() { :; }; chown() { :; }\n"
                  f"WITH_FLASH_ATTN={value} FLASH_ATTN_VERSION=2.8.3.post2 MAX_JOBS=1\n" + body)
        out = subprocess.run(["bash", "-c", script], capture_output=True, text=True)
        assert out.returncode == 0, out.stderr
        return out.stdout

    assert "flash-attn" not in run(flash, "0").replace("flash-attn: not built", "")
    assert 'pip install --no-cache-dir --no-build-isolation flash-attn==2.8.3.post2' in run(flash, "1")
    assert "-e .[gpu,lora,test]" in run(project, "0")
    assert "-e .[gpu,lora,test,flash]" in run(project, "1")


HADOLINT = shutil.which("hadolint") or str(Path(sys.executable).with_name("hadolint"))


@pytest.mark.skipif(not Path(HADOLINT).exists(), reason="hadolint not installed")
def test_hadolint_is_clean():
    proc = subprocess.run([HADOLINT, str(ROOT / "Dockerfile")], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout

