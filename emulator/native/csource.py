"""C text under construction: indented lines, fresh temporaries, and the P4 origin of a statement."""

import contextlib

from emulator.engine.jsonutil import source_of


def comment(text: str) -> str:
    """`text` as a C comment (a `*/` inside it cannot end the comment early)."""
    return "/* " + text.replace("*/", "* /") + " */"


def cname(name: str) -> str:
    """A P4 name as a C identifier's characters (`MyIngress.fwd` -> `MyIngress_fwd`)."""
    return "".join(c if c.isalnum() else "_" for c in name)


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
