"""Reading the README and docs/ as test scripts: sections, fenced blocks, the command
table, and the links between pages."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

_HEADING = re.compile(r"^(#{2,3}) (.+)$", re.MULTILINE)
_FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.MULTILINE | re.DOTALL)
_TABLE_COMMAND = re.compile(r"^\| (`gateway [^|]+`) \|", re.MULTILINE)
_ANY_HEADING = re.compile(r"^#{1,6} (.+?)\s*#*$", re.MULTILINE)
_ANY_FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)
_INLINE_CODE = re.compile(r"`[^`\n]*`")
_LINK = re.compile(r"\[[^\]\n]*\]\(\s*([^)\s]+)(?:\s+\"[^\"]*\")?\s*\)")
_EXTERNAL = re.compile(r"^[a-z][a-z0-9+.-]*:", re.IGNORECASE)


@dataclass(frozen=True)
class Block:
    section: str
    language: str
    text: str


def section(readme: str, title: str) -> str:
    """The text under `## title` up to the next `## ` heading (its `###` included)."""
    found = [m for m in _HEADING.finditer(readme) if m.group(1) == "##"]
    for index, match in enumerate(found):
        if match.group(2).strip() == title:
            end = found[index + 1].start() if index + 1 < len(found) else len(readme)
            return readme[match.end() : end]
    raise LookupError(f"README has no '## {title}' section")


def blocks(text: str) -> list[Block]:
    """Fenced blocks in order, each with the `###` subsection it sits in."""
    headings = [(m.start(), m.group(2).strip()) for m in _HEADING.finditer(text)]
    out = []
    for match in _FENCE.finditer(text):
        under = [title for start, title in headings if start < match.start()]
        out.append(Block(under[-1] if under else "", match.group(1), match.group(2)))
    return out


def shell_commands(block: str) -> list[str]:
    """One string per command: backslash continuations joined, blank lines dropped."""
    commands: list[str] = []
    pending = ""
    for line in block.splitlines():
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        command = (pending + line).strip()
        pending = ""
        if command and not command.startswith("#"):
            commands.append(command)
    return commands


def table_commands(text: str) -> list[str]:
    """The synopses in the first column of a `| command | ... |` table: each `gateway ...`
    in backticks (a cell may hold several, separated by ` / `)."""
    synopses: list[str] = []
    for match in _TABLE_COMMAND.finditer(text):
        synopses += re.findall(r"`(gateway [^`]+)`", match.group(1))
    return synopses


def synopsis_words(synopsis: str) -> tuple[list[str], list[str]]:
    """`gateway keys hash KEY [--x N]` -> (["keys", "hash"], ["--x"]): the subcommand path
    (lowercase words before the first placeholder or option) and every option named."""
    words = synopsis.split()[1:]
    path: list[str] = []
    for word in words:
        if not re.fullmatch(r"[a-z][a-z-]*", word):
            break
        path.append(word)
    options = re.findall(r"(--[a-z][a-z-]*)", synopsis)
    return path, options


def prose(markdown: str) -> str:
    """The text a reader sees as prose: fenced blocks and inline code removed (a `[x](y)`
    inside code is an example, not a link)."""
    return _INLINE_CODE.sub("", _ANY_FENCE.sub("", markdown))


def links(markdown: str) -> list[str]:
    """Every inline link target `[text](target)` outside code, in order."""
    return _LINK.findall(prose(markdown))


def anchors(markdown: str) -> set[str]:
    """The `#fragment` each heading gets on GitHub: lowercased, punctuation other than
    `-` and `_` dropped, spaces as hyphens, repeats numbered `-1`, `-2`, ..."""
    seen: dict[str, int] = {}
    found: set[str] = set()
    for match in _ANY_HEADING.finditer(_ANY_FENCE.sub("", markdown)):
        title = match.group(1).replace("`", "")
        slug = re.sub(r"[^\w\- ]", "", title.lower()).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        found.add(slug if count == 0 else f"{slug}-{count}")
    return found


def broken_links(page: Path) -> list[str]:
    """The relative links of one Markdown page that lead nowhere: a missing file or
    folder, or a `#fragment` that is no heading of the Markdown page it points into.
    Links with a scheme (https:, mailto:) are not followed."""
    broken: list[str] = []
    for target in links(page.read_text(encoding="utf-8")):
        if _EXTERNAL.match(target):
            continue
        path, _, fragment = target.partition("#")
        destination = (page.parent / path).resolve() if path else page
        if not destination.exists():
            broken.append(f"{target} (no such file)")
        elif (
            fragment
            and destination.suffix == ".md"
            and fragment not in anchors(destination.read_text(encoding="utf-8"))
        ):
            broken.append(f"{target} (no heading #{fragment})")
    return broken
