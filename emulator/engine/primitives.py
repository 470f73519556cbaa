"""BMv2 primitives (core and simple_switch's) -> Python statements.

`ActionBody` compiles the primitive list of an action (or of a parser `primitive` op) into
statements over the packet state `F`. Control flow inside actions (`_jump`, `_jump_if_zero`, which
p4c emits for `if`, `return`, `exit` and loops inside actions) is turned back into Python `if`/
`else` when it has that shape, and into a small program-counter loop otherwise.
"""

from emulator.engine.expressions import ExprCompiler, Value, store
from emulator.engine.jsonutil import hexstr, malformed, source_of, unsupported, where
from emulator.engine.logmsg import parse_log_format

# simple_switch primitives that need target features the engine does not have
UNSUPPORTED = {}


def sibling_clears(layout, valid: int) -> list:
    """Statements invalidating the other members of the union `h` belongs to (BMv2's
    HeaderUnion::make_header_valid), for a header known at compile time; [] outside unions."""
    return [f"F[{v}] = 0" for v in layout.siblings.get(valid, ())]


def _header_len(h) -> str:
    """Bytes the header takes in the packet (its varbit field at its current width)."""
    fixed = h.htype.nbits // 8
    if h.htype.varbit is None:
        return str(fixed)
    vlen = f"{h.static_base + h.htype.nfields + 1}" if h.static_base is not None else f"{h.src} + {h.htype.nfields + 1}"
    return f"({fixed} + (F[{vlen}] >> 3))"


class ActionEnv:
    """What primitives refer to besides fields: program objects and target settings."""

    def __init__(self, layout, ns, registers, counters, calculations, drop_port):
        self.layout = layout
        self.ns = ns
        self.registers = registers  # name -> RegisterArray
        self.counters = counters  # name -> CounterArray
        self.calculations = calculations  # name -> generated function name
        self.drop_port = drop_port
        self.egress_spec = layout.resolve("standard_metadata.egress_spec")
        self.mcast_grp = layout.resolve("intrinsic_metadata.mcast_grp")


class ActionBody:
    """Compiles one primitive list. `params` are runtime-data widths; `param_src(i)` names them."""

    def __init__(self, env: ActionEnv, path: str, params=None, param_src=None):
        self.env = env
        self.path = path
        self.params = params
        self.param_src = param_src
        self.uses_exit = False
        self.uses_return = False

    def expr(self, path):
        return ExprCompiler(self.env.layout, self.env.ns, path, self.params, self.param_src)

    # ------------------------------------------------------------------ control flow
    def emit(self, src, primitives: list) -> None:
        if any(p.get("op") in ("_jump", "_jump_if_zero") for p in primitives):
            blocks = self._structure(primitives, 0, len(primitives), len(primitives))
            if blocks is None:
                self._emit_pc_loop(src, primitives)
                return
            self._emit_blocks(src, primitives, blocks)
            return
        emitted = False
        for i, prim in enumerate(primitives):
            emitted |= self._primitive(src, prim, f"{self.path}.primitives[{i}]")
        if not emitted:
            src.emit("pass")

    def _target(self, prim, i):
        params = prim.get("parameters", [])
        j = params[-1] if params else None
        if not isinstance(j, dict) or j.get("type") != "hexstr":
            raise malformed("jump offset must be a hexstr", f"{self.path}.primitives[{i}]", prim)
        return hexstr(j.get("value"))

    def _structure(self, prims, start, end, n):
        """Nested blocks for prims[start:end] if every jump forms an if/else or a return."""
        out = []
        i = start
        while i < end:
            op = prims[i].get("op")
            if op == "_jump_if_zero":
                t = self._target(prims[i], i)
                if not i < t <= end:
                    return None
                last = prims[t - 1] if t - 1 > i else None
                if last is not None and last.get("op") == "_jump":
                    e = self._target(last, t - 1)
                    if t <= e <= end:
                        then = self._structure(prims, i + 1, t - 1, n)
                        other = self._structure(prims, t, e, n)
                        if then is None or other is None:
                            return None
                        out.append(("if", i, then, other))
                        i = e
                        continue
                then = self._structure(prims, i + 1, t, n)
                if then is None:
                    return None
                out.append(("if", i, then, []))
                i = t
            elif op == "_jump":
                if self._target(prims[i], i) != n:
                    return None
                out.append(("return", i))
                i += 1
            else:
                out.append(("stmt", i))
                i += 1
        return out

    def _emit_blocks(self, src, prims, blocks) -> bool:
        emitted = False
        for block in blocks:
            kind, i = block[0], block[1]
            path = f"{self.path}.primitives[{i}]"
            if kind == "stmt":
                emitted |= self._primitive(src, prims[i], path)
            elif kind == "return":
                self.uses_return = True
                src.emit("return None")
                emitted = True
            else:
                cond = self._jump_condition(prims[i], path)
                src.emit(f"if {cond}:")
                with src.indent():
                    if not self._emit_blocks(src, prims, block[2]):
                        src.emit("pass")
                if block[3]:
                    src.emit("else:")
                    with src.indent():
                        if not self._emit_blocks(src, prims, block[3]):
                            src.emit("pass")
                emitted = True
        return emitted

    def _jump_condition(self, prim, path) -> str:
        params = prim.get("parameters", [])
        if len(params) != 2:
            raise malformed("_jump_if_zero takes (condition, offset)", path, prim)
        v = self.expr(path).value(params[0])
        if v.kind == "bool":
            return v.src
        if v.kind != "data":
            raise malformed("_jump_if_zero condition must be integral", path, prim)
        return f"{v.src} != 0"

    def _emit_pc_loop(self, src, prims):
        """Any jump pattern (loops included): a program counter over the primitives."""
        self.uses_return = True
        n = len(prims)
        src.emit("_pc = 0")
        src.emit(f"while _pc < {n}:")
        with src.indent():
            for i, prim in enumerate(prims):
                path = f"{self.path}.primitives[{i}]"
                src.emit(f"{'if' if i == 0 else 'elif'} _pc == {i}:")
                with src.indent():
                    op = prim.get("op")
                    if op == "_jump":
                        src.emit(f"_pc = {self._target(prim, i)}")
                    elif op == "_jump_if_zero":
                        cond = self._jump_condition(prim, path)
                        src.emit(f"_pc = {i + 1} if {cond} else {self._target(prim, i)}")
                    else:
                        self._primitive(src, prim, path)
                        src.emit(f"_pc = {i + 1}")

    # ------------------------------------------------------------------ primitives
    def _primitive(self, src, prim, path) -> bool:
        """Emit one primitive; False when it emits nothing."""
        op = prim.get("op")
        params = prim.get("parameters", [])
        if not isinstance(params, list):
            raise malformed("primitive parameters must be a list", path, prim)
        ex = self.expr(path)
        if op in UNSUPPORTED:
            raise unsupported(f"primitive '{op}' ({UNSUPPORTED[op]})", path, prim)
        handler = getattr(self, "_p_" + str(op), None)
        if handler is None:
            raise unsupported(f"primitive '{op}'", path, prim)
        expected = _ARITY.get(op)
        if expected is not None and len(params) != expected:
            raise malformed(f"primitive '{op}' takes {expected} parameter(s), got {len(params)}", path, prim)
        origin = source_of(prim)
        if origin:
            src.emit(f"# {origin}")
        return handler(src, ex, params, path, prim) is not False

    def _int_value(self, ex, j) -> Value:
        v = ex.value(j)
        if v.kind == "bool":
            return Value(f"(1 if {v.src} else 0)", "data", bits=1)
        if v.kind != "data":
            raise malformed(f"expected an integer value, got {v.kind}", ex.path, j)
        return v

    def _p_assign(self, src, ex, params, path, prim):
        dst, width, signed = ex.lvalue(params[0])
        src.emit(store(dst, width, signed, self._int_value(ex, params[1])))

    _p_modify_field = _p_assign

    def _p_add_to_field(self, src, ex, params, path, prim):
        dst, width, signed = ex.lvalue(params[0])
        v = self._int_value(ex, params[1])
        src.emit(store(dst, width, signed, Value(f"F[{dst}] + {v.src}", "data")))

    def _p_subtract_from_field(self, src, ex, params, path, prim):
        dst, width, signed = ex.lvalue(params[0])
        v = self._int_value(ex, params[1])
        src.emit(store(dst, width, signed, Value(f"F[{dst}] - ({v.src})", "data")))

    def _binary(self, src, ex, params, pyop):
        dst, width, signed = ex.lvalue(params[0])
        a, b = self._int_value(ex, params[1]), self._int_value(ex, params[2])
        src.emit(store(dst, width, signed, Value(f"({a.src}) {pyop} ({b.src})", "data")))

    def _p_add(self, src, ex, params, path, prim):
        self._binary(src, ex, params, "+")

    def _p_subtract(self, src, ex, params, path, prim):
        self._binary(src, ex, params, "-")

    def _p_bit_and(self, src, ex, params, path, prim):
        self._binary(src, ex, params, "&")

    def _p_bit_or(self, src, ex, params, path, prim):
        self._binary(src, ex, params, "|")

    def _p_bit_xor(self, src, ex, params, path, prim):
        self._binary(src, ex, params, "^")

    def _p_shift_left(self, src, ex, params, path, prim):
        dst, width, signed = ex.lvalue(params[0])
        a, b = self._int_value(ex, params[1]), self._int_value(ex, params[2])
        src.emit(
            store(dst, width, signed, Value(f"_shl_masked({a.src}, {b.src}, {(1 << width) - 1})", "data", bits=width))
        )

    def _p_shift_right(self, src, ex, params, path, prim):
        self._binary(src, ex, params, ">>")

    def _p_no_op(self, src, ex, params, path, prim):
        return False

    def _p_exit(self, src, ex, params, path, prim):
        self.uses_exit = True
        src.emit(f"F[{self.env.layout.EXIT}] = 1")

    def _header(self, ex, j):
        return ex.header(j)

    def _mark_valid(self, src, ex, h) -> None:
        """F[valid] = 1 and, for a union member, the other members invalid."""
        valid = ex._slot(h, h.htype.nfields)
        src.emit(f"F[{valid}] = 1")
        if not self.env.layout.siblings:
            return
        if h.static_base is not None:
            for line in sibling_clears(self.env.layout, h.static_base + h.htype.nfields):
                src.emit(line)
        else:
            siblings = self.env.ns.add("_SIBL", self.env.layout.siblings)
            src.emit(f"_clear_siblings(F, {siblings}, {valid})")

    def _p_add_header(self, src, ex, params, path, prim):
        h = self._header(ex, params[0])
        n = h.htype.nfields
        base = h.src
        valid = f"{h.static_base + n}" if h.static_base is not None else f"{base} + {n}"
        src.emit(f"if not F[{valid}]:")
        with src.indent():
            if n:
                if h.static_base is not None:
                    src.emit(f"F[{h.static_base}:{h.static_base + n}] = {[0] * n!r}")
                else:
                    src.emit(f"F[{base}:{base} + {n}] = {[0] * n!r}")
            self._mark_valid(src, ex, h)
            src.emit(f"F[{self.env.layout.PKTLEN}] += {_header_len(h)}")

    def _p_add_header_fast(self, src, ex, params, path, prim):
        h = self._header(ex, params[0])
        self._mark_valid(src, ex, h)

    def _p_remove_header(self, src, ex, params, path, prim):
        h = self._header(ex, params[0])
        valid = ex._slot(h, h.htype.nfields)
        src.emit(f"if F[{valid}]:")
        with src.indent():
            src.emit(f"F[{self.env.layout.PKTLEN}] -= {_header_len(h)}")
            src.emit(f"F[{valid}] = 0")

    def _p_assign_header(self, src, ex, params, path, prim):
        dst, hsrc = self._header(ex, params[0]), self._header(ex, params[1])
        if dst.htype is not hsrc.htype:
            raise malformed("assign_header between different header types", path, prim)
        self._assign_header(src, ex, dst, hsrc)

    def _assign_header(self, src, ex, dst, hsrc) -> None:
        """BMv2 assign_header: an invalid source invalidates the destination, else the destination
        becomes valid (a union's other members invalid) with the source's fields (and varbit width)."""
        n = dst.htype.nfields
        extra = "" if dst.htype.varbit is None else ", 1"
        call = f"_assign_header(F, {dst.src}, {hsrc.src}, {n}{extra})"
        if not self.env.layout.siblings:
            src.emit(call)
            return
        src.emit(f"if {call}:")
        with src.indent():
            self._mark_valid(src, ex, dst)

    def _p_assign_VL(self, src, ex, params, path, prim):
        """varbit = varbit: the value and its width (BMv2's Field::assign_VL)."""
        refs = []
        for j in params:
            if not isinstance(j, dict) or j.get("type") != "field":
                raise unsupported("assign_VL of anything but a header's varbit field", path, prim)
            ref = ex._field_ref(j)
            h = self.env.layout.header(ref.header, path)
            if h.htype.varbit is None or h.htype.fields[h.htype.varbit][0] != ref.name:
                raise malformed(f"assign_VL to '{ref.header}.{ref.name}', which is not a varbit field", path, prim)
            refs.append((ref, h))
        (dref, dh), (sref, sh) = refs
        src.emit(f"F[{dref.slot}] = F[{sref.slot}]")
        src.emit(f"F[{dh.vlen}] = F[{sh.vlen}]")

    def _union(self, ex, j, path, prim):
        v = ex.value(j)
        if v.kind != "union":
            raise malformed(f"expected a header union, got {v.kind}", path, prim)
        return v

    def _p_assign_union(self, src, ex, params, path, prim):
        """BMv2 assign_union: assign_header member by member (so the copy has the source's valid
        member, or none)."""
        dst, usrc = self._union(ex, params[0], path, prim), self._union(ex, params[1], path, prim)
        if [h.htype.name for h in dst.union.members] != [h.htype.name for h in usrc.union.members]:
            raise malformed("assign_union between different union types", path, prim)
        self._assign_union_members(src, dst, usrc)

    def _assign_union_members(self, src, dst, usrc) -> None:
        for k, h in enumerate(dst.union.members):
            d = str(h.base) if dst.static_union else f"{dst.src}[{k}]"
            s_ = str(usrc.union.members[k].base) if usrc.static_union else f"{usrc.src}[{k}]"
            extra = "" if h.htype.varbit is None else ", 1"
            src.emit(f"_assign_header(F, {d}, {s_}, {h.htype.nfields}{extra})")

    def _p_assign_union_stack(self, src, ex, params, path, prim):
        dst, other = ex.value(params[0]), ex.value(params[1])
        if dst.kind != "union_stack" or other.kind != "union_stack":
            raise malformed("assign_union_stack takes two union stacks", path, prim)
        if len(dst.union_stack.unions) != len(other.union_stack.unions):
            raise malformed("assign_union_stack between stacks of different sizes", path, prim)
        src.emit(f"F[{dst.union_stack.next_slot}] = F[{other.union_stack.next_slot}]")
        for d, o in zip(dst.union_stack.unions, other.union_stack.unions):
            self._assign_union_members(src, ex._union_value(d), ex._union_value(o))

    _p_copy_header = _p_assign_header

    def _p_assign_header_stack(self, src, ex, params, path, prim):
        dst, other = ex.stack(params[0]), ex.stack(params[1])
        if len(dst.stack.headers) != len(other.stack.headers):
            raise malformed("assign_header_stack between stacks of different sizes", path, prim)
        size = dst.stack.headers[0].size if dst.stack.headers else 0
        for d, s in zip(dst.stack.headers, other.stack.headers):
            src.emit(f"F[{d.base}:{d.base + size}] = F[{s.base}:{s.base + size}]")
        src.emit(f"F[{dst.stack.next_slot}] = F[{other.stack.next_slot}]")

    def _stack_op(self, src, ex, params, fn):
        v = ex.value(params[0])
        if v.kind == "union_stack":
            # BMv2 StackP4_16<HeaderUnion>: unions swap whole; HeaderUnion::mark_invalid does
            # nothing, so the pushed/popped-off unions keep what the rotation left there
            us = v.union_stack
            count = self._int_value(ex, params[1])
            spans = tuple(tuple((h.base, h.size) for h in u.members) for u in us.unions)
            spans_name = self.env.ns.const("_USS", spans)
            src.emit(f"_union_{fn[1:]}(F, {spans_name}, {us.next_slot}, {count.src})")
            return
        st = ex.stack(params[0])
        count = self._int_value(ex, params[1])
        size = st.stack.headers[0].size if st.stack.headers else 0
        bases = self.env.ns.const("_SB", st.stack.bases)
        src.emit(f"{fn}(F, {bases}, {size}, {st.stack.next_slot}, {count.src})")

    def _p_push(self, src, ex, params, path, prim):
        self._stack_op(src, ex, params, "_stack_push")

    def _p_pop(self, src, ex, params, path, prim):
        self._stack_op(src, ex, params, "_stack_pop")

    def _drop_statements(self, src, header_name=None):
        port = self.env.drop_port
        if header_name is None:
            spec, grp = self.env.egress_spec, self.env.mcast_grp
        else:
            h = self.env.layout.header(header_name, self.path)
            if "egress_spec" not in h.htype.offsets:
                raise malformed(f"mark_to_drop on header '{header_name}' without egress_spec", self.path)
            spec = self.env.layout.field(header_name, "egress_spec")
            grp = self.env.layout.field(header_name, "mcast_grp") if "mcast_grp" in h.htype.offsets else None
        if spec is None:
            raise malformed("drop needs standard_metadata.egress_spec", self.path)
        src.emit(f"F[{spec.slot}] = {port & spec.mask}")
        if grp is not None:
            src.emit(f"F[{grp.slot}] = 0")

    def _p_mark_to_drop(self, src, ex, params, path, prim):
        j = params[0]
        if not isinstance(j, dict) or j.get("type") != "header":
            raise malformed("mark_to_drop takes the standard_metadata header", path, prim)
        self._drop_statements(src, j.get("value"))

    def _p_drop(self, src, ex, params, path, prim):
        self._drop_statements(src)

    def _named(self, j, kind, table, path, prim):
        if not isinstance(j, dict) or j.get("type") != kind:
            raise malformed(f"expected a {kind}", path, prim)
        obj = table.get(j.get("value"))
        if obj is None:
            raise malformed(f"unknown {kind} {j.get('value')!r}", path, prim)
        return obj

    def _index(self, ex, j):
        """(index source, whether it needs the lower-bound check: it may be negative)."""
        v = self._int_value(ex, j)
        return v.src, v.bits is None

    def _bounded(self, src, index, kind, name, size, body):
        """Emit body(i)'s statements for the cell i = `index` (an _index) of an extern array of `size`
        cells; an index out of range runs none of them and is counted (_out_of_bounds), as BMv2 logs it."""
        idx, check_low = index
        i = src.tmp("i")
        src.emit(f"{i} = {idx}")
        cond = f"0 <= {i} < {size}" if check_low else f"{i} < {size}"
        src.emit(f"if {cond}:")
        with src.indent():
            for statement in body(i):
                src.emit(statement)
        src.emit("else:")
        with src.indent():
            src.emit(f"_out_of_bounds({kind!r}, {name!r}, {size}, {i})")

    def _p_register_read(self, src, ex, params, path, prim):
        dst, width, signed = ex.lvalue(params[0])
        reg = self._named(params[1], "register_array", self.env.registers, path, prim)
        cells = self.env.ns.add("_reg", reg.cells, reg.name)
        index = self._index(ex, params[2])
        self._bounded(
            src,
            index,
            "register",
            reg.name,
            reg.size,
            lambda i: [store(dst, width, signed, Value(f"{cells}[{i}]", "data", bits=reg.bitwidth))],
        )

    def _p_register_write(self, src, ex, params, path, prim):
        reg = self._named(params[0], "register_array", self.env.registers, path, prim)
        cells = self.env.ns.add("_reg", reg.cells, reg.name)
        index = self._index(ex, params[1])
        v = self._int_value(ex, params[2])
        value = v.src if v.bits is not None and v.bits <= reg.bitwidth else f"({v.src}) & {reg.mask}"
        self._bounded(src, index, "register", reg.name, reg.size, lambda i: [f"{cells}[{i}] = {value}"])

    def _p_count(self, src, ex, params, path, prim):
        ctr = self._named(params[0], "counter_array", self.env.counters, path, prim)
        pk = self.env.ns.add("_ctrp", ctr.packets, ctr.name)
        by = self.env.ns.add("_ctrb", ctr.bytes, ctr.name)
        index = self._index(ex, params[1])
        ilen = self.env.layout.ILEN
        self._bounded(
            src, index, "counter", ctr.name, ctr.size, lambda i: [f"{pk}[{i}] += 1", f"{by}[{i}] += F[{ilen}]"]
        )

    def _p_execute_meter(self, src, ex, params, path, prim):
        """BMv2's execute_meter: an out-of-range index updates neither the meter nor the field."""
        meters = getattr(self.env, "meters", {})
        arr = self._named(params[0], "meter_array", meters, path, prim)
        if arr.table is not None:
            raise malformed(f"execute_meter on the direct meter '{arr.name}'", path, prim)
        mname = self.env.ns.add("_meter", arr, arr.name)
        index = self._index(ex, params[1])
        dst, width, signed = ex.lvalue(params[2])
        ilen, bits = self.env.layout.ILEN, arr.rate_count.bit_length()
        self._bounded(
            src,
            index,
            "meter",
            arr.name,
            arr.size,
            lambda i: [store(dst, width, signed, Value(f"{mname}.execute({i}, F[{ilen}])", "data", bits=bits))],
        )

    def _p_modify_field_with_hash_based_offset(self, src, ex, params, path, prim):
        dst, width, signed = ex.lvalue(params[0])
        base = self._int_value(ex, params[1])
        j = params[2]
        if not isinstance(j, dict) or j.get("type") != "calculation":
            raise malformed("expected a calculation", path, prim)
        calc = self.env.calculations.get(j.get("value"))
        if calc is None:
            raise malformed(f"unknown calculation {j.get('value')!r}", path, prim)
        size = self._int_value(ex, params[3])
        value = Value(f"_hash_offset({calc}(F, PAYLOAD[0]), {base.src}, {size.src})", "data")
        src.emit(store(dst, width, signed, value))

    def _p_modify_field_rng_uniform(self, src, ex, params, path, prim):
        dst, width, signed = ex.lvalue(params[0])
        lo, hi = self._int_value(ex, params[1]), self._int_value(ex, params[2])
        t = src.tmp("r")
        src.emit(f"{t} = _random({lo.src}, {hi.src})")
        src.emit(f"if {t} is not None:")
        with src.indent():
            src.emit(store(dst, width, signed, Value(t, "data")))

    def _p_log_msg(self, src, ex, params, path, prim):
        fmt = params[0]
        if not isinstance(fmt, dict) or fmt.get("type") != "string":
            raise malformed("log_msg format must be a string", path, prim)
        vec = params[1]
        if not isinstance(vec, dict) or vec.get("type") != "parameters_vector":
            raise malformed("log_msg arguments must be a parameters_vector", path, prim)
        items = vec.get("value")
        items = items if isinstance(items, list) else []  # p4c writes {} for no arguments
        text = fmt.get("value")
        if not isinstance(text, str):
            raise malformed("log_msg format must be a string", path, prim)
        form = parse_log_format(text, len(items), prim)
        if form.error is not None:
            src.emit(f"_log_msg_error({form.error!r})")
            return
        args = [self._int_value(ex, it).src for it in items]
        form_name = self.env.ns.const("_LOGF", form)
        src.emit(f"_log_msg({form_name}, ({', '.join(args)}{',' if args else ''}))")

    def _p_assert(self, src, ex, params, path, prim):
        v = ex.value(params[0])
        cond = v.src if v.kind == "bool" else f"({v.src}) != 0"
        src.emit(f"if not ({cond}):")
        with src.indent():
            src.emit(f"_assert_failed({prim.get('op')!r}, {where(path, prim)!r})")

    _p_assume = _p_assert

    def _p_resubmit(self, src, ex, params, path, prim):
        fl = self._int_value(ex, params[0])
        src.emit(f"F[{self.env.layout.RESUBMIT}] = ({fl.src}) & 0xFFFF")

    def _p_recirculate(self, src, ex, params, path, prim):
        fl = self._int_value(ex, params[0])
        src.emit(f"F[{self.env.layout.RECIRC}] = ({fl.src}) & 0xFFFF")

    # clone, digest and truncate only set the packet's registers, as simple_switch's primitives do;
    # switch.py acts on them after the ingress / egress pipeline (see emulator/engine/mirroring.py)
    def _p_clone_ingress_pkt_to_egress(self, src, ex, params, path, prim):
        session, fl = self._int_value(ex, params[0]), self._int_value(ex, params[1])
        L = self.env.layout
        src.emit(f"F[{L.CLONE}] = (({session.src}) & 0xFFFF) | 0x8000")  # the valid bit: session 0 is a session
        src.emit(f"F[{L.CLONE_FL}] = ({fl.src}) & 0xFFFF")

    _p_clone_egress_pkt_to_egress = _p_clone_ingress_pkt_to_egress

    def _p_generate_digest(self, src, ex, params, path, prim):
        self._int_value(ex, params[0])  # the receiver: simple_switch ignores it
        learn_id = self._int_value(ex, params[1])
        src.emit(f"F[{self.env.layout.LEARN}] = ({learn_id.src}) & 0xFFFF")

    def _p_truncate(self, src, ex, params, path, prim):
        length = self._int_value(ex, params[0])
        t, trunc = src.tmp("n"), self.env.layout.TRUNC
        src.emit(f"{t} = ({length.src}) & 0xFFFFFFFFFFFFFFFF")  # BMv2 reads it as a size_t
        src.emit(f"if F[{trunc}] < 0 or {t} < F[{trunc}]:")  # several truncates: the smallest wins
        with src.indent():
            src.emit(f"F[{trunc}] = {t}")

    def _p__jump(self, src, ex, params, path, prim):  # only reached through emit()'s checks
        raise malformed("unexpected _jump", path, prim)

    _p__jump_if_zero = _p__jump


_ARITY = {
    "assign": 2,
    "modify_field": 2,
    "add_to_field": 2,
    "subtract_from_field": 2,
    "add": 3,
    "subtract": 3,
    "bit_and": 3,
    "bit_or": 3,
    "bit_xor": 3,
    "shift_left": 3,
    "shift_right": 3,
    "no_op": 0,
    "exit": 0,
    "add_header": 1,
    "add_header_fast": 1,
    "remove_header": 1,
    "assign_header": 2,
    "assign_VL": 2,
    "assign_union": 2,
    "assign_union_stack": 2,
    "copy_header": 2,
    "assign_header_stack": 2,
    "push": 2,
    "pop": 2,
    "mark_to_drop": 1,
    "drop": 0,
    "register_read": 3,
    "register_write": 3,
    "count": 2,
    "execute_meter": 3,
    "modify_field_with_hash_based_offset": 4,
    "modify_field_rng_uniform": 3,
    "log_msg": 2,
    "assert": 1,
    "assume": 1,
    "resubmit": 1,
    "recirculate": 1,
    "clone_ingress_pkt_to_egress": 2,
    "clone_egress_pkt_to_egress": 2,
    "generate_digest": 2,
    "truncate": 1,
}
