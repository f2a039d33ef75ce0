"""An env in another process (``ragen2/Remote-v0`` against an env server): the protocol's round
trip against the in-process env, concurrent episodes, the optional hooks, and every fault.

Every server here runs in this process on a thread, bound to port 0 (the OS assigns the port to
the socket that keeps it: no port is ever picked and then bound). No test bounds wall time: a fault
that must time out meets a server that blocks until the test releases it, the stays-down budget
runs on a fake clock, and retries on a fake sleep.
"""

from __future__ import annotations

import http.client
import json
import re
import socket
import subprocess
import sys
import threading
import urllib.parse
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import gymnasium as gym
import pytest

import ragen2_envs  # noqa: F401  (registers the ids)
from ragen2_envs import remote
from ragen2_envs.remote import EnvServerDown, RemoteEnvConfigError, RemoteEnvError, RemoteTextEnv
from ragen2_envs.remote_server import RequestHandler
from tests.remote_faults import LAKE, Server

ROOT = Path(__file__).resolve().parents[2]
ACTIONS = ["Down", "Right", "Jump!", "Down", "Right", "Up", "Left", "Down", "Right", "Down"]
REASONINGS = ["I am at row 1, column 1.", "I'm at row 2, column 3. You are at row 1, column 1.",
              "The goal is at row 4, column 4.", ""]


@pytest.fixture(autouse=True)
def fresh_client_state():
    """What the client keeps per server URL (metadata, health) is forgotten between tests: a port
    the OS gave one test's server may be given to a later one's."""
    for table in (remote._METADATA, remote._HEALTH, remote._TURNS):
        table.clear()


@pytest.fixture
def server():
    s = Server()
    yield s
    s.close()


@pytest.fixture
def no_sleep(monkeypatch):
    """Retries wait on a fake sleep, which records the waits."""
    waits: list[float] = []
    monkeypatch.setattr(RemoteTextEnv, "sleep", staticmethod(waits.append))
    return waits


def client(url: str, **kwargs) -> gym.Env:
    return gym.make("ragen2/Remote-v0", url=url, **kwargs)


def play(env: gym.Env, seed: int, actions=ACTIONS) -> list:
    """Everything an episode shows: observations, rewards, flags, info and every hook's answer."""
    inner = env.unwrapped
    out = [env.reset(seed=seed), inner.problem_key()]
    for action in actions:
        out.append([inner.ground(r) for r in REASONINGS])
        out.append(inner.demonstration())
        if callable(getattr(inner, "state_coordinates", None)):
            out.append(inner.state_coordinates())
        step = env.step(action)
        out.append(step)
        if step[2] or step[3]:
            break
    return out


# ---------------------------------------------------------------------- the protocol
def test_round_trip_matches_the_in_process_env(server):
    local, remote_env = gym.make(LAKE), client(server.url)
    for seed in (0, 1, 7, 2**31 + 5):
        assert play(remote_env, seed) == play(local, seed)
    inner = remote_env.unwrapped
    assert inner.valid_actions == local.unwrapped.valid_actions
    assert inner.instructions == local.unwrapped.instructions
    assert inner.problem_keys() is None and inner.served_env == LAKE
    remote_env.close()
    assert server.env_server.episodes == 0
    # problem_key and state_coordinates come with the answers: no request of their own
    assert server.seen("/hook/problem_key") == server.seen("/hook/state_coordinates") == 0


def test_an_enumerated_problem_space_over_http():
    s = Server("ragen2/Math-v0", difficulty=1, max_operand=3)
    try:
        env, local = client(s.url), gym.make("ragen2/Math-v0", difficulty=1, max_operand=3)
        assert env.unwrapped.problem_keys() == local.unwrapped.problem_keys()
        assert env.reset(seed=3) == local.reset(seed=3)
        assert env.unwrapped.problem_key() == local.unwrapped.problem_key()
        assert env.step("7") == local.step("7")
    finally:
        s.close()


def test_the_split_and_grounding_see_the_remote_env_as_the_local_one(server):
    from ragen2.rollout.runner import ground_reasoning, grounding_hook
    from ragen2.rollout.split import HELDOUT, TRAIN, enumerated_keys, key_function, resolve

    env, local = client(server.url), gym.make(LAKE)
    assert key_function(env) is not None and grounding_hook(env) is not None
    assert enumerated_keys(env) is None
    for seed, part in ((3, TRAIN), (2**31 + 3, HELDOUT)):
        assert resolve(env, seed, part, 0.5) == resolve(local, seed, part, 0.5)
        assert ground_reasoning(env, REASONINGS[0]) == ground_reasoning(local, REASONINGS[0])


def test_an_env_without_hooks_has_none_over_http():
    from ragen2.rollout.runner import grounding_hook
    from ragen2.rollout.split import key_function
    import tests.plain_env  # noqa: F401

    s = Server("PlainGuess-v0")
    try:
        env = client(s.url)
        inner = env.unwrapped
        assert key_function(env) is None and grounding_hook(env) is None
        assert inner.demonstration is None and inner.problem_keys is None
        assert not hasattr(inner, "valid_actions") and not hasattr(inner, "some_hook")
        obs, info = env.reset(seed=1)
        assert obs.startswith("Guess") and info == {}
    finally:
        s.close()


class HintLake(ragen2_envs.FrozenLakeTextEnv):
    """FrozenLake with one more method, served as a further hook (``--hook hint``)."""

    def hint(self, prefix: str) -> str:
        return f"{prefix} {self.demonstration()[1]}"


if "RemoteTestHintLake-v0" not in gym.registry:
    gym.register(id="RemoteTestHintLake-v0", entry_point=HintLake)


def test_a_further_hook_is_forwarded():
    s = Server("RemoteTestHintLake-v0")
    try:
        s.env_server.hooks += ("hint", "render")  # as `ragen2 serve-env ... --hook hint` serves it
        s.env_server.metadata["hooks"] += ["hint", "render"]
        local, env = gym.make("RemoteTestHintLake-v0"), client(s.url)
        env.reset(seed=4), local.reset(seed=4)
        assert env.unwrapped.hint("Go") == local.unwrapped.hint("Go")
        assert env.unwrapped.render is not None  # the client's own: not replaced by a hook
        assert not hasattr(env.unwrapped, "holes")
    finally:
        s.close()


def test_episodes_interleave_and_run_concurrently(server):
    seeds = [11, 12, 13, 14, 15, 16]
    expected = {s: play(gym.make(LAKE), s) for s in seeds}
    envs = [client(server.url) for _ in seeds]  # round robin: one step of each in turn
    firsts = [env.reset(seed=s) for env, s in zip(envs, seeds)]
    assert server.env_server.episodes == len(seeds)
    for env, s, first in zip(envs, seeds, firsts):
        assert first == expected[s][0]
    for env in envs:
        env.close()
    with ThreadPoolExecutor(len(seeds)) as pool:  # and each on a thread of its own, twice over
        got = list(pool.map(lambda s: play(client(server.url), s), seeds + seeds))
    assert got == [expected[s] for s in seeds + seeds]


def test_several_server_urls_share_the_episodes():
    a, b = Server(), Server()
    try:
        envs = [client([a.url, b.url]) for _ in range(4)]
        assert sorted(e.unwrapped.url for e in envs) == sorted([a.url, b.url] * 2)
        for i, env in enumerate(envs):
            assert env.reset(seed=i) == gym.make(LAKE).reset(seed=i)
        assert a.env_server.episodes == b.env_server.episodes == 2
    finally:
        a.close(), b.close()


def test_a_retried_reset_or_step_is_not_applied_twice(server):
    env, local = client(server.url), gym.make(LAKE)
    inner = env.unwrapped
    env.reset(seed=5), local.reset(seed=5)
    first = env.step("Right")
    assert first == local.step("Right")
    # the same step_index again (a retry whose first answer was lost): the same answer, no step
    status, doc = _post_status(server.url, "/step", {"episode_id": inner._episode,
                                                     "step_index": 1, "action": {"text": "Down"}})
    assert status == 200 and doc["observation"]["text"] == first[0]
    assert env.step("Down") == local.step("Down")
    status, doc = _post_status(server.url, "/step", {"episode_id": inner._episode,
                                                     "step_index": 9, "action": "Down"})
    assert status == 409 and "has taken 2 steps" in doc["error"]


def _post_status(url: str, path: str, body) -> tuple[int, dict]:
    parts = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=60)
    conn.request("POST", path, body=json.dumps(body).encode())
    resp = conn.getresponse()
    out = resp.status, json.loads(resp.read())
    conn.close()
    return out


def test_bad_requests_get_an_error_not_a_crash(server):
    assert _post_status(server.url, "/step", {"episode_id": "nope", "action": "Up"})[0] == 404
    assert _post_status(server.url, "/reset", {"seed": "zero"})[0] == 400
    assert _post_status(server.url, "/hook/nope", {})[0] == 404
    assert _post_status(server.url, "/teleport", {})[0] == 404
    status, doc = _post_status(server.url, "/reset", {"seed": 3})  # OpenEnv's form: no id
    assert status == 200 and doc["episode_id"] and doc["observation"]["text"]



def test_a_step_carries_the_grounding_of_the_state_before_it(server):
    """``ground_with_step``: the step request carries the reasoning, its answer the verdict on
    the state before the step, which ``ground`` returns without a request; a replayed step
    answers the same verdict. The server lists ``ground`` in its metadata's ``step_hooks``."""
    assert server.env_server.metadata["step_hooks"] == ["ground"]
    env, local = client(server.url), gym.make(LAKE)
    inner = env.unwrapped
    env.reset(seed=5), local.reset(seed=5)
    for i, action in enumerate(("Right", "Down", "Down", "Right", "Down")):
        reasoning = REASONINGS[i % len(REASONINGS)]  # verdicts 1.0, 0.0, None, ... as in-process
        before = local.unwrapped.ground(reasoning)
        assert inner.ground_with_step(reasoning) is True
        step = env.step(action)
        assert step == local.step(action)
        assert inner.ground(reasoning) == before
        if step[2] or step[3]:
            env.reset(seed=5), local.reset(seed=5)
    assert server.seen("/hook/ground") == 0
    inner.ground_with_step(REASONINGS[0])
    env.step("Up")
    verdict = inner.ground(REASONINGS[0])
    status, doc = _post_status(server.url, "/step", {"episode_id": inner._episode,
                                                     "step_index": inner._steps,
                                                     "action": {"text": "Up"},
                                                     "ground": REASONINGS[0]})
    assert status == 200 and doc["ground"] == verdict
    # a verdict answers its own reasoning once; asked again, it is a request of its own
    inner.ground(REASONINGS[0])
    assert server.seen("/hook/ground") == 1


def test_an_old_server_without_step_hooks_is_asked_for_grounding_first(server):
    del server.env_server.metadata["step_hooks"]  # a server of before: no step_hooks
    env = client(server.url)
    env.reset(seed=5)
    assert env.unwrapped.ground_with_step(REASONINGS[0]) is False
    env.step("Right")
    assert server.http.seen[-1][0] == "/step" and "ground" not in server.http.seen[-1][1]


def test_grounding_with_a_step_fails_like_the_hook(server):
    """A step whose grounding the env cannot give fails, unstepped (the episode is dropped, as
    when a step raises); a step carrying a reasoning to an env without ground() is refused; a
    server that lists ground in step_hooks but answers without it fails the episode."""
    env = client(server.url)
    inner = env.unwrapped
    env.reset(seed=5)
    episode = inner._episode
    status, doc = _post_status(server.url, "/step", {"episode_id": episode, "step_index": 1,
                                                     "action": "Right", "ground": 3})
    assert status == 400 and "reasoning" in doc["error"]
    with server.env_server._lock:
        ep = server.env_server._episodes[episode]
    ep.env.unwrapped._player = None  # ground() raises: "called before reset()"
    inner.ground_with_step("I am at row 1, column 1.")
    with pytest.raises(RemoteEnvError, match="the env raised in ground"):
        env.step("Right")
    assert server.env_server.episodes == 0
    env.reset(seed=5)
    server.plan(lambda path, seed, body: "garbage" if path == "/step" else None)
    inner.ground_with_step("I am at row 1, column 1.")
    with pytest.raises(RemoteEnvError):
        env.step("Right")
    assert inner._grounded is None  # a failed step carries no verdict


def test_a_step_answer_without_the_promised_verdict_is_malformed(server):
    class Forgetful(RequestHandler):
        def respond(self, status, doc):
            doc.pop("ground", None) if isinstance(doc, dict) else None
            super().respond(status, doc)

    s = Server(handler=Forgetful)
    try:
        env = client(s.url)
        env.reset(seed=5)
        env.unwrapped.ground_with_step("I am at row 1, column 1.")
        with pytest.raises(RemoteEnvError, match='no "ground"'):
            env.step("Right")
    finally:
        s.close()


def test_health_counts_the_requests_per_endpoint(server):
    env = client(server.url)
    env.reset(seed=1), env.step("Right"), env.unwrapped.demonstration()
    parts = urllib.parse.urlsplit(server.url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=60)
    conn.request("GET", "/health")
    doc = json.loads(conn.getresponse().read())
    conn.close()
    assert doc["requests"] == {"GET /metadata": 1, "POST /reset": 1, "POST /step": 1,
                               "POST /hook/demonstration": 1}


# ---------------------------------------------------------------------- faults
def test_faults_fail_their_episode_only(server, no_sleep):
    """A dropped connection, a malformed answer, an HTML 500, a server that forgot the episode:
    each fails the step of its own episode with the reason; the others go on."""
    faults = {1: "drop", 2: "garbage", 3: "html500"}
    server.plan(lambda path, seed, body: faults.get(seed) if path == "/step" else None)
    reasons = {}
    for seed in (1, 2, 3, 4, 5):
        env = client(server.url, retries=2, backoff_s=0.5)
        env.reset(seed=seed)
        if seed == 4:  # the server restarted meanwhile: it knows the episode no more
            server.env_server._drop(env.unwrapped._episode)
        try:
            env.step("Down")
        except RemoteEnvError as e:
            reasons[seed] = str(e)
            assert not isinstance(e, EnvServerDown)
    assert set(reasons) == {1, 2, 3, 4}
    assert "RemoteDisconnected" in reasons[1] and "(3 attempts)" in reasons[1]
    assert "malformed answer (not a JSON object)" in reasons[2]
    assert "answered 500" in reasons[3] and "Internal Server Error" in reasons[3]
    assert "no episode" in reasons[4] and "restarted" in reasons[4]
    assert no_sleep == [0.5, 1.0]  # only the dropped step was retried, with doubling backoff
    env = client(server.url)  # the client of a failed episode starts a new one on reset
    env.reset(seed=1)
    with pytest.raises(RemoteEnvError):
        env.step("Down")
    assert env.reset(seed=4) == gym.make(LAKE).reset(seed=4)


def test_a_busy_server_is_retried(server, no_sleep):
    busy = iter([503, 503])
    server.plan(lambda path, seed, body: next(busy, None) if path == "/step" else None)
    env, local = client(server.url, retries=3, backoff_s=0.25), gym.make(LAKE)
    env.reset(seed=2), local.reset(seed=2)
    assert env.step("Down") == local.step("Down")
    assert no_sleep == [0.25, 0.5]


def test_a_slow_answer_within_the_timeout_is_fine(server):
    slow = threading.Event()
    threading.Timer(0.2, slow.set).start()
    server.plan(lambda path, seed, body: ("block", slow) if path == "/step" else None)
    env, local = client(server.url, timeout_s=120), gym.make(LAKE)
    env.reset(seed=2), local.reset(seed=2)
    assert env.step("Down") == local.step("Down")


def test_a_server_too_slow_fails_the_episode_after_its_retries(server, no_sleep):
    """The server never answers this step (it blocks until the test ends): each attempt times out."""
    server.plan(lambda path, seed, body: ("block", server.released) if path == "/step" else None)
    env = client(server.url, timeout_s=0.5, retries=1)
    env.reset(seed=2)
    with pytest.raises(RemoteEnvError, match=r"no answer within timeout_s=0.5 \(2 attempts\)"):
        env.step("Down")
    assert server.seen("/step") == 2 and no_sleep == [0.5]


def test_a_lost_answer_is_replayed_not_stepped_again(server, no_sleep):
    """The first attempt's step is applied but its answer never comes: the retry gets the same
    answer (the server replays step_index 1), and the episode goes on in step with the local env."""
    attempts = iter(["first"])
    server.plan(lambda path, seed, body: ("block_after", server.released)
                if path == "/step" and next(attempts, None) else None)
    env, local = client(server.url, timeout_s=3.0, retries=2), gym.make(LAKE)
    env.reset(seed=6), local.reset(seed=6)
    assert env.step("Right") == local.step("Right")
    assert env.step("Down") == local.step("Down")
    assert server.seen("/step") == 3


def test_a_server_without_replay_gets_no_blind_retry(server, no_sleep):
    server.env_server.metadata["idempotent_steps"] = False
    server.plan(lambda path, seed, body: ("block", server.released) if path == "/step" else None)
    env = client(server.url, timeout_s=0.5, retries=3)
    env.reset(seed=2)
    with pytest.raises(RemoteEnvError, match=r"\(1 attempt\)"):
        env.step("Down")
    assert server.seen("/step") == 1 and no_sleep == []


def test_a_server_that_stays_down_stops_the_run(server, no_sleep, monkeypatch):
    """Down for longer than down_after_s (on a fake clock: 10 s per attempt): EnvServerDown, which
    the rollout loop lets through (``stops_run``); before that, failures fail episodes only."""
    from ragen2.rollout.runner import stops_run

    now = [0.0]

    def clock():
        now[0] += 10.0
        return now[0]

    monkeypatch.setattr(RemoteTextEnv, "clock", staticmethod(clock))
    env = client(server.url, retries=3, down_after_s=35)
    env.reset(seed=1)
    server.plan(lambda path, seed, body: "drop")  # the server dies
    with pytest.raises(RemoteEnvError) as first:  # down 0, 10, 20, 30 s: this episode fails
        env.step("Down")
    assert not stops_run(first.value) and "(4 attempts)" in str(first.value)
    with pytest.raises(EnvServerDown) as down:  # down 40 s at the next attempt: the run stops
        env.reset(seed=2)
    assert stops_run(down.value)
    assert "has answered no request for 40 s" in str(down.value)
    assert "down_after_s=35" in str(down.value) and "is it still running" in str(down.value)
    server.plan(lambda path, seed, body: None)  # back up: an answer resets the budget
    assert env.reset(seed=3) == gym.make(LAKE).reset(seed=3)
    server.plan(lambda path, seed, body: "drop")
    with pytest.raises(RemoteEnvError) as again:
        env.step("Down")
    assert not isinstance(again.value, EnvServerDown)


def test_a_zero_budget_stops_at_the_first_failure(server, no_sleep):
    env = client(server.url, down_after_s=0)
    env.reset(seed=1)
    server.plan(lambda path, seed, body: "drop")
    with pytest.raises(EnvServerDown):
        env.step("Down")
    assert no_sleep == []


# ---------------------------------------------------------------------- setting up
def test_no_server_at_the_url_is_a_clear_config_error(no_sleep):
    from ragen2.rollout.envs import EnvSpecError, make_env

    with socket.socket() as bound:  # bound but not listening: connections are refused, and the
        bound.bind(("127.0.0.1", 0))  # port stays this test's
        url = f"http://127.0.0.1:{bound.getsockname()[1]}"
        with pytest.raises(EnvSpecError, match="no env server answers at") as e:
            make_env("ragen2/Remote-v0", {"url": url, "retries": 1})
        assert "ragen2 serve-env" in str(e.value)


@pytest.mark.parametrize("kwargs,needle", [
    ({"url": "127.0.0.1:80"}, "not an http:// or https:// address"),
    ({"url": []}, "at least one"),
    ({"url": "http://127.0.0.1:1", "retries": -1}, "retries"),
    ({"url": "http://127.0.0.1:1", "timeout_s": 0}, "timeout_s"),
])
def test_bad_settings_are_refused(kwargs, needle):
    with pytest.raises(RemoteEnvConfigError, match=needle):
        RemoteTextEnv(**kwargs)


def test_the_wrong_env_behind_the_url_is_refused(server):
    with pytest.raises(RemoteEnvConfigError, match="serves 'ragen2/FrozenLake-v0', not"):
        client(server.url, env_id="ragen2/Sokoban-v0")
    assert client(server.url, env_id="ragen2/FrozenLake-v0").unwrapped.served_env == LAKE


def test_metadata_is_fetched_once_per_server(server):
    for _ in range(3):
        client(server.url)
    assert server.seen("/metadata") == 1


def test_the_minimal_server_of_the_docs_speaks_the_protocol(tmp_path):
    """docs/reference/env-protocol.md's example server, run as printed: at most 60 lines of the
    standard library, and the client plays it, its problem key and a replayed step included."""
    from ragen2.rollout.split import key_function

    page = (ROOT / "docs" / "reference" / "env-protocol.md").read_text()
    (code,) = [b for b in re.findall(r"```python\n(.*?)```", page, re.S)
               if "A minimal env server" in b]
    assert len(code.splitlines()) <= 60
    assert not re.search(r"^(import|from) (?!json|random|uuid|http\.server)", code, re.M)
    (tmp_path / "guess_server.py").write_text(code)
    proc = subprocess.Popen([sys.executable, str(tmp_path / "guess_server.py")],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        url = proc.stdout.readline().strip()  # the server prints its URL once it listens
        env = client(url, env_id="guess-v0")
        inner = env.unwrapped
        assert key_function(env) is not None and inner.ground is None and inner.demonstration is None
        assert "hidden number" in inner.instructions
        obs, info = env.reset(seed=3)
        target = int(inner.problem_key().split(":")[1])
        low, high = 1, 20
        for _ in range(5):
            guess = (low + high) // 2
            obs, reward, terminated, truncated, info = env.step(str(guess))
            low, high = (guess + 1, high) if obs == "Higher." else (low, guess - 1)
            if terminated or truncated:
                break
        assert terminated and reward == 1.0 and info["success"] and guess == target
        again = _post_status(url, "/step", {"episode_id": inner._episode, "step_index": inner._steps,
                                            "action": {"text": "1"}})
        assert again == (200, {"observation": {"text": "Right!"}, "reward": 1.0, "done": True,
                               "terminated": True, "truncated": False,
                               "metadata": {"success": True, "action_is_valid": True}})
        assert env.reset(seed=3)[0] == "Guess my number (1-20)." and env.step("x")[4] == {
            "success": False, "action_is_valid": False}
        env.close()
    finally:
        proc.kill()
        proc.wait()
