//===- MainloopTest.cpp - The GEMM mainloop's pieces, run on the host
//------===//
//
// The device headers compiled as host code through the emulation shim
// ([Note: host emulation]):
//  - the swizzle of shared-memory tiles ([Note: swizzle] in lcejit_gemm.cuh):
//    a bijection per row, free of bank conflicts for the 16-byte stores of the
//    tile loader and the 8-row reads of ldmatrix, for every tile shape in use;
//  - GemmConfig::SMEM_BYTES == plan::gemmSharedBytes for those configs;
//  - the emulated ldmatrix against the PTX ISA description, independently of
//    the mainloop;
//  - one stage of GemmMainloop (ldmatrix fragment addresses + mma.sync, or the
//    SIMT loop) on tiles written directly in the swizzled layout, against the
//    exact product, for every tile config and operand layout.
//
//===----------------------------------------------------------------------===//

#include "compiler/plan/Program.h"

#include "lcejit_emu.h" // before the device headers: CUDA qualifiers as plain C++

#include "runtime/device/lcejit_gemm.cuh"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <set>
#include <vector>

namespace {

using lcejit::K_MAJOR;
using lcejit::MN_MAJOR;

//===----------------------------------------------------------------------===//
// Swizzle
//===----------------------------------------------------------------------===//

/// Runtime view of the compile-time swizzle for CHUNKS in {1, 2, ..., 64}.
int swizzleChunk(int chunks, int row, int chunk) {
  switch (chunks) {
  case 1:
    return lcejit::swizzle_chunk<1>(row, chunk);
  case 2:
    return lcejit::swizzle_chunk<2>(row, chunk);
  case 4:
    return lcejit::swizzle_chunk<4>(row, chunk);
  case 8:
    return lcejit::swizzle_chunk<8>(row, chunk);
  case 16:
    return lcejit::swizzle_chunk<16>(row, chunk);
  case 32:
    return lcejit::swizzle_chunk<32>(row, chunk);
  case 64:
    return lcejit::swizzle_chunk<64>(row, chunk);
  }
  ADD_FAILURE() << "no swizzle for " << chunks << " chunks";
  return 0;
}

/// A shared-memory tile: `rows` rows of `chunks` 16-byte chunks.
struct TileShape {
  std::string what;
  int rows, chunks;
};

/// Every operand tile of the configs the planner uses or may use, in both
/// layouts and element sizes.
std::vector<TileShape> tileShapes() {
  std::vector<TileShape> shapes;
  // 16-bit: K-major [BM or BN][BK], BK in {32, 64}; MN-major [BK][BM or BN].
  for (int bk : {16, 32, 64})
    for (int mn : {32, 64, 96, 128, 256}) {
      shapes.push_back({fmt::format("bf16 K-major [{}][{}]", mn, bk), mn,
                        bk * 2 / 16});
      if (mn % 64 == 0 || mn == 32)
        shapes.push_back({fmt::format("bf16 MN-major [{}][{}]", bk, mn), bk,
                          mn * 2 / 16});
    }
  // SIMT: f32 and 16-bit operands of 64x64x16 tiles.
  shapes.push_back({"f32 K-major [64][16]", 64, 4});
  shapes.push_back({"f32 MN-major [16][64]", 16, 16});
  shapes.push_back({"f16 K-major [64][16]", 64, 2});
  shapes.push_back({"f16 MN-major [16][64]", 16, 8});
  shapes.push_back({"bf16 K-major [64][8]", 64, 1});
  return shapes;
}

/// Bank group (of 8) of the 16-byte chunk at byte offset `offset`.
int bankGroup(int offset) { return (offset / 16) % 8; }

TEST(Swizzle, PermutesTheChunksOfEveryRow) {
  for (int chunks : {1, 2, 4, 8, 16, 32, 64}) {
    SCOPED_TRACE(fmt::format("{} chunks per row", chunks));
    const int rows = 256;
    std::set<int> physical;
    for (int r = 0; r < rows; ++r)
      for (int c = 0; c < chunks; ++c) {
        const int p = swizzleChunk(chunks, r, c);
        ASSERT_GE(p, 0);
        ASSERT_LT(p, chunks) << "row " << r << " chunk " << c;
        // Two different (row, chunk) never share a shared-memory address.
        EXPECT_TRUE(physical.insert(r * chunks + p).second)
            << "row " << r << " chunk " << c << " collides";
      }
    EXPECT_EQ(physical.size(), size_t(rows * chunks));
  }
}

TEST(Swizzle, KeyDependsOnRowModulo8Only) {
  // GemmMainloop shifts a lane's ldmatrix offsets by multiples of 8 rows
  // ([Note: fragment addresses]); that is only valid if the key repeats.
  for (int chunks : {1, 2, 4, 8, 16, 32, 64})
    for (int r = 0; r < 512; ++r)
      for (int c = 0; c < chunks; ++c)
        EXPECT_EQ(swizzleChunk(chunks, r, c), swizzleChunk(chunks, r % 8, c))
            << chunks << " chunks, row " << r << ", chunk " << c;
}

TEST(Swizzle, ElementIndexIsABijection) {
  // swizzled_index, which the loader's element path, its zero fill and the
  // SIMT reads use, over whole tiles.
  auto check = [](const char *what, int outer, int inner, auto index) {
    std::vector<int> seen(static_cast<size_t>(outer * inner), 0);
    for (int o = 0; o < outer; ++o)
      for (int i = 0; i < inner; ++i) {
        const int x = index(o, i);
        ASSERT_GE(x, 0) << what;
        ASSERT_LT(x, outer * inner) << what;
        ++seen[static_cast<size_t>(x)];
      }
    for (size_t x = 0; x < seen.size(); ++x)
      EXPECT_EQ(seen[x], 1) << what << ": element slot " << x;
  };
  check("bf16 [128][32]", 128, 32, lcejit::swizzled_index<32, 2>);
  check("bf16 [128][64]", 128, 64, lcejit::swizzled_index<64, 2>);
  check("bf16 [32][64]", 32, 64, lcejit::swizzled_index<64, 2>);
  check("bf16 [32][128]", 32, 128, lcejit::swizzled_index<128, 2>);
  check("bf16 [32][256]", 32, 256, lcejit::swizzled_index<256, 2>);
  check("bf16 [64][32]", 64, 32, lcejit::swizzled_index<32, 2>);
  check("f32 [64][16]", 64, 16, lcejit::swizzled_index<16, 4>);
  check("f32 [16][64]", 16, 64, lcejit::swizzled_index<64, 4>);
  check("f16 [64][16]", 64, 16, lcejit::swizzled_index<16, 2>);
  check("f16 [16][64]", 16, 64, lcejit::swizzled_index<64, 2>);
}

TEST(Swizzle, ElementIndexKeepsChunksContiguous) {
  // Element i of a row sits in logical chunk i / VEC at position i % VEC of
  // its physical chunk (the 16-byte vector copies rely on it).
  for (int o = 0; o < 64; ++o)
    for (int i = 0; i < 64; ++i) {
      const int x = lcejit::swizzled_index<64, 2>(o, i);
      EXPECT_EQ(x % 8, i % 8);
      EXPECT_EQ(x / 8, o * 8 + lcejit::swizzle_chunk<8>(o, i / 8));
      const int y = lcejit::swizzled_index<16, 4>(o, i % 16);
      EXPECT_EQ(y % 4, i % 4);
      EXPECT_EQ(y / 4, o * 4 + lcejit::swizzle_chunk<4>(o, (i % 16) / 4));
    }
}

TEST(Swizzle, LoaderStoresAreFreeOfBankConflicts) {
  // load_tile: thread t stores chunk t % CHUNKS of row t / CHUNKS + p * (THREADS
  // / CHUNKS); 16-byte stores are served 8 lanes at a time.
  for (const TileShape &s : tileShapes())
    for (int threads : {64, 128, 256}) {
      if (threads % s.chunks != 0)
        continue;
      const int rowsPerPass = threads / s.chunks;
      for (int p = 0; p * rowsPerPass < s.rows; ++p)
        for (int t0 = 0; t0 < threads; t0 += 8) {
          std::set<int> groups;
          for (int t = t0; t < t0 + 8; ++t) {
            const int row = t / s.chunks + p * rowsPerPass;
            if (row >= s.rows)
              continue;
            const int offset =
                (row * s.chunks + swizzleChunk(s.chunks, row, t % s.chunks)) *
                16;
            groups.insert(bankGroup(offset));
          }
          const int lanes = std::min(8, std::max(0, (s.rows - p * rowsPerPass) *
                                                        s.chunks - t0));
          EXPECT_EQ(static_cast<int>(groups.size()), std::min(8, lanes))
              << s.what << ", " << threads << " threads, pass " << p
              << ", threads " << t0 << "..";
        }
    }
}

TEST(Swizzle, LdmatrixReadsAreFreeOfBankConflicts) {
  // One 8x8 matrix of ldmatrix: 8 consecutive rows r0 .. r0 + 7 (r0 % 8 == 0)
  // at one logical chunk, in both layouts (rows = m/n with k contiguous, or
  // rows = k with .trans).
  for (const TileShape &s : tileShapes()) {
    if (s.rows % 8 != 0)
      continue;
    for (int r0 = 0; r0 < s.rows; r0 += 8)
      for (int c = 0; c < s.chunks; ++c) {
        std::set<int> groups;
        for (int r = r0; r < r0 + 8; ++r)
          groups.insert(bankGroup(
              (r * s.chunks + swizzleChunk(s.chunks, r, c)) * 16));
        EXPECT_EQ(groups.size(), 8u)
            << s.what << ": rows " << r0 << ".." << r0 + 7 << ", chunk " << c;
      }
  }
}

//===----------------------------------------------------------------------===//
// Shared memory size
//===----------------------------------------------------------------------===//

template <int BM, int BN, int BK, int WM, int WN, int ST, int MATH, class EA,
          int NA, int MA, class EB, int MB>
void expectSharedBytes() {
  typedef lcejit::GemmConfig<BM, BN, BK, WM, WN, ST, MATH, EA, NA, MA, EB, MB>
      Cfg;
  const lcejit::plan::TileConfig t{BM, BN, BK, WM, WN, ST};
  EXPECT_EQ(Cfg::SMEM_BYTES,
            lcejit::plan::gemmSharedBytes(t, EA::BYTES, EB::BYTES, NA))
      << BM << "x" << BN << "x" << BK << " warps " << WM << "x" << WN << " "
      << ST << " stages, A " << EA::BYTES << " B bytes " << EB::BYTES
      << " numA " << NA;
}

TEST(GemmConfig, SharedBytesEqualPlanGemmSharedBytes) {
  using lcejit::elem_bf16;
  using lcejit::elem_f16;
  using lcejit::elem_f32;
  constexpr int TC = lcejit::MATH_TC_BF16, SIMT = lcejit::MATH_SIMT_F32;
#define LCEJIT_TC_TILE(BM, BN, BK, WM, WN, ST)                                 \
  expectSharedBytes<BM, BN, BK, WM, WN, ST, TC, elem_bf16, 1, K_MAJOR,         \
                    elem_bf16, K_MAJOR>();                                     \
  expectSharedBytes<BM, BN, BK, WM, WN, ST, TC, elem_bf16, 2, K_MAJOR,         \
                    elem_bf16, MN_MAJOR>();                                    \
  expectSharedBytes<BM, BN, BK, WM, WN, ST, TC, elem_bf16, 2, MN_MAJOR,        \
                    elem_bf16, MN_MAJOR>();
  LCEJIT_TC_TILE(128, 128, 32, 2, 4, 3)
  LCEJIT_TC_TILE(64, 128, 32, 1, 4, 3)
  LCEJIT_TC_TILE(128, 128, 64, 2, 4, 3)
  LCEJIT_TC_TILE(128, 256, 32, 2, 4, 3)
  LCEJIT_TC_TILE(256, 128, 32, 4, 2, 3)
  LCEJIT_TC_TILE(32, 64, 32, 1, 8, 2)
#undef LCEJIT_TC_TILE
  expectSharedBytes<64, 64, 16, 2, 4, 2, SIMT, elem_f32, 1, K_MAJOR, elem_f32,
                    K_MAJOR>();
  expectSharedBytes<64, 64, 16, 2, 4, 3, SIMT, elem_f32, 1, K_MAJOR, elem_f16,
                    MN_MAJOR>();
  expectSharedBytes<64, 64, 16, 2, 4, 2, SIMT, elem_f32, 1, MN_MAJOR, elem_f16,
                    MN_MAJOR>();
  expectSharedBytes<64, 64, 16, 2, 4, 2, SIMT, elem_bf16, 2, MN_MAJOR,
                    elem_bf16, MN_MAJOR>();
}

//===----------------------------------------------------------------------===//
// ldmatrix emulation vs the PTX ISA description
//===----------------------------------------------------------------------===//

/// Runs `body(lane)` on one warp of the emulation.
void runWarp(unsigned char *smem, unsigned smemBytes,
             const std::function<void(int)> &body) {
  lcejit_emu::shared_base = smem;
  const long long grid[3] = {1, 1, 1};
  lcejit_emu::launch(grid, 32, static_cast<int>(smemBytes),
                     [&] { body(static_cast<int>(threadIdx.x)); });
  lcejit_emu::shared_base = nullptr;
}

template <int NUM, bool TRANS> void checkLdmatrix() {
  SCOPED_TRACE(fmt::format("ldmatrix .x{}{}", NUM, TRANS ? " .trans" : ""));
  // 4 matrices of 8 rows of 8 u16, the rows scattered over 64 16-byte slots
  // (row i of matrix j at slot (5 (8 j + i) + 3) % 64), element (j, i, c) =
  // 1000 j + 10 i + c.
  alignas(16) static unsigned char smem[64 * 16];
  std::memset(smem, 0xee, sizeof smem);
  auto slot = [](int j, int i) { return (5 * (8 * j + i) + 3) % 64; };
  auto value = [](int j, int i, int c) {
    return static_cast<unsigned short>(1000 * j + 10 * i + c);
  };
  for (int j = 0; j < 4; ++j)
    for (int i = 0; i < 8; ++i)
      for (int c = 0; c < 8; ++c) {
        const unsigned short v = value(j, i, c);
        std::memcpy(smem + slot(j, i) * 16 + 2 * c, &v, 2);
      }
  unsigned got[32][NUM];
  runWarp(smem, sizeof smem, [&](int lane) {
    // Lane 8j + i supplies row i of matrix j; lanes past 8 NUM supply an
    // address that must be ignored (misaligned).
    const unsigned char *row =
        lane < 8 * NUM ? smem + slot(lane / 8, lane % 8) * 16 : smem + 7;
    lcejit::u32 r[NUM];
    lcejit::ldmatrix<NUM, TRANS>(r, row);
    for (int j = 0; j < NUM; ++j)
      got[lane][j] = r[j];
  });
  // "A group of four threads loads an entire row": lane l holds row l / 4,
  // columns 2 (l % 4), 2 (l % 4) + 1, low half first; .trans: the rows as
  // stored are the matrix's columns.
  for (int lane = 0; lane < 32; ++lane)
    for (int j = 0; j < NUM; ++j) {
      const int row = lane / 4, col = 2 * (lane % 4);
      const unsigned lo = TRANS ? value(j, col, row) : value(j, row, col);
      const unsigned hi =
          TRANS ? value(j, col + 1, row) : value(j, row, col + 1);
      EXPECT_EQ(got[lane][j], lo | (hi << 16))
          << "lane " << lane << " register " << j;
    }
}

TEST(LdmatrixEmulation, MatchesThePtxIsaLayout) {
  checkLdmatrix<1, false>();
  checkLdmatrix<2, false>();
  checkLdmatrix<4, false>();
  checkLdmatrix<1, true>();
  checkLdmatrix<2, true>();
  checkLdmatrix<4, true>();
}

//===----------------------------------------------------------------------===//
// One stage of the mainloop vs the exact product
//===----------------------------------------------------------------------===//

/// Small integers, exact in every element type and in f32 sums.
double aValue(int x, int m, int k) {
  return ((m * 37 + k * 11 + x * 5) % 13) - 6;
}
double bValue(int k, int n) { return ((k * 29 + n * 17) % 11) - 5; }

template <class Elem> typename Elem::raw_t encode(double v) {
  return Elem::from_f32(static_cast<float>(v));
}

/// Writes A operand(s) and B of stage `stage` in the swizzled layout, runs
/// compute_stage_* on it from all THREADS threads, and compares every
/// accumulator with the exact sum over the stage's k.
template <class Cfg> void checkStage(const char *what) {
  SCOPED_TRACE(what);
  typedef lcejit::GemmMainloop<Cfg> Mainloop;
  typedef typename Cfg::ElemA EA;
  typedef typename Cfg::ElemB EB;
  constexpr int BM = Cfg::BM, BN = Cfg::BN, BK = Cfg::BK;
  const int stage = Cfg::STAGES - 1; // not the first: stage offsets count
  std::vector<unsigned char> buffer(Cfg::SMEM_BYTES + 16, 0xcd);
  unsigned char *smem = reinterpret_cast<unsigned char *>(
      (reinterpret_cast<uintptr_t>(buffer.data()) + 15) & ~uintptr_t(15));
  for (int x = 0; x < Cfg::NUM_A; ++x) {
    auto *a = Mainloop::a_tile(smem, stage, x);
    for (int m = 0; m < BM; ++m)
      for (int k = 0; k < BK; ++k)
        a[Cfg::MAJOR_A == K_MAJOR
              ? lcejit::swizzled_index<Cfg::A_INNER, EA::BYTES>(m, k)
              : lcejit::swizzled_index<Cfg::A_INNER, EA::BYTES>(k, m)] =
            encode<EA>(aValue(x, m, k));
  }
  auto *b = Mainloop::b_tile(smem, stage);
  for (int n = 0; n < BN; ++n)
    for (int k = 0; k < BK; ++k)
      b[Cfg::MAJOR_B == K_MAJOR
            ? lcejit::swizzled_index<Cfg::B_INNER, EB::BYTES>(n, k)
            : lcejit::swizzled_index<Cfg::B_INNER, EB::BYTES>(k, n)] =
          encode<EB>(bValue(k, n));

  std::vector<float> got(static_cast<size_t>(BM * BN), -12345.f);
  std::vector<int> count(static_cast<size_t>(BM * BN), 0);
  std::mutex mutex;
  lcejit_emu::shared_base = smem;
  const long long grid[3] = {1, 1, 1};
  lcejit_emu::launch(grid, Cfg::THREADS, Cfg::SMEM_BYTES, [&] {
    Mainloop ml;
    for (int i = 0; i < Mainloop::TR; ++i)
      for (int j = 0; j < Mainloop::TC_COLS; ++j)
        ml.acc[i][j] = 0.f;
    if constexpr (Cfg::TENSOR_CORES)
      ml.compute_stage_tc(lcejit::to_smem_addr(smem) + stage * Cfg::STAGE_BYTES,
                          ml.frag_offsets());
    else
      ml.compute_stage_simt(smem, stage);
    std::lock_guard<std::mutex> lock(mutex);
    for (int i = 0; i < Mainloop::TR; ++i)
      for (int j = 0; j < Mainloop::TC_COLS; ++j) {
        const size_t at = static_cast<size_t>(ml.row_of(i) * BN + ml.col_of(j));
        got[at] = ml.acc[i][j];
        ++count[at];
      }
  });
  lcejit_emu::shared_base = nullptr;
  int bad = 0;
  for (int m = 0; m < BM; ++m)
    for (int n = 0; n < BN; ++n) {
      double want = 0;
      for (int x = 0; x < Cfg::NUM_A; ++x)
        for (int k = 0; k < BK; ++k)
          want += aValue(x, m, k) * bValue(k, n);
      const size_t at = static_cast<size_t>(m * BN + n);
      EXPECT_EQ(count[at], 1) << "acc (" << m << ", " << n << ") held "
                              << count[at] << " times";
      if (got[at] != want && bad++ < 5)
        ADD_FAILURE() << "acc (" << m << ", " << n << ") = " << got[at]
                      << ", want " << want;
    }
  EXPECT_EQ(bad, 0);
}

using lcejit::elem_bf16;
using lcejit::elem_f16;
using lcejit::elem_f32;
using lcejit::GemmConfig;
constexpr int BF16 = lcejit::MATH_TC_BF16, F16 = lcejit::MATH_TC_F16,
              SIMT = lcejit::MATH_SIMT_F32;

/// The operand layouts of the four GEMM kernels (and one unused by them).
#define LCEJIT_STAGE_LAYOUTS(BM, BN, BK, WM, WN, ST)                           \
  checkStage<GemmConfig<BM, BN, BK, WM, WN, ST, BF16, elem_bf16, 1, K_MAJOR,   \
                        elem_bf16, K_MAJOR>>("fwd: A K-major, B K-major");     \
  checkStage<GemmConfig<BM, BN, BK, WM, WN, ST, BF16, elem_bf16, 2, K_MAJOR,   \
                        elem_bf16, MN_MAJOR>>(                                 \
      "dlhs: 2 A K-major, B N-major");                                         \
  checkStage<GemmConfig<BM, BN, BK, WM, WN, ST, BF16, elem_bf16, 2, MN_MAJOR,  \
                        elem_bf16, MN_MAJOR>>(                                 \
      "drhs: 2 A M-major, B N-major");                                         \
  checkStage<GemmConfig<BM, BN, BK, WM, WN, ST, F16, elem_f16, 1, MN_MAJOR,    \
                        elem_f16, K_MAJOR>>("f16: A M-major, B K-major");

TEST(MainloopStage, Tile128x128x32) { LCEJIT_STAGE_LAYOUTS(128, 128, 32, 2, 4, 3) }
TEST(MainloopStage, Tile64x128x32) { LCEJIT_STAGE_LAYOUTS(64, 128, 32, 1, 4, 3) }
TEST(MainloopStage, Tile128x128x64) { LCEJIT_STAGE_LAYOUTS(128, 128, 64, 2, 4, 3) }
TEST(MainloopStage, Tile128x256x32) { LCEJIT_STAGE_LAYOUTS(128, 256, 32, 2, 4, 3) }
TEST(MainloopStage, Tile256x128x32) { LCEJIT_STAGE_LAYOUTS(256, 128, 32, 4, 2, 3) }

TEST(MainloopStage, OddMmaTileCount) {
  // WN = 8: one B mma tile per warp, loaded by ldmatrix .x2; BM = 32: M-major
  // A rows of 4 chunks.
  LCEJIT_STAGE_LAYOUTS(32, 64, 32, 1, 8, 2)
  // WN = 24: one .x4 pair and an .x2 (K-major B only: N-major rows of 12
  // chunks are not supported by the swizzle).
  checkStage<GemmConfig<64, 96, 32, 2, 4, 2, BF16, elem_bf16, 1, K_MAJOR,
                        elem_bf16, K_MAJOR>>("fwd 64x96: NT = 3");
}

TEST(MainloopStage, Simt) {
  checkStage<GemmConfig<64, 64, 16, 2, 4, 2, SIMT, elem_f32, 1, K_MAJOR,
                        elem_f32, K_MAJOR>>("simt fwd f32");
  checkStage<GemmConfig<64, 64, 16, 2, 4, 2, SIMT, elem_f32, 1, K_MAJOR,
                        elem_f16, MN_MAJOR>>("simt dlhs f32 dz, f16 B");
  checkStage<GemmConfig<64, 64, 16, 2, 4, 2, SIMT, elem_f32, 1, MN_MAJOR,
                        elem_f16, MN_MAJOR>>("simt drhs f32 dz, f16 B");
  checkStage<GemmConfig<64, 64, 16, 2, 4, 2, SIMT, elem_bf16, 2, MN_MAJOR,
                        elem_bf16, MN_MAJOR>>("simt drhs split bf16");
  checkStage<GemmConfig<64, 64, 16, 2, 4, 2, SIMT, elem_f16, 1, K_MAJOR,
                        elem_f16, K_MAJOR>>("simt fwd f16");
}

} // namespace
