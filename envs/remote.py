"""An environment in another process, behind HTTP: the client, ``ragen2/Remote-v0``.

``RemoteTextEnv`` is a plain Gymnasium text env whose ``reset``/``step`` are HTTP/JSON requests to
an env server (``ragen2 serve-env``, :mod:`ragen2_envs.remote_server`, or any server that speaks
the protocol of docs/reference/env-protocol.md, in any language), so the rest of ragen2 needs no
change: ``env.id=ragen2/Remote-v0 env.kwargs.url=http://127.0.0.1:PORT``. Standard library only.

The optional hooks (``problem_key``, ``problem_keys``, ``ground``, ``demonstration``,
``state_coordinates``) and the ``instructions`` / ``valid_actions`` attributes are the server env's:
the server lists the hooks it has in ``GET /metadata``, and a hook it lacks is ``None`` here
(ragen2's opt-out), so a remote env is split and monitored exactly as the same env in-process.
``problem_key`` comes with the reset's answer and ``state_coordinates`` with every reset's and
step's, so neither costs a request of its own; a server that lists ``ground`` in its metadata's
``step_hooks`` takes a turn's reasoning with the step and answers the verdict with it
(:meth:`RemoteTextEnv.ground_with_step`), so a turn of the default job is one request. Other hooks the server lists are forwarded too
(``env.unwrapped.<name>(*args)``), unless the name is one of the client's own (``render``, ...).

Faults: every request has a timeout (``timeout_s``) and up to ``retries`` retries with exponential
backoff; a request that still fails raises :class:`RemoteEnvError`, which ends that episode only
(ragen2's env-error path). A step is retried after a timeout or a dropped connection only when the
server replays steps (``idempotent_steps`` in its metadata: a repeated ``step_index`` answers the
same response without stepping again); a refused connection is always retried. When the server has
answered no request of this process for ``down_after_s`` seconds, the next failure raises
:class:`EnvServerDown`, whose ``stops_run`` makes the rollout stop the run with that message.
"""

from __future__ import annotations

import functools
import http.client
import itertools
import json
import threading
import time
import urllib.parse
import uuid
from typing import Any, Sequence

import gymnasium as gym
from gymnasium import spaces

from .checks import OBS_CHARSET, is_int, is_real

__all__ = ["PROTOCOL", "HOOKS", "STATE_HOOKS", "STEP_HOOKS", "RemoteTextEnv", "RemoteEnvError", "EnvServerDown",
           "RemoteEnvConfigError"]

#: the protocol's name and version, in ``GET /metadata`` as ``protocol``
PROTOCOL = "ragen2-env/1"
#: the optional env methods the protocol carries (``POST /hook/<name>``)
HOOKS = ("problem_key", "problem_keys", "ground", "demonstration", "state_coordinates")
#: the hooks without arguments whose value a state has: sent with every reset's and step's answer
#: (a field of that name), so asking for them after a reset or step costs no request
STATE_HOOKS = ("problem_key", "state_coordinates")
#: the hooks a step request may carry, each on the state before the step: the request's field of
#: that name holds the hook's argument, the answer's field its result (a server lists the ones it
#: takes in its metadata's ``step_hooks``; with others the client asks ``/hook/<name>`` first)
STEP_HOOKS = ("ground",)
#: answers that mean "not now" (a proxy without its backend, an overloaded server): retried
RETRY_STATUSES = frozenset({502, 503, 504})
#: the longest wait between two attempts of one request
MAX_BACKOFF_S = 10.0


class RemoteEnvError(RuntimeError):
    """A request for this episode failed after its retries, or the server's answer is malformed or
    an error: the episode fails (``env_error``), the run goes on."""


class EnvServerDown(RemoteEnvError):
    """The server answered no request for ``down_after_s`` seconds: the run stops."""

    #: the rollout loop re-raises an env exception with ``stops_run`` instead of failing one episode
    stops_run = True


class RemoteEnvConfigError(ValueError):
    """The client cannot start: a bad URL or setting, no server at the URL, the wrong env behind
    it (a ValueError, so ``ragen2 train`` reports it before any work starts)."""


class _Health:
    """Whether a server answers, shared by every client of it in this process."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.failing_since: float | None = None
        self.failures = 0

    def answered(self) -> None:
        with self.lock:
            self.failing_since, self.failures = None, 0

    def failed(self, now: float) -> tuple[float, int]:
        """Record a failed attempt; (seconds since the server last answered, failures since)."""
        with self.lock:
            if self.failing_since is None:
                self.failing_since = now
            self.failures += 1
            return now - self.failing_since, self.failures


_LOCK = threading.Lock()
_HEALTH: dict[str, _Health] = {}
_METADATA: dict[str, dict[str, Any]] = {}
_TURNS: dict[tuple[str, ...], "itertools.count[int]"] = {}


def _health(base: str) -> _Health:
    with _LOCK:
        return _HEALTH.setdefault(base, _Health())


def _parse_url(url: Any) -> tuple[str, str, int, str]:
    """(scheme, host, port, path prefix) of a server URL, or :class:`RemoteEnvConfigError`."""
    if not isinstance(url, str) or not url.strip():
        raise RemoteEnvConfigError(f"url must be the env server's address, e.g. "
                                   f"http://127.0.0.1:8000, got {url!r}")
    parts = urllib.parse.urlsplit(url.strip())
    try:
        port = parts.port
    except ValueError as e:
        raise RemoteEnvConfigError(f"url {url!r}: {e}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise RemoteEnvConfigError(f"url {url!r} is not an http:// or https:// address with a host")
    return (parts.scheme, parts.hostname, port or (443 if parts.scheme == "https" else 80),
            parts.path.rstrip("/"))


class RemoteTextEnv(gym.Env):
    """A text env served over HTTP (docs/reference/env-protocol.md).

    ``url``: the server (``http://host:port``, optionally with a path prefix), or a list of
    servers serving the same env (``ragen2 serve-env --processes N`` prints one): each instance
    keeps one of them, taken in turn, for all its episodes. ``env_id``: when set, the server must
    serve this env (its metadata ``name``), else construction fails. ``timeout_s``: seconds per
    attempt of a request; ``retries``: further attempts after a failed one, ``backoff_s`` before
    the first retry, doubling (at most 10 s); ``down_after_s``: a server that has answered nothing
    for this long stops the run (:class:`EnvServerDown`).
    """

    metadata = {"render_modes": []}
    #: the time source and the wait between attempts (replaced by fake clocks in tests)
    clock = staticmethod(time.monotonic)
    sleep = staticmethod(time.sleep)

    def __init__(self, url: str | Sequence[str], env_id: str | None = None,
                 timeout_s: float = 60.0, retries: int = 2, backoff_s: float = 0.5,
                 down_after_s: float = 60.0, render_mode: str | None = None) -> None:
        urls = [url] if isinstance(url, str) else list(url) if isinstance(url, Sequence) else [url]
        if not urls:
            raise RemoteEnvConfigError("url: give at least one env server address")
        for u in urls:
            _parse_url(u)
        for name, value, low in (("timeout_s", timeout_s, 0.0), ("backoff_s", backoff_s, 0.0),
                                 ("down_after_s", down_after_s, 0.0)):
            if not is_real(value) or value < low or (name == "timeout_s" and value == 0):
                raise RemoteEnvConfigError(f"{name} must be a number >= 0 (timeout_s > 0), "
                                           f"got {value!r}")
        if not is_int(retries) or retries < 0:
            raise RemoteEnvConfigError(f"retries must be an integer >= 0, got {retries!r}")
        if render_mode is not None:
            raise RemoteEnvConfigError(f"render_mode must be None, got {render_mode!r}")
        key = tuple(u.strip() for u in urls)
        with _LOCK:
            turn = next(_TURNS.setdefault(key, itertools.count()))
        self.url = key[turn % len(key)].rstrip("/")
        self._scheme, self._host, self._port, self._prefix = _parse_url(self.url)
        self._base = f"{self._scheme}://{self._host}:{self._port}{self._prefix}"
        self.timeout_s, self.retries = float(timeout_s), int(retries)
        self.backoff_s, self.down_after_s = float(backoff_s), float(down_after_s)
        self.render_mode = None
        self._conn: http.client.HTTPConnection | None = None
        self._conn_lock = threading.Lock()
        self._episode: str | None = None
        self._steps = 0
        self._state: dict[str, Any] = {}  # the STATE_HOOKS values the last answer carried
        self._pending_ground: str | None = None  # reasoning the next step carries
        self._grounded: tuple[str, Any] | None = None  # (reasoning, verdict) the last step carried

        meta = self._server_metadata()
        served = meta.get("name")
        if env_id is not None and env_id not in (served, str(served).split(":")[-1]):
            raise RemoteEnvConfigError(f"the server at {self.url} serves {served!r}, not "
                                       f"env_id={env_id!r}")
        self.served_env = served
        hooks = meta.get("hooks") or []
        if not isinstance(hooks, list) or not all(isinstance(h, str) for h in hooks):
            raise RemoteEnvConfigError(f"{self.url}/metadata: hooks must be a list of names, got "
                                       f"{hooks!r}")
        for name in HOOKS:  # a hook the server lacks is None: ragen2's opt-out
            if name not in hooks:
                setattr(self, name, None)
        for name in hooks:  # further hooks: forwarded, unless the name is the client's own
            if name not in HOOKS and name.isidentifier() and not name.startswith("_") \
                    and not hasattr(type(self), name):
                setattr(self, name, functools.partial(self._hook, name))
        self._idempotent = bool(meta.get("idempotent_steps", False))
        step_hooks = meta.get("step_hooks") or []
        self._step_hooks = frozenset(h for h in STEP_HOOKS if h in hooks and
                                     isinstance(step_hooks, list) and h in step_hooks)
        if isinstance(meta.get("instructions"), str):
            self.instructions = meta["instructions"]
        actions = meta.get("valid_actions")
        if isinstance(actions, list) and all(isinstance(a, str) for a in actions):
            self.valid_actions = tuple(actions)
        self.observation_space = spaces.Text(max_length=1 << 20, min_length=0,
                                             charset=OBS_CHARSET + "\t\r")
        self.action_space = spaces.Text(max_length=1 << 16, min_length=0, charset=OBS_CHARSET)

    # ------------------------------------------------------------------ transport
    def _server_metadata(self) -> dict[str, Any]:
        """``GET /metadata``, once per server and process."""
        with _LOCK:
            meta = _METADATA.get(self._base)
        if meta is None:
            try:
                meta = self._request("GET", "/metadata", None, "metadata")
            except RemoteEnvError as e:
                raise RemoteEnvConfigError(
                    f"no env server answers at {self.url} ({e}); start one with "
                    "`ragen2 serve-env <env id>` (docs/tutorials/remote-env.md)") from None
            with _LOCK:
                _METADATA[self._base] = meta
        return meta

    def _drop_connection(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def _send(self, method: str, path: str, body: Any, fresh: bool = False) -> tuple[int, bytes]:
        """One attempt: (status, body). A kept-alive connection the server closed meanwhile is
        reopened once; ``fresh``: a new connection, never a resend (a step the server does not
        replay)."""
        data = None if body is None else json.dumps(body).encode()
        headers = {"Accept": "application/json"}
        if data is not None:
            headers["Content-Type"] = "application/json"
        with self._conn_lock:
            if fresh:
                self._drop_connection()
            for _ in range(2):
                reused = self._conn is not None
                if self._conn is None:
                    cls = (http.client.HTTPSConnection if self._scheme == "https"
                           else http.client.HTTPConnection)
                    self._conn = cls(self._host, self._port, timeout=self.timeout_s)
                try:
                    self._conn.request(method, self._prefix + path, body=data, headers=headers)
                    resp = self._conn.getresponse()
                    payload = resp.read()
                except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError):
                    self._drop_connection()
                    if reused:
                        continue
                    raise
                except BaseException:
                    self._drop_connection()
                    raise
                if resp.will_close:
                    self._drop_connection()
                return resp.status, payload
        raise AssertionError("unreachable")  # pragma: no cover

    def _request(self, method: str, path: str, body: Any, what: str,
                 replayable: bool = True) -> dict[str, Any]:
        """A request with retries; its JSON object, or :class:`RemoteEnvError`.
        ``replayable=False``: only a refused connection (nothing sent) is retried."""
        health = _health(self._base)
        attempts = 1 + self.retries
        for attempt in range(attempts):
            try:
                status, payload = self._send(method, path, body, fresh=not replayable)
                if status in RETRY_STATUSES:
                    raise _Unavailable(f"the server answered {status}: {_snippet(payload)}")
            except (OSError, http.client.HTTPException, _Unavailable) as e:
                if isinstance(e, TimeoutError):
                    error = f"no answer within timeout_s={self.timeout_s:g}"
                else:
                    error = f"{type(e).__name__}: {e}" if not isinstance(e, _Unavailable) else str(e)
                down_s, failures = health.failed(self.clock())
                if down_s >= self.down_after_s:
                    raise EnvServerDown(
                        f"the env server at {self.url} has answered no request for {down_s:.0f} s "
                        f"(down_after_s={self.down_after_s:g}; {failures} failed attempts; last: "
                        f"{what}: {error}): is it still running?") from None
                retry = replayable or isinstance(e, ConnectionRefusedError)
                if attempt + 1 >= attempts or not retry:
                    tries = f"{attempt + 1} attempt{'s' if attempt else ''}"
                    raise RemoteEnvError(f"{what} at {self.url}: {error} ({tries})") from None
                self.sleep(min(self.backoff_s * 2 ** attempt, MAX_BACKOFF_S))
                continue
            health.answered()
            return _decode(status, payload, f"{what} at {self.url}")
        raise AssertionError("unreachable")  # pragma: no cover

    # ------------------------------------------------------------------ gym API
    def reset(self, *, seed: int | None = None,
              options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        super().reset(seed=seed)
        if self._episode is None:
            self._episode = uuid.uuid4().hex
        body: dict[str, Any] = {"episode_id": self._episode, "seed": seed}
        if options:
            body["options"] = options
        self._state, self._pending_ground, self._grounded = {}, None, None
        try:
            doc = self._request("POST", "/reset", body, "reset")
            obs, info = _observation(doc, "reset"), _info(doc, "reset")
        except RemoteEnvError:
            self._episode = None
            raise
        if isinstance(doc.get("episode_id"), str) and doc["episode_id"]:
            self._episode = doc["episode_id"]  # a server may name its episodes itself
        self._state = {k: doc[k] for k in STATE_HOOKS if k in doc}
        self._steps = 0
        return obs, info

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        if self._episode is None:
            raise RemoteEnvError("step() before a successful reset()")
        self._steps += 1
        body = {"episode_id": self._episode, "action": {"text": str(action)},
                "step_index": self._steps}
        reasoning, self._pending_ground, self._grounded = self._pending_ground, None, None
        if reasoning is not None:
            body["ground"] = reasoning
        what = f"step {self._steps}"
        self._state = {}
        try:
            doc = self._request("POST", "/step", body, what, replayable=self._idempotent)
            obs, info = _observation(doc, what), _info(doc, what)
            if reasoning is not None and "ground" not in doc:
                raise RemoteEnvError(f"{what} at {self.url}: malformed answer: no \"ground\" "
                                     "though the request carried the reasoning (the server lists "
                                     "ground in its step_hooks)")
            reward = doc.get("reward")
            if reward is None:
                reward = 0.0
            if not is_real(reward):
                raise RemoteEnvError(f"{what} at {self.url}: malformed answer: reward {reward!r} "
                                     "is not a number")
            flags = {}
            for k in ("done", "terminated", "truncated"):
                if k in doc and not isinstance(doc[k], bool):
                    raise RemoteEnvError(f"{what} at {self.url}: malformed answer: {k} "
                                         f"{doc[k]!r} is not true/false")
                flags[k] = doc.get(k)
        except RemoteEnvError:
            self._episode = None  # the server's episode is in an unknown state
            raise
        self._state = {k: doc[k] for k in STATE_HOOKS if k in doc}
        if reasoning is not None:
            self._grounded = (reasoning, doc["ground"])
        done = bool(flags["done"])
        terminated = done if flags["terminated"] is None else flags["terminated"]
        truncated = bool(flags["truncated"]) and not terminated
        return obs, float(reward), bool(terminated), truncated, info

    def close(self) -> None:
        """Ends the server's episode (best effort, one attempt) and the connection."""
        if self._episode is not None:
            try:
                self._send("POST", "/close", {"episode_id": self._episode})
            except (OSError, http.client.HTTPException):
                pass
            self._episode = None
        with self._conn_lock:
            self._drop_connection()
        super().close()

    # ------------------------------------------------------------------ hooks
    def _hook(self, name: str, *args: Any) -> Any:
        body = {"args": list(args)}
        if self._episode is not None:
            body["episode_id"] = self._episode
        return self._request("POST", f"/hook/{name}", body, f"{name}()").get("result")

    def _state_hook(self, name: str) -> Any:
        """A :data:`STATE_HOOKS` value: from the last answer, else asked for."""
        return self._state[name] if name in self._state else self._hook(name)

    def problem_key(self) -> str:
        """The problem of the current episode (sent with the reset's answer)."""
        key = self._state_hook("problem_key")
        if not isinstance(key, str):
            raise RemoteEnvError(f"problem_key() at {self.url}: malformed answer {key!r}")
        return key

    def problem_keys(self) -> list[str] | None:
        keys = self._hook("problem_keys")
        if keys is not None and not isinstance(keys, list):
            raise RemoteEnvError(f"problem_keys() at {self.url}: malformed answer (not a list)")
        return keys

    def ground(self, reasoning: str) -> Any:
        """The server env's verdict (None or a share in [0, 1]; the rollout loop checks it): the
        one the last step carried for this reasoning (:meth:`ground_with_step`), else asked for."""
        if self._grounded is not None and self._grounded[0] == reasoning:
            verdict, self._grounded = self._grounded[1], None
            return verdict
        return self._hook("ground", reasoning)

    def ground_with_step(self, reasoning: str) -> bool:
        """True when the server grounds with steps (``ground`` in its ``step_hooks``): the next
        step carries ``reasoning`` and its answer the verdict, on the state before the step, which
        ``ground(reasoning)`` then returns without a request of its own. False: ask ``ground``
        before the step (the runner's fallback, a request of its own)."""
        if "ground" not in self._step_hooks:
            return False
        self._pending_ground = reasoning
        return True

    def state_coordinates(self) -> Any:
        """The server env's coordinates of the current state (the rollout loop checks them)."""
        return self._state_hook("state_coordinates")

    def demonstration(self) -> tuple[str, str]:
        pair = self._hook("demonstration")
        if not (isinstance(pair, list) and len(pair) == 2 and all(isinstance(x, str) for x in pair)):
            raise RemoteEnvError(f"demonstration() at {self.url}: malformed answer {pair!r} "
                                 "(expected [reasoning, action])")
        return pair[0], pair[1]


class _Unavailable(Exception):
    """An answer that means "not now" (:data:`RETRY_STATUSES`)."""


def _snippet(payload: bytes, n: int = 200) -> str:
    text = payload[:n].decode("utf-8", "replace")
    return repr(text) + ("..." if len(payload) > n else "")


def _decode(status: int, payload: bytes, what: str) -> dict[str, Any]:
    try:
        doc = json.loads(payload)
    except ValueError:
        doc = None
    if status >= 400:
        reason = doc.get("error") if isinstance(doc, dict) else None
        raise RemoteEnvError(f"{what}: the server answered {status}: "
                             f"{reason if isinstance(reason, str) else _snippet(payload)}")
    if not isinstance(doc, dict):
        raise RemoteEnvError(f"{what}: malformed answer (not a JSON object): {_snippet(payload)}")
    return doc


def _observation(doc: dict[str, Any], what: str) -> str:
    """The observation text: ``{"text": ...}`` (OpenEnv's observation object) or a bare string."""
    obs = doc.get("observation")
    if isinstance(obs, dict):
        obs = obs.get("text")
    if not isinstance(obs, str):
        raise RemoteEnvError(f"{what}: malformed answer: no observation text "
                             f"(observation: {doc.get('observation')!r:.200})")
    return obs


def _info(doc: dict[str, Any], what: str) -> dict[str, Any]:
    info = doc.get("metadata")
    if info is None:
        return {}
    if not isinstance(info, dict):
        raise RemoteEnvError(f"{what}: malformed answer: metadata {info!r:.200} is not an object")
    return info
