"""Digests (`digest(receiver, data)`, BMv2's learn lists): what the data plane hands the controller.

The primitive only records the learn list id (simple_switch's generate_digest); after ingress the
switch takes the list's field values as one sample and queues it here. The P4Runtime server drains
the queue and batches samples into DigestList messages (emulator/p4rt/digests.py); without a
consumer the queue is bounded and the samples that do not fit are counted as dropped.
"""

from collections import deque
from typing import NamedTuple

from emulator.engine.jsonutil import malformed, unsupported

MAX_PENDING = 1 << 16


class LearnList(NamedTuple):
    id: int
    name: str  # the P4Info digest name (p4c names the list after the digest's type)
    slots: tuple  # slot of each field, in order
    fields: tuple  # (dotted field name, bitwidth) per element


def load_learn_lists(cfg, layout) -> dict:
    """id -> LearnList from the JSON's learn_lists (elements must be fields, as p4c writes them)."""
    lists = {}
    for i, ll in enumerate(cfg.get("learn_lists") or []):
        path = f"learn_lists[{i}] '{ll.get('name')}'"
        slots, fields = [], []
        for j, el in enumerate(ll.get("elements", [])):
            if el.get("type") != "field":
                raise unsupported(f"learn list element type '{el.get('type')}'", f"{path}.elements[{j}]", el)
            value = el.get("value")
            if not isinstance(value, list) or len(value) != 2:
                raise malformed("learn list field must be [header, field]", f"{path}.elements[{j}]", el)
            ref = layout.field(value[0], value[1], path)
            slots.append(ref.slot)
            fields.append((f"{value[0]}.{value[1]}", ref.width))
        lid = ll.get("id", i + 1)
        lists[lid] = LearnList(lid, ll.get("name"), tuple(slots), tuple(fields))
    return lists


class DigestQueue:
    """Samples (learn list name, values) waiting for the controller, oldest first."""

    def __init__(self, limit: int = MAX_PENDING):
        self.samples = deque()
        self.limit = limit
        self.dropped = 0
        self.listener = None  # called (without arguments) after a sample is queued

    def push(self, name, values) -> None:
        if len(self.samples) >= self.limit:
            self.dropped += 1
            return
        self.samples.append((name, values))
        if self.listener is not None:
            self.listener()

    def drain(self) -> list:
        out = list(self.samples)
        self.samples.clear()
        return out
