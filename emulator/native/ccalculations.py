"""Calculations (hashes over fields, constants and the payload) -> one C function each.

A calculation packs its inputs as BMv2 does (each field's bits in order, a header's only when it is
valid) into a buffer and hashes it with runtime.h's algorithms. An action selector's hash is one
more calculation, after the JSON's own.
"""

from emulator.engine.jsonutil import hexstr, unsupported
from emulator.native.cexpr import c_int

MAX_WIDTH = 64
ALGORITHMS = {"csum16", "crc32", "crc16", "identity", "xor16", "crc16_custom", "crc32_custom", "random"}


def with_selector_calculations(cfg: dict) -> tuple:
    """(cfg with each selector's hash appended to its calculations, {profile name: C function name})."""
    extra, names = [], {}
    base = len(cfg.get("calculations", []) or [])
    for pipe in cfg.get("pipelines", []):
        for ap in pipe.get("action_profiles", []) or []:
            selector = ap.get("selector")
            if selector is None:
                continue
            if selector.get("algo") in ("crc16_custom", "crc32_custom"):  # parameters per calculation
                raise unsupported(
                    f"the {selector.get('algo')} selector of '{ap.get('name')}' (native backend)", ap.get("name")
                )
            names[ap.get("name")] = f"calc_{base + len(extra)}"
            hash_input = selector.get("input", [])
            extra.append({"name": f"{ap.get('name')} selector", "algo": selector.get("algo"), "input": hash_input})
    if extra:
        cfg = dict(cfg, calculations=list(cfg.get("calculations", []) or []) + extra)
    return cfg, names


def emit_calculations(gen, src) -> None:
    for i, calc in enumerate(gen.cfg.get("calculations", [])):
        path = f"calculations[{i}]"
        algo = calc.get("algo")
        if algo not in ALGORITHMS:
            raise unsupported(
                f"hash algorithm '{algo}' (native backend: custom CRCs and the random hash run on Python)", path, calc
            )
        pieces, with_payload = _inputs(gen.layout, calc, path)
        nbits = sum(w for _, _, w in pieces)
        src.emit(f"/* calculation {calc.get('name')}: {algo} */")
        src.emit(f"static uint64_t calc_{i}(pkt_t *pk, pass_ctx_t *cx) {{")
        with src.indent():
            src.emit("V *F = pk->F; (void)F; (void)cx;")
            extra = " + cx->payload_len" if with_payload else ""
            src.emit(f"uint8_t buf[{(nbits + 7) // 8 + 1}{extra}];")
            src.emit(f"memset(buf, 0, {(nbits + 7) // 8 + 1});")
            src.emit("unsigned bit = 0;")
            for valid, value, width in pieces:
                put = f"put_bits(buf, bit, {width}, (uint64_t)({value})); bit += {width};"
                src.emit(f"if (F[{valid}]) {{ {put} }}" if valid is not None else put)
            src.emit("uint32_t n = (bit + 7) >> 3;")
            if with_payload:
                src.emit("if (cx->payload_len) {")
                src.emit("    memcpy(buf + n, cx->payload, cx->payload_len);")
                src.emit("    n += cx->payload_len;")
                src.emit("}")
            if algo == "random":
                src.emit("(void)n; return rng_next(&cx->sw->rng); /* the random hash: a draw, whatever the input */")
            elif algo in ("crc16_custom", "crc32_custom"):
                k = gen.custom_crcs.index(calc.get("name"))
                src.emit(f"return h_crc_custom(&cx->sw->crcs[{k}], buf, n);")
            else:
                src.emit(f"return h_{algo}(buf, n);")
        src.emit("}")
        src.emit()


def _inputs(layout, calc, path) -> tuple:
    """([(valid slot or None, C value, bit width)], whether the payload follows) of a calculation."""
    pieces, with_payload = [], False
    for item in calc.get("input", []):
        t = item.get("type")
        if t == "field":
            h = layout.header(item["value"][0], path)
            ref = layout.field(item["value"][0], item["value"][1], path)
            pieces.append((None if h.metadata else h.valid, f"F[{ref.slot}]", ref.width))
        elif t == "header":
            h = layout.header(item.get("value"), path)
            for k, (_, width, _) in enumerate(h.htype.fields):
                pieces.append((None if h.metadata else h.valid, f"F[{h.base + k}]", width))
        elif t == "hexstr":
            width = item.get("bitwidth")
            value = hexstr(item.get("value"), path) & ((1 << width) - 1)
            if width > MAX_WIDTH:
                raise unsupported(f"a {width}-bit constant in a calculation (native backend)", path, calc)
            pieces.append((None, c_int(value), width))
        elif t == "payload":
            with_payload = True
    return pieces, with_payload
