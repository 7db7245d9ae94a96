/* capi_test: the C ABI from a C11 program, on paths that need no GPU: options, bad
   arguments (each names the argument, the accumulate flags too), the workspace query,
   errors per thread. Exit 0 when
   every check holds; prints the first failure otherwise. */
#include <lcejit/lcejit.h>

#include <stdio.h>
#include <string.h>

static int failures = 0;

#define EXPECT(cond)                                                                     \
  do {                                                                                   \
    if (!(cond)) {                                                                       \
      fprintf(stderr, "capi_test: %s:%d: %s (last error: %s)\n", __FILE__, __LINE__,    \
              #cond, lcejit_last_error_message());                                       \
      ++failures;                                                                        \
    }                                                                                    \
  } while (0)

int main(void) {
  lcejit_options o;
  lcejit_op *op = NULL;
  lcejit_tensor t;
  int64_t bytes = 0;
  float loss = 0.f;

  EXPECT(strcmp(lcejit_version(), "0.2.0") == 0);
  EXPECT(lcejit_last_error_kind() == LCEJIT_OK);

  lcejit_options_init(&o);
  EXPECT(o.dtype == LCEJIT_BF16 && o.has_ignore_index && o.ignore_index == -100);
  /* hidden = 0: InvalidArgument naming options.hidden; no op is made. */
  EXPECT(lcejit_create(&o, &op) == LCEJIT_ERROR_INVALID_ARGUMENT);
  EXPECT(op == NULL);
  EXPECT(strstr(lcejit_last_error_message(), "options.hidden") != NULL);
  EXPECT(lcejit_last_error_kind() == LCEJIT_ERROR_INVALID_ARGUMENT);

  o.hidden = 64;
  o.vocab = 1000;
  o.dtype = (lcejit_dtype)42;
  EXPECT(lcejit_create(&o, &op) == LCEJIT_ERROR_INVALID_ARGUMENT);
  EXPECT(strstr(lcejit_last_error_message(), "options.dtype = 42") != NULL);

  o.dtype = LCEJIT_BF16;
  EXPECT(o.device == -1);
  o.device = -7; /* not an ordinal: named */
  EXPECT(lcejit_create(&o, &op) == LCEJIT_ERROR_INVALID_ARGUMENT);
  EXPECT(strstr(lcejit_last_error_message(), "options.device = -7") != NULL);
  o.device = -1;
  EXPECT(lcejit_create(&o, &op) == LCEJIT_OK);
  EXPECT(op != NULL);

  EXPECT(lcejit_workspace_bytes(op, 1000, &bytes) == LCEJIT_OK);
  EXPECT(bytes > 0);
  EXPECT(lcejit_workspace_bytes(op, -1, &bytes) == LCEJIT_ERROR_INVALID_ARGUMENT);
  EXPECT(strstr(lcejit_last_error_message(), "-1") != NULL);
  EXPECT(lcejit_workspace_bytes(op, 1000, NULL) == LCEJIT_ERROR_INVALID_ARGUMENT);

  /* A NULL tensor and a bad rank are named. */
  memset(&t, 0, sizeof t);
  EXPECT(lcejit_forward_backward(op, NULL, &t, &t, &t, &t, NULL, &loss) ==
         LCEJIT_ERROR_INVALID_ARGUMENT);
  EXPECT(strstr(lcejit_last_error_message(), "hidden is NULL") != NULL);
  t.rank = 3;
  EXPECT(lcejit_forward_backward(op, &t, &t, &t, &t, &t, NULL, &loss) ==
         LCEJIT_ERROR_INVALID_ARGUMENT);
  EXPECT(strstr(lcejit_last_error_message(), "hidden.rank = 3") != NULL);
  /* The loss-only calls check their arguments the same way. */
  t.rank = 2;
  EXPECT(lcejit_forward(op, &t, NULL, &t, NULL, &loss) == LCEJIT_ERROR_INVALID_ARGUMENT);
  EXPECT(strstr(lcejit_last_error_message(), "weight is NULL") != NULL);
  EXPECT(lcejit_forward(op, &t, &t, &t, NULL, NULL) == LCEJIT_ERROR_INVALID_ARGUMENT);
  EXPECT(strstr(lcejit_last_error_message(), "loss") != NULL);
  EXPECT(lcejit_enqueue_forward(op, &t, &t, &t, NULL, NULL) == LCEJIT_ERROR_INVALID_ARGUMENT);
  EXPECT(strstr(lcejit_last_error_message(), "loss is NULL") != NULL);
  /* The scaled calls too. */
  EXPECT(lcejit_forward_backward_scaled(op, &t, &t, &t, NULL, &t, NULL, 0.5f, NULL, &loss) ==
         LCEJIT_ERROR_INVALID_ARGUMENT);
  EXPECT(strstr(lcejit_last_error_message(), "grad_hidden is NULL") != NULL);
  EXPECT(lcejit_enqueue_scaled(op, &t, &t, &t, &t, &t, NULL, NULL, 1.0f, NULL) ==
         LCEJIT_ERROR_INVALID_ARGUMENT);
  EXPECT(strstr(lcejit_last_error_message(), "grad_weight is NULL") != NULL);
  /* Gradient accumulation (0.2): bits other than the lcejit_accumulate flags are named,
     before any device work; NULL tensors are named as in the other calls; good flags reach
     the op's own argument checks (an f32 hidden for a bf16 op). */
  EXPECT(lcejit_forward_backward_accumulate(op, &t, &t, &t, &t, &t, NULL, 1.0f, NULL, 4u,
                                            &loss) == LCEJIT_ERROR_INVALID_ARGUMENT);
  EXPECT(strstr(lcejit_last_error_message(), "accumulate = 4") != NULL);
  EXPECT(lcejit_enqueue_accumulate(op, &t, &t, &t, &t, &t, &t, NULL, 1.0f, NULL,
                                   LCEJIT_ACCUMULATE_GRAD_WEIGHT | 8u) ==
         LCEJIT_ERROR_INVALID_ARGUMENT);
  EXPECT(strstr(lcejit_last_error_message(), "accumulate = 10") != NULL);
  EXPECT(lcejit_enqueue_accumulate(op, &t, &t, &t, &t, &t, NULL, NULL, 1.0f, NULL,
                                   LCEJIT_ACCUMULATE_GRAD_WEIGHT) ==
         LCEJIT_ERROR_INVALID_ARGUMENT);
  EXPECT(strstr(lcejit_last_error_message(), "grad_weight is NULL") != NULL);
  EXPECT(lcejit_enqueue_accumulate(
             op, &t, &t, &t, &t, &t, &t, NULL, 0.5f, NULL,
             LCEJIT_ACCUMULATE_GRAD_HIDDEN | LCEJIT_ACCUMULATE_GRAD_WEIGHT) ==
         LCEJIT_ERROR_INVALID_ARGUMENT);
  EXPECT(strstr(lcejit_last_error_message(), "hidden.dtype is f32, expected bf16") != NULL);
  EXPECT(lcejit_set_workspace(op, (void *)16, 100) == LCEJIT_ERROR_INVALID_ARGUMENT);
  EXPECT(strstr(lcejit_last_error_message(), "256-byte aligned") != NULL);
  EXPECT(lcejit_set_workspace(NULL, NULL, 0) == LCEJIT_ERROR_INVALID_ARGUMENT);

  lcejit_destroy(op);
  lcejit_destroy(NULL); /* harmless */
  if (failures == 0)
    printf("capi_test: all checks passed\n");
  return failures == 0 ? 0 : 1;
}
