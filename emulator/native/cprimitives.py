"""Actions and their primitives (core and simple_switch's) -> C statements over the packet state `F`.

One C function per action; a primitive list elsewhere (a parser `primitive` op, the deparser's
extern calls) compiles the same way in place. Jumps (`_jump`, `_jump_if_zero`, which p4c writes for
`if`, `return` and `exit` inside actions) become gotos to labels at their targets. Each primitive is
one `_p_<op>` method, as in the Python engine's ActionBody (emulator/engine/primitives.py).
"""

from emulator.engine.jsonutil import hexstr, malformed, unsupported
from emulator.engine.logmsg import parse_log_format
from emulator.native import cvalues
from emulator.native.cexpr import CExpr, c_data, c_int, store
from emulator.native.cvalues import exact64, ring, u64_lit

JUMPS = ("_jump", "_jump_if_zero")
BINARY = {"add": "+", "subtract": "-", "bit_and": "&", "bit_or": "|", "bit_xor": "^"}


class CPrimitives:
    def __init__(self, gen):
        self.gen = gen
        self.layout = gen.layout

    def actions(self, src) -> None:
        """One function per action of the program; records which may set the exit flag."""
        gen = self.gen
        for aid, a in gen.actions.items():
            path = f"actions '{a.get('name')}'"
            widths = [p.get("bitwidth") for p in a.get("runtime_data", [])]
            names = ", ".join(p.get("name", "?") for p in a.get("runtime_data", []))
            src.emit(f"/* action {a.get('name')}({names}) */")
            src.emit(f"static void {gen.action_fns[aid]}(sw_t *sw, pkt_t *pk, pass_ctx_t *cx, const uint64_t *P) {{")
            with src.indent():
                src.emit("V *F = pk->F; (void)F; (void)sw; (void)cx; (void)P;")
                gen.action_exits[aid] = self.emit(src, a.get("primitives", []), path, widths)
            src.emit("}")
            src.emit()

    def emit(self, src, prims, path, widths, parser=False) -> bool:
        """Emit a primitive list; jumps become gotos to per-primitive labels. Returns: may exit."""
        targets = set()
        for k, p in enumerate(prims):
            if p.get("op") in JUMPS:
                t = hexstr(p.get("parameters", [])[-1].get("value"), f"{path}.primitives[{k}]")
                if not 0 <= t <= len(prims):
                    raise malformed(f"jump target {t} out of range", f"{path}.primitives[{k}]", p)
                targets.add(t)
        label = src.tmp("L")
        exits = False
        for k, prim in enumerate(prims):
            ppath = f"{path}.primitives[{k}]"
            if k in targets:
                src.emit(f"{label}_{k}:;")
            op = prim.get("op")
            params = prim.get("parameters", [])
            ex = CExpr(self.layout, self.gen.consts, ppath, params=widths, parser=parser)
            with src.at(prim):
                if op == "_jump":
                    src.emit(f"goto {label}_{hexstr(params[-1].get('value'))};")
                elif op == "_jump_if_zero":
                    v = ex.value(params[0])
                    cond = v.src if v.kind == "bool" else f"({v.src}) != 0"
                    src.emit(f"if (!({cond})) goto {label}_{hexstr(params[-1].get('value'))};")
                else:
                    method = getattr(self, f"_p_{op}", None)
                    if method is None:
                        raise unsupported(f"primitive '{op}' (native backend)", ppath, prim)
                    exits |= bool(method(src, ex, params, ppath, prim))
        if len(prims) in targets:
            src.emit(f"{label}_{len(prims)}:;")
        return exits

    # ------------------------------------------------------------------ fields
    def _p_assign(self, src, ex, params, path, prim):
        dst, width, signed = ex.lvalue(params[0])
        src.emit(store(dst, width, signed, ex.data(params[1])))

    _p_modify_field = _p_assign

    def _p_add_to_field(self, src, ex, params, path, prim):
        dst, width, signed = ex.lvalue(params[0])
        v = ex.data(params[1])
        sign = "+" if prim.get("op") == "add_to_field" else "-"
        src.emit(store(dst, width, signed, cvalues.ring_op(sign, c_data(f"F[{dst}]"), v)))

    _p_subtract_from_field = _p_add_to_field

    def _p_add(self, src, ex, params, path, prim):
        """add, subtract, bit_and, bit_or, bit_xor, shift_right: dst = a op b."""
        dst, width, signed = ex.lvalue(params[0])
        a, b = ex.data(params[1]), ex.data(params[2])
        c_op = BINARY.get(prim.get("op"))
        if c_op:
            value = cvalues.ring_op(c_op, a, b)
        elif b.const is not None and b.const < 0:
            value = c_data(f"v_shr(cx, {a.src}, {b.src})")  # raises
        else:
            value = cvalues.shift_right(a, b)
        src.emit(store(dst, width, signed, value))

    _p_subtract = _p_bit_and = _p_bit_or = _p_bit_xor = _p_shift_right = _p_add

    def _p_shift_left(self, src, ex, params, path, prim):
        dst, width, signed = ex.lvalue(params[0])
        a, b = ex.data(params[1]), ex.data(params[2])
        mask = (1 << width) - 1
        wide = f"v_shl_masked(cx, {a.src}, {b.src}, {c_int(mask)}, {width})"
        src.emit(store(dst, width, signed, cvalues.masked_shift_left(a, b, mask, wide)))

    def _p_no_op(self, src, ex, params, path, prim):
        pass

    def _p_exit(self, src, ex, params, path, prim):
        src.emit(f"F[{self.layout.EXIT}] = 1;")
        return True

    # ------------------------------------------------------------------ headers, unions, stacks
    def _p_add_header(self, src, ex, params, path, prim):
        h = ex.header(params[0])
        n = h.htype.nfields
        src.emit(f"if (!F[{ex._slot(h, n)}]) {{")
        with src.indent():
            if n:
                src.emit(f"memset(&F[{h.src}], 0, sizeof(V) * {n});")
            src.emit(f"F[{ex._slot(h, n)}] = 1;")
            self._clear_siblings(src, h)
            src.emit(f"F[{self.layout.PKTLEN}] += {h.htype.nbits // 8};")
        src.emit("}")

    def _p_add_header_fast(self, src, ex, params, path, prim):
        h = ex.header(params[0])
        src.emit(f"F[{ex._slot(h, h.htype.nfields)}] = 1;")
        self._clear_siblings(src, h)

    def _p_remove_header(self, src, ex, params, path, prim):
        h = ex.header(params[0])
        valid = ex._slot(h, h.htype.nfields)
        src.emit(f"if (F[{valid}]) {{ F[{self.layout.PKTLEN}] -= {h.htype.nbits // 8}; F[{valid}] = 0; }}")

    def _p_assign_header(self, src, ex, params, path, prim):
        dst, hsrc = ex.header(params[0]), ex.header(params[1])
        if dst.htype is not hsrc.htype:
            raise malformed("assign_header between different header types", path, prim)
        src.emit(f"assign_header(F, {dst.src}, {hsrc.src}, {dst.htype.nfields});")
        if dst.static_base is not None and self.layout.siblings.get(dst.static_base + dst.htype.nfields):
            src.emit(f"if (F[{dst.static_base + dst.htype.nfields}]) {{")
            with src.indent():
                self._clear_siblings(src, dst)
            src.emit("}")

    _p_copy_header = _p_assign_header

    def _p_assign_union(self, src, ex, params, path, prim):
        """assign_union, assign_union_stack: BMv2 assigns member by member (assign_header)."""
        dst, other = ex.value(params[0]), ex.value(params[1])
        if prim.get("op") == "assign_union":
            pairs = [(dst.union, other.union)]
        else:
            pairs = list(zip(dst.union_stack.unions, other.union_stack.unions))
            src.emit(f"F[{dst.union_stack.next_slot}] = F[{other.union_stack.next_slot}];")
        for du, su in pairs:
            for d, h in zip(du.members, su.members):
                src.emit(f"assign_header(F, {d.base}, {h.base}, {d.htype.nfields}); /* {d.name} = {h.name} */")

    _p_assign_union_stack = _p_assign_union

    def _p_assign_header_stack(self, src, ex, params, path, prim):
        dst, other = ex.stack(params[0]).stack, ex.stack(params[1]).stack
        if len(dst.headers) != len(other.headers):
            raise malformed("assign_header_stack between stacks of different sizes", path, prim)
        size = dst.headers[0].size if dst.headers else 0
        for d, s in zip(dst.headers, other.headers):
            src.emit(f"memmove(&F[{d.base}], &F[{s.base}], sizeof(V) * {size});")
        src.emit(f"F[{dst.next_slot}] = F[{other.next_slot}];")

    def _p_push(self, src, ex, params, path, prim):
        """push, pop: stack_push / stack_pop of `count` elements."""
        op = prim.get("op")
        if ex.value(params[0]).kind == "union_stack":
            raise unsupported(f"{op} on a header union stack (native backend)", path, prim)
        st = ex.stack(params[0]).stack
        count = ex.data(params[1])
        size = st.headers[0].size if st.headers else 0
        bases = self.gen.consts.stack_bases(st)
        fn = "stack_push" if op == "push" else "stack_pop"
        src.emit(f"{fn}(cx, F, {bases}, {len(st.bases)}, {size}, {st.next_slot}, {count.src});")

    _p_pop = _p_push

    def _clear_siblings(self, src, h) -> None:
        """A union member known at compile time became valid: the union's other members become invalid."""
        if h.static_base is None:
            return  # a header stack element: never a union member
        for other in self.layout.siblings.get(h.static_base + h.htype.nfields, ()):
            src.emit(f"F[{other}] = 0;")

    # ------------------------------------------------------------------ stateful objects
    def _p_register_read(self, src, ex, params, path, prim):
        dst, width, signed = ex.lvalue(params[0])
        reg, cells = self._register(params[1], path, prim)
        i = src.tmp("i")
        in_range = _open_index(src, i, ex.data(params[2]), reg.size)
        cell = cvalues.narrow(f"{cells}({i})", reg.bitwidth)
        src.emit(f"  if ({in_range}) " + store(dst, width, signed, cell))
        src.emit("  else sw->stats[ST_OUT_OF_BOUNDS]++; }")

    def _p_register_write(self, src, ex, params, path, prim):
        reg, cells = self._register(params[0], path, prim)
        i, v = src.tmp("i"), ex.data(params[2])
        in_range = _open_index(src, i, ex.data(params[1]), reg.size)
        value = ring(v)
        if not (exact64(v) and v.bits <= reg.bitwidth or reg.bitwidth == 64):
            value = f"({value} & {u64_lit(reg.mask)})"
        src.emit(f"  if ({in_range}) {cells}({i}) = {value};")
        src.emit("  else sw->stats[ST_OUT_OF_BOUNDS]++; }")

    def _p_count(self, src, ex, params, path, prim):
        j = params[0]
        name = j.get("value") if isinstance(j, dict) else None
        if name not in self.gen.prog.counters:
            raise malformed(f"unknown counter {name!r}", path, prim)
        c = self.gen.counters.index(name)
        i = src.tmp("i")
        in_range = _open_index(src, i, ex.data(params[1]), self.gen.prog.counters[name].size)
        src.emit(
            f"  if ({in_range}) {{ sw->ctr_pk[{c}][(size_t){i}]++; "
            f"sw->ctr_by[{c}][(size_t){i}] += (uint64_t)F[{self.layout.ILEN}]; }}"
        )
        src.emit(f"  else sw->stats[ST_OUT_OF_BOUNDS]++; }} /* counter {name} */")

    def _p_execute_meter(self, src, ex, params, path, prim):
        j = params[0]
        name = j.get("value") if isinstance(j, dict) else None
        meter = self.gen.prog.meters.get(name)
        if meter is None or meter.table is not None:
            raise malformed(f"execute_meter needs an indirect meter, got {name!r}", path, prim)
        m = self.gen.meters.index(name)
        dst, width, signed = ex.lvalue(params[2])
        amount = f"(uint64_t)F[{self.layout.ILEN}]" if meter.by_bytes else "1"
        i = src.tmp("i")
        in_range = _open_index(src, i, ex.data(params[1]), meter.size)
        color = c_data(f"(V)meter_execute(&sw->meter_{m}[(size_t){i}], SW_NOW(sw), {amount})")
        src.emit(f"  if ({in_range}) " + store(dst, width, signed, color))
        src.emit(f"  else sw->stats[ST_OUT_OF_BOUNDS]++; }} /* meter {name} */")

    def _register(self, j, path, prim) -> tuple:
        """(RegisterArray, the C macro of its cells: REG_x(i)) of a register reference."""
        name = j.get("value") if isinstance(j, dict) else None
        if name not in self.gen.prog.registers:
            raise malformed(f"unknown register {name!r}", path, prim)
        return self.gen.prog.registers[name], self.gen.register_macros[name]

    # ------------------------------------------------------------------ hashes and random numbers
    def _p_modify_field_with_hash_based_offset(self, src, ex, params, path, prim):
        dst, width, signed = ex.lvalue(params[0])
        base = ex.data(params[1])
        name = params[2].get("value") if isinstance(params[2], dict) else None
        calc = self.gen.calc_names.get(name)
        if calc is None:
            raise malformed(f"unknown calculation {name!r}", path, prim)
        size = ex.data(params[3])
        value = c_data(f"hash_offset((V){calc}(pk, cx), {base.src}, {size.src})")
        src.emit(store(dst, width, signed, value))

    def _p_modify_field_rng_uniform(self, src, ex, params, path, prim):
        dst, width, signed = ex.lvalue(params[0])
        lo, hi = ex.data(params[1]), ex.data(params[2])
        a, b = src.tmp("lo"), src.tmp("hi")
        src.emit(f"{{ V {a} = {lo.src}, {b} = {hi.src};")
        src.emit(
            f"  if ({a} <= {b}) "
            + store(dst, width, signed, c_data(f"{a} + rng_in_span(&sw->rng, {b} - {a} + 1)"))
            + " }"
        )

    # ------------------------------------------------------------------ the target: drops, copies, digests
    def _p_mark_to_drop(self, src, ex, params, path, prim):
        """mark_to_drop(standard_metadata) and the old drop(): egress_spec = the drop port, no multicast."""
        port = self.gen.drop_port
        if prim.get("op") == "drop":
            spec = self.layout.resolve("standard_metadata.egress_spec")
            grp = self.layout.resolve("intrinsic_metadata.mcast_grp")
        else:
            header_name = params[0].get("value")
            h = self.layout.header(header_name, path)
            spec = self.layout.field(header_name, "egress_spec")
            grp = self.layout.field(header_name, "mcast_grp") if "mcast_grp" in h.htype.offsets else None
        src.emit(f"F[{spec.slot}] = {port & spec.mask}; /* mark_to_drop: egress_spec */")
        if grp is not None:
            src.emit(f"F[{grp.slot}] = 0; /* mcast_grp */")

    _p_drop = _p_mark_to_drop

    def _p_clone_ingress_pkt_to_egress(self, src, ex, params, path, prim):
        session, fl = ex.data(params[0]), ex.data(params[1])
        op = prim.get("op")
        src.emit(f"F[{self.layout.CLONE}] = (({session.src}) & 0xFFFF) | 0x8000; /* {op}: mirroring.SESSION_VALID */")
        src.emit(f"F[{self.layout.CLONE_FL}] = ({fl.src}) & 0xFFFF;")

    _p_clone_egress_pkt_to_egress = _p_clone_ingress_pkt_to_egress

    def _p_generate_digest(self, src, ex, params, path, prim):
        """The receiver (params[0]) is ignored, as simple_switch does."""
        learn_id = ex.data(params[1])
        src.emit(f"F[{self.layout.LEARN}] = ({learn_id.src}) & 0xFFFF; /* digest: taken after ingress */")

    def _p_truncate(self, src, ex, params, path, prim):
        length = ex.data(params[0])
        t = src.tmp("n")
        trunc = self.layout.TRUNC
        src.emit(f"{{ V {t} = ({length.src}) & (V)UINT64_MAX; /* truncate: the smallest length wins */")
        src.emit(f"  if (F[{trunc}] < 0 || {t} < F[{trunc}]) F[{trunc}] = {t}; }}")

    def _p_resubmit(self, src, ex, params, path, prim):
        """resubmit, recirculate: the field list to keep, taken after the pass."""
        fl = ex.data(params[0])
        reg = self.layout.RESUBMIT if prim.get("op") == "resubmit" else self.layout.RECIRC
        src.emit(f"F[{reg}] = ({fl.src}) & 0xFFFF;")

    _p_recirculate = _p_resubmit

    # ------------------------------------------------------------------ checks and logs
    def _p_assert(self, src, ex, params, path, prim):
        """assert, assume: a false condition raises (the packet is dropped)."""
        v = ex.value(params[0])
        cond = v.src if v.kind == "bool" else f"({v.src}) != 0"
        src.emit(f"if (!({cond})) RAISE(cx); /* {prim.get('op')} */")

    _p_assume = _p_assert

    def _p_log_msg(self, src, ex, params, path, prim):
        """The arguments go to sw->log_msg with the call's index in log_formats (its BMv2 reading)."""
        fmt, vec = params
        if not isinstance(fmt, dict) or not isinstance(fmt.get("value"), str):
            raise malformed("log_msg format must be a string", path, prim)
        if not isinstance(vec, dict) or vec.get("type") != "parameters_vector":
            raise malformed("log_msg arguments must be a parameters_vector", path, prim)
        items = vec.get("value") if isinstance(vec.get("value"), list) else []
        form = parse_log_format(fmt["value"], len(items), prim)
        k = len(self.gen.log_formats)
        self.gen.log_formats.append(form)
        if form.error is not None or not items:
            src.emit(f"log_msg(cx->sw, {k}, 0, NULL);")
            return
        args = ", ".join(ex.data(item).src for item in items)
        a = src.tmp("args")
        src.emit(f"{{ const V {a}[] = {{{args}}}; log_msg(cx->sw, {k}, {len(items)}, {a}); }}")


def _open_index(src, name: str, index, size: int) -> str:
    """Opens a block holding `index` in variable `name`; returns the C test that it is in 0..size-1
    (an index known non-negative and below 2**64 needs no sign test)."""
    if exact64(index):
        src.emit(f"{{ uint64_t {name} = {ring(index)};")
        return f"{name} < {size}"
    src.emit(f"{{ V {name} = {index.src};")
    return f"{name} >= 0 && {name} < {size}"
