"""The rollout loop on an env served over HTTP (``ragen2/Remote-v0``), faults included, and
``ragen2 serve-env`` as a command.

Servers in this process run on a thread and bind port 0; ``ragen2 serve-env`` in a subprocess binds
port 0 too and writes the URL it got (``--url-file``), so no test picks a port. No wall-clock bound
but generous start-up deadlines for the subprocess.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import gymnasium as gym
import pytest

from ragen2.engines.base import Generation, SamplingParams
from ragen2.rollout.chat import ChatRenderer
from ragen2.rollout.envs import make_env, train_entries
from ragen2.rollout.runner import EngineTurnPolicy, EpisodeSpec, run_episodes
from ragen2_envs import remote
from ragen2_envs.remote import EnvServerDown, RemoteTextEnv
from tests.remote_faults import LAKE, Server

ROOT = Path(__file__).resolve().parents[2]
TURNS = ["<think>I am at row 1, column 1. Down.</think><answer>Down</answer>",
         "<think>I am at row 2, column 1.</think><answer>Right</answer>",
         "<think>You are at row 9, column 9.</think><answer>Down</answer>",
         "<think>go</think><answer>Right</answer>"]


class Scripted:
    """The same response for every episode, one per turn."""

    policy_version = 3

    def __init__(self, tokenizer):
        self.tok, self.turn = tokenizer, 0

    def generate(self, prompts, params):
        text = TURNS[self.turn % len(TURNS)]
        self.turn += 1
        ids = self.tok.encode(text, add_special_tokens=False)
        return [Generation(list(ids), [-0.1] * len(ids), "stop", 3, text) for _ in prompts]


@pytest.fixture(autouse=True)
def fresh_client_state(monkeypatch):
    for table in (remote._METADATA, remote._HEALTH, remote._TURNS):
        table.clear()
    monkeypatch.setattr(RemoteTextEnv, "sleep", staticmethod(lambda s: None))


def rollout(tokenizer, make, seeds, pools=None):
    specs = [EpisodeSpec(seed, i) for i, seed in enumerate(seeds)]
    with ThreadPoolExecutor(4) as pool:
        return run_episodes(specs, lambda name: make(), ChatRenderer(tokenizer),
                            EngineTurnPolicy(Scripted(tokenizer), SamplingParams()),
                            max_turns=len(TURNS), format_penalty=-0.1, max_context_tokens=4096,
                            max_new_tokens=64, executor=pool, envs=pools)


def same_episode(a, b) -> None:
    for name in ("input_ids", "loss_mask", "turn_rewards", "observations", "responses",
                 "success", "terminated", "truncated", "grounding", "env_return",
                 "num_invalid_actions", "coordinates"):
        assert getattr(a, name, None) == getattr(b, name, None), name


def test_a_remote_env_rolls_out_as_the_local_one_and_faults_fail_their_episode(tiny_tokenizer,
                                                                               caplog):
    """Four episodes on four threads: the one whose server drops its step and the one that gets a
    malformed answer fail with the reason (and their client is replaced); the other two match the
    in-process env token for token, grounding included; the step trains on them."""
    from ragen2.controller import EnvFailureError, check_env_errors, rollout_metrics

    s = Server()
    try:
        s.plan(lambda path, seed, body: {101: "drop", 102: "garbage"}.get(seed)
               if path == "/step" else None)
        pools: dict = {}
        url = {"url": s.url, "retries": 1}
        trajs = rollout(tiny_tokenizer, lambda: make_env("ragen2/Remote-v0", url),
                        [101, 102, 103, 104], pools)
        local = rollout(tiny_tokenizer, lambda: make_env(LAKE), [101, 102, 103, 104])
    finally:
        s.close()
    dropped, garbled, ok1, ok2 = trajs
    assert "RemoteEnvError: step 1 at http://127.0.0.1:" in dropped.env_error
    assert "RemoteDisconnected" in dropped.env_error and "(2 attempts)" in dropped.env_error
    assert "malformed answer (not a JSON object)" in garbled.env_error
    for t in (dropped, garbled):
        assert not t.success
    same_episode(ok1, local[2]), same_episode(ok2, local[3])
    assert ok1.grounding and ok1.grounding[0] == 1.0  # "row 1, column 1" at the start: right
    with caplog.at_level("WARNING", logger="ragen2"):
        check_env_errors(trajs, 0.5, "step 1")  # 2 of 4 failed: the step goes on with the others
    assert "step 1: an episode failed inside the env" in caplog.text
    assert "seed 101: RemoteEnvError" in caplog.text and "seed 102: RemoteEnvError" in caplog.text
    assert rollout_metrics(trajs, "rollout")["rollout/env_errors"] == 2
    with pytest.raises(EnvFailureError, match="RemoteEnvError"):
        check_env_errors(trajs, 0.25, "step 1")
    assert len(pools["env"]) == 4 and all(isinstance(e.unwrapped, RemoteTextEnv)
                                          for e in pools["env"])



@pytest.mark.parametrize("old_server", [False, True])
def test_a_turn_is_one_request(tiny_tokenizer, old_server):
    """The default job's env (FrozenLake, every hook) over HTTP: a reset per episode and one step
    per turn, the grounding verdict carried by the step (no ``/hook/ground``), the coordinates
    and problem key by the answers. A server without ``step_hooks`` (one of before) is asked
    ``/hook/ground`` before each step instead: the same trajectories either way."""
    s = Server()
    if old_server:
        del s.env_server.metadata["step_hooks"]
    try:
        seeds = [101, 102, 103, 104]
        trajs = rollout(tiny_tokenizer, lambda: make_env("ragen2/Remote-v0", {"url": s.url}), seeds)
        local = rollout(tiny_tokenizer, lambda: make_env(LAKE), seeds)
    finally:
        s.close()
    for a, b in zip(trajs, local):
        assert a.env_error is None
        same_episode(a, b)
    turns = sum(len(t.turn_rewards) for t in trajs)
    assert s.seen("/reset") == len(seeds) and s.seen("/step") == turns
    assert s.seen("/hook/ground") == (turns if old_server else 0)
    assert s.seen("/hook/state_coordinates") == s.seen("/hook/problem_key") == 0


def test_a_server_that_stays_down_stops_the_rollout(tiny_tokenizer):
    s = Server()
    try:
        s.plan(lambda path, seed, body: "drop" if path == "/step" else None)
        with pytest.raises(EnvServerDown, match="has answered no request"):
            rollout(tiny_tokenizer,
                    lambda: make_env("ragen2/Remote-v0", {"url": s.url, "down_after_s": 0}),
                    [1, 2, 3])
    finally:
        s.close()


def test_the_config_selects_a_remote_env():
    from ragen2.compose import load_config

    cfg = load_config(["env.id=ragen2/Remote-v0",
                       "env.kwargs.url=[http://127.0.0.1:1,http://127.0.0.1:2]",
                       "env.kwargs.timeout_s=5"])
    (entry,) = train_entries(cfg.env)
    assert entry.id == "ragen2/Remote-v0" and entry.name == "remote"
    assert list(entry.kwargs["url"]) == ["http://127.0.0.1:1", "http://127.0.0.1:2"]
    assert entry.kwargs["timeout_s"] == 5


# ---------------------------------------------------------------------- ragen2 serve-env
def test_serve_env_refuses_a_bad_env_before_listening(capsys):
    from ragen2.cli import main

    assert main(["serve-env", "nope/Nope-v0"]) == 2
    assert "could not be made" in capsys.readouterr().err
    assert main(["serve-env", LAKE, "size=1"]) == 2
    assert main(["serve-env", LAKE, "not-a-pair"]) == 2
    assert main(["serve-env", LAKE, "--processes", "2", "--port", "8000"]) == 2


def serve(tmp_path: Path, *args: str):
    """``ragen2 serve-env ARGS --url-file`` in a subprocess (a session of its own); its URL value."""
    url_file = tmp_path / "env.url"
    proc = subprocess.Popen([sys.executable, "-m", "ragen2.cli", "serve-env", *args,
                             "--url-file", str(url_file)], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    deadline = time.monotonic() + 300  # start-up only; generous for a loaded machine
    while not url_file.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            os.killpg(proc.pid, signal.SIGKILL)
            raise AssertionError(f"serve-env did not start: {proc.communicate()}")
        time.sleep(0.2)
    return proc, url_file.read_text().strip()


def stop(proc) -> tuple[int, str, str]:
    os.killpg(proc.pid, signal.SIGTERM)  # Ctrl-C's path: the process group, as a terminal sends it
    try:
        out, err = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        raise
    return proc.returncode, out, err


def test_serve_env_serves_a_registered_env_with_kwargs(tmp_path):
    proc, url = serve(tmp_path, LAKE, "size=5", "hole_prob=0.2")
    try:
        assert url.startswith("http://127.0.0.1:")
        env = gym.make("ragen2/Remote-v0", url=url, env_id=LAKE)
        local = gym.make(LAKE, size=5, hole_prob=0.2)
        assert env.reset(seed=9) == local.reset(seed=9)
        assert env.step("Right") == local.step("Right")
        env.close()
    finally:
        code, out, err = stop(proc)
    assert code == 0, err
    assert f"serving {LAKE} at {url}" in out
    assert f"env.id=ragen2/Remote-v0 env.kwargs.url={url}" in out


def test_serve_env_in_several_processes(tmp_path):
    proc, value = serve(tmp_path, LAKE, "--processes", "2")
    try:
        assert value.startswith("[") and value.endswith("]")
        urls = value[1:-1].split(",")
        assert len(set(urls)) == 2
        envs = [gym.make("ragen2/Remote-v0", url=urls) for _ in range(2)]
        assert {e.unwrapped.url for e in envs} == set(urls)
        for seed, env in enumerate(envs):
            assert env.reset(seed=seed) == gym.make(LAKE).reset(seed=seed)
    finally:
        code, out, err = stop(proc)
    assert code == 0, err
