"""The simulator with Quincy's flow scheduler (``esched simulate --policy quincy``).

:class:`QuincySimulator` is the :class:`~esched.services.sim.engine.Simulator` with
its per-event scheduling pass replaced by a *round*: every pending job (and, for
fairness and preemption, every running one) goes to
:class:`~esched.core.quincy.QuincyPolicy`, which solves one min-cost flow and returns
the placements that pass the feasibility check, with the jobs evicted for them. The
events logged are the same as the greedy pass's (``esched.pod.evicted`` naming the
decision that follows, ``esched.placement.committed``), so replay and audit read the
run like any other.

Rounds run after every arrival and departure, or at most every ``round_seconds`` of
virtual time (a round is always run when nothing is running, so no job is left behind
at the end of a trace). A round whose pending tasks fit nowhere is not solved
(:meth:`~esched.core.quincy.QuincyPolicy.has_room`; the same empty plan), and is
counted in ``placer.flow.skipped``.
"""

from __future__ import annotations

from collections import Counter
from itertools import chain
from typing import Any

from esched.core.quincy import FlowJob, QuincyConfig, QuincyPolicy
from esched.services.sim.engine import GPU_RESOURCE, RunResult, Simulator

__all__ = ["QuincySimulator"]


class QuincySimulator(Simulator):
    """A run whose placements are Quincy rounds (see the module doc).

    :param quincy: the variant (fairness, preemption) and costs; default strict
        fairness, with preemption as the ``preemption`` keyword says.
    :param round_seconds: at most one round per this much virtual time (0: after
        every event time).
    """

    def __init__(
        self,
        *args: Any,
        quincy: QuincyConfig | None = None,
        round_seconds: float = 0.0,
        **kw: Any,
    ) -> None:
        super().__init__(*args, **kw)
        self.quincy = quincy or QuincyConfig(preemption=self.pass_config.preemption)
        self.round_seconds = round_seconds
        self.policy: QuincyPolicy | None = None
        self._next_round = 0.0
        self._running: set[int] = set()
        self._flow_jobs: dict[int, FlowJob] = {}  # job -> its FlowJob while it waits or runs
        self.flow_stats: Counter[str] = Counter()
        self.flow_seconds = {"build": 0.0, "solve": 0.0, "max_round": 0.0}

    def run(self) -> RunResult:
        r = super().run()
        stats: dict[str, Any] = dict(self.flow_stats)
        stats.update({f"{k}_seconds": v for k, v in self.flow_seconds.items()})
        stats["fairness"] = self.quincy.fairness
        stats["preemption"] = self.quincy.preemption
        stats["victims"] = self.quincy.victims
        r.placer_stats = {**r.placer_stats, "flow": stats}
        r.profile = f"quincy-{self.variant}"
        return r

    @property
    def variant(self) -> str:
        """Quincy's name for the variant: Q, QF (fair), QFP (fair with preemption,
        Quincy's victims); ``-bands`` when preemption keeps esched's band rule."""
        q = self.quincy
        name = ("Q" if q.fairness == "none" else "QF") + ("P" if q.preemption else "")
        return name + "-bands" if q.preemption and q.victims == "bands" else name

    # ------------------------------------------------------------------ bookkeeping

    def _commit(self, j: int, bindings: list, now: float, victims: list | None = None) -> None:
        super()._commit(j, bindings, now, victims)
        self._running.add(j)
        self._flow_jobs.pop(j, None)  # waiting -> running

    def _withdraw(self, j: int, now: float, dropped: bool = False) -> None:
        super()._withdraw(j, now, dropped)
        self._flow_jobs.pop(j, None)

    def _finish(self, j: int, now: float) -> None:
        super()._finish(j, now)
        self._running.discard(j)
        self._flow_jobs.pop(j, None)

    # ------------------------------------------------------------------ the round

    def _schedule(self, now: float) -> tuple[list[int], bool]:
        if not self.queues:
            return [], False
        if now < self._next_round and self.running_pods > 0:
            return [], False
        self._next_round = now + self.round_seconds
        if self.policy is None:
            self.policy = QuincyPolicy(
                self.state,
                self.placer,
                self.quincy,
                devices=self.devices,
                gpu_resource=GPU_RESOURCE,
            )
        st = self.state
        pod_index = st.pod_index
        jobs = self.jobs
        pending = sorted(chain.from_iterable(self.queues.values()))
        order = list(pending)
        if self.quincy.preemption or self.quincy.fairness != "none":
            order = sorted(set(pending) | self._running)
        # One FlowJob per job while it waits (or runs), only its clocks moved each
        # round: its pods, and their grouping by class, are built once.
        cache = self._flow_jobs
        round_jobs: list[FlowJob] = []
        for j in order:
            fj = cache.get(j)
            job = jobs[j]
            if fj is None:
                keys = self.keys[j]
                assert keys is not None, "a job in a round was submitted"
                bound = self.bound[j]
                if bound is None:
                    fj = FlowJob(job.name, [pod_index[k] for k in keys], gang=job.tasks > 1)
                else:
                    fj = FlowJob(
                        job.name,
                        [],
                        [(pod_index[k], n, devs) for k, (n, devs) in zip(keys, bound, strict=True)],
                        gang=job.tasks > 1,
                    )
                cache[j] = fj
            fj.waited = now - job.arrival
            if fj.running:
                fj.ran = now - float(self.start[j])
            round_jobs.append(fj)
        plan = self.policy.plan(round_jobs)
        fs = self.flow_stats
        fs["rounds"] += 1
        fs["skipped"] += plan.skipped
        fs["infeasible_dropped"] += plan.infeasible
        fs["repaired"] += plan.repaired
        fs["gangs_incomplete"] += plan.gangs_incomplete
        fs["kills_deferred"] += plan.kills_deferred
        fs["max_tasks"] = max(fs["max_tasks"], plan.tasks)
        if plan.round is not None:
            fs["solved"] += 1
            fs["below_min"] += plan.round.below_min
            self.flow_seconds["build"] += plan.round.build_seconds
            self.flow_seconds["solve"] += plan.round.solve_seconds
            self.flow_seconds["max_round"] = max(
                self.flow_seconds["max_round"], plan.round.build_seconds + plan.round.solve_seconds
            )
        names = st.node_names
        started: list[int] = []
        evicted = False
        for pl in plan.placements:
            j = order[pl.job]
            job = jobs[j]
            keys = self.keys[j]
            assert keys is not None
            slot_key = {pod_index[k]: k for k in keys}
            bindings = [(slot_key[p], str(names[n]), devs) for p, n, devs in pl.bindings]
            victims = None
            if pl.victims:
                pods: list[dict[str, str]] = []
                for v in pl.victims:
                    vj = order[v]
                    vkeys, vbound = self.keys[vj], self.bound[vj]
                    assert vkeys is not None and vbound is not None
                    pods.extend(
                        {"pod": k, "node": str(names[n])}
                        for k, (n, _) in zip(vkeys, vbound, strict=True)
                    )
                    self._running.discard(vj)
                    self._flow_jobs.pop(vj, None)  # running -> waiting again
                victims = self._evict(pods, bindings[0][0], now, release_devices=False)
                evicted = True
            self._commit(j, bindings, now, victims)
            q = self.queues[job.shape]
            q.remove(j)
            if not q:
                del self.queues[job.shape]
            started.append(j)
        return started, evicted
