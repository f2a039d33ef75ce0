"""``ragen2 serve-env ENV_ID [KEY=VALUE ...]``: serve a registered Gymnasium text env over HTTP.

Any env ``ragen2 train`` accepts as ``env.id`` (``ragen2/FrozenLake-v0``, a user's
``module:Env-v0`` imported from the working directory, an id a ``--plugin`` module registers)
with kwargs as ``KEY=VALUE`` (the value read as JSON when it parses, else as text:
``size=6 is_slippery=true``). The env is checked as ``ragen2 train`` checks it
(``reset(seed=0)``) before the port opens. Training then selects it with
``env.id=ragen2/Remote-v0 env.kwargs.url=<the printed URL>`` (docs/tutorials/remote-env.md;
the protocol: docs/reference/env-protocol.md).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, Sequence


def parse_kwargs(pairs: Sequence[str]) -> dict[str, Any]:
    """``KEY=VALUE`` pairs as env kwargs (each value JSON if it parses, else the text)."""
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or not key.isidentifier():
            raise ValueError(f"env kwargs are KEY=VALUE with KEY a Python name, got {pair!r}")
        try:
            out[key] = json.loads(raw)
        except ValueError:
            out[key] = raw
    return out


def build_parser() -> argparse.ArgumentParser:
    from ragen2_envs.remote import HOOKS

    p = argparse.ArgumentParser(
        prog="ragen2 serve-env",
        description="Serve a Gymnasium text env over ragen2's HTTP/JSON env protocol "
                    "(docs/reference/env-protocol.md); train on it with env.id=ragen2/Remote-v0 "
                    "env.kwargs.url=<the printed URL>.",
        epilog="example: ragen2 serve-env ragen2/FrozenLake-v0 size=6 --url-file env.url")
    p.add_argument("env_id", help="a Gymnasium id (ragen2/FrozenLake-v0, module:Env-v0)")
    p.add_argument("kwargs", nargs="*", metavar="KEY=VALUE", help="env kwargs (JSON values)")
    p.add_argument("--host", default="127.0.0.1",
                   help="interface to listen on (default 127.0.0.1: this machine only; 0.0.0.0: "
                        "every interface, for rollout workers on other machines)")
    p.add_argument("--port", type=int, default=0,
                   help="port (default 0: the OS assigns a free one, printed and written to "
                        "--url-file)")
    p.add_argument("--processes", type=int, default=1,
                   help="server processes, each with its own port (default 1: one process, a "
                        "thread per connection)")
    p.add_argument("--url-file", default=None,
                   help="write the URL (or the list of URLs) here once listening, ready for "
                        "env.kwargs.url=$(cat FILE)")
    p.add_argument("--plugin", action="append", default=[], metavar="MODULE",
                   help="import this module first (repeatable), as the training config's "
                        "plugins=[...] does: an env it registers can then be served")
    p.add_argument("--hook", action="append", default=[], metavar="NAME",
                   help=f"serve this env method too (besides {', '.join(HOOKS)})")
    p.add_argument("--idle-timeout-s", type=float, default=900.0,
                   help="close an episode that saw no request for this long (default 900)")
    p.add_argument("--verbose", action="store_true", help="log every request")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    from ragen2.plugins import PluginError, import_plugins
    from ragen2.rollout.envs import EnvEntry, EnvSpecError, env_factory, env_name, probe_env
    from ragen2_envs.remote import HOOKS
    from ragen2_envs.remote_server import serve

    args = build_parser().parse_args(argv)
    try:
        import_plugins(args.plugin)  # before the env id is looked up; forked servers inherit them
        kwargs = parse_kwargs(args.kwargs)
        if args.processes < 1 or (args.processes > 1 and args.port != 0):
            raise ValueError("--processes must be >= 1, and with several --port must stay 0 "
                             "(each process binds a port of its own)")
        probe_env(EnvEntry(env_name(args.env_id), args.env_id, kwargs))
    except (ValueError, EnvSpecError, PluginError) as e:
        print(f"ragen2 serve-env: {e}", file=sys.stderr)
        return 2
    try:
        return serve(env_factory(args.env_id, kwargs), args.env_id, host=args.host,
                     port=args.port, processes=args.processes, url_file=args.url_file,
                     verbose=args.verbose, hooks=tuple(HOOKS) + tuple(args.hook),
                     idle_timeout_s=args.idle_timeout_s,
                     announce=lambda text: print(text, flush=True))
    except OSError as e:  # the port is taken, the host unknown
        print(f"ragen2 serve-env: cannot listen on {args.host}:{args.port}: {e}", file=sys.stderr)
        return 2
