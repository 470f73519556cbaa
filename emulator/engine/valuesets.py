"""Parse value sets (P4 `value_set`): the members a select case matches, set by the control plane.

BMv2 (parser.cpp, ParseVSet and ParseSwitchCaseVSet): a member is a value of the set's compressed
bit width (the select key's fields concatenated without padding). Each select case that uses the set
keeps its own copy, padded like the select key (every key field on whole bytes) and ANDed with the
case's mask, so a lookup is one set membership test on the packet's key. Here those copies are the
`view`s, plain Python sets the generated parser tests with `in`, rebuilt on every change.
"""

from emulator.errors import EntryError


class ValueSet:
    def __init__(self, name: str, vid: int, bitwidth: int, max_size: int | None = None):
        self.name = name
        self.id = vid
        self.bitwidth = bitwidth
        self.max_size = max_size
        self._members = []  # compressed values, in insertion order (reads answer in this order)
        self._views = {}  # (key widths, mask) -> set of padded (and masked) members

    def view(self, widths, mask=None) -> set:
        """The set a select case with key field `widths` (and `mask`) tests; kept up to date."""
        key = (tuple(widths), mask)
        if key not in self._views:
            self._views[key] = set()
            self._refresh(key)
        return self._views[key]

    def _refresh(self, key) -> None:
        widths, mask = key
        view = self._views[key]
        view.clear()
        for v in self._members:
            padded = pad(v, widths)
            view.add(padded if mask is None else padded & mask)

    def _check(self, value) -> int:
        if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < 1 << self.bitwidth:
            raise EntryError(f"value set '{self.name}': {value!r} is not a {self.bitwidth}-bit value")
        return value

    # ------------------------------------------------------------------ control plane
    def add(self, value: int) -> None:
        value = self._check(value)
        if value in self._members:
            raise EntryError(f"value set '{self.name}' already holds {value:#x}", "ALREADY_EXISTS")
        if self.max_size is not None and len(self._members) >= self.max_size:
            raise EntryError(f"value set '{self.name}' is full ({self.max_size} members)", "RESOURCE_EXHAUSTED")
        self._members.append(value)
        for key in self._views:
            self._refresh(key)

    def delete(self, value: int) -> None:
        value = self._check(value)
        if value not in self._members:
            raise EntryError(f"value set '{self.name}' does not hold {value:#x}", "NOT_FOUND")
        self._members.remove(value)
        for key in self._views:
            self._refresh(key)

    def replace(self, values) -> None:
        """Set the members to `values` at once (P4Runtime's ValueSetEntry MODIFY); all or nothing."""
        values = [self._check(v) for v in values]
        if len(set(values)) != len(values):
            raise EntryError(f"value set '{self.name}': duplicate members")
        if self.max_size is not None and len(values) > self.max_size:
            raise EntryError(f"value set '{self.name}' holds at most {self.max_size} members", "RESOURCE_EXHAUSTED")
        self._members = values
        for key in self._views:
            self._refresh(key)

    def clear(self) -> None:
        self.replace([])

    def members(self) -> list:
        return list(self._members)


def pad(value: int, widths) -> int:
    """The compressed value laid out like a select key: each field right-aligned in whole bytes."""
    total = sum(widths)
    out = 0
    for w in widths:
        total -= w
        out = (out << ((w + 7) // 8 * 8)) | ((value >> total) & ((1 << w) - 1))
    return out
