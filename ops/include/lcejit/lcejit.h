/*===- lcejit/lcejit.h - The C ABI of lcejit ----------------------------------===
 *
 * A C interface to lcejit::LinearCrossEntropy (lcejit/LinearCrossEntropy.h) for callers
 * that cannot or will not use C++ (language bindings, plugins built with another
 * standard library). Every function returns an lcejit_status: LCEJIT_OK (0) or the kind
 * of the error, whose message lcejit_last_error_message() returns (per thread, until the
 * next failing call on that thread). No C++ exception crosses this interface.
 *
 *   lcejit_options o;
 *   lcejit_options_init(&o);
 *   o.hidden = 4096; o.vocab = 128256;
 *   lcejit_op *op;
 *   if (lcejit_create(&o, &op) != LCEJIT_OK) puts(lcejit_last_error_message());
 *   ...
 *   lcejit_destroy(op);
 *
 * Threads and streams: as the C++ op (docs/integration.md).
 *===----------------------------------------------------------------------------===*/
#ifndef LCEJIT_LCEJIT_H
#define LCEJIT_LCEJIT_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define LCEJIT_VERSION_MAJOR 0
#define LCEJIT_VERSION_MINOR 2
#define LCEJIT_VERSION_PATCH 0

/* Status of a call: 0 or an error kind (lcejit::ErrorKind in the same order, plus 1). */
typedef enum lcejit_status {
  LCEJIT_OK = 0,
  LCEJIT_ERROR_INVALID_ARGUMENT = 1,
  LCEJIT_ERROR_UNSUPPORTED = 2,
  LCEJIT_ERROR_NO_DEVICE = 3,
  LCEJIT_ERROR_CUDA = 4,
  LCEJIT_ERROR_NVRTC = 5,
  LCEJIT_ERROR_CACHE = 6,
  LCEJIT_ERROR_DEVICE_CHECK = 7,
  LCEJIT_ERROR_INTERNAL = 8,
  LCEJIT_ERROR_UNKNOWN = 9 /* a non-lcejit exception (e.g. out of host memory) */
} lcejit_status;

typedef enum lcejit_dtype {
  LCEJIT_F32 = 0,
  LCEJIT_BF16 = 1,
  LCEJIT_F16 = 2,
  LCEJIT_I32 = 3,
  LCEJIT_I64 = 4
} lcejit_dtype;

typedef enum lcejit_reduction { LCEJIT_REDUCTION_MEAN = 0, LCEJIT_REDUCTION_SUM = 1 } lcejit_reduction;

typedef enum lcejit_precision { LCEJIT_PRECISION_FAST = 0, LCEJIT_PRECISION_EXACT = 1 } lcejit_precision;

/* Flags (OR them) of the lcejit_*_accumulate calls: which gradients the call adds to what
   their buffers hold (beta = 1, gradient accumulation across micro-batches) instead of
   overwriting them. Added inside the kernels that write them: no extra pass. */
typedef enum lcejit_accumulate {
  LCEJIT_ACCUMULATE_NONE = 0,
  LCEJIT_ACCUMULATE_GRAD_HIDDEN = 1, /* dH += the call's dH */
  LCEJIT_ACCUMULATE_GRAD_WEIGHT = 2  /* dW += the call's dW */
} lcejit_accumulate;

/* LinearCrossEntropyOptions. Fill with lcejit_options_init(), then set fields. */
typedef struct lcejit_options {
  int64_t hidden;             /* D */
  int64_t vocab;              /* V */
  lcejit_dtype dtype;         /* of H, W, dH: BF16 (default), F16 or F32 */
  lcejit_dtype target_dtype;  /* of the targets: I64 (default) or I32 */
  lcejit_dtype grad_weight_dtype; /* of dW: F32 (default) or dtype */
  int has_softcap;            /* nonzero: logits become softcap * tanh(z / softcap) */
  double softcap;
  int has_ignore_index;       /* nonzero (default): rows whose target is ignore_index are left out */
  int64_t ignore_index;       /* default -100 */
  lcejit_reduction reduction; /* default MEAN */
  lcejit_precision precision; /* default FAST */
  int64_t workspace_budget_bytes; /* 0: LCEJIT_WORKSPACE_MB or 512 MiB */
  int32_t device;             /* CUDA device ordinal; -1 (default): the device current at the first call */
} lcejit_options;

/* A dense, contiguous, row-major tensor (rank <= 2; rank 0 for a scalar loss). */
typedef struct lcejit_tensor {
  void *data;
  lcejit_dtype dtype;
  int32_t rank;
  int64_t shape[2];
} lcejit_tensor;

typedef struct lcejit_op lcejit_op;

/* "0.2.0" (0.2: gradient accumulation, lcejit_*_accumulate) */
const char *lcejit_version(void);
/* The message of the last failing call on this thread ("" if none). */
const char *lcejit_last_error_message(void);
/* The status of the last failing call on this thread (LCEJIT_OK if none). */
lcejit_status lcejit_last_error_kind(void);

void lcejit_options_init(lcejit_options *options);
lcejit_status lcejit_create(const lcejit_options *options, lcejit_op **op);
void lcejit_destroy(lcejit_op *op);

/* Runs forward + backward on `stream` (a CUstream / cudaStream_t; NULL = the default
   stream), synchronizes it and writes the loss to *loss. */
lcejit_status lcejit_forward_backward(lcejit_op *op, const lcejit_tensor *hidden,
                                      const lcejit_tensor *weight, const lcejit_tensor *targets,
                                      const lcejit_tensor *grad_hidden,
                                      const lcejit_tensor *grad_weight, void *stream,
                                      float *loss);
/* Asynchronous: the loss is written to device memory (`loss`, f32, rank 0 or [1]). */
lcejit_status lcejit_enqueue(lcejit_op *op, const lcejit_tensor *hidden,
                             const lcejit_tensor *weight, const lcejit_tensor *targets,
                             const lcejit_tensor *loss, const lcejit_tensor *grad_hidden,
                             const lcejit_tensor *grad_weight, void *stream);
/* The same with the gradients (not the loss) multiplied inside the kernels by `scale`, or,
   when `device_scale` is not NULL, by the f32 it points to in device memory, read when the
   kernels run (autograd's grad_output). */
lcejit_status lcejit_forward_backward_scaled(lcejit_op *op, const lcejit_tensor *hidden,
                                             const lcejit_tensor *weight,
                                             const lcejit_tensor *targets,
                                             const lcejit_tensor *grad_hidden,
                                             const lcejit_tensor *grad_weight, void *stream,
                                             float scale, const float *device_scale,
                                             float *loss);
lcejit_status lcejit_enqueue_scaled(lcejit_op *op, const lcejit_tensor *hidden,
                                    const lcejit_tensor *weight, const lcejit_tensor *targets,
                                    const lcejit_tensor *loss, const lcejit_tensor *grad_hidden,
                                    const lcejit_tensor *grad_weight, void *stream,
                                    float scale, const float *device_scale);
/* The scaled calls with `accumulate`, lcejit_accumulate flags ORed: the flagged gradients
   are added to (the scaled gradient is added; bf16/f16 ones are rounded once after the
   addition), the others written. Other bits: LCEJIT_ERROR_INVALID_ARGUMENT naming
   `accumulate`. With 0 they are lcejit_forward_backward_scaled / lcejit_enqueue_scaled.
   Since 0.2.0. */
lcejit_status lcejit_forward_backward_accumulate(lcejit_op *op, const lcejit_tensor *hidden,
                                                 const lcejit_tensor *weight,
                                                 const lcejit_tensor *targets,
                                                 const lcejit_tensor *grad_hidden,
                                                 const lcejit_tensor *grad_weight,
                                                 void *stream, float scale,
                                                 const float *device_scale,
                                                 uint32_t accumulate, float *loss);
lcejit_status lcejit_enqueue_accumulate(lcejit_op *op, const lcejit_tensor *hidden,
                                        const lcejit_tensor *weight,
                                        const lcejit_tensor *targets, const lcejit_tensor *loss,
                                        const lcejit_tensor *grad_hidden,
                                        const lcejit_tensor *grad_weight, void *stream,
                                        float scale, const float *device_scale,
                                        uint32_t accumulate);
/* The loss only (2*N*D*V of work, for evaluation): synchronizes `stream`, writes *loss. */
lcejit_status lcejit_forward(lcejit_op *op, const lcejit_tensor *hidden,
                             const lcejit_tensor *weight, const lcejit_tensor *targets,
                             void *stream, float *loss);
/* Asynchronous lcejit_forward: the loss to device memory (`loss`, f32, rank 0 or [1]). */
lcejit_status lcejit_enqueue_forward(lcejit_op *op, const lcejit_tensor *hidden,
                                     const lcejit_tensor *weight, const lcejit_tensor *targets,
                                     const lcejit_tensor *loss, void *stream);
/* After the stream reached an enqueue: LCEJIT_ERROR_DEVICE_CHECK for a bad target (the
   lowest bad row and its value), LCEJIT_ERROR_INTERNAL for a kernel launched against its
   launch contract (a bug; nothing traps, the context stays usable). */
lcejit_status lcejit_check_device_errors(lcejit_op *op);
/* Plans and compiles for N rows; *compiled (may be NULL) = 1 when NVRTC ran. With a GPU
   it also readies plain calls with N rows: lcejit_enqueue after it is capturable in a
   CUDA graph (docs/integration.md). */
lcejit_status lcejit_prepare(lcejit_op *op, int64_t n, int *compiled);
/* Device workspace bytes a call with N rows uses. Needs no GPU. */
lcejit_status lcejit_workspace_bytes(lcejit_op *op, int64_t n, int64_t *bytes);
/* Caller-owned workspace (256-byte aligned), or (NULL, 0) for the op's own. */
lcejit_status lcejit_set_workspace(lcejit_op *op, void *data, int64_t bytes);

#ifdef __cplusplus
}
#endif

#endif /* LCEJIT_LCEJIT_H */
