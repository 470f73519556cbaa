"""simple_switch's checksum units and the deparser -> `verify_checksums` and `deparse`.

The checksums are verified after the parser and updated before deparsing; the deparser runs its
extern calls (p4c writes them as primitives), then writes the valid headers in order, then the payload
(BMv2's Deparser::deparse).
"""

from typing import NamedTuple

from emulator.engine.jsonutil import unsupported
from emulator.engine.layout import FieldRef
from emulator.native.cexpr import CExpr, c_int


class ChecksumUnit(NamedTuple):
    name: str
    calc: str  # the calculation's C function
    ref: FieldRef  # the checksum field
    valid: int  # the slot of its header's validity
    cond: str | None  # the C condition (update_checksum_with_payload's `if`), None: always
    verify: bool
    update: bool
    source: dict  # its JSON, for its P4 line


def checksum_units(gen) -> list:
    units = []
    for i, c in enumerate(gen.cfg.get("checksums", [])):
        path = f"checksums[{i}]"
        target = c.get("target")
        ref = gen.layout.field(target[0], target[1], path)
        valid = gen.layout.header(target[0], path).valid
        cond = None
        if c.get("if_cond") is not None:
            cond = CExpr(gen.layout, gen.consts, path + ".if_cond").boolean(c["if_cond"]).src
        calc = gen.calc_names[c.get("calculation")]
        verify, update = c.get("verify", True), c.get("update", True)
        units.append(ChecksumUnit(c.get("name"), calc, ref, valid, cond, verify, update, c))
    return units


def emit_verify_checksums(gen, src, units) -> None:
    src.emit("/* verify_checksum units: 1 when one of them fails */")
    src.emit("static int verify_checksums(pkt_t *pk, pass_ctx_t *cx) {")
    with src.indent():
        src.emit("V *F = pk->F; (void)F; (void)cx; int bad = 0;")
        for u in (u for u in units if u.verify):
            test = f"F[{u.valid}]" + (f" && ({u.cond})" if u.cond else "")
            with src.at(u.source):
                src.emit(f"if ({test} && (V){u.calc}(pk, cx) != F[{u.ref.slot}]) bad = 1; /* checksum {u.name} */")
        src.emit("return bad;")
    src.emit("}")
    src.emit()


def emit_deparser(gen, src, units) -> None:
    deparser = next(d for d in gen.cfg.get("deparsers", []) if d.get("name") == "deparser")
    src.emit("/* The deparser: update_checksum units, its primitives, then the valid headers in order, then")
    src.emit(" * the payload. Returns the frame's length, or -1 when it does not fit in `cap` bytes. */")
    src.emit("static int64_t deparse(pkt_t *pk, pass_ctx_t *cx, uint8_t *out, uint32_t cap) {")
    with src.indent():
        src.emit("V *F = pk->F; (void)F; uint32_t n = 0;")
        for u in (u for u in units if u.update):
            stmt = f"F[{u.ref.slot}] = (V)({u.calc}(pk, cx) & {c_int(u.ref.mask)}); /* update checksum {u.name} */"
            with src.at(u.source):
                src.emit(f"if ({u.cond}) {stmt}" if u.cond else stmt)
        primitives = deparser.get("primitives") or []
        if primitives:  # the extern calls of the deparser, before emitting (BMv2's Deparser::deparse)
            path = f"deparsers '{deparser.get('name')}'"
            if any(p.get("op") in ("_jump", "_jump_if_zero", "exit") for p in primitives):
                raise unsupported("control flow (a jump or exit) among the deparser's primitives", path)
            src.emit("sw_t *sw = cx->sw; (void)sw;")
            gen.primitives.emit(src, primitives, path, None)
        for name in deparser.get("order", []):
            _emit_header(src, gen.layout.header(name))
        src.emit("if (cap - n < cx->payload_len) return -1;")
        src.emit("memcpy(out + n, cx->payload, cx->payload_len);")
        src.emit("return (int64_t)n + cx->payload_len;")
    src.emit("}")
    src.emit()


def _emit_header(src, h) -> None:
    """A valid header's fields at `out + n`, packed as BMv2 packs them."""
    nbytes = h.htype.nbits // 8
    src.emit(f"if (F[{h.valid}]) {{ /* emit {h.name} */")
    with src.indent():
        src.emit(f"if (cap - n < {nbytes}) return -1;")
        bit = 0
        if not all(w % 8 == 0 for _, w, _ in h.htype.fields):
            src.emit(f"memset(out + n, 0, {nbytes});")
        for k, (_, width, signed) in enumerate(h.htype.fields):
            if width == 0:
                continue
            value = f"(uint64_t)F[{h.base + k}]"
            if signed:
                value = f"(uint64_t)(F[{h.base + k}] & {c_int((1 << width) - 1)})"
            if bit % 8 == 0 and width % 8 == 0:
                src.emit(f"wr_be(out + n + {bit // 8}, {width // 8}, {value});")
            else:
                src.emit(f"put_bits(out + n, {bit}, {width}, {value});")
            bit += width
        src.emit(f"n += {nbytes};")
    src.emit("}")
