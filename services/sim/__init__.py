"""Trace-driven simulation and packing evaluation through the real core.

Modules: :mod:`.traces` (loaders), :mod:`.engine` (the event-driven run),
:mod:`.metrics` (what a run measured), :mod:`.compaction` (Verma et al.'s cluster
compaction and workload inflation), :mod:`.quincy` (Quincy's min-cost-flow rounds),
:mod:`.usage` (usage models: a pod's usage over time), :mod:`.reclamation` (Borg's
reclamation study), :mod:`.studies` (``esched compare``'s runs per
profile and per Quincy variant, the studies' tables), :mod:`.bench` (``esched bench
simulate``), :mod:`.report` (HTML, JSON, terminal).
"""
