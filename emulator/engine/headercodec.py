"""Header bytes <-> fields, through one precompiled `struct.Struct` per header type.

Fields are grouped into chunks that end on byte boundaries; a chunk is read as big-endian 1/2/4/8
byte pieces and its fields are cut out with shifts and masks. struct does the byte work in C, which
is about twice as fast as slicing the header into one big integer.
"""

import struct

_PIECES = ((8, "Q"), (4, "I"), (2, "H"), (1, "B"))


def _chunks(htype):
    """[(nbytes, [(field index, shift in chunk, width)])], covering the header in order."""
    chunks, current, bits = [], [], 0
    for k, (_, width, _) in enumerate(htype.fields):
        current.append((k, width))
        bits += width
        if bits % 8 == 0 and bits:
            out, shift = [], bits
            for idx, w in current:
                shift -= w
                out.append((idx, shift, w))
            chunks.append((bits // 8, out))
            current, bits = [], 0
    if current:  # trailing zero-width fields only (bits == 0), or a non byte-aligned header
        if bits:
            raise ValueError(f"header type {htype.name} is {htype.nbits} bits, not whole bytes")
        chunks.append((0, [(idx, 0, w) for idx, w in current]))
    return chunks


def _pieces(nbytes):
    out = []
    for size, code in _PIECES:
        while nbytes >= size:
            out.append((size, code))
            nbytes -= size
    return out


class HeaderCodec:
    def __init__(self, htype):
        self.htype = htype
        self.nbytes = htype.nbits // 8
        self.chunks = _chunks(htype)
        fmt = "!"
        for nbytes, _ in self.chunks:
            fmt += "".join(code for _, code in _pieces(nbytes))
        self.struct = struct.Struct(fmt)
        self.npieces = len(fmt) - 1

    def extract_lines(self, struct_name: str, slot, pos: str = "pos") -> list:
        """Statements setting the fields of the instance whose first slot is `slot` (an int, or
        the name of a variable) from D at `pos`; the caller checks the length first."""

        def at(k):
            return slot + k if isinstance(slot, int) else f"{slot} + {k}"

        names = [f"_u{i}" for i in range(self.npieces)]
        lines = []
        if names:
            target = ", ".join(names) + ("," if len(names) == 1 else "")
            lines.append(f"{target} = {struct_name}.unpack_from(D, {pos})")
        i = 0
        for nbytes, fields in self.chunks:
            pieces = _pieces(nbytes)
            if len(pieces) == 1:
                chunk = names[i]
            else:
                total, parts = nbytes * 8, []
                for (size, _), name in zip(pieces, names[i : i + len(pieces)]):
                    total -= size * 8
                    parts.append(f"({name} << {total})" if total else name)
                chunk = "(" + " | ".join(parts) + ")"
            i += len(pieces)
            for idx, shift, width in fields:
                signed = self.htype.fields[idx][2]
                if width == 0:
                    value = "0"
                elif len(fields) == 1:
                    value = chunk
                else:
                    value = f"({chunk} >> {shift})" if shift else chunk
                    if shift + width < nbytes * 8:
                        value = f"{value} & {(1 << width) - 1}"
                if signed and width:
                    half = 1 << (width - 1)
                    value = f"(({value}) ^ {half}) - {half}"
                lines.append(f"F[{at(idx)}] = {value}")
        lines.append(f"F[{at(self.htype.nfields)}] = 1")
        return lines

    def pack_expr(self, struct_name: str, base: int) -> str:
        """Expression producing the header's bytes from the fields of the instance at `base`."""
        args = []
        for nbytes, fields in self.chunks:
            parts = []
            for idx, shift, width in fields:
                if width == 0:
                    continue
                value = f"F[{base + idx}]"
                if self.htype.fields[idx][2]:
                    value = f"({value} & {(1 << width) - 1})"
                parts.append(f"({value} << {shift})" if shift else value)
            chunk = " | ".join(parts) if parts else "0"
            pieces = _pieces(nbytes)
            if len(pieces) == 1:
                args.append(chunk)
            else:
                chunk = f"({chunk})" if len(parts) > 1 else chunk
                total = nbytes * 8
                for n, (size, _) in enumerate(pieces):
                    total -= size * 8
                    piece = f"({chunk} >> {total})" if total else chunk
                    args.append(piece if n == 0 else f"{piece} & {(1 << (size * 8)) - 1}")
        return f"{struct_name}.pack({', '.join(args)})"
