"""The documentation's links and citations point at things that exist.

* relative Markdown links in README.md, CHANGELOG.md and docs/*.md name existing files
  (and, for links into Markdown files, existing headings);
* no tracked file refers to material outside the repository;
* every ``docs/runtime-model.md §n`` citation names a section of docs/runtime-model.md
  (and a ``step n`` after it a step of that section's numbered list);
* every ``docs/fidelity.md row n`` citation names a row of the fidelity table.

Files are the ones git tracks, so the checks need a git checkout (else they skip).
"""

from __future__ import annotations

import re
import subprocess
from functools import lru_cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
RUNTIME_MODEL = ROOT / "docs" / "runtime-model.md"
FIDELITY = ROOT / "docs" / "fidelity.md"

#: Tracked paths the citation and leak checks read.
SCANNED_DIRS = ("acl_mem/", "tests/", "docs/", "examples/", "benchmarks/", "stubs/")
SCANNED_FILES = ("README.md", "CHANGELOG.md")

# Built in pieces so that this file does not match its own search.
OUTSIDE_MARKERS = (".." + "/" + "shared", "shared" + "/" + "spec")

MODEL_CITATION = re.compile(r"docs/runtime-model\.md")
SECTION = re.compile(r"§(\d+(?:\.\d+)*)")
SECTION_STEP = re.compile(r"§(\d+(?:\.\d+)*)\s+steps?\s+(\d+)(?:\s*(?:-|\u2013|and|to)\s*(\d+))?")
FIDELITY_ROWS = re.compile(
    r"fidelity(?:\.md)?\)?\s+rows?\s+(\d+(?:\s*(?:,|-|\u2013|and|to)\s*\d+)*)"
)
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
SECTION_HEADING = re.compile(r"^#{1,6}\s+(\d+(?:\.\d+)*)\.?\s")
FIDELITY_ROW = re.compile(r"^\|\s*(\d+)\s*\|")
INLINE_LINK = re.compile(r"!?\[(?:[^\]\[]|\[[^\]]*\])*\]\(\s*(<[^>]*>|[^)\s]+)(?:\s+[^)]*)?\)")
REFERENCE_LINK = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*(<[^>]*>|\S+)", re.M)
FENCE = re.compile(r"^(```|~~~).*?^\1[^\n]*$", re.M | re.S)
CODE_SPAN = re.compile(r"(`+)(?:.|\n)*?\1")


@lru_cache(maxsize=1)
def _tracked_or_none() -> tuple[str, ...] | None:
    try:
        done = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True,
                              timeout=60, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    if done.returncode != 0:
        return None
    return tuple(p for p in done.stdout.decode("utf-8", "surrogateescape").split("\0") if p)


@pytest.fixture(scope="module")
def tracked() -> tuple[str, ...]:
    files = _tracked_or_none()
    if files is None:
        pytest.skip("not a git checkout (git ls-files failed)")
    return files


def _text(path: Path) -> str | None:
    """A file's text, or None for binary or unreadable files."""
    try:
        data = path.read_bytes()
    except OSError:
        return None
    if b"\0" in data:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _scanned(tracked: tuple[str, ...]) -> list[str]:
    """Tracked files the citation checks read, plus the runtime model itself."""
    paths = {p for p in tracked if p.startswith(SCANNED_DIRS) or p in SCANNED_FILES}
    if RUNTIME_MODEL.is_file():
        paths.add(RUNTIME_MODEL.relative_to(ROOT).as_posix())
    return sorted(p for p in paths if (ROOT / p).is_file())


def _markdown_files() -> list[Path]:
    files = [ROOT / "README.md", ROOT / "CHANGELOG.md", *sorted((ROOT / "docs").glob("*.md"))]
    return [f for f in files if f.is_file()]


def _without_code(text: str) -> str:
    """Markdown with fenced blocks and code spans blanked (links there are not links)."""
    text = FENCE.sub(lambda m: "\n" * m.group(0).count("\n"), text)
    return CODE_SPAN.sub(lambda m: "\n" * m.group(0).count("\n"), text)


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading text."""
    text = re.sub(r"`|\*\*|__|\[([^\]]*)\]\([^)]*\)", lambda m: m.group(1) or "", heading)
    text = text.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    anchors: set[str] = set()
    seen: dict[str, int] = {}
    text = _text(path) or ""
    for line in _without_code_blocks(text).splitlines():
        match = HEADING.match(line)
        if not match:
            continue
        slug = _slug(match.group(2))
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        anchors.add(slug if count == 0 else f"{slug}-{count}")
    return anchors


def _without_code_blocks(text: str) -> str:
    return FENCE.sub(lambda m: "\n" * m.group(0).count("\n"), text)


def _links(path: Path) -> list[tuple[int, str]]:
    """``(line number, target)`` of every inline and reference link in a Markdown file."""
    text = _without_code(_text(path) or "")
    found = []
    for pattern in (INLINE_LINK, REFERENCE_LINK):
        for match in pattern.finditer(text):
            target = match.group(1).strip("<>").strip()
            found.append((text.count("\n", 0, match.start()) + 1, target))
    return found


def _model_sections() -> dict[str, list[int]]:
    """Section number -> numbers of the numbered-list items in that section's own text."""
    text = _text(RUNTIME_MODEL)
    assert text is not None, "docs/runtime-model.md is missing or not UTF-8 text"
    sections: dict[str, list[int]] = {}
    current: list[int] | None = None
    for line in _without_code_blocks(text).splitlines():
        match = SECTION_HEADING.match(line)
        if match:
            current = sections.setdefault(match.group(1), [])
            continue
        if line.startswith("#"):
            current = None
            continue
        item = re.match(r"^(\d+)\.\s", line)
        if item and current is not None:
            current.append(int(item.group(1)))
    return sections


def _fidelity_rows() -> set[int]:
    text = _text(FIDELITY)
    assert text is not None, "docs/fidelity.md is missing or not UTF-8 text"
    return {int(m.group(1)) for line in text.splitlines() if (m := FIDELITY_ROW.match(line))}


def _numbers(spec: str) -> list[int]:
    """Row numbers of ``3``, ``32 and 61``, ``39-52``, ``1, 2 and 5`` (ranges expanded)."""
    numbers: list[int] = []
    for part in re.split(r"\s*(?:,|and)\s*", spec):
        bounds = [int(n) for n in re.findall(r"\d+", part)]
        if len(bounds) == 2:
            numbers.extend(range(bounds[0], bounds[1] + 1))
        else:
            numbers.extend(bounds)
    return numbers


def _model_citations(text: str) -> list[tuple[int, str, str]]:
    """``(line, section, citing text)`` for every section cited after docs/runtime-model.md
    on the same line."""
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        start = MODEL_CITATION.search(line)
        if start is None:
            continue
        rest = line[start.end():]
        for match in SECTION.finditer(rest):
            found.append((number, match.group(1), rest[match.start():match.start() + 40]))
    return found


# -- 1. links -----------------------------------------------------------------------------------
def test_markdown_files_exist():
    names = {f.relative_to(ROOT).as_posix() for f in _markdown_files()}
    assert {"README.md", "docs/fidelity.md", "docs/runtime-model.md"} <= names


@pytest.mark.parametrize("doc", _markdown_files(), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_relative_links_resolve(doc):
    broken = []
    for line, target in _links(doc):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):
            continue  # http(s), mailto and other schemes
        path_part, _, anchor = target.partition("#")
        resolved = doc if not path_part else (doc.parent / path_part).resolve()
        if not path_part and not anchor:
            continue
        if resolved != ROOT and ROOT not in resolved.parents:
            broken.append(f"{doc.name}:{line}: {target} points outside the repository")
            continue
        if not resolved.exists():
            broken.append(f"{doc.name}:{line}: {target} does not exist")
            continue
        if anchor and resolved.suffix == ".md" and anchor.lower() not in _anchors(resolved):
            broken.append(f"{doc.name}:{line}: {target}: no heading with anchor #{anchor}")
    assert not broken, "\n".join(broken)


def test_link_helpers_find_links_and_anchors():
    sample = ROOT / "docs" / "fidelity.md"
    assert any(t == "runtime-model.md" for _, t in _links(sample))
    assert _slug("3.5 aclrtMalloc / aclrtMallocAlign32") == "35-aclrtmalloc--aclrtmallocalign32"
    assert _slug("## `x` and **y**".lstrip("# ")) == "x-and-y"
    assert _without_code("see `[a](nowhere.md)` and\n```\n[b](gone.md)\n```\n").count("](") == 0


# -- 2. nothing outside the repository ------------------------------------------------------------
def test_no_tracked_file_points_outside_the_repository(tracked):
    leaks = []
    for path in _scanned(tracked):
        text = _text(ROOT / path)
        if text is None:
            continue
        for number, line in enumerate(text.splitlines(), 1):
            if any(marker in line for marker in OUTSIDE_MARKERS):
                leaks.append(f"{path}:{number}: {line.strip()[:100]}")
    assert not leaks, "\n".join(leaks)


# -- 3. runtime-model citations -------------------------------------------------------------------
def test_runtime_model_has_the_numbered_sections():
    sections = _model_sections()
    expected = {"0", "0.1", "1", "1.1", "1.2", "2", "3", "4", "5", "5.1", "5.2", "6", "7", "8"}
    expected |= {f"3.{i}" for i in range(1, 15)} | {f"4.{i}" for i in range(1, 10)}
    expected |= {f"8.{i}" for i in range(1, 17)}
    assert expected <= set(sections), sorted(expected - set(sections))


def test_runtime_model_citations_name_existing_sections(tracked):
    sections = _model_sections()
    missing = []
    cited = 0
    for path in _scanned(tracked):
        text = _text(ROOT / path)
        if text is None:
            continue
        for line, section, context in _model_citations(text):
            cited += 1
            if section not in sections:
                missing.append(f"{path}:{line}: §{section} ({context.strip()})")
    assert cited > 0, "no docs/runtime-model.md citation found at all"
    assert not missing, "\n".join(missing)


def test_runtime_model_step_citations_name_existing_steps(tracked):
    sections = _model_sections()
    missing = []
    for path in _scanned(tracked):
        text = _text(ROOT / path)
        if text is None:
            continue
        for number, line in enumerate(text.splitlines(), 1):
            start = MODEL_CITATION.search(line)
            if start is None:
                continue
            for match in SECTION_STEP.finditer(line, start.end()):
                section = match.group(1)
                steps = sections.get(section, [])
                for step in filter(None, (match.group(2), match.group(3))):
                    if int(step) not in steps:
                        missing.append(f"{path}:{number}: §{section} step {step}")
    assert not missing, "\n".join(missing)


def test_bare_section_references_in_the_docs_exist():
    """docs/fidelity.md cites the runtime model as a bare *§n*; the model cites itself so."""
    sections = _model_sections()
    missing = []
    for doc in (FIDELITY, RUNTIME_MODEL):
        for number, line in enumerate((_text(doc) or "").splitlines(), 1):
            for match in SECTION.finditer(line):
                if match.group(1) not in sections:
                    missing.append(f"{doc.name}:{number}: §{match.group(1)}")
    assert not missing, "\n".join(missing)


def test_citation_parsing():
    found = _model_citations("see docs/runtime-model.md §3.6/§3.7 and §4.8, §8.15; §3.1.\n"
                             "plain §9.9 without a citation\n")
    assert [s for _, s, _ in found] == ["3.6", "3.7", "4.8", "8.15", "3.1"]
    assert _numbers("39-41") == [39, 40, 41]
    assert _numbers("32 and 61") == [32, 61]
    assert _numbers("1, 2 and 5") == [1, 2, 5]
    steps = [m.groups() for m in SECTION_STEP.finditer("§4.3 steps 1-9, §3.10 step 4")]
    assert steps == [("4.3", "1", "9"), ("3.10", "4", None)]


# -- 4. fidelity rows -----------------------------------------------------------------------------
def test_fidelity_row_citations_name_existing_rows(tracked):
    rows = _fidelity_rows()
    assert len(rows) > 10, "docs/fidelity.md has no numbered table rows"
    missing = []
    for path in _scanned(tracked):
        text = _text(ROOT / path)
        if text is None:
            continue
        for number, line in enumerate(text.splitlines(), 1):
            for match in FIDELITY_ROWS.finditer(line):
                for row in _numbers(match.group(1)):
                    if row not in rows:
                        missing.append(f"{path}:{number}: row {row} ({match.group(0)})")
    assert not missing, "\n".join(missing)


def test_fidelity_row_parsing():
    spans = [m.group(1) for m in FIDELITY_ROWS.finditer(
        "docs/fidelity.md row 4; fidelity row 50, docs/fidelity.md rows 39-52 and more")]
    assert spans == ["4", "50", "39-52"]
