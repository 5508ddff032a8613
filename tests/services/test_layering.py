"""The layering: services depend on the core, schemas, store and bus, never on each other.

Domain rules (validation, admission, reclaim, queues) live in ``esched.core``, the
shared follower and snapshots in ``esched.services.store``; the composition roots
(``up.py``, the CLI) are the only modules that put services together.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: The services: each is a facade over the core and must not import another (the job
#: controller and the simulator included).
SERVICES = ("ingest", "dispatch", "replica", "commit", "audit", "replay", "jobs", "sim")
#: Source folder -> the package it is installed as.
PACKAGES = {"core": "esched.core", "services": "esched.services", "schemas": "esched.schemas"}


def _module_of(path: Path) -> list[str]:
    """The dotted name of the package ``path`` is in (``services/commit/arbiter.py`` ->
    ``["esched", "services", "commit"]``), for resolving relative imports."""
    rel = path.relative_to(ROOT)
    return [*PACKAGES[rel.parts[0]].split("."), *rel.parts[1:-1]]


def _imports(path: Path) -> set[str]:
    """Every module ``path`` imports (top level or inside functions), as dotted names;
    ``from X import y`` gives ``X`` and ``X.y`` (y may be a submodule); relative imports
    are resolved against the file's package."""
    tree = ast.parse(path.read_text(), filename=str(path))
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            module = node.module
            if node.level:
                package = _module_of(path)
                base = package[: len(package) - (node.level - 1)]
                module = ".".join([*base, *([module] if module else [])])
            if not module:
                continue
            out.add(module)
            out.update(f"{module}.{alias.name}" for alias in node.names)
    return out


def _service_of(module: str) -> str | None:
    parts = module.split(".")
    if parts[:2] == ["esched", "services"] and len(parts) > 2 and parts[2] in SERVICES:
        return parts[2]
    return None


def _service_files(service: str) -> list[Path]:
    # A service is a module or, once it has several jobs, a package of them.
    package = ROOT / "services" / service
    return sorted(package.rglob("*.py")) if package.is_dir() else [package.with_suffix(".py")]


@pytest.mark.parametrize("service", SERVICES)
def test_a_service_imports_no_other_service(service):
    imported = set().union(*(_imports(path) for path in _service_files(service)))
    others = sorted(m for m in imported if _service_of(m) not in (None, service))
    assert others == [], f"services/{service}.py imports other services: {others}"


@pytest.mark.parametrize("service", SERVICES)
def test_a_service_imports_no_cli(service):
    # Flags, usage errors and exit codes belong to the CLI (services/cli/): a service
    # (the simulator's studies and benchmark too) takes its inputs as objects and
    # raises its own errors, so the CLI package stays the only place that reads flags.
    imported = set().union(*(_imports(path) for path in _service_files(service)))
    cli = sorted(
        m for m in imported if m.split(".")[0] == "click" or m.startswith("esched.services.cli")
    )
    assert cli == [], f"services/{service} imports the CLI: {cli}"


def test_the_core_imports_no_service():
    offenders = []
    for path in sorted((ROOT / "core").rglob("*.py")):
        if any(m.startswith("esched.services") for m in _imports(path)):
            offenders.append(str(path.relative_to(ROOT)))
    # Cython sources: no ast, but an import of a service names the package.
    pattern = re.compile(r"^\s*(from|import|cimport)\s+esched\.services", re.M)
    for path in sorted((ROOT / "core").rglob("*.pyx")):
        if pattern.search(path.read_text()):
            offenders.append(str(path.relative_to(ROOT)))
    assert offenders == []


def test_the_queue_rules_do_not_import_the_state():
    # The state's modules use the queue rules (core/_fold.pyx and core/_state_views.pyx
    # import core/queues.py);
    # the rules take a state as an argument, never import it: no import cycle.
    imported = _imports(ROOT / "core" / "queues.py")
    assert not any(m.startswith("esched.core._state") for m in imported)


def test_the_store_package_imports_no_service():
    offenders = {}
    for path in sorted((ROOT / "services" / "store").rglob("*.py")):
        bad = sorted(m for m in _imports(path) if _service_of(m) is not None)
        if bad:
            offenders[str(path.relative_to(ROOT))] = bad
    assert offenders == {}


def test_no_service_reads_the_state_tables():
    """Services read a ClusterState through its read API (``phase_of``, ``pod_phases``,
    ``node_allocatable``, ...), not its raw ``*_np`` tables."""
    offenders = []
    for path in sorted((ROOT / "services").rglob("*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr.endswith("_np"):
                offenders.append(f"{path.relative_to(ROOT)}:{node.lineno} .{node.attr}")
    assert offenders == []


def test_the_state_jobs_see_the_state_only_through_its_pxd():
    # core/_state.pyx cimports the fold's modules while it loads (a C-level call per
    # event, no Python call): a Python import of core/_state from them would run
    # before the state module's body and fail. They know the class through
    # core/_state.pxd (cimport) only.
    pattern = re.compile(
        r"^\s*(from\s+esched\.core\._state\s+import|import\s+esched\.core\._state)", re.M
    )
    offenders = [
        name
        for name in ("_fold.pyx", "_fold_bytes.pyx", "_fold_usage.pyx", "_state_views.pyx")
        if pattern.search((ROOT / "core" / name).read_text())
    ]
    assert offenders == []
