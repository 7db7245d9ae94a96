//===- ExecutorTest.cpp - Program execution: host planning and a GPU run ---===//
//
// The host tests check planExecution(): argument packing in kernelParams() order, chunk
// arithmetic, workspace layout, zero-init memsets, skipped launches, argument checks.
// The GPU test (skipped without a GPU) runs a hand-written Program end to end: NVRTC ->
// KernelCache -> Module -> Executor, with kernels whose signatures are generated from
// kernelParams() and that record what they were given.
//
//===----------------------------------------------------------------------===//

#include "TestSupport.h"

#include "runtime/Executor.h"
#include "runtime/LaunchTrace.h"
#include "compiler/plan/SchedulePolicy.h"
#include "runtime/KernelCache.h"
#include "runtime/Sm90Launch.h"
#include "runtime/TensorMap.h"

#include <fmt/format.h>

#include <cstring>
#include <array>
#include <numeric>

using namespace lcejit;
using namespace lcejit::runtime;
using namespace lcejit::plan;
using lcejit::testing::expectError;
using lcejit::testing::TempDir;

namespace {

BufferRef in(int32_t i) { return {Space::Input, i}; }
BufferRef out(int32_t i) { return {Space::Output, i}; }
BufferRef ws(int32_t i) { return {Space::Workspace, i}; }

Operand rowOperand(BufferRef b, DType t) {
  Operand o;
  o.kind = Operand::Kind::Row;
  o.buf = b;
  o.dtype = t;
  return o;
}

RowKernel::Sink storeRow(BufferRef b) {
  RowKernel::Sink s;
  s.kind = RowKernel::Sink::Kind::StoreRow;
  s.result = 0;
  s.buf = b;
  return s;
}

/// A Program shaped like the lean schedule (the numbers matter, not the math).
Program makeProgram() {
  Program p;
  p.name = "test";
  p.bucket = 1024;
  p.bucketLow = 257;
  p.inputs = {{"h", DType::BF16, {-1, 64}},
              {"w", DType::BF16, {1000, 64}},
              {"y", DType::I64, {-1}},
              {"unused", DType::F32, {-1}}};
  p.outputs = {{"loss", DType::F32, {}}, {"dh", DType::BF16, {-1, 64}},
               {"dw", DType::F32, {1000, 64}}};
  p.workspace = {{"scalars", 0, 64, BufferInit::Zero},
                 {"error", 0, 32, BufferInit::Zero},
                 {"partials", 8, 0, BufferInit::None},
                 {"dz", 0, 0, BufferInit::None, /*bytesPerRowCol=*/4, /*blockLocal=*/true},
                 {"dh_acc", 256, 0, BufferInit::Zero}};
  p.numScalarSlots = 8;

  RowKernel row;
  row.args = {rowOperand(in(2), DType::I64)};
  row.sinks = {storeRow(ws(2))};
  FusedGemm g;
  g.k = 64;
  g.cols = 1000;
  g.a = in(0);
  g.b = in(1);
  GemmReduceKernel reduce;
  reduce.gemm = g;
  reduce.reductions = {ReduceKind::LogSumExp};
  reduce.partials = ws(2);
  GemmDzKernel dz;
  dz.gemm = g;
  Operand partials;
  partials.kind = Operand::Kind::Partials;
  partials.buf = ws(2);
  dz.gemm.args = {Operand{}, partials};
  dz.gemm.args[0].kind = Operand::Kind::Acc;
  dz.format = DzFormat::F32;
  dz.dz = ws(3);
  GemmDLhsKernel dlhs;
  dlhs.format = DzFormat::F32;
  dlhs.k = 64;
  dlhs.dz = ws(3);
  dlhs.b = in(1);
  dlhs.out = ws(4);
  GemmDRhsKernel drhs;
  drhs.format = DzFormat::F32;
  drhs.k = 64;
  drhs.dz = ws(3);
  drhs.a = in(0);
  drhs.out = out(2);
  CastKernel cast;
  cast.in = ws(4);
  cast.out = out(1);
  cast.k = 64;
  RowKernel fin;
  fin.sinks = {storeRow(out(0))};
  fin.sinks[0].kind = RowKernel::Sink::Kind::StoreScalar;

  p.kernels = {{"row_in", row},   {"reduce", reduce}, {"dz", dz}, {"dlhs", dlhs},
               {"drhs", drhs},    {"cast", cast},     {"final", fin}};
  p.steps = {{Step::Kind::Launch, 0, {}},
             {Step::Kind::Launch, 1, {}},
             {Step::Kind::ChunkLoop, -1, {2, 3, 4}},
             {Step::Kind::Launch, 5, {}},
             {Step::Kind::Launch, 6, {}}};
  p.schedule.fixedChunkCols = 384;
  p.loopCols = 1000;
  p.splits = 3;
  return p;
}

constexpr CUdeviceptr kWs = 0x7f0000000000;

ProgramBuffers makeBuffers(const Program &p, int64_t n) {
  ProgramBuffers b;
  b.inputs = {0x1000, 0x2000, 0x3000, 0};
  b.outputs = {0x4000, 0x5000, 0x6000};
  b.workspace = kWs;
  b.workspaceBytes = workspaceBytes(p, n);
  return b;
}

int64_t round256(int64_t x) { return (x + 255) / 256 * 256; }

TEST(ExecutorPlanTest, WorkspaceLayout) {
  Program p = makeProgram();
  const int64_t n = 1000;
  std::vector<int64_t> expected = {0, 256, 512, 512 + round256(8 * n),
                                   512 + round256(8 * n) + round256(4 * 384 * n)};
  EXPECT_EQ(p.workspaceOffsets(n, nullptr), expected);
  EXPECT_EQ(workspaceBytes(p, n), expected.back() + round256(256 * n));
  EXPECT_EQ(workspaceBytes(p, n), 1800704);
  EXPECT_EQ(errorWordOffset(p, n), 256);
}

TEST(ExecutorPlanTest, ZeroInitBuffersAreMemsetAndAdjacentOnesMerged) {
  Program p = makeProgram();
  const int64_t n = 1000;
  ExecutionPlan plan = planExecution(p, makeBuffers(p, n), n);
  ASSERT_EQ(plan.memsets.size(), 2u);
  EXPECT_EQ(plan.memsets[0].pointer, kWs);
  EXPECT_EQ(plan.memsets[0].bytes, 512) << "scalars + error word in one memset";
  std::vector<int64_t> off = p.workspaceOffsets(n, nullptr);
  EXPECT_EQ(plan.memsets[1].pointer, kWs + static_cast<CUdeviceptr>(off[4]));
  EXPECT_EQ(plan.memsets[1].bytes, 256 * n);
}

TEST(ExecutorPlanTest, StepsAndChunks) {
  Program p = makeProgram();
  const int64_t n = 1000;
  ExecutionPlan plan = planExecution(p, makeBuffers(p, n), n);
  std::vector<int32_t> kernels;
  std::vector<int64_t> chunks;
  for (const LaunchRecord &r : plan.launches) {
    kernels.push_back(r.kernel);
    chunks.push_back(r.chunk);
  }
  EXPECT_EQ(kernels, (std::vector<int32_t>{0, 1, 2, 3, 4, 2, 3, 4, 2, 3, 4, 5, 6}));
  EXPECT_EQ(chunks, (std::vector<int64_t>{-1, -1, 0, 0, 0, 1, 1, 1, 2, 2, 2, -1, -1}));
  EXPECT_EQ(plan.skippedLaunches, 0);
}

/// Every launch: one argument per kernelParams() entry, of the right type, and the
/// launch geometry the Program computes for that chunk.
TEST(ExecutorPlanTest, ArgumentsFollowKernelParamsExactly) {
  Program p = makeProgram();
  const int64_t n = 1000;
  ProgramBuffers bufs = makeBuffers(p, n);
  std::vector<int64_t> off = p.workspaceOffsets(n, nullptr);
  ExecutionPlan plan = planExecution(p, bufs, n);
  for (const LaunchRecord &r : plan.launches) {
    const Kernel &k = p.kernels[static_cast<size_t>(r.kernel)];
    std::vector<Param> params = kernelParams(k);
    ASSERT_EQ(r.args.size(), params.size()) << k.name;
    const int64_t cc = plan.schedule.chunkCols;
    ASSERT_EQ(cc, 384);
    int64_t begin = r.chunk < 0 ? 0 : r.chunk * cc;
    int64_t cols = r.chunk < 0 ? p.loopCols : std::min(cc, p.loopCols - begin);
    LaunchDims d = p.launchDims(r.kernel, n, cols);
    EXPECT_EQ(std::vector<int64_t>(r.dims.grid, r.dims.grid + 3),
              std::vector<int64_t>(d.grid, d.grid + 3))
        << k.name;
    EXPECT_EQ(r.dims.block, d.block);
    EXPECT_EQ(r.dims.sharedBytes, d.sharedBytes);
    for (size_t i = 0; i < params.size(); ++i) {
      const Param &pm = params[i];
      const KernelArg &a = r.args[i];
      SCOPED_TRACE(fmt::format("{} param {} ({})", k.name, i, pm.name));
      switch (pm.kind) {
      case Param::Kind::Pointer: {
        ASSERT_EQ(a.type, KernelArg::Type::Pointer);
        CUdeviceptr expect = pm.buf.space == Space::Input ? bufs.inputs[pm.buf.index]
                             : pm.buf.space == Space::Output
                                 ? bufs.outputs[pm.buf.index]
                                 : kWs + static_cast<CUdeviceptr>(off[pm.buf.index]);
        EXPECT_EQ(a.value.pointer, expect);
        break;
      }
      case Param::Kind::N:
      case Param::Kind::TotalRows:
        ASSERT_EQ(a.type, KernelArg::Type::I64);
        EXPECT_EQ(a.value.i64, n);
        break;
      case Param::Kind::TensorMapA:
      case Param::Kind::TensorMapB:
      case Param::Kind::TensorMapOut:
      case Param::Kind::TensorMapA2:
      case Param::Kind::TensorMapTail:
      case Param::Kind::SlabSplit:
      case Param::Kind::SlabStride:
      case Param::Kind::SlabBase:
      case Param::Kind::SlabHead:
        ADD_FAILURE() << "these test Programs run mma.sync: no tensor maps, no slabs";
        break;
      case Param::Kind::RowBlock:
        ASSERT_EQ(a.type, KernelArg::Type::I64);
        EXPECT_EQ(a.value.i64, 0);
        break;
      case Param::Kind::ChunkBegin:
        ASSERT_EQ(a.type, KernelArg::Type::I64);
        EXPECT_EQ(a.value.i64, begin);
        break;
      case Param::Kind::ChunkCols:
        ASSERT_EQ(a.type, KernelArg::Type::I64);
        EXPECT_EQ(a.value.i64, cols);
        break;
      case Param::Kind::ChunkIndex:
        ASSERT_EQ(a.type, KernelArg::Type::I64);
        EXPECT_EQ(a.value.i64, std::max<int64_t>(r.chunk, 0));
        break;
      case Param::Kind::Splits:
        ASSERT_EQ(a.type, KernelArg::Type::I32);
        EXPECT_EQ(a.value.i32, 3);
        break;
      case Param::Kind::AccumulateOutputs:
        ASSERT_EQ(a.type, KernelArg::Type::I64);
        EXPECT_EQ(a.value.i64, 0) << "ProgramBuffers::accumulateOutputs defaults to 0";
        break;
      }
    }
  }
}

/// The same, spelled out for two launches, independent of kernelParams().
TEST(ExecutorPlanTest, ConcreteArgumentLists) {
  Program p = makeProgram();
  const int64_t n = 1000;
  std::vector<int64_t> off = p.workspaceOffsets(n, nullptr);
  auto wsAt = [&](int i) { return kWs + static_cast<CUdeviceptr>(off[i]); };
  ExecutionPlan plan = planExecution(p, makeBuffers(p, n), n);
  // row_in: y, partials (its sink), scalars, error, n, n_total, splits.
  const LaunchRecord &row = plan.launches[0];
  ASSERT_EQ(row.args.size(), 7u);
  EXPECT_EQ(row.args[0].value.pointer, 0x3000u);
  EXPECT_EQ(row.args[1].value.pointer, wsAt(2));
  EXPECT_EQ(row.args[2].value.pointer, wsAt(0));
  EXPECT_EQ(row.args[3].value.pointer, wsAt(1));
  EXPECT_EQ(row.args[4].value.i64, 1000);
  EXPECT_EQ(row.args[5].value.i64, 1000);
  EXPECT_EQ(row.args[6].type, KernelArg::Type::I32);
  EXPECT_EQ(row.args[6].value.i32, 3);
  // dz of the last chunk: h, w, partials, scalars, dz, error, n, n_total, chunk_begin,
  // chunk_cols.
  const LaunchRecord &dz = plan.launches[8];
  ASSERT_EQ(dz.kernel, 2);
  ASSERT_EQ(dz.args.size(), 10u);
  EXPECT_EQ(dz.args[0].value.pointer, 0x1000u);
  EXPECT_EQ(dz.args[1].value.pointer, 0x2000u);
  EXPECT_EQ(dz.args[2].value.pointer, wsAt(2));
  EXPECT_EQ(dz.args[3].value.pointer, wsAt(0));
  EXPECT_EQ(dz.args[4].value.pointer, wsAt(3));
  EXPECT_EQ(dz.args[5].value.pointer, wsAt(1)) << "the error word (launch contract)";
  EXPECT_EQ(dz.args[8].value.i64, 768);
  EXPECT_EQ(dz.args[9].value.i64, 232);
  EXPECT_EQ(dz.dims.grid[1], 2) << "ceil(232 / 128) column tiles";
  // dlhs of chunk 1: dz, w, dh_acc, error, n, chunk_begin, chunk_cols, chunk_index.
  const LaunchRecord &dlhs = plan.launches[6];
  ASSERT_EQ(dlhs.kernel, 3);
  ASSERT_EQ(dlhs.args.size(), 8u);
  EXPECT_EQ(dlhs.args[2].value.pointer, wsAt(4));
  EXPECT_EQ(dlhs.args[3].value.pointer, wsAt(1));
  EXPECT_EQ(dlhs.args[5].value.i64, 384);
  EXPECT_EQ(dlhs.args[6].value.i64, 384);
  EXPECT_EQ(dlhs.args[7].value.i64, 1);
}

TEST(ExecutorPlanTest, LaunchStepOfAChunkKernelCoversAllColumns) {
  Program p = makeProgram();
  p.steps = {{Step::Kind::Launch, 2, {}}};
  ExecutionPlan plan = planExecution(p, makeBuffers(p, 1000), 1000);
  ASSERT_EQ(plan.launches.size(), 1u);
  EXPECT_EQ(plan.launches[0].args[8].value.i64, 0);
  EXPECT_EQ(plan.launches[0].args[9].value.i64, 1000);
}

TEST(ExecutorPlanTest, ZeroRowsSkipsEmptyGrids) {
  Program p = makeProgram();
  p.bucket = 256;
  p.bucketLow = 0;
  ExecutionPlan plan = planExecution(p, makeBuffers(p, 0), 0);
  std::vector<int32_t> kernels;
  for (const LaunchRecord &r : plan.launches)
    kernels.push_back(r.kernel);
  // Row kernels keep one block; GEMMs over N rows and the cast have nothing to do;
  // dW = dZᵀ·H still runs (it writes zeros for the chunk's rows).
  EXPECT_EQ(kernels, (std::vector<int32_t>{0, 4, 4, 4, 6}));
  EXPECT_EQ(plan.skippedLaunches, 8);
}

TEST(ExecutorPlanTest, EmptyTensorsMayBeNullButOthersMayNot) {
  Program p = makeProgram();
  p.bucket = 256;
  p.bucketLow = 0;
  // N = 0: every [N, ...] input and output is empty, so null pointers are fine.
  ProgramBuffers b = makeBuffers(p, 0);
  for (size_t i = 0; i < p.inputs.size(); ++i)
    if (!p.inputs[i].shape.empty() && p.inputs[i].shape[0] == -1)
      b.inputs[i] = 0;
  for (size_t i = 0; i < p.outputs.size(); ++i)
    if (!p.outputs[i].shape.empty() && p.outputs[i].shape[0] == -1)
      b.outputs[i] = 0;
  EXPECT_NO_THROW(planExecution(p, b, 0));
  // The same null input at N = 1 is an error.
  ProgramBuffers one = makeBuffers(p, 1);
  one.inputs[2] = 0;
  std::string msg = expectError(ErrorKind::InvalidArgument, [&] { planExecution(p, one, 1); });
  EXPECT_NE(msg.find("'y'"), std::string::npos) << msg;
}

/// A prepared run bound to buffers launches exactly what planExecution plans for them,
/// and rebinding to other buffers re-points every pointer in place.
void expectSameRun(const Program &p, const PreparedRun &r, const ProgramBuffers &b, int64_t n) {
  ExecutionPlan plan = planExecution(p, b, n);
  ASSERT_EQ(r.launches.size(), plan.launches.size());
  ASSERT_EQ(r.memsets.size(), plan.memsets.size());
  EXPECT_EQ(r.skippedLaunches, plan.skippedLaunches);
  for (size_t i = 0; i < plan.memsets.size(); ++i) {
    const PreparedRun::Memset &m = r.memsets[i];
    EXPECT_EQ(r.bound[static_cast<size_t>(m.at.base)] + m.at.offset, plan.memsets[i].pointer);
    EXPECT_EQ(m.bytes, plan.memsets[i].bytes);
  }
  for (size_t i = 0; i < plan.launches.size(); ++i) {
    const PreparedRun::Launch &l = r.launches[i];
    const LaunchRecord &want = plan.launches[i];
    SCOPED_TRACE(fmt::format("launch {} (kernel {})", i, want.kernel));
    EXPECT_EQ(l.kernel, want.kernel);
    EXPECT_EQ(l.chunk, want.chunk);
    EXPECT_EQ(l.rowBlock, want.rowBlock);
    EXPECT_EQ(l.dims.block, want.dims.block);
    EXPECT_EQ(l.dims.sharedBytes, want.dims.sharedBytes);
    for (int d = 0; d < 3; ++d)
      EXPECT_EQ(l.dims.grid[d], want.dims.grid[d]);
    ASSERT_EQ(l.args.size(), want.args.size());
    for (size_t a = 0; a < want.args.size(); ++a) {
      EXPECT_EQ(l.args[a].type, want.args[a].type) << "arg " << a;
      EXPECT_EQ(l.args[a].value.i64, want.args[a].value.i64) << "arg " << a;
    }
  }
}

// prepareRun chooses the run schedule once and plans with it: the same launches as
// planning from N, and the same checks of N.
TEST(ExecutorPlanTest, PlanExecutionOfAChosenScheduleIsPlanExecutionOfItsN) {
  Program p = makeProgram();
  for (int64_t n : {1000, 300}) {
    ProgramBuffers b = makeBuffers(p, n);
    ExecutionPlan fromN = planExecution(p, b, n);
    ExecutionPlan fromSchedule = planExecution(p, b, p.runSchedule(n));
    EXPECT_EQ(fromSchedule.schedule.describe(), fromN.schedule.describe());
    EXPECT_EQ(fromSchedule.skippedLaunches, fromN.skippedLaunches);
    ASSERT_EQ(fromSchedule.memsets.size(), fromN.memsets.size());
    for (size_t i = 0; i < fromN.memsets.size(); ++i) {
      EXPECT_EQ(fromSchedule.memsets[i].pointer, fromN.memsets[i].pointer);
      EXPECT_EQ(fromSchedule.memsets[i].bytes, fromN.memsets[i].bytes);
    }
    ASSERT_EQ(fromSchedule.launches.size(), fromN.launches.size()) << "N = " << n;
    for (size_t i = 0; i < fromN.launches.size(); ++i) {
      const LaunchRecord &x = fromSchedule.launches[i], &y = fromN.launches[i];
      EXPECT_EQ(x.kernel, y.kernel);
      EXPECT_EQ(x.rowBlock, y.rowBlock);
      EXPECT_EQ(x.chunk, y.chunk);
      ASSERT_EQ(x.args.size(), y.args.size());
      for (size_t a = 0; a < x.args.size(); ++a)
        EXPECT_EQ(x.args[a].value.i64, y.args[a].value.i64) << "launch " << i << " arg " << a;
    }
  }
  // A schedule for an N outside the bucket is refused like the N itself.
  plan::RunSchedule outside = p.runSchedule(1000);
  outside.n = p.bucket + 1;
  ProgramBuffers b = makeBuffers(p, 1000);
  std::string msg =
      expectError(ErrorKind::InvalidArgument, [&] { planExecution(p, b, outside); });
  EXPECT_NE(msg.find("outside the bucket"), std::string::npos) << msg;
}

TEST(ExecutorPlanTest, PreparedRunBindsToWhatPlanExecutionPlans) {
  Program p = makeProgram();
  const int64_t n = 1000;
  PreparedRun r = prepareRun(p, n);
  EXPECT_EQ(r.n, n);
  EXPECT_EQ(r.workspaceBytes, workspaceBytes(p, n));
  EXPECT_EQ(r.errorWordOffset, errorWordOffset(p, n));
  ProgramBuffers b = makeBuffers(p, n);
  bindRun(r, p, b.inputs.data(), b.inputs.size(), b.outputs.data(), b.outputs.size(),
          b.workspace, b.workspaceBytes);
  EXPECT_EQ(r.binds, 1);
  expectSameRun(p, r, b, n);
  // The same buffers again: nothing to do.
  bindRun(r, p, b.inputs.data(), b.inputs.size(), b.outputs.data(), b.outputs.size(),
          b.workspace, b.workspaceBytes);
  EXPECT_EQ(r.binds, 1);
  // Other buffers (a new workspace and a new dH): every pointer follows.
  b.outputs[1] = 0x9000;
  b.workspace = kWs + 0x100000;
  bindRun(r, p, b.inputs.data(), b.inputs.size(), b.outputs.data(), b.outputs.size(),
          b.workspace, b.workspaceBytes);
  EXPECT_EQ(r.binds, 2);
  expectSameRun(p, r, b, n);
  // The checks of planExecution.
  ProgramBuffers bad = b;
  bad.inputs[2] = 0;
  std::string msg = expectError(ErrorKind::InvalidArgument, [&] {
    bindRun(r, p, bad.inputs.data(), bad.inputs.size(), bad.outputs.data(), bad.outputs.size(),
            bad.workspace, bad.workspaceBytes);
  });
  EXPECT_NE(msg.find("'y'"), std::string::npos) << msg;
  msg = expectError(ErrorKind::InvalidArgument, [&] {
    bindRun(r, p, b.inputs.data(), b.inputs.size(), b.outputs.data(), b.outputs.size(),
            b.workspace, b.workspaceBytes - 1);
  });
  EXPECT_NE(msg.find("too small"), std::string::npos) << msg;
  msg = expectError(ErrorKind::InvalidArgument, [&] {
    bindRun(r, p, b.inputs.data(), 2, b.outputs.data(), b.outputs.size(), b.workspace,
            b.workspaceBytes);
  });
  EXPECT_NE(msg.find("input pointer"), std::string::npos) << msg;
  // N = 0: empty tensors may be null, as for planExecution.
  Program p0 = makeProgram();
  p0.bucket = 256;
  p0.bucketLow = 0;
  PreparedRun r0 = prepareRun(p0, 0);
  ProgramBuffers b0 = makeBuffers(p0, 0);
  b0.inputs[0] = b0.inputs[2] = 0;
  b0.outputs[1] = 0;
  bindRun(r0, p0, b0.inputs.data(), b0.inputs.size(), b0.outputs.data(), b0.outputs.size(),
          b0.workspace, b0.workspaceBytes);
  expectSameRun(p0, r0, b0, 0);
}

TEST(ExecutorErrorWord, DecodesTheLowestBadRowAndContractViolations) {
  // What raise_row_check leaves for row 37, value -100000000000 (lcejit_common.cuh).
  auto word = [](uint64_t row, int64_t value) {
    const uint64_t v = static_cast<uint64_t>(value);
    return std::array<int64_t, 4>{static_cast<int64_t>(~((row << 32) | (v & 0xFFFFFFFFull))),
                                  static_cast<int64_t>(~((row << 32) | (v >> 32))), 0, 0};
  };
  auto w = word(37, -100000000000);
  DeviceErrors e = decodeErrorWord(w.data());
  EXPECT_EQ(e.badRow, 37);
  EXPECT_EQ(e.badValue, -100000000000);
  EXPECT_EQ(e.contract, 0);
  EXPECT_TRUE(e.any());
  // atomicMax over several rows keeps the lowest one, whatever the order.
  auto lower = word(5, 7), higher = word(4096, 1 << 20);
  for (int i = 0; i < 2; ++i)
    EXPECT_GT(static_cast<uint64_t>(lower[i]), static_cast<uint64_t>(higher[i]));
  // Row 0 (value 0) is not "no error".
  EXPECT_EQ(decodeErrorWord(word(0, 0).data()).badRow, 0);
  std::array<int64_t, 4> none{};
  EXPECT_FALSE(decodeErrorWord(none.data()).any());
  // A contract violation: kind 1 (block) of kernel 2, launched with 128 x 1 x 1.
  std::array<int64_t, 4> c{0, 0, static_cast<int64_t>((uint64_t(1) << 32) | 3),
                           128 | (1 << 16) | (int64_t(1) << 32)};
  e = decodeErrorWord(c.data());
  EXPECT_EQ(e.contract, 1);
  EXPECT_EQ(e.kernel, 2);
  EXPECT_EQ(e.badRow, -1);
  Program p = makeProgram();
  std::string text = describeContractViolation(p, e);
  EXPECT_NE(text.find("kernel 'dz' (kernel 2 of program 'test')"), std::string::npos) << text;
  EXPECT_NE(text.find("128 x 1 x 1 threads"), std::string::npos) << text;
  // Mismatched halves are a bug.
  auto broken = word(37, 1);
  broken[1] = word(38, 1)[1];
  expectError(ErrorKind::Internal, [&] { decodeErrorWord(broken.data()); });
}

TEST(ExecutorPlanTest, BufferChecks) {
  Program p = makeProgram();
  const int64_t n = 500;
  ProgramBuffers good = makeBuffers(p, n);
  EXPECT_NO_THROW(planExecution(p, good, n)) << "a null pointer for an unused input is fine";

  ProgramBuffers b = good;
  b.inputs[2] = 0;
  std::string msg = expectError(ErrorKind::InvalidArgument, [&] { planExecution(p, b, n); });
  EXPECT_NE(msg.find("'y'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("row_in"), std::string::npos) << msg;

  b = good;
  b.outputs[1] = 0;
  msg = expectError(ErrorKind::InvalidArgument, [&] { planExecution(p, b, n); });
  EXPECT_NE(msg.find("'dh'"), std::string::npos) << msg;

  b = good;
  b.inputs.pop_back();
  msg = expectError(ErrorKind::InvalidArgument, [&] { planExecution(p, b, n); });
  EXPECT_NE(msg.find("4 input"), std::string::npos) << msg;

  b = good;
  b.outputs.push_back(0x9000);
  expectError(ErrorKind::InvalidArgument, [&] { planExecution(p, b, n); });

  b = good;
  b.workspace = 0;
  msg = expectError(ErrorKind::InvalidArgument, [&] { planExecution(p, b, n); });
  EXPECT_NE(msg.find("workspace"), std::string::npos) << msg;

  b = good;
  b.workspaceBytes -= 1;
  msg = expectError(ErrorKind::InvalidArgument, [&] { planExecution(p, b, n); });
  EXPECT_NE(msg.find(std::to_string(workspaceBytes(p, n))), std::string::npos) << msg;

  b = good;
  b.workspace += 64;
  msg = expectError(ErrorKind::InvalidArgument, [&] { planExecution(p, b, n); });
  EXPECT_NE(msg.find("aligned"), std::string::npos) << msg;
}

TEST(ExecutorPlanTest, RowsOutsideTheBucket) {
  Program p = makeProgram();
  for (int64_t n : {int64_t(256), int64_t(1025), int64_t(-1)}) {
    ProgramBuffers b = makeBuffers(p, std::max<int64_t>(n, 0));
    std::string msg =
        expectError(ErrorKind::InvalidArgument, [&] { planExecution(p, b, n); });
    EXPECT_NE(msg.find(std::to_string(n)), std::string::npos) << msg;
  }
  EXPECT_NO_THROW(planExecution(p, makeBuffers(p, 257), 257));
  EXPECT_NO_THROW(planExecution(p, makeBuffers(p, 1024), 1024));
}

TEST(ExecutorPlanTest, MalformedChunkLoopIsAnInternalError) {
  Program p = makeProgram();
  p.loopCols = 0;
  expectError(ErrorKind::Internal, [&] { planExecution(p, makeBuffers(p, 300), 300); });
}

/// Row blocks: the blocked steps run once per block with n = the block's rows, pointers of
/// row-indexed buffers offset to the block's first row, block-local buffers not offset,
/// n_total = N and row_block = the block index; the workspace stays in the budget.
TEST(ExecutorPlanTest, RowBlocksOffsetRowBuffersAndPassBlockRows) {
  Program p = makeProgram();
  p.bucket = 4096;
  p.bucketLow = 1025;
  p.schedule.fixedChunkCols = 0;
  p.schedule.firstBlockedStep = 1; // reduce .. cast
  p.schedule.lastBlockedStep = 3;
  p.schedule.minBlockRows = 256;
  p.schedule.rowAlign = 128;
  p.schedule.goodChunkCols = 384;
  p.schedule.chunkAlign = 128;
  const int64_t n = 3000;
  // Room for blocks of ~1000 rows with 384-column chunks, not for all rows at once.
  p.schedule.budgetBytes = workspaceBytesFor(p, n, 1024, 384);
  RunSchedule s = p.runSchedule(n);
  ASSERT_GT(s.rowBlocks, 1) << s.describe();
  ASSERT_FALSE(s.overBudget) << s.describe();
  EXPECT_LE(s.workspaceBytes, p.schedule.budgetBytes);
  EXPECT_GE(s.chunkCols, 384) << s.describe();
  EXPECT_EQ((s.rowBlocks - 1) * s.rowsPerBlock < n && s.rowBlocks * s.rowsPerBlock >= n, true);
  ProgramBuffers bufs = makeBuffers(p, n);
  std::vector<int64_t> off = p.workspaceOffsets(s, nullptr);
  ExecutionPlan plan = planExecution(p, bufs, n);
  EXPECT_EQ(plan.schedule.rowBlocks, s.rowBlocks);
  std::vector<int64_t> blocksSeen;
  for (const LaunchRecord &r : plan.launches) {
    const Kernel &k = p.kernels[static_cast<size_t>(r.kernel)];
    bool blocked = r.kernel >= 1 && r.kernel <= 5;
    int64_t begin = blocked ? r.rowBlock * s.rowsPerBlock : 0;
    int64_t rows = blocked ? std::min(s.rowsPerBlock, n - begin) : n;
    if (!blocked) {
      EXPECT_EQ(r.rowBlock, 0) << k.name;
    }
    if (r.kernel == 1)
      blocksSeen.push_back(r.rowBlock);
    std::vector<Param> params = kernelParams(k);
    ASSERT_EQ(r.args.size(), params.size());
    for (size_t i = 0; i < params.size(); ++i) {
      const Param &pm = params[i];
      const KernelArg &a = r.args[i];
      SCOPED_TRACE(fmt::format("{} block {} param {}", k.name, r.rowBlock, pm.name));
      switch (pm.kind) {
      case Param::Kind::Pointer: {
        CUdeviceptr base = pm.buf.space == Space::Input ? bufs.inputs[pm.buf.index]
                           : pm.buf.space == Space::Output
                               ? bufs.outputs[pm.buf.index]
                               : kWs + static_cast<CUdeviceptr>(off[pm.buf.index]);
        EXPECT_EQ(a.value.pointer,
                  base + static_cast<CUdeviceptr>(begin * p.rowStrideBytes(pm.buf)));
        break;
      }
      case Param::Kind::N: EXPECT_EQ(a.value.i64, rows); break;
      case Param::Kind::TotalRows: EXPECT_EQ(a.value.i64, n); break;
      case Param::Kind::RowBlock: EXPECT_EQ(a.value.i64, r.rowBlock); break;
      default: break;
      }
    }
  }
  std::vector<int64_t> want;
  for (int64_t b = 0; b < s.rowBlocks; ++b)
    want.push_back(b);
  EXPECT_EQ(blocksSeen, want);
  // Strides: H [N, 64] bf16 and y [N] i64 are row-indexed, W and dW are not; the dZ chunk
  // and the dH accumulator are block-local.
  EXPECT_EQ(p.rowStrideBytes(in(0)), 64 * 2);
  EXPECT_EQ(p.rowStrideBytes(in(1)), 0);
  EXPECT_EQ(p.rowStrideBytes(in(2)), 8);
  EXPECT_EQ(p.rowStrideBytes(out(2)), 0);
  EXPECT_EQ(p.rowStrideBytes(ws(2)), 8);
  EXPECT_EQ(p.rowStrideBytes(ws(3)), 0);
}

TEST(ExecutorPlanTest, KernelArgStorage) {
  KernelArg a = KernelArg::makeI32(-5);
  int32_t i32 = 0;
  std::memcpy(&i32, a.address(), sizeof(i32));
  EXPECT_EQ(i32, -5);
  KernelArg b = KernelArg::makeI64(int64_t(1) << 40);
  int64_t i64 = 0;
  std::memcpy(&i64, b.address(), sizeof(i64));
  EXPECT_EQ(i64, int64_t(1) << 40);
  KernelArg c = KernelArg::makePointer(0xdeadbeef000);
  CUdeviceptr ptr = 0;
  std::memcpy(&ptr, c.address(), sizeof(ptr));
  EXPECT_EQ(ptr, 0xdeadbeef000u);
}

/// [Note: launch trace]: off unless switched on (Executor::launch then records two events
/// per launch); with nothing recorded, taking the trace needs no GPU and returns nothing.
TEST(LaunchTrace, OffByDefaultAndEmptyWithoutLaunches) {
  EXPECT_FALSE(launchTraceOn());
  setLaunchTrace(true);
  EXPECT_TRUE(launchTraceOn());
  setLaunchTrace(false);
  EXPECT_FALSE(launchTraceOn());
  EXPECT_TRUE(takeLaunchTrace().empty());
}

//===----------------------------------------------------------------------===//
// GPU: a Program run end to end
//===----------------------------------------------------------------------===//

/// The C parameter list of a kernel, generated from the ABI.
std::string signature(const Kernel &k) {
  std::vector<std::string> ps;
  for (const Param &p : kernelParams(k)) {
    const char *type = p.kind == Param::Kind::Pointer  ? "void *"
                       : p.kind == Param::Kind::Splits ? "int "
                                                       : "long long ";
    ps.push_back(type + p.name);
  }
  return fmt::format("extern \"C\" __global__ void {}({})", k.name, fmt::join(ps, ", "));
}

TEST(ExecutorGpuTest, RunsAProgramEndToEnd) {
  std::string why;
  if (!cudaAvailable(&why))
    GTEST_SKIP() << "needs a GPU: " << why;
  ensureContext();
  plan::Target target = targetFor(currentDeviceInfo());

  Program p;
  p.name = "exec_test";
  p.bucket = 1024;
  p.bucketLow = 257;
  p.target = target;
  p.inputs = {{"x", DType::F32, {-1}}};
  p.outputs = {{"y", DType::F32, {-1}}, {"cover", DType::I64, {1000}},
               {"chunks", DType::I64, {8}}};
  p.workspace = {{"scalars", 0, 16, BufferInit::Zero}, {"error", 0, 32, BufferInit::Zero}};
  RowKernel row;
  row.args = {rowOperand(in(0), DType::F32)};
  row.sinks = {storeRow(out(0))};
  GemmDzKernel dz; // 3 stages: more than 48 KB of dynamic shared memory (asserted below)
  dz.gemm.tile.stages = 3;
  dz.gemm.a = in(0);
  dz.gemm.b = in(0);
  dz.gemm.k = 8;
  dz.gemm.cols = 1000;
  dz.format = DzFormat::F32;
  dz.dz = out(1);
  GemmDLhsKernel dlhs; // f32 dz: more than 48 KB of dynamic shared memory (asserted below)
  dlhs.format = DzFormat::F32;
  dlhs.bType = DType::F32;
  dlhs.k = 8;
  dlhs.dz = out(1);
  dlhs.b = in(0);
  dlhs.out = out(2);
  p.kernels = {{"row", row}, {"dz", dz}, {"dlhs", dlhs}};
  p.steps = {{Step::Kind::Launch, 0, {}}, {Step::Kind::ChunkLoop, -1, {1, 2}}};
  p.schedule.fixedChunkCols = 300;
  p.loopCols = 1000;
  const int32_t dzShared = p.launchDims(1, 1000, 300).sharedBytes;
  const int32_t dlhsShared = p.launchDims(2, 1000, 300).sharedBytes;
  ASSERT_GT(dzShared, kDefaultMaxDynamicShared);
  ASSERT_GT(dlhsShared, kDefaultMaxDynamicShared);

  std::string src = "#include <cuda/std/cstdint>\n";
  src += signature(p.kernels[0]) + R"( {
  long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  if (i >= n) return;
  float v = ((const float *)in0)[i];
  ((float *)out0)[i] = 2.f * v;
  atomicAdd((double *)ws0, (double)v);
  if (v < 0.f) { // lcejit::raise_row_check's encoding (lcejit_common.cuh)
    unsigned long long *err = (unsigned long long *)ws1;
    unsigned long long r = (unsigned long long)i, x = (unsigned long long)(long long)v;
    atomicMax(err, ~((r << 32) | (x & 0xFFFFFFFFull)));
    atomicMax(err + 1, ~((r << 32) | (x >> 32)));
  }
}
)";
  src += signature(p.kernels[1]) + fmt::format(R"( {{
  extern __shared__ char smem[];
  ((volatile char *)smem)[{}] = 1;  // the whole dynamic allocation is usable
)", dzShared - 1) + R"(
  long long col = blockIdx.y * 128ll + threadIdx.x;
  if (blockIdx.x == 0 && threadIdx.x < 128 && col < chunk_cols)
    ((long long *)out1)[chunk_begin + col] += chunk_begin + col + 1;
}
)";
  src += signature(p.kernels[2]) + fmt::format(R"( {{
  extern __shared__ char smem[];
  ((volatile char *)smem)[{}] = 1;
)", dlhsShared - 1) + R"(
  if (blockIdx.x == 0 && blockIdx.y == 0 && threadIdx.x == 0) {
    ((long long *)out2)[2 * chunk_index] = chunk_begin;
    ((long long *)out2)[2 * chunk_index + 1] = chunk_cols;
  }
}
)";

  TempDir cacheDir;
  KernelCache cache(KernelCache::Options{cacheDir.path()});
  const KernelRequest req{"exec_test", "(256,1024]", src, target.archName(), {}};
  KernelLookup bin = cache.get(req);
  Module module(bin.binary->cubin);
  Executor exec(p, module);

  const CudaDriver &d = cudaDriver();
  const int64_t n = 1000;
  std::vector<float> x(n);
  for (int64_t i = 0; i < n; ++i)
    x[i] = static_cast<float>(i % 17) * 0.5f;
  x[613] = -7.f;
  CUdeviceptr dx = 0, dy = 0, dcover = 0, dchunks = 0, dws = 0;
  int64_t wsBytes = workspaceBytes(p, n);
  LCEJIT_CU(d.memAlloc(&dx, n * 4));
  LCEJIT_CU(d.memAlloc(&dy, n * 4));
  LCEJIT_CU(d.memAlloc(&dcover, 1000 * 8));
  LCEJIT_CU(d.memAlloc(&dchunks, 8 * 8));
  LCEJIT_CU(d.memAlloc(&dws, static_cast<size_t>(wsBytes)));
  LCEJIT_CU(d.memcpyHtoD(dx, x.data(), n * 4));
  CUstream s = nullptr;
  LCEJIT_CU(d.streamCreate(&s, CU_STREAM_NON_BLOCKING));
  LCEJIT_CU(d.memsetD8Async(dcover, 0, 1000 * 8, s));
  LCEJIT_CU(d.memsetD8Async(dws, 0xff, static_cast<size_t>(wsBytes), s)); // must be re-zeroed
  int64_t *hostErr = nullptr;
  LCEJIT_CU(d.memAllocHost(reinterpret_cast<void **>(&hostErr), plan::kErrorWordBytes));
  hostErr[0] = hostErr[1] = hostErr[2] = hostErr[3] = 42;

  ProgramBuffers bufs{{dx}, {dy, dcover, dchunks}, dws, wsBytes};
  exec.run(bufs, n, s);
  exec.enqueueErrorReadback(bufs, n, s, hostErr);
  LCEJIT_CU(d.streamSynchronize(s));

  std::vector<float> y(n);
  std::vector<int64_t> cover(1000), chunks(8);
  double sum = 0;
  LCEJIT_CU(d.memcpyDtoH(y.data(), dy, n * 4));
  LCEJIT_CU(d.memcpyDtoH(cover.data(), dcover, 1000 * 8));
  LCEJIT_CU(d.memcpyDtoH(chunks.data(), dchunks, 8 * 8));
  LCEJIT_CU(d.memcpyDtoH(&sum, dws, 8));
  for (int64_t i = 0; i < n; ++i)
    ASSERT_EQ(y[i], 2.f * x[i]) << i;
  for (int64_t j = 0; j < 1000; ++j)
    ASSERT_EQ(cover[j], j + 1) << "column " << j << " covered once by the chunk loop";
  EXPECT_EQ(chunks, (std::vector<int64_t>{0, 300, 300, 300, 600, 300, 900, 100}));
  EXPECT_DOUBLE_EQ(sum, std::accumulate(x.begin(), x.end(), 0.0)) << "scalars zeroed first";
  DeviceErrors errs = decodeErrorWord(hostErr);
  EXPECT_EQ(errs.badRow, 613) << "the bad row";
  EXPECT_EQ(errs.badValue, -7);
  EXPECT_EQ(errs.contract, 0);

  FunctionAttributes fa = module.attributes(module.function("dlhs"));
  EXPECT_GE(fa.maxDynamicSharedBytes, dlhsShared) << "raised by the executor";
  EXPECT_GT(fa.registers, 0);
  EXPECT_EQ(fa.binaryVersion, target.smVersion);

  // The error word is cleared by the next run.
  x[613] = 1.f;
  LCEJIT_CU(d.memcpyHtoD(dx, x.data(), n * 4));
  LCEJIT_CU(d.memsetD8Async(dcover, 0, 1000 * 8, s));
  exec.run(bufs, n, s);
  exec.enqueueErrorReadback(bufs, n, s, hostErr);
  LCEJIT_CU(d.streamSynchronize(s));
  EXPECT_FALSE(decodeErrorWord(hostErr).any());

  // Asking again is a memory hit: still one compile.
  EXPECT_EQ(cache.get(req).origin, CacheOrigin::Memory);
  EXPECT_EQ(cache.compileCount(), 1);
  std::string missing = expectError(ErrorKind::Cuda, [&] { module.function("nope"); });
  EXPECT_NE(missing.find("'nope'"), std::string::npos) << missing;

  LCEJIT_CU(d.memFreeHost(hostErr));
  LCEJIT_CU(d.streamDestroy(s));
  for (CUdeviceptr ptr : {dx, dy, dcover, dchunks, dws})
    LCEJIT_CU(d.memFree(ptr));
}

} // namespace

/// The sm90 tensor maps reject what TMA cannot copy before the driver is asked (so this
/// runs without one), naming the field: operand rows not 16-byte aligned, and for the f32
/// output map of the TMA store epilogue ([Note: sm90 output map]) an ld that is not a
/// multiple of 4 elements or smaller than k.
TEST(TensorMapArgs, BadOperandsAreNamedBeforeTheDriver) {
  runtime::Sm90Operand bf{0x10000, true, 64, 64, 68, 128};
  std::string msg = expectError(ErrorKind::InvalidArgument, [&] { runtime::encodeSm90Operand(bf); });
  EXPECT_NE(msg.find("ld = 68"), std::string::npos) << msg;
  runtime::Sm90Operand out{0x10000, true, 64, 32, 30, 64};
  out.f32Out = true;
  msg = expectError(ErrorKind::InvalidArgument, [&] { runtime::encodeSm90Operand(out); });
  EXPECT_NE(msg.find("f32 output ld = 30"), std::string::npos) << msg;
  out.ld = 28; // a multiple of 4, but less than k
  msg = expectError(ErrorKind::InvalidArgument, [&] { runtime::encodeSm90Operand(out); });
  EXPECT_NE(msg.find("f32 output ld = 28"), std::string::npos) << msg;
  out.ld = 32;
  out.data = 0x10004;
  msg = expectError(ErrorKind::InvalidArgument, [&] { runtime::encodeSm90Operand(out); });
  EXPECT_NE(msg.find("not 16-byte aligned"), std::string::npos) << msg;
}

/// The plain sm90 GEMM's launch names what its kernels cannot take before any driver call:
/// tile rows other than 128, 64 ([Note: sm90 64-row ping-pong]) or 192 ([Note: sm90 three
/// consumers]), pairs sharing an
/// MN-major B ([Note: sm90 multicast]), and the checks it had before them.
TEST(Sm90LaunchArgs, BadRowsAndClustersAreNamedBeforeTheDriver) {
  runtime::Sm90GemmLaunch l;
  l.m = l.n = l.k = 256;
  l.ldOut = 256;
  l.sharedBytes = 1;
  std::string msg = expectError(ErrorKind::InvalidArgument, [&] { runtime::checkSm90GemmLaunch(l); });
  EXPECT_NE(msg.find("threads = 0 (the kernel's codegen::sm90GemmThreads: 384 or 512)"),
            std::string::npos)
      << msg;
  l.threads = 384;
  runtime::checkSm90GemmLaunch(l); // the defaults are valid
  l.bm = 64;
  runtime::checkSm90GemmLaunch(l);
  l.bm = 192;
  runtime::checkSm90GemmLaunch(l);
  l.bm = 96;
  msg = expectError(ErrorKind::InvalidArgument, [&] { runtime::checkSm90GemmLaunch(l); });
  EXPECT_NE(msg.find("bm = 96 (64, 128 or 192)"), std::string::npos) << msg;
  l.bm = 128;
  l.clusterM = 2;
  runtime::checkSm90GemmLaunch(l); // K-major B
  l.bKMajor = false;
  msg = expectError(ErrorKind::InvalidArgument, [&] { runtime::checkSm90GemmLaunch(l); });
  EXPECT_NE(msg.find("clusterM = 2 (1, or 2 with a K-major B)"), std::string::npos) << msg;
  l.bKMajor = true;
  l.clusterM = 4;
  msg = expectError(ErrorKind::InvalidArgument, [&] { runtime::checkSm90GemmLaunch(l); });
  EXPECT_NE(msg.find("clusterM = 4"), std::string::npos) << msg;
  l.clusterM = 1;
  l.ldOut = 200;
  msg = expectError(ErrorKind::InvalidArgument, [&] { runtime::checkSm90GemmLaunch(l); });
  EXPECT_NE(msg.find("ldOut = 200"), std::string::npos) << msg;
}
