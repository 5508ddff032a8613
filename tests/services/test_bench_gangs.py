"""The offline benchmark of the dispatcher's and the commit service's work per pod
(services/bench_gangs.py) runs both flows and decides every pod."""

from __future__ import annotations

import pytest

from esched.services.bench_gangs import run_commit, run_dispatch


@pytest.mark.parametrize("jobs", [False, True], ids=["plain", "one-pod-jobs"])
def test_bench_gangs_dispatches_and_decides_every_pod(jobs: bool) -> None:
    dispatched = run_dispatch(120, 40, jobs)
    assert dispatched["released"] == 120 and dispatched["held"] == {}
    decided = run_commit(120, 40, jobs)
    assert decided["committed"] + decided["rejected"] == 120
    assert decided["committed"] > 60 and decided["foreign"] == 0


def test_bench_gangs_counts_the_release_alone_on_the_same_flow() -> None:
    """``dispatch-release``: the same batches, only admission's release timed (through
    ``itertools.starmap``, what callgrind counts), every pod released as before."""
    alone = run_dispatch(120, 40, True, release_only=True)
    assert alone["released"] == 120 and alone["held"] == {}
    assert alone["cpu_us_per_pod"] > 0
