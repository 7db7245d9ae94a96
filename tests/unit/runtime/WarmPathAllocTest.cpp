//===- WarmPathAllocTest.cpp - The warm call path allocates nothing (CPU) -------===//
//
// A dedicated binary (tests/support/AllocationCounter replaces its global operator new to
// count this thread's heap allocations while a test asks for it): re-binding and
// re-reading a prepared run ([Note: prepared runs] in runtime/Executor.h), the host half
// of every warm call of the op, allocates nothing, while building one does (so the
// counter works). The whole warm call, driver calls included, is counted the same way in
// the GPU suite (LceGpuHardening.WarmCallAllocatesNothingAndTakesNoSlowPath and
// LceGpuHardening.WarmAccumulateCallAllocatesNothingAndAGraphKeepsItsMask).
//
//===----------------------------------------------------------------------===//

#include "lcejit/Error.h"
#include "runtime/Executor.h"

#include "tests/support/AllocationCounter.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <new>

using lcejit::testsupport::allocationsOf;

namespace {

using namespace lcejit;
using namespace lcejit::plan;
using namespace lcejit::runtime;

/// A small Program of the lean schedule's shape: a checked row kernel, a dZ GEMM and a
/// dH GEMM in a chunk loop (portable mainloop: no tensor maps, no driver needed).
Program makeProgram() {
  Program p;
  p.name = "warm";
  p.bucket = 1024;
  p.bucketLow = 257;
  p.inputs = {{"h", DType::BF16, {-1, 64}}, {"w", DType::BF16, {1000, 64}}, {"y", DType::I64, {-1}}};
  p.outputs = {{"loss", DType::F32, {}}, {"dh", DType::F32, {-1, 64}}};
  p.workspace = {{"scalars", 0, 16, BufferInit::Zero},
                 {"error", 0, kErrorWordBytes, BufferInit::Zero},
                 {"dz", 0, 0, BufferInit::None, 4}};
  p.workspace[2].blockLocal = true;
  RowKernel row;
  Operand y;
  y.kind = Operand::Kind::Row;
  y.buf = {Space::Input, 2};
  y.dtype = DType::I64;
  row.args = {y};
  RowKernel::Sink store;
  store.kind = RowKernel::Sink::Kind::StoreScalar;
  store.result = 0;
  store.buf = {Space::Output, 0};
  row.sinks = {store};
  GemmDzKernel dz;
  dz.gemm.a = {Space::Input, 0};
  dz.gemm.b = {Space::Input, 1};
  dz.gemm.k = 64;
  dz.gemm.cols = 1000;
  dz.format = DzFormat::F32;
  dz.dz = {Space::Workspace, 2};
  GemmDLhsKernel dlhs;
  dlhs.format = DzFormat::F32;
  dlhs.bType = DType::BF16;
  dlhs.k = 64;
  dlhs.dz = {Space::Workspace, 2};
  dlhs.b = {Space::Input, 1};
  dlhs.out = {Space::Output, 1};
  p.kernels = {{"row", row}, {"dz", dz}, {"dlhs", dlhs}};
  p.steps = {{Step::Kind::Launch, 0, {}}, {Step::Kind::ChunkLoop, -1, {1, 2}}};
  p.schedule.fixedChunkCols = 384;
  p.loopCols = 1000;
  return p;
}

TEST(WarmPathAlloc, BindingAPreparedRunAllocatesNothing) {
  const Program p = makeProgram();
  const int64_t n = 1000;
  PreparedRun r;
  EXPECT_GT(allocationsOf([&] { r = prepareRun(p, n); }), 0) << "the counter counts";
  ASSERT_GT(r.launches.size(), 3u);
  CUdeviceptr in[3] = {0x10000, 0x20000, 0x30000};
  CUdeviceptr out[2] = {0x40000, 0x50000};
  const CUdeviceptr ws = 0x7f0000000000;
  const int64_t wsBytes = r.workspaceBytes;
  // The first bind, a bind with the same buffers (a warm call), a bind with other ones
  // (a warm call on new tensors): none allocates.
  EXPECT_EQ(allocationsOf([&] { bindRun(r, p, in, 3, out, 2, ws, wsBytes); }), 0);
  EXPECT_EQ(allocationsOf([&] { bindRun(r, p, in, 3, out, 2, ws, wsBytes); }), 0);
  in[0] = 0x11000;
  out[1] = 0x51000;
  EXPECT_EQ(allocationsOf([&] { bindRun(r, p, in, 3, out, 2, ws + 0x1000, wsBytes); }), 0);
  EXPECT_EQ(r.binds, 2);
  // The pointers moved: a dZ launch reads the new H.
  bool sawH = false;
  for (const PreparedRun::Launch &l : r.launches)
    for (size_t i = 0; i < l.args.size(); ++i)
      if (l.argRelocs[i].base == 0)
        sawH |= l.args[i].value.pointer == 0x11000;
  EXPECT_TRUE(sawH);
  // Accumulating into dh (output 1, written by the dLhs GEMM): the mask is rewritten in
  // place, with the same buffers or new ones, and back; nothing allocates.
  auto maskOfLaunches = [&] {
    int64_t mask = -1;
    for (const PreparedRun::Launch &l : r.launches)
      if (l.accumulateArg >= 0) {
        EXPECT_TRUE(mask == -1 || mask == l.args[size_t(l.accumulateArg)].value.i64);
        mask = l.args[size_t(l.accumulateArg)].value.i64;
      }
    return mask;
  };
  EXPECT_EQ(maskOfLaunches(), 0);
  EXPECT_EQ(allocationsOf([&] { bindRun(r, p, in, 3, out, 2, ws + 0x1000, wsBytes, 2); }), 0);
  EXPECT_EQ(maskOfLaunches(), 2);
  out[1] = 0x52000;
  EXPECT_EQ(allocationsOf([&] { bindRun(r, p, in, 3, out, 2, ws + 0x1000, wsBytes, 2); }), 0);
  EXPECT_EQ(allocationsOf([&] { bindRun(r, p, in, 3, out, 2, ws + 0x1000, wsBytes, 0); }), 0);
  EXPECT_EQ(maskOfLaunches(), 0);
  // The loss (output 0, a row kernel's) cannot accumulate: named.
  try {
    bindRun(r, p, in, 3, out, 2, ws, wsBytes, 1);
    ADD_FAILURE() << "expected Error(InvalidArgument)";
  } catch (const lcejit::Error &e) {
    EXPECT_NE(std::string(e.what()).find("output 0 ('loss')"), std::string::npos) << e.what();
  }
  // A failing bind does allocate (its message), and says why.
  in[2] = 0;
  EXPECT_THROW(bindRun(r, p, in, 3, out, 2, ws, wsBytes), lcejit::Error);
}

} // namespace
