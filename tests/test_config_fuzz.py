"""Fuzzed overrides: every bad value is refused as a ConfigError of a few lines, never a traceback.

Keys come from walking the schema dataclasses (plus typos, free-form entries and group names);
values are garbage of every kind. ``load_config`` composes through Hydra (~0.1-0.3 s each), so
the example counts are small; the CLI is checked on a handful of cases in a subprocess.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from ragen2.config import Config, ConfigError
from ragen2.train import check_command_line, load_config


def _leaves(node: object, prefix: str = "") -> list[str]:
    out = []
    for f in dataclasses.fields(node):
        value = getattr(node, f.name)
        if dataclasses.is_dataclass(value):
            out += [prefix + f.name, *_leaves(value, f"{prefix}{f.name}.")]
        else:
            out.append(prefix + f.name)
    return out


KEYS = _leaves(Config())
GROUPS = ["env", "model", "engine", "algorithm", "filter", "monitor", "cluster", "trainer",
          "+experiment"]
GARBAGE = ["", "null", "true", "false", "nan", "-nan", "inf", "-inf", "1e400", "-1e400", "1e-400",
           "0", "-0", "-1", "0.0", "1.5", "18446744073709551616", "9" * 40, "-" + "9" * 40,
           "[]", "[1,2]", "[a,[b]]", "[1,{a:2}]", "{}", "{a:1}", "{a:{b:{c:[1,{d:2}]}}}", "{id:x}",
           "{id:x,share:inf}", "{id:x,kwargs:5}", "{{", "}}", "[[", "]", "a=b", "==", "=", ",",
           "1,2", "${oops}", "${seed}", "${env.id}", "${oc.env:RAGEN2_NOPE}", "'quoted'", '"dq"',
           "'", "\\", "é", "∞", "\x00", "\u2028", "ragen2/FrozenLake-v0", "grpo", "top_p", "cuda",
           "bfloat16", "vllm", "mi", "none", "PACK"]


def _typo(key: str, i: int, op: int) -> str:
    i %= len(key)
    return [key[:i] + key[i + 1:], key[:i] + key[i] + key[i:], key[:i] + "x" + key[i + 1:]][op]


name = st.from_regex(r"[a-z][a-z0-9_]{0,6}", fullmatch=True)
key = st.one_of(
    st.sampled_from(KEYS),
    st.builds(_typo, st.sampled_from(KEYS), st.integers(0, 40), st.integers(0, 2)),
    st.builds("{}.{}".format, st.sampled_from(["env.kwargs", "env.mix", "env.eval"]), name),
    st.builds("env.{}.{}.{}".format, st.sampled_from(["mix", "eval"]), name,
              st.sampled_from(["id", "share", "kwargs", "format_penalty", "extra"])),
    st.sampled_from(GROUPS),
    name,
)
value = st.one_of(
    st.sampled_from(GARBAGE),
    st.integers(-2**70, 2**70).map(str),
    st.floats().map(repr),  # nan, inf, 1e+300, -0.0 ...
    st.text(max_size=20),  # any unicode, control characters included
    st.lists(st.sampled_from(GARBAGE), max_size=3).map(lambda v: "[" + ",".join(v) + "]"),
)
override = st.one_of(
    st.builds("{}{}={}".format, st.sampled_from(["", "", "", "+", "++"]), key, value),
    st.builds("~{}".format, key),
)


def check(overrides: list[str]) -> Config | None:
    """The property: the config loads, or a ConfigError of a few lines says why."""
    try:
        cfg = load_config(overrides)
    except ConfigError as e:
        msg = str(e)
        assert msg.startswith("invalid config value ") and e.key, msg
        assert msg.count("\n") <= 5 and "Traceback" not in msg, msg
        return None
    assert isinstance(cfg, Config)
    cfg.validate()  # an accepted config stays valid (and is typed: validate would raise otherwise)
    return cfg


FOUND = [  # what fuzzing found: each raised something else, or was accepted, before the fix
    "engine.temperature=inf", "sync.probe_tolerance=inf", "seed=18446744073709551616",
    "rollout.env_groups=10000000000000000000000", "cluster.num_cpus=-3",
    "trainer.loggers=[{a:1}]", "engine.stop=[1,{a:2}]", "+trainer.total_stepz=3", "+foo=1",
    "seed=${oops}", "env.kwargs.size=${x}", "trainer.total_steps=abc", "seed={{", "seed",
    "env=nope", "env=null", "engine=[1,{},{a:1}]",
]


@pytest.mark.parametrize("ov", FOUND)
def test_found_by_fuzzing_is_refused(ov):
    assert check([ov]) is None


@pytest.mark.parametrize("overrides,key", [
    (["env=mixed", "env.mix.a={id:x,kwargs:5}"], "env.mix.a.kwargs"),
    (["env=mixed", "env.mix.a={id:x,share:inf}"], "env.mix.a.share"),
    (["env=mixed", "env.mix.a={id:x,format_penalty:-inf}"], "env.mix.a.format_penalty"),
])
def test_found_by_fuzzing_in_env_mixtures(overrides, key):
    with pytest.raises(ConfigError) as e:
        load_config(overrides)
    assert e.value.key == key


SETTINGS = {"deadline": None, "suppress_health_check": [HealthCheck.too_slow]}


@settings(max_examples=60, **SETTINGS)
@given(override)
@example("seed=1")  # a good override still loads
@example("env.kwargs.size=5")
def test_one_override(ov):
    check([ov])


@settings(max_examples=40, **SETTINGS)
@given(st.lists(override, min_size=2, max_size=4))
def test_several_overrides(overrides):
    check(overrides)


@pytest.mark.parametrize("argv,ok", [
    (["-m", "seed=1,2"], True),
    (["-m", "seed={{"], False),
    (["-m", "seed=1,2", "trainer.total_stepz=1"], False),
    (["--multirun", "seed=", "trainer.resume=maybe,true"], True),  # types are left to each job
    (["seed=1", "hydra.run.dir=/tmp/x"], True),
    (["seed=1,2"], False),  # a sweep without -m is ambiguous
    (["--cfg", "job", "seed=abc"], False),
])
def test_command_line_is_checked_before_hydra_starts(argv, ok):
    if ok:
        check_command_line(argv)
    else:
        with pytest.raises(ConfigError):
            check_command_line(argv)


@pytest.mark.parametrize("bad", [
    "seed={{",  # override syntax
    "trainer.total_steps=abc",  # wrong type
    "seed=${oops}",  # broken interpolation
    "env=nope",  # missing group option
    "+trainer.total_stepz=3",  # an addition with a typo
    "engine.temperature=inf",  # out of range
])
def test_cli_exits_2_with_one_message(bad, tmp_path):
    """No run: the command line refuses the bad override before anything starts."""
    env = {**os.environ, "HYDRA_FULL_ERROR": "0"}
    r = subprocess.run([sys.executable, "-m", "ragen2.train", bad, f"hydra.run.dir={tmp_path}"],
                       capture_output=True, text=True, timeout=120, env=env, check=False)
    err = r.stderr.strip()
    assert r.returncode == 2, err
    assert err.startswith("ragen2-train: error: invalid config value"), err
    assert "Traceback" not in err and len(err.splitlines()) <= 4, err
