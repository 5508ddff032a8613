"""KubeSchedulerConfiguration v1 profiles: plugins, weights, args, percentage, errors."""

import pytest

from esched.core import ClusterState, Placer
from esched.core.profile import (
    DEFAULT_PROFILE,
    ProfileError,
    load_profile,
    parse_profile,
    register_python_plugin,
)
from support.fold import EV, envelope, node, pod

CONFIG = """
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
percentageOfNodesToScore: 30
profiles:
- schedulerName: default-scheduler
- schedulerName: packer
  percentageOfNodesToScore: 100
  plugins:
    score:
      disabled:
      - name: NodeResourcesBalancedAllocation
      enabled:
      - name: NodeResourcesFit
        weight: 5
      - name: TaintToleration
        weight: 3
  pluginConfig:
  - name: NodeResourcesFit
    args:
      scoringStrategy:
        type: RequestedToCapacityRatio
        resources:
        - {name: cpu, weight: 2}
        - {name: nvidia.com/gpu, weight: 1}
        requestedToCapacityRatio:
          shape:
          - {utilization: 0, score: 0}
          - {utilization: 100, score: 10}
"""


def test_default_profile_is_kube_default_scoring():
    """kube's default score plugins esched scores, with kube's weights
    (pkg/scheduler/apis/config/v1/default_plugins.go: TaintToleration 3, NodeAffinity 2,
    NodeResourcesFit 1, PodTopologySpread 2, InterPodAffinity 2,
    NodeResourcesBalancedAllocation 1)."""
    kinds = [(p.name, p.kind, p.weight, p.resources) for p in DEFAULT_PROFILE.plugins]
    assert kinds == [
        ("TaintToleration", "TaintToleration", 3, ()),
        ("NodeAffinity", "NodeAffinity", 2, ()),
        ("NodeResourcesFit", "LeastAllocated", 1, (("cpu", 1), ("memory", 1))),
        ("PodTopologySpread", "PodTopologySpread", 2, ()),
        ("InterPodAffinity", "InterPodAffinity", 2, ()),
        ("NodeResourcesBalancedAllocation", "BalancedAllocation", 1, (("cpu", 1), ("memory", 1))),
        ("NodeGroupAffinity", "NodeGroupAffinity", 2, ()),
    ]
    assert DEFAULT_PROFILE.percentage_of_nodes_to_score is None


def test_load_a_kube_scheduler_configuration_file(tmp_path):
    path = tmp_path / "config.yaml"
    path.write_text(CONFIG)
    # Every profile: default-scheduler first, the others its siblings.
    both = load_profile(path)
    assert [p.name for p in both.profiles] == ["default-scheduler", "packer"]
    default = load_profile(path, "default-scheduler")
    assert default.percentage_of_nodes_to_score == 30  # global value
    packer = load_profile(path, "packer")
    assert packer.percentage_of_nodes_to_score == 100
    na, pts, ipa, fit, tt, node_group = packer.plugins  # enabled ones after the defaults
    assert (pts.kind, pts.weight) == ("PodTopologySpread", 2)
    assert (tt.kind, tt.weight, na.kind, na.weight) == ("TaintToleration", 3, "NodeAffinity", 2)
    assert (ipa.kind, ipa.weight, ipa.hard_pod_affinity_weight) == ("InterPodAffinity", 2, 1)
    assert (node_group.kind, node_group.weight) == ("NodeGroupAffinity", 2)  # on unless disabled
    assert (fit.kind, fit.weight) == ("RequestedToCapacityRatio", 5)
    assert fit.resources == (("cpu", 2), ("nvidia.com/gpu", 1))
    assert fit.shape == ((0, 0), (100, 10))
    assert packer.ignored == ()
    with pytest.raises(ProfileError, match="no profile named"):
        load_profile(path, "missing")


def test_disable_all_and_enable_esched_plugins():
    prof = parse_profile(
        {
            "profiles": [
                {
                    "plugins": {
                        # score, not multiPoint: disabling every filter is refused.
                        "score": {
                            "disabled": [{"name": "*"}],
                            "enabled": [{"name": "Mixed", "weight": 2}, {"name": "EPVM"}],
                        },
                    },
                    "pluginConfig": [
                        {
                            "name": "Mixed",
                            "args": {"productionPriority": 500, "exhaustedPercent": 10},
                        },
                        {"name": "EPVM", "args": {"base": 8}},
                    ],
                }
            ]
        }
    )
    mixed, epvm, _node_group = prof.plugins
    assert (
        mixed.kind,
        mixed.weight,
        mixed.prod_priority,
        mixed.exhaust_permille,
        mixed.strand_permille,
    ) == ("Mixed", 2, 500, 100, 1000)
    assert (epvm.kind, epvm.epvm_base) == ("EPVM", 8.0)


@pytest.mark.parametrize(
    ("doc", "where"),
    [
        ({"kind": "Pod"}, "kind"),
        ({"profiles": [{"plugins": {"score": {"enabled": [{"name": "Nope"}]}}}]}, "unknown plugin"),
        ({"percentageOfNodesToScore": 101}, "percentageOfNodesToScore"),
        (
            {
                "profiles": [
                    {
                        "pluginConfig": [
                            {
                                "name": "NodeResourcesFit",
                                "args": {"scoringStrategy": {"type": "Random"}},
                            }
                        ]
                    }
                ]
            },
            "scoringStrategy.type",
        ),
        (
            {
                "profiles": [
                    {
                        "pluginConfig": [
                            {
                                "name": "NodeResourcesFit",
                                "args": {
                                    "scoringStrategy": {
                                        "type": "RequestedToCapacityRatio",
                                        "requestedToCapacityRatio": {
                                            "shape": [
                                                {"utilization": 50, "score": 1},
                                                {"utilization": 10, "score": 2},
                                            ]
                                        },
                                    }
                                },
                            }
                        ]
                    }
                ]
            },
            "strictly increasing",
        ),
        (
            {
                "profiles": [
                    {
                        "pluginConfig": [
                            {
                                "name": "NodeResourcesFit",
                                "args": {
                                    "scoringStrategy": {
                                        "type": "RequestedToCapacityRatio",
                                        "requestedToCapacityRatio": {
                                            "shape": [{"utilization": 0, "score": 11}]
                                        },
                                    }
                                },
                            }
                        ]
                    }
                ]
            },
            "score",
        ),
        (
            {
                "profiles": [
                    {
                        "plugins": {"score": {"enabled": [{"name": "EPVM"}]}},
                        "pluginConfig": [{"name": "EPVM", "args": {"base": 1}}],
                    }
                ]
            },
            "base",
        ),
    ],
)
def test_bad_profiles_fail_at_load_with_the_field(doc, where):
    with pytest.raises(ProfileError, match=where):
        parse_profile(doc)


def test_python_plugins_run_on_the_slow_path():
    register_python_plugin("PreferOddNodes", lambda state, n, cid: 100 if n % 2 else 0)
    prof = parse_profile(
        {
            "profiles": [
                {
                    "plugins": {
                        "score": {
                            "disabled": [{"name": "*"}],
                            "enabled": [{"name": "PreferOddNodes", "weight": 2}],
                        }
                    }
                }
            ]
        }
    )
    s = ClusterState()
    s.apply_many(enumerate([envelope(EV.NODE_ADDED, node(f"n{i}")) for i in range(4)], 1))
    out = Placer(s, prof).explain(pod("x"))
    assert {r["name"]: r["total"] for r in out["nodes"]} == {"n0": 0, "n1": 200, "n2": 0, "n3": 200}
    assert out["chosen"] in ("n1", "n3")
