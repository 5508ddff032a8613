"""The deploy/ files run commands that exist: every esched invocation in the compose
file and the Kubernetes manifests parses with the real CLI, and every config file
section names a real command option. Catches drift when a flag is renamed."""

from __future__ import annotations

import shlex
from pathlib import Path

import click
import pytest
import yaml

from esched.services.cli import SHARED_KEYS, cli

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"


def _documents(path: Path) -> list[dict]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def _containers(doc: dict) -> list[dict]:
    spec = doc.get("spec", {})
    pod = spec.get("template", {}).get("spec", {}) or spec.get("jobTemplate", {}).get("spec", {})
    return pod.get("containers", []) if isinstance(pod, dict) else []


def _invocations() -> list[tuple[str, list[str]]]:
    """(where, esched argv) for each service in compose.yaml and kubernetes/*.yaml."""
    found = []
    compose = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    for name, svc in compose["services"].items():
        if svc.get("image") != "esched:latest":
            continue
        if "entrypoint" in svc:  # ["sh", "-c", "exec esched replica ..."]
            argv = shlex.split(svc["entrypoint"][-1].replace("$$", "$"))
            argv = argv[argv.index("esched") + 1 :]
        else:
            argv = list(svc["command"])
        found.append((f"compose:{name}", argv))
    for path in sorted((DEPLOY / "kubernetes").glob("*.yaml")):
        for doc in _documents(path):
            for c in _containers(doc):
                if c.get("image") == "esched":
                    found.append((f"{path.name}:{doc['metadata']['name']}", list(c["args"])))
    return found


INVOCATIONS = _invocations()


def test_every_service_of_the_compose_file_and_the_manifests_is_found():
    where = {w.split(":")[1] for w, _ in INVOCATIONS}
    assert {"ingest", "commit", "dispatch", "jobs", "replica", "migrate"} <= where
    assert {
        "esched-ingest",
        "esched-commit",
        "esched-dispatch",
        "esched-jobs",
        "esched-replica",
        "esched-migrate",
    } <= where


@pytest.mark.parametrize(("where", "argv"), INVOCATIONS, ids=[w for w, _ in INVOCATIONS])
def test_each_deployed_invocation_parses_with_the_cli(where, argv):
    ctx = cli.make_context("esched", list(argv), resilient_parsing=False)
    command = cli
    args = list(argv)
    while isinstance(command, click.Group):  # walk down to the leaf command
        name, command, args = command.resolve_command(ctx, args)
        ctx = command.make_context(name, args, parent=ctx)
    assert isinstance(command, click.Command) and not isinstance(command, click.Group)


def _config_files() -> list[tuple[str, dict]]:
    files = [("esched.example.yaml", yaml.safe_load((DEPLOY / "esched.example.yaml").read_text()))]
    for doc in _documents(DEPLOY / "kubernetes" / "config.yaml"):
        if doc["kind"] == "ConfigMap":
            files.append(("kubernetes/config.yaml", yaml.safe_load(doc["data"]["esched.yaml"])))
    return files


CONFIGS = _config_files()


@pytest.mark.parametrize(("where", "config"), CONFIGS, ids=[w for w, _ in CONFIGS])
def test_config_file_sections_of_commands_name_real_options(where, config):
    checked = 0
    for section, values in config.items():
        if section in SHARED_KEYS or section not in cli.commands:
            continue  # shared keys, or a section of settings that is not a command's
        params = {p.name for p in cli.commands[section].params}
        unknown = {k.replace("-", "_") for k in values} - params
        assert not unknown, f"{where}: [{section}] has no option(s) {sorted(unknown)}"
        checked += 1
    assert checked, f"{where}: no command section was checked"


def test_the_services_that_sign_read_the_signing_keys_in_both_deployments():
    # Work items (dispatch -> replica) and proposals (replica -> commit) are signed
    # when keys are configured: each of those services must get them.
    compose = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    env = compose["x-esched"]["environment"]
    assert env["ESCHED_SIGNING_KEYS"] == "${ESCHED_SIGNING_KEYS:-}"
    signers = {"esched-commit", "esched-dispatch", "esched-replica"}
    seen = set()
    for doc in _documents(DEPLOY / "kubernetes" / "services.yaml"):
        for c in _containers(doc):
            refs = {s["secretRef"]["name"]: s["secretRef"] for s in c.get("envFrom", [])}
            if doc["metadata"]["name"] in signers:
                assert refs["esched-signing"].get("optional") is True
                seen.add(doc["metadata"]["name"])
    assert seen == signers
