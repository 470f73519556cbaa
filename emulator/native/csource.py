"""C text under construction (indented lines, fresh temporaries, the P4 origin of a statement) and
the C names of P4 objects.

A line written from a P4 statement carries a `#line` directive naming the P4 file and line (the BMv2
JSON's source_info), so a debugger or a sanitizer report points into the P4; the line after it
returns to the generated file with another directive (`resume_lines` numbers those once the whole
file is assembled).
"""

import contextlib
import re
from typing import NamedTuple

from emulator.engine.jsonutil import source_of

C_KEYWORDS = frozenset(
    "auto break case char const continue default do double else enum extern float for goto if inline int long register "
    "restrict return short signed sizeof static struct switch typedef union unsigned void volatile while".split()
)
_SLOT = re.compile(r"(?<![A-Za-z0-9_])F\[(\d+)\]")
RESUME = "#line <resume>"  # back to the generated file: resume_lines puts its line number in


def comment(text: str) -> str:
    """`text` as a C comment (a `*/` inside it cannot end the comment early, nor `/*` open another)."""
    return "/* " + text.replace("*/", "* /").replace("/*", "/ *") + " */"


def cname(name: str) -> str:
    """A P4 name as a C identifier's characters (`MyIngress.fwd` -> `MyIngress_fwd`, `hs[0].f` -> `hs_0_f`)."""
    return re.sub(r"[^0-9A-Za-z]+", "_", name).strip("_")


def identifiers(named, prefix: str = "") -> dict:
    """{key: C identifier} for (key, P4 name) pairs: `prefix` + the name's characters, unique (a name
    met again gets its key appended), never a keyword nor starting with a digit."""
    out, taken = {}, set()
    for key, name in named:
        ident = prefix + cname(str(name))
        if not ident or ident[0].isdigit() or ident in C_KEYWORDS:
            ident = "n_" + ident
        if ident in taken:
            ident = f"{ident}_{cname(str(key))}"
        while ident in taken:
            ident += "_"
        taken.add(ident)
        out[key] = ident
    return out


def name_slots(text: str, names: dict) -> str:
    """Every `F[<slot>]` of `text` with the slot's name (a macro of its number) where it has one."""
    return _SLOT.sub(lambda m: f"F[{names.get(int(m.group(1)), m.group(1))}]", text)


class Origin(NamedTuple):
    """The P4 statement lines come from: its file and line, and its text (for a comment)."""

    filename: str
    line: int
    fragment: str


def p4_origin(obj) -> Origin | None:
    """Where the P4 statement a JSON object comes from is; None when its source_info lacks the file
    or the line."""
    si = obj.get("source_info") if isinstance(obj, dict) else None
    if not isinstance(si, dict):
        return None
    filename, line = si.get("filename"), si.get("line")
    if not isinstance(filename, str) or not filename or not isinstance(line, int) or line <= 0:
        return None
    return Origin(filename, line, str(si.get("source_fragment") or ""))


def _line_directive(line: int, filename: str) -> str:
    quoted = filename.replace("\\", "\\\\").replace('"', '\\"').replace("\n", " ")
    return f'#line {line} "{quoted}"'


def _has_code(line: str) -> bool:
    """False for a blank line or one that is a comment only (nothing in it is compiled)."""
    stripped = line.strip()
    if not stripped:
        return False
    return not (stripped.startswith("/*") and stripped.endswith("*/") and stripped.count("*/") == 1)


def resume_lines(text: str, filename: str) -> str:
    """`text` (a whole C file) with each return to the generated file numbered: as `filename`, at the
    line that follows the directive."""
    lines = text.split("\n")
    for k, line in enumerate(lines):
        code = line.lstrip()
        if code.startswith(RESUME):
            lines[k] = line[: len(line) - len(code)] + _line_directive(k + 2, filename) + code[len(RESUME) :]
    return "\n".join(lines)


class CSource:
    def __init__(self):
        self.lines = []  # (text, Origin or None)
        self.depth = 0
        self._tmp = 0
        self._at = None

    def emit(self, line: str = "") -> None:
        self.lines.append(("    " * self.depth + line if line else "", self._at))

    @contextlib.contextmanager
    def indent(self):
        self.depth += 1
        try:
            yield
        finally:
            self.depth -= 1

    @contextlib.contextmanager
    def at(self, obj):
        """The lines emitted inside come from the P4 statement `obj` (a JSON object): each gets a #line
        directive, the first one a comment with the statement's text. Without a P4 file and line,
        a comment says what the JSON knows of it."""
        saved, self._at = self._at, p4_origin(obj)
        if self._at is None and source_of(obj):
            self.emit(comment(source_of(obj)))
        try:
            yield
        finally:
            self._at = saved

    def tmp(self, prefix="t") -> str:
        self._tmp += 1
        return f"{prefix}{self._tmp}"

    def text(self) -> str:
        """The lines, with a #line directive wherever the position the compiler assumes differs from
        the one wanted: the P4 line of a statement, or (after one) the generated file again."""
        out, presumed, block = [], None, None  # presumed: the P4 (file, line) the next line has; None: ours
        for line, at in self.lines:
            indent = line[: len(line) - len(line.lstrip())]
            if not _has_code(line):
                out.append(line)
                presumed = presumed and (presumed[0], presumed[1] + 1)
                continue
            if at is None and presumed is not None:
                out.append(indent + RESUME)
                presumed = None
            elif at is not None:
                if at is not block or presumed != (at.filename, at.line):
                    directive = _line_directive(at.line, at.filename)
                    if at is not block and at.fragment:
                        directive += " " + comment(at.fragment)
                    out.append(indent + directive)
                presumed = (at.filename, at.line + 1)
            block = at
            out.append(line)
        if presumed is not None:
            out.append(RESUME)
        return "\n".join(out) + "\n"
