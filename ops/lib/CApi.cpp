//===- CApi.cpp - The C ABI (lcejit/lcejit.h) over LinearCrossEntropy -----===//
//
// Every entry point catches everything: an lcejit::Error becomes its kind, anything else
// LCEJIT_ERROR_UNKNOWN, with the message kept per thread for lcejit_last_error_message().

#include "lcejit/lcejit.h"
#include "lcejit/LinearCrossEntropy.h"

#include <exception>
#include <memory>
#include <new>
#include <string>

struct lcejit_op {
  std::unique_ptr<lcejit::LinearCrossEntropy> impl;
};

namespace {

thread_local std::string tLastMessage;
thread_local lcejit_status tLastKind = LCEJIT_OK;

lcejit_status fail(lcejit_status kind, std::string message) {
  tLastKind = kind;
  tLastMessage = std::move(message);
  return kind;
}

template <class F> lcejit_status guarded(F &&f) {
  try {
    f();
    return LCEJIT_OK;
  } catch (const lcejit::Error &e) {
    return fail(static_cast<lcejit_status>(static_cast<int>(e.kind()) + 1), e.what());
  } catch (const std::bad_alloc &) {
    return fail(LCEJIT_ERROR_UNKNOWN, "lcejit: out of host memory");
  } catch (const std::exception &e) {
    return fail(LCEJIT_ERROR_UNKNOWN, std::string("lcejit: ") + e.what());
  } catch (...) {
    return fail(LCEJIT_ERROR_UNKNOWN, "lcejit: unknown exception");
  }
}

lcejit::DType toDType(lcejit_dtype t, const char *what) {
  switch (t) {
  case LCEJIT_F32: return lcejit::DType::F32;
  case LCEJIT_BF16: return lcejit::DType::BF16;
  case LCEJIT_F16: return lcejit::DType::F16;
  case LCEJIT_I32: return lcejit::DType::I32;
  case LCEJIT_I64: return lcejit::DType::I64;
  }
  throw lcejit::Error(lcejit::ErrorKind::InvalidArgument,
                      std::string(what) + " = " + std::to_string(static_cast<int>(t)) +
                          " is not an lcejit_dtype");
}

void need(const void *p, const char *what) {
  if (!p)
    throw lcejit::Error(lcejit::ErrorKind::InvalidArgument, std::string(what) + " is NULL");
}

lcejit::LinearCrossEntropy &opOf(lcejit_op *op) {
  need(op, "op");
  need(op->impl.get(), "op (destroyed?)");
  return *op->impl;
}

std::vector<int64_t> shapeOf(const lcejit_tensor &t, const char *what) {
  if (t.rank < 0 || t.rank > 2)
    throw lcejit::Error(lcejit::ErrorKind::InvalidArgument,
                        std::string(what) + ".rank = " + std::to_string(t.rank) +
                            " (0, 1 or 2)");
  return std::vector<int64_t>(t.shape, t.shape + t.rank);
}

lcejit::TensorRef in(const lcejit_tensor *t, const char *what) {
  need(t, what);
  return lcejit::TensorRef{t->data, toDType(t->dtype, what), shapeOf(*t, what), {}};
}

lcejit::MutableTensorRef out(const lcejit_tensor *t, const char *what) {
  need(t, what);
  return lcejit::MutableTensorRef{t->data, toDType(t->dtype, what), shapeOf(*t, what), {}};
}

lcejit::Accumulate accumulateOf(uint32_t flags) {
  const uint32_t known = LCEJIT_ACCUMULATE_GRAD_HIDDEN | LCEJIT_ACCUMULATE_GRAD_WEIGHT;
  if (flags & ~known)
    throw lcejit::Error(lcejit::ErrorKind::InvalidArgument,
                        "accumulate = " + std::to_string(flags) +
                            " has bits that are not lcejit_accumulate flags "
                            "(LCEJIT_ACCUMULATE_GRAD_HIDDEN = 1, "
                            "LCEJIT_ACCUMULATE_GRAD_WEIGHT = 2)");
  lcejit::Accumulate a;
  a.gradHidden = (flags & LCEJIT_ACCUMULATE_GRAD_HIDDEN) != 0;
  a.gradWeight = (flags & LCEJIT_ACCUMULATE_GRAD_WEIGHT) != 0;
  return a;
}

} // namespace

extern "C" {

const char *lcejit_version(void) { return "0.2.0"; }

const char *lcejit_last_error_message(void) { return tLastMessage.c_str(); }

lcejit_status lcejit_last_error_kind(void) { return tLastKind; }

void lcejit_options_init(lcejit_options *o) {
  if (!o)
    return;
  *o = lcejit_options{};
  o->dtype = LCEJIT_BF16;
  o->target_dtype = LCEJIT_I64;
  o->grad_weight_dtype = LCEJIT_F32;
  o->has_ignore_index = 1;
  o->ignore_index = -100;
  o->reduction = LCEJIT_REDUCTION_MEAN;
  o->precision = LCEJIT_PRECISION_FAST;
  o->device = -1;
}

lcejit_status lcejit_create(const lcejit_options *o, lcejit_op **op) {
  return guarded([&] {
    need(op, "op");
    *op = nullptr;
    need(o, "options");
    lcejit::LinearCrossEntropyOptions c;
    c.hidden = o->hidden;
    c.vocab = o->vocab;
    c.dtype = toDType(o->dtype, "options.dtype");
    c.targetDType = toDType(o->target_dtype, "options.target_dtype");
    c.gradWeightDType = toDType(o->grad_weight_dtype, "options.grad_weight_dtype");
    if (o->has_softcap)
      c.softcap = o->softcap;
    if (o->has_ignore_index)
      c.ignoreIndex = o->ignore_index;
    else
      c.ignoreIndex.reset();
    if (o->reduction != LCEJIT_REDUCTION_MEAN && o->reduction != LCEJIT_REDUCTION_SUM)
      throw lcejit::Error(lcejit::ErrorKind::InvalidArgument,
                          "options.reduction = " + std::to_string(o->reduction) +
                              " is not an lcejit_reduction");
    c.reduction = o->reduction == LCEJIT_REDUCTION_SUM ? lcejit::Reduction::Sum
                                                       : lcejit::Reduction::Mean;
    if (o->precision != LCEJIT_PRECISION_FAST && o->precision != LCEJIT_PRECISION_EXACT)
      throw lcejit::Error(lcejit::ErrorKind::InvalidArgument,
                          "options.precision = " + std::to_string(o->precision) +
                              " is not an lcejit_precision");
    c.precision = o->precision == LCEJIT_PRECISION_EXACT ? lcejit::Precision::Exact
                                                         : lcejit::Precision::Fast;
    c.workspaceBudgetBytes = o->workspace_budget_bytes;
    c.device = o->device;
    auto h = std::make_unique<lcejit_op>();
    h->impl = std::make_unique<lcejit::LinearCrossEntropy>(c);
    *op = h.release();
  });
}

void lcejit_destroy(lcejit_op *op) {
  try {
    delete op;
  } catch (...) {
    // A destructor that throws would cross the C boundary: swallow (nothing to report to).
  }
}

lcejit_status lcejit_forward_backward_accumulate(lcejit_op *op, const lcejit_tensor *hidden,
                                                 const lcejit_tensor *weight,
                                                 const lcejit_tensor *targets,
                                                 const lcejit_tensor *grad_hidden,
                                                 const lcejit_tensor *grad_weight,
                                                 void *stream, float scale,
                                                 const float *device_scale,
                                                 uint32_t accumulate, float *loss) {
  return guarded([&] {
    // Converted one by one, in argument order, so the first bad one is the one named.
    lcejit::LinearCrossEntropy &o = opOf(op);
    lcejit::TensorRef h = in(hidden, "hidden"), w = in(weight, "weight"),
                      y = in(targets, "targets");
    lcejit::MutableTensorRef dh = out(grad_hidden, "grad_hidden"),
                             dw = out(grad_weight, "grad_weight");
    const lcejit::Accumulate acc = accumulateOf(accumulate);
    need(loss, "loss");
    *loss = o.forwardBackward(h, w, y, dh, dw, stream, lcejit::GradScale{scale, device_scale},
                              acc);
  });
}

lcejit_status lcejit_enqueue_accumulate(lcejit_op *op, const lcejit_tensor *hidden,
                                        const lcejit_tensor *weight,
                                        const lcejit_tensor *targets, const lcejit_tensor *loss,
                                        const lcejit_tensor *grad_hidden,
                                        const lcejit_tensor *grad_weight, void *stream,
                                        float scale, const float *device_scale,
                                        uint32_t accumulate) {
  return guarded([&] {
    lcejit::LinearCrossEntropy &o = opOf(op);
    lcejit::TensorRef h = in(hidden, "hidden"), w = in(weight, "weight"),
                      y = in(targets, "targets");
    lcejit::MutableTensorRef l = out(loss, "loss"), dh = out(grad_hidden, "grad_hidden"),
                             dw = out(grad_weight, "grad_weight");
    const lcejit::Accumulate acc = accumulateOf(accumulate);
    o.enqueue(h, w, y, l, dh, dw, stream, lcejit::GradScale{scale, device_scale}, acc);
  });
}

// The scaled calls are the accumulating ones with no flag (they write the gradients).
lcejit_status lcejit_forward_backward_scaled(lcejit_op *op, const lcejit_tensor *hidden,
                                             const lcejit_tensor *weight,
                                             const lcejit_tensor *targets,
                                             const lcejit_tensor *grad_hidden,
                                             const lcejit_tensor *grad_weight, void *stream,
                                             float scale, const float *device_scale,
                                             float *loss) {
  return lcejit_forward_backward_accumulate(op, hidden, weight, targets, grad_hidden,
                                            grad_weight, stream, scale, device_scale,
                                            LCEJIT_ACCUMULATE_NONE, loss);
}

lcejit_status lcejit_enqueue_scaled(lcejit_op *op, const lcejit_tensor *hidden,
                                    const lcejit_tensor *weight, const lcejit_tensor *targets,
                                    const lcejit_tensor *loss, const lcejit_tensor *grad_hidden,
                                    const lcejit_tensor *grad_weight, void *stream,
                                    float scale, const float *device_scale) {
  return lcejit_enqueue_accumulate(op, hidden, weight, targets, loss, grad_hidden, grad_weight,
                                   stream, scale, device_scale, LCEJIT_ACCUMULATE_NONE);
}

// The unscaled calls are the scaled ones with the scale 1 (GradScale::isOne: the plain
// Program).
lcejit_status lcejit_forward_backward(lcejit_op *op, const lcejit_tensor *hidden,
                                      const lcejit_tensor *weight, const lcejit_tensor *targets,
                                      const lcejit_tensor *grad_hidden,
                                      const lcejit_tensor *grad_weight, void *stream,
                                      float *loss) {
  return lcejit_forward_backward_scaled(op, hidden, weight, targets, grad_hidden, grad_weight,
                                        stream, 1.0f, nullptr, loss);
}

lcejit_status lcejit_enqueue(lcejit_op *op, const lcejit_tensor *hidden,
                             const lcejit_tensor *weight, const lcejit_tensor *targets,
                             const lcejit_tensor *loss, const lcejit_tensor *grad_hidden,
                             const lcejit_tensor *grad_weight, void *stream) {
  return lcejit_enqueue_scaled(op, hidden, weight, targets, loss, grad_hidden, grad_weight,
                               stream, 1.0f, nullptr);
}

lcejit_status lcejit_forward(lcejit_op *op, const lcejit_tensor *hidden,
                             const lcejit_tensor *weight, const lcejit_tensor *targets,
                             void *stream, float *loss) {
  return guarded([&] {
    lcejit::LinearCrossEntropy &o = opOf(op);
    lcejit::TensorRef h = in(hidden, "hidden"), w = in(weight, "weight"),
                      y = in(targets, "targets");
    need(loss, "loss");
    *loss = o.forward(h, w, y, stream);
  });
}

lcejit_status lcejit_enqueue_forward(lcejit_op *op, const lcejit_tensor *hidden,
                                     const lcejit_tensor *weight, const lcejit_tensor *targets,
                                     const lcejit_tensor *loss, void *stream) {
  return guarded([&] {
    lcejit::LinearCrossEntropy &o = opOf(op);
    lcejit::TensorRef h = in(hidden, "hidden"), w = in(weight, "weight"),
                      y = in(targets, "targets");
    lcejit::MutableTensorRef l = out(loss, "loss");
    o.enqueueForward(h, w, y, l, stream);
  });
}

lcejit_status lcejit_check_device_errors(lcejit_op *op) {
  return guarded([&] { opOf(op).checkDeviceErrors(); });
}

lcejit_status lcejit_prepare(lcejit_op *op, int64_t n, int *compiled) {
  return guarded([&] {
    bool c = opOf(op).prepare(n);
    if (compiled)
      *compiled = c ? 1 : 0;
  });
}

lcejit_status lcejit_workspace_bytes(lcejit_op *op, int64_t n, int64_t *bytes) {
  return guarded([&] {
    need(bytes, "bytes");
    *bytes = opOf(op).workspaceBytes(n);
  });
}

lcejit_status lcejit_set_workspace(lcejit_op *op, void *data, int64_t bytes) {
  return guarded([&] { opOf(op).setWorkspace(data, bytes); });
}

} // extern "C"
