"""Control pipelines (ingress, egress) -> generated functions `ingress(F)`, `egress(F)`.

A BMv2 pipeline is a graph of tables and conditionals (pipeline.cpp, tables.cpp): applying a table
looks up its key, runs the hit entry's action or the default entry's, then continues with the node
that `next_tables` names for that action (or for `__HIT__` / `__MISS__`). A node reached from one
place only is inlined; join points become functions called in tail position. `exit` marks the packet
and the pipeline stops before the next node.

With `trace=True` the same code is generated with log calls (table hits and misses with their key
and action, conditions), so tracing costs nothing when it is off.
"""

from emulator.engine.codegen import Source, each_once, emit_branches, tail_call
from emulator.engine.expressions import ExprCompiler, Value, store
from emulator.engine.jsonutil import malformed, source_of, unsupported
from emulator.engine.varbit import field_spec

MAX_INLINE_DEPTH = 40
INLINE_ACTION_LINES = 12  # action bodies up to this many lines are inlined into table applies
INLINE_ACTIONS_PER_TABLE = 3


class _TooBig(Exception):
    """Structured emission would duplicate too much code: fall back to tail calls."""


class _Cycle(Exception):
    """The control graph has a cycle (never produced by p4c)."""


class PipelineGen:
    def __init__(self, pipeline: dict, path: str, layout, ns, tables: dict, actions: dict, trace: bool):
        self.p = pipeline
        self.path = path
        self.layout = layout
        self.ns = ns
        self.tables = tables  # table name -> (MatchTable, json, path)
        self.actions = actions  # action id -> CompiledAction
        self.trace = trace
        self.nodes = {}
        for i, t in enumerate(pipeline.get("tables", [])):
            self.nodes[t["name"]] = ("table", t, f"{path}.tables[{i}]")
        for i, c in enumerate(pipeline.get("conditionals", [])):
            self.nodes[c["name"]] = ("cond", c, f"{path}.conditionals[{i}]")
        for i, a in enumerate(pipeline.get("action_calls", [])):
            self.nodes[a["name"]] = ("call", a, f"{path}.action_calls[{i}]")
        self.sites = {name: 0 for name in self.nodes}
        init = pipeline.get("init_table")
        self._site(init, path)
        for _name, (kind, j, npath) in self.nodes.items():
            for target in self._successor_sites(kind, j, npath):
                self._site(target, npath)
        self.functions = {}

    def _site(self, name, path):
        if name is None:
            return
        if name not in self.nodes:
            raise malformed(f"reference to unknown control node {name!r}", path)
        self.sites[name] += 1

    def _successor_sites(self, kind, j, path):
        if kind == "cond":
            t, f = j.get("true_next"), j.get("false_next")
            return [t] if t == f else [t, f]
        if kind == "call":
            return [j.get("next_node")]
        return [target for _, target in self._table_branches(j, path)]

    def _table_branches(self, j, path):
        """[(branch label, next node)]: one branch when all actions continue to the same node."""
        table = self.tables[j["name"]][0]
        nxt = j.get("next_tables", {})
        if "__HIT__" in nxt or "__MISS__" in nxt:
            hit, miss = nxt.get("__HIT__"), nxt.get("__MISS__")
            if hit == miss:
                return [("all", hit)]
            return [("hit", hit), ("miss", miss)]
        branches = {}
        for ref in table.actions.values():
            if ref.name not in nxt:
                raise malformed(f"table '{j['name']}' has no next_tables entry for action '{ref.name}'", path, j)
            branches.setdefault(nxt[ref.name], []).append(ref.id)
        if table.initial_default is None or table.initial_default[0] is None:
            # no default entry in the JSON: a miss runs no action and goes to base_default_next
            branches.setdefault(j.get("base_default_next"), []).append(None)
        if len(branches) <= 1:
            return [("all", next(iter(branches), None))]
        return [(tuple(ids), target) for target, ids in branches.items()]

    # ------------------------------------------------------------------ generation
    def generate(self, src, fname: str) -> None:
        """Emit `def fname(F)`: structured if/else code when the graph allows it, else tail calls."""
        self.fname = fname
        ipdom = self._post_dominators()
        if ipdom is not None:
            trial = Source()
            trial.depth = src.depth
            trial._tmp = src._tmp
            self.ipdom, self._emitted = ipdom, 0
            try:
                trial.emit(f"def {fname}(F):")
                with trial.indent():
                    if not self._region(trial, self.p.get("init_table"), None, 0):
                        trial.emit("return None")
                trial.emit()
            except _TooBig:
                pass
            else:
                src.lines.extend(trial.lines)
                return
        self._generate_tail_calls(src)

    def _post_dominators(self):
        """Immediate post-dominator of every reachable node (None = end of the pipeline), or None
        when the graph has a cycle (BMv2 pipelines never have one)."""
        succ = {}
        for name, (kind, j, path) in self.nodes.items():
            succ[name] = set(self._successor_sites(kind, j, path))
        order, state = [], {}

        def visit(n):
            stack = [(n, iter(sorted(succ[n], key=str)))]
            state[n] = 1
            while stack:
                node, it = stack[-1]
                for m in it:
                    if m is None:
                        continue
                    if state.get(m) == 1:
                        raise _Cycle
                    if m not in state:
                        state[m] = 1
                        stack.append((m, iter(sorted(succ[m], key=str))))
                        break
                else:
                    stack.pop()
                    state[node] = 2
                    order.append(node)

        init = self.p.get("init_table")
        if init is None:
            return {}
        try:
            visit(init)
        except _Cycle:
            return None
        pdom = {None: frozenset([None])}
        for n in order:  # successors before their predecessors
            sets = [pdom[m] for m in succ[n]]
            common = frozenset.intersection(*sets) if sets else frozenset([None])
            pdom[n] = common | {n}
        return {n: max(pdom[n] - {n}, key=lambda m: len(pdom[m])) for n in order}

    def _region(self, src, node, stop, depth) -> bool:
        """Emit the nodes from `node` until `stop` (the join of the enclosing branch)."""
        emitted = False
        while node is not None and node != stop:
            self._emitted += 1
            if self._emitted > 8 * len(self.nodes) + 16 or depth > MAX_INLINE_DEPTH:
                raise _TooBig
            cont = self._node(src, node)
            emitted = True
            if cont[0] == "next":
                node = cont[1]
                continue
            _, conds, other = cont
            join = self.ipdom[node]
            if len(conds) == 1:
                mark = len(src.lines)
                src.emit(f"if {conds[0][0]}:")
                with src.indent():
                    then_emitted = self._region(src, conds[0][1], join, depth + 1)
                if not then_emitted:  # nothing to do when true: test the negation instead
                    del src.lines[mark:]
                    src.emit(f"if not ({conds[0][0]}):")
                    with src.indent():
                        if not self._region(src, other, join, depth + 1):
                            src.emit("pass")
                    node = join
                    continue
                conds = []
            for k, (cond, target) in enumerate(conds):
                src.emit(f"{'if' if k == 0 else 'elif'} {cond}:")
                with src.indent():
                    if not self._region(src, target, join, depth + 1):
                        src.emit("pass")
            mark = len(src.lines)
            src.emit("else:")
            with src.indent():
                if not self._region(src, other, join, depth + 1):
                    del src.lines[mark:]  # nothing to do on the else path
            node = join
        return emitted

    def _generate_tail_calls(self, src):
        """Fallback: nodes reached from several places become functions called in tail position."""
        pending = []
        src.emit(f"def {self.fname}(F):")
        with src.indent():
            self._goto(src, self.p.get("init_table"), pending, 0)
        src.emit()
        for name in each_once(pending):
            src.emit(f"def {self.functions[name]}(F):")
            with src.indent():
                self._follow(src, self._node(src, name), pending, 0)
            src.emit()

    def _goto(self, src, name, pending, depth):
        if name is None:
            src.emit("return None")
            return
        if self.sites[name] == 1 and depth < MAX_INLINE_DEPTH and name not in self.functions:
            self._follow(src, self._node(src, name), pending, depth + 1)
            return
        src.emit(f"return {tail_call(self.functions, pending, name, f'{self.fname}_n')}(F)")

    def _follow(self, src, cont, pending, depth):
        if cont[0] == "next":
            self._goto(src, cont[1], pending, depth)
            return
        _, conds, other = cont
        emit_branches(src, conds, other, lambda target: self._goto(src, target, pending, depth))

    def _node(self, src, name):
        """Emit one node's own work; returns ("next", node) or ("branch", [(cond, node)], else_node)."""
        kind, j, path = self.nodes[name]
        if kind == "cond":
            return self._conditional(src, j, path)
        if kind == "call":
            return self._action_call(src, j, path)
        return self._table(src, j, path)

    def _conditional(self, src, j, path):
        cond = ExprCompiler(self.layout, self.ns, path).boolean(j.get("expression"))
        t, f = j.get("true_next"), j.get("false_next")
        src.emit(f"# {j.get('name', 'condition')}: {source_of(j) or 'no source line'}")
        if self.trace:
            si = j.get("source_info") or {}
            label = j["name"] + (f" ({si['source_fragment']})" if si.get("source_fragment") else "")
            src.emit(f"_trace('condition %s is %s', {label!r}, {cond.src})")
        if t == f:
            return ("next", t)
        return ("branch", [(cond.src, t)], f)

    def _action_call(self, src, j, path):
        action = self.actions.get(j.get("action_id"))
        if action is None:
            raise malformed(f"action call to unknown action id {j.get('action_id')!r}", path, j)
        if action.params:
            raise malformed("an action call cannot pass parameters", path, j)
        if self.trace:
            src.emit(f"_trace('action %s', {action.name!r})")
        src.emit(f"{action.fname}(F, ())")
        if action.uses_exit:
            src.emit(f"if F[{self.layout.EXIT}]: return None")
        return ("next", j.get("next_node"))

    def _key_sources(self, table, j, path):
        out = []
        for k, kj in zip(table.keys, j.get("key", [])):
            if k.match_type == "valid":
                h = self.layout.header(kj.get("target"), path)
                v = f"F[{h.valid}]"
            else:
                target = kj.get("target")
                if not isinstance(target, list) or len(target) != 2:
                    raise malformed("key target must be [header, field]", path, kj)
                ref = self.layout.field(target[0], target[1], path)
                v = f"F[{ref.slot}]"
                mask = ref.mask if k.static_mask is None else k.static_mask & ref.mask
                if ref.signed or k.static_mask is not None:
                    v = f"({v} & {mask})"
            out.append(v)
        return out

    def _lookup(self, src, table, j, path, tname):
        keys = self._key_sources(table, j, path)
        if not keys:
            return None, None
        if table.kind == "exact":
            dname = self.ns.add("_exact", table.exact, table.name)
            key = keys[0] if len(keys) == 1 else "(" + ", ".join(keys) + ")"
            return f"{dname}.get({key})", key
        if table.kind == "ternary":
            parts = [f"({v} << {off})" if off else v for v, off in zip(keys, table.ternary_layout())]
            key = " | ".join(parts)
            return f"{tname}.lookup({key})", key
        key = keys[0] if len(keys) == 1 else "(" + ", ".join(keys) + ")"
        return f"{tname}.lookup({key})", key

    def _table(self, src, j, path):
        table, _, _ = self.tables[j["name"]]
        tname = self.ns.add("_table", table, table.name)
        branches = self._table_branches(j, path)
        may_exit = any(self.actions[a.id].uses_exit for a in table.actions.values())
        src.emit(f"# table {table.name}: {source_of(j) or 'no source line'}")
        lookup, key = self._lookup(src, table, j, path, tname)
        inline = self._inline_default(table) if lookup is None else None
        if inline is not None:
            action, params = inline
            if self.trace:
                src.emit(f"_trace('action %s%s (%s)', {action.name!r}, {tuple(params)!r}, {table.name!r})")
            action.emit_inline(src, params)
            if action.uses_exit:
                src.emit(f"if F[{self.layout.EXIT}]: return None")
            if len(branches) == 1:
                return ("next", branches[0][1])
            if branches[0][0] in ("hit", "miss"):
                return ("next", dict(branches)["miss"])
            return ("next", next(t for ids, t in branches if action.id in ids))
        e = src.tmp("e")
        hit = src.tmp("hit") if any(b[0] in ("hit", "miss") for b in branches) else None
        if lookup is None:
            src.emit(f"{e} = {tname}.default")
            if hit:
                src.emit(f"{hit} = False")
            if self.trace:
                src.emit(f"_trace('table %s: miss (no key) -> %s%s', {table.name!r}, {e}.action, {e}.params)")
        else:
            src.emit(f"{e} = {lookup}")
            src.emit(f"if {e} is None:")
            with src.indent():
                src.emit(f"{e} = {tname}.default")
                if hit:
                    src.emit(f"{hit} = False")
                if self.trace:
                    src.emit(
                        f"_trace('table %s: miss key=%s -> %s%s', {table.name!r}, _hexkey({key}), "
                        f"{e}.action, {e}.params)"
                    )
            if table.with_counters or hit or self.trace or table.direct_meter or table.profile:
                src.emit("else:")
                with src.indent():
                    if hit:
                        src.emit(f"{hit} = True")
                    if table.with_counters:
                        src.emit(f"{e}.packets += 1")
                        src.emit(f"{e}.bytes += F[{self.layout.ILEN}]")
                    self._hit_externs(src, table, e, path)
                    if self.trace:
                        src.emit(
                            f"_trace('table %s: hit key=%s -> %s%s', {table.name!r}, _hexkey({key}), "
                            f"{e}.action, {e}.params)"
                        )
        self._run_entry(src, table, e)
        if may_exit:
            src.emit(f"if F[{self.layout.EXIT}]: return None")
        if len(branches) == 1:
            return ("next", branches[0][1])
        if branches[0][0] in ("hit", "miss"):
            targets = dict(branches)
            return ("branch", [(hit, targets["hit"])], targets["miss"])
        a = src.tmp("a")
        src.emit(f"{a} = {e}.action_id")
        conds = []
        for ids, target in branches[:-1]:
            conds.append((" or ".join(f"{a} is None" if i is None else f"{a} == {i}" for i in ids), target))
        return ("branch", conds, branches[-1][1])

    def _hit_externs(self, src, table, e, path):
        """On a hit, before the action: the direct meter (colour into its target field), then the
        action profile's member or group choice (match_tables.cpp, apply_action and lookup)."""
        if table.direct_meter is not None:
            ref = self.layout.field(table.direct_meter_target[0], table.direct_meter_target[1], path)
            meter = self.ns.add("_dmeter", table.direct_meter, table.direct_meter.name)
            bits = table.direct_meter.rate_count.bit_length()
            color = Value(f"{meter}.execute({e}.handle, F[{self.layout.ILEN}])", "data", bits=bits)
            src.emit(f"# direct meter {table.direct_meter.name}")
            src.emit(store(str(ref.slot), ref.width, ref.signed, color))
        if table.profile is not None:
            profile = self.ns.add("_profile", table.profile, table.profile.name)
            src.emit(f"{e} = {profile}.resolve({e}, F)")
            if self.trace:
                src.emit(f"_trace('action profile %s: %s%s', {table.profile.name!r}, {e}.action, {e}.params)")

    def _run_entry(self, src, table, e):
        """`e.fn(F, e.params)`, with the bodies of small actions inlined behind an action-id test
        (saves a Python call per table; the table's entries can still change at run time)."""
        small = [
            self.actions[a.id]
            for a in table.actions.values()
            if self.actions[a.id].inlinable and self.actions[a.id].inline_size() <= INLINE_ACTION_LINES
        ]
        small = small[:INLINE_ACTIONS_PER_TABLE]
        if not small:
            src.emit(f"{e}.fn(F, {e}.params)")
            return
        a = src.tmp("a")
        data = src.tmp("p")
        src.emit(f"{a} = {e}.action_id")
        for k, action in enumerate(small):
            src.emit(f"{'if' if k == 0 else 'elif'} {a} == {action.id}:")
            with src.indent():
                if action.params:
                    src.emit(f"{data} = {e}.params")
                action.emit_inline_data(src, data)
        src.emit("else:")
        with src.indent():
            src.emit(f"{e}.fn(F, {e}.params)")

    def _inline_default(self, table):
        """(CompiledAction, params) when a keyless table always runs one known action."""
        if not table.default_entry_const or table.initial_default is None:
            return None
        ref, params = table.initial_default
        if ref is None:
            return None
        action = self.actions[ref.id]
        if not action.inlinable:
            return None
        return action, params


class ChecksumGen:
    """simple_switch's checksum units: verified after the parser, updated before deparsing."""

    def __init__(self, cfg, layout, ns, calculations: dict):
        self.items = []
        for i, c in enumerate(cfg.get("checksums", [])):
            path = f"checksums[{i}]"
            if c.get("type", "generic") != "generic":
                raise unsupported(f"checksum type '{c.get('type')}'", path, c)
            calc = calculations.get(c.get("calculation"))
            if calc is None:
                raise malformed(f"unknown calculation {c.get('calculation')!r}", path, c)
            target = c.get("target")
            if not isinstance(target, list) or len(target) != 2:
                raise malformed("checksum target must be [header, field]", path, c)
            ref = layout.field(target[0], target[1], path)
            valid = layout.header(target[0], path).valid
            cond = None
            if c.get("if_cond") is not None:
                cond = ExprCompiler(layout, ns, path + ".if_cond").boolean(c["if_cond"]).src
                cond = None if cond == "True" else cond
            self.items.append((c.get("name"), calc, ref, valid, cond, c.get("verify", True), c.get("update", True)))

    @property
    def has_verify(self) -> bool:
        return any(item[5] for item in self.items)

    def generate_verify(self, src) -> None:
        src.emit("def verify_checksums(F, payload):")
        with src.indent():
            src.emit("bad = 0")
            for name, calc, ref, valid, cond, verify, _ in self.items:
                if not verify:
                    continue
                test = f"F[{valid}]" + (f" and {cond}" if cond else "")
                src.emit(f"if {test} and {calc}(F, payload) != F[{ref.slot}]:")
                with src.indent():
                    src.emit(f"bad = 1  # checksum {name}")
            src.emit("return bad")
        src.emit()

    def update_lines(self) -> list:
        lines = []
        for _, calc, ref, _, cond, _, update in self.items:
            if not update:
                continue
            stmt = f"F[{ref.slot}] = {calc}(F, payload) & {ref.mask}"
            lines.append(f"if {cond}: {stmt}" if cond else stmt)
        return lines


def generate_deparser(src, deparser: dict, path: str, env, codecs: dict, checksums: ChecksumGen):
    """`deparse(F, payload) -> bytes`: checksum updates, the deparser's primitives, then valid
    headers in order, then payload (BMv2's Deparser::deparse).

    The primitives are the extern functions p4c writes for calls in a v1model deparser (`digest`
    as generate_digest, `log_msg`, `truncate`, `random`, `hash`, `assert`); BMv2 runs them as an
    action's primitives, so they compile as one. A digest taken here sets the learn id after
    ingress has been sampled, which simple_switch never reads: no digest is sent, as in BMv2."""
    from emulator.engine.headercodec import HeaderCodec
    from emulator.engine.primitives import ActionBody

    layout, ns = env.layout, env.ns
    src.emit("def deparse(F, payload):")
    with src.indent():
        for line in checksums.update_lines():
            src.emit(line)
        primitives = deparser.get("primitives") or []
        if not isinstance(primitives, list):
            raise malformed("deparser primitives must be a list", path, deparser)
        if primitives:
            body = ActionBody(env, path)
            body.emit(src, primitives)
            if body.uses_return or body.uses_exit:
                raise unsupported("control flow (a jump or exit) among the deparser's primitives", path, deparser)
        src.emit("out = []")
        for i, name in enumerate(deparser.get("order", [])):
            h = layout.header(name, f"{path}.order[{i}]")
            if h.htype.varbit is not None:
                spec = ns.const("_VL", field_spec(h.htype))
                src.emit(f"if F[{h.valid}]: out.append(_pack_vl(F, {h.base}, {spec}))")
                continue
            entry = codecs.get(h.htype.name)
            if entry is None:
                try:
                    codec = HeaderCodec(h.htype)
                except ValueError as exc:
                    raise unsupported(str(exc), f"{path}.order[{i}]") from None
                entry = (codec, ns.add("_hs", codec.struct))
                codecs[h.htype.name] = entry
            codec, sname = entry
            src.emit(f"if F[{h.valid}]: out.append({codec.pack_expr(sname, h.base)})")
        src.emit("out.append(payload)")
        src.emit("return b''.join(out)")
    src.emit()
