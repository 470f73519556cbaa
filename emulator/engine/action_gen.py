"""A JSON action -> one generated function `A_<id>(F, P)`, and its body inlined where a table applies it.

The body's statements are the primitives' (`primitives.ActionBody`); this module names the function,
unpacks its action data and records what the pipeline generator needs to inline it (whether it may exit
or return, and its size).
"""

from emulator.engine.codegen import Source
from emulator.engine.jsonutil import malformed
from emulator.engine.primitives import ActionBody, ActionEnv


class CompiledAction:
    """One JSON action: its generated function `A_<id>(F, P)` and how to inline it."""

    def __init__(self, j: dict, index: int, env: ActionEnv):
        self.json = j
        self.name = j.get("name")
        self.id = j.get("id", index)
        self.path = f"actions[{index}] '{self.name}'"
        self.params = []
        for k, p in enumerate(j.get("runtime_data", [])):
            width = p.get("bitwidth")
            if not isinstance(width, int) or width < 0:
                raise malformed(f"parameter {k} has bad bitwidth {width!r}", self.path, j)
            self.params.append((p.get("name", f"p{k}"), width))
        self.fname = f"A_{self.id}"
        self.env = env
        self.uses_exit = False
        self.inlinable = True
        self._size = None

    @property
    def widths(self):
        return [w for _, w in self.params]

    def generate(self, src) -> None:
        body = ActionBody(self.env, self.path, params=self.widths)
        src.emit(f"def {self.fname}(F, P):")
        with src.indent():
            src.emit(f"# action {self.name}")
            n = len(self.params)
            if n == 1:
                src.emit("p0 = P[0]")
            elif n > 1:
                src.emit(f"{', '.join(f'p{i}' for i in range(n))} = P")
            body.emit(src, self.json.get("primitives", []))
        src.emit()
        self.uses_exit = body.uses_exit
        self.inlinable = not body.uses_return

    def emit_inline(self, src, params) -> None:
        """The body with constant action data, for keyless tables whose default is const."""
        values = list(params)
        body = ActionBody(self.env, self.path, params=self.widths, param_src=lambda i: str(values[i]))
        src.emit(f"# action {self.name}{tuple(values)!r}")
        body.emit(src, self.json.get("primitives", []))

    def emit_inline_data(self, src, data_var: str) -> None:
        """The body reading its action data from the tuple in `data_var` (a table entry's params)."""
        body = ActionBody(self.env, self.path, params=self.widths, param_src=lambda i: f"{data_var}[{i}]")
        body.emit(src, self.json.get("primitives", []))

    def inline_size(self) -> int:
        """Statements the body compiles to (for deciding whether to inline it into a table apply)."""
        if self._size is None:
            trial = Source()
            ActionBody(self.env, self.path, params=self.widths).emit(trial, self.json.get("primitives", []))
            self._size = len(trial.lines)
        return self._size
