"""The README's and docs/'s text as tests read it: the command blocks marked ``<!-- tested: NAME -->``, the
commands in code, and the headings that links point at. A test that runs a documented command takes it
from here, so an edit that breaks the command fails the test instead of leaving a stale copy behind."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

from tests.support.paths import REPO

DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]

_MARK = re.compile(r"^<!-- tested: ([\w-]+)\b.*-->\s*$")
_FENCE = re.compile(r"^```")
_SPAN = re.compile(r"(?<!`)`([^`\n]+)`(?!`)")


def _lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines()


def tested_block(name: str) -> str:
    """The fenced block right after ``<!-- tested: name -->`` in the README or docs/, without its fences;
    exactly one such marker must exist."""
    found = []
    for path in DOCS:
        lines = _lines(path)
        for i, line in enumerate(lines):
            m = _MARK.match(line)
            if m and m.group(1) == name:
                where = f"{path.name}:{i + 1}"
                assert i + 1 < len(lines) and _FENCE.match(lines[i + 1]), f"{where}: no block after the marker"
                end = next(j for j in range(i + 2, len(lines)) if _FENCE.match(lines[j]))
                found.append("\n".join(lines[i + 2 : end]) + "\n")
    assert len(found) == 1, f"{len(found)} blocks marked 'tested: {name}' in README.md and docs/"
    return found[0]


def marked_names() -> list[str]:
    return [m.group(1) for path in DOCS for line in _lines(path) if (m := _MARK.match(line))]


def command_lines(block: str) -> list[str]:
    """A block's commands: continuation lines joined, blank lines dropped (comments stay: shlex drops them)."""
    return [line for line in block.replace("\\\n", " ").splitlines() if line.strip()]


def words(command: str) -> list[str]:
    return shlex.split(command, comments=True)


def code_snippets(path: Path) -> list[tuple[int, str]]:
    """(line number, text) of every command-like piece of code: each line of a fenced block (continuations
    joined) and each inline code span."""
    return sorted(fenced_commands(path) + _spans(path))


def fenced_commands(path: Path) -> list[tuple[int, str]]:
    """(line number, text) of each line of the file's fenced blocks, continuation lines joined."""
    out: list[tuple[int, str]] = []
    in_block, pending, start = False, "", 0
    for n, line in enumerate(_lines(path), start=1):
        if _FENCE.match(line):
            in_block, pending = not in_block, ""
            continue
        if in_block:
            if not pending:
                start = n
            if line.endswith("\\"):
                pending += line[:-1] + " "
                continue
            out.append((start, pending + line))
            pending = ""
    return out


def _spans(path: Path) -> list[tuple[int, str]]:
    out, in_block = [], False
    for n, line in enumerate(_lines(path), start=1):
        if _FENCE.match(line):
            in_block = not in_block
        elif not in_block:
            out += [(n, span) for span in _SPAN.findall(line)]
    return out


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = heading.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    out, in_block = set(), False
    for line in _lines(path):
        if _FENCE.match(line):
            in_block = not in_block
        elif not in_block and (m := re.match(r"^#+ (.*)$", line)):
            out.add(slug(m.group(1)))
    return out


def links(path: Path) -> list[tuple[int, str]]:
    """(line number, target) of every relative markdown link."""
    out = []
    for n, line in enumerate(_lines(path), start=1):
        for target in re.findall(r"\]\(([^)\s]+)\)", line):
            if not re.match(r"[a-z]+://", target):
                out.append((n, target))
    return out
