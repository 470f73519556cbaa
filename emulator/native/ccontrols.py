"""Control pipelines (ingress, egress) -> one C function each, whose tables and conditionals are labels.

BMv2's pipeline is a graph of nodes (pipeline.cpp, tables.cpp): a table looks up its key, runs the
hit entry's action or the default entry's, then continues with the node `next_tables` names for
that action (or for `__HIT__` / `__MISS__`); a conditional continues with one of two nodes; an
action call runs its action. Each edge becomes a `goto`; `exit` returns from the function.
"""

from emulator.native.cexpr import CExpr, c_data, c_int, store
from emulator.native.csource import identifiers


class CControl:
    def __init__(self, gen, name: str):
        self.gen = gen
        self.layout = gen.layout
        self.name = name
        self.pipeline = next(p for p in gen.cfg.get("pipelines", []) if p.get("name") == name)
        self.nodes = {}  # node name -> (kind, JSON)
        for t in self.pipeline.get("tables", []):
            self.nodes[t["name"]] = ("table", t)
        for c in self.pipeline.get("conditionals", []):
            self.nodes[c["name"]] = ("cond", c)
        for a in self.pipeline.get("action_calls", []):
            self.nodes[a["name"]] = ("call", a)
        self.labels = identifiers((name, name) for name in self.nodes)  # node name -> C label

    def goto(self, node) -> str:
        return "return;" if node is None else f"goto {self.labels[node]};"

    def emit(self, src) -> None:
        src.emit(f"/* control {self.name} */")
        src.emit(f"static void {self.name}(sw_t *sw, pkt_t *pk, pass_ctx_t *cx) {{")
        with src.indent():
            src.emit("V *F = pk->F; (void)F; (void)sw; (void)cx;")
            src.emit(self.goto(self.pipeline.get("init_table")))
            for name, (kind, j) in self.nodes.items():
                src.emit(f"{self.labels[name]}: /* {kind} {name} */")
                with src.indent():
                    if kind == "cond":
                        self._conditional(src, j)
                    elif kind == "call":
                        self._action_call(src, j)
                    else:
                        self._table(src, j)
            src.emit("return;")
        src.emit("}")
        src.emit()

    def _conditional(self, src, j):
        cond = CExpr(self.layout, self.gen.consts, f"{self.name}.{j['name']}").boolean(j.get("expression"))
        with src.at(j):
            src.emit(f"if ({cond.src}) {self.goto(j.get('true_next'))}")
        src.emit(self.goto(j.get("false_next")))

    def _action_call(self, src, j):
        aid = j.get("action_id")
        with src.at(j):
            src.emit(f"{self.gen.action_fns[aid]}(sw, pk, cx, NULL);")
        if self.gen.action_exits.get(aid):
            src.emit(f"if (F[{self.layout.EXIT}]) return;")
        src.emit(self.goto(j.get("next_node")))

    def _table(self, src, j):
        table = self.gen.prog.tables[j["name"]]
        src.emit("{")
        with src.indent():
            src.emit(f"table_t *t = &sw->tables[{self.gen.table_index[table.name]}]; /* {table.name} */")
            if not table.keys:
                self._keyless(src, table, j)
            else:
                keys = self._key(table, j)
                src.emit("int32_t act; const uint64_t *P;")
                with src.at(j):
                    src.emit(f"uint64_t key[{len(keys)}] = {{{', '.join(keys)}}};")
                    src.emit("int32_t e = tbl_lookup(t, key);")
                src.emit("if (e >= 0) {")
                with src.indent():
                    self._hit(src, table)
                src.emit("} else { act = t->def_action; P = t->def_params; }")
                self._run(src, table)
                self._next(src, table, j, "e >= 0")
        src.emit("}")

    def _keyless(self, src, table, j):
        """A table without a key always misses: its default action runs, called directly when it is
        const (p4c's tables for the plain code of a control are such tables)."""
        ref = table.initial_default[0] if table.default_entry_const and table.initial_default else None
        if ref is None:
            with src.at(j):
                src.emit("int32_t act = t->def_action; const uint64_t *P = t->def_params;")
            self._run(src, table)
            self._next(src, table, j, None)
            return
        with src.at(j):
            src.emit(f"{self.gen.action_fns[ref.id]}(sw, pk, cx, t->def_params); /* the const default action */")
        if self.gen.action_exits.get(ref.id):
            src.emit(f"if (F[{self.layout.EXIT}]) return;")
        nxt = j.get("next_tables", {})
        src.emit(self.goto(nxt.get("__MISS__") if "__MISS__" in nxt or "__HIT__" in nxt else nxt.get(ref.name)))

    def _key(self, table, j) -> list:
        """C expressions of the key fields, as the lookup compares them (masked to the field and the
        key's static mask)."""
        keys = []
        for k, kj in zip(table.keys, j.get("key", [])):
            if k.match_type == "valid":
                h = self.layout.header(kj.get("target"))
                keys.append(f"(uint64_t)F[{h.valid}]")
            else:
                target = kj.get("target")
                ref = self.layout.field(target[0], target[1])
                mask = ref.mask if k.static_mask is None else k.static_mask & ref.mask
                keys.append(f"(uint64_t)(F[{ref.slot}] & {c_int(mask)}) /* {k.name} */")
        return keys

    def _hit(self, src, table):
        """The hit entry's action and data, its direct counter and meter, its action profile member."""
        src.emit("act = t->actions[e]; P = &t->params[(size_t)e * t->nparams];")
        if table.with_counters:
            src.emit(f"t->pk[e]++; t->by[e] += (uint64_t)F[{self.layout.ILEN}];")
        if table.direct_meter is not None:
            self._direct_meter(src, table)
        if table.profile is not None:
            k = self.gen.profiles.index(table.profile.name)
            fn = self.gen.selectors.get(table.profile.name, "NULL")
            src.emit(f"/* action profile {table.profile.name}: the member to run */")
            src.emit(f"act = profile_resolve(&sw->prof[{k}], act, P[0], {fn}, pk, cx, &P);")

    def _direct_meter(self, src, table):
        """On a hit, before the action: the entry's meter (indexed by its handle) colours the packet."""
        meter = table.direct_meter
        m = self.gen.meters.index(meter.name)
        ref = self.layout.field(table.direct_meter_target[0], table.direct_meter_target[1])
        amount = f"(uint64_t)F[{self.layout.ILEN}]" if meter.by_bytes else "1"
        color = c_data(f"(V)meter_execute(&sw->meter_{m}[t->ids[e]], SW_NOW(sw), {amount})")
        src.emit(f"if ((uint32_t)t->ids[e] < {meter.size}) /* direct meter {meter.name} */")
        src.emit("  " + store(str(ref.slot), ref.width, ref.signed, color))

    def _run(self, src, table):
        """The chosen action, by id; a return when it may have run `exit`."""
        may_exit = False
        src.emit("switch (act) {")
        for ref in table.actions.values():
            src.emit(f"case {ref.id}: {self.gen.action_fns[ref.id]}(sw, pk, cx, P); break;")
            may_exit |= bool(self.gen.action_exits.get(ref.id))
        src.emit("default: break;")
        src.emit("}")
        if may_exit:
            src.emit(f"if (F[{self.layout.EXIT}]) return;")

    def _next(self, src, table, j, hit):
        """The node `next_tables` names for a hit or a miss (`hit`: the C test, None: a miss), or for
        the action that ran."""
        nxt = j.get("next_tables", {})
        if "__HIT__" in nxt or "__MISS__" in nxt:
            if hit is not None:
                src.emit(f"if ({hit}) {self.goto(nxt.get('__HIT__'))}")
            src.emit(self.goto(nxt.get("__MISS__")))
            return
        branches = {}
        for ref in table.actions.values():
            branches.setdefault(nxt.get(ref.name), []).append(ref.id)
        if table.initial_default is None or table.initial_default[0] is None:
            branches.setdefault(j.get("base_default_next"), []).append(-1)
        targets = list(branches.items())
        for target, ids in targets[:-1]:
            cond = " || ".join(f"act == {i}" for i in ids)
            src.emit(f"if ({cond}) {self.goto(target)}")
        src.emit(self.goto(targets[-1][0] if targets else None))
