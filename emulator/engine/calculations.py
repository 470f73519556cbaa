"""Named calculations (checksum and hash inputs) -> generated functions `calc(F, payload) -> int`.

BMv2 (BufBuilder in calculations.cpp) concatenates the listed fields bit by bit, skipping fields of
invalid headers and invalid whole headers, pads the last byte with zeros, and appends the payload
(the bytes after the parsed headers) when asked. The buffer is built here as one integer.
"""

from emulator.engine.codegen import Source
from emulator.engine.hashes import ALGORITHMS, CUSTOM_CRC_WIDTHS, CustomCrc, RandomHash
from emulator.engine.jsonutil import hexstr, malformed, unsupported


def hash_function(calc: dict, path: str, draw_random):
    """The algorithm of a calculation: a shared function, or an object of its own (custom CRCs
    have per-calculation parameters; `random` draws from the switch's generator)."""
    algo = calc.get("algo")
    if algo in CUSTOM_CRC_WIDTHS:
        return CustomCrc(CUSTOM_CRC_WIDTHS[algo])
    if algo == "random":
        return RandomHash(draw_random)
    fn = ALGORITHMS.get(algo)
    if fn is None:
        raise unsupported(f"hash algorithm '{algo}' of calculation '{calc.get('name')}'", path, calc)
    return fn


def compile_calculation(calc: dict, index: int, layout, ns, src: Source, fn) -> str:
    """Emit `def <name>(F, payload)` for calculation `calc` hashed with `fn`; returns its name."""
    path = f"calculations[{index}]"
    algo_name = ns.add("_algo", fn)
    name = f"calc_{index}"
    src.emit(f"def {name}(F, payload):")
    with src.indent():
        src.emit("acc = 0")
        src.emit("nbits = 0")
        pieces = []  # consecutive fields of one header share one validity test
        with_payload = False
        for j, item in enumerate(calc.get("input", [])):
            ipath = f"{path}.input[{j}]"
            t = item.get("type")
            if with_payload:
                raise malformed("'payload' must be the last input", ipath)
            if t == "field":
                v = item.get("value")
                if not isinstance(v, list) or len(v) != 2:
                    raise malformed("field reference must be [header, field]", ipath)
                ref = layout.field(v[0], v[1], ipath)
                h = layout.header(v[0], ipath)
                valid = None if h.metadata else h.valid
                value = f"(F[{ref.slot}] & {ref.mask})" if ref.signed else f"F[{ref.slot}]"
                varbit = h.htype.varbit is not None and ref.slot == h.base + h.htype.varbit
                pieces.append((valid, value, f"F[{h.vlen}]" if varbit else ref.width))
            elif t == "header":
                h = layout.header(item.get("value"), ipath)
                valid = None if h.metadata else h.valid
                for k, (_, width, signed) in enumerate(h.htype.fields):
                    value = f"(F[{h.base + k}] & {(1 << width) - 1})" if signed else f"F[{h.base + k}]"
                    pieces.append((valid, value, f"F[{h.vlen}]" if k == h.htype.varbit else width))
            elif t == "hexstr":
                width = item.get("bitwidth")
                if not isinstance(width, int) or width <= 0:
                    raise malformed("a hexstr input needs a positive 'bitwidth'", ipath)
                pieces.append((None, str(hexstr(item.get("value"), ipath) & ((1 << width) - 1)), width))
            elif t == "payload":
                with_payload = True
            else:
                raise unsupported(f"calculation input type '{t}'", ipath, item)
        _emit_pieces(src, pieces)
        src.emit("pad = -nbits % 8")
        src.emit("nbytes = (nbits + pad) >> 3")
        src.emit("acc <<= pad")
        if with_payload:
            src.emit("if payload:")
            with src.indent():
                src.emit("acc = (acc << (len(payload) << 3)) | int.from_bytes(payload, 'big')")
                src.emit("nbytes += len(payload)")
        src.emit(f"return {algo_name}(acc, nbytes)")
    src.emit()
    return name


def _emit_pieces(src, pieces):
    """acc = acc << w | value for each field, grouped by the header whose validity guards them.
    A varbit field's width is a slot (`F[n]`, its current width): it is appended on its own."""
    i = 0
    while i < len(pieces):
        valid = pieces[i][0]
        group = []
        while i < len(pieces) and pieces[i][0] == valid:
            group.append(pieces[i])
            i += 1
        if any(isinstance(w, str) for _, _, w in group):
            stmt = []
            for _, value, width in group:
                stmt.append(f"acc = (acc << {width}) | ({value} & ((1 << {width}) - 1))")
                stmt.append(f"nbits += {width}")
        else:
            stmt = _fixed_group(group)
        if valid is None:
            for line in stmt:
                src.emit(line)
        else:
            src.emit(f"if F[{valid}]:")
            with src.indent():
                for line in stmt:
                    src.emit(line)


def _fixed_group(group) -> list:
    total = sum(w for _, _, w in group)
    parts, shift = [], total
    for _, value, width in group:
        shift -= width
        parts.append(f"({value} << {shift})" if shift else value)
    return [f"acc = (acc << {total}) | {' | '.join(parts)}", f"nbits += {total}"]
