"""Measured-looking figures typed by hand in the current text of the README, docs/ and the package READMEs:
numbers with a unit of time, rate, share or speed-up (3.4 s, 9 Mbit/s, 96.4 %, 1.51–1.67×, 170k packets/s,
0.917) that sit outside docs/results.md's generated regions, outside a "History" section, and outside code
(a command's `--bw 9` is an argument, not a claim). A measured figure belongs in a record that
bench/results.py renders, or in History with its commit; tests/test_hand_figures.py allows the design
constants that are left by an explicit list.

    .venv/bin/python -m tests.support.hand_figures      (every figure found, allowed or not)
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from bench.results import REGION
from tests.support.docs import DOCS
from tests.support.paths import REPO

PAGES = [*DOCS, *sorted(REPO.glob("*/README.md"))]

_NUM = r"\d[\d,]*(?:\.\d+)?"
_RANGE = rf"{_NUM}(?:\s?[–-]\s?{_NUM})?"
_KM = r"\d+(?:\.\d+)?[kM]"
FIGURE = re.compile(
    "|".join(
        [
            # time, link rate, share: 3.4 s, 0.15–0.20 s, 9 Mbit/s, 96.4 %
            rf"(?<![\w.]){_RANGE}\s?(?:ms|s|µs|us|ns|min|minutes|hours|[kMG]bit/s|[MG]B/s|%)(?![\w/])",
            # a rate of things: 18,200 THC packets/s, 0.98M frames/s, 16 k requests/s, 33–49 M/s
            rf"(?<![\w.])(?:{_KM}|{_RANGE})(?:\s?[–-]\s?(?:{_KM}|{_NUM}))?\s?(?:[kM]\s)?"
            r"(?:(?:THC|IPv4)\s)?(?:packets|pkt|frames|requests|coordinates|coord|lookups|M)/s",
            # a speed-up or ratio written against its sign: 1.51–1.67×, ×1.20 (2 × 1024 and 8×8 are products)
            rf"(?<![\w.]){_RANGE}×(?!\d)|(?<!\d)×{_NUM}(?:[–-]{_NUM})?",
            # thousands and millions of something: 37k-96k, 19.5k, 0.63M
            rf"(?<![\w.]){_KM}(?:\s?[–-]\s?{_KM})?(?!\w)",
            # a bare fraction such as an accuracy or a ratio: 0.917, 0.55
            r"(?<![\w.\-])0\.\d{2,}(?![\w.])",
        ]
    )
)
_FENCE = re.compile(r"(?ms)^```.*?^```[^\n]*$")
_CODE = re.compile(r"`[^`]+`")
_HEADING = re.compile(r"^(#{1,6}) (.*)$")


def _blank(match: re.Match) -> str:
    """The matched text replaced by its newlines only, so line numbers stay."""
    return "\n" * match.group(0).count("\n")


def current_text(text: str) -> str:
    """`text` with generated regions, fenced blocks, code spans and History sections blanked out (newlines
    kept); a History section is a heading that starts with "History" and everything below it up to the
    next heading of its level or above."""
    text = REGION.sub(_blank, text)
    text = _FENCE.sub(_blank, text)
    text = _CODE.sub(_blank, text)
    out, history_level = [], None
    for line in text.split("\n"):
        m = _HEADING.match(line)
        if m:
            level = len(m.group(1))
            if history_level is not None and level <= history_level:
                history_level = None
            if history_level is None and m.group(2).startswith("History"):
                history_level = level
        out.append("" if history_level is not None else line)
    return "\n".join(out)


def figures(path: Path) -> list[tuple[int, str, str]]:
    """(line number, figure, the line's current text) of every figure in `path`'s current text."""
    lines = current_text(path.read_text(encoding="utf-8")).split("\n")
    return [(n, m.group(0), line) for n, line in enumerate(lines, start=1) for m in FIGURE.finditer(line)]


def main() -> int:
    for path in PAGES:
        for n, figure, _ in figures(path):
            print(f"{path.relative_to(REPO)}:{n}: {figure}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
