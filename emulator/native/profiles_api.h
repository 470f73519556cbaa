/* The exported control-plane API of action profiles (see profiles.h). Included by the generated
 * file after driver.h. */
#ifndef SW_PROFILES_API_H
#define SW_PROFILES_API_H

/* Member handle `h` of profile `pi` runs `action` with `params` (nparams words). 0, or -1. */
int sw_prof_member(sw_t *sw, uint32_t pi, uint32_t h, int32_t action, const uint64_t *params) {
    if (pi >= NPROFILES) return -1;
    profile_t *pr = &sw->prof[pi];
    if (h >= pr->mcap) return -1;
    sw_lock(sw);
    pr->mbr_action[h] = action;
    memcpy(&pr->mbr_params[(size_t)h * pr->nparams], params, sizeof(uint64_t) * pr->nparams);
    sw_unlock(sw);
    return 0;
}

/* Group handle `g` of profile `pi` holds member handles `mbrs[0..n)` (ascending); n == 0 empties it. */
int sw_prof_group(sw_t *sw, uint32_t pi, uint32_t g, uint32_t n, const uint32_t *mbrs) {
    if (pi >= NPROFILES) return -1;
    profile_t *pr = &sw->prof[pi];
    if (g >= pr->gcap) return -1;
    for (uint32_t i = 0; i < n; i++) if (mbrs[i] >= pr->mcap) return -1;
    uint32_t *copy = NULL;
    if (n && !(copy = malloc(sizeof(uint32_t) * n))) return -1;
    if (n) memcpy(copy, mbrs, sizeof(uint32_t) * n);
    sw_lock(sw);
    uint32_t *old = pr->grp_mbrs[g];
    pr->grp_mbrs[g] = copy;
    pr->grp_n[g] = n;
    sw_unlock(sw);
    free(old);
    return 0;
}

static void profiles_free(sw_t *sw) {
    for (int p = 0; p < NPROFILES; p++) {
        profile_t *pr = &sw->prof[p];
        for (uint32_t g = 0; g < pr->gcap; g++) if (pr->grp_mbrs) free(pr->grp_mbrs[g]);
        free(pr->mbr_action); free(pr->mbr_params); free(pr->grp_n); free(pr->grp_mbrs);
    }
}

#endif
