"""Run-time helpers called by the generated code for the rarer operations.

Hot paths (field reads and writes, table lookups, register accesses) are inlined by the code
generators; what is here is either rare (header stacks, random, log_msg) or an error path.
"""

import logging
import os

from emulator.errors import PacketError

log = logging.getLogger("emulator.switch")
p4_log = logging.getLogger("emulator.log_msg")


class ParserError(Exception):
    """A parser exception: `code` is the error's value (None: PacketTooShort), `pos` the bytes
    parsed successfully before it (BMv2 removes exactly those from the packet)."""

    __slots__ = ("code", "pos")

    def __init__(self, code, pos):
        super().__init__(code, pos)
        self.code = code
        self.pos = pos


def _lookahead(D, pos, off, width):
    start = pos + (off >> 3)
    bit = off & 7
    nbytes = (bit + width + 7) >> 3
    if start + nbytes > len(D):
        raise ParserError(None, pos)
    v = int.from_bytes(D[start : start + nbytes], "big")
    return (v >> ((nbytes << 3) - bit - width)) & ((1 << width) - 1)


def _assign_header(F, dst, src, nfields, extra=0):
    """BMv2 assign_header: an invalid source invalidates the destination, else copies it (fields,
    validity and `extra` slots after it: a varbit width). True when the destination became valid."""
    end = nfields + 1 + extra
    if F[src + nfields]:
        F[dst : dst + end] = F[src : src + end]
        return True
    F[dst + nfields] = 0
    return False


def _clear_siblings(F, siblings, valid):
    """A union member at slot `valid` became valid: its union's other members become invalid."""
    for other in siblings.get(valid, ()):
        F[other] = 0


def _swap_unions(F, a, b):
    for (base_a, size), (base_b, _) in zip(a, b):
        _swap(F, base_a, base_b, size)


def _push_front(F, n, next_slot, num, swap):
    """push_front(num) over a stack of n elements as BMv2's StackP4_16 (stacks.cpp): the count grows and
    element i moves to i + num (swap(i, j) exchanges two elements). Returns how many front elements are new."""
    if num < 0:
        raise PacketError(f"push_front({num})")
    if num == 0:
        return 0
    F[next_slot] = min(n, F[next_slot] + num)
    for i in range(n - 1, num - 1, -1):
        swap(i, i - num)
    return min(n, num)


def _pop_front(F, n, next_slot, num, swap):
    """pop_front(num) over a stack of n elements: the count shrinks and element i + num moves to i. Returns
    the index from which the back elements are stale (n: none)."""
    if num < 0:
        raise PacketError(f"pop_front({num})")
    if num == 0:
        return n
    F[next_slot] -= min(F[next_slot], num)
    if num >= n:
        return 0
    for i in range(n - num):
        swap(i, i + num)
    return n - num


def _union_stack_push(F, spans, next_slot, num):
    """push_front(num) on a header union stack (StackP4_16<HeaderUnion>): no invalidation."""
    _push_front(F, len(spans), next_slot, num, lambda i, j: _swap_unions(F, spans[i], spans[j]))


def _union_stack_pop(F, spans, next_slot, num):
    """pop_front(num) on a header union stack (StackP4_16<HeaderUnion>): no invalidation."""
    _pop_front(F, len(spans), next_slot, num, lambda i, j: _swap_unions(F, spans[i], spans[j]))


def _swap(F, a, b, size):
    F[a : a + size], F[b : b + size] = F[b : b + size], F[a : a + size]


def _stack_push(F, bases, size, next_slot, num):
    """push_front(num) on a header stack: the new front headers are invalid."""
    for i in range(_push_front(F, len(bases), next_slot, num, lambda i, j: _swap(F, bases[i], bases[j], size))):
        F[bases[i] + size - 1] = 0


def _stack_pop(F, bases, size, next_slot, num):
    """pop_front(num) on a header stack: the emptied back headers are invalid."""
    for k in range(
        _pop_front(F, len(bases), next_slot, num, lambda i, j: _swap(F, bases[i], bases[j], size)), len(bases)
    ):
        F[bases[k] + size - 1] = 0


RNG_DEFAULT_SEED = 0x853C49E6748FEA9B
MASK64 = (1 << 64) - 1


class RuntimeCounters:
    """Non-fatal run-time events the generated code reports (shared with the switch's stats), and
    the state of the generator behind P4's `random` (xorshift64*, the native backend's too, so both
    backends draw the same numbers from the same seed)."""

    def __init__(self):
        self.out_of_bounds = 0
        self.rng = int.from_bytes(os.urandom(8), "big") or RNG_DEFAULT_SEED

    def next_random(self) -> int:
        x = self.rng
        x ^= x >> 12
        x ^= (x << 25) & MASK64
        x ^= x >> 27
        self.rng = x
        return (x * 0x2545F4914F6CDD1D) & MASK64


def make_helpers(counters: RuntimeCounters) -> dict:
    def _out_of_bounds(kind, name, size, index):
        # BMv2 (debug builds) logs an error and skips the access; so do we
        counters.out_of_bounds += 1
        log.error("%s '%s' of size %d accessed at out-of-bounds index %d: access skipped", kind, name, size, index)

    def _hash_offset(h, base, size):
        if size == 0:
            size = 1  # BMv2: "hash max given as 0, but treating it as 1"
        return h % size + base

    def _random(lo, hi):
        if lo > hi:
            return None  # BMv2 leaves the destination unchanged
        span = hi - lo + 1
        x = counters.next_random()
        return lo + (x if span > MASK64 else x % span)

    def _log_msg(form, args):
        p4_log.info("%s", form.render(args))  # form: a logmsg.LogFormat, BMv2's reading of the format

    def _log_msg_error(message):
        # simple_switch logs this and exits; the engine logs it and goes on
        p4_log.error("%s", message)

    def _assert_failed(kind, where):
        raise PacketError(f"{kind} failed at {where}")

    return {
        "_lookahead": _lookahead,
        "_assign_header": _assign_header,
        "_clear_siblings": _clear_siblings,
        "_union_stack_push": _union_stack_push,
        "_union_stack_pop": _union_stack_pop,
        "_stack_push": _stack_push,
        "_stack_pop": _stack_pop,
        "_out_of_bounds": _out_of_bounds,
        "_hash_offset": _hash_offset,
        "_random": _random,
        "_log_msg": _log_msg,
        "_log_msg_error": _log_msg_error,
        "_assert_failed": _assert_failed,
        "ParserError": ParserError,
    }
