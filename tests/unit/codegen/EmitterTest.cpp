//===- EmitterTest.cpp - Program -> CUDA module (text level, no NVRTC)
//-----===//

#include "TestPrograms.h"

#include "compiler/codegen/DeviceHeaders.h"
#include "compiler/codegen/Embedded.h"
#include "compiler/codegen/Emitter.h"
#include "compiler/frontend/LceGraph.h"
#include "compiler/pipeline/Pipeline.h"
#include "compiler/plan/Planner.h"
#include "compiler/plan/Program.h"
#include "compiler/plan/SchedulePolicy.h"
#include "lcejit/Error.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <regex>

using namespace lcejit;
using namespace lcejit::plan;
using lcejit::codegen::emitCuda;
using lcejit::codegen::emitKernelSource;
using lcejit::testing::makeTestProgram;
using lcejit::testing::testProgramNames;

namespace {

/// The parameter names of `extern "C" ... name(...)` in `source`, in order.
std::vector<std::string> signatureParams(const std::string &source,
                                         const std::string &name,
                                         int *launchBounds) {
  std::regex re("extern \"C\" __global__ void __launch_bounds__\\((\\d+)\\) " +
                name + "\\(([^)]*)\\)");
  std::smatch m;
  EXPECT_TRUE(std::regex_search(source, m, re)) << "no entry point " << name;
  if (m.empty())
    return {};
  *launchBounds = std::stoi(m[1].str());
  std::vector<std::string> names;
  std::string list = m[2].str();
  std::regex param(R"((?:const void \*|void \*|long long |int )(\w+))");
  for (auto it = std::sregex_iterator(list.begin(), list.end(), param);
       it != std::sregex_iterator(); ++it)
    names.push_back((*it)[1].str());
  return names;
}

std::string expectThrowMessage(const std::function<void()> &f) {
  try {
    f();
  } catch (const Error &e) {
    return e.what();
  }
  ADD_FAILURE() << "expected an lcejit::Error";
  return "";
}

} // namespace

/// The device headers and the planner share a few numbers that neither can read from the
/// other: the planner sizes buffers and chooses clusters by them, the kernels walk and
/// index by them. A mismatch would not fail to compile; it would corrupt memory or tiles.
/// So each is read from the embedded headers' text (the prelude NVRTC compiles) and
/// compared with the planner's constant.
TEST(Emitter, DeviceConstantsMatchThePlanners) {
  const std::string &prelude = codegen::deviceHeaderPrelude();
  // The first integer assigned to `name` after `scope` (the struct or enum it lives in).
  auto deviceConstant = [&](const std::string &scope, const std::string &name) -> int64_t {
    size_t at = prelude.find(scope);
    if (at == std::string::npos) {
      ADD_FAILURE() << "no `" << scope << "` in the device headers";
      return -1;
    }
    std::smatch m;
    std::string rest = prelude.substr(at, 4000);
    if (!std::regex_search(rest, m, std::regex("\\b" + name + R"(\s*=\s*(\d+)\b)"))) {
      ADD_FAILURE() << "no `" << name << " = <integer>` within 4000 characters of `" << scope
                    << "`";
      return -1;
    }
    return std::stoll(m[1].str());
  };
  EXPECT_EQ(deviceConstant("enum : int { DRHS_GROUP", "DRHS_GROUP"), kDRhsOrderGroup);
  EXPECT_EQ(deviceConstant("struct StreamKTiles {", "FLAG_BYTES"), kStreamKFlagBytes);
  EXPECT_EQ(deviceConstant("struct StreamKChain {", "FLAG_BYTES"), kChainFlagBytes);
  EXPECT_EQ(deviceConstant("struct StreamKChain {", "MAX_Q"), kChainMaxQ);
}

TEST(Emitter, EveryEmbeddedHeaderIsInThePreludeInIncludeOrder) {
  std::vector<std::string> order = codegen::deviceHeaderOrder();
  ASSERT_EQ(order.size(), embedded::files().size());
  auto pos = [&](const std::string &n) {
    return std::find(order.begin(), order.end(), n) - order.begin();
  };
  EXPECT_LT(pos("lcejit_common.cuh"), pos("lcejit_reduce.cuh"));
  EXPECT_LT(pos("lcejit_mma.cuh"), pos("lcejit_gemm.cuh"));
  EXPECT_LT(pos("lcejit_gemm.cuh"), pos("lcejit_kernels.cuh"));
  EXPECT_LT(pos("lcejit_reduce.cuh"), pos("lcejit_kernels.cuh"));
  const std::string &prelude = codegen::deviceHeaderPrelude();
  for (const std::string &n : order)
    EXPECT_NE(prelude.find("// ==== begin " + n), std::string::npos) << n;
  // Local includes and #pragma once are commented out, and there is no system include
  // ([Note: no system headers]: NVRTC parses nothing but the prelude).
  EXPECT_FALSE(std::regex_search(prelude, std::regex(R"(\n\s*#\s*include)")));
  EXPECT_FALSE(
      std::regex_search(prelude, std::regex(R"(\n\s*#\s*pragma\s+once)")));
}

class EmitterPrograms : public ::testing::TestWithParam<std::string> {};

TEST_P(EmitterPrograms, SignaturesFollowKernelParams) {
  Program p = makeTestProgram(GetParam());
  codegen::EmittedModule m = emitCuda(p);
  ASSERT_EQ(m.kernelNames.size(), p.kernels.size());
  for (size_t i = 0; i < p.kernels.size(); ++i) {
    const Kernel &k = p.kernels[i];
    EXPECT_EQ(m.kernelNames[i], k.name);
    std::vector<std::string> want;
    for (const Param &prm : kernelParams(k))
      want.push_back(prm.name);
    int bounds = 0;
    EXPECT_EQ(signatureParams(m.source, k.name, &bounds), want) << k.name;
    EXPECT_EQ(bounds, p.launchDims(static_cast<int32_t>(i), 1000, 512).block)
        << k.name;
  }
}

TEST_P(EmitterPrograms, DeterministicAndKernelSourcesAreSections) {
  Program p = makeTestProgram(GetParam());
  codegen::EmittedModule a = emitCuda(p);
  Program copy = makeTestProgram(GetParam());
  codegen::EmittedModule b = emitCuda(copy);
  EXPECT_EQ(a.source, b.source);
  EXPECT_EQ(a.source.rfind(codegen::deviceHeaderPrelude(), 0) ==
                std::string::npos,
            true)
      << "the module starts with its banner, then the prelude";
  EXPECT_NE(a.source.find(codegen::deviceHeaderPrelude()), std::string::npos);
  for (size_t i = 0; i < p.kernels.size(); ++i) {
    std::string k = emitKernelSource(p, static_cast<int32_t>(i));
    EXPECT_EQ(k, emitKernelSource(copy, static_cast<int32_t>(i)));
    EXPECT_NE(a.source.find(k), std::string::npos) << p.kernels[i].name;
    EXPECT_NE(k.find(fmt::format("// Kernel {}: {} ({})", i, p.kernels[i].name,
                                 kernelKindName(p.kernels[i].kind()))),
              std::string::npos)
        << k.substr(0, 400);
  }
}

/// [Note: module parts]: every GEMM kernel is a module alone, the row and cast kernels
/// share one, every kernel is in exactly one part, and a part's source holds the prelude
/// and exactly its own kernels' sections.
TEST_P(EmitterPrograms, ModulePartsCoverEveryKernelOnce) {
  Program p = makeTestProgram(GetParam());
  std::vector<codegen::EmittedPart> parts = codegen::emitCudaParts(p);
  std::vector<int> seen(p.kernels.size(), 0);
  size_t rowParts = 0;
  for (const codegen::EmittedPart &part : parts) {
    ASSERT_FALSE(part.kernels.empty());
    ASSERT_EQ(part.kernels.size(), part.kernelNames.size());
    bool rows = false, gemm = false;
    for (int32_t k : part.kernels) {
      ++seen[static_cast<size_t>(k)];
      KernelKind kind = p.kernels[static_cast<size_t>(k)].kind();
      (kind == KernelKind::Row || kind == KernelKind::Cast ? rows : gemm) = true;
    }
    EXPECT_FALSE(rows && gemm) << "a GEMM kernel shares a module with row kernels";
    if (gemm) {
      EXPECT_EQ(part.entryPoints().size(), 1u) << "GEMM kernels are compiled alone";
    }
    rowParts += rows;
    EXPECT_NE(part.source.find(codegen::deviceHeaderPrelude()), std::string::npos);
    for (size_t i = 0; i < p.kernels.size(); ++i) {
      const bool mine = std::find(part.kernels.begin(), part.kernels.end(),
                                  static_cast<int32_t>(i)) != part.kernels.end() &&
                        std::find(part.kernelNames.begin(), part.kernelNames.end(),
                                  p.kernels[i].name) != part.kernelNames.end();
      EXPECT_EQ(part.source.find(emitKernelSource(p, static_cast<int32_t>(i))) !=
                    std::string::npos,
                mine)
          << p.kernels[i].name;
    }
  }
  EXPECT_LE(rowParts, 1u);
  for (size_t i = 0; i < seen.size(); ++i)
    EXPECT_EQ(seen[i], 1) << p.kernels[i].name;
}

/// [Note: module parts]: a GEMM kernel whose code is another's but for its name and index
/// joins that kernel's part under the other's entry point (the module holds one section);
/// one that differs in anything else (here its stage count) is a part of its own.
TEST_P(EmitterPrograms, ModulePartsShareAGemmKernelsCode) {
  Program p = makeTestProgram(GetParam());
  int32_t g = -1;
  for (int32_t i = 0; i < static_cast<int32_t>(p.kernels.size()) && g < 0; ++i)
    if (isGemmKind(p.kernels[static_cast<size_t>(i)].kind()))
      g = i;
  if (g < 0)
    GTEST_SKIP() << "no GEMM kernel in this program";
  const std::string name = p.kernels[static_cast<size_t>(g)].name;
  Kernel twin = p.kernels[static_cast<size_t>(g)];
  twin.name = name + "_twin";
  p.kernels.push_back(twin);
  const int32_t twinIndex = static_cast<int32_t>(p.kernels.size()) - 1;
  Kernel other = p.kernels[static_cast<size_t>(g)];
  other.name = name + "_other";
  std::visit(
      [](auto &body) {
        using T = std::decay_t<decltype(body)>;
        if constexpr (std::is_same_v<T, GemmReduceKernel> || std::is_same_v<T, GemmDzKernel>)
          body.gemm.tile.stages += 1;
        else if constexpr (std::is_same_v<T, GemmDLhsKernel> || std::is_same_v<T, GemmDRhsKernel>)
          body.tile.stages += 1;
      },
      other.body);
  p.kernels.push_back(other);
  const int32_t otherIndex = twinIndex + 1;

  std::vector<codegen::EmittedPart> parts = codegen::emitCudaParts(p);
  const codegen::EmittedPart *shared = nullptr, *own = nullptr;
  for (const codegen::EmittedPart &part : parts) {
    auto has = [&](int32_t k) {
      return std::find(part.kernels.begin(), part.kernels.end(), k) != part.kernels.end();
    };
    if (has(g))
      shared = &part;
    if (has(otherIndex))
      own = &part;
  }
  ASSERT_NE(shared, nullptr);
  ASSERT_NE(own, nullptr);
  EXPECT_EQ(shared->kernels, (std::vector<int32_t>{g, twinIndex}));
  EXPECT_EQ(shared->kernelNames, (std::vector<std::string>{name, name}));
  EXPECT_EQ(shared->entryPoints(), std::vector<std::string>{name});
  EXPECT_NE(shared->source.find(emitKernelSource(p, g)), std::string::npos);
  EXPECT_EQ(shared->source.find(name + "_twin("), std::string::npos)
      << "the twin's section is not compiled";
  EXPECT_NE(shared->source.find(name + "_twin runs as " + name), std::string::npos)
      << "the part's banner says who shares it";
  EXPECT_NE(shared, own) << "a different stage count is different code";
  EXPECT_EQ(own->kernelNames, std::vector<std::string>{name + "_other"});
}

TEST_P(EmitterPrograms, GemmSharedMemoryMatchesTheLaunch) {
  Program p = makeTestProgram(GetParam());
  for (size_t i = 0; i < p.kernels.size(); ++i) {
    KernelKind kind = p.kernels[i].kind();
    if (kind == KernelKind::Row || kind == KernelKind::Cast)
      continue;
    std::string k = emitKernelSource(p, static_cast<int32_t>(i));
    int32_t bytes =
        p.launchDims(static_cast<int32_t>(i), 1, p.loopCols).sharedBytes;
    EXPECT_NE(k.find(fmt::format("{}_config::SMEM_BYTES == {},",
                                 p.kernels[i].name, bytes)),
              std::string::npos)
        << k;
  }
}

INSTANTIATE_TEST_SUITE_P(Programs, EmitterPrograms,
                         ::testing::ValuesIn(testProgramNames()),
                         [](const auto &info) { return info.param; });

TEST(Emitter, LceKernelShapes) {
  Program p = makeTestProgram("bf16");
  codegen::EmittedModule m = emitCuda(p);
  EXPECT_NE(
      m.source.find(
          "lcejit::gemm_reduce_kernel<lce_fwd0_config>(epi, in0, in1, ws2, n, "
          "32003LL, 4096LL, splits);"),
      std::string::npos);
  EXPECT_NE(
      m.source.find(
          "lcejit::gemm_dz_kernel<lce_dz0_config, lcejit::DZ_SPLIT_BF16>(epi, "
          "in0, in1, ws5, ws6, nullptr, n, 4096LL, chunk_begin, chunk_cols);"),
      std::string::npos);
  EXPECT_NE(
      m.source.find(
          "lcejit::gemm_dlhs_kernel<lce_dlhs0_config, lcejit::elem_f32>(ws5, ws6, in1, ws7, n, "
          "4096LL, chunk_begin, chunk_cols, chunk_index > 0);"),
      std::string::npos);
  EXPECT_NE(
      m.source.find(
          "lcejit::gemm_drhs_kernel<lce_drhs0_config, lcejit::elem_bf16>(ws5, "
          "ws6, in0, out2, n, 4096LL, chunk_begin, chunk_cols, "
          "(((accumulate_outputs >> 2) & 1) != 0));"),
      std::string::npos);
  EXPECT_NE(
      m.source.find(
          "lcejit::cast_kernel<lcejit::elem_bf16>(ws7, out1, n * 4096LL, "
          "(((accumulate_outputs >> 1) & 1) != 0));"),
      std::string::npos);
  EXPECT_NE(m.source.find("lcejit::lse_add(p[0], p[1], "), std::string::npos);
  EXPECT_NE(m.source.find("lcejit::raise_row_check(ws1, row, "),
            std::string::npos);
  EXPECT_NE(m.source.find("atomicAdd(static_cast<double *>(ws0) + 0, "),
            std::string::npos);
  EXPECT_NE(m.source.find("lcejit::partials_logsumexp(ws2, row, splits, 3, 0)"),
            std::string::npos);
}

TEST(Emitter, RejectsWhatTheTemplatesCannotRun) {
  {
    Program p = makeTestProgram("bf16");
    std::get<GemmReduceKernel>(p.kernels[1].body).gemm.abType =
        DType::F32; // TC with f32
    EXPECT_NE(expectThrowMessage([&] { emitCuda(p); }).find("lce_fwd0"),
              std::string::npos);
  }
  {
    Program p = makeTestProgram("bf16");
    std::get<GemmDLhsKernel>(p.kernels[5].body).tile.warpsN = 3;
    EXPECT_NE(expectThrowMessage([&] { emitCuda(p); }).find("lce_dlhs0"),
              std::string::npos);
  }
  {
    Program p = makeTestProgram("bf16");
    std::get<GemmDRhsKernel>(p.kernels[6].body).tile.bk =
        24; // not a multiple of 16
    EXPECT_NE(expectThrowMessage([&] { emitCuda(p); }).find("lce_drhs0"),
              std::string::npos);
  }
  {
    Program p = makeTestProgram("bf16");
    auto &dz = std::get<GemmDzKernel>(p.kernels[4].body);
    Operand part;
    part.kind = Operand::Kind::Partials;
    part.buf = BufferRef{Space::Workspace, 2};
    part.reduce = 0;
    part.slot = 0;
    part.partialsOf = 1;
    dz.gemm.args[3] = part;
    EXPECT_NE(expectThrowMessage([&] { emitCuda(p); }).find("Partials"),
              std::string::npos);
  }
  {
    Program p = makeTestProgram("bf16");
    p.kernels[2].name = p.kernels[1].name;
    EXPECT_NE(expectThrowMessage([&] { emitCuda(p); }).find("two kernels"),
              std::string::npos);
  }
  {
    Program p = makeTestProgram("bf16");
    p.kernels[0].name = "row-0";
    EXPECT_NE(expectThrowMessage([&] { emitCuda(p); }).find("identifier"),
              std::string::npos);
  }
  {
    Program p = makeTestProgram("bf16");
    auto &row = std::get<RowKernel>(p.kernels[0].body);
    row.sinks[0].result = 9; // no such result
    EXPECT_THROW(emitCuda(p), Error);
  }
}

/// What the session-14 kernels cannot run is refused by name and value: a storing forward
/// over a vocabulary that is not a multiple of its tile (its element path is compiled out),
/// dB's group sums on a tile wider than the sums' padding or with no blocks, the group-sum
/// kernel writing an out, and setTargetGroupRows with no rows.
TEST(Emitter, RejectsWhatTheGroupSumsAndTheStoringForwardCannotRun) {
  auto planned = [](std::optional<DType> dw) {
    fe::LceSpec spec;
    spec.hidden = 256;
    spec.vocab = 32000;
    auto fg = pipeline::compileGraph(*fe::buildLceGraph(spec));
    plan::PlanOptions po;
    po.tokens = 4096;
    po.outputTypes = {DType::F32, DType::BF16, dw};
    return fg->plan(po);
  };
  {
    Program p = planned(DType::F32); // materialized: the forward stores
    bool stores = false;
    for (plan::Kernel &k : p.kernels)
      if (auto *g = std::get_if<GemmReduceKernel>(&k.body); g && g->stored) {
        g->gemm.cols = 32003;
        stores = true;
      }
    ASSERT_TRUE(stores) << p.toJson(2);
    const std::string m = expectThrowMessage([&] { emitCuda(p); });
    EXPECT_NE(m.find("whole column tiles (cols = 32003"), std::string::npos) << m;
  }
  {
    Program p = planned(DType::BF16); // recompute, group sums for the bf16 dW
    int sums = 0;
    for (plan::Kernel &k : p.kernels)
      if (auto *d = std::get_if<GemmDRhsKernel>(&k.body); d && d->targetSums.valid()) {
        ++sums;
        d->targetSums.groupRows = 0;
      }
    ASSERT_EQ(sums, 1) << p.toJson(2);
    EXPECT_NE(expectThrowMessage([&] { emitCuda(p); }).find("target group sums"),
              std::string::npos);
  }
  {
    Program p = planned(DType::BF16);
    for (plan::Kernel &k : p.kernels)
      if (auto *t = std::get_if<plan::TargetCorrectionKernel>(&k.body); t && t->sums.valid())
        t->out = BufferRef{Space::Output, 2};
    EXPECT_NE(expectThrowMessage([&] { emitCuda(p); }).find("group sums write sums and heads"),
              std::string::npos);
  }
  {
    Program p = planned(DType::BF16);
    EXPECT_NE(expectThrowMessage([&] { plan::setTargetGroupRows(p, 0); }).find("rows = 0"),
              std::string::npos);
  }
}

/// [Note: the target pick by fragments]: the loss's target pick, a sum of select(col ==
/// target, v, 0), leaves fragment_value for the reduce epilogue's once-per-row pick; a sum
/// that is not exactly that (another false value, another compare) stays per element.
TEST(Emitter, TheForwardPicksTheTargetOncePerRowOnlyForAnExactPick) {
  auto forwardSource = [](const std::function<void(plan::ScalarFunc &)> &edit) {
    fe::LceSpec spec;
    spec.hidden = 256;
    spec.vocab = 32000;
    spec.softcap = 30.0;
    auto fg = pipeline::compileGraph(*fe::buildLceGraph(spec));
    plan::PlanOptions po;
    po.tokens = 4096;
    Program p = fg->plan(po);
    int forwards = 0;
    for (plan::Kernel &k : p.kernels)
      if (auto *g = std::get_if<GemmReduceKernel>(&k.body)) {
        ++forwards;
        edit(g->gemm.epilogue);
      }
    EXPECT_EQ(forwards, 1);
    const std::string src = emitCuda(p).source;
    const size_t at = src.find("struct lce_fwd0_epilogue");
    EXPECT_NE(at, std::string::npos);
    return src.substr(at, src.find("extern \"C\"", at) - at);
  };
  auto fragmentValue = [](const std::string &s) {
    const size_t at = s.find("float fragment_value(");
    return at == std::string::npos ? std::string() : s.substr(at);
  };
  // The select whose false value is a constant 0: the pick.
  auto pickSelect = [](plan::ScalarFunc &f) -> plan::ScalarInst * {
    for (int32_t r : f.results) {
      plan::ScalarInst &s = f.insts[static_cast<size_t>(r)];
      if (s.op == plan::ScalarOp::Select)
        return &s;
    }
    return nullptr;
  };

  const std::string pick = forwardSource([](plan::ScalarFunc &) {});
  EXPECT_NE(pick.find("static constexpr int PICK_SLOT = 2;"), std::string::npos) << pick;
  EXPECT_NE(pick.find("return static_cast<long long>(r.a"), std::string::npos) << pick;
  EXPECT_EQ(fragmentValue(pick).find("lcejit::sum_add"), std::string::npos) << pick;

  const std::string otherFalse = forwardSource([&](plan::ScalarFunc &f) {
    plan::ScalarInst *s = pickSelect(f);
    ASSERT_NE(s, nullptr);
    f.insts[static_cast<size_t>(s->operands[2])].fValue = 0.5;
  });
  EXPECT_NE(otherFalse.find("static constexpr int PICK_SLOT = -1;"), std::string::npos)
      << otherFalse;
  EXPECT_NE(fragmentValue(otherFalse).find("lcejit::sum_add(p[2], "), std::string::npos)
      << otherFalse;

  const std::string notEqual = forwardSource([&](plan::ScalarFunc &f) {
    plan::ScalarInst *s = pickSelect(f);
    ASSERT_NE(s, nullptr);
    f.insts[static_cast<size_t>(s->operands[0])].op = plan::ScalarOp::CmpNe;
  });
  EXPECT_NE(notEqual.find("static constexpr int PICK_SLOT = -1;"), std::string::npos)
      << notEqual;
  EXPECT_NE(fragmentValue(notEqual).find("lcejit::sum_add(p[2], "), std::string::npos)
      << notEqual;
}
