/* flashbench's plugin interface: an attention implementation in a shared library, loaded at run
 * time (`flashbench run --plugin PATH.so --impl NAME`), timed, checked against float64 and
 * accounted by tag beside the built-in ones, on the same inputs and in the same rows.
 *
 * This header is C (C99, and C++ through extern "C"), so that a plugin can be written in any
 * language with a C FFI. It is the whole contract: docs/plugins.md explains it.
 *
 * The plugin exports one symbol, flashbench_plugin(), returning a description of what it offers.
 * flashbench refuses a library without it, or one built against another FLASHBENCH_PLUGIN_ABI_VERSION.
 *
 * Shapes, in one set of letters: B batch, H query heads, G key/value heads (a divisor of H; query
 * head h reads K/V head h / (H/G)), N query rows, N_k key/value rows, d head dim. Every tensor is
 * dense, row-major, in this order of axes:
 *   Q, O, dO, dQ  [B, H, N, d]
 *   K, V, dK, dV  [B, G, N_k, d]
 * O = softmax(scale * Q K^T [+ causal mask]) V per head; the causal mask is bottom-right aligned
 * (query row i sees key rows j <= i + N_k - N; a row that sees no key gives O = 0 and no gradient).
 */
#ifndef FLASHBENCH_PLUGIN_H
#define FLASHBENCH_PLUGIN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The version of the structures below. flashbench loads a plugin only when the version it reports
 * (flashbench_plugin_info.abi_version) is this one: any change to a structure bumps it. */
#define FLASHBENCH_PLUGIN_ABI_VERSION 1

/* The name of the one symbol a plugin exports. */
#define FLASHBENCH_PLUGIN_ENTRY_POINT "flashbench_plugin"

/* Where the pointers of a call live: host memory (CPU) or the current CUDA device's memory. */
typedef enum flashbench_device {
  FLASHBENCH_DEVICE_CPU = 0,
  FLASHBENCH_DEVICE_CUDA = 1
} flashbench_device;

/* The variant whose statement of kept tensors an implementation uses: the layer stack allocates
 * those tensors before forward and hands them to forward and backward (flashbench_call.kept); the
 * memory model counts them. [B,H,N,N_k] tensors and O are in the storage dtype, row statistics fp32:
 *   STANDARD:   "P" [B,H,N,N_k] (the softmax)
 *   V1:         "S" [B,H,N,N_k] (the scaled, masked scores), "m" and "l" [B,H,N] (row max, row sum)
 *   V2:         "LSE" [B,H,N] (log-sum-exp of each score row); the output O itself is kept too, and
 *               backward may read it (flashbench_call.o)
 *   CHECKPOINT: nothing (backward recomputes what it needs) */
typedef enum flashbench_variant {
  FLASHBENCH_VARIANT_STANDARD = 0,
  FLASHBENCH_VARIANT_V1 = 1,
  FLASHBENCH_VARIANT_V2 = 2,
  FLASHBENCH_VARIANT_CHECKPOINT = 3
} flashbench_variant;

/* Element types. FP32 is float; BF16 and FP16 are 16-bit patterns (uint16_t on the host). */
typedef enum flashbench_dtype {
  FLASHBENCH_DTYPE_FP32 = 0,
  FLASHBENCH_DTYPE_BF16 = 1,
  FLASHBENCH_DTYPE_FP16 = 2
} flashbench_dtype;

/* Which half of the layer a workspace question is about. */
typedef enum flashbench_pass {
  FLASHBENCH_PASS_FORWARD = 0,
  FLASHBENCH_PASS_BACKWARD = 1
} flashbench_pass;

/* One layer's problem. */
typedef struct flashbench_problem {
  int64_t batch;     /* B */
  int64_t heads;     /* H, query heads */
  int64_t kv_heads;  /* G, key/value heads, dividing H */
  int64_t seq_q;     /* N, query rows */
  int64_t seq_kv;    /* N_k, key/value rows */
  int64_t head_dim;  /* d */
  int32_t causal;    /* 1: the bottom-right causal mask */
  flashbench_dtype dtype; /* the storage dtype of Q, K, V, O, dO */
  float scale;       /* the softmax scale, 1/sqrt(d) */
} flashbench_problem;

/* A tensor the layer stack allocated from the variant's statement, by name ("P", "LSE", ...). */
typedef struct flashbench_tensor {
  const char* name;
  void* data;
  int64_t bytes; /* [bytes] */
} flashbench_tensor;

/* One forward or backward call on one layer. Every pointer is the device's (flashbench_device);
 * the buffers are flashbench's, allocated and counted by its memory ledger: write only inside them.
 * Forward writes o and fills kept; backward reads q, k, v, o, d_o and kept and writes dq, dk, dv
 * (it never adds to what they held: they come uninitialised). */
typedef struct flashbench_call {
  const void* q;   /* [B,H,N,d]   storage dtype */
  const void* k;   /* [B,G,N_k,d] storage dtype */
  const void* v;   /* [B,G,N_k,d] storage dtype */
  void* o;         /* [B,H,N,d]   storage dtype: forward writes it, backward reads it (V2 only
                    * keeps it alive: other variants' backward must not read it) */
  const void* d_o; /* [B,H,N,d]   storage dtype; NULL in forward */
  void* dq;        /* [B,H,N,d]   gradient dtype; NULL in forward */
  void* dk;        /* [B,G,N_k,d] gradient dtype; NULL in forward */
  void* dv;        /* [B,G,N_k,d] gradient dtype; NULL in forward */
  flashbench_dtype gradient_dtype; /* of dq, dk, dv: FP32 on the CPU, the storage dtype on CUDA */
  const flashbench_tensor* kept;   /* the variant's kept tensors of this layer */
  int32_t kept_count;
  void* workspace;         /* workspace_bytes(problem, pass) bytes for this call alone, or NULL */
  int64_t workspace_bytes; /* [bytes] */
  void* stream;            /* CUDA: the cudaStream_t to queue all work on; NULL on the CPU */
} flashbench_call;

/* What a forward or backward returns: 0 when it worked; otherwise non-zero, with a one-line reason
 * written into error (at most error_size bytes, NUL-terminated). flashbench then reports the row as
 * failed with that reason and goes on with the sweep. */
typedef int (*flashbench_layer_fn)(const flashbench_problem* problem, const flashbench_call* call, char* error,
                                   size_t error_size);

/* One implementation the plugin offers. */
typedef struct flashbench_implementation {
  const char* name;    /* for --impl: unique, no spaces or commas, e.g. "mykernel" or "mykernel.tiled" */
  const char* summary; /* one line for `flashbench info` */
  flashbench_device device;
  flashbench_variant variant;
  /* NULL when it can run the problem, else a reason (a string that lives as long as the library):
   * the row is skipped with it, before anything is allocated. */
  const char* (*supports)(const flashbench_problem* problem);
  /* The workspace one call of `pass` needs [bytes], 0 for none: flashbench allocates it (tag
   * workspace) for the call and counts it in the model. NULL: none. */
  int64_t (*workspace_bytes)(const flashbench_problem* problem, flashbench_pass pass);
  flashbench_layer_fn forward;
  flashbench_layer_fn backward;
} flashbench_implementation;

/* What flashbench_plugin() returns; it lives as long as the library. */
typedef struct flashbench_plugin_info {
  uint32_t abi_version; /* FLASHBENCH_PLUGIN_ABI_VERSION as the plugin was built */
  const char* name;     /* the plugin's, for `info --plugin` and errors */
  int32_t implementation_count;
  const flashbench_implementation* implementations;
} flashbench_plugin_info;

/* The entry point every plugin defines. */
typedef const flashbench_plugin_info* (*flashbench_plugin_fn)(void);
const flashbench_plugin_info* flashbench_plugin(void);

#ifdef __cplusplus
}
#endif

#endif /* FLASHBENCH_PLUGIN_H */
