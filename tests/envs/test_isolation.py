import subprocess
import sys


def test_envs_package_never_imports_the_trainer():
    code = ("import sys, ragen2_envs, gymnasium as gym; gym.make('ragen2/FrozenLake-v0').reset(seed=0);"
            "bad = [m for m in sys.modules if m == 'ragen2' or m.startswith('ragen2.')];"
            "assert not bad, bad")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
