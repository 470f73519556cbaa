/* Per-cell bookkeeping: which use of the cell this is, who has contributed, how many are missing.
 * A cell is 2 * (slot_base + slot) + (round & 1): every slot has a shadow cell, so the result of round r
 * stays readable for retransmissions while round r + 1 accumulates in the other cell.
 * A use is identified by (epoch, op, round); which newer rounds may start one is README.md's "Round window".
 * A RELEASE completes a use with the k < n contributions it has (README.md, "Partial aggregation"); on a
 * leaf whose use is complete it goes on to the spine, which releases its own use ("Two-level aggregation").
 * A QUERY changes nothing: the Result control answers it with what the cell holds ("Queries").
 * A pool job's sums are not at its bookkeeping cell: its use claims a cell of the shared pool when it starts
 * (its first request), keeps it in cell_lease, and frees it as soon as every worker has the use's result:
 * when every worker has acked it (ACK), when the slot's next round completes with all n (each worker sent
 * that round only once it had this one's result), when the bookkeeping cell's next use starts, or when the
 * job leaves (pool_live). A use whose cell is taken falls back, as a whole ("Shared pool"). */
#ifndef THC_SLOT_STATE_P4
#define THC_SLOT_STATE_P4

control SlotState(inout headers_t hdr, inout metadata_t meta) {
    register<bit<52>>(THC_BOOK_CELLS) slot_tag;        /* epoch << 36 | op << 32 | round of the cell's current use */
    register<bit<32>>(THC_BOOK_CELLS) slot_bitmap;     /* workers that contributed to it */
    register<bit<8>>(THC_BOOK_CELLS)  slot_remaining;  /* contributions still missing; 0: complete (or released) */
    register<bit<8>>(THC_BOOK_CELLS)  slot_count;      /* contributions summed: n, or k < n after a RELEASE */
    register<bit<16>>(THC_BOOK_CELLS) cell_lease;      /* pool jobs: LEASE_CLAIMED | cell, LEASE_FALLBACK or LEASE_FREED */
    register<bit<32>>(THC_BOOK_CELLS) slot_acks;       /* pool jobs: workers that acked the complete use's result */
    register<bit<32>>(THC_CELLS)      pool_owner;      /* per cell of sums: epoch ++ bookkeeping cell of the use holding it, 0 free */
    /* Pool cells claimed and freed, per epoch (an epoch is one run of one job): claimed - freed are the
     * cells the run holds, which the controller reads (BMv2 reads counters, not registers, over P4Runtime). */
    counter(POOL_EPOCHS, CounterType.packets) pool_claims;
    counter(POOL_EPOCHS, CounterType.packets) pool_frees;

    action refuse(bit<32> event) {
        meta.drop = 1;
        meta.event = event;
    }

    /* The job takes its cells of sums from the pool: cells pool_base .. pool_base + pool_cells - 1 (the
     * controller keeps them clear of the static jobs' slots), in a ring from ring_offset on. */
    action use_pool(bit<16> pool_base, bit<16> pool_cells, bit<16> ring_offset) {
        meta.pool = 1;
        meta.pool_base = pool_base;
        meta.pool_cells = pool_cells;
        meta.ring_offset = ring_offset;
    }

    table pool {
        key = { hdr.thc.job_id: exact; }
        actions = { use_pool; NoAction; }
        size = 64;
        default_action = NoAction();
    }

    /* Where a new use goes: position q = round * n_slots + slot of the job's ring (its request number when
     * the window is n_slots; with a smaller window, slots >= window are never used), ring_offset + q
     * around the pool, so the job's own uses in flight (fewer than 3 * n_slots positions apart) never meet
     * in a pool of 4 * n_slots cells; and who holds that cell now. */
    action probe_pool() {
        bit<32> q = hdr.thc.round * (bit<32>)meta.n_slots + (bit<32>)hdr.thc.slot;
        meta.candidate = (bit<32>)meta.pool_base +
                         ((q + (bit<32>)meta.ring_offset) & ((bit<32>)meta.pool_cells - 1));
        pool_owner.read(meta.owner, meta.candidate);
        meta.owner_epoch = meta.owner[31:16];
    }

    /* On a fallback server (a parameter server holding a pool job for the uses that fell back at the
     * switch): a slot sees only some of the job's rounds, so any later round may start the next use of a
     * complete one (README.md, "Shared pool"). */
    action any_later_round() {
        meta.sparse = 1;
    }

    table fallback_rounds {
        key = { hdr.thc.job_id: exact; }
        actions = { any_later_round; NoAction; }
        size = 64;
        default_action = NoAction();
    }

    action owner_live() {
        meta.owner_live = 1;
    }

    /* The epochs of the pool jobs installed here: a cell held by any other epoch is free (its job left). */
    table pool_live {
        key = { meta.owner_epoch: exact; }
        actions = { owner_live; NoAction; }
        size = 64;
        default_action = NoAction();
    }

    /* The whole read-modify-write of the cell's registers is this one action: BMv2 holds an action's
     * registers locked while it runs, so no other packet sees the cell half-updated. */
    action use_cell() {
        /* a PARTIAL from a leaf carries the count of the leaf's contributions; anything else is one */
        meta.weight = (hdr.thc.kind == KIND_PARTIAL) ? hdr.thc.count : 8w1;
        meta.cell = ((bit<32>)(meta.slot_base + hdr.thc.slot) << 1) | (bit<32>)hdr.thc.round[0:0];
        slot_tag.read(meta.tag, meta.cell);
        slot_bitmap.read(meta.bitmap, meta.cell);
        slot_remaining.read(meta.remaining, meta.cell);
        slot_count.read(meta.count, meta.cell);
        cell_lease.read(meta.lease, meta.cell);
        bit<32> stored = meta.tag[31:0];
        bit<32> mine = meta.epoch ++ meta.cell[15:0];
        bit<32> held;
        if (hdr.thc.kind == KIND_ACK) {
            /* a worker has the result of this complete pool use: once every worker of the job has said so,
             * nothing can ask for it again, so its cell goes back now instead of when the slot is next used */
            meta.ack = 1;
            if (meta.pool == 1 && meta.tag[51:36] == meta.epoch && hdr.thc.round == stored &&
                meta.tag[35:32] == hdr.thc.op && meta.remaining == 0 && meta.lease[14:14] == 1) {
                slot_acks.read(meta.acks, meta.cell);
                meta.acks = meta.acks | meta.my_bit;
                slot_acks.write(meta.cell, meta.acks);
                if (meta.acks == meta.worker_mask) {
                    pool_owner.read(held, (bit<32>)meta.lease[11:0]);
                    if (held == mine) {
                        pool_owner.write((bit<32>)meta.lease[11:0], 0);
                        pool_frees.count((bit<32>)meta.epoch);
                    }
                    cell_lease.write(meta.cell, LEASE_FREED);
                }
            }
        } else if (hdr.thc.kind == KIND_QUERY) {
            /* a QUERY reads the cell's use as a retransmission of the request would find it, and writes
             * nothing: a use not started here has no contribution in and lacks all n */
            meta.query = 1;
            if (meta.tag[51:36] != meta.epoch || hdr.thc.round > stored) {
                meta.bitmap = 0;
                meta.remaining = meta.n_workers;
            } else if (hdr.thc.round < stored) {
                refuse(EV_DROP_STALE_ROUND);
            } else if (meta.tag[35:32] != hdr.thc.op) {
                refuse(EV_DROP_OP_MISMATCH);
            } else if (meta.pool == 1 && meta.lease[15:15] == 1) {
                meta.fallback = 1;  /* the use is aggregated elsewhere: the querying worker asks there */
            } else if (meta.pool == 1 && meta.lease[14:14] == 0) {
                refuse(EV_DROP_STALE_ROUND);  /* over: every worker had its result, its cell went back */
            }
        } else if (hdr.thc.kind == KIND_RELEASE) {
            /* a RELEASE acts only on the cell's current, incomplete use: it completes it as it is */
            if (meta.tag[51:36] != meta.epoch || hdr.thc.round > stored) {
                refuse(EV_RELEASE_IGNORED);  /* the use has not started here */
            } else if (hdr.thc.round < stored) {
                refuse(EV_DROP_STALE_ROUND);
            } else if (meta.tag[35:32] != hdr.thc.op) {
                refuse(EV_DROP_OP_MISMATCH);
            } else if (meta.remaining != 0) {
                meta.release = 1;
                meta.dup = 1;
                meta.remaining = 0;
                slot_remaining.write(meta.cell, 0);
            } else if (meta.leaf == 1) {
                meta.release_up = 1;  /* complete here, its partial went up: the spine's use may wait on a silent leaf */
            } else {
                refuse(EV_RELEASE_IGNORED);  /* already complete: its result went out */
            }
        } else if (meta.tag[51:36] != meta.epoch) {
            /* first use in this epoch: a run starts at request 0, so only rounds 0 and 1 */
            if (hdr.thc.round < 2 || meta.sparse == 1) {
                meta.first = 1;
            } else {
                refuse(EV_DROP_FAR_ROUND);
            }
        } else if (hdr.thc.round < stored) {
            refuse(EV_DROP_STALE_ROUND);
        } else if (hdr.thc.round == stored) {
            if (meta.tag[35:32] != hdr.thc.op) {
                refuse(EV_DROP_OP_MISMATCH);
            } else if (meta.pool == 1 && meta.lease[15:15] == 1) {
                meta.fallback = 1;  /* the use fell back at its first request: so does every request of it */
            } else if (meta.pool == 1 && meta.lease[14:14] == 0) {
                refuse(EV_DROP_STALE_ROUND);  /* over: every worker had its result, its cell went back */
            } else if ((meta.bitmap & meta.my_bit) != 0) {
                meta.dup = 1;
            } else if (meta.remaining == 0) {
                /* the use was released without this worker: never added, answered with the result */
                meta.dup = 1;
                meta.late = 1;
            } else {
                meta.remaining = meta.remaining - 1;
                meta.count = meta.count + meta.weight;
                slot_bitmap.write(meta.cell, meta.bitmap | meta.my_bit);
                slot_remaining.write(meta.cell, meta.remaining);
                slot_count.write(meta.cell, meta.count);
                if (meta.pool == 1 && meta.remaining == 0) {
                    /* all n sent this round, each only once it had the slot's previous round: that use (the
                     * other shadow cell) is delivered everywhere, and its pool cell goes back now */
                    bit<32> other = meta.cell ^ 1;
                    bit<52> other_tag;
                    bit<16> other_lease;
                    slot_tag.read(other_tag, other);
                    cell_lease.read(other_lease, other);
                    if (other_tag[51:36] == meta.epoch && other_tag[31:0] == hdr.thc.round - 1 &&
                        other_lease[14:14] == 1) {
                        pool_owner.read(held, (bit<32>)other_lease[11:0]);
                        if (held == meta.epoch ++ other[15:0]) {
                            pool_owner.write((bit<32>)other_lease[11:0], 0);
                            pool_frees.count((bit<32>)meta.epoch);
                        }
                        cell_lease.write(other, LEASE_FREED);
                    }
                }
            }
        } else if ((hdr.thc.round - stored == 2 || meta.sparse == 1) && meta.remaining == 0) {
            /* the next use: a worker sends round r only once round r - 2 is complete (or released) */
            meta.first = 1;
        } else {
            refuse(EV_DROP_FAR_ROUND);
        }
        if (meta.first == 1 && meta.pool == 1) {
            /* The cell's previous use (two rounds ago) has been delivered to every worker: free its pool
             * cell, if that use still holds it. Then claim this use's cell, unless another live use holds
             * it (or the pool has no cell): then the whole use falls back, and its lease says so. */
            if (meta.lease[14:14] == 1) {
                pool_owner.read(held, (bit<32>)meta.lease[11:0]);
                if (held == mine) {
                    pool_owner.write((bit<32>)meta.lease[11:0], 0);
                    pool_frees.count((bit<32>)meta.epoch);
                }
            }
            meta.lease = LEASE_FALLBACK;
            if (meta.pool_cells != 0) {
                pool_owner.read(held, meta.candidate);
                if (held == 0 || (held == meta.owner && meta.owner_live == 0)) {
                    pool_owner.write(meta.candidate, mine);
                    pool_claims.count((bit<32>)meta.epoch);
                    meta.lease = LEASE_CLAIMED | (bit<16>)meta.candidate;
                }
            }
            cell_lease.write(meta.cell, meta.lease);
            slot_acks.write(meta.cell, 0);
            if (meta.lease == LEASE_FALLBACK) {
                meta.fallback = 1;
                meta.taken = 1;
            }
        }
        if (meta.fallback == 1 && meta.first == 1) {
            /* a use that fell back is complete here: nothing of it is in the switch, and the next use of
             * the bookkeeping cell may start (the workers aggregated it elsewhere) */
            slot_tag.write(meta.cell, meta.epoch ++ hdr.thc.op ++ hdr.thc.round);
            slot_bitmap.write(meta.cell, 0);
            slot_remaining.write(meta.cell, 0);
            slot_count.write(meta.cell, 0);
            meta.first = 0;
        } else if (meta.first == 1) {
            /* the first packet of a use writes, so no reset is ever needed */
            meta.remaining = meta.n_workers - 1;
            meta.count = meta.weight;
            slot_tag.write(meta.cell, meta.epoch ++ hdr.thc.op ++ hdr.thc.round);
            slot_bitmap.write(meta.cell, meta.my_bit);
            slot_remaining.write(meta.cell, meta.remaining);
            slot_count.write(meta.cell, meta.weight);
        }
        /* where the sums are: the bookkeeping cell itself, or the use's pool cell */
        meta.acc_cell = (meta.pool == 1) ? (bit<32>)meta.lease[11:0] : meta.cell;
    }

    apply {
        pool.apply();
        fallback_rounds.apply();
        if (meta.pool == 1 && meta.pool_cells != 0) {
            probe_pool();
            pool_live.apply();
        }
        use_cell();
    }
}

#endif
