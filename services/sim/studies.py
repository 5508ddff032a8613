"""The studies of ``esched compare`` that run in worker processes, and their tables:
one simulation per profile, Quincy's policies side by side, and the rows of the packing
studies (compaction, inflation, holes, curve, reclamation)."""

from __future__ import annotations

from esched.core import load_profile

__all__ = ["BORG_RECLAIMED", "QUINCY_VARIANTS", "run_profile", "run_quincy_variant", "study_rows"]


#: The flow variants of ``compare --study quincy``: name -> QuincyConfig keywords.
#: QFP is Quincy's (section 4: running tasks in the flow, killed where the flow
#: routes them off their machine, any job); QFP-bands keeps esched's commit rule
#: (only lower bands are evicted), which on a trace of best-effort jobs evicts none.
QUINCY_VARIANTS: dict[str, dict] = {
    "Q": {"fairness": "none"},
    "QF": {},
    "QFP": {"preemption": True, "victims": "any"},
    "QFP-bands": {"preemption": True},
}


def run_quincy_variant(args: tuple) -> dict:
    """One run of ``compare --study quincy`` in a worker: the greedy queue (variant
    None) or a flow variant."""
    from esched.core.quincy import QuincyConfig
    from esched.services.sim.engine import Simulator
    from esched.services.sim.metrics import summarize
    from esched.services.sim.quincy import QuincySimulator

    tr, path, seed, variant, round_seconds = args
    prof = load_profile(path)
    if variant is None:
        r = Simulator(tr, prof, seed).run()
        r.profile = f"queue ({prof.name})"
    else:
        config = QuincyConfig(**QUINCY_VARIANTS[variant])
        r = QuincySimulator(
            tr,
            prof,
            seed,
            preemption=config.preemption,
            quincy=config,
            round_seconds=round_seconds,
        ).run()
        r.profile = f"quincy {variant}"
    summary = summarize(r)
    summary["variant"] = variant or "queue"
    return summary


def run_profile(args: tuple) -> dict:
    """One simulation in a worker: returns (summary, result) for the report."""
    from esched.services.sim.engine import simulate as run
    from esched.services.sim.metrics import summarize

    tr, path, seed = args
    r = run(tr, load_profile(path), seed)
    r.events = None
    return {"summary": summarize(r), "result": r}


#: Borg's figures the reclamation study is read beside (Verma et al., section 5.5).
BORG_RECLAIMED = {
    "reclaimed_share_median_cell": 0.20,
    "source": "Verma et al., EuroSys 2015, section 5.5: about 20% of the workload runs "
    "in reclaimed resources in a median cell",
}


def study_rows(study: str, res: list[dict]) -> tuple[list[str], list[list[str]]]:
    """The table of one packing study's trials: columns and rows, per profile."""
    import numpy as np

    from esched.services.sim.compaction import curve_label
    from esched.services.sim.report import hole_rows

    by: dict[str, list[dict]] = {}
    for r in res:
        by.setdefault(r["profile"], []).append(r)
    rows = []
    if study == "compaction":
        cols = [
            "profile",
            "trials",
            "median machines",
            "p5",
            "p95",
            "min",
            "max",
            "vs best fit",
            "capacity bound (median)",
            "failed",
        ]
        base = None
        meds = {}
        for name, ts in by.items():
            v = [t["machines"] for t in ts if t.get("machines") is not None]
            meds[name] = float(np.median(v)) if v else None
            if "best" in name and v:
                base = meds[name]
        for name, ts in by.items():
            v = [t["machines"] for t in ts if t.get("machines") is not None]
            failed = len(ts) - len(v)
            bounds = [t["capacity_bound"] for t in ts if t.get("capacity_bound") is not None]
            bound = f"{np.median(bounds):.0f}" if bounds else "-"
            if v:
                a = np.asarray(v, dtype=float)
                med = meds[name]
                vs = f"{100 * (med / base - 1):+.1f}%" if base and med is not None else "-"
                rows.append(
                    [
                        name,
                        str(len(ts)),
                        f"{np.median(a):.0f}",
                        f"{np.percentile(a, 5):.0f}",
                        f"{np.percentile(a, 95):.0f}",
                        f"{a.min():.0f}",
                        f"{a.max():.0f}",
                        vs,
                        bound,
                        str(failed),
                    ]
                )
            else:
                share = np.mean([t.get("pending_share_whole", 0) for t in ts])
                rows.append(
                    [
                        name,
                        str(len(ts)),
                        "-",
                        "-",
                        "-",
                        "-",
                        "-",
                        "-",
                        bound,
                        f"{failed} (pending {100 * share:.2f}% on all machines)",
                    ]
                )
        return cols, rows
    if study == "holes":
        return hole_rows(res)
    if study == "reclamation":
        from esched.services.sim.reclamation import reclamation_rows

        return reclamation_rows(res)
    if study == "inflation":
        cols = ["profile", "trials", "median clones", "GPU % at limit", "CPU % at limit"]
        for name, ts in by.items():
            c = [t["clones"] for t in ts]
            g = [t["at_limit"].get("gpu") for t in ts if t["at_limit"].get("gpu") is not None]
            u = [t["at_limit"].get("cpu") for t in ts if t["at_limit"].get("cpu") is not None]
            rows.append(
                [
                    name,
                    str(len(ts)),
                    f"{np.median(c):.0f}",
                    f"{100 * np.median(g):.2f}" if g else "-",
                    f"{100 * np.median(u):.2f}" if u else "-",
                ]
            )
        return cols, rows
    cols = [
        "profile",
        "seeds",
        "GPU alloc % @100 (median)",
        "p25",
        "p75",
        "unallocated GPUs @100",
        "frag % of capacity @100",
        "alloc % final",
    ]
    curves: dict[str, list[dict]] = {}
    for r in res:
        curves.setdefault(curve_label(r), []).append(r)
    for name, ts in curves.items():
        at100 = [t["alloc_at_100"] for t in ts if t["alloc_at_100"] is not None]
        fr = [t["frag_at_100"] for t in ts if t.get("frag_at_100") is not None]
        f = [t["alloc_final"] for t in ts]
        gpus = ts[0]["gpus"]
        med100 = float(np.median(at100)) if at100 else float("nan")
        rows.append(
            [
                name,
                str(len(ts)),
                f"{100 * med100:.2f}",
                f"{100 * np.percentile(at100, 25):.2f}" if at100 else "-",
                f"{100 * np.percentile(at100, 75):.2f}" if at100 else "-",
                f"{(1 - med100) * gpus:.0f}" if at100 else "-",
                f"{100 * np.median(fr):.2f}" if fr else "-",
                f"{100 * np.median(f):.2f}",
            ]
        )
    return cols, rows
