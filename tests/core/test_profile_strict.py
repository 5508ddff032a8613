"""KubeSchedulerConfiguration strictness: what kube-scheduler refuses, and what esched
cannot honour, is refused at start with the field path; never accepted and ignored.

Cases ported from kubernetes/kubernetes
``pkg/scheduler/apis/config/validation/validation_test.go``
(``TestValidateKubeSchedulerConfiguration*``: percentage-of-nodes-to-score 101,
scheduler-name-not-set, repeated-scheduler-name, duplicated-plugin-config,
invalid-node-percentage, the custom queueSort/bind plugins of its valid config and
the removed plugins of ``removedPluginsByVersion``). Where kube accepts and esched
refuses, the case says why.
"""

from __future__ import annotations

import pytest

from esched.core import ClusterState, Placer
from esched.core.profile import API_VERSION, ProfileError, load_profile, parse_profile
from esched.core.reasons import OTHER_SCHEDULER
from esched.core.schedule import PassConfig, SchedulingPass, Target
from support.fold import EV, Log, node, pod


def config(*profiles: dict, **top) -> dict:
    return {
        "apiVersion": API_VERSION,
        "kind": "KubeSchedulerConfiguration",
        "profiles": list(profiles),
        **top,
    }


def refused(doc: dict, name: str | None = None) -> ProfileError:
    with pytest.raises(ProfileError) as info:
        parse_profile(doc, name)
    return info.value


def test_a_single_valid_profile_is_accepted() -> None:
    prof = parse_profile(
        config(
            {
                "schedulerName": "me",
                "plugins": {"score": {"disabled": [{"name": "*"}]}},
                "pluginConfig": [
                    # kube's valid config: DefaultPreemption's defaults stated.
                    {
                        "name": "DefaultPreemption",
                        "args": {
                            "minCandidateNodesPercentage": 10,
                            "minCandidateNodesAbsolute": 100,
                        },
                    },
                    {"name": "PodTopologySpread", "args": {"defaultingType": "List"}},
                ],
            },
            percentageOfNodesToScore=35,
            parallelism=8,
        )
    )
    assert prof.name == "me" and prof.percentage_of_nodes_to_score == 35


@pytest.mark.parametrize(
    ("doc", "field", "text"),
    [
        # Other API versions (v1beta2, v1beta3 are removed from kube).
        (
            {**config({}), "apiVersion": "kubescheduler.config.k8s.io/v1beta3"},
            "apiVersion",
            "expected kubescheduler.config.k8s.io/v1",
        ),
        # kube: bad-percentage-of-nodes-to-score.
        (config({}, percentageOfNodesToScore=101), "percentageOfNodesToScore", "0..100"),
        # kube: scheduler-name-not-set (with several profiles).
        (config({"schedulerName": "me"}, {}), "profiles[1].schedulerName", "Required"),
        # kube: repeated-scheduler-name.
        (
            config({"schedulerName": "other"}, {"schedulerName": "other"}),
            "profiles[1].schedulerName",
            "Duplicate",
        ),
        # kube: duplicated-plugin-config.
        (
            config({"pluginConfig": [{"name": "NodeResourcesFit"}, {"name": "NodeResourcesFit"}]}),
            "profiles[0].pluginConfig[1].name",
            "repeated config",
        ),
        # kube accepts CustomSort/CustomBind when registered out of tree; esched has no
        # such plugins, so it refuses rather than run without them.
        (
            config({"plugins": {"queueSort": {"enabled": [{"name": "CustomSort"}]}}}),
            "profiles[0].plugins.queueSort.enabled[0].name",
            "unknown plugin 'CustomSort'",
        ),
        (
            config({"plugins": {"bind": {"enabled": [{"name": "CustomBind"}]}}}),
            "profiles[0].plugins.bind.enabled[0].name",
            "unknown plugin",
        ),
        # removedPluginsByVersion (v1beta2) and later removals.
        (
            config({"plugins": {"score": {"enabled": [{"name": "NodeResourcesLeastAllocated"}]}}}),
            "profiles[0].plugins.score.enabled[0].name",
            "removed",
        ),
        (
            config({"plugins": {"filter": {"enabled": [{"name": "EBSLimits"}]}}}),
            "profiles[0].plugins.filter.enabled[0].name",
            "removed",
        ),
        (
            config({"plugins": {"preScore": {"enabled": [{"name": "SelectorSpread"}]}}}),
            "profiles[0].plugins.preScore.enabled[0].name",
            "removed",
        ),
        (
            config({"plugins": {"sort": {"enabled": [{"name": "PrioritySort"}]}}}),
            "profiles[0].plugins.sort",
            "unknown extension point",
        ),
        # kube: invalid-node-percentage (200); esched refuses any non-default value, as
        # its preemption considers every node.
        (
            config(
                {
                    "pluginConfig": [
                        {"name": "DefaultPreemption", "args": {"minCandidateNodesPercentage": 200}}
                    ]
                }
            ),
            "profiles[0].pluginConfig[0].args.minCandidateNodesPercentage",
            "not honoured",
        ),
        (
            config(
                {
                    "pluginConfig": [
                        {"name": "DefaultPreemption", "args": {"minCandidateNodesAbsolute": 5}}
                    ]
                }
            ),
            "profiles[0].pluginConfig[0].args.minCandidateNodesAbsolute",
            "not honoured",
        ),
        # kube's PodTopologySpreadArgs validation (validation_pluginargs_test.go
        # TestValidatePodTopologySpreadArgs): defaults listed under System defaulting.
        (
            config(
                {
                    "pluginConfig": [
                        {
                            "name": "PodTopologySpread",
                            "args": {
                                "defaultConstraints": [
                                    {
                                        "maxSkew": 1,
                                        "topologyKey": "topology.kubernetes.io/zone",
                                        "whenUnsatisfiable": "ScheduleAnyway",
                                    }
                                ],
                            },
                        }
                    ]
                }
            ),
            "profiles[0].pluginConfig[0].args.defaultingType",
            "defaultConstraints are not empty",
        ),
        (
            config(
                {
                    "pluginConfig": [
                        {"name": "NodeResourcesFit", "args": {"ignoredResources": ["x"]}}
                    ]
                }
            ),
            "profiles[0].pluginConfig[0].args.ignoredResources",
            "not honoured",
        ),
        (
            config({"pluginConfig": [{"name": "TaintToleration", "args": {"x": 1}}]}),
            "profiles[0].pluginConfig[0].args.x",
            "not an argument",
        ),
        # Filters esched always applies cannot be disabled.
        (
            config({"plugins": {"filter": {"disabled": [{"name": "NodePorts"}]}}}),
            "profiles[0].plugins.filter.disabled",
            "NodePorts filter",
        ),
        (
            config({"plugins": {"multiPoint": {"disabled": [{"name": "*"}]}}}),
            "profiles[0].plugins.multiPoint.disabled",
            "cannot disable",
        ),
        (
            config({"plugins": {"preEnqueue": {"disabled": [{"name": "SchedulingGates"}]}}}),
            "profiles[0].plugins.preEnqueue.disabled",
            "SchedulingGates",
        ),
        # Extenders are not called by esched.
        (
            config({}, extenders=[{"urlPrefix": "http://x", "filterVerb": "filter"}]),
            "extenders",
            "not supported",
        ),
        (config({}, policy={}), "policy", "unknown field"),
        (config({"schedulerName": "a", "plugin": {}}), "profiles[0].plugin", "unknown field"),
    ],
)
def test_what_esched_cannot_honour_is_refused_with_the_field(doc, field, text) -> None:
    err = refused(doc)
    assert err.field == field and text in str(err), str(err)


def test_disabling_a_filter_that_is_enabled_again_is_accepted() -> None:
    # kube's idiom: disable everything, enable a list; every always-on filter is back.
    filters = ["NodeUnschedulable", "NodeName", "TaintToleration", "NodeAffinity"]
    filters += ["NodePorts", "NodeResourcesFit", "SchedulingGates", "InterPodAffinity"]
    filters += ["PodTopologySpread"]
    parse_profile(
        config(
            {
                "plugins": {
                    "multiPoint": {
                        "disabled": [{"name": "*"}],
                        "enabled": [{"name": n} for n in filters],
                    }
                }
            }
        )
    )
    # Disabling a filter for pods esched refuses at ingest (VolumeBinding) is harmless;
    # InterPodAffinity's required terms are honoured, so its filter is always on.
    parse_profile(config({"plugins": {"filter": {"disabled": [{"name": "VolumeBinding"}]}}}))
    with pytest.raises(ProfileError, match="InterPodAffinity"):
        parse_profile(config({"plugins": {"filter": {"disabled": [{"name": "InterPodAffinity"}]}}}))


def test_several_profiles_resolve_together_unless_one_is_picked(tmp_path) -> None:
    doc = config({"schedulerName": "a"}, {"schedulerName": "b"})
    both = parse_profile(doc)
    assert [p.name for p in both.profiles] == ["a", "b"]
    assert parse_profile(doc, "b").name == "b" and parse_profile(doc, "b").siblings == ()


def test_a_profile_file_must_name_its_api_version(tmp_path) -> None:
    path = tmp_path / "p.yaml"
    path.write_text("kind: KubeSchedulerConfiguration\nprofiles: [{schedulerName: x}]\n")
    with pytest.raises(ProfileError, match="apiVersion: required"):
        load_profile(path)
    path.write_text(f"apiVersion: {API_VERSION}\nprofiles: [{{schedulerName: x}}]\n")
    assert load_profile(path).name == "x"


def _named(name: str, scheduler: str | None, **kw) -> dict:
    p = pod(name, **kw)
    if scheduler is not None:
        p["spec"]["schedulerName"] = scheduler
    return p


def test_a_pod_naming_another_scheduler_is_left_pending_with_that_reason() -> None:
    st = ClusterState()
    log = Log(st)
    log(EV.NODE_ADDED, node("n1", cpu="8"))
    log(EV.POD_SUBMITTED, _named("mine", "best-fit"))
    log(EV.POD_SUBMITTED, _named("unnamed", None))
    log(EV.POD_SUBMITTED, _named("volcano", "volcano"))
    log(EV.POD_SUBMITTED, _named("theirs", "default-scheduler"))
    profile = parse_profile(config({"schedulerName": "best-fit"}))
    sp = SchedulingPass(st, Placer(st, profile), PassConfig(preemption=False))
    out = sp.run([Target("pod", f"ns/{k}") for k in ("mine", "unnamed", "volcano", "theirs")])
    placed = sorted(b[0] for p in out.placements for b in p.bindings)
    assert placed == ["ns/mine", "ns/unnamed", "ns/volcano"]
    _t, reasons, message = out.unschedulable["ns/theirs"]
    assert reasons == {OTHER_SCHEDULER: 1}
    assert "'default-scheduler'" in message and "'best-fit'" in message
    assert st.scheduler_of["ns/theirs"] == "default-scheduler"
    assert ClusterState.from_bytes(st.to_bytes()).scheduler_of == st.scheduler_of


def test_gang_members_naming_another_scheduler_are_left_out() -> None:
    st = ClusterState()
    log = Log(st)
    log(EV.NODE_ADDED, node("n1", cpu="8"))
    log(
        EV.PODGROUP_SUBMITTED,
        {"metadata": {"name": "g", "namespace": "ns"}, "spec": {"minMember": 2}},
    )
    log(EV.POD_SUBMITTED, _named("g-0", None, gang="g"))
    log(EV.POD_SUBMITTED, _named("g-1", "elsewhere", gang="g"))
    sp = SchedulingPass(st, Placer(st), PassConfig(preemption=False))
    out = sp.run([Target("gang", "ns/g")])
    assert not out.placements and out.gangs_waiting == 1
    assert out.unschedulable["ns/g-1"][1] == {OTHER_SCHEDULER: 1}
