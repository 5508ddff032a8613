"""Borg priority bands, the preemption rule, gang sizes from annotations, gang reasons."""

import pytest

from esched.core import ClusterState, Placer
from esched.core.bands import (
    DEFAULT_BANDS,
    Band,
    BandConfig,
    BandConfigError,
    is_prod,
    may_preempt,
    parse_bands,
)
from esched.schemas.quantity import format_units
from support.fold import EV, Log, node, pod


@pytest.mark.parametrize(
    ("priority", "band"),
    [
        (2_000_000_000, Band.MONITORING),  # system-cluster-critical
        (1_000_000_000, Band.MONITORING),  # thresholds are inclusive lower bounds
        (999_999_999, Band.PRODUCTION),
        (1000, Band.PRODUCTION),
        (999, Band.BATCH),
        (100, Band.BATCH),
        (99, Band.BEST_EFFORT),
        (0, Band.BEST_EFFORT),  # the default priority: Borg's free tier
        (-5, Band.BEST_EFFORT),
    ],
)
def test_default_thresholds(priority, band):
    assert DEFAULT_BANDS.band_of(priority) == band


def test_class_mapping_wins_over_the_number():
    cfg = parse_bands({"production": 500, "classes": {"nightly": "batch", "infra": "monitoring"}})
    assert cfg.band_of(5000, "nightly") == Band.BATCH
    assert cfg.band_of(0, "infra") == Band.MONITORING
    assert cfg.band_of(600, "unmapped") == Band.PRODUCTION  # unmapped: the number decides
    assert cfg.band_of(600) == Band.PRODUCTION
    assert parse_bands(cfg.as_dict()) == cfg


@pytest.mark.parametrize(
    ("raw", "where"),
    [
        ({"batch": "high"}, "bands.batch"),
        ({"production": 10, "batch": 10}, "bands"),  # must strictly decrease
        ({"classes": {"x": "urgent"}}, "bands.classes.x"),
        ({"classes": ["x"]}, "bands.classes"),
        ({"prod": 5}, "bands.prod"),
        ("monitoring", "bands"),
    ],
)
def test_bad_band_config_names_the_field(raw, where):
    with pytest.raises(BandConfigError) as err:
        parse_bands(raw)
    assert err.value.field == where


def test_preemption_rule_is_borgs():
    m, p, b, e = Band.MONITORING, Band.PRODUCTION, Band.BATCH, Band.BEST_EFFORT
    assert is_prod(m) and is_prod(p) and not is_prod(b) and not is_prod(e)
    legal = {(x, y) for x in Band for y in Band if may_preempt(x, y)}
    # prod evicts non-prod; batch evicts best-effort; nothing evicts its own band or a
    # higher one; prod never evicts prod (monitoring does not evict production).
    assert legal == {(m, b), (m, e), (p, b), (p, e), (b, e)}


def test_priority_class_name_is_part_of_the_class():
    s = ClusterState()
    a = s.intern_class(pod("a", priorityClassName="nightly"))
    b = s.intern_class(pod("b", priorityClassName="urgent"))
    c = s.intern_class(pod("c"))
    assert len({a, b, c}) == 3
    assert s.class_specs[a]["priorityClassName"] == "nightly"
    assert s.class_specs[c]["priorityClassName"] is None
    restored = ClusterState.from_bytes(s.to_bytes())
    assert restored.intern_class(pod("d", priorityClassName="nightly")) == a


def _annotated(name, group, size, **kw):
    p = pod(name, gang=group, **kw)
    p["metadata"]["annotations"]["scheduling.k8s.io/group-pod-num"] = size
    return p


def test_group_pod_num_annotation_sets_min_member():
    s = ClusterState()
    log = Log(s)
    log(EV.POD_SUBMITTED, _annotated("a", "qj-1", "3"))
    assert s.gang_min_member("ns/qj-1") == 3
    # a PodGroup's minMember wins over the annotation, whatever the order
    log(
        EV.PODGROUP_SUBMITTED,
        {"metadata": {"name": "qj-1", "namespace": "ns"}, "spec": {"minMember": 2}},
    )
    log(EV.POD_SUBMITTED, _annotated("b", "qj-1", "5"))
    assert s.gang_min_member("ns/qj-1") == 2
    log(EV.POD_SUBMITTED, _annotated("c", "qj-2", "zero"))
    assert s.gang_min_member("ns/qj-2") == 1
    assert s.anomalies["invalid_group_pod_num"] == 1


def test_annotation_gang_is_all_or_nothing():
    s = ClusterState()
    log = Log(s)
    log(EV.NODE_ADDED, node("n1", cpu="2", memory="8Gi"))
    members = [_annotated(f"m{i}", "qj", "3", cpu="1", memory="1Gi") for i in range(3)]
    for m in members:
        log(EV.POD_SUBMITTED, m)
    p = Placer(s)
    keys = s.gang_members("ns/qj", "Pending")
    assert p.plan_gang(keys, s.gang_min_member("ns/qj")) is None
    assert p.gang_failure == {"fit": 2, "need": 3, "members": 3, "short": {"cpu": 1000}}
    assert p.gang_message() == "2/3 members fit; short of cpu: 1"


def test_gang_message_names_the_short_resource():
    # The example: 10 one-GPU members, room for 7.
    s = ClusterState()
    log = Log(s)
    for i in range(7):
        log(EV.NODE_ADDED, node(f"g{i}", **{"nvidia.com/gpu": "1"}))
    log(EV.NODE_ADDED, node("cpu-only"))
    keys = []
    for i in range(10):
        m = pod(f"w{i}", gang="train", cpu="1", memory="1Gi")
        m["spec"]["containers"][0]["resources"]["limits"] = {"nvidia.com/gpu": "1"}
        log(EV.POD_SUBMITTED, m)
        keys.append(f"ns/w{i}")
    p = Placer(s)
    assert p.plan_gang(keys, 10) is None
    assert p.gang_message() == "7/10 members fit; short of nvidia.com/gpu: 3"
    assert (p.used_array() == s.node_allocated()).all()  # nothing held


def test_gang_message_when_the_room_is_fragmented():
    s = ClusterState()
    log = Log(s)
    log(EV.NODE_ADDED, node("a", cpu="1", memory="8Gi"))
    log(EV.NODE_ADDED, node("b", cpu="1", memory="8Gi"))
    log(EV.POD_SUBMITTED, pod("big", cpu="2", memory="1Gi"))
    p = Placer(s)
    assert p.plan_gang(["ns/big"]) is None
    assert p.gang_message().startswith("0/1 members fit; the cluster has the room in total")


@pytest.mark.parametrize(
    ("resource", "units", "text"),
    [
        ("cpu", 3000, "3"),
        ("cpu", 1500, "1500m"),
        ("memory", 2 * 2**30, "2Gi"),
        ("memory", 1000, "1000"),
        ("nvidia.com/gpu", 3, "3"),
    ],
)
def test_format_units(resource, units, text):
    assert format_units(resource, units) == text


def test_custom_thresholds_are_validated_up_front():
    with pytest.raises(BandConfigError):
        BandConfig(monitoring=10, production=10, batch=1)
