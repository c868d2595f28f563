/* A plain attention layer on the CPU in fp32, forward and backward, on plugin.h's layouts:
 * Q, O, dO, dQ [B,H,N,d]; K, V, dK, dV [B,G,N_k,d]; LSE [B,H,N]. One thread, no tiling: a
 * correct starting point, not a fast one. */
#ifndef NAIVE_ATTENTION_H
#define NAIVE_ATTENTION_H

#include <flashbench/plugin.h>

/* O and LSE = the log-sum-exp of each scaled score row (+inf for a row the mask hides whole).
 * scores: N_k floats of workspace. */
void naive_forward(const flashbench_problem* p, const float* Q, const float* K, const float* V, float* O, float* LSE,
                   float* scores);

/* dQ, dK, dV from dO, O and LSE (written, not added to). row: 2 * N_k floats of workspace. */
void naive_backward(const flashbench_problem* p, const float* Q, const float* K, const float* V, const float* O,
                    const float* dO, const float* LSE, float* dQ, float* dK, float* dV, float* row);

#endif
