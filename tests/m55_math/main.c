/* Runs the ZO-step maths on fixed inputs (inputs.h, written by tests/test_train_math.py) and
 * prints one FNV-1a hash per section through semihosting; the test recomputes the same hashes
 * with the NumPy mirror. */
#include <stdint.h>
#include "zo_rng.h"
#include "zo_train_math.h"
#include "inputs.h"

void semihost_write0(const char *s);

static uint32_t fnv(uint32_t h, uint32_t word)
{
    return (h ^ word) * 16777619u;
}

static uint32_t fbits(float f)
{
    union {
        float f;
        uint32_t u;
    } v;
    v.f = f;
    return v.u;
}

static float bitsf(uint32_t u)
{
    union {
        float f;
        uint32_t u;
    } v;
    v.u = u;
    return v.f;
}

static void put(const char *name, uint32_t h)
{
    char line[32];
    int i = 0;
    while (*name) {
        line[i++] = *name++;
    }
    line[i++] = ' ';
    for (int s = 28; s >= 0; s -= 4) {
        line[i++] = "0123456789abcdef"[(h >> s) & 0xFu];
    }
    line[i++] = '\n';
    line[i] = 0;
    semihost_write0(line);
}

static int8_t w[UPD_N];
static int8_t r[UPD_N];
static int32_t b[UPD_N];
static float c[64];

int main(void)
{
    uint32_t h = 2166136261u;
    for (int32_t k = 0; k < HASH_N; ++k) {
        const uint32_t *a = hash_args[k];
        h = fnv(h, zo_hash(a[0], a[1], a[2], a[3], a[4]));
    }
    put("hash", h);

    h = 2166136261u;
    for (int32_t k = 0; k < HASH_N; ++k) {
        h = fnv(h, zo_sample_index(hash_args[k][0], hash_args[k][1], hash_args[k][4],
                                   1u + (hash_args[k][3] & 0xFFFFu)));
    }
    put("sample", h);

    h = 2166136261u;
    for (int32_t k = 0; k < EXP_N; ++k) {
        h = fnv(h, fbits(zo_expf(bitsf(exp_x[k]))));
        h = fnv(h, fbits(zo_logf(bitsf(log_x[k]))));
        h = fnv(h, (uint32_t)zo_round_f32(bitsf(exp_x[k])));
        h = fnv(h, (uint32_t)zo_floor_f32(bitsf(exp_x[k])));
    }
    put("explog", h);

    h = 2166136261u;
    uint32_t ha = 2166136261u;
    for (int32_t k = 0; k < CE_N; ++k) {
        const int8_t *lg = ce_logits + ce_offset[k];
        h = fnv(h, fbits(zo_cross_entropy_s8(lg, ce_classes[k], bitsf(ce_scale[k]), ce_zp[k],
                                             ce_label[k])));
        ha = fnv(ha, (uint32_t)zo_argmax_s8(lg, ce_classes[k]));
    }
    put("ce", h);
    put("argmax", ha);

    /* sigmoid-bce of each case's first logit (label & 1); mse of its logits against mse_t */
    h = 2166136261u;
    ha = 2166136261u;
    for (int32_t k = 0; k < CE_N; ++k) {
        const int8_t *lg = ce_logits + ce_offset[k];
        float t[32];
        for (int32_t j = 0; j < ce_classes[k]; ++j) {
            t[j] = bitsf(mse_t[ce_offset[k] + j]);
        }
        h = fnv(h, fbits(zo_sigmoid_bce(lg[0], bitsf(ce_scale[k]), ce_zp[k], ce_label[k] & 1)));
        ha = fnv(ha, fbits(zo_mse_s8(lg, ce_classes[k], bitsf(ce_scale[k]), ce_zp[k], t)));
    }
    put("bce", h);
    put("mse", ha);

    /* perturb +1, -2, +1 (must restore), then the update, per configuration */
    h = 2166136261u;
    uint32_t hb = 2166136261u;
    int restored = 1;
    for (int32_t k = 0; k < UPD_CFG; ++k) {
        const int32_t *cf = upd_cfg[k]; /* seed, step, stream, density, mode, q, n, max_step, w_max */
        zo_dir_t d = {(uint32_t)cf[0], (uint32_t)cf[1], 0u, (uint32_t)cf[2], (uint32_t)cf[3]};
        int32_t n = cf[6];
        for (int32_t i = 0; i < n; ++i) {
            w[i] = upd_w0[i];
            r[i] = upd_r0[i];
            b[i] = upd_b0[i];
        }
        for (int32_t i = 0; i < cf[5]; ++i) {
            c[i] = bitsf(upd_c[k][i]);
        }
        d.direction = (uint32_t)cf[5] - 1u;
        zo_perturb_s8(w, n, 1, &d);
        zo_perturb_s32(b, n, 1, upd_eps, &d);
        for (int32_t i = 0; i < n; ++i) {
            h = fnv(h, (uint32_t)w[i]);
            h = fnv(h, (uint32_t)b[i]);
        }
        zo_perturb_s8(w, n, -2, &d);
        zo_perturb_s32(b, n, -2, upd_eps, &d);
        for (int32_t i = 0; i < n; ++i) {
            h = fnv(h, (uint32_t)w[i]);
            h = fnv(h, (uint32_t)b[i]);
        }
        zo_perturb_s8(w, n, 1, &d);
        zo_perturb_s32(b, n, 1, upd_eps, &d);
        for (int32_t i = 0; i < n; ++i) {
            restored &= (w[i] == upd_w0[i]) & (b[i] == upd_b0[i]);
        }
        zo_update_s8(w, r, n, c, cf[5], &d, (zo_rounding_t)cf[4], cf[8]);
        zo_update_s32(b, n, c, cf[5], upd_eps, cf[7], &d);
        for (int32_t i = 0; i < n; ++i) {
            hb = fnv(hb, (uint32_t)w[i]);
            hb = fnv(hb, (uint32_t)r[i]);
            hb = fnv(hb, (uint32_t)b[i]);
        }
    }
    put("perturb", h);
    put("update", hb);
    put("restored", (uint32_t)restored);

    /* binary16 coefficients: the float32 cases, then every half back to float32 */
    h = 2166136261u;
    for (int32_t k = 0; k < F16_N; ++k) {
        h = fnv(h, zo_f16_from_f32(bitsf(f16_x[k])));
    }
    for (uint32_t k = 0; k < 65536u; ++k) {
        h = fnv(h, fbits(zo_f32_from_f16((uint16_t)k)));
    }
    put("f16", h);
    return 0;
}
