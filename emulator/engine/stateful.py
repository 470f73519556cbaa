"""Register and counter arrays: plain Python lists the generated code indexes directly."""

from emulator.errors import EntryError


class RegisterArray:
    def __init__(self, name: str, size: int, bitwidth: int):
        self.name = name
        self.size = size
        self.bitwidth = bitwidth
        self.mask = (1 << bitwidth) - 1
        self.cells = [0] * size  # mutated in place: generated code holds a reference

    def _index(self, index) -> int:
        if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < self.size:
            raise EntryError(f"register '{self.name}': index {index!r} outside 0..{self.size - 1}")
        return index

    def read(self, index) -> int:
        return self.cells[self._index(index)]

    def write(self, index, value) -> None:
        i = self._index(index)
        if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= self.mask:
            raise EntryError(f"register '{self.name}': value {value!r} does not fit in {self.bitwidth} bits")
        self.cells[i] = value

    def reset(self) -> None:
        self.cells[:] = [0] * self.size


class CounterArray:
    """An indirect counter array; packets and bytes are two lists (bytes = ingress frame length)."""

    def __init__(self, name: str, size: int):
        self.name = name
        self.size = size
        self.packets = [0] * size
        self.bytes = [0] * size

    def _index(self, index) -> int:
        if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < self.size:
            raise EntryError(f"counter '{self.name}': index {index!r} outside 0..{self.size - 1}")
        return index

    def read(self, index) -> tuple:
        i = self._index(index)
        return self.packets[i], self.bytes[i]

    def write(self, index, packets, nbytes) -> None:
        i = self._index(index)
        for what, v in (("packets", packets), ("bytes", nbytes)):
            if not isinstance(v, int) or isinstance(v, bool) or v < 0:
                raise EntryError(f"counter '{self.name}': {what} must be a non-negative integer, got {v!r}")
        self.packets[i] = packets
        self.bytes[i] = nbytes

    def reset(self) -> None:
        self.packets[:] = [0] * self.size
        self.bytes[:] = [0] * self.size
