"""Stopping on a signal at the end of the current step, checkpointed (SLURM time limits, preemption).

:class:`StopSignal` installs handlers for ``SIGUSR1`` and ``SIGTERM`` for the length of a training
loop (main thread only; elsewhere it does nothing). The first signal only sets a flag: the
controller finishes the step it is in, writes its checkpoint and raises :class:`Preempted`, which
``ragen2-train`` turns into exit status :data:`PREEMPTED_EXIT` (75, ``EX_TEMPFAIL``: try again),
so a job script can tell "checkpointed, requeue me" from success or failure. A second signal stops
at once (``SystemExit``, status 128 + signal), as the default action would have. The previous
handlers (Ray installs one for SIGTERM) are restored on exit.

Under submitit (Hydra's submitit launcher; ``SUBMITIT_EXECUTOR`` is set) its "checkpoint and
requeue" signal (``SUBMITIT_PREEMPT_SIGNAL``, default USR2: ``#SBATCH --signal=USR2@<delay>``) is
handled too, and the handler submitit installed for it is handed on in :attr:`Preempted.chain`:
``ragen2-train`` calls it after the checkpoint, so submitit still requeues the job (which resumes
with ``trainer.resume=true``). SIGTERM's previous handler (Ray's ``sys.exit``, submitit's
"bypass") is never chained.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
from types import FrameType
from typing import Any, Callable, Optional

log = logging.getLogger("ragen2")
PREEMPTED_EXIT = 75
SIGNALS = (signal.SIGUSR1, signal.SIGTERM)


def stop_signals() -> tuple[int, ...]:
    """SIGUSR1 and SIGTERM, and submitit's preemption signal inside a submitit job."""
    out = list(SIGNALS)
    if os.environ.get("SUBMITIT_EXECUTOR"):
        sig = getattr(signal, "SIG" + os.environ.get("SUBMITIT_PREEMPT_SIGNAL", "USR2"), None)
        if sig is not None and sig not in out:
            out.append(sig)
    return tuple(out)


class Preempted(RuntimeError):
    """A stop signal arrived; the run checkpointed at the end of its step and stopped.

    ``chain``: the handler of that signal installed before ours (submitit's requeue), to call once
    the checkpoint is written; None otherwise (the default action, or SIGTERM)."""

    def __init__(self, msg: str, signum: int = 0, chain: Optional[Callable[..., Any]] = None):
        super().__init__(msg)
        self.signum = signum
        self.chain = chain


_pending: Optional[int] = None  # a stop signal that arrived before the training loop


def _early(signum: int, frame: Optional[FrameType]) -> None:  # noqa: ARG002
    global _pending
    _pending = signum
    log.warning("%s received while starting: stopping before the first step",
                signal.Signals(signum).name)


def install_early() -> None:
    """From process start until the training loop's :class:`StopSignal` takes over: remember a
    SIGUSR1 (SLURM's time-limit warning can come while Ray and the models start) instead of dying
    of it; the loop then stops before its first step. SIGTERM keeps its default (and Ray's), and
    a handler someone else installed for SIGUSR1 (submitit's) stays."""
    if (threading.current_thread() is threading.main_thread()
            and signal.getsignal(signal.SIGUSR1) == signal.SIG_DFL):
        signal.signal(signal.SIGUSR1, _early)


class StopSignal:
    """``with StopSignal() as s: ... if s.received: ...`` (see the module docstring)."""

    def __init__(self, signals: tuple[int, ...] | None = None) -> None:
        self.signals = stop_signals() if signals is None else signals
        self.received: Optional[int] = None
        self._previous: dict[int, Any] = {}

    @property
    def name(self) -> str:
        return signal.Signals(self.received).name if self.received else ""

    def _handle(self, signum: int, frame: Optional[FrameType]) -> None:  # noqa: ARG002
        if self.received is not None:
            raise SystemExit(128 + signum)
        self.received = signum
        log.warning("%s received: stopping after this step, with a checkpoint (send it again to "
                    "stop at once)", signal.Signals(signum).name)

    def __enter__(self) -> "StopSignal":
        global _pending
        if threading.current_thread() is threading.main_thread():
            for s in self.signals:
                self._previous[s] = signal.signal(s, self._handle)
        if _pending is not None:  # it came while the run was starting
            self.received, _pending = _pending, None
        return self

    def preempted(self, msg: str) -> Preempted:
        """The exception to raise once the step is checkpointed (with submitit's handler, if any)."""
        prev = self._previous.get(self.received) if self.received != signal.SIGTERM else None
        chain = prev if callable(prev) and prev is not _early else None
        return Preempted(msg, self.received or 0, chain)

    def __exit__(self, *exc: Any) -> None:
        for s, h in self._previous.items():
            signal.signal(s, h)
        self._previous.clear()
