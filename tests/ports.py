"""Ports for servers that bind a port they are told, later, in another process (a Ray head's GCS
and client server, started by ``ray start --port``): no bound socket can be handed to them.

The process groups of ragen2 and its tests never need this: their stores bind port 0 and keep
the socket (:mod:`ragen2.cluster.rendezvous`). Here two measures replace "bind port 0, close,
hand the number on", whose port any process binding port 0 or opening a connection can take
before the server binds it:

* :func:`spare_port` draws from below the kernel's ephemeral range
  (``/proc/sys/net/ipv4/ip_local_port_range``), where neither a bind to port 0 nor an outgoing
  connection ever lands, and above Ray's own default ports and worker range (10002-19999), at
  random (two concurrent test runs rarely draw the same), free when drawn and never the same
  twice in one process;
* :func:`port_clash` tells a failure caused by a taken port, so a test starts the server again on
  new ports (the rare clash left: another process that names the same port in between).
"""

from __future__ import annotations

import random
import re
import socket
import time
from pathlib import Path

#: above Ray's defaults (6379, 8265, 10001) and its workers' port range (10002-19999)
LOW = 20000
_given: set[int] = set()
#: what the servers print when their port is taken (the OS's EADDRINUSE, gRPC's, Ray's)
CLASH = re.compile(r"address already in use|EADDRINUSE|already (in use|occupied)|"
                   r"failed to (bind|add port)", re.IGNORECASE)


def _ephemeral() -> tuple[int, int]:
    try:
        lo, hi = map(int, Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    except (OSError, ValueError):
        lo, hi = 32768, 60999  # Linux's default
    return lo, hi


def spare_port() -> int:
    """A port free now, for a server that binds it later (see the module's docstring)."""
    lo, hi = _ephemeral()
    span = range(LOW, lo) if lo - LOW >= 1000 else range(max(hi + 1, LOW), 65536)
    for _ in range(1000):
        port = random.choice(span)
        if port in _given:
            continue
        try:
            with socket.socket() as s:  # every IPv4 address, as the servers bind
                s.bind(("", port))
        except OSError:
            continue
        _given.add(port)
        return port
    raise RuntimeError(f"no free port in {span.start}-{span.stop - 1}")


def port_clash(out: str = "", logs: Path | None = None, since: float = 0.0) -> bool:
    """Whether a failed server start was a taken port: its output ``out``, or any file under
    ``logs`` (a Ray temp dir: its session logs) written since ``since`` (``time.time()``)."""
    if CLASH.search(out or ""):
        return True
    for f in (logs.rglob("*") if logs is not None and logs.exists() else ()):
        try:
            if f.is_file() and f.stat().st_mtime >= since and CLASH.search(
                    f.read_text(errors="replace")):
                return True
        except OSError:  # a file removed meanwhile
            continue
    return False


def now() -> float:
    """A ``since`` for :func:`port_clash` (file times have coarse resolution: a second back)."""
    return time.time() - 1.0
