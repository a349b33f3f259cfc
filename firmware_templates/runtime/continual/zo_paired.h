/* zo_paired.h - the paired test that decides whether a candidate replaces the deployed weights
 * (--mode continual, docs/guides/continual.md).
 *
 * Static file, integers only.  Both weights answer the same held-back samples (never trained
 * on); only the discordant pairs count: `better` where the candidate is right and the deployed
 * weights wrong, `worse` the other way round.  Under "no difference" better ~ Binomial(n, 1/2),
 * n = better + worse (the exact sign test, McNemar's test on the pairs).  The candidate is
 * significantly better when P(X >= better) <= 2^-alpha_log2: computed exactly with 64-bit
 * binomial coefficients for n <= ZO_PAIRED_EXACT_MAX, above with the normal approximation
 * (continuity corrected) in integers: (2 better - n - 1)^2 >= z^2 n.  Mirror:
 * host/zoflash/reference/continual.py.
 */
#ifndef ZO_PAIRED_H
#define ZO_PAIRED_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define ZO_PAIRED_EXACT_MAX 60u   /* C(60, k) k and the tail sums stay below 2^64 */
#define ZO_PAIRED_ALPHA_LOG2_MAX 10u

typedef struct {
    uint32_t better, worse, ties;
} zo_paired_t;

void zo_paired_reset(zo_paired_t *p);

/* One held-back sample: was the candidate right, was the deployed model right. */
void zo_paired_add(zo_paired_t *p, int candidate_correct, int deployed_correct);

/* 1 when the candidate is significantly better at level 2^-alpha_log2 (1..ZO_PAIRED_ALPHA_LOG2_MAX). */
int zo_paired_better(const zo_paired_t *p, uint32_t alpha_log2);

#ifdef __cplusplus
}
#endif

#endif /* ZO_PAIRED_H */
