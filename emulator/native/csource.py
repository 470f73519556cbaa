"""C text under construction (indented lines, fresh temporaries, the P4 origin of a statement) and
the C names of P4 objects."""

import contextlib
import re

from emulator.engine.jsonutil import source_of

C_KEYWORDS = frozenset(
    "auto break case char const continue default do double else enum extern float for goto if inline int long register "
    "restrict return short signed sizeof static struct switch typedef union unsigned void volatile while".split()
)
_SLOT = re.compile(r"(?<![A-Za-z0-9_])F\[(\d+)\]")


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


class CSource:
    def __init__(self):
        self.lines = []
        self.depth = 0
        self._tmp = 0

    def emit(self, line: str = "") -> None:
        self.lines.append("    " * self.depth + line if line else "")

    @contextlib.contextmanager
    def indent(self):
        self.depth += 1
        try:
            yield
        finally:
            self.depth -= 1

    def tmp(self, prefix="t") -> str:
        self._tmp += 1
        return f"{prefix}{self._tmp}"

    def origin(self, obj) -> None:
        """The P4 source line `obj` (a JSON object) comes from, as a comment."""
        where = source_of(obj)
        if where:
            self.emit(comment(where))

    def text(self) -> str:
        return "\n".join(self.lines) + "\n"
