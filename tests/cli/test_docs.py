"""The README and docs/ as a newcomer reads them: every relative link leads somewhere, the
README stays a short guide that links every page of docs/, and no page reads as a
changelog (issue numbers and work-session histories live in git, not in user docs).

The Quickstart itself is run as written by tests/cli/test_readme.py."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.cli.readme import broken_links, links, section

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
DOCS = REPO / "docs"
README_MAX_LINES = 300

# What a changelog leaves in prose: "issue 21", "issue #9", "(issue 22)", "PR 40", "the
# third session", "this session", "session 4", "round two". Ordinary uses of the word
# (an HTTP or login session) do not match.
_HISTORY = re.compile(
    r"\b(?:issues?|PR)\s*#?\d+"
    r"|\b(?:this|that|last|previous|next|earlier|later|same|each|one|first|second|third"
    r"|fourth|fifth|sixth|seventh|eighth|ninth|tenth)\s+(?:work\s+)?session'?s?\b"
    r"|\bsessions?\s+\d+"
    r"|\bround\s+(?:one|two|three|four|five|\d+)\b",
    re.IGNORECASE,
)


def user_pages() -> list[Path]:
    return [README, *sorted(DOCS.rglob("*.md"))]


def history_mentions(text: str) -> list[str]:
    """Each line that reads as a changelog, with its line number."""
    return [
        f"{number}: {line.strip()}"
        for number, line in enumerate(text.splitlines(), start=1)
        if _HISTORY.search(line)
    ]


@pytest.mark.parametrize("page", user_pages(), ids=lambda p: str(p.relative_to(REPO)))
def test_every_relative_link_resolves(page: Path) -> None:
    assert broken_links(page) == [], f"{page.relative_to(REPO)}: broken links"


@pytest.mark.parametrize("page", user_pages(), ids=lambda p: str(p.relative_to(REPO)))
def test_no_page_reads_as_a_changelog(page: Path) -> None:
    found = history_mentions(page.read_text(encoding="utf-8"))
    assert found == [], (
        f"{page.relative_to(REPO)} names issues or work sessions (history lives in git; "
        "say what is true now):\n" + "\n".join(found)
    )


def test_the_readme_is_a_short_guide() -> None:
    lines = README.read_text(encoding="utf-8").count("\n")
    assert lines <= README_MAX_LINES, (
        f"README.md is {lines} lines; keep it under {README_MAX_LINES} and move topics "
        "into docs/ (linked from its Documentation list)"
    )


def test_the_readme_documentation_list_links_every_docs_page() -> None:
    listed = {
        (REPO / target.partition("#")[0]).resolve()
        for target in links(section(README.read_text(encoding="utf-8"), "Documentation"))
    }
    pages = {page.resolve() for page in DOCS.rglob("*.md")}
    missing = sorted(str(page.relative_to(REPO)) for page in pages - listed)
    assert pages, "docs/ holds no pages"
    assert missing == [], f"README's Documentation list does not link: {missing}"


def test_the_link_checker_finds_what_is_broken(tmp_path: Path) -> None:
    # guards the link test against passing on nothing
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "target.md").write_text("# Title\n\n## A section, with `code`\n")
    page = tmp_path / "README.md"
    page.write_text(
        "[ok](docs/target.md) [ok](docs/target.md#a-section-with-code) [web](https://x.y/z)\n"
        "[gone](docs/missing.md) [bad anchor](docs/target.md#nope) [self](#title-here)\n"
        "`[in code](docs/missing.md)`\n\n"
        "```\n[in a block](docs/missing.md)\n```\n\n# Title here\n"
    )
    assert broken_links(page) == [
        "docs/missing.md (no such file)",
        "docs/target.md#nope (no heading #nope)",
    ]
    page.write_text(page.read_text().replace("# Title here", "# Another title"))
    assert "#title-here (no heading #title-here)" in broken_links(page)


def test_the_changelog_check_tells_history_from_ordinary_words() -> None:
    history = [
        "see issue 21's notes",
        "CPU per request, round two (issue 22)",
        "The next session ran on another machine",
        "#### Round two, third session (another machine)",
        "fixed in issue #9",
    ]
    ordinary = [
        "a login session cookie expires after 12 h",
        "an HTTP/1.1 session stays open for keep-alive",
        "Redis Cluster issues a MOVED reply",
    ]
    assert [line for line in history if not history_mentions(line)] == []
    assert [line for line in ordinary if history_mentions(line)] == []


def test_the_readme_links_reach_the_docs() -> None:
    # guards the list test: the parser sees the README's links at all
    found = links(README.read_text(encoding="utf-8"))
    assert sum(target.startswith("docs/") for target in found) >= len(list(DOCS.glob("*.md")))
