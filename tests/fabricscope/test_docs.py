"""The documents a person reads: caps, links, generated pages, and every command example marked runnable.

An example is a fenced block with ``$ command`` lines. Each one carries a marker on the line before it:

    <!-- example: runnable[, kafka][, compare][, exit=N][, contains: TEXT] -->
    <!-- example: not runnable: REASON -->

A runnable block's commands run in order, in one environment of their own (a fresh ``FABRICSCOPE_VAR`` and
topic prefix), from the repository root, ``fabricscope`` on ``PATH``, each under a time cap; each must exit
``N`` (default 0). ``compare``: each command's stdout equals the lines below it (trailing blanks ignored).
``contains``: the block's combined output holds TEXT. ``kafka``: the block needs the broker.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from conftest import REPO as ROOT

PAGES = sorted([ROOT / "README.md", ROOT / "BENCHMARKS.md", *(ROOT / "docs").glob("*.md")])
EXAMPLE_PAGES = [p for p in PAGES if p.name != "BENCHMARKS.md"]
COMMAND_TIMEOUT_S = 240
MARKER = re.compile(r"<!--\s*example:\s*(.*?)\s*-->")
# Words that narrate how the work went rather than say what is true today.
NARRATION = re.compile(r"\b(was|were|earlier|reverted|previously|no longer|used to|formerly|session \d|round \d)\b",
                       re.IGNORECASE)
# Files beside the repository that a user who clones it does not have.
OUTSIDE = re.compile(r"\.\./shared|/work/shared|\bDESIGN\.md\b")
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")


@dataclass
class Example:
    """One fenced block with ``$`` commands: where it is, its marker, and its commands with their output."""

    page: Path
    line: int
    marker: str | None
    commands: list[tuple[str, list[str]]] = field(default_factory=list)

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"

    @property
    def runnable(self) -> bool:
        return self.marker is not None and self.marker.split(",")[0].strip() == "runnable"

    def option(self, name: str) -> str | None:
        """The value of ``name=...`` or ``name: ...`` (contains runs to the end), ``""`` for a bare flag."""
        assert self.marker is not None
        if name == "contains":
            m = re.search(r"\bcontains:\s*(.*)$", self.marker)
            return m.group(1) if m else None
        for part in self.marker.split(","):
            key, _, value = part.strip().partition("=")
            if key == name:
                return value
        return None


def examples(page: Path) -> list[Example]:
    """Every fenced block of ``page`` that holds a ``$ command`` line (continuations joined)."""
    lines = page.read_text(encoding="utf-8").splitlines()
    out: list[Example] = []
    i = 0
    while i < len(lines):
        if not lines[i].strip().startswith("```"):
            i += 1
            continue
        start, body = i, []
        i += 1
        while i < len(lines) and not lines[i].strip().startswith("```"):
            body.append(lines[i])
            i += 1
        i += 1
        indent = len(lines[start]) - len(lines[start].lstrip())
        body = [b[indent:] if b[:indent].strip() == "" else b for b in body]
        if not any(b.startswith("$ ") for b in body):
            continue
        prev = next((lines[j] for j in range(start - 1, -1, -1) if lines[j].strip()), "")
        m = MARKER.search(prev)
        ex = Example(page, start + 1, m.group(1) if m else None)
        k = 0
        while k < len(body):
            if body[k].startswith("$ "):
                cmd = body[k][2:]
                while cmd.endswith("\\") and k + 1 < len(body):
                    k += 1
                    cmd = cmd[:-1] + " " + body[k].strip()
                ex.commands.append((cmd, []))
            elif ex.commands:
                ex.commands[-1][1].append(body[k])
            k += 1
        out.append(ex)
    return out


def test_readme_is_short_with_no_line_over_120_characters() -> None:
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 250, f"README.md has {len(lines)} lines (cap 250)"
    long = [f"{n}: {len(x)} chars" for n, x in enumerate(lines, 1) if len(x) > 120]
    assert not long, f"README.md lines over 120 characters: {long}"


def test_benchmarks_is_short_and_says_what_is_true_today() -> None:
    text = (ROOT / "BENCHMARKS.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 400, f"BENCHMARKS.md has {len(text.splitlines())} lines (cap 400)"
    hits = [f"{n}: {m.group(0)!r}" for n, line in enumerate(text.splitlines(), 1) for m in NARRATION.finditer(line)]
    assert not hits, f"BENCHMARKS.md narrates (say what is true today; git keeps the history): {hits}"


def test_the_narration_check_catches_narration() -> None:
    assert NARRATION.search("the close was 4.1 CPU s") and NARRATION.search("Session 6: not met")
    assert not NARRATION.search("the close takes 1.3 CPU s; the wasm build is not made")


def _slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower().replace("`", ""))
    return text.replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    """The anchors of ``page``'s headings (outside fenced blocks)."""
    text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.DOTALL)
    return {_slug(m.group(1)) for m in re.finditer(r"^#{1,6}\s+(.*)$", text, flags=re.MULTILINE)}


def broken_links(page: Path, root: Path = ROOT) -> list[str]:
    """Links of ``page`` to a missing file, a missing heading, or a path outside the repository ``root``."""
    text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.DOTALL)
    bad = []
    for m in LINK.finditer(text):
        target = m.group(1)
        if re.match(r"[a-z]+://|mailto:", target):
            continue
        path, _, anchor = target.partition("#")
        resolved = (page.parent / path).resolve() if path else page
        if path.startswith("/") or not resolved.is_relative_to(root):
            bad.append(f"{target} (outside the repository)")
        elif not resolved.exists():
            bad.append(f"{target} (no such file)")
        elif anchor and resolved.suffix == ".md" and anchor not in _anchors(resolved):
            bad.append(f"{target} (no heading #{anchor})")
    return bad


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_links_point_at_files_and_headings_of_the_repository(page: Path) -> None:
    assert not broken_links(page), f"{page.relative_to(ROOT)}: {broken_links(page)}"


def test_the_link_check_catches_missing_and_outside_targets(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    (root / "docs").mkdir(parents=True)
    (tmp_path / "shared").mkdir()
    (tmp_path / "shared" / "DESIGN.md").write_text("# Design\n", encoding="utf-8")
    (root / "README.md").write_text("# Readme\n", encoding="utf-8")
    (root / "docs" / "design.md").write_text("# Design\n## The `up` command, today\n", encoding="utf-8")
    page = root / "docs" / "p.md"
    page.write_text("# Top\n[a](../README.md) [b](nope.md) [c](../../shared/DESIGN.md) [d](design.md#nope)"
                    " [e](#top) [f](https://example.org/x) [g](design.md#the-up-command-today)\n", encoding="utf-8")
    assert broken_links(page, root) == ["nope.md (no such file)", "../../shared/DESIGN.md (outside the repository)",
                                        "design.md#nope (no heading #nope)"]


def test_no_file_of_the_repository_points_at_the_shared_folder_outside_it() -> None:
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT, capture_output=True,
                           text=True, check=True).stdout.splitlines()
    me = Path(__file__).relative_to(ROOT).as_posix()
    hits = []
    for rel in files:
        path = ROOT / rel
        if rel == me or not path.is_file() or path.suffix not in {".py", ".md", ".sql", ".txt", ".toml", ".yml",
                                                                   ".yaml", ".json", ""}:
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        hits += [f"{rel}:{n}" for n, line in enumerate(text.splitlines(), 1) if OUTSIDE.search(line)]
    assert not hits, f"pointers outside the repository (use docs/design.md): {hits}"


def _gen_docs():
    spec = importlib.util.spec_from_file_location("gen_docs", ROOT / "scripts" / "gen_docs.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("rel", ["docs/configuration.md", "docs/cli.md", "docs/ARCHITECTURE.md"])
def test_generated_pages_are_current(rel: str) -> None:
    gen = _gen_docs()
    want = gen.PAGES[rel]()
    have = (ROOT / rel).read_text(encoding="utf-8")
    assert have == want, f"{rel} is stale: run .venv/bin/python scripts/gen_docs.py"


def test_configuration_page_has_every_setting() -> None:
    from fabricscope.settings import Settings

    page = (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")
    missing = [n.upper() for n in Settings.model_fields if f"`{n.upper()}`" not in page]
    assert not missing, missing


def test_every_example_is_marked_runnable_or_says_why_not() -> None:
    bad = []
    for page in EXAMPLE_PAGES:
        for ex in examples(page):
            if ex.marker is None:
                bad.append(f"{ex.where}: no <!-- example: ... --> marker")
            elif not ex.runnable and not re.match(r"not runnable:\s*\S", ex.marker):
                bad.append(f"{ex.where}: 'not runnable' needs a reason")
    assert not bad, bad


def _runnable_pages() -> list[Path]:
    return [p for p in EXAMPLE_PAGES if any(ex.runnable for ex in examples(p))]


@pytest.mark.parametrize("page", _runnable_pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_runnable_examples_run_and_print_what_the_page_shows(page: Path, tmp_path: Path, request) -> None:
    blocks = [ex for ex in examples(page) if ex.runnable]
    prefix = f"docs{uuid.uuid4().hex[:8]}."
    env = {**os.environ, "FABRICSCOPE_VAR": str(tmp_path / "var"), "FABRICSCOPE_TOPIC_PREFIX": prefix,
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
           "COLUMNS": "100", "NO_COLOR": "1", "TERM": "dumb", "PYTHONPATH": str(ROOT)}
    if any(ex.option("kafka") is not None for ex in blocks):
        env["KAFKA_BOOTSTRAP"] = request.getfixturevalue("kafka_bootstrap")
    try:
        for ex in blocks:
            want_rc = int(ex.option("exit") or 0)
            seen = []
            for cmd, expected in ex.commands:
                r = subprocess.run(["bash", "-c", cmd], cwd=ROOT, env=env, capture_output=True, text=True,
                                   timeout=COMMAND_TIMEOUT_S)
                assert r.returncode == want_rc, f"{ex.where}: `{cmd}` exited {r.returncode}:\n{r.stdout}{r.stderr}"
                seen.append(r.stdout + r.stderr)
                if ex.option("compare") is not None:
                    got = [x.rstrip() for x in r.stdout.rstrip().splitlines()]
                    shown = [x.rstrip() for x in "\n".join(expected).rstrip().splitlines()]
                    assert got == shown, f"{ex.where}: `{cmd}` printed\n" + "\n".join(got)
            text = ex.option("contains")
            if text:
                assert text in "".join(seen), f"{ex.where}: no {text!r} in the output:\n{''.join(seen)}"
    finally:
        if "KAFKA_BOOTSTRAP" in env:
            from fabricscope.kafka_admin import delete_topics

            delete_topics(env["KAFKA_BOOTSTRAP"], prefix)


def test_example_parser_reads_markers_continuations_and_output(tmp_path: Path) -> None:
    page = tmp_path / "p.md"
    page.write_text("x\n\n<!-- example: runnable, compare, exit=1, contains: a, b -->\n```\n$ echo a \\\n  b\n"
                    "a b\n```\n\n```\n$ true\n```\n", encoding="utf-8")
    first, second = examples(page)
    assert first.runnable and first.option("exit") == "1" and first.option("compare") == ""
    assert first.option("contains") == "a, b" and first.commands == [("echo a  b", ["a b"])]
    assert second.marker is None and not second.runnable
