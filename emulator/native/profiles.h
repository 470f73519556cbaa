/* Action profiles and selectors for generated switch programs (the Python engine's
 * emulator/engine/action_profiles.py, which follows BMv2's action_profile.cpp and match_tables.cpp).
 *
 * The Python engine keeps the control plane's view (ids, handles, reference counts, checks) and
 * mirrors members and groups here by BMv2 handle. An entry of an indirect table stores its kind in
 * `actions` (PTR_MEMBER or PTR_GROUP) and the member or group handle in params[0]; profile_resolve()
 * turns that into the action to run, choosing a group's member by the selector's hash modulo the
 * group size among its members in handle order. The generated `struct sw` holds `prof[NPROFILES]`.
 */
#ifndef SW_PROFILES_H
#define SW_PROFILES_H

#define PTR_MEMBER 0
#define PTR_GROUP 1

typedef struct profile {
    uint32_t nparams;            /* action data words per member */
    uint32_t mcap, gcap;         /* member and group handles it can hold */
    int32_t *mbr_action;         /* per member handle: action id, -1 = none */
    uint64_t *mbr_params;        /* nparams per member handle */
    uint32_t *grp_n;             /* per group handle: members */
    uint32_t **grp_mbrs;         /* per group handle: member handles, ascending */
} profile_t;

static void profiles_free(sw_t *sw); /* profiles_api.h: called by sw_destroy */

static const uint64_t no_params[SW_MAX_PARAMS > 0 ? SW_MAX_PARAMS : 1];

/* The action (and its data) an indirect entry with kind `kind` and handle `h` runs; `hash` is
 * called only for a group of two or more members. -1: no action (a group emptied after the entry
 * was added; BMv2 runs nothing there). */
static inline int32_t profile_resolve(const profile_t *pr, int32_t kind, uint64_t h, uint64_t (*hash)(pkt_t *, pass_ctx_t *),
                                      pkt_t *pk, pass_ctx_t *cx, const uint64_t **P) {
    uint32_t m;
    if (kind == PTR_MEMBER) {
        if (h >= pr->mcap) { *P = no_params; return -1; }
        m = (uint32_t)h;
    } else {
        uint32_t n = h < pr->gcap ? pr->grp_n[h] : 0;
        if (!n) { *P = no_params; return -1; }
        m = pr->grp_mbrs[h][n == 1 ? 0 : hash(pk, cx) % n];
    }
    *P = &pr->mbr_params[(size_t)m * pr->nparams];
    return pr->mbr_action[m];
}

#endif
