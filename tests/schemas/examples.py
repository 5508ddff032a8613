"""Valid example events of every esched type, shared by the schema tests."""

from __future__ import annotations

import copy
from typing import Any

POD: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {
        "name": "trainer-0",
        "namespace": "ml",
        "labels": {"app": "trainer", "example.com/team": "vision"},
        "annotations": {
            "scheduling.k8s.io/group-name": "trainer",
            "volcano.sh/queue-name": "research",
        },
    },
    "spec": {
        "priority": 100,
        "priorityClassName": "batch",
        "initContainers": [
            {"name": "fetch", "resources": {"requests": {"cpu": "2", "memory": "1Gi"}}}
        ],
        "containers": [
            {
                "name": "main",
                "image": "trainer:1",
                "resources": {
                    "requests": {"cpu": "1500m", "memory": "4Gi"},
                    "limits": {"cpu": 2, "memory": "4Gi", "nvidia.com/gpu": 1},
                },
            },
            {"name": "sidecar", "resources": {"requests": {"cpu": 0.1, "memory": "128Mi"}}},
        ],
        "overhead": {"cpu": "50m"},
        "nodeSelector": {"pool": "gpu"},
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {
                            "matchExpressions": [
                                {"key": "zone", "operator": "In", "values": ["a", "b"]},
                                {"key": "gpu-mem", "operator": "Gt", "values": ["40"]},
                                {"key": "spot", "operator": "DoesNotExist"},
                            ],
                            "matchFields": [
                                {
                                    "key": "metadata.name",
                                    "operator": "NotIn",
                                    "values": ["bad-node"],
                                }
                            ],
                        }
                    ]
                },
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "weight": 10,
                        "preference": {"matchExpressions": [{"key": "ssd", "operator": "Exists"}]},
                    }
                ],
            }
        },
        "tolerations": [
            {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
            {
                "key": "dedicated",
                "operator": "Equal",
                "value": "ml",
                "effect": "NoExecute",
                "tolerationSeconds": 300,
            },
            {"operator": "Exists"},
        ],
        "restartPolicy": "Never",
    },
    "status": {"phase": "Pending"},
}

NODE: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "Node",
    "metadata": {
        "name": "gpu-node-1.example.com",
        "labels": {"pool": "gpu", "kubernetes.io/hostname": "gpu-node-1"},
    },
    "spec": {
        "taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}],
        "unschedulable": False,
    },
    "status": {
        "capacity": {"cpu": "64", "memory": "512Gi", "pods": "110", "nvidia.com/gpu": "8"},
        "allocatable": {
            "cpu": "63500m",
            "memory": "500Gi",
            "pods": 110,
            "nvidia.com/gpu": 8,
            "hugepages-2Mi": "0",
        },
    },
}

PODGROUP: dict[str, Any] = {
    "apiVersion": "scheduling.volcano.sh/v1beta1",
    "kind": "PodGroup",
    "metadata": {"name": "trainer", "namespace": "ml"},
    "spec": {
        "minMember": 4,
        "queue": "research",
        "priorityClassName": "batch",
        "minResources": {"cpu": "6", "memory": "16Gi", "nvidia.com/gpu": "4"},
    },
}

QUEUE: dict[str, Any] = {
    "apiVersion": "scheduling.volcano.sh/v1beta1",
    "kind": "Queue",
    "metadata": {
        "name": "default-queue",
        "annotations": {"description": "Production workloads queue"},
    },
    "spec": {
        "weight": 1,
        "priority": 100,
        "capability": {"cpu": 100, "memory": "100Gi", "nvidia.com/gpu": 4},
        "deserved": {"cpu": 80, "memory": "80Gi", "nvidia.com/gpu": 3},
        "guarantee": {"resource": {"cpu": 50, "memory": "50Gi", "nvidia.com/gpu": 2}},
        "reclaimable": True,
        "parent": "root.eng",
        "affinity": {
            "nodeGroupAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": ["gpu-nodes"],
                "preferredDuringSchedulingIgnoredDuringExecution": ["high-memory-nodes"],
            },
            "nodeGroupAntiAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": ["test-nodes"]
            },
        },
        "extendClusters": [
            {"name": "cluster-1", "weight": 5, "capacity": {"cpu": 1000, "memory": "1000Gi"}}
        ],
    },
    "status": {"state": "Open"},
}

USAGE: dict[str, Any] = {
    "window": 30,
    "nodes": [{"name": "gpu-node-1.example.com", "usage": {"cpu": "12", "memory": "40Gi"}}],
    "pods": [{"pod": "ml/trainer-0", "usage": {"cpu": "1200m", "memory": "3.5Gi"}}],
}

PROPOSAL: dict[str, Any] = {
    "proposal": "replica-1:42",
    "replica": "replica-1",
    "position": 1234,
    "gang": "ml/trainer",
    "bindings": [
        {
            "pod": "ml/trainer-0",
            "node": "gpu-node-1.example.com",
            "resources": {"cpu": 1650, "memory": 4429185024, "nvidia.com/gpu": 1, "pods": 1},
        },
    ],
}

DATA: dict[str, dict[str, Any]] = {
    "esched.node.added": NODE,
    "esched.node.updated": NODE,
    "esched.node.removed": {"metadata": {"name": "gpu-node-1.example.com"}},
    "esched.pod.submitted": POD,
    "esched.pod.deleted": {"metadata": {"name": "trainer-0", "namespace": "ml"}},
    "esched.pod.updated": {
        "metadata": {"name": "trainer-0", "namespace": "ml"},
        "spec": {"schedulingGates": [{"name": "example.com/quota"}]},
    },
    "esched.pod.succeeded": {"metadata": {"name": "trainer-0"}, "status": {"phase": "Succeeded"}},
    "esched.pod.failed": {
        "metadata": {"name": "trainer-0", "namespace": "ml"},
        "status": {"phase": "Failed", "reason": "OOMKilled"},
    },
    "esched.podgroup.submitted": PODGROUP,
    "esched.queue.upserted": QUEUE,
    "esched.usage.reported": USAGE,
    # The PriorityClass example of kubernetes.io's "Pod Priority and Preemption" page.
    "esched.priorityclass.upserted": {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": "high-priority"},
        "value": 1000000,
        "globalDefault": False,
        "preemptionPolicy": "PreemptLowerPriority",
        "description": "This priority class should be used for XYZ service pods only.",
    },
    # A Namespace as kubectl shows it; its labels are what namespaceSelectors match.
    "esched.namespace.upserted": {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": "ml", "labels": {"team": "research"}},
        "spec": {"finalizers": ["kubernetes"]},
        "status": {"phase": "Active"},
    },
    "esched.namespace.deleted": {"metadata": {"name": "ml"}},
    "esched.placement.proposed": PROPOSAL,
    "esched.placement.committed": {**PROPOSAL, "gang": None},
    "esched.placement.rejected": {
        "proposal": "replica-1:42",
        "replica": "replica-1",
        "position": 1234,
        "gang": "ml/trainer",
        "pods": ["ml/trainer-0", "ml/trainer-1"],
        "reason": "Insufficient.nvidia.com/gpu",
        "message": "gpu-node-1.example.com: nvidia.com/gpu 9 requested, 8 allocatable",
    },
    "esched.pod.evicted": {
        "pod": "batch/etl-3",
        "node": "node-1",
        "reason": "Preempted",
        "message": "made room for ml/trainer-0",
    },
    "esched.pod.throttled": {
        "pod": "batch/etl-3",
        "node": "node-1",
        "reason": "Overloaded",
        "resource": "cpu",
        "usage": 4000,
        "cap": 3000,
        "capacity": 8000,
        "since": "2026-01-01T00:00:00Z",
        "report": "usage-node-1-42",
        "message": "node-1 out of cpu: batch/etl-3 held at 3000",
    },
    "esched.pod.rejected": {
        "pod": "team-a/etl-9",
        "queue": "research",
        "reason": "QuotaExceeded",
        "message": "pod team-a/etl-9 exceeds the quota of namespace/team-a: cpu requested 2000, "
        "used 19000, limit 20000 (base units)",
        "quota": {
            "scope": "namespace/team-a",
            "band": None,
            "resource": "cpu",
            "limit": 20000,
            "used": 19000,
            "requested": 2000,
        },
    },
    "esched.job.submitted": {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": {"name": "trainer", "namespace": "ml"},
        "spec": {
            "minAvailable": 1,
            "maxRetry": 3,
            "policies": [{"event": "PodEvicted", "action": "RestartJob"}],
            "tasks": [
                {
                    "name": "ps",
                    "replicas": 1,
                    "template": {"spec": {"containers": [{"name": "main", "image": "trainer"}]}},
                },
                {
                    "name": "worker",
                    "replicas": 2,
                    "dependsOn": {"name": ["ps"]},
                    "template": {"spec": {"containers": [{"name": "main", "image": "trainer"}]}},
                },
            ],
        },
    },
    "esched.job.updated": {
        "job": "ml/trainer",
        "seq": 1,
        "phase": "Restarting",
        "previous": "Running",
        "attempt": 1,
        "reason": "PodEvicted",
        "action": "RestartJob",
    },
    "esched.job.timer": {"job": "ml/trainer", "due": "2030-01-01T01:00:00Z"},
    "esched.gang.reserved": {
        "gang": "ml/trainer",
        "nodes": ["gpu-node-1.example.com", "gpu-node-2.example.com"],
        "waited_seconds": 31.5,
        "message": "gang ml/trainer waited 31.5s (2/4 members fit; short of nvidia.com/gpu: 2)",
    },
    "esched.pod.unschedulable": {
        "pod": "ml/trainer-0",
        "reasons": {"Insufficient.cpu": 3, "NodeUnschedulable": 1, "TaintNotTolerated": 1},
        "message": "0/5 nodes are available: 3 Insufficient cpu, 1 node(s) were unschedulable, "
        "1 node(s) had untolerated taint",
    },
}


_EXAMPLE: Any = object()


def event(etype: str, data: Any = _EXAMPLE, **attrs: Any) -> dict[str, Any]:
    """A valid envelope of ``etype`` around (a copy of) its example data."""
    env = {
        "specversion": "1.0",
        "id": f"test-{etype}",
        "source": "/tests/schemas",
        "type": etype,
        "time": "2026-01-05T09:00:00.123Z",
        "subject": "example",
        "datacontenttype": "application/json",
        "data": copy.deepcopy(DATA[etype] if data is _EXAMPLE else data),
    }
    env.update(attrs)
    return env
