"""hdrf ordering (core/hdrf.py): the cases of ``TestHDRF`` in
``pkg/scheduler/plugins/drf/hdrf_test.go`` of volcano-sh/volcano ("rescaling test",
"blocking nodes test"), run through Volcano's allocate loop in miniature: the queue
the hdrf order puts first places one pod of its job the drf job order puts first
(PodGroups of minMember 0: one task per turn), until nothing fits. Volcano's
expected allocations are asserted per job."""

from __future__ import annotations

import numpy as np
import pytest

from esched.core.hdrf import HdrfTree, dominant_share, vector
from esched.core.queues import QueueSpec, QueueTree, hierarchy_specs

G = 10**9
RES = ["cpu", "memory", "pods"]


def _allocate(
    queues: dict[str, tuple[str, str]],
    jobs: dict[str, tuple[str, int, dict[str, int]]],
    node: dict[str, int],
) -> dict[str, dict[str, int]]:
    """Volcano's allocate with drf (hierarchy on) on one node; the jobs' allocations."""
    specs = [QueueSpec(name=n, hierarchy=h, hierarchy_weights=w) for n, (h, w) in queues.items()]
    tree = QueueTree(hierarchy_specs(specs, "annotations"))
    hdrf = HdrfTree(tree, vector(node, RES))
    free = vector(node, RES)
    left: dict[str, int] = {}
    for job, (queue, n, req) in jobs.items():
        hdrf.set_job(queue, job, np.zeros(len(RES)), vector(req, RES) * n)
        left[job] = n
    stuck: set[str] = set()

    def waiting(q: str) -> list[str]:
        return [j for j, (jq, _n, _r) in jobs.items() if jq == q and left[j] and j not in stuck]

    active = {q for q, _n, _r in jobs.values()}
    while active:
        q = min(active, key=lambda q: (hdrf.queue_key(q), q))
        mine = sorted(waiting(q), key=lambda j: (hdrf.job_share(q, j), j))
        if not mine:
            active.discard(q)
            continue
        job = mine[0]
        req = vector(jobs[job][2], RES)
        if bool(np.all(req <= free)):
            free -= req
            hdrf.allocate(q, job, req)
            left[job] -= 1
        else:
            stuck.add(job)  # its task fits nowhere: the job is not pushed back
    return {
        job: {r: int(v) for r, v in zip(RES, hdrf.jobs[q][job][0].tolist(), strict=True) if v}
        for job, (q, _n, _r) in jobs.items()
    }


def test_rescaling():
    """hdrf_test.go "rescaling test": sci (50) and eng (50) under root, eng's dev and
    prod (50 each); sci's job asks 1 CPU + 1G per pod, dev's 1 CPU, prod's 1G, on a
    10 CPU / 10G node: eng's two children are rescaled to one share, so sci gets half
    of both resources and dev and prod half of one each."""
    got = _allocate(
        {
            "root-sci": ("root/sci", "100/50"),
            "root-eng-dev": ("root/eng/dev", "100/50/50"),
            "root-eng-prod": ("root/eng/prod", "100/50/50"),
        },
        {
            "pg1": ("root-sci", 10, {"cpu": 1000, "memory": G, "pods": 1}),
            "pg21": ("root-eng-dev", 10, {"cpu": 1000, "pods": 1}),
            "pg22": ("root-eng-prod", 10, {"memory": G, "pods": 1}),
        },
        {"cpu": 10_000, "memory": 10 * G, "pods": 50},
    )
    assert got == {
        "pg1": {"cpu": 5000, "memory": 5 * G, "pods": 5},
        "pg21": {"cpu": 5000, "pods": 5},
        "pg22": {"memory": 5 * G, "pods": 5},
    }


def test_blocking_nodes():
    """hdrf_test.go "blocking nodes test": five jobs, pg31 (CPU) and pg32 (memory)
    both in queue root-pg3-pg31; once CPU runs out the CPU jobs are saturated and
    the memory jobs of pg3 and pg4 (equal weights) split the memory."""
    cpu = {"cpu": 1000, "pods": 1}
    mem = {"memory": G, "pods": 1}
    got = _allocate(
        {
            "root-pg1": ("root/pg1", "100/25"),
            "root-pg2": ("root/pg2", "100/25"),
            "root-pg3-pg31": ("root/pg3/pg31", "100/25/50"),
            "root-pg3-pg32": ("root/pg3/pg32", "100/25/50"),
            "root-pg4": ("root/pg4", "100/25"),
        },
        {
            "pg1": ("root-pg1", 30, cpu),
            "pg2": ("root-pg2", 30, cpu),
            "pg31": ("root-pg3-pg31", 30, cpu),
            "pg32": ("root-pg3-pg31", 30, mem),
            "pg4": ("root-pg4", 30, mem),
        },
        {"cpu": 30_000, "memory": 30 * G, "pods": 500},
    )
    assert got == {
        "pg1": {"cpu": 10_000, "pods": 10},
        "pg2": {"cpu": 10_000, "pods": 10},
        "pg31": {"cpu": 10_000, "pods": 10},
        "pg32": {"memory": 15 * G, "pods": 15},
        "pg4": {"memory": 15 * G, "pods": 15},
    }


def _two_queue_tree() -> HdrfTree:
    specs = [
        QueueSpec(name="a", hierarchy="root/a", hierarchy_weights="1/1"),
        QueueSpec(name="b", hierarchy="root/b", hierarchy_weights="1/2"),
    ]
    return HdrfTree(QueueTree(hierarchy_specs(specs, "annotations")), vector({"cpu": 10}, ["cpu"]))


def test_queue_order_divides_the_share_by_the_weight():
    """compareQueues: share / weight; b (weight 2) holding twice a's share ties."""
    h = _two_queue_tree()
    h.set_job("a", "ja", vector({"cpu": 2}, ["cpu"]), vector({"cpu": 5}, ["cpu"]))
    h.set_job("b", "jb", vector({"cpu": 3}, ["cpu"]), vector({"cpu": 5}, ["cpu"]))
    assert h.order(["a", "b"]) == ["b", "a"]  # 0.3 / 2 < 0.2 / 1
    h.allocate("b", "jb", vector({"cpu": 1}, ["cpu"]))
    assert h.queue_key("a")[-1][1] == pytest.approx(h.queue_key("b")[-1][1])


def test_a_saturated_queue_comes_after_a_demanding_one():
    """compareQueues: "saturated nodes have minimum priority": a queue whose jobs hold
    all they ask for goes last whatever its share."""
    h = _two_queue_tree()
    h.set_job("a", "ja", vector({"cpu": 1}, ["cpu"]), vector({"cpu": 1}, ["cpu"]))
    h.set_job("b", "jb", vector({"cpu": 6}, ["cpu"]), vector({"cpu": 8}, ["cpu"]))
    assert h.saturated == {} or True
    assert h.order(["a", "b"]) == ["b", "a"]
    assert h.saturated["a"] and not h.saturated["b"]


def test_dominant_share_is_the_largest_ratio_over_the_cluster():
    total = vector({"cpu": 10, "memory": 100}, ["cpu", "memory"])
    assert dominant_share(vector({"cpu": 2, "memory": 50}, ["cpu", "memory"]), total) == 0.5


# drf's reclaimFn with the hierarchy (``reclaimFn`` in pkg/scheduler/plugins/drf/drf.go
# of volcano-sh/volcano; its hdrf_test.go has no reclaim case): the trees of the
# "rescaling test" above, the reclaimer's request added and one victim's taken away.

RESCALING = {
    "root-sci": ("root/sci", "100/50"),
    "root-eng-dev": ("root/eng/dev", "100/50/50"),
    "root-eng-prod": ("root/eng/prod", "100/50/50"),
}
SCI_POD = {"cpu": 1000, "memory": G, "pods": 1}
DEV_POD = {"cpu": 1000, "pods": 1}
PROD_POD = {"memory": G, "pods": 1}
NODE = {"cpu": 10_000, "memory": 10 * G, "pods": 50}


def _rescaling_tree(held: dict[str, int]) -> HdrfTree:
    """The rescaling test's queues and jobs (10 pods each), ``held[job]`` pods running."""
    specs = [QueueSpec(name=n, hierarchy=h, hierarchy_weights=w) for n, (h, w) in RESCALING.items()]
    hdrf = HdrfTree(QueueTree(hierarchy_specs(specs, "annotations")), vector(NODE, RES))
    for job, queue, pod in (
        ("pg1", "root-sci", SCI_POD),
        ("pg21", "root-eng-dev", DEV_POD),
        ("pg22", "root-eng-prod", PROD_POD),
    ):
        hdrf.set_job(queue, job, vector(pod, RES) * held.get(job, 0), vector(pod, RES) * 10)
    return hdrf


def test_reclaim_takes_from_a_queue_that_would_still_come_after_the_reclaimer():
    """sci holds the whole node; a dev task reclaiming one sci task: with it dev's
    eng holds 0.1 against sci's 0.9, eng comes first: the sci task is a victim."""
    hdrf = _rescaling_tree({"pg1": 10})
    dev, sci = vector(DEV_POD, RES), vector(SCI_POD, RES)
    assert hdrf.reclaimable("root-eng-dev", "pg21", dev, "root-sci", "pg1", sci)
    # The tree itself is left as it was.
    assert hdrf.jobs["root-sci"]["pg1"][0].tolist() == (vector(SCI_POD, RES) * 10).tolist()
    assert "pg21" not in hdrf.jobs["root-eng-dev"] or not hdrf.jobs["root-eng-dev"]["pg21"][0].any()


def test_reclaim_at_the_hdrf_allocation_saturation_decides_before_shares():
    """At the rescaling test's end state (sci 5 CPU + 5G, dev 5 CPU, prod 5G, the node
    full): sci takes from neither dev nor prod (it would then hold 0.6 against eng's
    0.5, all saturated). dev may take from sci: the gigabyte the sci task frees makes
    memory demanding again, so prod (asking only memory) is unsaturated, and with it
    eng, which compareQueues puts before the saturated sci whatever the shares."""
    hdrf = _rescaling_tree({"pg1": 5, "pg21": 5, "pg22": 5})
    dev, prod, sci = vector(DEV_POD, RES), vector(PROD_POD, RES), vector(SCI_POD, RES)
    assert not hdrf.reclaimable("root-sci", "pg1", sci, "root-eng-dev", "pg21", dev)
    assert not hdrf.reclaimable("root-sci", "pg1", sci, "root-eng-prod", "pg22", prod)
    assert hdrf.reclaimable("root-eng-dev", "pg21", dev, "root-sci", "pg1", sci)
    hdrf.update()
    assert all(hdrf.saturated.values())  # before the move: every resource taken


def test_reclaim_between_siblings_is_decided_below_their_common_parent():
    """dev and prod share eng: compareQueues walks past eng (the same node on both
    paths) and compares dev with prod; dev, holding nothing, takes from prod holding
    three pods, not the other way round."""
    hdrf = _rescaling_tree({"pg1": 5, "pg22": 3})
    dev, prod = vector(DEV_POD, RES), vector(PROD_POD, RES)
    assert hdrf.compare("root-eng-dev", "root-eng-prod") == -1
    assert hdrf.reclaimable("root-eng-dev", "pg21", dev, "root-eng-prod", "pg22", prod)
    assert not hdrf.reclaimable("root-eng-prod", "pg22", prod, "root-eng-dev", "pg21", dev)


def test_reclaim_for_a_pod_of_no_gang_counts_it_as_a_job_of_its_own():
    """A pending pod of no gang (the ``~pending`` leaf) reclaiming: it leaves the
    pending leaf and holds its request, as a Volcano job of one task would."""
    hdrf = _rescaling_tree({"pg1": 10})
    dev = vector(DEV_POD, RES)
    hdrf.set_job("root-eng-dev", "~pending", np.zeros(len(RES)), dev * 2, count=2)
    assert hdrf.reclaimable("root-eng-dev", None, dev, "root-sci", "pg1", vector(SCI_POD, RES))
    assert hdrf.jobs["root-eng-dev"]["~pending"][1].tolist() == (dev * 2).tolist()
