/* simple_switch's packet semantics around a generated program, and the library's exported API.
 *
 * Included at the end of every generated file, after the program's parse/verify_checksums/ingress/
 * egress/deparse functions and its SLOT_* / MASK_* / L_* macros. It mirrors emulator/switch.py
 * (SoftwareSwitch.process, _ingress_pass, _egress_pass) line for line, so both backends agree:
 * parser errors still run ingress, resubmit and recirculate carry their field lists (at most
 * MAX_PASSES passes in a chain and MAX_COPIES copies per received frame: switch_api.py's bounds,
 * defined by ctarget.py), multicast copies get instance_type 5 and their egress_rid, an exception
 * (RAISE) drops the packet or the copy and is counted; clones (ingress: the received frame parsed again;
 * egress: the headers egress wrote) go to their mirror session's group and/or port, metadata reset but
 * their field list's; `truncate` cuts the frame that leaves.
 */
#define RNG_DEFAULT_SEED 0x853C49E6748FEA9Bull /* runtime.py */
#define PKT_INSTANCE_TYPE_NORMAL 0
#define PKT_INSTANCE_TYPE_INGRESS_CLONE 1 /* mirroring.py */
#define PKT_INSTANCE_TYPE_EGRESS_CLONE 2
#define PKT_INSTANCE_TYPE_RECIRC 4
#define PKT_INSTANCE_TYPE_REPLICATION 5
#define PKT_INSTANCE_TYPE_RESUBMIT 6
#define SPEC_DROP (DROP_PORT & MASK_EGRESS_SPEC)
#define SPEC_RESET ((DROP_PORT + 1) & MASK_EGRESS_SPEC)

#define SET(P, NAME, VALUE) do { if (SLOT_##NAME >= 0) (P)->F[SLOT_##NAME] = ((V)(VALUE)) & MASK_##NAME; } while (0)

static void drop(sw_t *sw, int reason) {
    sw->stats[ST_DROPPED]++;
    sw->stats[reason]++;
}

static void exception_drop(sw_t *sw) {
    sw->stats[ST_EXCEPTIONS]++;
    drop(sw, ST_DROPPED_EXCEPTION);
}

/* One more packet made from the received frame (a clone copy, a resubmit, a recirculation): 0 past
 * MAX_COPIES, the copy dropped and counted (noticed the first time). switch.py _copy_allowed. */
static int copy_allowed(sw_t *sw) {
    if (++sw->copies <= MAX_COPIES) return 1;
    drop(sw, ST_DROPPED_COPY_LIMIT);
    if (!sw->copy_limit_noticed) {
        sw->copy_limit_noticed = 1;
        if (sw->notice) sw->notice(NOTICE_COPY_LIMIT);
    }
    return 0;
}

static void ingress_pass(sw_t *sw, pkt_t *pk, const uint8_t *frame, uint32_t len, sw_out_t *out, int passes);

/* A new packet state as BMv2 makes it for resubmit/recirculate: metadata reset, the field list's
 * fields copied, instance_type and packet_length set. */
static void fresh_with_field_list(pkt_t *g, const pkt_t *f, uint32_t fl_id, int instance_type, V length) {
    int n;
    const int *slots = field_list(fl_id, &n);
    pkt_template(g);
    for (int i = 0; i < n; i++) g->F[slots[i]] = f->F[slots[i]];
    SET(g, INSTANCE_TYPE, instance_type);
    SET(g, PACKET_LENGTH, length);
    g->F[L_PKTLEN] = length;
}

/* What BMv2's RegisterAccess::clear_all and a new Packet object reset in a copy. */
static void clear_registers(pkt_t *r) {
    r->F[L_RESUBMIT] = r->F[L_RECIRC] = r->F[L_CLONE] = r->F[L_CLONE_FL] = r->F[L_LEARN] = 0;
    r->F[L_TRUNC] = -1;
}

/* The mirror session pk's clone names, or NULL (counted); pk's clone registers are cleared. */
static const mirror_session_t *take_session(sw_t *sw, pkt_t *pk) {
    uint32_t id = (uint32_t)pk->F[L_CLONE] & MIRROR_SESSION_MASK;
    pk->F[L_CLONE] = pk->F[L_CLONE_FL] = 0;
    if (!sw->mirror[id].set) {
        sw->stats[ST_CLONES_UNCONFIGURED]++;
        return NULL;
    }
    return &sw->mirror[id];
}

static void copy_field_list(pkt_t *g, const pkt_t *f, uint32_t fl_id) {
    int n;
    const int *slots = field_list(fl_id, &n);
    for (int i = 0; i < n; i++) g->F[slots[i]] = f->F[slots[i]];
}

static void egress_pass(sw_t *sw, pkt_t *pk, uint32_t port, const uint8_t *payload, uint32_t payload_len,
                        sw_out_t *out, int passes);

/* A clone to its session's multicast group (one copy per replica, egress_rid set), then to its port;
 * the port copy keeps the last replica's egress_rid, as in simple_switch. */
static void send_clone(sw_t *sw, pkt_t *g, const mirror_session_t *s, const uint8_t *payload, uint32_t plen,
                       sw_out_t *out, int passes) {
    if (s->mgid >= 0) {
        mc_group_t *grp = s->mgid < MC_GROUPS ? sw->mc[s->mgid] : NULL;
        for (uint32_t i = 0; grp && i < grp->n; i++) {
            if (!copy_allowed(sw)) return;
            sw->stats[ST_CLONES]++;
            SET(g, EGRESS_RID, grp->rids[i]);
            pkt_t r;
            memcpy(&r, g, sizeof r);
            egress_pass(sw, &r, grp->ports[i], payload, plen, out, passes);
        }
    }
    if (s->port >= 0 && copy_allowed(sw)) {
        sw->stats[ST_CLONES]++;
        egress_pass(sw, g, (uint32_t)s->port, payload, plen, out, passes);
    }
}

/* The end of egress for a packet egress did not drop: recirculated, or sent (cut to `truncate`). */
static void finish_egress(sw_t *sw, pkt_t *pk, pass_ctx_t *cx, uint32_t port, sw_out_t *out, int passes) {
    uint32_t flen = 0, slot = out->count, off = out->used;
    uint8_t *dst = out->buf + off;
    uint32_t cap = slot < SW_MAX_OUT ? SW_OUT_BUF - off : 0;
    if (pk->F[L_RECIRC]) {  /* deparse into a buffer of its own: the next pass appends to `out` */
        uint8_t *tmp = malloc(SW_OUT_BUF);
        if (!tmp) { drop(sw, ST_DROPPED_OUTPUT_FULL); return; }
        int64_t r = deparse(pk, cx, tmp, SW_OUT_BUF);
        flen = r < 0 ? 0 : (uint32_t)r;
        sw->stats[ST_RECIRCULATIONS]++;
        if (r < 0) {
            drop(sw, ST_DROPPED_OUTPUT_FULL);
        } else if (passes >= MAX_PASSES) {
            drop(sw, ST_DROPPED_PASS_LIMIT);
        } else if (copy_allowed(sw)) {
            pkt_t g;
            fresh_with_field_list(&g, pk, (uint32_t)pk->F[L_RECIRC], PKT_INSTANCE_TYPE_RECIRC, flen);
            g.F[L_ILEN] = flen;
            ingress_pass(sw, &g, tmp, flen, out, passes + 1);
        }
        free(tmp);
        return;
    }
    int64_t r = cap ? deparse(pk, cx, dst, cap) : -1;
    if (r < 0) {
        drop(sw, ST_DROPPED_OUTPUT_FULL);
        return;
    }
    flen = (uint32_t)r;
    if (pk->F[L_TRUNC] >= 0 && (V)flen > pk->F[L_TRUNC]) flen = (uint32_t)pk->F[L_TRUNC];
    out->port[slot] = port;
    out->off[slot] = off;
    out->len[slot] = flen;
    out->count = slot + 1;
    out->used = off + flen;
}

static void egress_pass(sw_t *sw, pkt_t *pk, uint32_t port, const uint8_t *payload, uint32_t payload_len,
                        sw_out_t *out, int passes) {
    pass_ctx_t cx;
    cx.sw = sw;
    cx.payload = payload;
    cx.payload_len = payload_len;
    if (SLOT_PRIORITY >= 0 && pk->F[SLOT_PRIORITY] >= 1) {  /* one queue per port */
        drop(sw, ST_DROPPED_PRIORITY);
        return;
    }
    if (setjmp(cx.fail)) {
        exception_drop(sw);
        return;
    }
    if (SLOT_EGRESS_TS >= 0 || QUEUEING) {
        uint64_t now = SW_NOW(sw);
        SET(pk, EGRESS_TS, now);
        if (QUEUEING) SET(pk, ENQ_TIMESTAMP, now);
    }
    SET(pk, EGRESS_PORT, port);
    pk->F[SLOT_EGRESS_SPEC] = SPEC_RESET;
    SET(pk, PACKET_LENGTH, pk->F[L_PKTLEN]);
    pk->F[L_EXIT] = 0;
    egress(sw, pk, &cx);
    /* an egress clone: the headers as egress left them, metadata reset but the field list's */
    const mirror_session_t *session = NULL;
    pkt_t clone;
    if (pk->F[L_CLONE]) {
        uint32_t fl = (uint32_t)pk->F[L_CLONE_FL];
        session = take_session(sw, pk);
        if (session) {
            memcpy(&clone, pk, sizeof clone);
            reset_metadata(&clone);
            copy_field_list(&clone, pk, fl);
            SET(&clone, INSTANCE_TYPE, PKT_INSTANCE_TYPE_EGRESS_CLONE);
            clear_registers(&clone);
            clone.F[L_EXIT] = 0;
        }
    }
    if (pk->F[SLOT_EGRESS_SPEC] == SPEC_DROP) {
        drop(sw, ST_DROPPED_EGRESS);
    } else {
        finish_egress(sw, pk, &cx, port, out, passes);
    }
    if (session) {
        if (passes >= MAX_PASSES) {
            drop(sw, ST_DROPPED_PASS_LIMIT);
            return;
        }
        send_clone(sw, &clone, session, payload, payload_len, out, passes + 1);
    }
}

/* A digest sample: the learn list's fields at the end of ingress, queued for sw_digests(). */
static void take_digest(sw_t *sw, const pkt_t *pk, uint32_t id) {
    int n;
    const int *slots = learn_list(id, &n);
    if (!slots) return;  /* a learn list id the program does not define: ignored */
    digest_queue_t *q = &sw->digests;
    sw->stats[ST_DIGESTS]++;
    if (!q->ids || q->count == DIGEST_QUEUE) {
        sw->stats[ST_DIGESTS_DROPPED]++;
        return;
    }
    uint32_t at = (q->head + q->count) % DIGEST_QUEUE;
    q->ids[at] = id;
    for (int i = 0; i < n; i++) q->vals[(size_t)at * q->width + i] = (uint64_t)pk->F[slots[i]];
    q->count++;
}

/* simple_switch's ingress clone: the received frame parsed again (ingress_port kept), all metadata
 * reset except the field list's, instance_type INGRESS_CLONE, the ingress length. */
static void clone_at_ingress(sw_t *sw, pkt_t *pk, const uint8_t *frame, uint32_t len, V ingress_length,
                             sw_out_t *out, int passes) {
    uint32_t fl = (uint32_t)pk->F[L_CLONE_FL];
    const mirror_session_t *session = take_session(sw, pk);
    if (!session) return;
    pkt_t g;
    pass_ctx_t cx;
    cx.sw = sw;
    uint32_t pos = 0;
    pkt_template(&g);
    g.F[SLOT_INGRESS_PORT] = pk->F[SLOT_INGRESS_PORT];
    if (setjmp(cx.fail)) {  /* the clone is lost, the original goes on */
        exception_drop(sw);
        return;
    }
    parse(sw, &g, &cx, frame, len, &pos);
    reset_metadata(&g);
    copy_field_list(&g, pk, fl);
    SET(&g, INSTANCE_TYPE, PKT_INSTANCE_TYPE_INGRESS_CLONE);
    g.F[L_PKTLEN] = ingress_length;
    g.F[L_ILEN] = pk->F[L_ILEN];
    send_clone(sw, &g, session, frame + pos, len - pos, out, passes);
}

static void ingress_pass(sw_t *sw, pkt_t *pk, const uint8_t *frame, uint32_t len, sw_out_t *out, int passes) {
    pass_ctx_t cx;
    cx.sw = sw;
    V ingress_length = pk->F[L_PKTLEN];
    uint32_t pos = 0;
    if (setjmp(cx.fail)) {
        exception_drop(sw);
        return;
    }
    int err = parse(sw, pk, &cx, frame, len, &pos);
    if (err < 0) {
        if (ERR_NO_ERROR) SET(pk, PARSER_ERROR, ERR_NO_ERROR);
    } else {
        SET(pk, PARSER_ERROR, err);
        sw->stats[ST_PARSER_ERRORS]++;
    }
    cx.payload = frame + pos;
    cx.payload_len = len - pos;
    if (HAS_VERIFY) {
        int bad = verify_checksums(pk, &cx);
        SET(pk, CHECKSUM_ERROR, bad);
        if (bad) sw->stats[ST_CHECKSUM_ERRORS]++;
    }
    pk->F[L_EXIT] = 0;
    ingress(sw, pk, &cx);
    pk->F[L_EXIT] = 0;
    if (pk->F[L_CLONE]) clone_at_ingress(sw, pk, frame, len, ingress_length, out, passes);
    if (pk->F[L_LEARN]) {
        take_digest(sw, pk, (uint32_t)pk->F[L_LEARN]);
        pk->F[L_LEARN] = 0;
    }

    if (pk->F[L_RESUBMIT]) {
        sw->stats[ST_RESUBMITS]++;
        if (passes >= MAX_PASSES) {
            drop(sw, ST_DROPPED_PASS_LIMIT);
            return;
        }
        if (!copy_allowed(sw)) return;
        pkt_t g;
        fresh_with_field_list(&g, pk, (uint32_t)pk->F[L_RESUBMIT], PKT_INSTANCE_TYPE_RESUBMIT, ingress_length);
        g.F[L_ILEN] = pk->F[L_ILEN];
        ingress_pass(sw, &g, frame, len, out, passes + 1);
        return;
    }
    V mgid = SLOT_MCAST_GRP >= 0 ? pk->F[SLOT_MCAST_GRP] : 0;
    if (mgid) {
        mc_group_t *grp = (mgid > 0 && mgid < MC_GROUPS) ? sw->mc[(int)mgid] : NULL;
        if (!grp || !grp->n) {
            drop(sw, ST_DROPPED_NO_GROUP);
            return;
        }
        SET(pk, INSTANCE_TYPE, PKT_INSTANCE_TYPE_REPLICATION);
        for (uint32_t i = 0; i < grp->n; i++) {
            sw->stats[ST_MULTICAST_REPLICAS]++;
            pkt_t r;
            memcpy(&r, pk, sizeof r);
            SET(&r, EGRESS_RID, grp->rids[i]);
            clear_registers(&r);
            egress_pass(sw, &r, grp->ports[i], cx.payload, cx.payload_len, out, passes);
        }
        return;
    }
    V spec = pk->F[SLOT_EGRESS_SPEC];
    if (spec == SPEC_DROP) {
        drop(sw, ST_DROPPED_INGRESS);
        return;
    }
    SET(pk, INSTANCE_TYPE, PKT_INSTANCE_TYPE_NORMAL);
    egress_pass(sw, pk, (uint32_t)spec, cx.payload, cx.payload_len, out, passes);
}

/* ================================================================== exported API (sw_api.h) */
sw_t *sw_create(void) {
    sw_t *sw = calloc(1, sizeof(sw_t));
    if (!sw) return NULL;
    pthread_mutex_init(&sw->mu, NULL);
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    sw->start_ns = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
    sw->rng = (RNG_DEFAULT_SEED ^ sw->start_ns) ? (RNG_DEFAULT_SEED ^ sw->start_ns) : RNG_DEFAULT_SEED;
    tables_init(sw);
    return sw;
}

static void tbl_free(table_t *t) {
    free(t->ids); free(t->actions); free(t->sk); free(t->pk); free(t->by);
    free(t->km); free(t->params); free(t->order); free(t->hslots); free(t->direct);
}

void sw_destroy(sw_t *sw) {
    if (!sw) return;
    for (int i = 0; i < NTABLES; i++) tbl_free(&sw->tables[i]);
    for (int b = 0; b < NBANKS; b++) free(sw->banks[b]);
    for (int i = 0; i < NCTRS; i++) { free(sw->ctr_pk[i]); free(sw->ctr_by[i]); }
    free(sw->digests.ids);
    free(sw->digests.vals);
    profiles_free(sw);
    for (int g = 0; g < MC_GROUPS; g++) {
        if (sw->mc[g]) { free(sw->mc[g]->ports); free(sw->mc[g]->rids); free(sw->mc[g]); }
    }
    for (int v = 0; v < NVSETS; v++) free(sw->vsets[v].v);
    pthread_mutex_destroy(&sw->mu);
    free(sw);
}

/* Parameters of custom CRC `k` (cgen's order of crc16_custom/crc32_custom calculations). */
int sw_crc_set(sw_t *sw, uint32_t k, uint32_t width, uint64_t poly, uint64_t init, uint64_t xor_out,
               int reflect_data, int reflect_remainder) {
    if (k >= NCRCS || (width != 16 && width != 32)) return -1;
    sw_lock(sw);
    crc_custom_config(&sw->crcs[k], width, poly, init, xor_out, reflect_data, reflect_remainder);
    sw_unlock(sw);
    return 0;
}

/* The members of value set view `view`: n values given as (low, high) 64-bit halves. */
int sw_vset_set(sw_t *sw, uint32_t view, uint32_t n, const uint64_t *lohi) {
    if (view >= NVSETS) return -1;
    UV *v = NULL;
    if (n) {
        v = malloc(n * sizeof(UV));
        if (!v) return -1;
        for (uint32_t i = 0; i < n; i++) v[i] = ((UV)lohi[2 * i + 1] << 64) | lohi[2 * i];
    }
    sw_lock(sw);
    UV *old = sw->vsets[view].v;
    sw->vsets[view].v = v;
    sw->vsets[view].n = n;
    sw_unlock(sw);
    free(old);
    return 0;
}

void sw_lock(sw_t *sw) { pthread_mutex_lock(&sw->mu); }
void sw_unlock(sw_t *sw) { pthread_mutex_unlock(&sw->mu); }

int sw_process(sw_t *sw, uint32_t port, const uint8_t *frame, uint32_t len, sw_out_t *out) {
    uint32_t before = out->count;
    pkt_t pk;
    sw->stats[ST_PACKETS_IN]++;
    pkt_template(&pk);
    SET(&pk, INGRESS_PORT, port);
    SET(&pk, PACKET_LENGTH, len);
    if (SLOT_INGRESS_TS >= 0) SET(&pk, INGRESS_TS, SW_NOW(sw));
    pk.F[L_PKTLEN] = len;
    pk.F[L_ILEN] = len;
    sw->copies = 0;
    ingress_pass(sw, &pk, frame, len, out, 1);
    sw->stats[ST_PACKETS_OUT] += out->count - before;
    return (int)(out->count - before);
}

int sw_process_locked(sw_t *sw, uint32_t port, const uint8_t *frame, uint32_t len, sw_out_t *out) {
    sw_lock(sw);
    int n = sw_process(sw, port, frame, len, out);
    sw_unlock(sw);
    return n;
}

/* `n` frames at buf[off[i]..off[i]+len[i]); with keep == 0 the output is counted and discarded
 * after each frame (benchmarks). Returns the frames that left. */
uint64_t sw_process_batch(sw_t *sw, uint32_t n, const uint32_t *ports, const uint8_t *buf, const uint32_t *off,
                          const uint32_t *len, sw_out_t *out, int keep) {
    uint64_t total = 0;
    sw_lock(sw);
    for (uint32_t i = 0; i < n; i++) {
        if (!keep) out->count = out->used = 0;
        total += (uint64_t)sw_process(sw, ports[i], buf + off[i], len[i], out);
    }
    sw_unlock(sw);
    return total;
}

uint32_t sw_nstats(void) { return NSTATS; }

void sw_stats(sw_t *sw, uint64_t *dst) {
    sw_lock(sw);
    memcpy(dst, sw->stats, sizeof sw->stats);
    sw_unlock(sw);
}

void sw_set_log_msg(sw_t *sw, log_msg_fn fn) {
    sw_lock(sw);
    sw->log_msg = fn;
    sw_unlock(sw);
}

void sw_set_notice(sw_t *sw, notice_fn fn) {
    sw_lock(sw);
    sw->notice = fn;
    sw_unlock(sw);
}

void sw_seed(sw_t *sw, uint64_t seed) {
    sw_lock(sw);
    sw->rng = seed ? seed : RNG_DEFAULT_SEED;
    sw_unlock(sw);
}

/* ------------------------------------------------------------------ tables */
static int tbl_reserve(table_t *t) {
    if (t->n < t->cap) return 0;
    uint32_t cap = t->cap ? t->cap * 2 : 16;
    size_t nk = t->nkeys ? t->nkeys : 1, np = t->nparams ? t->nparams : 1;
#define GROW(field, count) do { \
        void *p = realloc(t->field, (size_t)cap * (count) * sizeof(*t->field)); \
        if (!p) return -1; \
        t->field = p; \
    } while (0)
    GROW(ids, 1); GROW(actions, 1); GROW(sk, 2); GROW(pk, 1); GROW(by, 1);
    GROW(km, nk * 3); GROW(params, np); GROW(order, 1);
#undef GROW
    t->cap = cap;
    return 0;
}

static int tbl_hash_rebuild(table_t *t) {
    if (t->direct_bits) {
        if (!t->direct && !(t->direct = calloc((size_t)1 << t->direct_bits, sizeof(int32_t)))) return -1;
        memset(t->direct, 0, sizeof(int32_t) << t->direct_bits);
        for (uint32_t e = 0; e < t->n; e++) t->direct[t->km[(size_t)e * 3]] = (int32_t)e + 1;
        return 0;
    }
    uint32_t hcap = 16;
    while (hcap < t->n * 2 + 2) hcap <<= 1;
    int32_t *slots = calloc(hcap, sizeof(int32_t));
    if (!slots) return -1;
    free(t->hslots);
    t->hslots = slots;
    t->hcap = hcap;
    uint64_t key[SW_MAX_KEYS];
    for (uint32_t e = 0; e < t->n; e++) {
        for (uint32_t k = 0; k < t->nkeys; k++) key[k] = t->km[((size_t)e * t->nkeys + k) * 3];
        uint32_t i = (uint32_t)tbl_hash(key, t->nkeys) & (hcap - 1);
        while (slots[i]) i = (i + 1) & (hcap - 1);
        slots[i] = (int32_t)e + 1;
    }
    return 0;
}

static int tbl_order_cmp(const void *a, const void *b, void *arg) {
    const table_t *t = arg;
    const int64_t *x = &t->sk[2 * *(const int32_t *)a], *y = &t->sk[2 * *(const int32_t *)b];
    if (x[0] != y[0]) return x[0] < y[0] ? -1 : 1;
    return x[1] < y[1] ? -1 : (x[1] > y[1]);
}

static int tbl_reindex(table_t *t) {
    if (t->exact) return tbl_hash_rebuild(t);
    for (uint32_t i = 0; i < t->n; i++) t->order[i] = (int32_t)i;
    qsort_r(t->order, t->n, sizeof(int32_t), tbl_order_cmp, t);
    return 0;
}

static int32_t tbl_find(const table_t *t, int32_t id) {
    for (uint32_t e = 0; e < t->n; e++) if (t->ids[e] == id) return (int32_t)e;
    return -1;
}

/* Entry `id` (the Python engine's handle): km holds lo, hi, mask per key field; the sort key
 * orders scan tables (first match wins). Returns 0, or -1 (out of memory / bad table). */
int sw_tbl_add(sw_t *sw, uint32_t ti, int32_t id, int32_t action, const uint64_t *km, int64_t sk0, int64_t sk1,
               const uint64_t *params) {
    if (ti >= NTABLES) return -1;
    table_t *t = &sw->tables[ti];
    int rc = -1;
    sw_lock(sw);
    if (tbl_reserve(t) == 0) {
        uint32_t e = t->n++;
        t->ids[e] = id;
        t->actions[e] = action;
        t->sk[2 * e] = sk0;
        t->sk[2 * e + 1] = sk1;
        t->pk[e] = t->by[e] = 0;
        memcpy(&t->km[(size_t)e * t->nkeys * 3], km, sizeof(uint64_t) * 3 * t->nkeys);
        memcpy(&t->params[(size_t)e * t->nparams], params, sizeof(uint64_t) * t->nparams);
        rc = tbl_reindex(t);
    }
    sw_unlock(sw);
    return rc;
}

int sw_tbl_modify(sw_t *sw, uint32_t ti, int32_t id, int32_t action, const uint64_t *params) {
    if (ti >= NTABLES) return -1;
    table_t *t = &sw->tables[ti];
    sw_lock(sw);
    int32_t e = tbl_find(t, id);
    if (e >= 0) {
        t->actions[e] = action;
        memcpy(&t->params[(size_t)e * t->nparams], params, sizeof(uint64_t) * t->nparams);
    }
    sw_unlock(sw);
    return e >= 0 ? 0 : -1;
}

int sw_tbl_delete(sw_t *sw, uint32_t ti, int32_t id) {
    if (ti >= NTABLES) return -1;
    table_t *t = &sw->tables[ti];
    int rc = -1;
    sw_lock(sw);
    int32_t e = tbl_find(t, id);
    if (e >= 0) {
        uint32_t last = --t->n;
        if ((uint32_t)e != last) {  /* move the last entry into the hole */
            t->ids[e] = t->ids[last];
            t->actions[e] = t->actions[last];
            t->sk[2 * e] = t->sk[2 * last];
            t->sk[2 * e + 1] = t->sk[2 * last + 1];
            t->pk[e] = t->pk[last];
            t->by[e] = t->by[last];
            memcpy(&t->km[(size_t)e * t->nkeys * 3], &t->km[(size_t)last * t->nkeys * 3],
                   sizeof(uint64_t) * 3 * t->nkeys);
            memcpy(&t->params[(size_t)e * t->nparams], &t->params[(size_t)last * t->nparams],
                   sizeof(uint64_t) * t->nparams);
        }
        rc = tbl_reindex(t);
    }
    sw_unlock(sw);
    return rc;
}

void sw_tbl_clear(sw_t *sw, uint32_t ti) {
    if (ti >= NTABLES) return;
    sw_lock(sw);
    sw->tables[ti].n = 0;
    tbl_reindex(&sw->tables[ti]);
    sw_unlock(sw);
}

void sw_tbl_set_default(sw_t *sw, uint32_t ti, int32_t action, const uint64_t *params) {
    if (ti >= NTABLES) return;
    table_t *t = &sw->tables[ti];
    sw_lock(sw);
    t->def_action = action;
    memcpy(t->def_params, params, sizeof(uint64_t) * t->nparams);
    sw_unlock(sw);
}

/* Direct counter of entry `id`: read into v[0..1] (packets, bytes), or write them. */
int sw_tbl_counter(sw_t *sw, uint32_t ti, int32_t id, uint64_t *v, int write) {
    if (ti >= NTABLES) return -1;
    table_t *t = &sw->tables[ti];
    sw_lock(sw);
    int32_t e = tbl_find(t, id);
    if (e >= 0) {
        if (write) { t->pk[e] = v[0]; t->by[e] = v[1]; }
        else { v[0] = t->pk[e]; v[1] = t->by[e]; }
    }
    sw_unlock(sw);
    return e >= 0 ? 0 : -1;
}

void sw_tbl_counter_reset(sw_t *sw, uint32_t ti) {
    if (ti >= NTABLES) return;
    table_t *t = &sw->tables[ti];
    sw_lock(sw);
    for (uint32_t e = 0; e < t->n; e++) t->pk[e] = t->by[e] = 0;
    sw_unlock(sw);
}

/* ------------------------------------------------------------------ registers and counters */
/* Cell idx of register r, in its bank (ctarget: register banks). */
static uint64_t *reg_cell(sw_t *sw, uint32_t r, uint32_t idx) {
    return &sw->banks[reg_bank[r]][(size_t)idx * bank_width[reg_bank[r]] + reg_column[r]];
}

int sw_reg(sw_t *sw, uint32_t r, uint32_t idx, uint64_t *v, int write) {
    if (r >= NREGS || idx >= reg_size[r]) return -1;
    sw_lock(sw);
    if (write) *reg_cell(sw, r, idx) = *v;
    else *v = *reg_cell(sw, r, idx);
    sw_unlock(sw);
    return 0;
}

/* All cells of register r at once (n = its size): read into v, or write from it. */
int sw_reg_all(sw_t *sw, uint32_t r, uint64_t *v, int write) {
    if (r >= NREGS) return -1;
    sw_lock(sw);
    for (uint32_t i = 0; i < reg_size[r]; i++) {
        if (write) *reg_cell(sw, r, i) = v[i];
        else v[i] = *reg_cell(sw, r, i);
    }
    sw_unlock(sw);
    return 0;
}

int sw_ctr(sw_t *sw, uint32_t c, uint32_t idx, uint64_t *v, int write) {
    if (c >= NCTRS || idx >= ctr_size[c]) return -1;
    sw_lock(sw);
    if (write) { sw->ctr_pk[c][idx] = v[0]; sw->ctr_by[c][idx] = v[1]; }
    else { v[0] = sw->ctr_pk[c][idx]; v[1] = sw->ctr_by[c][idx]; }
    sw_unlock(sw);
    return 0;
}

void sw_ctr_reset(sw_t *sw, uint32_t c) {
    if (c >= NCTRS) return;
    sw_lock(sw);
    memset(sw->ctr_pk[c], 0, sizeof(uint64_t) * ctr_size[c]);
    memset(sw->ctr_by[c], 0, sizeof(uint64_t) * ctr_size[c]);
    sw_unlock(sw);
}

/* ------------------------------------------------------------------ multicast */
int sw_mc_set(sw_t *sw, uint32_t gid, uint32_t n, const uint32_t *ports, const uint32_t *rids) {
    if (gid == 0 || gid >= MC_GROUPS) return -1;
    mc_group_t *g = calloc(1, sizeof *g);
    if (!g) return -1;
    g->n = n;
    g->ports = malloc(sizeof(uint32_t) * (n ? n : 1));
    g->rids = malloc(sizeof(uint32_t) * (n ? n : 1));
    if (!g->ports || !g->rids) { free(g->ports); free(g->rids); free(g); return -1; }
    memcpy(g->ports, ports, sizeof(uint32_t) * n);
    memcpy(g->rids, rids, sizeof(uint32_t) * n);
    sw_lock(sw);
    mc_group_t *old = sw->mc[gid];
    sw->mc[gid] = g;
    sw_unlock(sw);
    if (old) { free(old->ports); free(old->rids); free(old); }
    return 0;
}

int sw_mc_delete(sw_t *sw, uint32_t gid) {
    if (gid == 0 || gid >= MC_GROUPS) return -1;
    sw_lock(sw);
    mc_group_t *old = sw->mc[gid];
    sw->mc[gid] = NULL;
    sw_unlock(sw);
    if (old) { free(old->ports); free(old->rids); free(old); }
    return 0;
}

/* ------------------------------------------------------------------ mirroring */
int sw_mirror_set(sw_t *sw, uint32_t id, int32_t port, int32_t mgid) {
    if (id >= MIRROR_SESSIONS) return -1;
    sw_lock(sw);
    sw->mirror[id].port = port;
    sw->mirror[id].mgid = mgid;
    sw->mirror[id].set = 1;
    sw_unlock(sw);
    return 0;
}

int sw_mirror_delete(sw_t *sw, uint32_t id) {
    if (id >= MIRROR_SESSIONS) return -1;
    sw_lock(sw);
    sw->mirror[id].set = 0;
    sw_unlock(sw);
    return 0;
}

/* ------------------------------------------------------------------ digests */
uint32_t sw_digest_width(void) { return DIGEST_WIDTH ? DIGEST_WIDTH : 1; }

/* Move up to `max` queued samples, oldest first, to ids[] and vals[] (sw_digest_width() values
 * each); returns how many. */
uint32_t sw_digests(sw_t *sw, uint32_t max, uint32_t *ids, uint64_t *vals) {
    sw_lock(sw);
    digest_queue_t *q = &sw->digests;
    uint32_t n = q->count < max ? q->count : max;
    for (uint32_t k = 0; k < n; k++) {
        uint32_t at = (q->head + k) % DIGEST_QUEUE;
        ids[k] = q->ids[at];
        memcpy(&vals[(size_t)k * q->width], &q->vals[(size_t)at * q->width], sizeof(uint64_t) * q->width);
    }
    q->head = (q->head + n) % DIGEST_QUEUE;
    q->count -= n;
    sw_unlock(sw);
    return n;
}
