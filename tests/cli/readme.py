"""Reading the README as a test script: its sections, fenced blocks and command table."""

from __future__ import annotations

import re
from dataclasses import dataclass

_HEADING = re.compile(r"^(#{2,3}) (.+)$", re.MULTILINE)
_FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.MULTILINE | re.DOTALL)
_TABLE_COMMAND = re.compile(r"^\| (`gateway [^|]+`) \|", re.MULTILINE)


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
