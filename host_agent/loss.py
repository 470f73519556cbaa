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


def lost_before(op: Operation, j: int, dupthresh: int, early_retransmit: bool) -> np.ndarray:
    """The result of request j is in: count it as evidence against every unanswered request whose latest
    transmission came before j's first; those that now have enough, oldest transmission first."""
    flying, lo = op.in_flight()
    bound = op.first_seq[j]
    hit = np.flatnonzero(flying & (op.seq[lo : lo + len(flying)] < bound)) + lo
    if not hit.size:
        return hit
    hit = hit[np.argsort(op.seq[hit], kind="stable")]  # oldest transmission first
    e = op.evidence[hit] = op.evidence[hit] + 1
    lost = e >= dupthresh
    if early_retransmit and op.first_transmissions == op.n:  # nothing left to send
        # early: every request first sent after i's transmission is answered (e counts each once)
        lost |= e >= op.first_transmissions - op.firsts_before[hit]
    return hit[lost]


def quiet(op: Operation, i: np.ndarray) -> bool:
    """Whether accepting results for requests i (in this order) one by one would find no evidence of loss:
    every request still in flight after each of them was last sent after its first send."""
    bounds = op.first_seq[i]
    seqs = op.seq[i]
    # later results of the batch are still in flight when an earlier one is taken in
    if len(i) > 1 and (np.minimum.accumulate(seqs[::-1])[::-1][1:] < bounds[:-1]).any():
        return False
    flying, lo = op.in_flight()
    flying = flying.copy()
    flying[i - lo] = False
    seq = op.seq[lo : lo + len(flying)][flying]
    return not seq.size or int(seq.min()) >= int(bounds.max())


def starved(op: Operation) -> bool:
    """Whether no request in flight can be shown lost by a result still to come: each was last sent after
    the newest first transmission still in flight (the tail of an operation, and retransmissions once
    every first transmission is answered). Then only timers find their loss."""
    flying, lo = op.in_flight()
    if not flying.any():
        return False
    window = slice(lo, lo + len(flying))
    return int(op.first_seq[window][flying].max()) <= int(op.seq[window][flying].min())
