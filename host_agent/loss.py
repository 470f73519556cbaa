"""Which unanswered requests the results of later ones show lost: fast and early retransmission.

Results come back in about the order the requests were sent (the switch completes slots in the order the
last worker's requests arrive), so a result for a request first sent after request i's latest
transmission, while i is unanswered, is evidence that i (or its result) was lost. After `dupthresh` such
results i is sent again at once, as TCP does after three duplicate acknowledgements. Early retransmission
(RFC 5827): once the operation has nothing left to send, its last requests have fewer than `dupthresh`
requests after them; then i is sent again when every request first sent after it is answered and it is
not. Evidence counts only against a transmission made before the answered request was first sent, so a
result triggered by an old transmission never condemns a newer one, and a request is fast-retransmitted at
most once per transmission (its new transmission starts with no evidence).
"""

from __future__ import annotations

import numpy as np

from host_agent.operation import Operation


def lost_before(
    ops: list[Operation], bound: int, dupthresh: int, early_retransmit: bool, firsts: int
) -> list[tuple[Operation, np.ndarray]]:
    """A result for a request first sent as transmission number `bound` is in: count it as evidence against
    every unanswered request (of the operations in flight `ops`) whose latest transmission came before;
    those that now have enough, per operation, oldest transmission first. `firsts`: first transmissions
    so far (for early retransmission, every later one answered)."""
    nothing_left = all(op.first_transmissions == op.n for op in ops)
    out = []
    for op in ops:
        flying, lo = op.in_flight()
        hit = np.flatnonzero(flying & (op.seq[lo : lo + len(flying)] < bound)) + lo
        if not hit.size:
            continue
        hit = hit[np.argsort(op.seq[hit], kind="stable")]  # oldest transmission first
        e = op.evidence[hit] = op.evidence[hit] + 1
        lost = e >= dupthresh
        if early_retransmit and nothing_left:
            # early: every request first sent after i's transmission is answered (e counts each once)
            lost |= e >= firsts - op.firsts_before[hit]
        if lost.any():
            out.append((op, hit[lost]))
    return out


def quiet(ops: list[Operation], op: Operation, i: np.ndarray) -> bool:
    """Whether accepting results for requests i of `op` (in this order) one by one would find no evidence
    of loss: every request still in flight after each of them was last sent after its first send."""
    bounds = op.first_seq[i]
    seqs = op.seq[i]
    # later results of the batch are still in flight when an earlier one is taken in
    if len(i) > 1 and (np.minimum.accumulate(seqs[::-1])[::-1][1:] < bounds[:-1]).any():
        return False
    bound = int(bounds.max())
    for other in ops:
        flying, lo = other.in_flight()
        if other is op:
            flying = flying.copy()
            inside = i[(i >= lo) & (i < lo + len(flying))]  # (a released slot's result may come unsent)
            flying[inside - lo] = False
        seq = other.seq[lo : lo + len(flying)][flying]
        if seq.size and int(seq.min()) < bound:
            return False
    return True


def starved(ops: list[Operation]) -> bool:
    """Whether no request in flight (in any of `ops`) can be shown lost by a result still to come: each was
    last sent after the newest first transmission still in flight (the tail of the flow, and
    retransmissions once every first transmission is answered). Then only timers find their loss."""
    newest_first, oldest_last = -1, None
    for op in ops:
        flying, lo = op.in_flight()
        if flying.any():
            window = slice(lo, lo + len(flying))
            newest_first = max(newest_first, int(op.first_seq[window][flying].max()))
            last = int(op.seq[window][flying].min())
            oldest_last = last if oldest_last is None else min(oldest_last, last)
    return oldest_last is not None and newest_first <= oldest_last
