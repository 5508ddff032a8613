"""The simulator's usage models (services/sim/usage.py): per pod a fraction of its limit
over time, a pure function of the seed, the pod and the instant."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from esched.services.sim.usage import (
    ConstantUsage,
    RecordedUsage,
    SyntheticUsage,
    UsageModelError,
    parse_usage,
)

PODS = np.arange(2000, dtype=np.int64) * 4096
NAMES = [f"job-{i}" for i in range(len(PODS))]


def test_synthetic_usage_is_the_same_for_the_same_seed_and_differs_for_another():
    a = SyntheticUsage(seed=3).fractions(PODS, NAMES, 600.0)
    b = SyntheticUsage(seed=3).fractions(PODS, NAMES, 600.0)
    c = SyntheticUsage(seed=4).fractions(PODS, NAMES, 600.0)
    for r in ("cpu", "memory"):
        assert np.array_equal(a[r], b[r])
        assert not np.allclose(a[r], c[r])


def test_a_pods_usage_does_not_depend_on_which_other_pods_are_reported():
    model = SyntheticUsage(seed=1)
    every = model.fractions(PODS, NAMES, 1200.0)
    some = SyntheticUsage(seed=1).fractions(PODS[::7], NAMES[::7], 1200.0)
    for r in ("cpu", "memory"):
        assert np.array_equal(every[r][::7], some[r])


def test_noise_changes_from_one_report_to_the_next_but_the_base_stays():
    model = SyntheticUsage(seed=2, diurnal=0.0)
    t1, t2 = model.fractions(PODS, NAMES, 60.0), model.fractions(PODS, NAMES, 120.0)
    assert not np.array_equal(t1["cpu"], t2["cpu"])
    quiet = SyntheticUsage(seed=2, diurnal=0.0, noise=0.0)
    assert np.array_equal(
        quiet.fractions(PODS, NAMES, 60.0)["cpu"], quiet.fractions(PODS, NAMES, 9e5)["cpu"]
    )


@pytest.mark.parametrize("t", [0.0, 3600.0, 21600.0, 64800.0])
def test_synthetic_fractions_stay_within_zero_and_one(t):
    model = SyntheticUsage(cpu=0.9, memory=0.1, spread=1.0, diurnal=1.0, noise=0.5, seed=5)
    for f in model.fractions(PODS, NAMES, t).values():
        assert f.min() >= 0.0 and f.max() <= 1.0


def test_base_fractions_have_the_configured_means():
    model = SyntheticUsage(cpu=0.3, memory=0.6, diurnal=0.0, noise=0.0, seed=0)
    f = model.fractions(PODS, NAMES, 0.0)
    # Beta(mean m, a+b = 4): sd = sqrt(m(1-m)/5) ~ 0.2; over 2,000 pods the sample
    # mean is within 0.02 of m with overwhelming probability (and the seed is fixed).
    assert abs(f["cpu"].mean() - 0.3) < 0.02
    assert abs(f["memory"].mean() - 0.6) < 0.02
    assert 0.15 < f["cpu"].std() < 0.25


def test_the_diurnal_term_peaks_a_quarter_period_in_and_dips_at_three_quarters():
    model = SyntheticUsage(cpu=0.4, memory=0.4, diurnal=0.25, noise=0.0, period=1000.0)
    base = model.fractions(PODS, NAMES, 0.0)["cpu"]
    peak = model.fractions(PODS, NAMES, 250.0)["cpu"]
    dip = model.fractions(PODS, NAMES, 750.0)["cpu"]
    inside = base < 0.7  # not clipped at 1 at the peak
    assert np.allclose(peak[inside], base[inside] * 1.25)
    assert np.allclose(dip, base * 0.75)


def test_constant_models_and_limits():
    assert ConstantUsage(1.0).spec == "limits"
    f = parse_usage("limits").fractions(PODS[:3], NAMES[:3], 10.0)
    assert f["cpu"].tolist() == [1.0, 1.0, 1.0] and f["memory"].tolist() == [1.0, 1.0, 1.0]
    assert parse_usage("constant:0.25").fractions(PODS[:2], NAMES[:2], 0.0)["cpu"].tolist() == [
        0.25,
        0.25,
    ]


def test_recorded_usage_steps_through_each_jobs_samples(tmp_path: Path):
    csv = tmp_path / "usage.csv"
    csv.write_text("job,time,cpu,memory\na,100,0.2,0.5\na,0,0.1,0.4\nb,50,1.5,0.3\n")
    model = parse_usage(f"csv:{csv}")
    assert isinstance(model, RecordedUsage)
    pods = np.array([0, 1, 2], dtype=np.int64)
    at = {t: model.fractions(pods, ["a", "b", "c"], t) for t in (0.0, 99.0, 100.0)}
    assert at[0.0]["cpu"].tolist() == [0.1, 1.0, 1.0]  # b before its first sample: the first
    assert at[99.0]["memory"].tolist() == [0.4, 0.3, 1.0]  # c has no samples: its limits
    assert at[100.0]["cpu"].tolist() == [0.2, 1.0, 1.0]  # b clipped to its limit


@pytest.mark.parametrize(
    ("spec", "needle"),
    [
        ("synthetic:cpu=1.5", "cpu=1.5"),
        ("synthetic:bogus=1", "unknown parameter 'bogus=1'"),
        ("synthetic:noise=x", "noise='x' is not a number"),
        ("constant:2", "within [0, 1]"),
        ("gauss", "usage model 'gauss'"),
        ("csv:", "csv:FILE"),
        ("correlated:burst=2", "burst=2.0: within [0, 1]"),
        ("correlated:burst_p=-1", "burst_p=-1.0: within [0, 1]"),
        ("correlated:window=0", "window=0.0: must be positive"),
        ("correlated:job=-0.1", "job=-0.1: must not be negative"),
        ("correlated:bogus=1", "correlated: unknown parameter"),
    ],
)
def test_bad_specs_name_what_is_wrong(spec, needle):
    with pytest.raises(UsageModelError) as err:
        parse_usage(spec)
    assert needle in str(err.value)


def test_recorded_usage_rejects_a_csv_without_the_columns(tmp_path: Path):
    bad = tmp_path / "bad.csv"
    bad.write_text("job,t,cpu\na,1,2\n")
    with pytest.raises(UsageModelError, match="job,time,cpu,memory"):
        parse_usage(f"csv:{bad}")


def test_synthetic_spec_round_trips_and_states_its_assumptions():
    model = parse_usage("synthetic:cpu=0.3,memory=0.5,seed=7")
    assert isinstance(model, SyntheticUsage)
    again = parse_usage(model.spec)
    assert isinstance(again, SyntheticUsage) and again.as_dict() == model.as_dict()
    text = " ".join(model.assumptions())
    assert "mean 0.3 (cpu)" in text and "seed 7" in text and "no trace" in text
    assert math.isclose(model.period, 86400.0)


#: Two tasks each of 1,000 jobs (pod ids: job << 12 | task, as the simulator's).
TASKS = np.array([(j << 12) | k for j in range(1000) for k in range(2)], dtype=np.int64)
TASK_JOBS = [f"job-{j}" for j in range(1000) for _ in range(2)]


def _task_correlation(model: SyntheticUsage, resource: str = "cpu") -> tuple[float, float]:
    """Correlation of the two tasks' usage within a job, and across neighbouring jobs,
    of the deviations from each pod's base, over many windows."""
    same, other = [], []
    base = model.base(resource, TASKS)
    for w in range(40):
        f = model.fractions(TASKS, TASK_JOBS, w * model.window + 1.0)[resource] - base
        same.append(np.corrcoef(f[0::2], f[1::2])[0, 1])
        other.append(np.corrcoef(f[0::2], np.roll(f[1::2], 1))[0, 1])
    return float(np.mean(same)), float(np.mean(other))


def test_correlated_usage_moves_the_tasks_of_a_job_together():
    corr = parse_usage("correlated:diurnal=0")
    assert isinstance(corr, SyntheticUsage) and corr.correlated
    same, other = _task_correlation(corr)
    assert same > 0.6 and abs(other) < 0.1
    # The independent model: no correlation between the tasks of a job.
    same0, _ = _task_correlation(SyntheticUsage(diurnal=0.0))
    assert abs(same0) < 0.1


def test_a_burst_adds_its_share_to_every_task_of_the_job_for_a_window():
    model = SyntheticUsage(noise=0.0, diurnal=0.0, burst=0.3, burst_p=1.0, window=600.0)
    calm = SyntheticUsage(noise=0.0, diurnal=0.0)
    for t in (0.0, 599.0, 600.0):
        f, g = model.fractions(TASKS, TASK_JOBS, t), calm.fractions(TASKS, TASK_JOBS, t)
        for r in ("cpu", "memory"):
            assert np.allclose(f[r], np.minimum(g[r] + 0.3, 1.0))
    # With probability 0.05 per job and window: about 5% of the jobs burst, and the
    # bursting jobs change from one window to the next, deterministically.
    rare = SyntheticUsage(noise=0.0, diurnal=0.0, burst=0.3, burst_p=0.05, seed=2)
    calm = SyntheticUsage(noise=0.0, diurnal=0.0, seed=2)
    hot = [
        rare.fractions(TASKS, TASK_JOBS, t)["cpu"] > calm.fractions(TASKS, TASK_JOBS, t)["cpu"]
        for t in (0.0, 600.0)
    ]
    assert 0.03 < hot[0].mean() < 0.07 and not np.array_equal(hot[0], hot[1])
    assert np.array_equal(hot[0][0::2], hot[0][1::2])  # both tasks of a job
    again = SyntheticUsage(noise=0.0, diurnal=0.0, burst=0.3, burst_p=0.05, seed=2)
    assert np.array_equal(
        again.fractions(TASKS, TASK_JOBS, 0.0)["cpu"], rare.fractions(TASKS, TASK_JOBS, 0.0)["cpu"]
    )


def test_correlated_spec_round_trips_and_states_its_assumptions():
    model = parse_usage("correlated:burst_p=0.1")
    assert isinstance(model, SyntheticUsage)
    assert (model.job, model.burst, model.burst_p, model.window) == (0.1, 0.3, 0.1, 600.0)
    again = parse_usage(model.spec)
    assert again.as_dict() == model.as_dict()
    text = " ".join(model.assumptions())
    assert "move together" in text and "bursts with probability 0.1" in text
    # The independent model says so.
    assert "independent" in " ".join(SyntheticUsage().assumptions())
