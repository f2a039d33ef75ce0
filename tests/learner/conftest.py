"""The learner tests' shared two-rank spawn (tests/learner/two_ranks.py)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def two_rank_results(tiny_model_path, tmp_path_factory):
    """``{job: (rank 0's results, rank 1's)}`` of every two-rank job, run in one spawn."""
    from tests.learner.two_ranks import run_every_job

    return run_every_job(tiny_model_path, tmp_path_factory.mktemp("two_ranks"))
