"""The benchmarks room stays readable: every results file is linked from a page a reader reaches
from BENCHMARKS.md, every link there resolves, scripts live in benchmarks/ (none under results/)
and none grows past a newcomer's afternoon; BENCHMARKS.md names a command in every section."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BENCHMARKS = ROOT / "benchmarks"
RESULTS = BENCHMARKS / "results"
PAGE = ROOT / "BENCHMARKS.md"
LINK = re.compile(r"\]\(([^)\s]+)\)")
MAX_RESULTS_FILES = 150
MAX_SCRIPT_LINES = 400
MAX_PAGE_LINES = 500


def local_links(page: Path) -> list[tuple[str, Path]]:
    """``(target as written, the path it names)`` for every link of ``page`` to a repository path."""
    found = []
    for target in LINK.findall(page.read_text(encoding="utf-8")):
        path = target.partition("#")[0]
        if path and "://" not in path:
            found.append((target, (page.parent / path).resolve()))
    return found


def reachable() -> set[Path]:
    """Every path linked from BENCHMARKS.md, or from a Markdown page under benchmarks/ it reaches."""
    seen, todo = set(), [PAGE.resolve()]
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        if path.suffix == ".md" and path.is_file() and (path == PAGE or BENCHMARKS in path.parents):
            todo += [linked for _, linked in local_links(path)]
    return seen


def test_every_results_file_is_linked_from_a_page() -> None:
    seen = reachable()
    files = [f for f in RESULTS.rglob("*") if f.is_file()]
    unlinked = sorted(str(f.relative_to(RESULTS)) for f in files if f.resolve() not in seen)
    assert not unlinked, f"{len(unlinked)} results files no page links, e.g. {unlinked[:5]}"
    assert len(files) <= MAX_RESULTS_FILES


def test_every_link_of_the_benchmark_pages_resolves() -> None:
    pages = [p for p in reachable() if p.suffix == ".md" and p.is_file()]
    pages = [p for p in pages if p == PAGE.resolve() or BENCHMARKS in p.parents]
    broken = [
        f"{page.relative_to(ROOT)}: {target}"
        for page in pages
        for target, path in local_links(page)
        if not path.exists()
    ]
    assert not broken, f"{len(broken)} broken links, e.g. {broken[:5]}"


def test_scripts_live_in_benchmarks_and_stay_short() -> None:
    under_results = [f.name for f in RESULTS.rglob("*") if f.suffix in {".py", ".sh", ".diff"}]
    assert not under_results, f"scripts under benchmarks/results: {under_results}"
    long = {
        f.name: n
        for f in BENCHMARKS.glob("*.py")
        if (n := len(f.read_text(encoding="utf-8").splitlines())) > MAX_SCRIPT_LINES
    }
    assert not long, f"benchmark scripts over {MAX_SCRIPT_LINES} lines: {long}"


def test_benchmarks_are_smaller_than_the_largest_library_package() -> None:
    def lines(folder: Path) -> int:
        return sum(len(f.read_text(encoding="utf-8").splitlines()) for f in folder.rglob("*.py"))

    packages = [
        p for p in (ROOT / "seqenc").iterdir() if p.is_dir() and (p / "__init__.py").exists()
    ]
    assert lines(BENCHMARKS) < max(lines(p) for p in packages)


def test_every_section_of_benchmarks_md_names_a_command() -> None:
    text = PAGE.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= MAX_PAGE_LINES
    command = re.compile(r"(python|seqenc|make|OMP_NUM_THREADS=\d) [\w./-]")
    sections = re.split(r"^#{2,3} ", text, flags=re.MULTILINE)[1:]
    bodies = [s for s in sections if s.partition("\n")[2].strip()]  # a heading over subsections
    silent = [s.splitlines()[0] for s in bodies if not command.search(s)]
    assert not silent, f"sections of BENCHMARKS.md without a command: {silent}"
