"""Queue enforcement as Volcano's proportion and capacity plugins do it, end to end
(manifests -> ``esched up``: dispatcher, replica, commit service -> the fold)."""

from __future__ import annotations

import asyncio

import pytest

from esched.schemas.manifests import events_from_documents, load_documents

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def _hierarchical_example(node_cpu: str = "4") -> str:
    """volcano-sh/volcano example/hierarchical-jobs (queues.yaml and jobs.yaml): four
    queues of weight 1 and one Job each of six 0.5-CPU pods, ``minAvailable: 1``; on
    one node."""
    docs = [
        f"""
apiVersion: v1
kind: Node
metadata: {{name: n1}}
status: {{allocatable: {{cpu: "{node_cpu}", memory: 16Gi, pods: "110"}}}}
"""
    ]
    for team, weight in (("eng", 2), ("sci", 8)):
        for env, w in (("prod", 8), ("dev", 2)):
            docs.append(f"""
apiVersion: scheduling.volcano.sh/v1beta1
kind: Queue
metadata:
  name: root-{team}-{env}
  annotations:
    volcano.sh/hierarchy: root/{team}/{env}
    volcano.sh/hierarchy-weights: 1/{weight}/{w}
spec: {{weight: 1}}
""")
    for team in ("eng", "sci"):
        for env in ("prod", "dev"):
            docs.append(f"""
apiVersion: batch.volcano.sh/v1alpha1
kind: Job
metadata: {{name: {team}-{env}-job, namespace: default}}
spec:
  minAvailable: 1
  schedulerName: volcano
  queue: root-{team}-{env}
  tasks:
    - replicas: 6
      name: default-nginx
      template:
        spec:
          schedulerName: volcano
          containers:
            - name: nginx
              image: nginx
              resources: {{requests: {{cpu: "0.5"}}}}
""")
    return "---".join(docs)


async def _up(tmp_path, text: str, name: str = "v", queue_hierarchy: str = "parent") -> dict:
    from esched.services.bus.base import TopicNames
    from esched.services.event_files import record_for_event
    from esched.services.store import open_store
    from esched.services.store.snapshots import fold_log
    from esched.services.up import Up, UpConfig

    url = f"sqlite:///{tmp_path / (name + '.sqlite')}"
    events = list(events_from_documents(load_documents(text), id_prefix=name))
    records = [record_for_event(e, TopicNames(), "test") for e in events]
    await asyncio.wait_for(
        Up(
            UpConfig(
                store=url,
                progress_every=0,
                exit_when_idle=True,
                queue_hierarchy=queue_hierarchy,
            ),
            records,
        ).run(),
        60,
    )
    es = open_store(url)
    await es.connect()
    try:
        return (await fold_log(es)).summary()["queues"]
    finally:
        await es.close()


async def test_up_hierarchical_example_four_queues_each_deserving_a_quarter_end_2_2_2_2(tmp_path):
    """Volcano's example/hierarchical-jobs on one 4-CPU node: the four queues of weight
    1 each deserve a quarter (1 CPU); each elastic job (minAvailable 1 of 6) runs two
    0.5-CPU pods and no more while the others wait (proportion's ``allocatable``:
    allocated + request <= deserved), not 5/2/1/0 as when the first queue to be
    served took what was free."""
    queues = await _up(tmp_path, _hierarchical_example())
    running = {q: queues[q]["Running"] for q in queues if q.startswith("root-")}
    assert running == {
        "root-eng-prod": 2,
        "root-eng-dev": 2,
        "root-sci-prod": 2,
        "root-sci-dev": 2,
    }
    for q in running:
        assert queues[q]["fairShare"]["cpu"] == 1000
        assert queues[q]["Pending"] == 4


async def test_up_hierarchical_example_with_queue_hierarchy_annotations_follows_the_weights(
    tmp_path,
):
    """The same example under ``queue_hierarchy="annotations"`` (Volcano's drf plugin
    with ``enableHierarchy``, docs/design/hdrf.md in volcano-sh/volcano): the tree is
    root -> eng (2) / sci (8) -> prod (8) / dev (2) from ``volcano.sh/hierarchy`` and
    ``volcano.sh/hierarchy-weights``. Of 4 CPU, eng deserves 0.8 (prod 0.64, dev 0.16)
    and sci 3.2 (prod 2.56, dev 0.64); each queue runs the 0.5-CPU pods that fit in
    its share: 1 / 0 / 5 / 1. eng-dev's share (0.16) is below its job's minimum (one
    pod), so the job is held (``QueueOverused``) while the others wait, as in the
    default mode; the tree, not the rule, is what the option changes."""
    queues = await _up(tmp_path, _hierarchical_example(), queue_hierarchy="annotations")
    running = {q: queues[q]["Running"] for q in queues if q.startswith("root-")}
    assert running == {
        "root-eng-prod": 1,
        "root-eng-dev": 0,
        "root-sci-prod": 5,
        "root-sci-dev": 1,
    }
    assert queues["root-eng-dev"]["Pending"] == 6
    assert queues["root-sci-prod"]["hierarchy"] == "root/sci/prod"
    assert queues["root-sci-prod"]["hierarchy_weights"] == "1/8/8"


async def test_up_a_podgroup_naming_a_missing_queue_is_rejected_and_the_audit_passes(tmp_path):
    """Volcano's PodGroup webhook refuses ``spec.queue`` naming no Queue ("unable to
    find queue"); through ``esched up`` its pods are rejected (``esched.pod.rejected``,
    ``QueueNotFound``, Failed), the audit agrees, and the pod of a real queue runs."""
    from esched.services.audit import audit_store
    from esched.services.store import open_store

    text = """
apiVersion: v1
kind: Node
metadata: {name: n1}
status: {allocatable: {cpu: "4", memory: 16Gi, pods: "110"}}
---
apiVersion: scheduling.volcano.sh/v1beta1
kind: Queue
metadata: {name: real}
spec: {weight: 1}
---
apiVersion: scheduling.volcano.sh/v1beta1
kind: PodGroup
metadata: {name: lost, namespace: default}
spec: {minMember: 1, queue: nowhere}
---
apiVersion: v1
kind: Pod
metadata:
  name: lost-0
  namespace: default
  annotations: {scheduling.k8s.io/group-name: lost}
spec:
  containers: [{name: c, image: x, resources: {requests: {cpu: "1"}}}]
---
apiVersion: v1
kind: Pod
metadata:
  name: found
  namespace: default
  annotations: {scheduling.volcano.sh/queue-name: real}
spec:
  containers: [{name: c, image: x, resources: {requests: {cpu: "1"}}}]
"""
    queues = await _up(tmp_path, text, "lost")
    assert queues["real"]["Running"] == 1
    assert queues["nowhere"]["Pending"] == 0 and queues["nowhere"]["Running"] == 0
    es = open_store(f"sqlite:///{tmp_path / 'lost.sqlite'}")
    await es.connect()
    try:
        import orjson

        rejected = [
            orjson.loads(r.payload)["data"]
            for r in await es.read(0, 1000)
            if r.type == "esched.pod.rejected"
        ]
        assert [(d["pod"], d["reason"], d["queue"]) for d in rejected] == [
            ("default/lost-0", "QueueNotFound", "nowhere")
        ]
        report = await audit_store(es)
        assert report["ok"], report["violations"]
    finally:
        await es.close()


def test_cli_queue_hierarchy_from_the_config_file_reaches_up_replay_and_audit(tmp_path):
    """``queue_hierarchy: annotations`` in the config file (a shared key) reaches
    ``esched up``, ``replay`` and ``audit``: the same 1/0/5/1 as above, replay shows
    the annotated path and the fair share over that tree, the audit finds the log
    clean; the default replay shows the ``spec.parent`` view (root.NAME)."""
    import json

    from click.testing import CliRunner

    from esched.services.cli import cli

    cfg = tmp_path / "esched.yaml"
    cfg.write_text("queue_hierarchy: annotations\n")
    manifests = tmp_path / "example.yaml"
    manifests.write_text(_hierarchical_example())
    store = f"sqlite:///{tmp_path / 'h.sqlite'}"
    runner = CliRunner()
    base = ["--config", str(cfg)]
    res = runner.invoke(
        cli,
        [*base, "up", "--store", store, "--input", str(manifests), "--exit-when-idle", "--quiet"],
    )
    assert res.exit_code == 0, res.output
    queues = json.loads(runner.invoke(cli, [*base, "replay", "--store", store]).stdout)["queues"]
    assert {q: queues[q]["Running"] for q in queues if q.startswith("root-")} == {
        "root-eng-prod": 1,
        "root-eng-dev": 0,
        "root-sci-prod": 5,
        "root-sci-dev": 1,
    }
    sci_prod = queues["root-sci-prod"]
    assert sci_prod["path"] == "root/sci/prod"
    assert sci_prod["fairShare"]["cpu"] == 2560  # 4 CPU x 8/10 x 8/10
    assert queues["root-eng-dev"]["fairShare"]["cpu"] == 160  # 4 CPU x 2/10 x 2/10
    res = runner.invoke(cli, [*base, "audit", "--store", store])
    report = json.loads(res.stdout)
    assert res.exit_code == 0 and report["ok"], report["violations"]
    assert report["queues"]["root-sci-prod"]["path"] == "root/sci/prod"
    flat = json.loads(runner.invoke(cli, ["replay", "--store", store]).stdout)["queues"]
    assert flat["root-sci-prod"]["path"] == "root.root-sci-prod"
    bad = runner.invoke(cli, ["replay", "--store", store, "--queue-hierarchy", "labels"])
    assert bad.exit_code == 2


def _hdrf_blocking_nodes() -> str:
    """hdrf_test.go "blocking nodes test" as manifests: one 30-CPU / 30G node; queues
    root/pg1, root/pg2, root/pg3/pg31, root/pg3/pg32, root/pg4 (weights 25, pg3's
    children 50); PodGroups of minMember 0 with 30 pods each: pg1, pg2 and pg31 ask 1
    CPU, pg32 (in queue root-pg3-pg31 too) and pg4 1G."""
    docs = [
        """
apiVersion: v1
kind: Node
metadata: {name: n}
status: {allocatable: {cpu: "30", memory: "30G", pods: "500"}}
"""
    ]
    for name, path, weights in (
        ("root-pg1", "root/pg1", "100/25"),
        ("root-pg2", "root/pg2", "100/25"),
        ("root-pg3-pg31", "root/pg3/pg31", "100/25/50"),
        ("root-pg3-pg32", "root/pg3/pg32", "100/25/50"),
        ("root-pg4", "root/pg4", "100/25"),
    ):
        docs.append(f"""
apiVersion: scheduling.volcano.sh/v1beta1
kind: Queue
metadata:
  name: {name}
  annotations: {{volcano.sh/hierarchy: {path}, volcano.sh/hierarchy-weights: {weights}}}
spec: {{weight: 1}}
""")
    for group, queue, req in (
        ("pg1", "root-pg1", 'cpu: "1"'),
        ("pg2", "root-pg2", 'cpu: "1"'),
        ("pg31", "root-pg3-pg31", 'cpu: "1"'),
        ("pg32", "root-pg3-pg31", "memory: 1G"),
        ("pg4", "root-pg4", "memory: 1G"),
    ):
        docs.append(f"""
apiVersion: scheduling.volcano.sh/v1beta1
kind: PodGroup
metadata: {{name: {group}, namespace: default}}
spec: {{minMember: 0, queue: {queue}}}
""")
        for i in range(30):
            docs.append(f"""
apiVersion: v1
kind: Pod
metadata:
  name: {group}-p{i}
  namespace: default
  annotations: {{scheduling.k8s.io/group-name: {group}}}
spec:
  containers: [{{name: c, image: x, resources: {{requests: {{{req}}}}}}}]
""")
    return "---".join(docs)


async def test_up_hdrf_blocking_nodes_case_runs_volcanos_allocations(tmp_path):
    """hdrf_test.go "blocking nodes test" through ``esched up`` under
    ``queue_hierarchy="annotations"``: Volcano expects pg1, pg2, pg31 at 10 CPUs
    each and pg32, pg4 at 15G each; per queue, root-pg3-pg31 runs pg31's 10 and
    pg32's 15."""
    queues = await _up(tmp_path, _hdrf_blocking_nodes(), "hdrf", queue_hierarchy="annotations")
    running = {q: queues[q]["Running"] for q in queues if q.startswith("root-pg")}
    assert running == {
        "root-pg1": 10,
        "root-pg2": 10,
        "root-pg3-pg31": 25,
        "root-pg3-pg32": 0,
        "root-pg4": 15,
    }
