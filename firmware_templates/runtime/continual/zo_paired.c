/* zo_paired.c - the one-sided sign test on paired correctness (zo_paired.h). */
#include "zo_paired.h"

/* z^2 * 10^4 of the one-sided normal quantile at 2^-k, k = 1..10: z = 0, 0.6745, 1.1503, 1.5341,
 * 1.8627, 2.1539, 2.4176, 2.6601, 2.8856, 3.0973 (z^2 rounded up: the approximation errs on "not better"). */
static const uint64_t Z2_E4[ZO_PAIRED_ALPHA_LOG2_MAX + 1u] = {
    0u, 0u, 4550u, 13234u, 23536u, 34698u, 46392u, 58446u, 70760u, 83269u, 95931u,
};

void zo_paired_reset(zo_paired_t *p)
{
    p->better = 0u;
    p->worse = 0u;
    p->ties = 0u;
}

void zo_paired_add(zo_paired_t *p, int candidate_correct, int deployed_correct)
{
    if (candidate_correct && !deployed_correct) {
        p->better++;
    } else if (!candidate_correct && deployed_correct) {
        p->worse++;
    } else {
        p->ties++;
    }
}

int zo_paired_better(const zo_paired_t *p, uint32_t alpha_log2)
{
    const uint32_t n = p->better + p->worse;
    if (alpha_log2 < 1u || alpha_log2 > ZO_PAIRED_ALPHA_LOG2_MAX || p->better <= p->worse) {
        return 0;
    }
    if (n <= ZO_PAIRED_EXACT_MAX) {
        /* sum_{k >= better} C(n, k) <= 2^(n - alpha_log2); C(n, k) built from k = n down */
        if (n < alpha_log2) {
            return 0; /* even better = n has P = 2^-n > alpha */
        }
        uint64_t c = 1u, tail = 0u;
        for (uint32_t k = n;; --k) {
            tail += c;
            if (k == p->better) {
                break;
            }
            c = c * (uint64_t)k / (uint64_t)(n - k + 1u); /* C(n, k-1) = C(n, k) k / (n - k + 1), exact */
        }
        return tail <= ((uint64_t)1 << (n - alpha_log2));
    }
    const uint64_t d = (uint64_t)(2u * p->better - n - 1u);
    return d * d * 10000u >= Z2_E4[alpha_log2] * (uint64_t)n;
}
