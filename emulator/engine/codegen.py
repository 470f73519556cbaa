"""Emitting and compiling the generated Python source.

`Source` collects indented lines; `Namespace` holds the objects the generated code refers to by
name (tables, register lists, helper functions, constant tuples). Everything is compiled once per
program with `compile()` and `exec()` into that namespace.
"""
import itertools


class Namespace:
    """Globals of the generated module. `add` returns the name under which an object is visible."""

    def __init__(self, helpers: dict):
        self.globals = dict(helpers)
        self._ids = {}
        self._counter = itertools.count()

    def add(self, prefix: str, obj) -> str:
        key = id(obj)
        if key in self._ids and self.globals.get(self._ids[key]) is obj:
            return self._ids[key]
        name = f"{prefix}_{next(self._counter)}"
        self.globals[name] = obj
        self._ids[key] = name
        return name

    def const(self, prefix: str, value) -> str:
        """A constant (e.g. a tuple of slot indices) bound once, reused by equal value."""
        key = ("const", prefix, value)
        if key in self._ids:
            return self._ids[key]
        name = f"{prefix}_{next(self._counter)}"
        self.globals[name] = value
        self._ids[key] = name
        return name


class Source:
    """Indented Python source under construction."""

    def __init__(self):
        self.lines = []
        self.depth = 0
        self._tmp = itertools.count()

    def emit(self, line: str = "") -> None:
        self.lines.append("    " * self.depth + line if line else "")

    def indent(self):
        return _Indent(self)

    def tmp(self, prefix: str = "t") -> str:
        return f"_{prefix}{next(self._tmp)}"

    def text(self) -> str:
        return "\n".join(self.lines) + "\n"


class _Indent:
    def __init__(self, src: Source):
        self.src = src

    def __enter__(self):
        self.src.depth += 1

    def __exit__(self, *exc):
        self.src.depth -= 1


def compile_into(namespace: Namespace, source: str, filename: str) -> dict:
    """Compile generated source once and execute it into the namespace's globals."""
    code = compile(source, filename, "exec")
    exec(code, namespace.globals)  # noqa: S102 - our own generated code
    return namespace.globals
