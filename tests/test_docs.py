"""The user docs stay navigable: every relative link resolves, the README stays short,
and no lab-notebook material (work dates, load averages) creeps back in."""

from __future__ import annotations

import csv
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = sorted([ROOT / "README.md", ROOT / "schemas" / "README.md", *(ROOT / "docs").glob("*.md")])
# [text](target) outside code spans; images too. Autolinks and reference links are unused.
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)
CODE_SPAN = re.compile(r"`[^`\n]*`")
MAX_README_LINES = 200


def _prose(text: str) -> str:
    return CODE_SPAN.sub("", FENCE.sub("", text))


def _anchors(text: str) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces to dashes."""
    out = set()
    for line in FENCE.sub("", text).splitlines():
        m = re.match(r"#{1,6}\s+(.*)", line)
        if m:
            title = m.group(1).strip().lower()
            out.add(re.sub(r"[^\w\- ]", "", title).replace(" ", "-"))
    return out


def _relative_links(path: Path) -> list[str]:
    return [
        t
        for t in LINK.findall(_prose(path.read_text()))
        if not re.match(r"[a-z][a-z0-9+.-]*:", t)  # http:, https:, mailto:
    ]


@pytest.mark.parametrize("path", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_points_at_an_existing_file_and_anchor(path: Path) -> None:
    broken = []
    for target in _relative_links(path):
        file_part, _, anchor = target.partition("#")
        dest = (path.parent / file_part).resolve() if file_part else path
        if not dest.exists():
            broken.append(target)
        elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest.read_text()):
            broken.append(target)
    assert not broken, f"{path.relative_to(ROOT)}: broken links {broken}"


def test_the_readme_links_to_every_docs_page() -> None:
    linked = {Path(t.partition("#")[0]).name for t in _relative_links(ROOT / "README.md")}
    pages = {p.name for p in DOCS if p.parent.name == "docs"}
    assert pages <= linked, f"README.md does not link {sorted(pages - linked)}"


def test_the_readme_stays_under_200_lines() -> None:
    lines = (ROOT / "README.md").read_text().count("\n")
    assert lines < MAX_README_LINES, f"README.md has {lines} lines"


def test_the_readme_starts_with_the_install_and_test_commands() -> None:
    head = (ROOT / "README.md").read_text().split("```")[1]
    assert "esched up --input deploy/examples/cluster.yaml --exit-when-idle" in head
    assert "pytest" in head


@pytest.mark.parametrize(
    "path",
    [*DOCS, ROOT / "docs" / "benchmarks" / "history.csv"],
    ids=lambda p: str(p.relative_to(ROOT)),
)
def test_user_docs_carry_no_work_dates_or_load_averages(path: Path) -> None:
    text = path.read_text()
    found = re.findall(
        r"\b(?:19|20|21)\d\d-[01]\d-[0-3]\d\b|\b1[0-2]-[0-3]\d's\b|load average|\bload \d", text
    )
    assert not found, f"{path.relative_to(ROOT)}: {found}"


def test_benchmark_history_rows_name_a_commit_and_a_cpu() -> None:
    path = ROOT / "docs" / "benchmarks" / "history.csv"
    with path.open(newline="") as f:
        rows = list(csv.DictReader(f))
    assert rows
    assert list(rows[0]) == [
        "benchmark",
        "metric",
        "value",
        "unit",
        "command",
        "commit",
        "cpu",
        "notes",
    ]
    for row in rows:
        float(row["value"])
        assert re.fullmatch(r"[0-9a-f]{40}", row["commit"]), row
        assert row["command"] and row["cpu"], row


def _architecture_map() -> str:
    text = (ROOT / "docs" / "architecture.md").read_text()
    return text.split("## Where is what: the map", 1)[1].split("\n## ", 1)[0]


def _code_paths(text: str) -> list[str]:
    """Repository paths in code spans (`core/_fold.pyx`); `<name>` stands for any name."""
    return re.findall(r"`((?:core|services|schemas|deploy|tests)/[^`\s]*)`", text)


def _exists(path: str) -> bool:
    return any(ROOT.glob(re.sub(r"<[^>]*>", "*", path).rstrip("/")))


def test_every_code_path_in_the_architecture_map_exists() -> None:
    paths = _code_paths(_architecture_map())
    assert len(paths) > 50
    missing = sorted({p for p in paths if not _exists(p)})
    assert not missing, f"docs/architecture.md names missing paths {missing}"


@pytest.mark.parametrize(
    "question",
    [
        "Where is a score computed?",
        "Where is an event folded?",
        "Where is a proposal judged?",
        "Where is a pod's feasibility decided?",
        "Where is a gang planned?",
    ],
)
def test_the_architecture_map_answers_each_newcomer_question_with_a_file(question: str) -> None:
    row = next(
        (line for line in _architecture_map().splitlines() if line.startswith(f"| {question}")),
        None,
    )
    assert row is not None, f"the map has no row for {question!r}"
    paths = _code_paths(row)
    assert paths and all(_exists(p) for p in paths), row


def _current_figures() -> list[list[str]]:
    text = (ROOT / "docs" / "benchmarks.md").read_text()
    table = text.split("## Current figures and targets", 1)[1].split("\n\n")[1]
    rows = [
        # a pipe inside a code span is no cell boundary
        CODE_SPAN.sub(lambda m: m.group(0).replace("|", "\0"), line).strip().strip("|").split("|")
        for line in table.splitlines()[2:]
    ]
    assert rows and all(len(r) == 5 for r in rows), "the table has five columns"
    return [[cell.replace("\0", "|").strip() for cell in r] for r in rows]


def test_each_current_benchmark_figure_has_one_row_and_its_commit_in_the_history() -> None:
    rows = _current_figures()
    figures = [r[0] for r in rows]
    assert len(figures) == len(set(figures)), "a figure is listed twice"
    with (ROOT / "docs" / "benchmarks" / "history.csv").open(newline="") as f:
        measured = {row["commit"] for row in csv.DictReader(f)}
    for figure, *_, commit in rows:
        short = re.fullmatch(r"`([0-9a-f]{7,40})`", commit)
        assert short, f"{figure!r}: no commit"
        assert any(c.startswith(short.group(1)) for c in measured), (
            f"{figure!r}: commit {commit} has no row in benchmarks/history.csv"
        )
