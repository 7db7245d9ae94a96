//===- KernelCommon.cpp - Parameter list, header comment, descriptions
//-----===//

#include "compiler/codegen/KernelEmitters.h"

#include <cctype>
#include <iterator>
#include "compiler/support/Check.h"

#include <fmt/ranges.h>

namespace lcejit::codegen::detail {

using plan::BufferRef;
using plan::Operand;
using plan::Param;
using plan::Program;
using plan::Space;

KernelContext::KernelContext(const Program &program, int32_t index)
    : program_(program), index_(index),
      kernel_(program.kernels.at(static_cast<size_t>(index))),
      params_(plan::kernelParams(kernel_)) {}

const std::string &KernelContext::bufferName(const BufferRef &ref) const {
  for (const Param &p : params_)
    if (p.kind == Param::Kind::Pointer && p.buf == ref)
      return p.name;
  LCEJIT_CHECK(false,
               "kernel '{}' uses {} {} but kernelParams() does not list it",
               kernel_.name, static_cast<int>(ref.space), ref.index);
  static const std::string none;
  return none;
}

const std::string &KernelContext::scalarParamName(Param::Kind kind) const {
  for (const Param &p : params_)
    if (p.kind == kind)
      return p.name;
  LCEJIT_CHECK(false, "kernel '{}' has no parameter of kind {}", kernel_.name,
               static_cast<int>(kind));
  static const std::string none;
  return none;
}

std::string KernelContext::accumulatesInto(const BufferRef &out) const {
  if (out.space != Space::Output)
    return "false";
  return fmt::format("((({} >> {}) & 1) != 0)",
                     scalarParamName(Param::Kind::AccumulateOutputs), out.index);
}

const char *paramCType(const Param &p) {
  switch (p.kind) {
  case Param::Kind::Pointer:
    return p.buf.space == Space::Input ? "const void *" : "void *";
  case Param::Kind::Splits:
    return "int ";
  case Param::Kind::TensorMapA:
  case Param::Kind::TensorMapB:
  case Param::Kind::TensorMapOut:
  case Param::Kind::TensorMapA2:
  case Param::Kind::TensorMapTail:
    return "const __grid_constant__ lcejit::sm90::TensorMap ";
  case Param::Kind::SlabBase:
    return "void *";
  default:
    return "long long ";
  }
}

std::string KernelContext::signature() const {
  std::vector<std::string> parts;
  for (const Param &p : params_)
    parts.push_back(fmt::format("{}{}", paramCType(p), p.name));
  return fmt::format("{}", fmt::join(parts, ", "));
}

plan::LaunchDims KernelContext::launchDims() const {
  return program_.launchDims(index_, 1,
                             std::max<int64_t>(program_.loopCols, 1));
}

static std::string shapeText(const std::vector<int64_t> &shape) {
  std::vector<std::string> dims;
  for (int64_t d : shape)
    dims.push_back(d < 0 ? std::string("N") : fmt::format("{}", d));
  return fmt::format("[{}]", fmt::join(dims, ", "));
}

std::string describeBuffer(const Program &program, const BufferRef &ref) {
  auto tensor = [&](const char *what, const std::vector<plan::TensorSpec> &ts) {
    if (ref.index < 0 || static_cast<size_t>(ref.index) >= ts.size())
      return fmt::format("{} {}", what, ref.index);
    const plan::TensorSpec &t = ts[static_cast<size_t>(ref.index)];
    return fmt::format("{} {} '{}' {} {}", what, ref.index, t.name,
                       dtypeName(t.dtype), shapeText(t.shape));
  };
  switch (ref.space) {
  case Space::Input:
    return tensor("input", program.inputs);
  case Space::Output:
    return tensor("output", program.outputs);
  case Space::Workspace:
    if (ref.index >= 0 &&
        static_cast<size_t>(ref.index) < program.workspace.size())
      return fmt::format(
          "workspace {} '{}'", ref.index,
          program.workspace[static_cast<size_t>(ref.index)].name);
    return fmt::format("workspace {}", ref.index);
  }
  return "?";
}

std::string describeOperand(const Program &program, const Operand &o) {
  switch (o.kind) {
  case Operand::Kind::Row:
    return fmt::format("row operand buf[row] as {}", dtypeName(o.dtype));
  case Operand::Kind::Col:
    return fmt::format("column operand buf[col] as {}", dtypeName(o.dtype));
  case Operand::Kind::Scalar:
    return o.buf.valid()
               ? fmt::format("scalar operand buf[0] as {}", dtypeName(o.dtype))
               : fmt::format("scalar slot {} (double)", o.slot);
  case Operand::Kind::Partials:
    return fmt::format(
        "partials of kernel {} at slot {} ({}{})", o.partialsOf, o.slot,
        o.reduce >= 0
            ? plan::reduceKindName(static_cast<plan::ReduceKind>(o.reduce))
            : "?",
        o.component == Operand::Component::Max       ? ", its max m"
        : o.component == Operand::Component::RestSum ? ", its t = sum exp(x - m) - 1"
                                                     : "");
  case Operand::Kind::Acc:
    return "the f32 accumulator";
  case Operand::Kind::ColIndex:
    return "the global column index (i64)";
  case Operand::Kind::RowIndex:
    return "the row index (i64)";
  }
  (void)program;
  return "?";
}

void ParamRoles::add(const std::string &param, const std::string &role) {
  std::string &r = roles_[param];
  if (r.find(role) != std::string::npos)
    return;
  r = r.empty() ? role : r + "; " + role;
}

void emitKernelHeader(CodeWriter &w, const KernelContext &ctx,
                      const std::vector<std::string> &about,
                      const ParamRoles &roles) {
  w.rule();
  w.comment(fmt::format("Kernel {}: {} ({})", ctx.index(), ctx.name(),
                        plan::kernelKindName(ctx.kernel().kind())));
  for (const std::string &line : about)
    w.comment(fmt::format("  {}", line));
  w.comment("Parameters (plan::kernelParams order):");
  size_t width = 0;
  for (const Param &p : ctx.params())
    width = std::max(width, p.name.size());
  for (const Param &p : ctx.params()) {
    std::string role;
    auto it = roles.roles().find(p.name);
    if (it != roles.roles().end())
      role = it->second;
    switch (p.kind) {
    case Param::Kind::Pointer: {
      std::string where = describeBuffer(ctx.program(), p.buf);
      role = role.empty() ? where : fmt::format("{}: {}", role, where);
      break;
    }
    case Param::Kind::N:
      role = "rows of this launch (N, or the rows of this row block)";
      break;
    case Param::Kind::TotalRows:
      role = "N of the whole call";
      break;
    case Param::Kind::RowBlock:
      role = "index of this row block (0 = first)";
      break;
    case Param::Kind::ChunkBegin:
      role = "first column of this chunk";
      break;
    case Param::Kind::ChunkCols:
      role = "columns in this chunk (ld of the dZ arrays)";
      break;
    case Param::Kind::ChunkIndex:
      role = "index of this chunk (0 = first)";
      break;
    case Param::Kind::Splits:
      role = role.empty() ? "column splits (gridDim.y)" : role;
      break;
    case Param::Kind::TensorMapA:
      role = role.empty() ? "TMA map of the A operand (encoded by the executor)" : role;
      break;
    case Param::Kind::TensorMapB:
      role = role.empty() ? "TMA map of the B operand (encoded by the executor)" : role;
      break;
    case Param::Kind::TensorMapOut:
      role = role.empty() ? "TMA map of the f32 output's rows of this launch (encoded by the "
                            "executor)"
                          : role;
      break;
    case Param::Kind::AccumulateOutputs:
      role = "mask of the outputs this run adds to (bit i: output i; [Note: accumulating "
             "outputs])";
      break;
    case Param::Kind::SlabSplit:
      role = "first slab of 128 columns in slab_base, or -1: the stored values are row-major "
             "([Note: stored values in dW])";
      break;
    case Param::Kind::SlabStride:
      role = "elements between the slabs below slab_split";
      break;
    case Param::Kind::SlabBase:
      role = "the workspace's slabs (slab_head x 128 elements each), then the tails";
      break;
    case Param::Kind::TensorMapA2:
      role = "TMA map of the A operand's slabs from slab_split on (encoded by the executor)";
      break;
    case Param::Kind::SlabHead:
      role = "rows of each slab before its tail in the workspace ([Note: slab tails])";
      break;
    case Param::Kind::TensorMapTail:
      role = "TMA map of the slabs' tails (encoded by the executor; [Note: slab tails])";
      break;
    }
    w.comment(fmt::format("  {:<{}}  {}", p.name, width, role));
  }
  w.rule();
}

CodeWriter::Block openKernel(CodeWriter &w, const KernelContext &ctx,
                             int threads, int minBlocks) {
  const std::string bounds = minBlocks > 0 ? fmt::format("{}, {}", threads, minBlocks)
                                           : fmt::format("{}", threads);
  return w.block(
      fmt::format("extern \"C\" __global__ void __launch_bounds__({}) {}({})",
                  bounds, ctx.name(), ctx.signature()));
}

bool isCIdentifier(const std::string &s) {
  if (s.empty() || std::isdigit(static_cast<unsigned char>(s[0])))
    return false;
  for (char c : s)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_')
      return false;
  return true;
}

std::string sm90GemmConfigTypedef(const std::string &name, int32_t bn, int32_t stages,
                                  bool aKMajor, bool bKMajor, bool pingpong, bool tmaStore,
                                  int32_t clusterM, int32_t splitK, int32_t bm,
                                  bool halves) {
  const int32_t trailing[] = {pingpong ? 1 : 0, tmaStore ? 1 : 0, clusterM, splitK, bm,
                              halves ? 1 : 0};
  const int32_t defaults[] = {0, 0, 1, 1, 128, 0};
  size_t used = std::size(trailing);
  while (used > 0 && trailing[used - 1] == defaults[used - 1])
    --used;
  std::string args;
  for (size_t i = 0; i < used; ++i)
    args += fmt::format(", {}", trailing[i]);
  return fmt::format("typedef lcejit::sm90::GemmConfig<{}, {}, lcejit::{}, lcejit::{}{}> {};", bn,
                     stages, aKMajor ? "K_MAJOR" : "MN_MAJOR", bKMajor ? "K_MAJOR" : "MN_MAJOR",
                     args, name);
}

const char *gemmElemTag(DType t) {
  switch (t) {
  case DType::BF16:
    return "lcejit::elem_bf16";
  case DType::F16:
    return "lcejit::elem_f16";
  case DType::F32:
    return "lcejit::elem_f32";
  default:
    return nullptr;
  }
}

} // namespace lcejit::codegen::detail
