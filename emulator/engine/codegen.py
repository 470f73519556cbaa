"""Emitting and compiling the generated Python source.

`Source` collects indented lines; `Namespace` holds the objects the generated code refers to by
name (tables, register lists, helper functions, constant tuples). Everything is compiled once per
program with `compile()` and `exec()` into that namespace.
"""

import itertools
import linecache
import re


class Namespace:
    """Globals of the generated module. `add` returns the name under which an object is visible."""

    def __init__(self, helpers: dict):
        self.globals = dict(helpers)
        self._ids = {}
        self._counter = itertools.count()

    def add(self, prefix: str, obj, label: str | None = None) -> str:
        """Bind `obj`; `label` (a P4 name such as a table's) makes the binding readable in the source."""
        key = id(obj)
        if key in self._ids and self.globals.get(self._ids[key]) is obj:
            return self._ids[key]
        name = f"{prefix}_{next(self._counter)}"
        if label:
            readable = f"{prefix}_{re.sub(r'[^0-9A-Za-z_]', '_', label)}"
            name = readable if readable not in self.globals else name
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


def tail_call(functions: dict, pending: list, node, prefix: str) -> str:
    """The function `node` compiles to when it is reached from several places (called in tail position):
    named `prefix` + its number in first-use order, and queued in `pending` to be emitted the first time."""
    if node not in functions:
        functions[node] = f"{prefix}{len(functions)}"
        pending.append(node)
    return functions[node]


def each_once(pending: list):
    """The nodes of `pending`, which grows while they are emitted, each once, until none is left."""
    done = set()
    while pending:
        node = pending.pop()
        if node not in done:
            done.add(node)
            yield node


def emit_branches(src: Source, cases, default, goto) -> None:
    """if/elif/.../else over `cases`, (condition, target) pairs (an iterable: each taken when its branch is
    emitted), and `default`; each branch's body is goto(target)."""
    for k, (cond, target) in enumerate(cases):
        src.emit(f"{'if' if k == 0 else 'elif'} {cond}:")
        with src.indent():
            goto(target)
    src.emit("else:")
    with src.indent():
        goto(default)


class _Indent:
    def __init__(self, src: Source):
        self.src = src

    def __enter__(self):
        self.src.depth += 1

    def __exit__(self, *exc):
        self.src.depth -= 1


_SLOT = re.compile(r"F\[(\d+)(?::(\d+))?\]")


def annotate_fields(source: str, slot_names: dict[int, str]) -> str:
    """Name the packet-state slots a line touches (`F[94]`, `F[177:241]`) in a comment, so the source
    reads like its P4."""
    out = []
    for line in source.split("\n"):
        refs = list(dict.fromkeys(_SLOT.findall(line)))
        if refs and not line.lstrip().startswith("#"):
            names = []
            for start, stop in refs:
                i = int(start)
                if stop:
                    last = int(stop) - 1
                    names.append(f"F[{i}:{stop}] {slot_names.get(i, '?')} .. {slot_names.get(last, '?')}")
                else:
                    names.append(f"F[{i}] {slot_names.get(i, '?')}")
            line = f"{line}  # {', '.join(names)}"
        out.append(line)
    return "\n".join(out)


def compile_into(namespace: Namespace, source: str, filename: str) -> dict:
    """Compile generated source once and execute it into the namespace's globals. The source is put in
    linecache under `filename`, so tracebacks through generated code show its lines."""
    linecache.cache[filename] = (len(source), None, source.splitlines(keepends=True), filename)
    code = compile(source, filename, "exec")
    exec(code, namespace.globals)  # noqa: S102 - our own generated code
    return namespace.globals
