//===- Executor.cpp - Runs a plan::Program on a stream ---------------------===//

#include "runtime/Executor.h"
#include "compiler/plan/SchedulePolicy.h"
#include "compiler/support/Check.h"
#include "runtime/LaunchTrace.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>

namespace lcejit::runtime {

using plan::BufferRef;
using plan::Param;
using plan::Program;
using plan::Space;

KernelArg KernelArg::makePointer(CUdeviceptr p) {
  KernelArg a;
  a.type = Type::Pointer;
  a.value.pointer = p;
  return a;
}

KernelArg KernelArg::makeI64(int64_t v) {
  KernelArg a;
  a.type = Type::I64;
  a.value.i64 = v;
  return a;
}

KernelArg KernelArg::makeI32(int32_t v) {
  KernelArg a;
  a.type = Type::I32;
  a.value.i32 = v;
  return a;
}

KernelArg KernelArg::makeTensorMap(int64_t mapIndex) {
  KernelArg a;
  a.type = Type::TensorMap;
  a.value.i64 = mapIndex;
  return a;
}

int64_t workspaceBytes(const Program &program, int64_t n) {
  int64_t total = 0;
  program.workspaceOffsets(n, &total);
  return total;
}

int64_t errorWordOffset(const Program &program, int64_t n) {
  LCEJIT_CHECK(static_cast<int32_t>(program.workspace.size()) > plan::kErrorBuffer,
               "program '{}' has no error buffer", program.name);
  return program.workspaceOffsets(n, nullptr)[plan::kErrorBuffer];
}

namespace {

/// Resolves BufferRefs to device addresses and checks them.
class BufferResolver {
public:
  BufferResolver(const Program &program, const ProgramBuffers &buffers,
                 const plan::RunSchedule &s)
      : program_(program), buffers_(buffers), n_(s.n), sched_(s),
        offsets_(program.workspaceOffsets(s, nullptr)) {}

  /// [Note: stored values in dW] (plan/SchedulePolicy.h): a launch of the first row block
  /// of a schedule with slabs (the ordinary blocks after it see the ordinary layout).
  bool slabLaunch(const plan::LaunchItem &item) const {
    return sched_.slabGroup > 0 && item.rowBlock == 0;
  }
  const plan::RunSchedule &schedule() const { return sched_; }
  bool isSlabValues(const BufferRef &ref, const plan::LaunchItem &item) const {
    return slabLaunch(item) && ref.space == Space::Workspace &&
           ref.index == program_.schedule.slabValues;
  }
  /// Slab 0's address in the output's memory (region slabGroup of it).
  CUdeviceptr slabBase1(const plan::Kernel &kernel) const {
    const BufferRef out{Space::Output, program_.schedule.slabOutput};
    return resolve(out, kernel) + static_cast<CUdeviceptr>(sched_.slabGroup *
                                                           sched_.slabStride * 2);
  }
  /// Slab slabSplit's address (the workspace's slabs).
  CUdeviceptr slabBase2(const plan::Kernel &kernel) const {
    return resolve(BufferRef{Space::Workspace, program_.schedule.slabValues}, kernel);
  }
  /// [Note: slab tails] Rows of each slab before its tail, for a launch of the slab block
  /// (its rows when there are no tails).
  int64_t slabHead(const plan::LaunchItem &item) const {
    return std::min(sched_.slabHead, item.rows);
  }
  /// [Note: dA stream-K chains]: whether the schedule's slab block has the chain's flags
  /// and slots, whether a launch gets them, and where they are (the flags first).
  bool hasChain() const {
    return sched_.slabGroup > 0 && sched_.lhsChainBytes > 0 && program_.schedule.lhsChain >= 0;
  }
  bool chainLaunch(const plan::LaunchItem &item) const {
    return hasChain() && slabLaunch(item);
  }
  CUdeviceptr chainBase() const {
    return buffers_.workspace +
           static_cast<CUdeviceptr>(
               offsets_[static_cast<size_t>(program_.schedule.slabValues)] +
               program_.slabUnionOffset(sched_, program_.schedule.lhsChain));
  }
  /// Slab 0's tail: after the workspace's slabs (slabHead rows each).
  CUdeviceptr slabTails(const plan::Kernel &kernel, const plan::LaunchItem &item) const {
    return slabBase2(kernel) + static_cast<CUdeviceptr>((sched_.slabs - sched_.slabSplit) *
                                                        slabHead(item) * 256);
  }
  /// The address of a kernel parameter's buffer: resolve(), but with slabs the stored
  /// values start in the output's memory, and each part of the scaled A has its own place
  /// (part q at q x rows x its row bytes).
  CUdeviceptr resolveParam(const BufferRef &ref, const plan::Kernel &kernel,
                           const plan::LaunchItem &item) const {
    if (isSlabValues(ref, item))
      return slabBase1(kernel);
    // [Note: dA stream-K chains]: the chain's slots exist in the slab block of a schedule
    // that has them, after the slab union's other buffers; null for every other launch.
    if (ref.space == Space::Workspace && ref.index == program_.schedule.lhsChain)
      return chainLaunch(item) ? chainBase() : CUdeviceptr{0};
    const int64_t inUnion = slabLaunch(item) && ref.space == Space::Workspace
                                ? program_.slabUnionOffset(sched_, ref.index)
                                : -1;
    if (inUnion >= 0) {
      // The slab block's block-local buffers, in the values' buffer after the workspace's
      // slabs; the scaled A with every part at once.
      int64_t part = 0;
      if (ref.index == program_.schedule.slabScaledA) {
        if (const auto *f = std::get_if<plan::DzFormKernel>(&kernel.body); f && f->k > 0)
          part = f->aCol0 / f->k;
        else if (const auto *d = std::get_if<plan::GemmDRhsKernel>(&kernel.body); d && d->k > 0)
          part = d->outCol0 / d->k;
      }
      const plan::BufferSpec &b = program_.workspace[static_cast<size_t>(ref.index)];
      return slabBase2(kernel) + static_cast<CUdeviceptr>(inUnion + part * item.rows * b.bytesPerRow);
    }
    return resolve(ref, kernel, item.rowBegin);
  }

  /// The address of `ref` for a launch over rows [rowBegin, ...): buffers indexed by the
  /// global row start at that row ([Note: the run schedule] in Program.h).
  CUdeviceptr resolve(const BufferRef &ref, const plan::Kernel &kernel, int64_t rowBegin) const {
    CUdeviceptr p = resolve(ref, kernel);
    if (rowBegin > 0)
      p += static_cast<CUdeviceptr>(rowBegin * program_.rowStrideBytes(ref));
    return p;
  }

  bool isEmpty(const plan::TensorSpec &t) const {
    for (int64_t d : t.shape)
      if ((d < 0 ? n_ : d) == 0)
        return true;
    return false;
  }

  CUdeviceptr resolve(const BufferRef &ref, const plan::Kernel &kernel) const {
    switch (ref.space) {
    case Space::Input: {
      LCEJIT_CHECK(ref.index >= 0 && ref.index < static_cast<int32_t>(program_.inputs.size()),
                   "kernel '{}' uses input {} of {}", kernel.name, ref.index,
                   program_.inputs.size());
      CUdeviceptr p = buffers_.inputs[static_cast<size_t>(ref.index)];
      // An empty tensor (a dimension N with N = 0) may be null: nothing reads it.
      LCEJIT_CHECK_ARG(p != 0 || isEmpty(program_.inputs[static_cast<size_t>(ref.index)]),
                       "input {} ('{}') is a null pointer, but kernel '{}' reads it",
                       ref.index, program_.inputs[static_cast<size_t>(ref.index)].name,
                       kernel.name);
      return p;
    }
    case Space::Output: {
      LCEJIT_CHECK(ref.index >= 0 &&
                       ref.index < static_cast<int32_t>(program_.outputs.size()),
                   "kernel '{}' uses output {} of {}", kernel.name, ref.index,
                   program_.outputs.size());
      CUdeviceptr p = buffers_.outputs[static_cast<size_t>(ref.index)];
      LCEJIT_CHECK_ARG(p != 0 || isEmpty(program_.outputs[static_cast<size_t>(ref.index)]),
                       "output {} ('{}') is a null pointer, but kernel '{}' writes it",
                       ref.index, program_.outputs[static_cast<size_t>(ref.index)].name,
                       kernel.name);
      return p;
    }
    case Space::Workspace:
      LCEJIT_CHECK(ref.index >= 0 && ref.index < static_cast<int32_t>(offsets_.size()),
                   "kernel '{}' uses workspace buffer {} of {}", kernel.name, ref.index,
                   offsets_.size());
      return buffers_.workspace +
             static_cast<CUdeviceptr>(offsets_[static_cast<size_t>(ref.index)]);
    }
    LCEJIT_CHECK(false, "bad buffer space");
    return 0;
  }

private:
  const Program &program_;
  const ProgramBuffers &buffers_;
  int64_t n_;
  plan::RunSchedule sched_;
  std::vector<int64_t> offsets_;
};

/// The two operands of a WgmmaBF16 GEMM launch (see the table in Executor.h).
std::vector<Sm90Operand> wgmmaOperands(const Program &program, const BufferResolver &resolver,
                                       const plan::Kernel &kernel, const plan::LaunchItem &item) {
  const int32_t bn = plan::gemmTile(kernel).bn;
  auto at = [&](const BufferRef &b) { return resolver.resolveParam(b, kernel, item); };
  const int64_t rows = item.rows, cc = item.chunkCols;
  const plan::RunSchedule &sched = resolver.schedule();
  switch (kernel.kind()) {
  case plan::KernelKind::GemmReduce: {
    const auto &g = std::get<plan::GemmReduceKernel>(kernel.body).gemm;
    // [Note: sm90 multicast]: with clusterM = 2 B is copied in halves of bn / 2 rows.
    return {Sm90Operand{at(g.a), true, rows, g.k, g.k, 128},
            Sm90Operand{at(g.b), true, g.cols, g.k, g.k, bn / g.tile.clusterM}};
  }
  case plan::KernelKind::GemmDz: {
    const auto &g = std::get<plan::GemmDzKernel>(kernel.body).gemm;
    const CUdeviceptr b =
        at(g.b) + static_cast<CUdeviceptr>(item.chunkBegin * g.k * dtypeSize(g.abType));
    return {Sm90Operand{at(g.a), true, rows, g.k, g.k, 128},
            Sm90Operand{b, true, cc, g.k, g.k, bn}};
  }
  case plan::KernelKind::GemmDLhs: {
    const auto &d = std::get<plan::GemmDLhsKernel>(kernel.body);
    const CUdeviceptr b =
        at(d.b) + static_cast<CUdeviceptr>(item.chunkBegin * d.k * dtypeSize(d.bType));
    if (d.slabs && resolver.isSlabValues(d.dz, item)) {
      // [Note: stored values in dW]: the slabs below slabSplit in the output's memory, the
      // rest in the workspace (the second map, TensorMapA2, at 2), each of `head` rows;
      // the rows past it in the tails ([Note: slab tails]; TensorMapTail, last).
      const int64_t head = resolver.slabHead(item);
      Sm90Operand a1{resolver.slabBase1(kernel), true, head, sched.slabSplit * 128, 128, 128};
      a1.slabs = sched.slabSplit;
      a1.slabStride = sched.slabStride;
      Sm90Operand a2{resolver.slabBase2(kernel), true, head,
                     (sched.slabs - sched.slabSplit) * 128, 128, 128};
      a2.slabs = sched.slabs - sched.slabSplit;
      a2.slabStride = head * 128;
      Sm90Operand tail = a2; // no tails: any valid map
      if (rows > head) {
        tail = Sm90Operand{resolver.slabTails(kernel, item), true, rows - head,
                           sched.slabs * 128, 128, 128};
        tail.slabs = sched.slabs;
        tail.slabStride = (rows - head) * 128;
      }
      return {a1, Sm90Operand{b, false, d.k, cc, d.k, bn}, a2, tail};
    }
    std::vector<Sm90Operand> ops = {Sm90Operand{at(d.dz), true, rows, cc, cc, 128},
                                    Sm90Operand{b, false, d.k, cc, d.k, bn}};
    if (d.slabs) { // the second and the tails' map parameters, unused: any valid map
      ops.push_back(ops[0]);
      ops.push_back(ops[0]);
    }
    return ops;
  }
  case plan::KernelKind::GemmDRhs: {
    const auto &d = std::get<plan::GemmDRhsKernel>(kernel.body);
    std::vector<Sm90Operand> ops = {Sm90Operand{at(d.dz), false, cc, rows, cc, 128},
                                    Sm90Operand{at(d.a), false, d.k, rows, d.k, bn}};
    // The tails' map (TensorMapTail, last): any valid map where there are none.
    Sm90Operand tail = ops[0];
    if (d.slabs && resolver.isSlabValues(d.dz, item)) {
      // [Note: stored values in dW]: this launch's slabs [a, b), their first `head` rows
      // all in one place, the rest in their tails ([Note: slab tails]).
      const int64_t a = item.chunkBegin / plan::kSlabCols;
      const int64_t nslabs = (cc + plan::kSlabCols - 1) / plan::kSlabCols;
      const int64_t head = resolver.slabHead(item);
      const bool inWorkspace = a >= sched.slabSplit;
      LCEJIT_CHECK(inWorkspace || a + nslabs <= sched.slabSplit,
                   "kernel '{}': a dB launch over slabs [{}, {}) crosses slab {}", kernel.name,
                   a, a + nslabs, sched.slabSplit);
      Sm90Operand sl{inWorkspace
                         ? resolver.slabBase2(kernel) +
                               static_cast<CUdeviceptr>((a - sched.slabSplit) * head * 256)
                         : resolver.slabBase1(kernel) +
                               static_cast<CUdeviceptr>(a * sched.slabStride * 2),
                     false, cc, head, 128, 128};
      sl.slabs = nslabs;
      sl.slabStride = inWorkspace ? head * 128 : sched.slabStride;
      ops[0] = sl;
      if (rows > head) {
        tail = Sm90Operand{resolver.slabTails(kernel, item) +
                               static_cast<CUdeviceptr>(a * (rows - head) * 256),
                           false, cc, rows - head, 128, 128};
        tail.slabs = nslabs;
        tail.slabStride = (rows - head) * 128;
      } else {
        tail = sl;
      }
    }
    if (d.tile.tmaStore) {
      // [Note: sm90 output map]: the chunk's rows of the f32 out (its columns [outCol0,
      // outCol0 + k) of rows outLd wide: [Note: a scaled A in column parts]).
      const int64_t ld = d.outLd > 0 ? d.outLd : d.k;
      Sm90Operand out{at(d.out) + static_cast<CUdeviceptr>((item.chunkBegin * ld + d.outCol0) * 4),
                      true, cc, d.k, ld, 64};
      out.f32Out = true;
      ops.push_back(out);
    }
    if (d.slabs)
      ops.push_back(tail);
    return ops;
  }
  default: break;
  }
  LCEJIT_CHECK(false, "kernel '{}' is not a GEMM", kernel.name);
  return {};
}

/// plan::kernelParams() of each kernel of a Program, built on first use: a run has up to
/// a few hundred launches of about ten kernels, and each list formats its parameters'
/// names (building one a launch was half of prepareRun's time).
class KernelParamCache {
public:
  explicit KernelParamCache(const Program &program)
      : program_(program), lists_(program.kernels.size()) {}
  const std::vector<Param> &of(int32_t kernel) {
    std::optional<std::vector<Param>> &l = lists_[static_cast<size_t>(kernel)];
    if (!l)
      l = plan::kernelParams(program_.kernels[static_cast<size_t>(kernel)]);
    return *l;
  }

private:
  const Program &program_;
  std::vector<std::optional<std::vector<Param>>> lists_;
};

void appendLaunch(const Program &program, const BufferResolver &resolver,
                  const plan::LaunchItem &item, int64_t n, uint64_t accumulateOutputs,
                  KernelParamCache &params, ExecutionPlan &plan) {
  const int32_t k = item.kernel;
  LCEJIT_CHECK(k >= 0 && k < static_cast<int32_t>(program.kernels.size()), "kernel index {}",
               k);
  const plan::Kernel &kernel = program.kernels[static_cast<size_t>(k)];
  LaunchRecord rec;
  rec.kernel = k;
  rec.chunk = program.steps[static_cast<size_t>(item.step)].kind == plan::Step::Kind::ChunkLoop
                  ? item.chunkIndex
                  : -1;
  rec.rowBlock = item.rowBlock;
  rec.dims = program.launchDims(k, item.rows, item.chunkCols, item.splits,
                                resolver.chainLaunch(item));
  const int64_t *g = rec.dims.grid;
  if (g[0] == 0 || g[1] == 0 || g[2] == 0) {
    ++plan.skippedLaunches;
    return;
  }
  LCEJIT_CHECK(g[0] > 0 && g[0] <= std::numeric_limits<int32_t>::max() && g[1] > 0 &&
                   g[1] <= 65535 && g[2] > 0 && g[2] <= 65535,
               "kernel '{}': grid ({}, {}, {}) is out of the CUDA limits", kernel.name, g[0],
               g[1], g[2]);
  LCEJIT_CHECK(rec.dims.cluster >= 1 && g[0] % rec.dims.cluster == 0,
               "kernel '{}': grid x {} is not a multiple of its cluster size {}", kernel.name,
               g[0], rec.dims.cluster);
  LCEJIT_CHECK(rec.dims.block > 0 && rec.dims.block <= 1024 && rec.dims.sharedBytes >= 0,
               "kernel '{}': block {} shared {}", kernel.name, rec.dims.block,
               rec.dims.sharedBytes);
  const bool wgmma = plan::isGemmKind(kernel.kind()) &&
                     plan::gemmMath(kernel) == plan::MathMode::WgmmaBF16;
  if (wgmma)
    rec.maps = wgmmaOperands(program, resolver, kernel, item);
  for (const Param &p : params.of(k)) {
    switch (p.kind) {
    case Param::Kind::TensorMapA: rec.args.push_back(KernelArg::makeTensorMap(0)); break;
    case Param::Kind::TensorMapB: rec.args.push_back(KernelArg::makeTensorMap(1)); break;
    case Param::Kind::TensorMapOut: rec.args.push_back(KernelArg::makeTensorMap(2)); break;
    case Param::Kind::TensorMapA2: // dA's: A, B, A2, the tails
      LCEJIT_CHECK(rec.maps.size() == 4, "kernel '{}': {} maps for a dA over slabs",
                   kernel.name, rec.maps.size());
      rec.args.push_back(KernelArg::makeTensorMap(2));
      break;
    case Param::Kind::TensorMapTail: // [Note: slab tails]: the last map
      rec.args.push_back(KernelArg::makeTensorMap(static_cast<int64_t>(rec.maps.size()) - 1));
      break;
    case Param::Kind::SlabHead:
      rec.args.push_back(KernelArg::makeI64(resolver.slabLaunch(item) ? resolver.slabHead(item)
                                                                      : item.rows));
      break;
    case Param::Kind::Pointer:
      rec.args.push_back(KernelArg::makePointer(resolver.resolveParam(p.buf, kernel, item)));
      break;
    case Param::Kind::SlabSplit: {
      // [Note: stored values in dW]: -1 for the ordinary layout; a dB launch reads all its
      // slabs through its one map.
      int64_t split = -1;
      if (resolver.slabLaunch(item))
        split = kernel.kind() == plan::KernelKind::GemmDRhs
                    ? (item.chunkCols + plan::kSlabCols - 1) / plan::kSlabCols
                    : resolver.schedule().slabSplit;
      rec.args.push_back(KernelArg::makeI64(split));
      break;
    }
    case Param::Kind::SlabStride:
      rec.args.push_back(KernelArg::makeI64(resolver.schedule().slabStride));
      break;
    case Param::Kind::SlabBase:
      rec.args.push_back(KernelArg::makePointer(
          resolver.slabLaunch(item) ? resolver.slabBase2(kernel)
                              : resolver.resolve(BufferRef{Space::Workspace,
                                                           program.schedule.slabValues},
                                                 kernel)));
      break;
    case Param::Kind::N: rec.args.push_back(KernelArg::makeI64(item.rows)); break;
    case Param::Kind::TotalRows: rec.args.push_back(KernelArg::makeI64(n)); break;
    case Param::Kind::ChunkBegin: rec.args.push_back(KernelArg::makeI64(item.chunkBegin)); break;
    case Param::Kind::ChunkCols: rec.args.push_back(KernelArg::makeI64(item.chunkCols)); break;
    case Param::Kind::ChunkIndex: rec.args.push_back(KernelArg::makeI64(item.chunkIndex)); break;
    case Param::Kind::RowBlock: rec.args.push_back(KernelArg::makeI64(item.rowBlock)); break;
    case Param::Kind::Splits: rec.args.push_back(KernelArg::makeI32(item.splits)); break;
    case Param::Kind::AccumulateOutputs:
      rec.args.push_back(KernelArg::makeI64(static_cast<int64_t>(accumulateOutputs)));
      break;
    }
  }
  plan.launches.push_back(std::move(rec));
}

} // namespace

namespace {
void checkRows(const Program &program, int64_t n) {
  LCEJIT_CHECK_ARG(n >= 0, "N = {} is negative", n);
  if (program.bucket > 0)
    LCEJIT_CHECK_ARG(n >= program.bucketLow && n <= program.bucket,
                     "N = {} is outside the bucket [{}, {}] program '{}' was planned for", n,
                     program.bucketLow, program.bucket, program.name);
}
} // namespace

ExecutionPlan planExecution(const Program &program, const ProgramBuffers &buffers, int64_t n) {
  checkRows(program, n);
  return planExecution(program, buffers, program.runSchedule(n));
}

ExecutionPlan planExecution(const Program &program, const ProgramBuffers &buffers,
                            const plan::RunSchedule &sched) {
  const int64_t n = sched.n;
  checkRows(program, n);
  LCEJIT_CHECK_ARG(buffers.inputs.size() == program.inputs.size(),
                   "program '{}' takes {} input pointer(s), got {}", program.name,
                   program.inputs.size(), buffers.inputs.size());
  LCEJIT_CHECK_ARG(buffers.outputs.size() == program.outputs.size(),
                   "program '{}' takes {} output pointer(s), got {}", program.name,
                   program.outputs.size(), buffers.outputs.size());
  int64_t total = 0;
  std::vector<int64_t> offsets = program.workspaceOffsets(sched, &total);
  if (total > 0) {
    LCEJIT_CHECK_ARG(buffers.workspace != 0, "workspace is a null pointer; program '{}' needs "
                                             "{} bytes of workspace for N = {}",
                     program.name, total, n);
    LCEJIT_CHECK_ARG(buffers.workspace % 256 == 0,
                     "workspace pointer 0x{:x} is not 256-byte aligned", buffers.workspace);
    LCEJIT_CHECK_ARG(buffers.workspaceBytes >= total,
                     "workspace of {} bytes is too small: program '{}' needs {} bytes for "
                     "N = {}",
                     buffers.workspaceBytes, program.name, total, n);
  }

  checkAccumulateMask(program, buffers.accumulateOutputs, plan::accumulableOutputs(program));

  ExecutionPlan plan;
  plan.schedule = sched;
  // Zero-initialized buffers; each one's slot runs to the next offset (its 256-byte
  // padding included), so adjacent zeroed buffers merge into one memset.
  for (size_t i = 0; i < program.workspace.size(); ++i) {
    if (program.workspace[i].init != plan::BufferInit::Zero)
      continue;
    int64_t begin = offsets[i];
    int64_t end = i + 1 < offsets.size() ? offsets[i + 1] : total;
    if (end <= begin)
      continue;
    CUdeviceptr p = buffers.workspace + static_cast<CUdeviceptr>(begin);
    if (!plan.memsets.empty() &&
        plan.memsets.back().pointer + static_cast<CUdeviceptr>(plan.memsets.back().bytes) == p)
      plan.memsets.back().bytes += end - begin;
    else
      plan.memsets.push_back(MemsetRecord{p, end - begin});
  }

  // [Note: stored values in dW]: whole slabs only (dA reads a slab's 128 columns as K;
  // a partial one would need its columns past the last zeroed).
  LCEJIT_CHECK(sched.slabGroup == 0 || sched.slabs * plan::kSlabCols == program.loopCols,
               "program '{}': slabs of {} columns for {} columns", program.name, plan::kSlabCols,
               program.loopCols);
  BufferResolver resolver(program, buffers, sched);
  // [Note: dA stream-K chains]: the chain's flags start at 0 in every call (the slab
  // union's memory is another schedule's in other calls).
  if (resolver.hasChain())
    plan.memsets.push_back(MemsetRecord{resolver.chainBase(), plan::kChainFlagBytes});
  KernelParamCache params(program);
  for (const plan::LaunchItem &item : program.expand(sched))
    appendLaunch(program, resolver, item, n, buffers.accumulateOutputs, params, plan);
  return plan;
}

void checkAccumulateMask(const Program &program, uint64_t mask, uint64_t accumulable) {
  if ((mask & ~accumulable) == 0)
    return;
  for (size_t i = 0; i < 64; ++i) {
    if (!((mask & ~accumulable) >> i & 1))
      continue;
    LCEJIT_CHECK_ARG(i < program.outputs.size(),
                     "accumulate: program '{}' has {} outputs, no output {} to add to",
                     program.name, program.outputs.size(), i);
    LCEJIT_CHECK_ARG(false,
                     "accumulate: output {} ('{}') of program '{}' cannot be added to: it is "
                     "not a gradient written by the backward GEMMs or their cast (only those "
                     "read the old value)",
                     i, program.outputs[i].name, program.name);
  }
}

//===----------------------------------------------------------------------===//
// The error word
//===----------------------------------------------------------------------===//

DeviceErrors decodeErrorWord(const int64_t word[4]) {
  DeviceErrors e;
  const uint64_t w0 = static_cast<uint64_t>(word[0]), w1 = static_cast<uint64_t>(word[1]);
  if (w0 != 0) {
    // [0] = ~(row << 32 | low half), [1] = ~(row << 32 | high half): lcejit_common.cuh.
    const uint64_t k0 = ~w0, k1 = ~w1;
    LCEJIT_CHECK(w1 != 0 && (k0 >> 32) == (k1 >> 32),
                 "the error word's two halves of the bad row disagree (0x{:016x}, 0x{:016x})",
                 w0, w1);
    e.badRow = static_cast<int64_t>(k0 >> 32);
    e.badValue = static_cast<int64_t>(((k1 & 0xFFFFFFFFull) << 32) | (k0 & 0xFFFFFFFFull));
  }
  const uint64_t w2 = static_cast<uint64_t>(word[2]);
  if (w2 != 0) {
    e.contract = static_cast<int32_t>(w2 >> 32);
    e.kernel = static_cast<int32_t>(static_cast<uint32_t>(w2 & 0xFFFFFFFFull)) - 1;
    e.had = static_cast<uint64_t>(word[3]);
  }
  return e;
}

std::string describeContractViolation(const Program &program, const DeviceErrors &e) {
  const bool known = e.kernel >= 0 && e.kernel < static_cast<int32_t>(program.kernels.size());
  const std::string who =
      known ? fmt::format("kernel '{}' (kernel {} of program '{}')",
                          program.kernels[static_cast<size_t>(e.kernel)].name, e.kernel,
                          program.name)
            : fmt::format("kernel {} (not a kernel of program '{}')", e.kernel, program.name);
  const plan::LaunchDims want =
      known ? program.launchDims(e.kernel, 1, std::max<int64_t>(program.loopCols, 1))
            : plan::LaunchDims{};
  const uint64_t h = e.had;
  switch (e.contract) {
  case 1:
    return fmt::format("{} was launched with blocks of {} x {} x {} threads; its launch "
                       "contract wants {} x 1 x 1",
                       who, h & 0xFFFF, (h >> 16) & 0xFFFF, (h >> 32) & 0xFFFF, want.block);
  case 2:
    return fmt::format("{} was launched with {} bytes of dynamic shared memory; its launch "
                       "contract needs {}",
                       who, h, want.sharedBytes);
  case 3:
    return fmt::format("{} was launched with a grid of {} x {} x {} blocks, not the grid its "
                       "launch contract (Program::launchDims) gives for its rows and columns",
                       who, h & 0x7FFFFFFF, (h >> 31) & 0xFFFF, (h >> 47) & 0xFFFF);
  default: break;
  }
  return fmt::format("{} reported launch-contract violation {} (0x{:x})", who, e.contract, h);
}

//===----------------------------------------------------------------------===//
// Prepared runs ([Note: prepared runs] in Executor.h)
//===----------------------------------------------------------------------===//

namespace {

/// prepareRun plans with a synthetic address per base: base b at (b + 1) << 40. Every
/// pointer planExecution derives is a base plus an offset below 2^40 (1 TiB), so the
/// base and the offset are read back from the address.
constexpr int kBaseShift = 40;
constexpr uint64_t kOffsetMask = (uint64_t(1) << kBaseShift) - 1;
constexpr size_t kMaxBases = 64;
constexpr size_t kMaxKernelArgs = 64;

CUdeviceptr syntheticBase(size_t b) { return static_cast<CUdeviceptr>(b + 1) << kBaseShift; }

PreparedRun::Reloc relocOf(CUdeviceptr p, size_t numBases) {
  PreparedRun::Reloc r;
  const uint64_t b = (static_cast<uint64_t>(p) >> kBaseShift);
  LCEJIT_CHECK(b >= 1 && b <= numBases, "prepareRun: address 0x{:x} is not of a buffer", p);
  r.base = static_cast<int32_t>(b - 1);
  r.offset = static_cast<uint64_t>(p) & kOffsetMask;
  return r;
}

bool tensorEmptyAt(const plan::TensorSpec &t, int64_t n) {
  for (int64_t d : t.shape)
    if ((d < 0 ? n : d) == 0)
      return true;
  return false;
}

} // namespace

PreparedRun prepareRun(const Program &program, int64_t n, bool outputFree) {
  PreparedRun r;
  r.n = n;
  r.outputFree = outputFree;
  r.numInputs = static_cast<int32_t>(program.inputs.size());
  r.numOutputs = static_cast<int32_t>(program.outputs.size());
  const size_t numBases = program.inputs.size() + program.outputs.size() + 1;
  LCEJIT_CHECK(numBases <= kMaxBases, "program '{}' has {} buffers, more than {}", program.name,
               numBases, kMaxBases);
  ProgramBuffers synthetic;
  size_t b = 0;
  for (size_t i = 0; i < program.inputs.size(); ++i)
    synthetic.inputs.push_back(syntheticBase(b++));
  for (size_t i = 0; i < program.outputs.size(); ++i)
    synthetic.outputs.push_back(syntheticBase(b++));
  synthetic.workspace = syntheticBase(b);
  // The run schedule once (its estimate ranks candidate blocks: [Note: estimated run time]):
  // the workspace's size, the launches and the error word's offset all follow from it.
  checkRows(program, n);
  LCEJIT_CHECK(static_cast<int32_t>(program.workspace.size()) > plan::kErrorBuffer,
               "program '{}' has no error buffer", program.name);
  const plan::RunSchedule sched = program.runSchedule(n, outputFree);
  const std::vector<int64_t> offsets = program.workspaceOffsets(sched, &r.workspaceBytes);
  synthetic.workspaceBytes = r.workspaceBytes;
  ExecutionPlan plan = planExecution(program, synthetic, sched);
  r.schedule = plan.schedule;
  r.skippedLaunches = plan.skippedLaunches;
  r.errorWordOffset = offsets[plan::kErrorBuffer];
  r.baseUsed.assign(numBases, 0);
  r.baseMayBeNull.assign(numBases, 0);
  for (size_t i = 0; i < program.inputs.size(); ++i)
    r.baseMayBeNull[i] = tensorEmptyAt(program.inputs[i], n);
  for (size_t i = 0; i < program.outputs.size(); ++i)
    r.baseMayBeNull[program.inputs.size() + i] = tensorEmptyAt(program.outputs[i], n);
  auto use = [&](CUdeviceptr p) {
    PreparedRun::Reloc rel = relocOf(p, numBases);
    r.baseUsed[static_cast<size_t>(rel.base)] = 1;
    return rel;
  };
  for (const MemsetRecord &m : plan.memsets)
    r.memsets.push_back(PreparedRun::Memset{use(m.pointer), m.bytes});
  KernelParamCache paramCache(program);
  for (LaunchRecord &rec : plan.launches) {
    PreparedRun::Launch l;
    l.kernel = rec.kernel;
    l.chunk = rec.chunk;
    l.rowBlock = rec.rowBlock;
    l.dims = rec.dims;
    LCEJIT_CHECK(rec.args.size() <= kMaxKernelArgs, "kernel '{}' takes {} arguments",
                 program.kernels[static_cast<size_t>(rec.kernel)].name, rec.args.size());
    // A null pointer stays null ([Note: dA stream-K chains]: the chain's slots outside the
    // slab block).
    for (const KernelArg &a : rec.args)
      l.argRelocs.push_back(a.type == KernelArg::Type::Pointer && a.value.pointer != 0
                                ? use(a.value.pointer)
                                : PreparedRun::Reloc{});
    l.args = std::move(rec.args);
    for (const Sm90Operand &op : rec.maps)
      l.operandRelocs.push_back(use(op.data));
    l.operands = std::move(rec.maps);
    l.maps.resize(l.operands.size());
    const std::vector<Param> &params = paramCache.of(l.kernel);
    for (size_t i = 0; i < params.size(); ++i)
      if (params[i].kind == Param::Kind::AccumulateOutputs)
        l.accumulateArg = static_cast<int32_t>(i);
    r.launches.push_back(std::move(l));
  }
  r.bound.assign(numBases, 0);
  r.accumulable = plan::accumulableOutputs(program);
  return r;
}

void bindRun(PreparedRun &r, const Program &program, const CUdeviceptr *inputs,
             size_t numInputs, const CUdeviceptr *outputs, size_t numOutputs,
             CUdeviceptr workspace, int64_t workspaceBytes, uint64_t accumulateOutputs) {
  LCEJIT_CHECK_ARG(numInputs == static_cast<size_t>(r.numInputs),
                   "program '{}' takes {} input pointer(s), got {}", program.name, r.numInputs,
                   numInputs);
  LCEJIT_CHECK_ARG(numOutputs == static_cast<size_t>(r.numOutputs),
                   "program '{}' takes {} output pointer(s), got {}", program.name,
                   r.numOutputs, numOutputs);
  if (r.workspaceBytes > 0) {
    LCEJIT_CHECK_ARG(workspace != 0, "workspace is a null pointer; program '{}' needs "
                                     "{} bytes of workspace for N = {}",
                     program.name, r.workspaceBytes, r.n);
    LCEJIT_CHECK_ARG(workspace % 256 == 0, "workspace pointer 0x{:x} is not 256-byte aligned",
                     workspace);
    LCEJIT_CHECK_ARG(workspaceBytes >= r.workspaceBytes,
                     "workspace of {} bytes is too small: program '{}' needs {} bytes for "
                     "N = {}",
                     workspaceBytes, program.name, r.workspaceBytes, r.n);
  }
  const size_t numBases = r.bound.size();
  auto pointerOf = [&](size_t b) {
    const bool isInput = b < numInputs, isOutput = !isInput && b < numInputs + numOutputs;
    return isInput ? inputs[b] : isOutput ? outputs[b - numInputs] : workspace;
  };
  // Every check before anything changes: a bind that throws leaves the run as it was
  // (bound pointers and arguments agree), so the next call re-points what it must.
  for (size_t b = 0; b < numInputs + numOutputs && b < numBases; ++b) {
    if (pointerOf(b) != 0 || !r.baseUsed[b] || r.baseMayBeNull[b])
      continue;
    if (b < numInputs)
      LCEJIT_CHECK_ARG(false, "input {} ('{}') is a null pointer, but a kernel of '{}' reads it",
                       b, program.inputs[b].name, program.name);
    LCEJIT_CHECK_ARG(false, "output {} ('{}') is a null pointer, but a kernel of '{}' writes it",
                     b - numInputs, program.outputs[b - numInputs].name, program.name);
  }
  checkAccumulateMask(program, accumulateOutputs, r.accumulable);
  LCEJIT_CHECK(r.schedule.slabGroup == 0 || program.schedule.slabOutput < 0 ||
                   !(accumulateOutputs >> program.schedule.slabOutput & 1),
               "a run of '{}' prepared to overwrite output {} bound to add to it",
               program.name, program.schedule.slabOutput);
  bool changed[kMaxBases] = {};
  bool any = false;
  for (size_t b = 0; b < numBases; ++b) {
    const CUdeviceptr p = pointerOf(b);
    if (p != r.bound[b] || r.binds == 0) {
      changed[b] = true;
      any = true;
      r.bound[b] = p;
    }
  }
  r.boundWorkspaceBytes = workspaceBytes;
  // [Note: accumulating outputs] The mask is a plain argument: rewritten in place.
  if (accumulateOutputs != r.boundAccumulate || r.binds == 0) {
    r.boundAccumulate = accumulateOutputs;
    for (PreparedRun::Launch &l : r.launches)
      if (l.accumulateArg >= 0)
        l.args[static_cast<size_t>(l.accumulateArg)].value.i64 =
            static_cast<int64_t>(accumulateOutputs);
  }
  if (!any)
    return;
  ++r.binds;
  for (PreparedRun::Launch &l : r.launches) {
    for (size_t i = 0; i < l.args.size(); ++i) {
      const PreparedRun::Reloc &rel = l.argRelocs[i];
      if (rel.base >= 0 && changed[rel.base])
        l.args[i].value.pointer = r.bound[static_cast<size_t>(rel.base)] + rel.offset;
    }
    for (size_t i = 0; i < l.operands.size(); ++i) {
      const PreparedRun::Reloc &rel = l.operandRelocs[i];
      if (!changed[rel.base])
        continue;
      l.operands[i].data = r.bound[static_cast<size_t>(rel.base)] + rel.offset;
      l.maps[i] = encodeSm90Operand(l.operands[i]);
      ++r.mapEncodes;
    }
  }
}

//===----------------------------------------------------------------------===//
// Executor
//===----------------------------------------------------------------------===//

Executor::Executor(Program program, const Module &module)
    : Executor(std::move(program), std::vector<const Module *>()) {
  LCEJIT_CHECK(module.loaded(), "Executor for '{}' given an unloaded module", program_.name);
  for (const plan::Kernel &k : program_.kernels) {
    modules_.push_back(&module);
    functions_.push_back(module.function(k.name));
  }
}

Executor::Executor(Program program, std::vector<const Module *> moduleOfKernel,
                   std::vector<std::string> entryOfKernel)
    : program_(std::move(program)), modules_(std::move(moduleOfKernel)) {
  if (modules_.empty())
    return; // the one-module constructor fills both lists
  LCEJIT_CHECK(modules_.size() == program_.kernels.size(),
               "Executor for '{}': {} modules for {} kernels", program_.name, modules_.size(),
               program_.kernels.size());
  LCEJIT_CHECK(entryOfKernel.empty() || entryOfKernel.size() == program_.kernels.size(),
               "Executor for '{}': {} entry points for {} kernels", program_.name,
               entryOfKernel.size(), program_.kernels.size());
  for (size_t i = 0; i < modules_.size(); ++i) {
    LCEJIT_CHECK(modules_[i] && modules_[i]->loaded(),
                 "Executor for '{}': kernel '{}' has no loaded module", program_.name,
                 program_.kernels[i].name);
    functions_.push_back(modules_[i]->function(entryOfKernel.empty() ? program_.kernels[i].name
                                                                     : entryOfKernel[i]));
  }
}

void Executor::run(const ProgramBuffers &buffers, int64_t n, CUstream stream) const {
  PreparedRun r = prepare(n);
  bindRun(r, program_, buffers.inputs.data(), buffers.inputs.size(), buffers.outputs.data(),
          buffers.outputs.size(), buffers.workspace, buffers.workspaceBytes,
          buffers.accumulateOutputs);
  launch(r, stream);
}

PreparedRun Executor::prepare(int64_t n, bool outputFree) const {
  PreparedRun r = prepareRun(program_, n, outputFree);
  for (const PreparedRun::Launch &l : r.launches)
    modules_[static_cast<size_t>(l.kernel)]->reserveDynamicShared(
        functions_[static_cast<size_t>(l.kernel)], l.dims.sharedBytes);
  return r;
}

void Executor::launch(const PreparedRun &r, CUstream stream) const {
  LCEJIT_CHECK(r.binds > 0, "launch of a prepared run of program '{}' that was never bound",
               program_.name);
  const CudaDriver &d = cudaDriver();
  for (const PreparedRun::Memset &m : r.memsets)
    LCEJIT_CU(d.memsetD8Async(r.bound[static_cast<size_t>(m.at.base)] + m.at.offset, 0,
                              static_cast<size_t>(m.bytes), stream));
  void *params[kMaxKernelArgs];
  const bool trace = launchTraceOn(); // [Note: launch trace]
  for (const PreparedRun::Launch &l : r.launches) {
    CUfunction f = functions_[static_cast<size_t>(l.kernel)];
    for (size_t i = 0; i < l.args.size(); ++i) {
      const KernelArg &a = l.args[i];
      params[i] = a.type == KernelArg::Type::TensorMap
                      ? const_cast<CUtensorMap *>(&l.maps[static_cast<size_t>(a.value.i64)])
                      : const_cast<void *>(static_cast<const void *>(&a.value));
    }
    CUlaunchConfig cfg{};
    cfg.gridDimX = static_cast<unsigned>(l.dims.grid[0]);
    cfg.gridDimY = static_cast<unsigned>(l.dims.grid[1]);
    cfg.gridDimZ = static_cast<unsigned>(l.dims.grid[2]);
    cfg.blockDimX = static_cast<unsigned>(l.dims.block);
    cfg.blockDimY = 1;
    cfg.blockDimZ = 1;
    cfg.sharedMemBytes = static_cast<unsigned>(l.dims.sharedBytes);
    cfg.hStream = stream;
    CUlaunchAttribute cluster{};
    if (l.dims.cluster > 1) {
      // [Note: sm90 multicast]: consecutive CTAs along x form one cluster.
      cluster.id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
      cluster.value.clusterDim.x = static_cast<unsigned>(l.dims.cluster);
      cluster.value.clusterDim.y = 1;
      cluster.value.clusterDim.z = 1;
      cfg.attrs = &cluster;
      cfg.numAttrs = 1;
    } else if (l.dims.cooperative) {
      // [Note: dA stream-K]: CTAs wait on each other, so all of them must be resident; the
      // driver refuses the launch (an error, not a hang) where they cannot be.
      cluster.id = CU_LAUNCH_ATTRIBUTE_COOPERATIVE;
      cluster.value.cooperative = 1;
      cfg.attrs = &cluster;
      cfg.numAttrs = 1;
    }
    CUevent before = trace ? traceEvent(stream) : nullptr;
    CUresult res = d.launchKernelEx(&cfg, f, params, nullptr);
    if (trace)
      traceLaunch(program_.kernels[static_cast<size_t>(l.kernel)].name, l.rowBlock, l.chunk,
                  before, traceEvent(stream));
    if (res != CUDA_SUCCESS) {
      const plan::Kernel &k = program_.kernels[static_cast<size_t>(l.kernel)];
      std::string what = fmt::format(
          "cuLaunchKernelEx of kernel '{}' (row block {}, chunk {}, grid ({}, {}, {}), block {}, {} bytes "
          "dynamic shared, clusters of {}{})",
          k.name, l.rowBlock, l.chunk, l.dims.grid[0], l.dims.grid[1], l.dims.grid[2],
          l.dims.block, l.dims.sharedBytes, l.dims.cluster,
          l.dims.cooperative ? ", cooperative" : "");
      throwCudaError(res, what.c_str(), __FILE__, __LINE__);
    }
  }
}

void Executor::enqueueErrorReadback(const ProgramBuffers &buffers, int64_t n, CUstream stream,
                                    int64_t *hostErrorWord) const {
  LCEJIT_CHECK_ARG(hostErrorWord != nullptr, "hostErrorWord is null");
  LCEJIT_CHECK_ARG(buffers.workspace != 0, "workspace is a null pointer");
  int64_t off = errorWordOffset(program_, n);
  LCEJIT_CHECK_ARG(buffers.workspaceBytes >= off + plan::kErrorWordBytes,
                   "workspace of {} bytes has no error word at offset {}",
                   buffers.workspaceBytes, off);
  LCEJIT_CU(cudaDriver().memcpyDtoHAsync(hostErrorWord,
                                         buffers.workspace + static_cast<CUdeviceptr>(off),
                                         plan::kErrorWordBytes, stream));
}

void Executor::enqueueErrorReadback(const PreparedRun &r, CUstream stream,
                                    int64_t *hostErrorWord) const {
  LCEJIT_CHECK_ARG(hostErrorWord != nullptr, "hostErrorWord is null");
  const CUdeviceptr ws = r.bound.empty() ? 0 : r.bound.back();
  LCEJIT_CHECK_ARG(ws != 0 && r.boundWorkspaceBytes >= r.errorWordOffset + plan::kErrorWordBytes,
                   "the prepared run of '{}' has no workspace with an error word bound",
                   program_.name);
  LCEJIT_CU(cudaDriver().memcpyDtoHAsync(hostErrorWord,
                                         ws + static_cast<CUdeviceptr>(r.errorWordOffset),
                                         plan::kErrorWordBytes, stream));
}

} // namespace lcejit::runtime
