"""The README and docs/ as a reader meets them: the README stays short (at most 250 lines, its two set-up
commands `make demo` and `make test`, one headline table of results that links to docs/results.md), and every
relative link in README.md and docs/*.md names a file that exists and, with #anchor, a heading it holds."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\]\(([^)\s]+)\)")


def anchors(page: Path) -> set[str]:
    """GitHub's anchors for a page's headings: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.S)
    out = set()
    for heading in re.findall(r"^#{1,6} (.+)$", text, flags=re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        out.add(slug)
    return out


def test_the_readme_is_at_most_250_lines_with_the_two_set_up_commands() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 250
    setup = readme.split("## Set up", 1)[1].split("```sh", 1)[1].split("```", 1)[0]
    assert [line.split("#")[0].strip() for line in setup.strip().splitlines()] == ["make demo", "make test"]


def test_the_readme_results_are_one_table_linking_to_results_md() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    results = readme.split("## Results", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in results.splitlines() if line.startswith("| ") and not line.startswith("|---")]
    assert len(rows) == 5  # the header and four rows: the CPU demo, the notes' argument, CTranslate2, one GPU
    assert all("docs/results.md#" in row for row in rows[1:])


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_relative_link_names_a_file_and_heading_that_exist(page: Path) -> None:
    text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.S)
    broken = []
    for target in LINK.findall(text):
        if re.match(r"[a-z]+:", target):
            continue  # http(s), mailto: not checked here
        path, _, anchor = target.partition("#")
        linked = (page.parent / path).resolve() if path else page
        if not linked.exists():
            broken.append(target)
        elif anchor and linked.suffix == ".md" and anchor not in anchors(linked):
            broken.append(target)
    assert not broken, broken
