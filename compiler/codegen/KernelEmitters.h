//===- KernelEmitters.h - Per-kind kernel emitters (internal)
//--------------===//
//
// The emitter is split by concern: KernelCommon.cpp (parameter list, header
// comment, operand descriptions), RowKernelEmitter.cpp, GemmEmitter.cpp (the
// four GEMM kinds: config typedef, epilogue functor, wrapper), CastEmitter.cpp.
// Emitter.cpp assembles the module. Every kernel's generated text has the same
// shape (docs/codegen.md):
//
//   header comment (kind, tile, math, what each parameter is)
//   [typedef GemmConfig<...> <name>_config;]      GEMM kinds
//   [struct <name>_epilogue / <name>_row_fn]      functor from the ScalarFunc
//   extern "C" __global__ void <name>(<kernelParams()>) { ... call the template
//   ... }
//
//===----------------------------------------------------------------------===//
#pragma once

#include "compiler/codegen/CodeWriter.h"
#include "compiler/plan/Program.h"

#include <map>
#include <string>
#include <vector>

namespace lcejit::codegen::detail {

/// What every kernel emitter needs about the kernel at hand.
class KernelContext {
public:
  KernelContext(const plan::Program &program, int32_t index);

  const plan::Program &program() const { return program_; }
  const plan::Kernel &kernel() const { return kernel_; }
  int32_t index() const { return index_; }
  const std::string &name() const { return kernel_.name; }
  const std::vector<plan::Param> &params() const { return params_; }

  /// The parameter name of a buffer the kernel touches (in<i>, out<i>, ws<i>).
  /// Throws Error(Internal) when kernelParams() does not list it.
  const std::string &bufferName(const plan::BufferRef &ref) const;
  /// The parameter name of a non-pointer parameter kind (n, splits,
  /// chunk_begin, ...).
  const std::string &scalarParamName(plan::Param::Kind kind) const;

  /// Whether this launch adds to `out` instead of overwriting it because the run
  /// accumulates into that output ([Note: accumulating outputs] in Program.h), as a
  /// C++ bool expression: "((accumulate_outputs >> 1) & 1) != 0" for an output, "false"
  /// for a workspace buffer.
  std::string accumulatesInto(const plan::BufferRef &out) const;

  /// "const void *in0, void *ws2, long long n, int splits" (kernelParams()
  /// order).
  std::string signature() const;
  /// Launch geometry the executor uses (for the header comment and the smem
  /// check).
  plan::LaunchDims launchDims() const;

private:
  const plan::Program &program_;
  int32_t index_;
  const plan::Kernel &kernel_;
  std::vector<plan::Param> params_;
};

/// The C++ type of a parameter in the generated signature.
const char *paramCType(const plan::Param &p);

/// "input 0 'hidden' bf16 [N, 4096]" / "workspace 2 'partials0'".
std::string describeBuffer(const plan::Program &program,
                           const plan::BufferRef &ref);

/// "row operand bf16" etc.: what an operand reads, for comments.
std::string describeOperand(const plan::Program &program,
                            const plan::Operand &o);

/// Parameter roles for the header comment: parameter name -> text (several
/// roles of one buffer are joined with "; ").
class ParamRoles {
public:
  void add(const std::string &param, const std::string &role);
  const std::map<std::string, std::string> &roles() const { return roles_; }

private:
  std::map<std::string, std::string> roles_;
};

/// The header comment of a kernel: a rule, "Kernel <i>: <name> (<kind>)", the
/// `about` lines, then every parameter in order with its role, and a closing
/// rule.
void emitKernelHeader(CodeWriter &w, const KernelContext &ctx,
                      const std::vector<std::string> &about,
                      const ParamRoles &roles);

/// Opens `extern "C" __global__ void __launch_bounds__(threads)
/// <name>(<signature>)`.
[[nodiscard]] CodeWriter::Block
openKernel(CodeWriter &w, const KernelContext &ctx, int threads, int minBlocks = 0);

void emitRowKernel(CodeWriter &w, const KernelContext &ctx);
void emitGemmKernel(CodeWriter &w, const KernelContext &ctx);
void emitCastKernel(CodeWriter &w, const KernelContext &ctx);
void emitDzFormKernel(CodeWriter &w, const KernelContext &ctx);
void emitTargetCorrectionKernel(CodeWriter &w, const KernelContext &ctx);
void emitRowDotKernel(CodeWriter &w, const KernelContext &ctx);

/// True for a C identifier: [A-Za-z_][A-Za-z0-9_]*.
bool isCIdentifier(const std::string &s);

/// The device storage tag of a GEMM operand or output type ("lcejit::elem_bf16", "_f16",
/// "_f32"); nullptr for any other type.
const char *gemmElemTag(DType t);

/// `typedef lcejit::sm90::GemmConfig<...> name;` with the template's trailing parameters
/// (PINGPONG, TMA_STORE, CLUSTER_M, SPLIT_K, BM, HALVES) written up to the last one that
/// is not its default.
std::string sm90GemmConfigTypedef(const std::string &name, int32_t bn, int32_t stages,
                                  bool aKMajor, bool bKMajor, bool pingpong, bool tmaStore,
                                  int32_t clusterM, int32_t splitK, int32_t bm,
                                  bool halves = false);

} // namespace lcejit::codegen::detail
