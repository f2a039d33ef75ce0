"""Run untrusted Python (model-written code) in a throw-away, resource-limited process.

Standard library only. The public API is small:

* :class:`SandboxLimits`: wall clock, CPU, address space, processes, file size and output caps.
* :func:`run_python`: run a source text, either as a program or, with ``function`` and ``calls``,
  by loading it and calling ``function(*args)`` once per entry of ``calls``.
* :class:`SandboxResult`: ``status`` (``ok`` | ``timeout`` | ``memory`` | ``output_limit`` |
  ``crashed`` | ``error``), ``returncode``, capped ``stdout``/``stderr``, ``wall_s`` and ``payload``.
* :func:`values_match`: the parent-side comparison of a returned value with an expected one.
* :func:`sandbox_capabilities`: which isolation layers are active here (probed once, cached).

Verdicts are never decided by the untrusted process. The child only loads the source and calls
the function on the given inputs; each returned value is sent back as the ``repr`` of plain literal
data (None, bool, int, float, str, list, tuple, dict, set; exact types, no subclasses) on a line
that starts with a random per-run marker. The parent decodes it with :func:`ast.literal_eval` and
compares it with the expected values, which the child never sees. A program that prints fake
result lines can at best report *values*, which are then checked; one that calls ``os._exit(0)``
before the results produces no payload. Expected outputs therefore have to be computed.

Layers (each probed when first needed; what is active is reported by :func:`sandbox_capabilities`)

1. **Separate process, own session.** ``subprocess.Popen`` with ``start_new_session=True``,
   ``stdin=DEVNULL``, ``close_fds``, a minimal environment (``PATH``, ``LANG``, ``HOME``,
   ``TMPDIR``; nothing of the parent's), and no ``preexec_fn`` (safe in a multithreaded caller): it
   executes a small trusted launcher, ``python -I -S -c <launcher>``, which does the setup, forks,
   and ``execve``\\ s the runner (``python -I -S -B -c <runner>``) in the child. The launcher stays
   as the child's parent, reaps it and reports its exit status and CPU time on a private pipe.
2. **Namespaces** (``unshare`` from util-linux): a new network namespace (only an unconfigured
   loopback: no route to the host's servers, 127.0.0.1 included), a pid namespace (``--fork
   --kill-child --mount-proc``: the launcher is its init; when it dies the kernel kills every
   process in it, so nothing survives the run), and a mount namespace in which every existing mount
   is remounted read-only, fresh size-capped ``tmpfs`` are mounted over ``/tmp``, ``/var/tmp`` and
   ``/dev/shm`` (the working directory lives there; everything written is thrown away), and empty
   read-only ``tmpfs`` hide the ``ragen2_envs`` package (and its source checkout, which holds the
   reference solutions), ``site-packages``, ``/root``, ``/home`` and ``$HOME``. The interpreter's
   prefix is bind-mounted read-only at ``/tmp/.python`` so an unprivileged uid can run it even when
   it lives under a private home directory. When not root, a user namespace (``--user
   --map-root-user``) makes this possible; the launcher then drops every capability from the
   bounding set, so the runner has none after ``execve``.
3. **Unprivileged uid** (when root): the child switches to a uid/gid of its own,
   ``2**30 + (pid & 0x3FFFFF) * 256 + n`` (a fresh one per call, not used by any account; 65534
   ``nobody`` when the uid map does not cover that range). So the code cannot write root-owned
   paths, cannot signal or ptrace the trainer or another sandbox, and ``RLIMIT_NPROC`` (which root
   ignores) counts exactly this run's processes. ``PR_SET_NO_NEW_PRIVS`` is set, so set-uid programs
   cannot regain privileges.
4. **rlimits** (always): ``RLIMIT_AS`` (memory), ``RLIMIT_CPU`` (soft ``cpu_s``, hard one second
   later), ``RLIMIT_FSIZE``, ``RLIMIT_NPROC``, ``RLIMIT_CORE=0``, ``RLIMIT_NOFILE=64``. Without a
   uid of its own (non-root without a user namespace), ``RLIMIT_NPROC`` counts all of the user's
   processes, so it is set to the user's current count plus ``max_processes`` (racy when several
   sandboxes start at once: a documented weakness of that fallback).
5. **pids cgroup** (cgroup v1 ``pids`` controller, when writable, i.e. as root): each run gets
   ``/sys/fs/cgroup/pids/ragen2-sandbox/<run>`` with ``pids.max = max_processes + 1`` (the launcher
   is in it); the parent kills every process listed in it at the end and removes it. cgroup v2 is
   not used.
6. **Parent-side enforcement**: stdout/stderr are read incrementally; at the wall-clock deadline or
   once ``max_output_bytes`` have arrived the parent kills the session (``killpg``), the namespace
   init (pidfd), everything in the cgroup, and, without a pid namespace but with a uid of its own,
   every process of that uid; then it reaps.

Fallbacks: without namespaces (no ``unshare``, or it is not permitted), the run keeps layers 1, 3,
4, 5, 6 and loses: network isolation (localhost services and any reachable network are open),
the private ``/tmp`` and read-only filesystem (the code can write wherever its uid may, e.g. a
world-writable ``/tmp``; only its working directory is removed afterwards), hiding of the task
bank and other readable files, and the kernel's guarantee that every descendant dies with the
run (replaced by the launcher, a child subreaper that kills and reaps every descendant when the
runner ends, and by the parent's sweep of the cgroup and of the run's uid). As root, the runner
is the system ``python3`` when the unprivileged uid cannot reach the caller's interpreter (e.g.
one under ``/root``). Without root and without a user namespace, there is no uid of its own
either: the code runs as the caller's user and can read its files (and the trainer's
``/proc/<pid>/environ``) and signal its processes (the trainer and the launcher included). If no
configuration works, :func:`run_python` raises RuntimeError; it never runs code as root
unconfined. What is active is reported by :func:`sandbox_capabilities`.

Not covered anywhere: there is no seccomp filter (the whole syscall surface is reachable; a kernel
exploit escapes), no memory cgroup (the worst case is ``max_processes * memory_mb`` of address
space plus the tmpfs), world-writable Unix sockets outside ``/tmp`` stay reachable, and cgroup v2
is not used.
"""

from __future__ import annotations

import ast
import itertools
import json
import math
import os
import re
import secrets
import selectors
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from importlib.resources import files
from numbers import Real
from typing import Any

__all__ = [
    "STATUSES",
    "SandboxLimits",
    "SandboxResult",
    "run_python",
    "sandbox_capabilities",
    "values_match",
]

#: every value :attr:`SandboxResult.status` can take
STATUSES = ("ok", "timeout", "memory", "output_limit", "crashed", "error")

_MIN_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8"}


@dataclass(frozen=True)
class SandboxLimits:
    """Resource limits of one sandboxed run (checked on construction; ValueError if invalid).

    Args:
        wall_s: wall-clock seconds for the whole run, interpreter start-up included.
        cpu_s: CPU seconds of the main process (``RLIMIT_CPU``, rounded up; killed one second
            after the soft limit at the latest).
        memory_mb: address space per process (``RLIMIT_AS``), in MiB; at least 64.
        max_processes: processes and threads the run may have at once, the main one included
            (``RLIMIT_NPROC`` of its own uid; the pids cgroup allows one more, the launcher).
        max_file_mb: size of any file it writes (``RLIMIT_FSIZE``); the private tmpfs holds
            four times this much in all.
        max_output_bytes: stdout + stderr bytes read before the run is killed.
    """

    wall_s: float = 5.0
    cpu_s: float = 4.0
    memory_mb: int = 512
    max_processes: int = 32
    max_file_mb: int = 16
    max_output_bytes: int = 64_000

    def __post_init__(self) -> None:
        def real(name: str, low: float) -> None:
            v = getattr(self, name)
            if not isinstance(v, Real) or isinstance(v, bool) or not math.isfinite(v) or v < low:
                raise ValueError(f"{name} must be a finite number >= {low:g}, got {v!r}")

        def integer(name: str, low: int) -> None:
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < low:
                raise ValueError(f"{name} must be an int >= {low}, got {v!r}")

        real("wall_s", 0.1)
        real("cpu_s", 0.1)
        integer("memory_mb", 64)
        integer("max_processes", 1)
        integer("max_file_mb", 1)
        integer("max_output_bytes", 1024)


@dataclass
class SandboxResult:
    """What one run produced.

    ``payload`` is None when the runner reported nothing (it never started, or the code ended the
    process before the runner's first report). Otherwise it is a dict:

    * ``error``: None, or ``"Type: message"`` of the exception raised while loading the source
      (a SyntaxError, an exception at module level, a missing function).
    * ``missing_function``: True when the source loaded but does not define ``function``.
    * ``results``: one entry per call, in order: ``{"value": v}`` (``v`` decoded in the parent),
      ``{"error": "Type: message"}``, or None for a call that never reported (killed first).
    * ``complete``: whether the runner reported the end of all calls.

    ``status``: ``ok`` (the runner finished and reported; exceptions of the code are in the
    payload), ``timeout`` (wall clock, or killed by the CPU limit), ``memory`` (a MemoryError
    anywhere), ``output_limit``, ``crashed`` (ended without finishing its report: ``os._exit``, a
    signal, ...), ``error`` (the sandbox itself could not be set up; the message is in ``stderr``).
    ``returncode`` is the runner's exit code (negative: killed by that signal), ``cpu_s`` and
    ``max_rss_mb`` its CPU time and peak memory as reported by the launcher (None if unknown).
    A payload, when there is one, is also kept for the statuses other than ``ok``.
    """

    status: str
    returncode: int | None
    stdout: str
    stderr: str
    wall_s: float
    payload: dict[str, Any] | None
    cpu_s: float | None = None
    max_rss_mb: float | None = None
    layers: dict[str, bool] = field(default_factory=dict, repr=False)

    @property
    def ok(self) -> bool:
        return self.status == "ok"


# ---------------------------------------------------------------------------------------------
# Trusted code that runs in the child: three programs in sandbox_programs/, read as text here and
# passed with ``python -c`` (never imported). The launcher runs with the caller's privileges (root
# or namespace root), sets up mounts/cgroup, forks the runner, and waits for it as its parent.
# ---------------------------------------------------------------------------------------------


def _program(name: str) -> str:
    return files(__package__).joinpath("sandbox_programs").joinpath(f"{name}.py").read_text(
        encoding="utf-8")


_LAUNCHER = _program("launcher")
_RUNNER = _program("runner")
# A program that reports which layers took effect inside the sandbox (used by the probe).
_PROBE = _program("probe")


# ---------------------------------------------------------------------------------------------
# Plans: how runs are set up on this machine (probed once per mode)
# ---------------------------------------------------------------------------------------------


@dataclass
class _Plan:
    namespaces: bool
    user_ns: bool
    uid_mode: str  # "unique" | "nobody" | "none"
    cgroup_parent: str | None
    python: str
    runner_python: str
    python_prefix: str | None
    python_rel: str
    hide: list[str]
    unshare: list[str]
    capabilities: dict[str, bool]
    notes: list[str]


_PLANS: dict[bool, _Plan | None] = {}
_PLAN_LOCK = threading.Lock()
_COUNTER = itertools.count()
_UID_BASE = 1 << 30
_STALE_CGROUPS: list[str] = []
_STALE_LOCK = threading.Lock()
_CGROUP_PIDS = "/sys/fs/cgroup/pids"


def _uid_mapped(low: int, high: int) -> bool:
    """Whether uids ``low..high`` all exist in this process's user namespace."""
    try:
        with open("/proc/self/uid_map") as fh:
            rows = [tuple(int(x) for x in line.split()) for line in fh if line.strip()]
    except (OSError, ValueError):
        return False
    return any(inside <= low and high < inside + count for inside, _, count in rows)


def _cgroup_parent() -> str | None:
    """``/sys/fs/cgroup/pids/ragen2-sandbox`` when a v1 pids cgroup can be created there."""
    if os.geteuid() != 0 or not os.path.isfile(os.path.join(_CGROUP_PIDS, "cgroup.procs")):
        return None
    parent = os.path.join(_CGROUP_PIDS, "ragen2-sandbox")
    probe = os.path.join(parent, f"probe-{os.getpid()}-{secrets.token_hex(4)}")
    try:
        os.makedirs(parent, exist_ok=True)
        for name in os.listdir(parent):  # runs of processes that died mid-run (now empty)
            parts = name.split("-")
            stale = name.startswith(("run-", "probe-")) and len(parts) > 1 and parts[1].isdigit()
            if stale and not os.path.exists(f"/proc/{parts[1]}"):
                try:
                    os.rmdir(os.path.join(parent, name))
                except OSError:
                    pass
        os.mkdir(probe)
        with open(os.path.join(probe, "pids.max"), "w") as fh:
            fh.write("8")
        os.rmdir(probe)
    except OSError:
        return None
    return parent


def _default_hidden() -> list[str]:
    """Directories the sandboxed code does not need and should not read."""
    here = os.path.dirname(os.path.realpath(__file__))
    paths = [here]
    checkout = os.path.dirname(here)
    if os.path.exists(os.path.join(checkout, ".git")) or os.path.exists(
        os.path.join(checkout, "pyproject.toml")
    ):
        paths.append(checkout)  # a source checkout: its files include the task bank
    base = {"base": sys.base_prefix, "platbase": sys.base_exec_prefix}
    for scheme_vars in (None, base):
        for key in ("purelib", "platlib"):
            try:
                paths.append(sysconfig.get_paths(vars=scheme_vars)[key])
            except KeyError:
                pass
    paths += ["/root", "/home", os.path.expanduser("~")]
    needed = ("/tmp", "/var/tmp", "/dev/shm", "/usr", "/etc", "/bin", "/sbin", "/lib", "/lib64",
              "/dev", "/proc", "/sys")
    out: list[str] = []
    for p in paths:
        real = os.path.realpath(p)
        if (
            not os.path.isdir(real)
            or real in out
            or any(_within(n, real) for n in needed)  # hiding it would hide something needed
            or any(_within(real, t) for t in needed[:3])  # private to the run anyway
        ):
            continue
        out.append(real)
    return out


def _within(path: str, top: str) -> bool:
    """Whether ``path`` is ``top`` or inside it."""
    return top == "/" or path == top or path.startswith(top.rstrip("/") + "/")


def _interpreter() -> tuple[str, str | None, str]:
    """(real executable, prefix to bind-mount or None, executable path relative to it).

    A virtual environment's interpreter is replaced by its base installation's (the runner uses
    ``-I -S`` and the standard library only, and the venv may live in a hidden checkout)."""
    exe = os.path.realpath(sys.executable)
    prefix = os.path.realpath(sys.base_prefix)
    if not _within(exe, prefix):
        v = sys.version_info
        base = os.path.realpath(os.path.join(prefix, "bin", f"python{v.major}.{v.minor}"))
        if os.path.isfile(base) and os.access(base, os.X_OK):
            exe = base
    if _within(exe, prefix) and prefix != "/":
        return exe, prefix, os.path.relpath(exe, prefix)
    return exe, None, ""


def _make_plan(namespaces: bool) -> _Plan | None:
    """The setup for this mode, probed by running a small program through it; None if unusable."""
    root = os.geteuid() == 0
    exe, prefix, rel = _interpreter()
    if root:
        top = _UID_BASE + (0x3FFFFF << 8) + 0xFF
        uid_mode = "unique" if _uid_mapped(_UID_BASE, top) else "nobody"
    else:
        uid_mode = "none"
    unshare: list[str] = []
    user_ns = False
    runners = [exe]
    if namespaces:
        tool = shutil.which("unshare", path=_MIN_ENV["PATH"] + ":/usr/sbin:/sbin")
        if tool is None:
            return None
        unshare = [tool]
        if not root:
            unshare += ["--user", "--map-root-user"]
            user_ns = True
        unshare += ["--net", "--pid", "--fork", "--kill-child", "--mount", "--mount-proc"]
    elif uid_mode != "none":
        # The unprivileged uid may not reach this interpreter (e.g. under a private /root);
        # without a mount namespace it cannot be bind-mounted, so try the system's python3.
        other = shutil.which("python3", path=_MIN_ENV["PATH"])
        if other and os.path.realpath(other) != exe:
            runners.append(os.path.realpath(other))
    cgroup_parent = _cgroup_parent()
    hide = _default_hidden() if namespaces else []
    for runner in runners:
        plan = _Plan(
            namespaces=namespaces, user_ns=user_ns, uid_mode=uid_mode, cgroup_parent=cgroup_parent,
            python=exe, runner_python=runner, python_prefix=prefix if namespaces else None,
            python_rel=rel, hide=hide, unshare=unshare, capabilities={}, notes=[],
        )
        res = _run(plan, _PROBE, None, (), SandboxLimits(wall_s=20.0, cpu_s=5.0), probe=True)
        facts = None
        for line in res.stdout.splitlines():
            if line.startswith("PROBE "):
                try:
                    facts = json.loads(line[6:])
                except ValueError:
                    facts = None
        if res.status != "ok" or not isinstance(facts, dict):
            continue
        plan.notes = list(res.payload.get("notes", [])) if res.payload else []
        ro_failed = [n for n in plan.notes if n.startswith("ro:")]
        plan.capabilities = {
            "new_session": True,
            "clean_environment": True,
            "rlimits": True,
            "no_new_privs": True,
            "user_namespace": user_ns,
            "net_namespace": namespaces and facts.get("ifaces") == ["lo"],
            "pid_namespace": namespaces and facts.get("pid") == 2,
            "mount_namespace": namespaces,
            "private_tmp": namespaces and facts.get("tmp") == [".python", "work"],
            "readonly_root": namespaces and facts.get("root_writable") is False and not ro_failed,
            "uid_drop": uid_mode != "none" and facts.get("uid") not in (0, os.getuid()),
            "unique_uid": uid_mode == "unique" and facts.get("uid", 0) >= _UID_BASE,
            "pids_cgroup": cgroup_parent is not None,
        }
        return plan
    return None


def _plan(namespaces: bool | None) -> _Plan:
    with _PLAN_LOCK:
        modes = [True, False] if namespaces is None else [bool(namespaces)]
        for mode in modes:
            if mode not in _PLANS:
                _PLANS[mode] = _make_plan(mode)
            if _PLANS[mode] is not None:
                return _PLANS[mode]  # type: ignore[return-value]
    raise RuntimeError(
        "the sandbox cannot run here"
        + (" without namespaces" if namespaces is False else "")
        + ": even the plain launcher failed (see ragen2_envs.sandbox module docs)"
    )


def sandbox_capabilities(namespaces: bool | None = None) -> dict[str, bool]:
    """Which isolation layers runs get on this machine (probed once per process, then cached).

    Keys: ``new_session``, ``clean_environment``, ``rlimits`` (always True), ``user_namespace``,
    ``net_namespace``, ``pid_namespace``, ``mount_namespace``, ``private_tmp``, ``readonly_root``,
    ``uid_drop``, ``unique_uid``, ``pids_cgroup``, ``no_new_privs``. ``namespaces=False`` reports
    the fallback used when namespaces are unavailable (or disabled per call).
    """
    return dict(_plan(namespaces).capabilities)


# ---------------------------------------------------------------------------------------------
# Parent side
# ---------------------------------------------------------------------------------------------

_TYPES_STRICT = (bool, int, float, str, type(None))


def values_match(got: Any, expected: Any) -> bool:
    """Whether a returned value equals the expected one (parent-side; plain data only).

    Types must agree (``True`` is not ``1``, a tuple is not a list), except that an int is
    accepted where a float is expected; floats compare with a relative tolerance of 1e-6 (and an
    absolute one of 1e-9).
    """
    if isinstance(expected, bool) or expected is None or isinstance(expected, str):
        return type(got) is type(expected) and got == expected
    if isinstance(expected, int):
        return type(got) is int and got == expected
    if isinstance(expected, float):
        if type(got) not in (int, float):
            return False
        if math.isnan(expected):
            return isinstance(got, float) and math.isnan(got)
        return math.isclose(got, expected, rel_tol=1e-6, abs_tol=1e-9)
    if isinstance(expected, (list, tuple)):
        return (
            type(got) is type(expected)
            and len(got) == len(expected)
            and all(values_match(g, e) for g, e in zip(got, expected))
        )
    if isinstance(expected, dict):
        return (
            type(got) is dict
            and got.keys() == expected.keys()
            and all(values_match(got[k], expected[k]) for k in expected)
        )
    if isinstance(expected, (set, frozenset)):
        return type(got) is set and got == set(expected)
    return False


def _decode_value(text: Any) -> dict[str, Any]:
    if not isinstance(text, str) or len(text) > 20000:
        return {"error": "unreadable return value"}
    try:
        return {"value": ast.literal_eval(text)}
    except Exception:
        return {"error": "unreadable return value"}


def _parse_payload(raw: str, marker: str, ncalls: int) -> tuple[str, dict[str, Any] | None]:
    """(stdout without the report lines, payload or None)."""
    pattern = re.compile(r"\n?" + re.escape(marker) + r" ([a-z]+) ([^\n]*)\n?")
    load: dict[str, Any] | None = None
    results: list[dict[str, Any] | None] = [None] * ncalls
    complete = False
    for m in pattern.finditer(raw):
        kind, body = m.group(1), m.group(2)
        try:
            obj = json.loads(body)
        except (ValueError, RecursionError):
            continue
        if not isinstance(obj, dict):
            continue
        if kind == "load" and load is None:
            load = obj
        elif kind == "call" and load is not None:
            i = obj.get("i")
            if type(i) is int and 0 <= i < ncalls and results[i] is None:
                if "value" in obj:
                    results[i] = _decode_value(obj["value"])
                else:
                    err = obj.get("error")
                    results[i] = {"error": err[:500] if isinstance(err, str) else "error"}
        elif kind == "done" and load is not None:
            complete = True
    stdout = pattern.sub("", raw)
    if load is None:
        return stdout, None
    err = load.get("error")
    return stdout, {
        "error": err[:500] if isinstance(err, str) else None,
        "missing_function": load.get("missing") is True,
        "results": results,
        "complete": complete,
    }


def _exited(pid: int) -> bool:
    """Whether child ``pid`` has exited, without reaping it (its pid stays reserved)."""
    try:
        return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        return True


def _children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as fh:
            return [int(x) for x in fh.read().split()]
    except (OSError, ValueError):
        return []


def _pids_of_uid(uid: int) -> list[int]:
    out = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/status") as fh:
                for line in fh:
                    if line.startswith("Uid:"):
                        if int(line.split()[1]) == uid:
                            out.append(int(name))
                        break
        except (OSError, ValueError, IndexError):
            continue
    return out


def _count_user_processes(uid: int) -> int:
    return len(_pids_of_uid(uid))


def _kill_pids(list_pids, timeout: float = 2.0) -> bool:
    """SIGKILL whatever ``list_pids()`` returns until it returns nothing; whether it emptied."""
    end = time.monotonic() + timeout
    while True:
        pids = list_pids()
        if not pids:
            return True
        if time.monotonic() > end:
            return False
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        time.sleep(0.005)


def _cgroup_pids(path: str) -> list[int]:
    try:
        with open(os.path.join(path, "cgroup.procs")) as fh:
            return [int(x) for x in fh.read().split()]
    except (OSError, ValueError):
        return []


def _remove_cgroup(path: str) -> None:
    with _STALE_LOCK:
        candidates = _STALE_CGROUPS[:] + [path]
        _STALE_CGROUPS.clear()
        for p in candidates:
            try:
                os.rmdir(p)
            except FileNotFoundError:
                pass
            except OSError:
                _STALE_CGROUPS.append(p)


def _check_calls(calls: Sequence[Any]) -> list[str]:
    out = []
    for i, args in enumerate(calls):
        if not isinstance(args, tuple):
            raise ValueError(f"calls[{i}] must be a tuple of arguments, got {type(args).__name__}")
        text = repr(args)
        out.append(text)
    return out


def run_python(
    source: str,
    *,
    function: str | None = None,
    calls: Sequence[tuple] = (),
    limits: SandboxLimits | None = None,
    namespaces: bool | None = None,
) -> SandboxResult:
    """Run untrusted ``source`` in the sandbox and return what happened (never raises for bad code).

    Without ``function`` the source runs as a program (``__name__ == "__main__"``) and the
    payload has no results. With ``function``, the source is loaded as a module named
    ``solution`` (so an ``if __name__ == "__main__":`` block does not run), then
    ``function(*args)`` is called for each tuple in ``calls`` (plain literal data, rebuilt fresh
    for each call); every call gets its own result, an exception only fails that call.

    ``namespaces``: None uses namespaces when available, False forces the fallback (for tests),
    True requires them (RuntimeError when unavailable). Raises ValueError for invalid arguments and
    RuntimeError when no sandbox can be started on this machine at all.
    """
    if not isinstance(source, str):
        raise ValueError(f"source must be a str, got {type(source).__name__}")
    if function is not None and (not isinstance(function, str) or not function.isidentifier()):
        raise ValueError(f"function must be None or a Python identifier, got {function!r}")
    if function is None and calls:
        raise ValueError("calls need a function name")
    limits = SandboxLimits() if limits is None else limits
    if not isinstance(limits, SandboxLimits):
        raise ValueError(f"limits must be a SandboxLimits, got {type(limits).__name__}")
    call_texts = _check_calls(calls)
    plan = _plan(namespaces)
    return _run(plan, source, function, call_texts, limits)


def _run(
    plan: _Plan,
    source: str,
    function: str | None,
    call_texts: Sequence[str],
    limits: SandboxLimits,
    probe: bool = False,
) -> SandboxResult:
    start = time.monotonic()
    marker = "@@RAGEN2-RESULT-" + secrets.token_hex(8)
    private = tempfile.mkdtemp(prefix="ragen2-sandbox-")
    uid = gid = None
    if plan.uid_mode == "unique":
        uid = gid = _UID_BASE + ((os.getpid() & 0x3FFFFF) << 8) + (next(_COUNTER) & 0xFF)
    elif plan.uid_mode == "nobody":
        uid = gid = 65534
    cgroup = None
    status_r = status_w = -1
    proc: subprocess.Popen | None = None
    try:
        if plan.cgroup_parent is not None:
            cgroup = os.path.join(plan.cgroup_parent, f"run-{os.getpid()}-{secrets.token_hex(6)}")
            try:
                os.mkdir(cgroup)
                with open(os.path.join(cgroup, "pids.max"), "w") as fh:
                    fh.write(str(limits.max_processes + 1))
            except OSError:
                cgroup = None
        workdir = os.path.join(private, "work")
        if not plan.namespaces:
            os.mkdir(workdir, 0o700)
            if uid is not None:
                os.chmod(private, 0o711)
        nproc = limits.max_processes
        if plan.uid_mode == "none" and not plan.user_ns:
            nproc += _count_user_processes(os.getuid())
        cpu = max(1, math.ceil(limits.cpu_s))
        mem = limits.memory_mb * 1024 * 1024
        fsize = limits.max_file_mb * 1024 * 1024
        status_r, status_w = os.pipe()
        cfg = {
            "status_fd": status_w,
            "cgroup_procs": [os.path.join(cgroup, "cgroup.procs")] if cgroup else [],
            "mount": plan.namespaces,
            "tmpfs": ["/tmp", "/var/tmp", "/dev/shm"],
            "tmpfs_mb": max(16, 4 * limits.max_file_mb),
            "runner_python": plan.runner_python,
            "python_prefix": plan.python_prefix,
            "python_rel": plan.python_rel,
            "hide": plan.hide,
            "workdir": workdir,
            "uid": uid,
            "gid": gid,
            "drop_bounding": plan.user_ns or uid is not None,
            "rlimits": [
                ["RLIMIT_CORE", 0, 0],
                ["RLIMIT_NOFILE", 64, 64],
                ["RLIMIT_FSIZE", fsize, fsize],
                ["RLIMIT_CPU", cpu, cpu + 1],
                ["RLIMIT_NPROC", nproc, nproc],
                ["RLIMIT_AS", mem, mem],
            ],
            "env": dict(_MIN_ENV),
            "runner": _RUNNER,
            "job": {"marker": marker, "source": source, "function": function, "calls": list(call_texts)},
        }
        cfg_path = os.path.join(private, "launcher.json")
        fd = os.open(cfg_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as fh:
            json.dump(cfg, fh)
        argv = plan.unshare + [plan.python, "-I", "-S", "-B", "-c", _LAUNCHER, cfg_path]
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            close_fds=True,
            pass_fds=(status_w,),
            start_new_session=True,
            env=dict(_MIN_ENV),
            cwd=private,
        )
        os.close(status_w)
        status_w = -1
        os.set_blocking(status_r, False)
        out, err, reason = _collect(proc, start + limits.wall_s, limits.max_output_bytes)
        status_text = _read_status(status_r)
        runner = None
        for line in status_text.decode("ascii", "replace").splitlines():
            if line.startswith("P ") and line[2:].strip().isdigit():
                runner = int(line[2:])
        _terminate(proc, plan, cgroup, uid, runner)
        returncode = proc.returncode
        status_text += _read_status(status_r)
    finally:
        for fd_ in (status_r, status_w):
            if fd_ >= 0:
                os.close(fd_)
        if proc is not None and proc.returncode is None:  # an exception above: never leak it
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except OSError:
                pass
            _terminate(proc, plan, cgroup, uid, None)
        if cgroup is not None:
            _remove_cgroup(cgroup)
        shutil.rmtree(private, ignore_errors=True)
    wall = time.monotonic() - start
    return _classify(
        out, err, reason, returncode, status_text.decode("utf-8", "replace"), marker,
        len(call_texts), limits, wall, plan, probe,
    )


def _collect(proc: subprocess.Popen, deadline: float, cap: int) -> tuple[bytes, bytes, str | None]:
    """Read stdout/stderr until both close (or the main process exited and a short grace passed),
    the deadline, or the output cap. Returns (stdout, stderr, reason) with reason None,
    ``"timeout"`` or ``"output_limit"``."""
    assert proc.stdout is not None and proc.stderr is not None
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ, "out")
    sel.register(proc.stderr, selectors.EVENT_READ, "err")
    pidfd = -1
    try:
        pidfd = os.pidfd_open(proc.pid)
        sel.register(pidfd, selectors.EVENT_READ, "exit")
    except (AttributeError, OSError):
        pidfd = -1
    bufs = {"out": bytearray(), "err": bytearray()}
    total, open_pipes, reason, exited_at = 0, 2, None, None
    try:
        while True:
            now = time.monotonic()
            if exited_at is None and _exited(proc.pid):
                exited_at = now
            if open_pipes == 0 and exited_at is not None:
                break
            if exited_at is not None and now - exited_at > 0.25:
                break  # something left behind holds the pipes: it is killed next
            if now >= deadline:
                reason = "timeout"
                break
            wait = deadline - now
            if exited_at is not None:
                wait = min(wait, exited_at + 0.25 - now)
            elif pidfd < 0:
                wait = min(wait, 0.05)
            for key, _ in sel.select(max(0.0, min(wait, 1.0))):
                if key.data == "exit":
                    sel.unregister(key.fileobj)
                    continue
                chunk = os.read(key.fd, 65536)
                if not chunk:
                    sel.unregister(key.fileobj)
                    open_pipes -= 1
                    continue
                room = cap - total
                bufs[key.data] += chunk[: max(0, room)]
                total += len(chunk)
                if total > cap:
                    reason = "output_limit"
            if reason:
                break
    finally:
        sel.close()
        if pidfd >= 0:
            os.close(pidfd)
    return bytes(bufs["out"]), bytes(bufs["err"]), reason


def _alive(pid: int) -> bool:
    """Whether ``pid`` exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            state = fh.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X", "x")


def _wait_exit(pid: int, timeout: float) -> None:
    """Wait up to ``timeout`` seconds for child ``pid`` to exit (without reaping it)."""
    end = time.monotonic() + timeout
    while not _exited(pid) and time.monotonic() < end:
        time.sleep(0.002)


def _terminate(
    proc: subprocess.Popen, plan: _Plan, cgroup: str | None, uid: int | None, runner: int | None
) -> None:
    """Kill everything the run left, reap the main process, close its pipes."""
    init_fd = -1
    if not _exited(proc.pid):
        if plan.namespaces:
            for child in _children(proc.pid):  # the pid namespace's init: killing it empties it
                try:
                    init_fd = os.pidfd_open(child)
                except (AttributeError, OSError):
                    init_fd = -1
                break
            if init_fd >= 0:
                try:
                    signal.pidfd_send_signal(init_fd, signal.SIGKILL)
                except OSError:
                    pass
        else:
            # Kill the run but let its (trusted) launcher reap and sweep what the run left.
            if runner is not None and _alive(runner):
                try:
                    os.kill(runner, signal.SIGKILL)
                except OSError:
                    pass
            if plan.uid_mode == "unique" and uid is not None:
                _kill_pids(lambda: [p for p in _pids_of_uid(uid) if _alive(p)], 1.0)
            _wait_exit(proc.pid, 1.0)
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # main is alive or a zombie: its pgid is still reserved
    except (ProcessLookupError, PermissionError):
        pass
    if cgroup is not None:
        _kill_pids(lambda: [p for p in _cgroup_pids(cgroup) if _alive(p)])
    if not plan.namespaces and plan.uid_mode == "unique" and uid is not None:
        _kill_pids(lambda: [p for p in _pids_of_uid(uid) if _alive(p)])
    _, status = os.waitpid(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if init_fd >= 0:  # wait until the namespace is gone (init exits after all its processes)
        sel = selectors.DefaultSelector()
        try:
            sel.register(init_fd, selectors.EVENT_READ)
            sel.select(2.0)
        finally:
            sel.close()
            os.close(init_fd)
    for pipe in (proc.stdout, proc.stderr):
        if pipe is not None:
            pipe.close()


def _read_status(fd: int) -> bytes:
    """Whatever the launcher has written to the status pipe so far (non-blocking)."""
    data = b""
    try:
        while chunk := os.read(fd, 65536):
            data += chunk
    except BlockingIOError:
        pass
    return data


def _classify(
    out: bytes, err: bytes, reason: str | None, returncode: int | None, status_text: str,
    marker: str, ncalls: int, limits: SandboxLimits, wall: float, plan: _Plan, probe: bool,
) -> SandboxResult:
    stdout, payload = _parse_payload(out.decode("utf-8", "replace"), marker, ncalls)
    stderr = err.decode("utf-8", "replace")
    setup_error, started, runner_status, cpu, rss = None, False, None, None, None
    notes: list[str] = []
    for line in status_text.splitlines():
        kind, _, rest = line.partition(" ")
        if kind == "E" and setup_error is None:
            setup_error = rest
        elif kind == "K":
            started = True
        elif kind == "N":
            notes += rest.split()
        elif kind == "X":
            try:
                st, cpu_text, rss_text = rest.split()
                runner_status, cpu, rss = int(st), float(cpu_text), int(rss_text) / 1024.0
            except ValueError:
                pass
    if probe and payload is not None:
        payload["notes"] = notes
    runner_code = None
    if runner_status is not None:
        runner_code = os.waitstatus_to_exitcode(runner_status)
    errors = [payload["error"]] if payload and payload["error"] else []
    if payload:
        errors += [r["error"] for r in payload["results"] if r and "error" in r]
    memory_hit = any(e.startswith("MemoryError") for e in errors) or (
        payload is None and "MemoryError" in stderr[-2000:]
    )
    cpu_hit = runner_code in (-signal.SIGXCPU,) or (
        runner_code == -signal.SIGKILL and cpu is not None and cpu >= math.ceil(limits.cpu_s) - 0.05
    )
    if setup_error is not None or (not started and reason is None):
        status = "error"
        stderr = f"sandbox setup failed: {setup_error or 'launcher did not start'}\n" + stderr
    elif reason == "output_limit":
        status = "output_limit"
    elif reason == "timeout" or cpu_hit:
        status = "timeout"
    elif memory_hit:
        status = "memory"
    elif payload is not None and payload["complete"] and runner_code == 0:
        status = "ok"
    else:
        status = "crashed"
    return SandboxResult(
        status=status,
        returncode=runner_code if runner_code is not None else returncode,
        stdout=stdout,
        stderr=stderr,
        wall_s=wall,
        payload=payload,
        cpu_s=cpu,
        max_rss_mb=rss,
        layers=dict(plan.capabilities),
    )
