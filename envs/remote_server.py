"""An env server: any Gymnasium text env over the HTTP/JSON protocol of ``ragen2/Remote-v0``.

``ragen2 serve-env module:Env-v0`` runs :func:`serve` (docs/reference/env-protocol.md has the
protocol and a minimal server in any language's reach). :class:`EnvServer` is the protocol's logic
without HTTP: one env instance per episode id (the client names its episodes, so a retried reset
is harmless), a lock per episode (requests of different episodes run concurrently, each on its
own thread of the ``ThreadingHTTPServer``), the last step's answer kept so that a retried step
(same ``step_index``) is answered again instead of stepped twice, and episodes idle for
``idle_timeout_s`` closed. Standard library only (plus gymnasium, for the env itself).
"""

from __future__ import annotations

import collections
import json
import os
import signal
import socket
import sys
import threading
import time
import urllib.parse
import uuid
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Sequence

import gymnasium as gym

from .checks import is_int
from .remote import HOOKS, PROTOCOL, STATE_HOOKS, STEP_HOOKS

__all__ = ["EnvServer", "RequestHandler", "make_http_server", "start", "serve", "write_url_file"]


class _Fail(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status, self.message = status, message


@dataclass
class _Episode:
    env: gym.Env
    lock: threading.Lock = field(default_factory=threading.Lock)
    steps: int = 0
    last: dict[str, Any] | None = None  # the last step's answer, replayed for a retried step
    touched: float = field(default_factory=time.monotonic)


def _env_error(where: str, e: BaseException) -> _Fail:
    return _Fail(500, f"the env raised in {where}: {type(e).__name__}: {e}"[:2000])


class EnvServer:
    """The protocol without HTTP: :meth:`handle` maps (method, path, query, body) to
    (status, JSON object). ``make_env()`` builds one env instance (one per episode, plus one kept
    for the metadata and for hooks called without an episode)."""

    def __init__(self, make_env: Callable[[], gym.Env], name: str, *,
                 hooks: Sequence[str] = HOOKS, idle_timeout_s: float = 900.0,
                 description: str = "") -> None:
        self.make_env, self.name, self.idle_timeout_s = make_env, name, float(idle_timeout_s)
        self._scratch = make_env()
        self._scratch_lock = threading.Lock()
        inner = self._scratch.unwrapped
        self.hooks = tuple(dict.fromkeys(h for h in hooks if callable(getattr(inner, h, None))))
        doc = (type(inner).__doc__ or "").strip().splitlines()
        meta: dict[str, Any] = {"name": name, "description": description or (doc[0] if doc else ""),
                                "protocol": PROTOCOL, "hooks": list(self.hooks),
                                "step_hooks": [h for h in STEP_HOOKS if h in self.hooks],
                                "idempotent_steps": True}
        instructions = getattr(inner, "instructions", None)
        if isinstance(instructions, str):
            meta["instructions"] = instructions
        actions = getattr(inner, "valid_actions", None)
        if actions is not None and all(isinstance(a, str) for a in actions):
            meta["valid_actions"] = list(actions)
        self.metadata = meta
        self._episodes: dict[str, _Episode] = {}
        self._lock = threading.Lock()
        self.requests: collections.Counter[str] = collections.Counter()  # per endpoint, in /health

    # ------------------------------------------------------------------ episodes
    def _find(self, episode_id: Any) -> _Episode:
        if not isinstance(episode_id, str):
            raise _Fail(400, "episode_id (a string) is required")
        with self._lock:
            ep = self._episodes.get(episode_id)
        if ep is None:
            raise _Fail(404, f"no episode {episode_id!r} here: never reset, closed, idle for "
                             f"more than {self.idle_timeout_s:g} s, or the server restarted")
        ep.touched = time.monotonic()
        return ep

    def _open(self, episode_id: str) -> _Episode:
        with self._lock:
            ep = self._episodes.get(episode_id)
        if ep is not None:
            ep.touched = time.monotonic()
            return ep
        self._reap()
        env = self.make_env()  # outside the lock: making an env may be slow
        with self._lock:
            ep = self._episodes.setdefault(episode_id, _Episode(env))
        if ep.env is not env:  # a concurrent reset of the same new id won
            env.close()
        return ep

    def _drop(self, episode_id: str) -> bool:
        with self._lock:
            ep = self._episodes.pop(episode_id, None)
        if ep is not None:
            try:
                ep.env.close()
            except Exception:  # noqa: BLE001  (closing a broken env: nothing left to do)
                pass
        return ep is not None

    def _reap(self) -> None:
        cutoff = time.monotonic() - self.idle_timeout_s
        with self._lock:
            stale = [k for k, ep in self._episodes.items() if ep.touched < cutoff]
        for k in stale:
            self._drop(k)

    @property
    def episodes(self) -> int:
        with self._lock:
            return len(self._episodes)

    # ------------------------------------------------------------------ endpoints
    def handle(self, method: str, path: str, query: dict[str, str],
               body: Any) -> tuple[int, dict[str, Any]]:
        try:
            if method == "GET" and path == "/health":
                with self._lock:
                    requests = dict(self.requests)
                return 200, {"status": "healthy", "episodes": self.episodes, "requests": requests}
            with self._lock:
                self.requests[f"{method} {path}"] += 1
            if method == "GET" and path == "/metadata":
                return 200, self.metadata
            if method == "GET" and path == "/state":
                ep = self._find(query.get("episode_id"))
                return 200, {"episode_id": query["episode_id"], "step_count": ep.steps,
                             "done": bool(ep.last and ep.last["done"])}
            if path in ("/reset", "/step", "/close") or path.startswith("/hook/"):
                if method != "POST":
                    raise _Fail(405, f"{path} takes POST")
                if not isinstance(body, dict):
                    raise _Fail(400, "the request body must be a JSON object")
                if path == "/reset":
                    return 200, self.reset(body)
                if path == "/step":
                    return 200, self.step(body)
                if path == "/close":
                    return 200, {"closed": self._drop(str(body.get("episode_id")))}
                return 200, self.hook(path[len("/hook/"):], body)
            raise _Fail(404, f"no endpoint {method} {path} (the protocol: GET /health, /metadata, "
                             "/state; POST /reset, /step, /close, /hook/<name>)")
        except _Fail as f:
            return f.status, {"error": f.message}

    def reset(self, body: dict[str, Any]) -> dict[str, Any]:
        seed, options = body.get("seed"), body.get("options")
        if seed is not None and not is_int(seed):
            raise _Fail(400, f"seed must be an integer or null, got {seed!r}")
        if options is not None and not isinstance(options, dict):
            raise _Fail(400, "options must be an object or null")
        episode_id = body.get("episode_id")
        if episode_id is None:
            episode_id = uuid.uuid4().hex
        if not isinstance(episode_id, str) or not episode_id or len(episode_id) > 255:
            raise _Fail(400, "episode_id must be a non-empty string of at most 255 characters")
        try:
            ep = self._open(episode_id)
        except Exception as e:  # noqa: BLE001  (the user's env: report whatever it raised)
            raise _env_error("its constructor", e) from None
        with ep.lock:
            try:
                obs, info = ep.env.reset(seed=seed, options=options)
            except Exception as e:  # noqa: BLE001
                self._drop(episode_id)
                raise _env_error("reset()", e) from None
            self._check_text(episode_id, obs)
            ep.steps, ep.last = 0, None
            doc = {"episode_id": episode_id, "observation": {"text": obs}, "reward": None,
                   "done": False, "metadata": info}
            return self._with_state(ep, doc)

    def _check_text(self, episode_id: Any, obs: Any) -> None:
        """A text env's observation is a str: anything else ends the episode with a 500."""
        if not isinstance(obs, str):
            self._drop(episode_id)
            raise _Fail(500, f"the env returned a {type(obs).__name__} observation; text envs "
                             "return str")

    def step(self, body: dict[str, Any]) -> dict[str, Any]:
        episode_id = body.get("episode_id")
        ep = self._find(episode_id)
        action = body.get("action")
        if isinstance(action, dict):
            action = action.get("text")
        if not isinstance(action, str):
            raise _Fail(400, 'action must be {"text": "..."} (or a string)')
        index = body.get("step_index")
        if index is not None and not is_int(index):
            raise _Fail(400, f"step_index must be an integer, got {index!r}")
        reasoning = body.get("ground")  # a STEP_HOOKS argument: ground it before the step
        if reasoning is not None and ("ground" not in self.hooks or not isinstance(reasoning, str)):
            raise _Fail(400, "ground must be the reasoning text, for an env with a ground hook")
        with ep.lock:
            if index is not None and index == ep.steps and ep.last is not None:
                return ep.last  # a retried step: the same answer, not a second step
            if index is not None and index != ep.steps + 1:
                raise _Fail(409, f"step_index {index}, but episode {episode_id!r} has taken "
                                 f"{ep.steps} steps")
            if reasoning is not None:
                try:
                    verdict = ep.env.unwrapped.ground(reasoning)
                except Exception as e:  # noqa: BLE001  (the episode fails, as in-process)
                    self._drop(episode_id)
                    raise _env_error("ground()", e) from None
            try:
                obs, reward, terminated, truncated, info = ep.env.step(action)
                reward = float(reward)
            except Exception as e:  # noqa: BLE001
                self._drop(episode_id)
                raise _env_error("step()", e) from None
            self._check_text(episode_id, obs)
            ep.steps += 1
            ep.last = self._with_state(ep, {
                "observation": {"text": obs}, "reward": reward,
                "done": bool(terminated or truncated), "terminated": bool(terminated),
                "truncated": bool(truncated), "metadata": info})
            if reasoning is not None:
                ep.last["ground"] = verdict
            return ep.last

    def _with_state(self, ep: _Episode, doc: dict[str, Any]) -> dict[str, Any]:
        """``doc`` with the values of the env's :data:`STATE_HOOKS` in the new state (one that
        raises is left out: asked for on its own, it reports the error)."""
        for name in STATE_HOOKS:
            if name in self.hooks:
                try:
                    doc[name] = getattr(ep.env.unwrapped, name)()
                except Exception:  # noqa: BLE001
                    pass
        return doc

    def hook(self, name: str, body: dict[str, Any]) -> dict[str, Any]:
        if name not in self.hooks:
            raise _Fail(404, f"this env has no hook {name!r} (it has: {', '.join(self.hooks) or 'none'})")
        args = body.get("args", [])
        if not isinstance(args, list):
            raise _Fail(400, "args must be a list")
        if body.get("episode_id") is None:
            env, lock = self._scratch, self._scratch_lock
        else:
            ep = self._find(body["episode_id"])
            env, lock = ep.env, ep.lock
        with lock:
            try:
                result = getattr(env.unwrapped, name)(*args)
            except Exception as e:  # noqa: BLE001
                raise _env_error(f"{name}()", e) from None
        return {"result": result}

    def close(self) -> None:
        with self._lock:
            ids = list(self._episodes)
        for k in ids:
            self._drop(k)
        self._scratch.close()


def _default(o: Any) -> Any:
    """JSON for what ``json`` does not know: numpy values and arrays, sets; anything else as text."""
    if hasattr(o, "tolist"):
        return o.tolist()
    if isinstance(o, (set, frozenset)):
        return sorted(o, key=str)
    return str(o)


def to_json(doc: Any) -> bytes:
    return json.dumps(doc, default=_default).encode()


class RequestHandler(BaseHTTPRequestHandler):
    """HTTP/1.1 with kept-alive connections; every answer a JSON object with its length."""

    protocol_version = "HTTP/1.1"
    server_version = "ragen2-env"
    # headers and body leave in two writes: without TCP_NODELAY the body waits for the client's
    # delayed ACK of the headers (40 ms a request on Linux)
    disable_nagle_algorithm = True
    timeout = 600  # an idle kept-alive connection is closed (the client opens a new one)

    def do_GET(self) -> None:  # noqa: N802  (http.server's names)
        self.respond(*self.answer("GET"))

    def do_POST(self) -> None:  # noqa: N802
        self.respond(*self.answer("POST"))

    def answer(self, method: str) -> tuple[int, dict[str, Any]]:
        url = urllib.parse.urlsplit(self.path)
        query = dict(urllib.parse.parse_qsl(url.query))
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            self.close_connection = True  # the body's end is unknown: this connection is done
            return 400, {"error": "Content-Length is not a number"}
        raw = self.rfile.read(length) if length > 0 else b""
        body = None
        if method == "POST":
            try:
                body = json.loads(raw) if raw else {}
            except ValueError:
                return 400, {"error": "the request body is not JSON"}
        return self.server.env_server.handle(method, url.path, query, body)  # type: ignore[attr-defined]

    def respond(self, status: int, doc: Any) -> None:
        self.send_bytes(status, to_json(doc))

    def send_bytes(self, status: int, payload: bytes) -> None:
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)
        except (BrokenPipeError, ConnectionResetError):  # the client gave up: nothing to tell it
            self.close_connection = True

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        if getattr(self.server, "verbose", False):
            super().log_message(format, *args)


def make_http_server(env_server: EnvServer, host: str = "127.0.0.1", port: int = 0,
                     handler: type[BaseHTTPRequestHandler] = RequestHandler,
                     verbose: bool = False) -> ThreadingHTTPServer:
    """A bound (not yet serving) ``ThreadingHTTPServer``; with ``port=0`` the OS assigns the port,
    to the socket that keeps it (``server.server_address[1]``): nothing can take it meanwhile."""
    server = ThreadingHTTPServer((host, port), handler)
    server.daemon_threads = True
    server.env_server = env_server  # type: ignore[attr-defined]
    server.verbose = verbose  # type: ignore[attr-defined]
    return server


def server_url(server: ThreadingHTTPServer) -> str:
    host, port = server.server_address[:2]
    if host in ("0.0.0.0", ""):
        host = socket.getfqdn()
    return f"http://{host}:{port}"


def start(make_env: Callable[[], gym.Env], name: str, host: str = "127.0.0.1", port: int = 0,
          verbose: bool = False, **kwargs: Any) -> tuple[ThreadingHTTPServer, str]:
    """An env server serving on a daemon thread of this process: (server, its URL). Stop it with
    ``server.shutdown(); server.server_close()``. ``kwargs`` go to :class:`EnvServer`."""
    server = make_http_server(EnvServer(make_env, name, **kwargs), host, port, verbose=verbose)
    threading.Thread(target=server.serve_forever, name="env-server", daemon=True).start()
    return server, server_url(server)


def write_url_file(path: str, urls: Sequence[str]) -> None:
    """The URL (one process) or the Hydra list of URLs (several), ready for
    ``env.kwargs.url=$(cat PATH)``; written whole or not at all."""
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "w") as f:
        f.write(url_value(urls) + "\n")
    os.replace(tmp, path)


def url_value(urls: Sequence[str]) -> str:
    """``env.kwargs.url``'s value for these servers: the URL, or a Hydra list of them."""
    return urls[0] if len(urls) == 1 else "[" + ",".join(urls) + "]"


def _serve_forever(server: ThreadingHTTPServer) -> None:
    try:
        server.serve_forever()
    except KeyboardInterrupt:  # Ctrl-C, or SIGTERM (see serve)
        pass
    finally:
        server.server_close()
        server.env_server.close()  # type: ignore[attr-defined]


def _child(make_env: Callable[[], gym.Env], name: str, host: str, verbose: bool,
           kwargs: dict[str, Any], queue: Any) -> None:
    try:
        server = make_http_server(EnvServer(make_env, name, **kwargs), host, 0, verbose=verbose)
    except Exception as e:  # noqa: BLE001  (told to the parent, which exits with it)
        queue.put(("error", f"{type(e).__name__}: {e}"))
        return
    queue.put(("url", server_url(server)))
    _serve_forever(server)


def serve(make_env: Callable[[], gym.Env], name: str, *, host: str = "127.0.0.1", port: int = 0,
          processes: int = 1, url_file: str | None = None, verbose: bool = False,
          announce: Callable[[str], None] = print, **kwargs: Any) -> int:
    """Serve until interrupted (Ctrl-C, SIGTERM); the exit status. ``processes > 1``: that many
    server processes (forked), each on a port the OS assigns, announced together (the client
    spreads its episodes over them). ``kwargs`` go to :class:`EnvServer`."""
    if processes < 1:
        raise ValueError(f"processes must be >= 1, got {processes}")
    if processes > 1 and port != 0:
        raise ValueError("with several processes each binds a port of its own: leave --port at 0")

    def stop(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)
    if processes == 1:
        server = make_http_server(EnvServer(make_env, name, **kwargs), host, port, verbose=verbose)
        _announce(name, [server_url(server)], url_file, announce)
        _serve_forever(server)
        return 0

    import multiprocessing as mp
    import queue as queues
    from multiprocessing.connection import wait

    ctx = mp.get_context("fork")
    queue = ctx.Queue()
    procs = [ctx.Process(target=_child, args=(make_env, name, host, verbose, dict(kwargs), queue))
             for _ in range(processes)]
    for p in procs:
        p.start()
    try:
        urls: list[str] = []
        while len(urls) < processes:
            try:
                kind, value = queue.get(timeout=1.0)
            except queues.Empty:
                if any(p.exitcode is not None for p in procs):
                    kind, value = "error", "it exited before it listened"
                else:
                    continue
            if kind == "error":
                print(f"ragen2 serve-env: a server process failed to start: {value}",
                      file=sys.stderr)
                return 1
            urls.append(value)
        _announce(name, sorted(urls), url_file, announce)
        wait([p.sentinel for p in procs])  # until one of them ends
        print("ragen2 serve-env: a server process ended; stopping the others", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 0
    finally:
        for p in procs:
            if p.is_alive():
                p.terminate()
        for p in procs:
            p.join(timeout=10)


def _announce(name: str, urls: list[str], url_file: str | None,
              announce: Callable[[str], None]) -> None:
    if url_file:
        write_url_file(url_file, urls)
    announce(f"serving {name} at {url_value(urls)}\n"
             f"train on it: ragen2 train env.id=ragen2/Remote-v0 env.kwargs.url={url_value(urls)}")
