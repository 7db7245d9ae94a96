//===- lcejit_sm90.cuh - Hopper GEMM: TMA ring, warp-specialized wgmma -----===//
//
// The sm_90a mainloop (issue 6; facts in shared/HOPPER-KERNELS.md, design in
// docs/hopper.md). Everything here is compiled only for sm_90a
// (__CUDA_ARCH_FEAT_SM90_ALL), or as host C++ under the codegen tests' emulation
// (LCEJIT_EMU_SM90, [Note: sm90 host emulation]): the prelude of other targets skips
// it, and LCEJIT_SM90 tells generated code whether it is there.
//
//   acc[BM x BN] = sum over k of A(m0 + m, k) * B(n0 + n, k)      f32 accumulate
//
// A and B are bf16, each K-major (k contiguous) or MN-major (m / n contiguous)
// in global memory, read through TMA tensor maps (runtime/TensorMap.h encodes
// them on the host; both the map and the descriptor below use the 128-byte
// swizzle). The kernel is persistent: CTA b takes tiles b, b + grid, ... in the
// grouped order of TileOrder.
//
// [Note: sm90 roles] 384 threads = 3 warpgroups. Warpgroup 0 is the producer:
// it gives its registers back (setmaxnreg 40) and one thread issues the TMA
// loads of every k-block of every tile of the CTA into a STAGES-deep ring.
// Warpgroups 1 and 2 are the consumers (setmaxnreg 232): consumer g owns rows
// 64 g .. 64 g + 63 of the 128-row tile and issues BK / 16 wgmma m64nBNk16 per
// k-block, both reading the same B stage. Per stage s there are two
// mbarriers: full[s] (1 arrival: the producer's expect_tx; the TMA bytes
// complete it) and empty[s] (8 arrivals: lane 0 of every consumer warp, once
// the wgmma reading the stage has retired; 16 in a cluster pair, whose
// consumers free each stage in both CTAs: [Note: sm90 multicast]). Stage index
// and phase run on across tiles; the producer waits empty with the opposite
// parity, so the first pass over the ring does not block. A consumer keeps one
// wgmma group in flight: after committing k-block kb it waits until at most one
// group is pending and only then releases the stage of kb - 1.
//
// [Note: sm90 three consumers] A cooperative 192-row tile (BM = 192; plain GEMMs
// only: measured, not planned for the op, docs/hopper.md session 27) runs 512
// threads: the producer and three consumers, consumer g on rows 64 g .. 64 g + 63
// as above, 12 arrivals on empty[s]. The register file
// splits 32 / 160 (GemmConfig::PRODUCER_REGS, CONSUMER_REGS), but ptxas compiles
// the whole kernel in the entry count, 65536 / 512 = 128 registers: a 192-column
// tile's 96 accumulators fit, a 256-column tile's 128 do not (C7602).
//
// [Note: sm90 shared memory] Dynamic shared memory, aligned up to 1024 bytes
// (TMA swizzles on absolute address bits): STAGES stages of [A: BM x BK][B: BN
// x BK] bf16, with TMA_STORE two f32 boxes of 8 KB per consumer ([Note: sm90 TMA
// store]), then 2 x STAGES mbarriers. An operand tile is stored as TMA
// writes it with SWIZZLE_128B:
//   K-major  one box of BK (= 64, 128 bytes) x rows: row r at 128 r, its
//            16-byte chunks XORed with r % 8. Descriptor: SBO = 1024 (8 rows),
//            LBO unused, k16 step = +32 bytes.
//   MN-major boxes of 64 (m or n, 128 bytes) x BK k-rows, one per 64 columns,
//            8192 bytes apart. Descriptor: LBO = 8192 (next 64 columns), SBO =
//            1024 (next 8 k-rows), k16 step = +2048 bytes; transpose bit 1.
// Consumer g's A slice starts 64 rows in: +8192 bytes in both layouts.
//
// [Note: sm90 accumulator] Thread t of a consumer (w = t / 32, l = t % 32)
// holds acc[i], i < BN / 2, of row 16 w + l / 4 + 8 ((i / 2) % 2) and column
// 8 (i / 4) + 2 (l % 4) + (i % 2) of its 64-row slice. Registers (i, i + 1),
// i even, are two adjacent columns of one row.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "lcejit_common.cuh"
#include "lcejit_gemm.cuh"
#include "lcejit_kernels.cuh"
#include "lcejit_reduce.cuh"

#if defined(__CUDA_ARCH_FEAT_SM90_ALL) || defined(LCEJIT_EMU_SM90)
#define LCEJIT_SM90 1

namespace lcejit {
namespace sm90 {

/// A CUtensorMap as a kernel parameter (cuda.h is not available to NVRTC):
/// pass it as `const __grid_constant__ TensorMap`.
struct alignas(64) TensorMap {
  unsigned char bytes[128];
};

/// [Note: sm90 L2 hints] The L2 eviction priority of a TMA load's lines (plan::L2Hint has
/// the same numbers). A mainloop's L2 template argument holds two: A's in bits 0-1, B's in
/// bits 2-3 (plan::L2Hints::code).
enum { L2_NORMAL = 0, L2_EVICT_FIRST = 1, L2_EVICT_LAST = 2 };
__host__ __device__ constexpr int l2_hint_a(int l2) { return l2 & 3; }
__host__ __device__ constexpr int l2_hint_b(int l2) { return (l2 >> 2) & 3; }

// Under LCEJIT_EMU_SM90 (the codegen unit tests, never NVRTC; [Note: sm90 host
// emulation] in tests/unit/codegen/emu/lcejit_emu_sm90.h) every function of inline PTX
// below, up to wgmma_bf16, comes from that header under the same name and signature; the
// rest of this file is the same code on both.
#if !defined(LCEJIT_EMU_SM90)
__device__ __forceinline__ u32 smem_addr(const void *p) {
  return static_cast<u32>(__cvta_generic_to_shared(p));
}

//===----------------------------------------------------------------------===//
// mbarrier
//===----------------------------------------------------------------------===//

__device__ __forceinline__ void mbar_init(u32 bar, u32 count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count)
               : "memory");
}
__device__ __forceinline__ void mbar_fence_init() {
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}
__device__ __forceinline__ void mbar_expect_tx(u32 bar, u32 bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar),
               "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void mbar_arrive(u32 bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}
/// Arrives when `pred` is nonzero. The predicate stays inside the asm: a C++
/// branch around the arrive makes ptxas serialize the wgmma pipeline (C7518).
__device__ __forceinline__ void mbar_arrive_if(u32 bar, u32 pred) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %1, 0;\n"
               "@p mbarrier.arrive.shared::cta.b64 _, [%0];\n}\n" ::"r"(bar),
               "r"(pred)
               : "memory");
}
/// [Note: sm90 multicast] Arrives (when `pred`) on this CTA's barrier at `bar` and (when
/// `pred_peer`) on the barrier at the same offset in cluster CTA `peer`: the peer's
/// producer may then overwrite this CTA's stage. The stage was read by wgmma (the async
/// proxy), which has retired, and nothing here wrote it: the default semantics suffice.
/// `.release.cluster` would put a MEMBAR.ALL.GPU before every arrive, waiting for the
/// epilogue's outstanding global stores. Predicates inside the asm, as for mbar_arrive_if.
__device__ __forceinline__ void mbar_arrive_pair_if(u32 bar, u32 pred, u32 peer,
                                                    u32 pred_peer) {
  asm volatile("{\n.reg .pred p, q;\n.reg .b32 remote;\n"
               "setp.ne.b32 p, %1, 0;\nsetp.ne.b32 q, %3, 0;\n"
               "@p mbarrier.arrive.shared::cta.b64 _, [%0];\n"
               "mapa.shared::cluster.u32 remote, %0, %2;\n"
               "@q mbarrier.arrive.shared::cluster.b64 _, [remote];\n}\n" ::"r"(bar),
               "r"(pred), "r"(peer), "r"(pred_peer)
               : "memory");
}
/// [Note: sm90 multicast] Frees the stage whose empty barrier is at offset `bar` in every
/// CTA of a cluster of cn (1, 2 or 4) sharing B, this one being rank (`cluster` = rank |
/// cn << 8): lane 0 of the warp arrives here, lane l in 1 .. cn - 1 in cluster CTA rank ^
/// l, so the warp's cn arrivals reach every CTA whose producer writes into this CTA's
/// stage, in one instruction (lane, predicates and target computed inside the asm from
/// one register), with mbar_arrive_pair_if's semantics. Pairs keep mbar_arrive_pair_if:
/// with this one the 512-thread pairs of the plain GEMM spilled 4 bytes of their 128
/// registers.
__device__ __forceinline__ void mbar_arrive_cluster(u32 bar, u32 cluster) {
  asm volatile("{\n.reg .pred p, q;\n.reg .b32 l, n, m, r;\n"
               "mov.u32 l, %%laneid;\n"
               "setp.eq.u32 p, l, 0;\n"
               "@p mbarrier.arrive.shared::cta.b64 _, [%0];\n"
               "shr.u32 n, %1, 8;\n"
               "setp.lt.u32 q, l, n;\n"
               "setp.ne.and.u32 q, l, 0, q;\n"
               "sub.u32 m, n, 1;\n"
               "and.b32 m, l, m;\n"
               "and.b32 r, %1, 255;\n"
               "xor.b32 r, m, r;\n"
               "mapa.shared::cluster.u32 r, %0, r;\n"
               "@q mbarrier.arrive.shared::cluster.b64 _, [r];\n}\n" ::"r"(bar),
               "r"(cluster)
               : "memory");
}
__device__ __forceinline__ bool mbar_try_wait(u32 bar, u32 parity) {
  u32 ok;
  asm volatile("{\n.reg .pred p;\n"
               "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
               "selp.u32 %0, 1, 0, p;\n}\n"
               : "=r"(ok)
               : "r"(bar), "r"(parity)
               : "memory");
  return ok != 0;
}
__device__ __forceinline__ void mbar_wait(u32 bar, u32 parity) {
  while (!mbar_try_wait(bar, parity)) {
  }
}

//===----------------------------------------------------------------------===//
// Thread-block clusters
//===----------------------------------------------------------------------===//

__device__ __forceinline__ u32 cluster_ctarank() {
  u32 r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
  return r;
}
__device__ __forceinline__ u32 cluster_nctarank() {
  u32 r;
  asm volatile("mov.u32 %0, %%cluster_nctarank;" : "=r"(r));
  return r;
}
/// Every thread of every CTA of the cluster arrives, then waits for all of them (also a
/// barrier of the CTA's own threads).
__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release;\nbarrier.cluster.wait.acquire;" ::: "memory");
}

//===----------------------------------------------------------------------===//
// TMA
//===----------------------------------------------------------------------===//

/// [Note: sm90 L2 hints] The policy of a TMA load's `.L2::cache_hint` operand.
template <int HINT> __device__ __forceinline__ u64 l2_policy() {
  static_assert(HINT == L2_EVICT_FIRST || HINT == L2_EVICT_LAST, "sm90: an L2 hint");
  u64 p;
  if constexpr (HINT == L2_EVICT_LAST)
    asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(p));
  else
    asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(p));
  return p;
}

__device__ __forceinline__ void tma_prefetch(const TensorMap *map) {
  asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<u64>(map))
               : "memory");
}
/// Loads the box at (x = inner, y = outer) into shared memory at `dst`; the
/// bytes complete a transaction on `bar`. Out-of-bounds elements read as 0.
///
/// [Note: sm90 L2 hints] HINT (L2_NORMAL, L2_EVICT_FIRST, L2_EVICT_LAST) is the L2
/// eviction priority of the lines the copy reads: anything but L2_NORMAL adds the
/// `.L2::cache_hint` operand, a policy made by `createpolicy.fractional` for all of the
/// lines (fraction 1.0). Normal lines are replaced before evict-last ones and after
/// evict-first ones. Plan data for the forward's operands (GemmReduceKernel::l2).
// One TMA load in both spellings: INSTR is the instruction without the hint, OPERANDS its
// operands, POLICY the index the hint's policy operand takes after them, the rest the asm
// inputs. HINT == L2_NORMAL emits `INSTR OPERANDS;`; any other HINT emits
// `INSTR.L2::cache_hint OPERANDS, %POLICY;` with l2_policy<HINT>() as that last input.
#define LCEJIT_TMA_LOAD(INSTR, OPERANDS, POLICY, ...)                                       \
  do {                                                                                     \
    if constexpr (HINT == L2_NORMAL)                                                       \
      asm volatile(INSTR " " OPERANDS ";" ::__VA_ARGS__ : "memory");                       \
    else                                                                                   \
      asm volatile(INSTR ".L2::cache_hint " OPERANDS ", %" #POLICY ";" ::__VA_ARGS__,       \
                   "l"(l2_policy<HINT>())                                                  \
                   : "memory");                                                            \
  } while (0)
template <int HINT = L2_NORMAL>
__device__ __forceinline__ void tma_load_2d(u32 dst, const TensorMap *map,
                                            u32 bar, int x, int y) {
  LCEJIT_TMA_LOAD("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::"
                  "complete_tx::bytes",
                  "[%0], [%1, {%3, %4}], [%2]", 5, "r"(dst),
                  "l"(reinterpret_cast<u64>(map)), "r"(bar), "r"(x), "r"(y));
}
/// The box at (x, y, z) of a 3D map ([Note: stored values in dW]: column in the slab,
/// row, slab).
template <int HINT = L2_NORMAL>
__device__ __forceinline__ void tma_load_3d(u32 dst, const TensorMap *map, u32 bar, int x,
                                            int y, int z) {
  LCEJIT_TMA_LOAD("cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::"
                  "complete_tx::bytes",
                  "[%0], [%1, {%3, %4, %5}], [%2]", 6, "r"(dst),
                  "l"(reinterpret_cast<u64>(map)), "r"(bar), "r"(x), "r"(y), "r"(z));
}
/// tma_load_2d into every CTA of the cluster named in `mask` (bit r: rank r): the box
/// lands at offset `dst` of each one's shared memory and completes its bytes on each
/// one's barrier at offset `bar` ([Note: sm90 multicast]).
template <int HINT = L2_NORMAL>
__device__ __forceinline__ void tma_load_2d_multicast(u32 dst, const TensorMap *map,
                                                      u32 bar, int x, int y, u16 mask) {
  LCEJIT_TMA_LOAD("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::"
                  "complete_tx::bytes.multicast::cluster",
                  "[%0], [%1, {%3, %4}], [%2], %5", 6, "r"(dst),
                  "l"(reinterpret_cast<u64>(map)), "r"(bar), "r"(x), "r"(y), "h"(mask));
}
#undef LCEJIT_TMA_LOAD

/// Writes the box at (x = inner, y = outer) from shared memory at `src` (the
/// layout the map's swizzle describes); with ADD, adds it to what global memory
/// holds (cp.reduce.async.bulk, f32 maps: the L2 does the read-modify-write).
/// Out-of-bounds elements are not written. The copy joins this thread's bulk
/// group: bulk_commit, then bulk_wait_read before `src` is written again.
template <bool ADD>
__device__ __forceinline__ void tma_store_2d(const TensorMap *map, u32 src, int x, int y) {
  if constexpr (ADD)
    asm volatile("cp.reduce.async.bulk.tensor.2d.global.shared::cta.add.tile.bulk_group "
                 "[%0, {%2, %3}], [%1];" ::"l"(reinterpret_cast<u64>(map)),
                 "r"(src), "r"(x), "r"(y)
                 : "memory");
  else
    asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group "
                 "[%0, {%2, %3}], [%1];" ::"l"(reinterpret_cast<u64>(map)),
                 "r"(src), "r"(x), "r"(y)
                 : "memory");
}
__device__ __forceinline__ void bulk_commit() {
  asm volatile("cp.async.bulk.commit_group;" ::: "memory");
}
/// Waits until at most N of this thread's bulk groups still read shared memory.
template <int N> __device__ __forceinline__ void bulk_wait_read() {
  asm volatile("cp.async.bulk.wait_group.read %0;" ::"n"(N) : "memory");
}
/// Waits until at most N of this thread's bulk groups are incomplete (writes done).
template <int N> __device__ __forceinline__ void bulk_wait() {
  asm volatile("cp.async.bulk.wait_group %0;" ::"n"(N) : "memory");
}
/// Orders this thread's generic-proxy shared-memory writes before later async-proxy
/// (TMA) reads of them; a barrier then hands them to the issuing thread.
__device__ __forceinline__ void fence_proxy_async_shared() {
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}
__device__ __forceinline__ void st_shared_f32x2(u32 addr, float x, float y) {
  asm volatile("st.shared.v2.f32 [%0], {%1, %2};" ::"r"(addr), "f"(x), "f"(y) : "memory");
}
__device__ __forceinline__ float2 ld_shared_f32x2(u32 addr) {
  float2 v;
  asm volatile("ld.shared.v2.f32 {%0, %1}, [%2];" : "=f"(v.x), "=f"(v.y) : "r"(addr) : "memory");
  return v;
}
__device__ __forceinline__ void st_shared_f32x4(u32 addr, float x, float y, float z, float w) {
  asm volatile("st.shared.v4.f32 [%0], {%1, %2, %3, %4};" ::"r"(addr), "f"(x), "f"(y),
               "f"(z), "f"(w)
               : "memory");
}
/// Four floats at `addr` in the shared memory of cluster CTA `rank` (the same offset as
/// `addr` in this CTA's).
__device__ __forceinline__ float4 ld_cluster_f32x4(u32 addr, u32 rank) {
  float4 v;
  asm volatile("{\n.reg .b32 remote;\nmapa.shared::cluster.u32 remote, %4, %5;\n"
               "ld.shared::cluster.v4.f32 {%0, %1, %2, %3}, [remote];\n}\n"
               : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
               : "r"(addr), "r"(rank)
               : "memory");
  return v;
}
#endif // !LCEJIT_EMU_SM90
/// The 1024-byte aligned base of the dynamic shared memory ([Note: sm90 shared memory]).
__device__ __forceinline__ u32 smem_base() {
  return (smem_addr(lcejit_dynamic_smem) + 1023u) & ~1023u;
}

//===----------------------------------------------------------------------===//
// wgmma
//===----------------------------------------------------------------------===//

/// Shared-memory matrix descriptor, 128-byte swizzle (layout type 1).
__device__ __forceinline__ u64 sw128_desc(u32 addr, u32 lbo, u32 sbo) {
  return static_cast<u64>((addr & 0x3FFFF) >> 4) |
         (static_cast<u64>((lbo >> 4) & 0x3FFF) << 16) |
         (static_cast<u64>((sbo >> 4) & 0x3FFF) << 32) | (1ull << 62);
}

/// The descriptor of the shared memory `units16` x 16 bytes further: the start address
/// is the low 14 bits of the low word, and every operand lies below 256 KB, so the add
/// never carries into the other fields ([Note: sm90 descriptor arithmetic]).
__device__ __forceinline__ u64 desc_advance(u64 desc, u32 units16) {
  const u32 lo = static_cast<u32>(desc) + units16;
  const u32 hi = static_cast<u32>(desc >> 32);
  return (static_cast<u64>(hi) << 32) | lo;
}

#if !defined(LCEJIT_EMU_SM90) // [Note: sm90 host emulation]
__device__ __forceinline__ void wgmma_fence() {
  asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
}
__device__ __forceinline__ void wgmma_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
}
template <int N> __device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}
/// Keeps the compiler from moving accumulator accesses across wgmma
/// fence/commit/wait (CUTLASS's warpgroup_fence_operand).
template <int R> __device__ __forceinline__ void fence_acc(float (&d)[R]) {
#pragma unroll
  for (int i = 0; i < R; ++i)
    asm volatile("" : "+f"(d[i])::"memory");
}

/// Named barriers (0 is __syncthreads): `sync` waits until `count` threads
/// arrived; `arrive` counts this warp in without waiting.
__device__ __forceinline__ void named_bar_sync(int id, int count) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(count) : "memory");
}
__device__ __forceinline__ void named_bar_arrive(int id, int count) {
  asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(count) : "memory");
}

__device__ __forceinline__ u32 ld_acquire_u32(const u32 *p) {
  u32 v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void st_release_u32(u32 *p, u32 v) {
  asm volatile("st.release.gpu.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

/// [Note: f32 accumulate by reduction] *p += (x, y) as one relaxed vector reduction
/// (sm_90, 8-byte aligned p): fire-and-forget, so an accumulating epilogue issues its
/// reductions and goes on to the next tile, and the L2 does the read-modify-write (a
/// load, add and store from the thread would wait out the old value's round trip, per
/// tile, with the tensor cores idle). Each element has one writer per launch, so the
/// result is old + acc rounded once, as the load-add-store gave; like every f32 atomic
/// add, a subnormal sum or addend is flushed to zero.
__device__ __forceinline__ void red_add_f32x2(float *p, float x, float y) {
  asm volatile("red.global.add.v2.f32 [%0], {%1, %2};" ::"l"(p), "f"(x), "f"(y)
               : "memory");
}

/// [Note: streamed outputs] The forward's stored values (fp16, 525 MB per row block at
/// the Llama-3 head) are not read again while the kernel runs and far exceed the L2:
/// they are written evict-first (.cs), so they do not push out the W tiles the row tiles
/// of a split share. (The same hint on dB's f32 dW stores and reductions was measured on
/// the H200, 2026-12-02: DRAM reads rose from 2.3 to 2.8 GB per block at equal time, so
/// dB keeps the default.)
__device__ __forceinline__ void st_cs_u32x2(void *p, u32 x, u32 y) {
  asm volatile("st.global.cs.v2.b32 [%0], {%1, %2};" ::"l"(p), "r"(x), "r"(y) : "memory");
}

template <int REGS> __device__ __forceinline__ void setmaxnreg_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(REGS));
}
template <int REGS> __device__ __forceinline__ void setmaxnreg_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(REGS));
}

// wgmma.mma_async m64nNk16, bf16 x bf16 -> f32, A and B from shared memory:
// d (+)= A * B, d read only when scale_d != 0. TRANS_A / TRANS_B: 0 K-major,
// 1 MN-major.
template <int TRANS_A, int TRANS_B>
__device__ __forceinline__ void wgmma_m64n64k16(float (&d)[32], u64 desc_a, u64 desc_b, int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\n"
      "setp.ne.b32 p, %34, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15,"
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
      "}, %32, %33, p, 1, 1, %35, %36;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]),
        "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]),
        "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]),
        "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]),
        "+f"(d[30]), "+f"(d[31])
      : "l"(desc_a), "l"(desc_b), "r"(scale_d), "n"(TRANS_A), "n"(TRANS_B));
}

template <int TRANS_A, int TRANS_B>
__device__ __forceinline__ void wgmma_m64n128k16(float (&d)[64], u64 desc_a, u64 desc_b, int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\n"
      "setp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15,"
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31,"
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47,"
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
      "}, %64, %65, p, 1, 1, %67, %68;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]),
        "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]),
        "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]),
        "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]),
        "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]),
        "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]),
        "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
        "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]),
        "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]),
        "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
      : "l"(desc_a), "l"(desc_b), "r"(scale_d), "n"(TRANS_A), "n"(TRANS_B));
}

template <int TRANS_A, int TRANS_B>
__device__ __forceinline__ void wgmma_m64n192k16(float (&d)[96], u64 desc_a, u64 desc_b, int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\n"
      "setp.ne.b32 p, %98, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n192k16.f32.bf16.bf16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15,"
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31,"
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47,"
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63,"
      "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79,"
      "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95"
      "}, %96, %97, p, 1, 1, %99, %100;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]),
        "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]),
        "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]),
        "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]),
        "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]),
        "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]),
        "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
        "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]),
        "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]),
        "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]),
        "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]),
        "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]),
        "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]),
        "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]),
        "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95])
      : "l"(desc_a), "l"(desc_b), "r"(scale_d), "n"(TRANS_A), "n"(TRANS_B));
}

template <int TRANS_A, int TRANS_B>
__device__ __forceinline__ void wgmma_m64n256k16(float (&d)[128], u64 desc_a, u64 desc_b, int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\n"
      "setp.ne.b32 p, %130, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15,"
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31,"
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47,"
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63,"
      "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79,"
      "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95,"
      "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111,"
      "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"
      "}, %128, %129, p, 1, 1, %131, %132;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]),
        "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]),
        "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]),
        "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]),
        "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]),
        "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]),
        "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
        "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]),
        "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]),
        "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]),
        "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]),
        "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]),
        "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]),
        "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]),
        "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]),
        "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]),
        "+f"(d[102]), "+f"(d[103]), "+f"(d[104]), "+f"(d[105]), "+f"(d[106]),
        "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]),
        "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]),
        "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]),
        "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]),
        "+f"(d[127])
      : "l"(desc_a), "l"(desc_b), "r"(scale_d), "n"(TRANS_A), "n"(TRANS_B));
}
#endif // !LCEJIT_EMU_SM90

template <int BN, int TRANS_A, int TRANS_B>
__device__ __forceinline__ void wgmma_bf16(float (&d)[BN / 2], u64 desc_a,
                                           u64 desc_b, int scale_d) {
  if constexpr (BN == 64)
    wgmma_m64n64k16<TRANS_A, TRANS_B>(d, desc_a, desc_b, scale_d);
  else if constexpr (BN == 128)
    wgmma_m64n128k16<TRANS_A, TRANS_B>(d, desc_a, desc_b, scale_d);
  else if constexpr (BN == 192)
    wgmma_m64n192k16<TRANS_A, TRANS_B>(d, desc_a, desc_b, scale_d);
  else
    wgmma_m64n256k16<TRANS_A, TRANS_B>(d, desc_a, desc_b, scale_d);
}

//===----------------------------------------------------------------------===//
// Configuration and tile order
//===----------------------------------------------------------------------===//

template <int BN_, int STAGES_, int MAJOR_A_, int MAJOR_B_, int PINGPONG_ = 0,
          int TMA_STORE_ = 0, int CLUSTER_M_ = 1, int SPLIT_K_ = 1, int BM_ = 128,
          int HALVES_ = 0>
struct GemmConfig {
  /// [Note: sm90 64-row ping-pong] BM = 64 (ping-pong only): a consumer's tile is one
  /// 64-row slice, as wide as 256 columns (m64n256k16: 128 accumulators a thread, as a
  /// 128 x 128 ping-pong tile's two slices), so the tensor cores read 38 bytes of shared
  /// memory a thousand MACs instead of 46.9. Measured as plain GEMMs (session 22, with
  /// and without pairs) it is no faster than 128 x 128, so only `--gemm-only` uses it.
  static constexpr int BM = BM_, BN = BN_, BK = 64, STAGES = STAGES_;
  static constexpr int MAJOR_A = MAJOR_A_, MAJOR_B = MAJOR_B_;
  /// [Note: sm90 ping-pong] 0: cooperative (both consumers split every tile);
  /// 1: each consumer takes every other tile whole (two 64-row slices), so one
  /// consumer's epilogue runs while the other's wgmma keep the tensor cores busy.
  static constexpr int PINGPONG = PINGPONG_;
  /// [Note: sm90 TMA store] 1: an f32 output tile leaves through shared memory
  /// and TMA (two 8 KB boxes per consumer after the stages).
  static constexpr int TMA_STORE = TMA_STORE_;
  /// [Note: sm90 multicast] 2 or 4: B arrives in CLUSTER_M parts of BN / CLUSTER_M rows
  /// (an MN-major B: in its 64-column boxes, box j from CTA j mod the cluster's size),
  /// each loaded by one CTA of a cluster and multicast to all of them (a smaller cluster's
  /// CTAs load several parts each; one CTA alone loads them all).
  static constexpr int CLUSTER_M = CLUSTER_M_;
  /// [Note: sm90 split-K] > 1: launched as clusters of up to SPLIT_K CTAs, each over its
  /// own k-blocks of one tile, summed through distributed shared memory (SplitKTiles).
  static constexpr int SPLIT_K = SPLIT_K_;
  /// [Note: sm90 column halves] 1: both consumers take every tile (cooperative, BN = 256),
  /// each all BM rows (two 64-row slices) of its own BN / 2 columns: the stage's A is read
  /// by both, so a k-block pulls 16 + 32 KB from L2 for 2 M MACs (16 + 16 in pairs: 16
  /// bytes a thousand MACs, against ping-pong's 23.4), and the epilogue of a tile no
  /// longer runs under the other consumer's mainloop.
  static constexpr int HALVES = HALVES_;
  /// The consumers cover every row of a tile (ping-pong: alternate tiles; halves: column
  /// halves), each in BM / 64 slices, and each writes its own partial entry of a row.
  static constexpr int ALL_ROWS = PINGPONG || HALVES;
  static constexpr int SLICES = ALL_ROWS ? BM / 64 : 1; ///< 64-row slices per consumer
  /// The width of a consumer's wgmma (and of its epilogue's tile): BN, or BN / 2 in halves.
  static constexpr int WN = HALVES ? BN / 2 : BN;
  /// [Note: sm90 three consumers] Consumer warpgroups: 2, or BM / 64 = 3 for a cooperative
  /// 192-row tile (each consumer one 64-row slice, as at 128 rows), then 512 threads.
  static constexpr int CONSUMERS = PINGPONG ? 2 : (BM == 192 ? 3 : 2);
  static constexpr int THREADS = 128 * (1 + CONSUMERS);
  /// setmaxnreg: the producer gives registers back and the consumers take them, within
  /// the 64 K of an SM at one CTA: 128 x 40 + 256 x 232, or 128 x 32 + 384 x 160.
  static constexpr int PRODUCER_REGS = CONSUMERS == 3 ? 32 : 40;
  static constexpr int CONSUMER_REGS = CONSUMERS == 3 ? 160 : 232;
  static_assert(128 * PRODUCER_REGS + 128 * CONSUMERS * CONSUMER_REGS <= 65536,
                "sm90 GEMM: the warpgroups' registers exceed the register file");
  static constexpr int A_BYTES = BM * BK * 2, B_BYTES = BN * BK * 2;
  static constexpr int STAGE_BYTES = A_BYTES + B_BYTES;
  static constexpr int BOX_BYTES = 64 * 32 * 4; ///< one f32 box: 64 rows x 32 columns
  static constexpr int EPI_OFFSET = STAGES * STAGE_BYTES;
  static constexpr int EPI_BYTES = TMA_STORE ? 2 * 2 * BOX_BYTES : 0;
  static constexpr int BAR_OFFSET = EPI_OFFSET + EPI_BYTES;
  /// 1024 bytes of slack to align the base, the stages, the barriers.
  static constexpr int SMEM_BYTES = 1024 + BAR_OFFSET + 2 * STAGES * 8;
  /// [Note: sm90 loaded sums] An accumulating TMA-store epilogue may take the tile's old
  /// values through LOAD_STAGES stages of the ring (a consumer's BOXES boxes of its 64-row
  /// slice, STAGE_BOXES of them a stage, both consumers' side by side) and store the sums;
  /// it needs a stage left for the next tile's first k-block, and one CTA a tile.
  static constexpr int BOXES = BN / 32;
  static constexpr int STAGE_BOXES = STAGE_BYTES / BOX_BYTES / 2;
  static constexpr int LOAD_STAGES = (BOXES + STAGE_BOXES - 1) / STAGE_BOXES;
  static constexpr bool LOADED_SUMS = TMA_STORE && CLUSTER_M == 1 && SPLIT_K == 1 &&
                                      CONSUMERS == 2 && STAGES > LOAD_STAGES;
  static constexpr int ACC = WN / 2; ///< accumulator registers per slice
  static constexpr int EMPTY_ARRIVALS = PINGPONG ? 4 : 4 * CONSUMERS; ///< consumer warps per stage
  static_assert(BN == 64 || BN == 128 || BN == 192 || BN == 256,
                "sm90 GEMM: BN must be 64, 128, 192 or 256");
  static_assert(BM == 128 || (BM == 64 && PINGPONG && !TMA_STORE && SPLIT_K_ == 1) ||
                    (BM == 192 && !PINGPONG && !TMA_STORE && SPLIT_K_ == 1),
                "sm90 GEMM: BM is 128, 64 with ping-pong consumers, or 192 with three "
                "cooperative consumers (no TMA store, no split-K)");
  static_assert(BM != 192 || BN <= 192,
                "sm90 GEMM: three consumers hold at most 96 accumulators (ptxas compiles a "
                "512-thread kernel in 128 registers)");
  static_assert(!HALVES || (!PINGPONG && BM == 128 && BN == 256 && !TMA_STORE &&
                             SPLIT_K_ == 1 && MAJOR_B_ == K_MAJOR),
                "sm90 GEMM: column halves are a cooperative 128 x 256 tile with a K-major B");
  static_assert(!PINGPONG || SLICES * BN <= 256,
                "sm90 GEMM: a ping-pong consumer holds SLICES x BN / 2 accumulators (at most "
                "128)");
  static_assert(STAGES >= 2 && STAGES <= 8, "sm90 GEMM: 2 to 8 stages");
  static_assert(!TMA_STORE || (!PINGPONG && BN % 32 == 0),
                "sm90 GEMM: the TMA store epilogue runs on cooperative consumers");
  static_assert(SMEM_BYTES <= 232448, "sm90 GEMM: shared memory over 227 KB");
  static_assert(CLUSTER_M == 1 || ((CLUSTER_M == 2 || CLUSTER_M == 4) &&
                                    (MAJOR_B == K_MAJOR || (BN / 64) % CLUSTER_M == 0)),
                "sm90 GEMM: clusters of 2 or 4 along M, with a K-major B (parts of BN / "
                "CLUSTER_M rows) or an MN-major B of a multiple of CLUSTER_M 64-column boxes");
  /// A consumer's partial tile in the split-K exchange: BN / 2 floats per thread.
  static constexpr int SPLIT_BYTES = 128 * (BN / 2) * 4;
  static_assert(SPLIT_K == 1 || ((SPLIT_K == 2 || SPLIT_K == 4) && !PINGPONG && !TMA_STORE &&
                                 CLUSTER_M == 1 && 2 * SPLIT_BYTES <= STAGES * STAGE_BYTES),
                "sm90 GEMM: split-K runs clusters of 2 or 4 cooperative CTAs whose two "
                "partial tiles fit in the stages");
};

/// Tiles in groups of `group` tile rows: within a group, consecutive tiles walk
/// down the rows first, so the CTAs running at one time share B tiles (and, in
/// the group's few rows, A tiles) in L2.
struct TileOrder {
  i64 tiles_m, tiles_n, group;
  __device__ __forceinline__ void tile(i64 t, i64 &tm, i64 &tn) const {
    const i64 per_group = group * tiles_n;
    const i64 g = t / per_group;
    const i64 first = g * group;
    const i64 size = min_i64(tiles_m - first, group);
    const i64 r = t - g * per_group;
    tm = first + r % size;
    tn = r / size;
  }
};

/// The tiles of a persistent launch: CTA b takes t = b, b + grid, ... < count.
struct PersistentTiles {
  static constexpr bool STREAM = false;
  TileOrder order;
  __device__ __forceinline__ i64 first() const { return blockIdx.x; }
  __device__ __forceinline__ i64 stride() const { return gridDim.x; }
  __device__ __forceinline__ i64 end() const {
    return order.tiles_m * order.tiles_n;
  }
  __device__ __forceinline__ void tile(i64 t, i64 &tm, i64 &tn) const {
    order.tile(t, tm, tn);
  }
  __device__ __forceinline__ u32 splits() const { return 1; }
  __device__ __forceinline__ u32 split_rank() const { return 0; }
  __device__ __forceinline__ void k_range(i64, i64 kblocks, i64 &b, i64 &e) const {
    b = 0;
    e = kblocks;
  }
};

/// [Note: sm90 split-K] The tiles of a split-K launch: a cluster of `splits` CTAs
/// (consecutive along x) per tile, rank r over k-blocks [kb r / splits, kb (r + 1) /
/// splits). The ranks above 0 leave their f32 partial tiles in their own shared memory
/// (the stages, which the mainloop no longer reads); after a cluster barrier rank 0 adds
/// them to its accumulators through distributed shared memory, in rank order (the sum
/// is the same bits on every run), and alone runs the epilogue; a second cluster
/// barrier frees the partials' shared memory before any producer loads the next tile
/// into it. Without a cluster (splits = 1) these are PersistentTiles. The launch
/// (plan::Program::launchDims) gives a cluster one tile: grid = tiles x splits.
struct SplitKTiles {
  static constexpr bool STREAM = false;
  TileOrder order;
  u32 nsplit, rank;
  __device__ __forceinline__ i64 first() const { return blockIdx.x / nsplit; }
  __device__ __forceinline__ i64 stride() const { return gridDim.x / nsplit; }
  __device__ __forceinline__ i64 end() const { return order.tiles_m * order.tiles_n; }
  __device__ __forceinline__ void tile(i64 t, i64 &tm, i64 &tn) const {
    order.tile(t, tm, tn);
  }
  __device__ __forceinline__ u32 splits() const { return nsplit; }
  __device__ __forceinline__ u32 split_rank() const { return rank; }
  __device__ __forceinline__ void k_range(i64, i64 kblocks, i64 &b, i64 &e) const {
    b = kblocks * rank / nsplit;
    e = kblocks * (rank + 1) / nsplit;
  }
};

/// Column tiles [begin, end) of one row tile (GemmReduce: a CTA per row tile
/// and split).
struct RowOfTiles {
  static constexpr bool STREAM = false;
  i64 row, begin, last;
  __device__ __forceinline__ i64 first() const { return begin; }
  __device__ __forceinline__ i64 stride() const { return 1; }
  __device__ __forceinline__ i64 end() const { return last; }
  __device__ __forceinline__ void tile(i64 t, i64 &tm, i64 &tn) const {
    tm = row;
    tn = t;
  }
  __device__ __forceinline__ u32 splits() const { return 1; }
  __device__ __forceinline__ u32 split_rank() const { return 0; }
  __device__ __forceinline__ void k_range(i64, i64 kblocks, i64 &b, i64 &e) const {
    b = 0;
    e = kblocks;
  }
};

/// [Note: dA stream-K] A launch of T tiles (T a multiple of 3) on 4 T / 3 CTAs: each group
/// of 4 CTAs shares 3 tiles, every CTA 3/4 of a tile's k-blocks, in segments:
///   rank 0: tile 0 k-blocks [0, K/2)  (owner), then tile 1 [3K/4, K) (helper)
///   rank 1: tile 0 [K/2, K) (helper),          then tile 2 [3K/4, K) (helper)
///   rank 2: tile 1 [0, 3K/4) (owner)
///   rank 3: tile 2 [0, 3K/4) (owner)
/// so that the two CTAs of each split tile finish their parts at the same time and no
/// partial waits while its CTA runs another segment. A helper hands its partial tile to
/// the owner through the group's slot in global memory (one per consumer; the three
/// hand-overs of a group use it in turn: u = 1, 2, 3 for tiles 0, 1, 2), with two flags
/// per consumer: `ready` (the helper has written hand-over u) and `done` (the owner has
/// read it); the owner adds it to its own sum (owner + helper: the same bits every run),
/// runs the epilogue, and after u = 3 sets both flags back to 0 for the next launch. Every
/// CTA of the launch is resident at once (one CTA an SM, a cooperative launch), so the
/// waits end.
///
/// A launch of more tiles than SMs runs `rounds` = T / P whole rounds of P CTAs first
/// (CTA c: tiles c, c + P, ...; segments s < rounds), and the tail of T - rounds P tiles
/// (a multiple of 3, at most 3 P / 4) 3 to each group of 4 of the first CTAs (segments s
/// >= rounds); the other CTAs end after their rounds.
struct StreamKTiles {
  static constexpr bool STREAM = true;
  /// The launch's scratch (plan::lhsStreamKBytes): the flags of every group (4 words a
  /// group) in the first FLAG_BYTES, zeroed with the workspace, then the slots, 2 x 128 x
  /// ACC floats a group (plan::kStreamKFlagBytes is the same number).
  static constexpr int FLAG_BYTES = 1024;
  TileOrder order;
  i64 rounds;     ///< whole rounds of `ctas` tiles before the tail
  i64 ctas;       ///< gridDim.x
  i64 cta;        ///< blockIdx.x
  i64 group;      ///< cta / 4: the tail group, where cta < 4 x (tail tiles / 3)
  u32 rank;       ///< cta % 4
  bool in_tail;   ///< whether this CTA takes part in the tail
  float *slots;   ///< per group: 2 consumers x 128 threads x ACC floats
  u32 *flags;     ///< per group: ready[2], done[2]
  __device__ __forceinline__ i64 first() const { return 0; }
  __device__ __forceinline__ i64 stride() const { return 1; }
  __device__ __forceinline__ i64 end() const {
    return rounds + (!in_tail ? 0 : rank <= 1 ? 2 : 1);
  }
  /// The group's tile (0, 1, 2) of tail segment s.
  __device__ __forceinline__ int which(i64 s) const {
    return rank == 0 ? static_cast<int>(s) : rank == 1 ? (s == 0 ? 0 : 2) : static_cast<int>(rank) - 1;
  }
  __device__ __forceinline__ void tile(i64 s, i64 &tm, i64 &tn) const {
    if (s < rounds)
      order.tile(s * ctas + cta, tm, tn);
    else
      order.tile(rounds * ctas + 3 * group + which(s - rounds), tm, tn);
  }
  __device__ __forceinline__ u32 splits() const { return 1; }
  __device__ __forceinline__ u32 split_rank() const { return 0; }
  __device__ __forceinline__ void k_range(i64 s, i64 kblocks, i64 &b, i64 &e) const {
    const i64 h = kblocks / 2, q = kblocks * 3 / 4;
    if (s < rounds) {
      b = 0;
      e = kblocks;
      return;
    }
    s -= rounds;
    if (rank == 0) {
      b = s == 0 ? 0 : q;
      e = s == 0 ? h : kblocks;
    } else if (rank == 1) {
      b = s == 0 ? h : q;
      e = kblocks;
    } else {
      b = 0;
      e = q;
    }
  }
  /// After segment s's k-blocks: hands the partial over or takes it; true when this
  /// consumer then runs the tile's epilogue (the owner).
  template <int R>
  __device__ __forceinline__ bool exchange(i64 s, float (&acc)[R], int g, int t) const {
    if (s < rounds)
      return true; // a whole tile of the rounds
    s -= rounds;
    // (hand-over u, this CTA the owner)
    const int u = rank == 0 ? (s == 0 ? 1 : 2) : rank == 1 ? (s == 0 ? 1 : 3) : static_cast<int>(rank);
    const bool owner = (rank == 0 && s == 0) || rank >= 2;
    float4 *slot = reinterpret_cast<float4 *>(slots + (group * 2 + g) * 128 * R);
    u32 *ready = flags + group * 4 + g, *done = flags + group * 4 + 2 + g;
    if (!owner) {
      if (t == 0)
        while (ld_acquire_u32(done) < static_cast<u32>(u - 1))
          __nanosleep(64);
      named_bar_sync(7 + g, 128);
#pragma unroll
      for (int q = 0; q < R / 4; ++q)
        __stcg(slot + q * 128 + t, make_float4(acc[4 * q], acc[4 * q + 1], acc[4 * q + 2],
                                               acc[4 * q + 3]));
      __threadfence();
      named_bar_sync(7 + g, 128);
      if (t == 0)
        st_release_u32(ready, static_cast<u32>(u));
      return false;
    }
    if (t == 0)
      while (ld_acquire_u32(ready) < static_cast<u32>(u))
        __nanosleep(64);
    named_bar_sync(7 + g, 128);
#pragma unroll
    for (int q = 0; q < R / 4; ++q) {
      const float4 v = __ldcg(slot + q * 128 + t);
      acc[4 * q] += v.x;
      acc[4 * q + 1] += v.y;
      acc[4 * q + 2] += v.z;
      acc[4 * q + 3] += v.w;
    }
    named_bar_sync(7 + g, 128);
    if (t == 0) {
      if (u == 3) {
        *ready = 0u;
        st_release_u32(done, 0u);
      } else {
        st_release_u32(done, static_cast<u32>(u));
      }
    }
    return true;
  }
};

/// [Note: dA stream-K chains] (plan/SchedulePolicy.h) A launch whose last round of T tiles
/// runs in chains: groups of q tiles on q + 1 CTAs (the last group T mod q tiles on one CTA
/// more), every CTA over q / (q + 1) of K. Tile j of a group of n tiles is split at
/// sp(j) = K (n - j) / (n + 1): its owner, CTA j of the group, runs [0, sp(j)) last; its
/// helper, CTA j + 1, runs [sp(j), K) first and hands the partial to the tile's own slot:
///   CTA 0:          tile 0 [0, sp(0))                              (owner)
///   CTA r, 0<r<n:   tile r - 1 [sp(r - 1), K) (helper), then tile r [0, sp(r)) (owner)
///   CTA n:          tile n - 1 [sp(n - 1), K)                      (helper)
/// so a helper's partial is written long before its owner needs it (the last one as the
/// owner ends) and no CTA waits on another's mainloop. One `ready` flag per tail tile and
/// consumer: the helper sets it after its slot is written, the owner adds the slot to its
/// own sum (owner + helper: the same bits every run), then sets it back to 0 for the next
/// launch (the executor zeroes the flags once per call). Every CTA is resident at once (a
/// cooperative launch).
struct StreamKChain {
  static constexpr bool STREAM = true;
  /// plan::kChainFlagBytes, plan::kChainMaxQ.
  static constexpr int FLAG_BYTES = 4096;
  static constexpr int MAX_Q = 3;
  // Little state, 32-bit (a launch has at most 512 CTAs, plan::lhsChainQ): the walker lives
  // in the consumers' registers next to 128 accumulators and the epilogue's, so this CTA's
  // place in the chain is derived from blockIdx where it is needed.
  int tiles_m, tiles_n; ///< TileOrder's, groups of 8 row tiles, in 32 bits
  int rounds; ///< whole rounds of gridDim.x tiles before the tail
  int q;      ///< tiles a group
  int tail;   ///< tiles of the last round
  u32 *flags; ///< per tail tile: ready[2]; the slots after FLAG_BYTES, per tail tile
              ///< 2 consumers x 128 threads x ACC floats

  __device__ __forceinline__ static int cta() { return static_cast<int>(blockIdx.x); }
  /// This CTA's place in its group (0..n) and the group's first tail tile.
  __device__ __forceinline__ int r() const { return cta() % (q + 1); }
  __device__ __forceinline__ int first_tile() const { return cta() / (q + 1) * q; }
  /// Tiles in this CTA's group; 0 when the CTA has no tail segment.
  __device__ __forceinline__ int n() const {
    const int left = tail - first_tile(), gn = left <= 0 ? 0 : left < q ? left : q;
    return r() <= gn ? gn : 0;
  }

  /// The smallest q that fits a tail of `tail` tiles on `ctas` CTAs, or 0 (plan::lhsChainQ).
  __device__ __forceinline__ static int chain_q(i64 tail, i64 ctas, i64 kblocks) {
    if (tail <= 0 || kblocks < 16 || ctas > FLAG_BYTES / 8)
      return 0;
    for (int q = 1; q <= (tail < MAX_Q ? static_cast<int>(tail) : MAX_Q); ++q)
      if (tail + (tail + q - 1) / q <= ctas)
        return kblocks >= 4 * (q + 1) ? q : 0;
    return 0;
  }
  __device__ __forceinline__ i64 first() const { return 0; }
  __device__ __forceinline__ i64 stride() const { return 1; }
  __device__ __forceinline__ i64 end() const {
    const int gn = n(), rr = r();
    return rounds + (gn == 0 ? 0 : (rr == 0 || rr == gn) ? 1 : 2);
  }
  __device__ __forceinline__ bool helper(i64 s) const { return s == rounds && r() > 0; }
  /// The group's tile of tail segment s.
  __device__ __forceinline__ int which(i64 s) const { return helper(s) ? r() - 1 : r(); }
  __device__ __forceinline__ void tile(i64 s, i64 &tm, i64 &tn) const {
    const int ctas = static_cast<int>(gridDim.x);
    const int t = s < rounds ? static_cast<int>(s) * ctas + cta()
                             : rounds * ctas + first_tile() + which(s);
    // TileOrder::tile with group 8.
    const int per_group = 8 * tiles_n, g = t / per_group, first = g * 8;
    const int size = tiles_m - first < 8 ? tiles_m - first : 8, r = t - g * per_group;
    tm = first + r % size;
    tn = r / size;
  }
  __device__ __forceinline__ u32 splits() const { return 1; }
  __device__ __forceinline__ u32 split_rank() const { return 0; }
  __device__ __forceinline__ void k_range(i64 s, i64 kblocks, i64 &b, i64 &e) const {
    if (s < rounds) {
      b = 0;
      e = kblocks;
      return;
    }
    // 32-bit (the producer runs this at 40 registers): k-blocks x 17 fit easily.
    const int j = which(s), gn = n();
    const i64 sp = static_cast<u32>(kblocks) * static_cast<u32>(gn - j) / static_cast<u32>(gn + 1);
    b = helper(s) ? sp : 0;
    e = helper(s) ? kblocks : sp;
  }
  /// After segment s's k-blocks: a helper hands its partial over, an owner takes it; true
  /// when this consumer then runs the tile's epilogue (the owner).
  template <int R>
  __device__ __forceinline__ bool exchange(i64 s, float (&acc)[R], int g, int t) const {
    if (s < rounds)
      return true; // a whole tile of the rounds
    const int tail_tile = first_tile() + which(s);
    float4 *slot = reinterpret_cast<float4 *>(reinterpret_cast<char *>(flags) + FLAG_BYTES) +
                   static_cast<i64>(tail_tile * 2 + g) * 32 * R;
    u32 *ready = flags + tail_tile * 2 + g;
    if (helper(s)) {
#pragma unroll
      for (int q = 0; q < R / 4; ++q)
        __stcg(slot + q * 128 + t, make_float4(acc[4 * q], acc[4 * q + 1], acc[4 * q + 2],
                                               acc[4 * q + 3]));
      __threadfence();
      named_bar_sync(7 + g, 128);
      if (t == 0)
        st_release_u32(ready, 1u);
      return false;
    }
    if (t == 0)
      while (ld_acquire_u32(ready) == 0u)
        __nanosleep(64);
    named_bar_sync(7 + g, 128);
    // Eight float4 loads in flight at a time: all R / 4 at once would hold R more registers
    // next to the R accumulators (a 128 x 256 tile: 256, past the consumers' 232, spills).
#pragma unroll
    for (int q0 = 0; q0 < R / 4; q0 += 8) {
#pragma unroll
      for (int q = q0; q < q0 + 8 && q < R / 4; ++q) {
        const float4 v = __ldcg(slot + q * 128 + t);
        acc[4 * q] += v.x;
        acc[4 * q + 1] += v.y;
        acc[4 * q + 2] += v.z;
        acc[4 * q + 3] += v.w;
      }
      asm volatile("" ::: "memory"); // the next eight loads stay after these adds
    }
    if (t == 0)
      *ready = 0u; // the next launch's (kernel boundaries order it)
    return true;
  }
};

/// Persistent tiles of an m x n output, grouped `group` tile rows at a time.
template <class Cfg>
__device__ __forceinline__ PersistentTiles persistent_tiles(i64 m, i64 n,
                                                            int group) {
  return PersistentTiles{TileOrder{(m + Cfg::BM - 1) / Cfg::BM,
                                   (n + Cfg::BN - 1) / Cfg::BN,
                                   group > 0 ? static_cast<i64>(group) : 1}};
}

/// Split-K tiles of an m x n output over the launch's clusters ([Note: sm90 split-K]).
template <class Cfg>
__device__ __forceinline__ SplitKTiles split_k_tiles(i64 m, i64 n, int group) {
  const u32 splits = cluster_nctarank();
  return SplitKTiles{TileOrder{(m + Cfg::BM - 1) / Cfg::BM, (n + Cfg::BN - 1) / Cfg::BN,
                               group > 0 ? static_cast<i64>(group) : 1},
                     splits, splits > 1 ? cluster_ctarank() : 0u};
}

/// [Note: sm90 split-K] The exchange of one tile's partial sums, run by every consumer
/// thread of the cluster after its k-blocks: `slot` is this thread's first float4 of its
/// consumer's partial (float4 q of thread t at 16 t + 2048 q), in the stages.
template <class Cfg>
__device__ __forceinline__ void split_k_exchange(float (&acc)[Cfg::ACC], u32 slot, u32 splits,
                                                 u32 rank) {
  if (rank != 0) {
    named_bar_sync(6, 256); // both consumers' wgmma have read the stages
#pragma unroll
    for (int q = 0; q < Cfg::ACC / 4; ++q)
      st_shared_f32x4(slot + 2048u * q, acc[4 * q], acc[4 * q + 1], acc[4 * q + 2],
                      acc[4 * q + 3]);
    fence_proxy_async_shared(); // before TMA writes these bytes for a later tile
  }
  cluster_sync(); // the partials are written
  if (rank == 0) {
    // Unrolled to the config's largest split, with an exit (not a loop to `splits`): with
    // the loop, ptxas spilled 8 bytes in Llama-3's dA (128 accumulators a thread and the
    // residual epilogue); this form does not. The order is the same: ranks 1, 2, ...
#pragma unroll
    for (u32 r = 1; r < static_cast<u32>(Cfg::SPLIT_K); ++r) {
      if (r >= splits)
        break;
#pragma unroll
      for (int q = 0; q < Cfg::ACC / 4; ++q) {
        const float4 v = ld_cluster_f32x4(slot + 2048u * q, r);
        acc[4 * q] += v.x;
        acc[4 * q + 1] += v.y;
        acc[4 * q + 2] += v.z;
        acc[4 * q + 3] += v.w;
      }
    }
  }
  cluster_sync(); // rank 0 has read them
}

/// [Note: stored values in dW] (plan/SchedulePolicy.h) An A operand that is the forward's
/// stored values in slabs of 128 columns: split < 0, the ordinary 2D map; else 3D maps
/// (column in the slab, row of the slab, slab), the slabs from `split` on through `map2`
/// (dA, whose K runs over every slab; a dB launch reads all of its slabs through map_a).
/// [Note: slab tails]: rows from `head` on (a multiple of 128) through `tail` (row
/// - head, every slab), for dA a row tile, for dB a k-block.
struct SlabA {
  const TensorMap *map2 = nullptr;
  i64 split = -1;
  const TensorMap *tail = nullptr;
  i64 head = 0;
};

/// stored_at (lcejit_common.cuh) finds an element of the stored values in either layout.

/// Whether an epilogue takes its tile's old values through the ring ([Note: sm90 loaded
/// sums]): Epi::LOADED_SUMS where it is declared, else false.
template <class Epi>
__device__ __forceinline__ constexpr auto epi_loaded_sums(int)
    -> decltype(bool(Epi::LOADED_SUMS)) {
  return Epi::LOADED_SUMS;
}
template <class Epi> __device__ __forceinline__ constexpr bool epi_loaded_sums(long) {
  return false;
}

//===----------------------------------------------------------------------===//
// The mainloop. For every tile of `tiles`, Epi::tile(acc, row0, col0, t)
// gets consumer thread t's accumulators of the 64-row slice at (row0, col0)
// ([Note: sm90 accumulator]) and must mask rows and columns out of range
// itself. Consumer g's threads call Epi::begin(g, t) before the first tile and
// Epi::finish(g, t) after the last (also when the CTA or the consumer has no tile).
//===----------------------------------------------------------------------===//

template <class Cfg, int L2 = 0, class Tiles, class Epi>
__device__ __forceinline__ void gemm_tiles(const TensorMap &map_a,
                                           const TensorMap &map_b,
                                           const Tiles &tiles, Epi &epi,
                                           i64 k, u32 pair = 1, SlabA slab_a = {}) {
  constexpr int BM = Cfg::BM, BN = Cfg::BN, BK = Cfg::BK, STAGES = Cfg::STAGES;
  // [Note: sm90 L2 hints] of A's and B's loads.
  constexpr int HA = l2_hint_a(L2), HB = l2_hint_b(L2);
  const u32 base = smem_base();
  const u32 full = base + Cfg::BAR_OFFSET;
  const u32 empty = full + STAGES * 8;
  // Warp-uniform by construction (a shuffle from lane 0, as CUTLASS's
  // canonical_warp_group_idx): ptxas may then keep what derives from it, the stage
  // index and the descriptors, in uniform registers.
  const int wg = __shfl_sync(0xffffffffu, static_cast<int>(threadIdx.x) / 128, 0);
  const int t = static_cast<int>(threadIdx.x) % 128;
  // [Note: sm90 multicast] With CLUSTER_M = 2 or 4 and a cluster launch of `pair` CTAs
  // (2 or 4, dividing CLUSTER_M), the cluster walks the same column tiles over adjacent
  // row tiles: each producer loads its own A and the parts p = rank, rank + pair, ... of
  // B's CLUSTER_M parts, multicast into every CTA's stage (the full barrier expects the
  // whole stage either way), and every consumer warp frees a stage in all of the
  // cluster's CTAs, so that empty[s] counts all their consumers before any producer
  // overwrites stage s anywhere. Launched without a cluster (row tiles that do not group)
  // the CTA loads every part itself.
  constexpr bool MC = Cfg::CLUSTER_M > 1;
  const u32 cn = MC ? pair : 1u; // CTAs sharing B: the cluster's 2 or 4, else 1
  const u32 rank = MC && cn > 1 ? cluster_ctarank() : 0u;

  if (threadIdx.x == 0) {
#pragma unroll
    for (int s = 0; s < STAGES; ++s) {
      mbar_init(full + 8 * s, 1);
      mbar_init(empty + 8 * s, Cfg::EMPTY_ARRIVALS * cn);
    }
    mbar_fence_init();
    tma_prefetch(&map_a);
    tma_prefetch(&map_b);
    if (slab_a.map2)
      tma_prefetch(slab_a.map2);
    if (slab_a.tail)
      tma_prefetch(slab_a.tail);
  }
  __syncthreads();
  if (MC && cn > 1)
    cluster_sync(); // the peer's barriers exist before anything reaches them

  const i64 kblocks = (k + BK - 1) / BK;

  // [Note: sm90 split-K]: every thread of a split-K cluster takes part in its two cluster
  // barriers per tile, the producer warpgroup's too.
  const bool split = Cfg::SPLIT_K > 1 && tiles.splits() > 1;

  if (wg == 0) {
    setmaxnreg_dec<Cfg::PRODUCER_REGS>();
    if (t == 0 || split) {
      int s = 0;
      u32 phase = 0;
      for (i64 tile = tiles.first(); tile < tiles.end(); tile += tiles.stride()) {
        if (split && t != 0) {
          cluster_sync(); // the partials are written
          cluster_sync(); // rank 0 has read them: the stages may be loaded again
          continue;
        }
        i64 tm, tn;
        tiles.tile(tile, tm, tn);
        const int m0 = static_cast<int>(tm * BM), n0 = static_cast<int>(tn * BN);
        i64 kb_begin, kb_end;
        tiles.k_range(tile, kblocks, kb_begin, kb_end);
        for (i64 kb = kb_begin; kb < kb_end; ++kb) {
          const int k0 = static_cast<int>(kb * BK);
          mbar_wait(empty + 8 * s, phase ^ 1u);
          const u32 bar = full + 8 * s;
          mbar_expect_tx(bar, Cfg::STAGE_BYTES);
          const u32 a_dst = base + s * Cfg::STAGE_BYTES;
          const u32 b_dst = a_dst + Cfg::A_BYTES;
          if (Cfg::MAJOR_A == K_MAJOR) {
            if (slab_a.split >= 0) {
              // [Note: stored values in dW]: k-blocks of 64 columns, two a slab.
              const i64 sl = k0 >> 7;
              if (m0 >= slab_a.head) // [Note: slab tails]: the tile's rows lie in the tails
                tma_load_3d<HA>(a_dst, slab_a.tail, bar, k0 & 127,
                            m0 - static_cast<int>(slab_a.head), static_cast<int>(sl));
              else if (sl < slab_a.split)
                tma_load_3d<HA>(a_dst, &map_a, bar, k0 & 127, m0, static_cast<int>(sl));
              else
                tma_load_3d<HA>(a_dst, slab_a.map2, bar, k0 & 127, m0,
                            static_cast<int>(sl - slab_a.split));
            } else {
              tma_load_2d<HA>(a_dst, &map_a, bar, k0, m0);
            }
          } else {
#pragma unroll
            for (int j = 0; j < BM / 64; ++j) {
              const int m = m0 + 64 * j;
              if (slab_a.split >= 0 && k0 >= slab_a.head) // [Note: slab tails]
                tma_load_3d<HA>(a_dst + j * 8192, slab_a.tail, bar, m & 127,
                            k0 - static_cast<int>(slab_a.head), m >> 7);
              else if (slab_a.split >= 0)
                tma_load_3d<HA>(a_dst + j * 8192, &map_a, bar, m & 127, k0, m >> 7);
              else
                tma_load_2d<HA>(a_dst + j * 8192, &map_a, bar, m, k0);
            }
          }
          if (Cfg::MAJOR_B != K_MAJOR) {
            // An MN-major B in its 64-column boxes; in a cluster ([Note: dB multicast]) box
            // j from CTA j mod cn, multicast (alone, cn = 1 and rank 0: every box).
            const u16 mask = static_cast<u16>((1u << cn) - 1u);
#pragma unroll
            for (int j = 0; j < BN / 64; ++j) {
              if ((static_cast<u32>(j) & (cn - 1u)) != rank)
                continue; // another CTA's box
              if (cn > 1)
                tma_load_2d_multicast<HB>(b_dst + j * 8192, &map_b, bar, n0 + 64 * j, k0,
                                          mask);
              else
                tma_load_2d<HB>(b_dst + j * 8192, &map_b, bar, n0 + 64 * j, k0);
            }
          } else if (MC) {
            constexpr int PART = BN / Cfg::CLUSTER_M; // rows; 128 bytes each
            const u16 mask = static_cast<u16>((1u << cn) - 1u);
#pragma unroll
            for (int p = 0; p < Cfg::CLUSTER_M; ++p) {
              if ((static_cast<u32>(p) & (cn - 1u)) != rank)
                continue; // another CTA's part (cn is 1, 2 or 4)
              if (cn > 1)
                tma_load_2d_multicast<HB>(b_dst + p * PART * 128, &map_b, bar, k0,
                                          n0 + p * PART, mask);
              else
                tma_load_2d<HB>(b_dst + p * PART * 128, &map_b, bar, k0, n0 + p * PART);
            }
          } else {
            tma_load_2d<HB>(b_dst, &map_b, bar, k0, n0);
          }
          if (++s == STAGES) {
            s = 0;
            phase ^= 1u;
          }
        }
        if constexpr (epi_loaded_sums<Epi>(0)) {
          // [Note: sm90 loaded sums]: the tile's old output values, after its k-blocks.
          if (epi.loaded) {
            constexpr int SB = Cfg::STAGE_BOXES, NB = Cfg::BOXES;
#pragma unroll
            for (int p = 0; p < Cfg::LOAD_STAGES; ++p) {
              const int count = NB - p * SB < SB ? NB - p * SB : SB;
              mbar_wait(empty + 8 * s, phase ^ 1u);
              const u32 bar = full + 8 * s;
              mbar_expect_tx(bar, static_cast<u32>(2 * count * Cfg::BOX_BYTES));
              const u32 dst = base + s * Cfg::STAGE_BYTES;
#pragma unroll
              for (int g = 0; g < 2; ++g)
#pragma unroll
                for (int i = 0; i < SB; ++i)
                  if (i < count)
                    tma_load_2d(dst + (g * SB + i) * Cfg::BOX_BYTES, epi.map, bar,
                                n0 + 32 * (p * SB + i), m0 + 64 * g);
              if (++s == STAGES) {
                s = 0;
                phase ^= 1u;
              }
            }
          }
        }
        if (split) {
          cluster_sync();
          cluster_sync();
        }
      }
    }
  } else {
    setmaxnreg_inc<Cfg::CONSUMER_REGS>();
    const int g = wg - 1;
    const u32 warp_leader = (t & 31) == 0 ? 1u : 0u;
    // Frees stage `st` here and, in a cluster, in every CTA of it.
    const u32 peer = cn > 1 ? (rank ^ 1u) : rank;
    const u32 leader_peer = cn > 1 ? warp_leader : 0u;
    const u32 cluster = rank | cn << 8;
    auto release = [&](int st) {
      if constexpr (Cfg::CLUSTER_M > 2)
        mbar_arrive_cluster(empty + 8 * st, cluster);
      else if (MC)
        mbar_arrive_pair_if(empty + 8 * st, warp_leader, peer, leader_peer);
      else
        mbar_arrive_if(empty + 8 * st, warp_leader);
    };
    constexpr int TA = Cfg::MAJOR_A == K_MAJOR ? 0 : 1;
    constexpr int TB = Cfg::MAJOR_B == K_MAJOR ? 0 : 1;
    constexpr u32 A_STEP = TA ? 2048u : 32u;
    constexpr u32 B_STEP = TB ? 2048u : 32u;
    constexpr int SL = Cfg::SLICES;
    float acc[SL][Cfg::ACC];
    int s = 0;
    u32 phase = 0;
    // One k-block: wait for its stage, issue its BK / 16 wgmma per slice, commit.
    // Cooperative: consumer g's slice is rows 64 g.. of the stage's A; ping-pong:
    // slice j is rows 64 j.. (both layouts keep 64 rows at 8192 bytes).
    // [Note: sm90 descriptor arithmetic] The descriptors of stage 0 are made once; a
    // k-block's are those plus the stage's offset, and each wgmma's plus a constant,
    // all in the descriptor's low word (the start address >> 4: 14 bits, far from
    // overflowing at 227 KB). Building each of a k-block's 12 descriptors from its
    // address (mask, shift, or, 64-bit move) cost ~100 instructions per k-block, which
    // one issuing warp per scheduler could not keep ahead of the 512 tensor-core cycles
    // of a ping-pong k-block while the other consumer's epilogue shared the scheduler
    // (ncu, Gemma-2 forward: 127 instructions per k-block, 68 % tensor pipe).
    const u64 desc_a0 =
        sw128_desc(base + (Cfg::ALL_ROWS ? 0 : g * 8192), TA ? 8192u : 16u, 1024u);
    // [Note: sm90 column halves]: consumer g's columns are rows g WN.. of the stage's
    // K-major B (128 bytes a row, whole 1024-byte swizzle atoms).
    const u64 desc_b0 = sw128_desc(base + Cfg::A_BYTES + (Cfg::HALVES ? g * Cfg::WN * 128 : 0),
                                   TB ? 8192u : 16u, 1024u);
    auto issue = [&](bool first) {
      mbar_wait(full + 8 * s, phase);
      const u32 stage16 = static_cast<u32>(s) * (Cfg::STAGE_BYTES >> 4);
      const u64 da_s = desc_advance(desc_a0, stage16);
      const u64 db_s = desc_advance(desc_b0, stage16);
#pragma unroll
      for (int j = 0; j < SL; ++j)
        fence_acc(acc[j]);
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < BK / 16; ++kk) {
        const u64 db = desc_advance(db_s, (kk * B_STEP) >> 4);
#pragma unroll
        for (int j = 0; j < SL; ++j) {
          const u64 da = desc_advance(da_s, (j * 8192 + kk * A_STEP) >> 4);
          wgmma_bf16<Cfg::WN, TA, TB>(acc[j], da, db, (first && kk == 0) ? 0 : 1);
        }
      }
      wgmma_commit();
#pragma unroll
      for (int j = 0; j < SL; ++j)
        fence_acc(acc[j]);
    };
    auto advance = [&] {
      if (++s == STAGES) {
        s = 0;
        phase ^= 1u;
      }
    };
    epi.begin(g, t);
    i64 local = 0; // this CTA's tile count so far
    for (i64 tile = tiles.first(); tile < tiles.end();
         tile += tiles.stride(), ++local) {
      if (Cfg::PINGPONG) {
        if ((local & 1) != g)
          continue; // the other consumer's tile
        // [Note: sm90 ping-pong order] Wait until the other consumer has
        // issued its whole previous tile: every full barrier of this tile's
        // k-blocks is then at most one phase behind the one this consumer
        // waits for (a parity wait cannot tell phase k from phase k - 2).
        if (local > 0)
          named_bar_sync(2 + g, 256);
        // The ring holds the CTA's tiles back to back: this tile's first
        // k-block is the (local * kblocks)-th load.
        const i64 pos = local * kblocks;
        s = static_cast<int>(pos % STAGES);
        phase = static_cast<u32>((pos / STAGES) & 1);
      }
      i64 tm, tn;
      tiles.tile(tile, tm, tn);
      i64 kb_begin, kb_end;
      tiles.k_range(tile, kblocks, kb_begin, kb_end);
      const i64 nk = kb_end - kb_begin;
      // [Note: sm90 ping-pong hand-off] The other consumer may start its next tile as soon
      // as this one has issued its last wgmma (all the ring order needs: [Note: sm90
      // ping-pong order]), not after they retire: its first wgmma then queue behind this
      // tile's last ones instead of the tensor pipe draining at every tile switch (as
      // CUTLASS's ping-pong kernel arrives on its order barrier before the MMA tail).
      const bool hand_off = Cfg::PINGPONG && tile + tiles.stride() < tiles.end();
      if (nk == 0) {
        if (hand_off)
          named_bar_arrive(2 + (1 - g), 256);
#pragma unroll
        for (int j = 0; j < SL; ++j)
#pragma unroll
          for (int i = 0; i < Cfg::ACC; ++i)
            acc[j][i] = 0.f; // k == 0: the product is empty
      } else {
        issue(true);
        int prev = s;
        advance();
        // Never unrolled: with K a literal of a few k-blocks (a small hidden size) a
        // fully unrolled loop cost registers (a 4-byte spill in a D = 200 forward) and
        // NVRTC time, and gains nothing (each iteration issues BK / 16 async wgmma).
#pragma unroll 1
        for (i64 kb = 1; kb < nk; ++kb) {
          issue(false);
          wgmma_wait<1>(); // k-block kb - 1 has retired: free its stage
#pragma unroll
          for (int j = 0; j < SL; ++j)
            fence_acc(acc[j]);
          release(prev);
          prev = s;
          advance();
        }
        // Let the other consumer run the next tile's mainloop under this tile's last
        // wgmma and its epilogue.
        if (hand_off)
          named_bar_arrive(2 + (1 - g), 256);
        wgmma_wait<0>();
#pragma unroll
        for (int j = 0; j < SL; ++j)
          fence_acc(acc[j]);
        release(prev);
      }
      if constexpr (Tiles::STREAM) {
        if (!tiles.exchange(tile, acc[0], g, t))
          continue; // a helper: the owner runs the epilogue of the sum
      }
      if constexpr (Cfg::SPLIT_K > 1) {
        if (split) {
          split_k_exchange<Cfg>(acc[0], base + g * Cfg::SPLIT_BYTES + 16 * t, tiles.splits(),
                                tiles.split_rank());
          if (tiles.split_rank() != 0)
            continue; // rank 0 runs the epilogue of the sum
        }
      }
      if constexpr (epi_loaded_sums<Epi>(0)) {
        if (epi.loaded) {
          // [Note: sm90 loaded sums]: the sums leave through the stages that brought the
          // old values, each given back to the producer once its stores have read it.
          epi.tile_loaded(acc[0], tm * BM + 64 * g, tn * BN, t, g, base, full, s, phase,
                          release);
          continue;
        }
      }
#pragma unroll
      for (int j = 0; j < SL; ++j)
        epi.tile(acc[j], j, tm * BM + 64 * (Cfg::ALL_ROWS ? j : g),
                 tn * BN + (Cfg::HALVES ? g * Cfg::WN : 0), t);
    }
    epi.finish(g, t);
  }
  // No CTA of a cluster leaves while another may still arrive on its barriers.
  if (MC && cn > 1)
    cluster_sync();
}

/// A plain GEMM over an m x n output (persistent tiles).
/// With CLUSTER_M = 2 and a cluster launch, CTAs 2i and 2i + 1 share each B tile
/// ([Note: sm90 multicast]): the host launches clusters only when the row tiles and
/// `group` are even and the grid is even, so that tiles 2j + G q and 2j + 1 + G q (G the
/// grid) are row tiles 2r and 2r + 1 of one column for every q.
template <class Cfg, class Epi>
__device__ __forceinline__ void gemm(const TensorMap &map_a,
                                     const TensorMap &map_b, Epi &epi, i64 m,
                                     i64 n, i64 k, int group) {
  // The host launches a plain GEMM's clusters of exactly CLUSTER_M CTAs, or none.
  const u32 pair = Cfg::CLUSTER_M > 1 && cluster_nctarank() > 1 ? u32(Cfg::CLUSTER_M) : 1u;
  gemm_tiles<Cfg>(map_a, map_b, persistent_tiles<Cfg>(m, n, group), epi, k, pair);
}

//===----------------------------------------------------------------------===//
// A plain store epilogue: out[row][col] = acc as OutElem, row < m, col < n,
// rows ld elements apart.
//===----------------------------------------------------------------------===//

/// Stores x, y rounded to Elem at elements i, i + 1 (i even) in one access.
template <class Elem>
__device__ __forceinline__ void store_f32_pair(void *p, i64 i, float x,
                                               float y) {
  typedef typename Elem::raw_t Raw;
  if constexpr (Elem::BYTES == 4) {
    uint2 v;
    v.x = Elem::from_f32(x);
    v.y = Elem::from_f32(y);
    *reinterpret_cast<uint2 *>(static_cast<Raw *>(p) + i) = v;
  } else {
    const u32 v = static_cast<u32>(Elem::from_f32(x)) |
                  (static_cast<u32>(Elem::from_f32(y)) << 16);
    *reinterpret_cast<u32 *>(static_cast<Raw *>(p) + i) = v;
  }
}

template <class OutElem> struct StoreEpilogue {
  void *out;
  i64 ld, m, n;
  __device__ __forceinline__ void begin(int, int) const {}
  __device__ __forceinline__ void finish(int, int) const {}
  template <int R>
  __device__ __forceinline__ void tile(const float (&acc)[R], int, i64 row0,
                                       i64 col0, int t) const {
    const int w = t / 32, l = t % 32;
    const bool pairs = (ld % 2) == 0;
#pragma unroll
    for (int i = 0; i < R; i += 2) {
      const i64 row = row0 + 16 * w + l / 4 + 8 * ((i / 2) % 2);
      const i64 col = col0 + 8 * (i / 4) + 2 * (l % 4);
      if (row >= m || col >= n)
        continue;
      const i64 idx = row * ld + col;
      if (pairs && col + 1 < n) {
        store_f32_pair<OutElem>(out, idx, acc[i], acc[i + 1]);
      } else {
        store_f32<OutElem>(out, idx, acc[i]);
        if (col + 1 < n)
          store_f32<OutElem>(out, idx + 1, acc[i + 1]);
      }
    }
  }
};


//===----------------------------------------------------------------------===//
// The fused GEMM kinds of plan::Program on the sm_90a mainloop. Same contracts
// as their mma.sync twins in lcejit_kernels.cuh (docs/program.md); only the
// operands come as tensor maps, encoded by the executor
// ([Note: sm90 operand maps] in runtime/TensorMap.h).
//===----------------------------------------------------------------------===//

/// Row (within the 64-row slice) and column (within the tile) of accumulator
/// register i of consumer thread t ([Note: sm90 accumulator]).
__device__ __forceinline__ int acc_row(int i, int t) {
  return 16 * (t / 32) + (t % 32) / 4 + 8 * ((i / 2) % 2);
}
__device__ __forceinline__ int acc_col(int i, int t) {
  return 8 * (i / 4) + 2 * (t % 4) + (i % 2);
}

/// GemmReduce: every thread keeps the partials of its two rows over all the
/// column tiles of its split; the four lanes of a quad hold all columns of
/// those rows ([Note: sm90 accumulator]), so two shuffles finish a row.
template <class Cfg, class Epi> struct ReduceEpilogue {
  static constexpr int SLOTS = Epi::SLOTS;
  static constexpr int SL = Cfg::SLICES;
  static_assert(SLOTS <= 8, "sm90 gemm_reduce: at most 8 partial slots per row");
  const Epi &epi;
  void *partials;
  i64 n, cols, row_tile;
  int entries, split; ///< partial entries per row (Program::splits); this CTA's split
  typename Epi::Row rows[SL][2];
  float part[SL][2][SLOTS];

  /// First row of slice j of consumer g.
  __device__ __forceinline__ i64 slice_row0(int g, int j) const {
    return row_tile * Cfg::BM + 64 * (Cfg::ALL_ROWS ? j : g);
  }
  /// The row's operands: kept in registers across the tiles, except when the epilogue
  /// also stores values (materialized), where the registers are short and the row is
  /// loaded again per tile (an L1 hit).
  __device__ __forceinline__ typename Epi::Row row_operands(int j, int h, i64 row) const {
    if constexpr (Epi::STORE)
      return row < n ? epi.load_row(row) : typename Epi::Row();
    else
      return rows[j][h];
  }
  __device__ __forceinline__ void begin(int g, int t) {
#pragma unroll
    for (int j = 0; j < SL; ++j)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const i64 row = slice_row0(g, j) + acc_row(2 * h, t);
        if constexpr (!Epi::STORE)
          rows[j][h] = row < n ? epi.load_row(row) : typename Epi::Row();
        Epi::init(part[j][h]);
      }
  }
  template <int R>
  __device__ __forceinline__ void tile(float (&acc)[R], int j, i64 row0,
                                       i64 col0, int t) {
    // R accumulators cover 64 rows x 2 R columns.
    if constexpr (Epi::STORE) {
      // Stored values only where the columns are a multiple of BN (emitGemmReduce checks):
      // every tile is full, and the element path below, never taken there, is not
      // compiled (session 14: the forward's NVRTC time 2.5 -> 1.5 s on the Llama-3 head,
      // 3.9 -> 1.7 s on Gemma-2's, under nvcc on the build machine).
      static_assert(Epi::FRAGMENT_LSE_SLOT >= 0, "stored values take the fragment path");
      tile_fragments(acc, j, row0, col0, t);
      return;
    }
    if (Epi::FRAGMENT_LSE_SLOT >= 0 && col0 + 2 * R <= cols) {
      tile_fragments(acc, j, row0, col0, t);
      return;
    }
#pragma unroll
    for (int i = 0; i < R; ++i) {
      const i64 col = col0 + acc_col(i, t);
      if (col < cols) {
        const int h = (i / 2) % 2;
        const typename Epi::Col c = epi.load_col(col);
        epi.accumulate(part[j][h], acc[i], row0 + acc_row(i, t), col,
                       row_operands(j, h, row0 + acc_row(i, t)), c);
      }
    }
  }
  /// [Note: sm90 reduce by fragments]
  /// On a tile whose columns are all inside `cols`, the row's logsumexp is
  /// taken over the R / 2 elements this thread holds of each of its rows in
  /// two passes (lse_of_values): the elementwise chain and the max, then one
  /// exp per element and a sum, merged once into the row's partial. The
  /// values overwrite the accumulators, which the next tile's first wgmma
  /// ignores. Folding element by element (lse_add, still used on the last,
  /// partial column tile) chains R / 2 exps and rescales through (m, t), and
  /// with one epilogue warp per scheduler nothing hides that chain. Sums are added
  /// by fragment_value, except the target pick, added once per row and tile below
  /// ([Note: the target pick by fragments]). Only full tiles take this path:
  /// per-element column checks here made ptxas spill under ping-pong's 128
  /// accumulators per thread.
  template <int R>
  __device__ __forceinline__ void tile_fragments(float (&acc)[R], int j,
                                                 i64 row0, i64 col0, int t) {
    constexpr int S = Epi::FRAGMENT_LSE_SLOT;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const i64 row = row0 + acc_row(2 * h, t);
      const typename Epi::Row rv = row_operands(j, h, row);
      // Element k of the fragment: accumulator 4 (k / 2) + 2 h + k % 2.
#pragma unroll
      for (int k = 0; k < R / 2; ++k) {
        const int i = 4 * (k / 2) + 2 * h + k % 2;
        const i64 col = col0 + acc_col(i, t);
        acc[i] = epi.fragment_value(part[j][h], acc[i], row, col, rv,
                                    epi.load_col(col));
      }
      // [Note: the target pick by fragments] (codegen/GemmEmitter.cpp): element k of the
      // fragment is column col0 + 8 (k / 2) + 2 (t % 4) + k % 2; the target's k is found
      // once, and only the rare thread that holds it selects and adds its value.
      if constexpr (Epi::PICK_SLOT >= 0) {
        const i64 rel = epi.pick_column(rv) - col0 - 2 * (t % 4);
        if (rel >= 0 && rel < 2 * R && (rel % 8) < 2) {
          const int kx = static_cast<int>(2 * (rel / 8) + rel % 8);
          float v = 0.f;
#pragma unroll
          for (int k = 0; k < R / 2; ++k)
            v = k == kx ? acc[4 * (k / 2) + 2 * h + k % 2] : v;
          sum_add(part[j][h][Epi::PICK_SLOT], v);
        }
      }
      float m, tt;
      if constexpr (Epi::STORE && Epi::STORE_ROW_SCALED)
        lse_and_store_row_scaled(m, tt, acc, rv, h, row, col0, t);
      else if constexpr (Epi::STORE)
        lse_and_store(m, tt, acc, rv, h, row, col0, t);
      else
        lse_of_values<R / 2>(
            m, tt, [&](int k) { return acc[4 * (k / 2) + 2 * h + k % 2]; });
      lse_merge(part[j][h][S], part[j][h][S + 1], m, tt);
    }
  }
  /// [Note: the materialized backward] (plan/Program.h): lse_of_values over the thread's
  /// R / 2 values of a row, and in the same pass the stored values fp16(factor(v) *
  /// exp(v - m)) with m the row's maximum over the tile (the quad's four lanes, two
  /// shuffles; the target column left out), and m at tile_max[row][tile].
  /// Only full tiles: the planner materializes when the columns are a multiple of BN.
  template <int R>
  __device__ __forceinline__ void lse_and_store(float &m, float &t_out, float (&acc)[R],
                                                const typename Epi::Row &rv, int h, i64 row,
                                                i64 col0, int t) {
    lse_of_values<R / 2>(m, t_out,
                         [&](int k) { return acc[4 * (k / 2) + 2 * h + k % 2]; });
    // The reference of the stored values: the lane's maximum without the target column
    // (see StoredTile::excludeArg); the logsumexp keeps the true maximum m. Element k of
    // this lane's row is column col0 + 8 (k / 2) + 2 (t % 4) + k % 2: the target's k (or
    // -1) is found once, then compared with constants.
    const i64 rel = epi.store_target(rv) - col0 - 2 * (t % 4);
    const int kx = (rel >= 0 && rel < 2 * R && (rel % 8) < 2)
                       ? static_cast<int>(2 * (rel / 8) + rel % 8)
                       : -1;
    float sm = -f32_inf();
#pragma unroll
    for (int k = 0; k < R / 2; ++k)
      sm = k == kx ? sm : fmaxf(sm, acc[4 * (k / 2) + 2 * h + k % 2]);
    // The quad's four lanes hold the row's columns of the tile: one reference per tile.
    sm = fmaxf(sm, shfl_xor(sm, 1));
    sm = fmaxf(sm, shfl_xor(sm, 2));
    const float base = sm == -f32_inf() ? 0.f : sm;
    pack_values<false>(acc, rv, h, row, col0, t, base);
    store_pairs(acc, h, row, col0, t, row < n);
    if (row < n) {
      if (t % 4 == 0)
        static_cast<float *>(epi.store_tile_max)[row * (cols / Cfg::WN) + col0 / Cfg::WN] = base;
    }
  }
  /// The stored values of one row of the tile, factor(v) * exp(v - base), each pair
  /// packed to two fp16 (bf16 with BF16) as soon as it is made, in
  /// the slot of its first accumulator (half the live registers); store_pairs then writes
  /// them from one row base at constant offsets. Interleaving values and stores, or 64-bit
  /// addresses per element, made ptxas spill (as in DzEpilogue).
  template <bool BF16, int R>
  __device__ __forceinline__ void pack_values(float (&acc)[R], const typename Epi::Row &rv,
                                              int h, i64 row, i64 col0, int t,
                                              float base) const {
    const ExpFrom exp_from(base);
#pragma unroll
    for (int g = 0; g < R / 4; ++g) {
      const int i = 4 * g + 2 * h;
      float f[2];
#pragma unroll
      for (int u = 0; u < 2; ++u) {
        const float v = acc[i + u];
        const float e = exp_from(v);
        const i64 col = col0 + acc_col(i + u, t);
        f[u] = epi.store_factor(v, row, col, rv, epi.load_col(col)) * e;
      }
      // One cvt.rn.{bf16x2,f16x2}.f32 packs the pair (f[0] in the low half).
      const u32 packed = BF16 ? bf16x2_bits(f[0], f[1]) : f16x2_bits(f[0], f[1]);
      acc[i] = __uint_as_float(packed);
    }
  }
  /// [Note: stored values in pairs of lanes] The stored values of one row of the tile,
  /// packed two per accumulator of slot 4 g + 2 h (as pack_values leaves them): lane q of
  /// the quad holds columns 8 g + 2 q and + 1 of every group g. Lanes q and q ^ 1 swap one
  /// value of each pair of groups (2 c, 2 c + 1), so that the even lane holds columns 8 (2 c)
  /// + 2 q .. + 3 and the odd one 8 (2 c + 1) + 2 (q - 1) .. + 3, and each stores them as 8
  /// bytes: a warp's store writes 8 rows x 32 contiguous bytes (whole sectors) instead of 8
  /// rows x 16. Half the store instructions, 18 % fewer L2 write sectors; the column-halves
  /// forward 1.2-1.4 % faster alone on an H100, ping-pong the same (docs/hopper.md, session
  /// 42). A quad transpose for 16-byte stores cost more in shuffles and selects than it saved.
  /// Every lane of the warp calls it (the swap is a shuffle); only `live` lanes store.
  template <int R>
  __device__ __forceinline__ void store_pairs(const float (&acc)[R], int h, i64 row, i64 col0,
                                              int t, bool live) const {
    static_assert(R % 8 == 0, "pairs of groups of 8 columns");
    const int q = t % 4;
    const bool odd = q & 1;
    // [Note: stored values in dW]: a tile's columns lie in one slab (BN divides 128).
    u32 *out = live ? reinterpret_cast<u32 *>(stored_at(epi.store_values, epi.store_slabs2,
                                                        epi.store_split, epi.store_stride,
                                                        epi.store_head, n, cols, row, col0)) +
                          (odd ? q + 3 : q)
                    : nullptr;
#pragma unroll
    for (int c = 0; c < R / 8; ++c) {
      const u32 x0 = __float_as_uint(acc[4 * (2 * c) + 2 * h]);
      const u32 x1 = __float_as_uint(acc[4 * (2 * c + 1) + 2 * h]);
      const u32 r = __shfl_xor_sync(0xffffffffu, odd ? x0 : x1, 1);
      if (live) // [Note: streamed outputs]
        st_cs_u32x2(out + 8 * c, odd ? r : x0, odd ? x1 : r);
    }
  }
  /// [Note: row-scaled stored values] (plan/Program.h): v <= C = Epi::STORE_REFERENCE
  /// for every element (or C per row: [Note: a per-row reference]). lse_of_values gives
  /// the thread's partial (m, t) as without stores; a second pass stores
  /// bf16(factor(v) * exp(v - C)), 0 at the target column. No tile maximum, no shuffles.
  /// (One loop that summed and stored from one exp per element ran the forward 3.7 %
  /// slower on the H200: tensor pipe 81 % active against 84 %, the sum's chain
  /// interleaved with the stores; docs/hopper.md, session 9.)
  template <int R>
  __device__ __forceinline__ void lse_and_store_row_scaled(float &m, float &t_out,
                                                           float (&acc)[R],
                                                           const typename Epi::Row &rv, int h,
                                                           i64 row, i64 col0, int t) {
    lse_of_values<R / 2>(m, t_out,
                         [&](int k) { return acc[4 * (k / 2) + 2 * h + k % 2]; });
    // [Note: a per-row reference]: c = the row's target value, +inf (every value 0) for a
    // row whose target lies outside [0, cols).
    float ref = static_cast<float>(Epi::STORE_REFERENCE);
    if constexpr (Epi::STORE_ROW_REFERENCE) {
      const i64 tg = epi.store_target(rv);
      ref = tg >= 0 && tg < cols ? epi.store_reference(rv) : f32_inf();
    }
    // exp(v - c) as one ex2 of one FFMA (v log2 e - c log2 e), not exp(v - m) * exp(m - c):
    // a multiply less per value. The two factors kept each exp within [e^-64, 1], but the
    // product already left f32's normal range below e^-87 (denormals, then 0); now those
    // values are 0 (ex2.approx.ftz), at least e^-87 below the row's largest (m >= c where
    // the target is in the row), far under bf16's 2^-9.
    pack_values<true>(acc, rv, h, row, col0, t, ref);
    store_pairs(acc, h, row, col0, t, row < n);
    __syncwarp(); // the target's pair may have been stored by the other lane of its pair
    if (row < n) {
      // The target column stores 0 (its dZ goes whole through the residual): one 2-byte
      // store after the pair's, by the same thread (a select per element, or the target
      // kept live across the loop, made ptxas spill).
      const i64 rel = epi.store_target(rv) - col0 - 2 * (t % 4);
      if (rel >= 0 && rel < 2 * R && (rel % 8) < 2)
        *stored_at(epi.store_values, epi.store_slabs2, epi.store_split, epi.store_stride,
                   epi.store_head, n, cols, row, col0 + rel + 2 * (t % 4)) = 0;
    }
  }
  /// Quad shuffles finish each row of a consumer. With ping-pong both consumers hold
  /// partials of all 128 rows for alternate column tiles, with column halves for the two
  /// halves of every tile: each writes its own entry (2 split + g) of the row's partials,
  /// so nothing is exchanged between them.
  __device__ __forceinline__ void finish(int g, int t) {
#pragma unroll
    for (int j = 0; j < SL; ++j)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
#pragma unroll
        for (int mask = 1; mask < 4; mask <<= 1) {
          float other[SLOTS];
#pragma unroll
          for (int q = 0; q < SLOTS; ++q)
            other[q] = shfl_xor(part[j][h][q], mask);
          Epi::combine(part[j][h], other);
        }
        const i64 row = slice_row0(g, j) + acc_row(2 * h, t);
        const int entry = Cfg::ALL_ROWS ? 2 * split + g : split;
        if (t % 4 == 0 && row < n) {
          float *out = static_cast<float *>(partials) +
                       (row * entries + entry) * SLOTS;
#pragma unroll
          for (int q = 0; q < SLOTS; ++q)
            out[q] = part[j][h][q];
        }
      }
  }
};

/// `splits` partial entries per row (Program::splits): one per CTA split, or two
/// (one per consumer) with ping-pong or column halves (Cfg::ALL_ROWS). Grid: ceil(n / 128) * (CTA splits) CTAs, one per
/// (row tile, split), in the grouped order of TileOrder (GROUP row tiles at a time: 16,
/// GemmReduceKernel::orderGroup), so that the CTAs resident together share their A tiles
/// and their current B tiles in L2. CTA split s reduces the column tiles [s * per, (s + 1)
/// * per) of per = ceil(ceil(cols / BN) / CTA splits); an empty range (or consumer) writes
/// empty partials.
template <class Cfg, int GROUP = 16, int L2 = 0, class Epi>
__device__ __forceinline__ void
gemm_reduce_kernel(const TensorMap &map_a, const TensorMap &map_b,
                   const Epi &epi, void *partials, i64 n, i64 cols, i64 k,
                   int splits) {
  // The entry point checked the grid: ceil(n / BM) * (CTA splits) CTAs in x, with
  // splits even and CTA splits = splits / 2 under ping-pong (partials[row][entry]
  // assume it).
  const i64 row_tiles = (n + Cfg::BM - 1) / Cfg::BM;
  const int cta_splits = Cfg::ALL_ROWS ? splits / 2 : splits;
  // [Note: forward CTA order] Groups of up to 16 row tiles: with the Llama-3 head's
  // row blocks of 2048 rows every row tile of a split runs in the same wave, so each B
  // tile is read from DRAM about once (groups of 8 split them over two waves: ncu
  // measured 2.9 GB of DRAM reads per block for 1.05 GB of W; groups of 16: 1.6 GB,
  // H200, 2026-12-02). GROUP is the plan's (GemmReduceKernel::orderGroup): 8 on a narrower
  // memory interface ([Note: forward CTA order by card] in plan/Program.h: an H100 ran
  // Llama-3's 8192-row block 3-5 % faster so), any even count with LCEJIT_FWD_GROUP.
  static_assert(GROUP >= 2 && GROUP % 2 == 0, "pairs need groups of an even row-tile count");
  const TileOrder order{row_tiles, static_cast<i64>(cta_splits), GROUP};
  i64 row_tile, split64;
  order.tile(static_cast<i64>(blockIdx.x), row_tile, split64);
  // [Note: sm90 multicast] A cluster of c CTAs (2 or 4) shares B only when it walks the
  // same column tiles: the host launches clusters of c when the row tiles are a multiple
  // of c, so that every group of the order is (groups of a multiple of 4 row tiles), and
  // CTAs c i .. c i + c - 1 are row tiles c j .. c j + c - 1 of one split. Every CTA of
  // the cluster tests the same thing, so a cluster that does not share (a launch outside
  // that contract) runs as single CTAs instead of hanging.
  u32 pair = 1;
  if (Cfg::CLUSTER_M > 1) {
    const u32 c = cluster_nctarank();
    if (c > 1) {
      bool shared = true;
      const i64 first = static_cast<i64>(blockIdx.x / c * c);
      for (u32 r = 0; r < c; ++r) {
        i64 peer_row, peer_split;
        order.tile(first + r, peer_row, peer_split);
        shared = shared && peer_split == split64;
      }
      pair = shared ? c : 1u;
    }
  }
  const int split = static_cast<int>(split64);
  const i64 tiles = (cols + Cfg::BN - 1) / Cfg::BN;
  // Splits of floor or ceil(tiles / cta_splits) tiles ([Note: column splits per call]: 33
  // splits of Llama-3's 1002 tiles are 30 or 31 each, not 32 of 31 and one of 10).
  const i64 t_begin = static_cast<i64>(split) * tiles / cta_splits;
  const i64 t_end = static_cast<i64>(split + 1) * tiles / cta_splits;
  ReduceEpilogue<Cfg, Epi> e{epi, partials, n, cols, row_tile, splits, split};
  // [Note: sm90 L2 hints]: L2, the plan's GemmReduceKernel::l2 (none unless given).
  gemm_tiles<Cfg, L2>(map_a, map_b, RowOfTiles{row_tile, t_begin, t_end}, e, k, pair);
}

/// GemmDz: dz[row][c] = Epi::value(acc) for the columns of one chunk, bf16
/// (fast precision) or f32.
/// The element type of a dZ operand format (DZ_BF16 or DZ_F32).
template <int FORMAT> struct DzElem {
  typedef elem_bf16 type;
};
template <> struct DzElem<DZ_F32> {
  typedef elem_f32 type;
};

template <class Cfg, int FORMAT, class Epi> struct DzEpilogue {
  static_assert(FORMAT == DZ_BF16 || FORMAT == DZ_F32,
                "sm90 gemm_dz: one dZ operand (bf16 or f32)");
  static_assert(!Epi::RESIDUAL || FORMAT == DZ_BF16,
                "sm90 gemm_dz: a target-column residual is of a bf16 dZ");
  const Epi &epi;
  void *dz;
  float *residual; ///< f32 [n] (Epi::RESIDUAL): [Note: the target-column residual]
  i64 n, chunk_begin, chunk_cols;
  /// i32 [n] or null: only rows with row_filter[row] != 0 are written ([Note: a per-row
  /// reference] in plan/Program.h).
  const int *row_filter = nullptr;
  /// [Note: stored values in dW]: dz is the stored values in slabs (split >= 0; the
  /// checked path only, which every filtered launch takes).
  void *slabs2 = nullptr;
  i64 slab_split = -1, slab_stride = 0, slab_head = 0;

  /// The accumulator index of row half h's target column in this thread's tile at col0,
  /// or -1 (rows past n, targets outside the tile or in another lane).
  template <int R>
  __device__ __forceinline__ int target_slot(const typename Epi::Row &rv, int h, i64 row,
                                             i64 col0, int t) const {
    if (row >= n)
      return -1;
    const i64 rel = epi.residual_target(rv) - chunk_begin - col0 - 2 * (t % 4);
    return (rel >= 0 && rel < 2 * R && (rel % 8) < 2)
               ? static_cast<int>(4 * (rel / 8) + 2 * h + rel % 8)
               : -1;
  }
  /// residual[row] = v - f32(bf16(v)): what the bf16 store takes off the target's dZ.
  __device__ __forceinline__ void store_residual(i64 row, float v) const {
    residual[row] = v - elem_bf16::to_f32(elem_bf16::from_f32(v));
  }

  __device__ __forceinline__ void begin(int, int) const {}
  __device__ __forceinline__ void finish(int, int) const {}
  template <int R>
  __device__ __forceinline__ void tile(float (&acc)[R], int, i64 row0, i64 col0,
                                       int t) const {
    typename Epi::Row rv[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const i64 row = row0 + acc_row(2 * h, t);
      rv[h] = row < n ? epi.load_row(row) : typename Epi::Row();
    }
    const bool pairs = (chunk_cols % 2) == 0;
    int kx[2] = {-1, -1}; // [Note: the target-column residual]
    if constexpr (Epi::RESIDUAL) {
#pragma unroll
      for (int h = 0; h < 2; ++h)
        kx[h] = target_slot<R>(rv[h], h, row0 + acc_row(2 * h, t), col0, t);
    }
    // R accumulators cover 64 rows x 2 R columns. [Note: sm90 dZ full tiles]
    // The checked loop below splits the unrolled epilogue into one basic block
    // per element pair, and ptxas then runs each element's latency chain
    // alone, with one epilogue warp per scheduler to hide it: with softcap
    // (tanh and exp per element) B's dZ kernel was at 63 % tensor-pipe
    // activity. Inside the rows and columns (even columns for the pair
    // stores), an epilogue that asks for it (FULL_TILE_PASSES, set by the
    // emitter for long chains) takes two unchecked passes instead: every value
    // (in place of its accumulator), then every store: 73 %. With one exp per
    // element the stores bunched at the end cost more than the chain (A: 89 ->
    // 85 %), and interleaving groups of values and stores spilled.
    if (Epi::FULL_TILE_PASSES && pairs && row_filter == nullptr && row0 + 64 <= n &&
        col0 + 2 * R <= chunk_cols) {
      // Per row one base (element pair q of the row is 8 q columns on), so
      // that the stores take constant offsets: 64-bit addresses per element
      // made ptxas spill here.
      typedef typename DzElem<FORMAT>::type Out;
      typedef typename Out::raw_t Raw;
      const i64 c0 = col0 + 2 * (t % 4), col_base = chunk_begin + c0;
      i64 row_of[2];
      Raw *base[2];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        row_of[h] = row0 + acc_row(2 * h, t);
        base[h] = static_cast<Raw *>(dz) + row_of[h] * chunk_cols + c0;
      }
      // The values overwrite the accumulators (the next tile's first wgmma
      // ignores them), then go out in pairs.
#pragma unroll
      for (int i = 0; i < R; ++i) {
        const int h = (i / 2) % 2;
        const i64 col = col_base + 8 * (i / 4) + i % 2;
        acc[i] = epi.value(acc[i], row_of[h], col, rv[h], epi.load_col(col));
      }
#pragma unroll
      for (int i = 0; i < R; i += 2)
        store_f32_pair<Out>(base[(i / 2) % 2], 8 * (i / 4), acc[i], acc[i + 1]);
      if constexpr (Epi::RESIDUAL) {
        // The target's value by selects over constant indices (no indexed registers).
        float tv[2] = {0.f, 0.f};
#pragma unroll
        for (int i = 0; i < R; ++i)
          tv[(i / 2) % 2] = i == kx[(i / 2) % 2] ? acc[i] : tv[(i / 2) % 2];
#pragma unroll
        for (int h = 0; h < 2; ++h)
          if (kx[h] >= 0)
            store_residual(row_of[h], tv[h]);
      }
      return;
    }
#pragma unroll
    for (int i = 0; i < R; i += 2) {
      const int h = (i / 2) % 2;
      const i64 row = row0 + acc_row(i, t);
      const i64 c = col0 + acc_col(i, t);
      if (row >= n || c >= chunk_cols || (row_filter != nullptr && row_filter[row] == 0))
        continue;
      const float v0 = epi.value(acc[i], row, chunk_begin + c, rv[h],
                                 epi.load_col(chunk_begin + c));
      i64 idx = row * chunk_cols + c;
      void *dz_at = dz;
      if (slab_split >= 0) {
        // [Note: stored values in dW]: one chunk of all columns; c and c + 1 share a slab.
        dz_at = stored_at(dz, slabs2, slab_split, slab_stride, slab_head, n, chunk_cols, row,
                          c);
        idx = 0;
      }
      if constexpr (Epi::RESIDUAL)
        if (i == kx[h])
          store_residual(row, v0);
      if (c + 1 < chunk_cols) {
        const float v1 = epi.value(acc[i + 1], row, chunk_begin + c + 1, rv[h],
                                   epi.load_col(chunk_begin + c + 1));
        if constexpr (Epi::RESIDUAL)
          if (i + 1 == kx[h])
            store_residual(row, v1);
        if (FORMAT == DZ_BF16) {
          if (pairs)
            store_f32_pair<elem_bf16>(dz_at, idx, v0, v1);
          else {
            store_f32<elem_bf16>(dz_at, idx, v0);
            store_f32<elem_bf16>(dz_at, idx + 1, v1);
          }
        } else {
          if (pairs)
            store_f32_pair<elem_f32>(dz_at, idx, v0, v1);
          else {
            store_f32<elem_f32>(dz_at, idx, v0);
            store_f32<elem_f32>(dz_at, idx + 1, v1);
          }
        }
      } else if (FORMAT == DZ_BF16) {
        store_f32<elem_bf16>(dz_at, idx, v0);
      } else {
        store_f32<elem_f32>(dz_at, idx, v0);
      }
    }
  }
};

/// grid: persistent over the n x chunk_cols tiles; B's map covers the chunk's
/// rows of the weight.
template <class Cfg, int FORMAT, class Epi>
__device__ __forceinline__ void
gemm_dz_kernel(const TensorMap &map_a, const TensorMap &map_b, const Epi &epi,
               void *dz, void *residual, i64 n, i64 k, i64 chunk_begin, i64 chunk_cols) {
  DzEpilogue<Cfg, FORMAT, Epi> e{epi, dz, static_cast<float *>(residual), n, chunk_begin,
                                 chunk_cols};
  gemm_tiles<Cfg>(map_a, map_b, persistent_tiles<Cfg>(n, chunk_cols, 8), e, k);
}

/// [Note: a per-row reference] (plan/Program.h): gemm_dz_kernel for the rows r with
/// row_filter[r] != 0 only. Grid: SPLITS CTAs per 128-row tile; CTA (tile, s) takes the
/// column tiles [s * per, (s + 1) * per) of its row tile, per = ceil(tiles / SPLITS), and
/// returns at once (before any barrier or copy) when no row of its tile is flagged, which
/// is what nearly every launch does.
template <class Cfg, int FORMAT, int SPLITS, class Epi>
__device__ __forceinline__ void
gemm_dz_filtered_kernel(const TensorMap &map_a, const TensorMap &map_b, const Epi &epi,
                        void *dz, void *residual, const void *row_filter, i64 n, i64 k,
                        i64 chunk_begin, i64 chunk_cols, i64 slab_split = -1,
                        i64 slab_stride = 0, void *slabs2 = nullptr, i64 slab_head = 0) {
  const i64 row_tile = static_cast<i64>(blockIdx.x) / SPLITS;
  const int split = static_cast<int>(blockIdx.x % SPLITS);
  const int *filter = static_cast<const int *>(row_filter);
  const i64 r = row_tile * Cfg::BM + threadIdx.x % Cfg::BM;
  if (!__syncthreads_or(r < n && filter[r] != 0))
    return;
  const i64 tiles = (chunk_cols + Cfg::BN - 1) / Cfg::BN;
  const i64 per = (tiles + SPLITS - 1) / SPLITS;
  const i64 t_begin = min_i64(static_cast<i64>(split) * per, tiles);
  const i64 t_end = min_i64(t_begin + per, tiles);
  DzEpilogue<Cfg, FORMAT, Epi> e{epi,        dz,      static_cast<float *>(residual), n,
                                 chunk_begin, chunk_cols, filter, slabs2, slab_split,
                                 slab_stride, slab_head};
  gemm_tiles<Cfg>(map_a, map_b, RowOfTiles{row_tile, t_begin, t_end}, e, k);
}

/// f32 out[row][col] (+)= acc over an rows x cols output with ld columns;
/// `accumulate` adds to what is there.
struct F32OutEpilogue {
  float *out;
  i64 rows, cols, ld, row_offset;
  bool accumulate;
  __device__ __forceinline__ void begin(int, int) const {}
  __device__ __forceinline__ void finish(int, int) const {}
  template <int R>
  __device__ __forceinline__ void tile(const float (&acc)[R], int, i64 row0,
                                       i64 col0, int t) const {
    const bool pairs = (ld % 2) == 0;
#pragma unroll
    for (int i = 0; i < R; i += 2) {
      const i64 row = row0 + acc_row(i, t);
      const i64 col = col0 + acc_col(i, t);
      if (row >= rows || col >= cols)
        continue;
      float *p = out + (row_offset + row) * ld + col;
      if (pairs && col + 1 < cols) {
        if (accumulate)
          red_add_f32x2(p, acc[i], acc[i + 1]); // [Note: f32 accumulate by reduction]
        else
          *reinterpret_cast<float2 *>(p) = make_float2(acc[i], acc[i + 1]);
      } else {
        p[0] = accumulate ? p[0] + acc[i] : acc[i];
        if (col + 1 < cols)
          p[1] = accumulate ? p[1] + acc[i + 1] : acc[i + 1];
      }
    }
  }
};

/// [Note: sm90 TMA store] An f32 output tile written from the accumulators by
/// the consumers (F32OutEpilogue) costs the tensor cores the whole epilogue: both
/// consumers store or reduce 128 KB per 128 x 256 tile while nothing else runs, and
/// with the short K of dB (a row block: 32 k-blocks per tile) that was a third of
/// its time (ncu, H200: 66 % tensor-pipe activity in the first row block, 78 % in
/// the later ones, where dA, with K = V, runs at 99 %), and its 8-byte stores from
/// 8 rows at a time read back about as many bytes from DRAM as they wrote. Here each
/// consumer stages its 64-row slice box by box, 64 rows x 32 columns of f32 (8 KB,
/// the 128-byte swizzle of the output's tensor map, so a warp's pair stores hit every
/// bank twice: two wavefronts for 256 bytes, the least), in two buffers it
/// alternates; one thread hands each box to TMA (a tile store, or a reduce-add when
/// accumulating) and goes on: the copy reads shared memory and writes whole lines
/// while the consumers stage the next box and then run the next tile's mainloop.
/// Before a buffer is written again its previous copy must have read it
/// (bulk_wait_read<1> by the issuing thread, then the consumer's named barrier 4 + g).
/// Out-of-bounds rows and columns of the box are clipped by TMA.
/// Byte offset of element (r, c) (c < 32) of a 64 x 32 f32 box in shared memory under the
/// 128-byte swizzle of the output's tensor map ([Note: sm90 TMA store]).
__device__ __forceinline__ u32 f32_box_offset(int r, int c) {
  return static_cast<u32>(r * 128 + ((((c >> 2) ^ (r & 7)) << 4) | ((c & 3) << 2)));
}

template <class Cfg> struct F32TmaOutEpilogue {
  const TensorMap *map; ///< f32 [rows, cols] of the output, box 32 x 64, SWIZZLE_128B
  bool accumulate;
  /// [Note: sm90 loaded sums] accumulate by loading the old values through the ring
  /// (gemm_tiles' producer and tile_loaded) instead of reduce-adds.
  bool loaded = false;
  int buf = 0; ///< the buffer the next box is staged in (per thread, in step)
  static constexpr bool LOADED_SUMS = Cfg::LOADED_SUMS;
  __device__ __forceinline__ void begin(int, int) const {}
  __device__ __forceinline__ void finish(int, int t) const {
    if (t == 0)
      bulk_wait<0>(); // the copies are done before the CTA (and its smem) ends
  }
  template <int R>
  __device__ __forceinline__ void tile(const float (&acc)[R], int, i64 row0, i64 col0,
                                       int t) {
    static_assert(R == Cfg::BN / 2, "cooperative consumers hold BN / 2 per thread");
    const int g = static_cast<int>((row0 / 64) & 1); // tiles start at multiples of 128
    const u32 stage = smem_base() + Cfg::EPI_OFFSET + g * 2 * Cfg::BOX_BYTES;
#pragma unroll
    for (int b = 0; b < Cfg::BN / 32; ++b) {
      const u32 dst = stage + buf * Cfg::BOX_BYTES;
      if (t == 0)
        bulk_wait_read<1>(); // the copy that last read `dst` is done with it
      named_bar_sync(4 + g, 128);
      // Columns [32 b, 32 b + 32) of the slice: accumulator pairs i in [16 b, 16 b + 16).
#pragma unroll
      for (int i = 16 * b; i < 16 * b + 16; i += 2) {
        const int r = acc_row(i, t), c = acc_col(i, t) - 32 * b;
        const u32 addr = dst + f32_box_offset(r, c);
        st_shared_f32x2(addr, acc[i], acc[i + 1]);
      }
      fence_proxy_async_shared();
      named_bar_sync(4 + g, 128);
      if (t == 0) {
        const int x = static_cast<int>(col0) + 32 * b, y = static_cast<int>(row0);
        if (accumulate)
          tma_store_2d<true>(map, dst, x, y);
        else
          tma_store_2d<false>(map, dst, x, y);
        bulk_commit();
      }
      buf ^= 1;
    }
  }
  /// [Note: sm90 loaded sums] An f32 dB that adds to dW (a row block after the first, or
  /// a call that accumulates) reduce-adds each box through TMA: the L2 reads the old line,
  /// adds and writes it back. On an H100 that path moves a dW of Gemma-2's head (2.36 GB)
  /// at 2.2 TB/s of read + write traffic whatever the staging (tools/probes/dw-rmw-probe:
  /// one to six 32 KB chunks in flight a SM), where a bulk load, an add by the threads and
  /// a bulk store move it at 2.9-3.0; ncu puts a 1024-row block's dB at 4.0-4.3 GB of DRAM
  /// reads and 46 % tensor activity (the reduce-adds read dW once, session 38: the rest is
  /// the operands, read from DRAM about twice). So where the block is
  /// short in K, the producer loads the tile's old boxes by TMA into the ring's next
  /// LOAD_STAGES stages after the tile's k-blocks (gemm_tiles), and tile_loaded adds the
  /// accumulators to them in place and stores each stage's boxes plainly, giving the stage
  /// back once its stores have read it (the next tile's k-blocks refill it meanwhile).
  /// Measured (H100, docs/performance.md, session 34): that dB 2.87-2.94 -> 2.44-2.46 ms
  /// (3.3 GB of DRAM reads, 61 % tensor activity). In 2048-row blocks (Llama-3's) the
  /// reduce-adds hide under the next tile's mainloop and the loads, issued only a ring's
  /// depth ahead and holding three of its four stages, cost 4-7 %: the planner passes the
  /// launch a threshold of rows (plan::kLoadedSumsMaxRows), reduce-adds above it.
  /// The accumulating tile: consumer g's slice at (row0, col0)
  /// added to the old values the producer loaded into the ring's next LOAD_STAGES stages
  /// (from position s, phase), stored back by TMA from where they were loaded; each stage
  /// is released once this consumer's stores from it have read it, and s, phase move past.
  template <int R, class Release>
  __device__ __forceinline__ void tile_loaded(const float (&acc)[R], i64 row0, i64 col0,
                                              int t, int g, u32 base, u32 full, int &s,
                                              u32 &phase, Release &release) const {
    static_assert(R == Cfg::BN / 2, "cooperative consumers hold BN / 2 per thread");
    constexpr int SB = Cfg::STAGE_BOXES, NB = Cfg::BOXES;
#pragma unroll
    for (int p = 0; p < Cfg::LOAD_STAGES; ++p) {
      mbar_wait(full + 8 * s, phase);
      const u32 slots = base + s * Cfg::STAGE_BYTES + g * SB * Cfg::BOX_BYTES;
#pragma unroll
      for (int i = 0; i < SB; ++i) {
        const int b = p * SB + i;
        if (b < NB) {
          const u32 box = slots + i * Cfg::BOX_BYTES;
          // Columns [32 b, 32 b + 32) of the slice, at the places of the 128-byte swizzle.
#pragma unroll
          for (int k = 16 * b; k < 16 * b + 16; k += 2) {
            const int r = acc_row(k, t), c = acc_col(k, t) - 32 * b;
            const u32 addr = box + f32_box_offset(r, c);
            const float2 old = ld_shared_f32x2(addr);
            st_shared_f32x2(addr, old.x + acc[k], old.y + acc[k + 1]);
          }
        }
      }
      fence_proxy_async_shared();
      named_bar_sync(4 + g, 128);
      if (t == 0) {
#pragma unroll
        for (int i = 0; i < SB; ++i)
          if (p * SB + i < NB)
            tma_store_2d<false>(map, slots + i * Cfg::BOX_BYTES,
                                static_cast<int>(col0) + 32 * (p * SB + i),
                                static_cast<int>(row0));
        bulk_commit();
        bulk_wait_read<0>(); // the stage is read out before the producer refills it
      }
      named_bar_sync(4 + g, 128);
      release(s);
      if (++s == Cfg::STAGES) {
        s = 0;
        phase ^= 1u;
      }
    }
  }
};

/// Loads elements i and i + 1 of a buffer of `Elem` (i even: one 4- or 8-byte
/// load) and widens them to f32: the counterpart of store_f32_pair.
template <class Elem>
__device__ __forceinline__ void load_f32_pair(const void *p, i64 i, float &x,
                                              float &y) {
  typedef typename Elem::raw_t Raw;
  if constexpr (Elem::BYTES == 4) {
    const uint2 v = *reinterpret_cast<const uint2 *>(static_cast<const Raw *>(p) + i);
    x = Elem::to_f32(static_cast<Raw>(v.x));
    y = Elem::to_f32(static_cast<Raw>(v.y));
  } else {
    const u32 v = *reinterpret_cast<const u32 *>(static_cast<const Raw *>(p) + i);
    x = Elem::to_f32(static_cast<Raw>(v & 0xFFFFu));
    y = Elem::to_f32(static_cast<Raw>(v >> 16));
  }
}

/// An OutElem output of `cols` columns per row: out[row_offset + row][col] =
/// acc (row < rows, col < cols), rounded once; with `accumulate`, out =
/// round(old + acc): the old value widened to f32, one rounding ([Note:
/// accumulating outputs]). GemmDRhs (rows of a chunk of dB) and GemmDLhs (dA of
/// a one-chunk loop) store through it. `accumulate` is a runtime flag, not a
/// template argument: a second instantiation would double the kernel's code (the
/// whole persistent mainloop again) and its NVRTC time, for a branch per pair of
/// elements (session 14: dA of the Llama-3 head 2.6 -> 1.3 s under nvcc).
template <class OutElem> struct RoundedOutEpilogue {
  void *out;
  i64 rows, cols, row_offset;
  bool accumulate;
  __device__ __forceinline__ void begin(int, int) const {}
  __device__ __forceinline__ void finish(int, int) const {}
  template <int R>
  __device__ __forceinline__ void tile(const float (&acc)[R], int, i64 row0,
                                       i64 col0, int t) const {
#pragma unroll
    for (int i = 0; i < R; i += 2) {
      const i64 row = row0 + acc_row(i, t);
      const i64 col = col0 + acc_col(i, t);
      if (row >= rows || col >= cols)
        continue;
      // Opaque to the optimizer: with `accumulate` known invariant it versions the whole
      // store loop (both copies compiled: +0.5 s of NVRTC for dA's module).
      u32 add_old;
#if defined(LCEJIT_EMU_SM90)
      add_old = static_cast<u32>(accumulate);
#else
      asm volatile("mov.b32 %0, %1;" : "=r"(add_old) : "r"(static_cast<u32>(accumulate)));
#endif
      const i64 idx = (row_offset + row) * cols + col;
      if (col + 1 < cols) {
        float x = acc[i], y = acc[i + 1];
        if (add_old) {
          float ox, oy;
          load_f32_pair<OutElem>(out, idx, ox, oy);
          x += ox;
          y += oy;
        }
        store_f32_pair<OutElem>(out, idx, x, y);
      } else {
        float x = acc[i];
        if (add_old)
          x += load_f32<OutElem>(out, idx);
        store_f32<OutElem>(out, idx, x);
      }
    }
  }
};

/// [Note: the target-column residual] (plan/Program.h), dA's part: on the launch
/// of the last chunk (`on`), acc[row][j] += residual[row] * b[t_row][j] (b the
/// bf16 [cols, k] B operand, t_row the row's target) in f32 before Inner writes
/// it; rows whose target is outside [0, cols) add nothing. With `row_scale`
/// ([Note: row-scaled stored values]) every launch first multiplies acc[row][j]
/// by row_scale[row].
template <class TargetT, class Inner> struct ResidualEpilogue {
  Inner inner;
  const float *residual;
  const void *target;
  const u16 *b;
  i64 rows, k, cols;
  bool on;
  const float *row_scale;
  __device__ __forceinline__ void begin(int g, int t) { inner.begin(g, t); }
  __device__ __forceinline__ void finish(int g, int t) { inner.finish(g, t); }
  template <int R>
  __device__ __forceinline__ void tile(float (&acc)[R], int j, i64 row0, i64 col0,
                                       int t) {
    if (row_scale != nullptr) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const i64 row = row0 + acc_row(2 * h, t);
        const float sc = row < rows ? row_scale[row] : 0.f;
#pragma unroll
        for (int g = 0; g < R / 4; ++g) {
          acc[4 * g + 2 * h] *= sc;
          acc[4 * g + 2 * h + 1] *= sc;
        }
      }
    }
    if (on) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const i64 row = row0 + acc_row(2 * h, t);
        float res = 0.f;
        i64 tr = 0;
        if (row < rows) {
          const i64 tt = target_of<TargetT>::at(target, row);
          if (tt >= 0 && tt < cols) {
            res = residual[row];
            tr = tt;
          }
        }
        // One base per row (pair g of the row is 4 g words on: constant offsets; 64-bit
        // addresses per element made ptxas spill), k even (TMA rows): 4-byte pairs.
        const u32 *w = reinterpret_cast<const u32 *>(b + tr * k + col0 + 2 * (t % 4));
        const bool full = col0 + 2 * R <= k;
        // Eight loads in flight at a time: the memory clobbers keep ptxas from hoisting
        // all R / 4 of them above the adds. The tile's mainloop is the K of a whole chunk:
        // this costs nothing measurable.
#pragma unroll
        for (int g0 = 0; g0 < R / 4; g0 += 8) {
          asm volatile("" ::: "memory");
#pragma unroll
          for (int g = g0; g < g0 + 8 && g < R / 4; ++g) {
            const int i = 4 * g + 2 * h;
            if (full || col0 + acc_col(i, t) < k) {
              const u32 x = w[4 * g];
              acc[i] += res * elem_bf16::to_f32(static_cast<u16>(x & 0xffffu));
              acc[i + 1] += res * elem_bf16::to_f32(static_cast<u16>(x >> 16));
            }
          }
        }
      }
    }
    inner.tile(acc, j, row0, col0, t);
  }
};

/// [Note: target group sums] (plan/Program.h), dB's part for a dB rounded once: to
/// acc[c][j] of chunk row c (vocabulary row v = chunk_begin + c) add, in block order,
/// the bf16 group sums sums[g][j] of the blocks b whose head names a leader g of target
/// v (target_group_leader), in f32, before Inner rounds and writes it.
template <class TargetT, class Inner> struct GroupSumEpilogue {
  Inner inner;
  const u16 *sums;
  const void *head;
  const void *target;
  i64 n, k, cols, chunk_begin, chunk_cols, group_rows;
  __device__ __forceinline__ void begin(int g, int t) { inner.begin(g, t); }
  __device__ __forceinline__ void finish(int g, int t) { inner.finish(g, t); }
  template <int R>
  __device__ __forceinline__ void tile(float (&acc)[R], int j, i64 row0, i64 col0,
                                       int t) {
    const i64 blocks = (n + group_rows - 1) / group_rows;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const i64 c = row0 + acc_row(2 * h, t);
      if (c >= chunk_cols)
        continue;
      for (i64 b = 0; b < blocks; ++b) {
        const i64 g = target_group_leader<TargetT>(head, target, b, chunk_begin + c, n,
                                                   cols, group_rows);
        if (g < 0)
          continue;
        // As in ResidualEpilogue: one base per row, k even, eight loads in flight; but no
        // column predicates (inside this loop ptxas kept all 64 of them live and spilled):
        // a row's columns past k read the next row, or the buffer's padding after the last
        // (TargetSums::sums), into accumulators that no store reads.
        const u32 *w = reinterpret_cast<const u32 *>(sums + g * k + col0 + 2 * (t % 4));
#pragma unroll
        for (int g0 = 0; g0 < R / 4; g0 += 8) {
          asm volatile("" ::: "memory");
#pragma unroll
          for (int q = g0; q < g0 + 8 && q < R / 4; ++q) {
            const int i = 4 * q + 2 * h;
            const u32 x = w[4 * q];
            acc[i] += elem_bf16::to_f32(static_cast<u16>(x & 0xffffu));
            acc[i + 1] += elem_bf16::to_f32(static_cast<u16>(x >> 16));
          }
        }
      }
    }
    inner.tile(acc, j, row0, col0, t);
  }
};

/// The mainloop over `tiles` of an n x k output with `e`, wrapped in the residual
/// epilogue when RESIDUAL.
template <class Cfg, bool RESIDUAL, class TargetT, class Epi, class Tiles>
__device__ __forceinline__ void
dlhs_run(const TensorMap &map_a, const TensorMap &map_b, const Epi &e, i64 n, i64 k,
         i64 chunk_cols, const void *residual, const void *target, const void *b, i64 cols,
         bool last, const void *row_scale, SlabA slab_a, const Tiles &tiles) {
  if constexpr (RESIDUAL) {
    ResidualEpilogue<TargetT, Epi> r{e,    static_cast<const float *>(residual),
                                     target, static_cast<const u16 *>(b),
                                     n,    k,
                                     cols, last,
                                     static_cast<const float *>(row_scale)};
    gemm_tiles<Cfg>(map_a, map_b, tiles, r, chunk_cols, 1, slab_a);
  } else {
    Epi copy = e;
    gemm_tiles<Cfg>(map_a, map_b, tiles, copy, chunk_cols, 1, slab_a);
  }
}

/// Runs the mainloop over the persistent tiles of an n x k output with `e`, wrapped in
/// the residual epilogue when RESIDUAL.
/// STREAM_K: a mask of the stream-K forms compiled in, kStreamKGroups ([Note: dA stream-K])
/// and kStreamKChain ([Note: dA stream-K chains]); each is one more copy of the mainloop.
inline constexpr int kStreamKGroups = 1, kStreamKChain = 2;

template <class Cfg, bool RESIDUAL, class TargetT, int STREAM_K, class Epi>
__device__ __forceinline__ void
dlhs_tiles(const TensorMap &map_a, const TensorMap &map_b, const Epi &e, i64 n, i64 k,
           i64 chunk_cols, const void *residual, const void *target, const void *b,
           i64 cols, bool last, const void *row_scale, SlabA slab_a, void *stream_k,
           void *chain) {
  // [Note: dA stream-K]: a grid of 4 T / 3 CTAs without a cluster runs the T tiles 3 to a
  // group of 4 CTAs (the launch decides: plan::lhsStreamK).
  if constexpr (STREAM_K != 0 && !Cfg::PINGPONG && Cfg::CLUSTER_M == 1) {
    const TileOrder order{(n + Cfg::BM - 1) / Cfg::BM, (k + Cfg::BN - 1) / Cfg::BN, 8};
    const i64 nt = order.tiles_m * order.tiles_n;
    // [Note: dA stream-K chains]: with the chain's slots (a slab-block launch), the last
    // round in chains where plan::lhsChainQ takes it (the launch's grid is then
    // plan::lhsChainCtas: all SMs with whole rounds, else T + ceil(T / q)).
    if ((STREAM_K & kStreamKChain) && chain && cluster_nctarank() == 1) {
      const i64 ctas = static_cast<i64>(gridDim.x);
      const i64 rounds = nt > ctas ? nt / ctas : 0, tail = nt - rounds * ctas;
      const int q = StreamKChain::chain_q(tail, ctas, (chunk_cols + Cfg::BK - 1) / Cfg::BK);
      if (q > 0 && (rounds > 0 || ctas == tail + (tail + q - 1) / q)) {
        dlhs_run<Cfg, RESIDUAL, TargetT>(
            map_a, map_b, e, n, k, chunk_cols, residual, target, b, cols, last, row_scale,
            slab_a,
            StreamKChain{static_cast<int>(order.tiles_m), static_cast<int>(order.tiles_n),
                         static_cast<int>(rounds), q, static_cast<int>(tail),
                         static_cast<u32 *>(chain)});
        return;
      }
    }
    // plan::lhsStreamK's launches: one round on 4 T / 3 CTAs, or whole rounds of P CTAs
    // and a tail of a multiple of 3 tiles, at most 3 P / 4 (k-blocks: at least 16 either way).
    const i64 ctas = static_cast<i64>(gridDim.x);
    const i64 rounds = nt / ctas, tail = nt - rounds * ctas;
    const bool stream = tail > 0 && tail % 3 == 0 && tail / 3 * 4 <= ctas &&
                        (rounds > 0 || ctas == tail / 3 * 4) &&
                        (chunk_cols + Cfg::BK - 1) / Cfg::BK >= 16;
    if ((STREAM_K & kStreamKGroups) && stream_k && stream && cluster_nctarank() == 1) {
      char *scratch = static_cast<char *>(stream_k);
      const i64 cta = static_cast<i64>(blockIdx.x);
      dlhs_run<Cfg, RESIDUAL, TargetT>(
          map_a, map_b, e, n, k, chunk_cols, residual, target, b, cols, last, row_scale,
          slab_a,
          StreamKTiles{order, rounds, ctas, cta, cta / 4, static_cast<u32>(cta % 4),
                       cta < tail / 3 * 4,
                       reinterpret_cast<float *>(scratch + StreamKTiles::FLAG_BYTES),
                       reinterpret_cast<u32 *>(scratch)});
      return;
    }
  }
  // [Note: sm90 split-K]: the launch decides whether the tiles run split.
  if constexpr (Cfg::SPLIT_K > 1)
    dlhs_run<Cfg, RESIDUAL, TargetT>(map_a, map_b, e, n, k, chunk_cols, residual, target, b,
                                     cols, last, row_scale, slab_a,
                                     split_k_tiles<Cfg>(n, k, 8));
  else
    dlhs_run<Cfg, RESIDUAL, TargetT>(map_a, map_b, e, n, k, chunk_cols, residual, target, b,
                                     cols, last, row_scale, slab_a,
                                     persistent_tiles<Cfg>(n, k, 8));
}

/// GemmDLhs: out [n, k] (+)= dZ [n, chunk_cols] * W[chunk rows] ([chunk, k],
/// MN-major): overwritten, or added to when `accumulate` (chunks after the
/// first; the first too when the call accumulates into an output dA). An f32
/// out takes vector reductions to accumulate; a bf16/f16 out (a loop of one
/// chunk) is written once, round(acc) or round(old + acc). With RESIDUAL, the
/// launch of the last chunk (`last`) adds the target-column residual's rank-1
/// update (ResidualEpilogue; b = the raw W, target of TargetT), after multiplying
/// each row by row_scale[row] when that is given.
template <class Cfg, class OutElem = elem_f32, bool RESIDUAL = false,
          class TargetT = long long, int STREAM_K = 0>
__device__ __forceinline__ void
gemm_dlhs_kernel(const TensorMap &map_a, const TensorMap &map_b, void *out,
                 i64 n, i64 k, i64 chunk_cols, bool accumulate,
                 const void *residual = nullptr, const void *target = nullptr,
                 const void *b = nullptr, i64 cols = 0, bool last = false,
                 const void *row_scale = nullptr, SlabA slab_a = {},
                 void *stream_k = nullptr, void *chain = nullptr) {
  if constexpr (OutElem::BYTES == 4) {
    const F32OutEpilogue e{static_cast<float *>(out), n, k, k, 0, accumulate};
    dlhs_tiles<Cfg, RESIDUAL, TargetT, STREAM_K>(map_a, map_b, e, n, k, chunk_cols, residual, target,
                                       b, cols, last, row_scale, slab_a, stream_k, chain);
  } else {
    const RoundedOutEpilogue<OutElem> e{out, n, k, 0, accumulate};
    dlhs_tiles<Cfg, RESIDUAL, TargetT, STREAM_K>(map_a, map_b, e, n, k, chunk_cols, residual, target,
                                       b, cols, last, row_scale, slab_a, stream_k, chain);
  }
}

/// [Note: dB multicast] dB's output tiles (128 vocabulary columns x 256 of D) walk the
/// grouped order down the rows first, so CTAs 2i and 2i + 1 take row tiles 2r and 2r + 1
/// of one column tile and read the same B tile (H's block rows, 64 x 256 a k-block: 32 KB,
/// two thirds of a stage). With CLUSTER_M = 2 or 4 (PlanOptions::dbCluster,
/// LCEJIT_DB_CLUSTER) they run as a cluster, each CTA loading its share of the tile's four
/// 64-column boxes multicast into every CTA's stage: the L2 serves a third less to dB's
/// SMs (pairs; ncu on the H100: 18 % fewer L2 read sectors) and the cluster's CTAs walk in
/// step. The launch (plan::Program::launchDims) gives clusters only where each cluster's
/// CTAs walk adjacent row tiles of one column tile at every step: the row tiles, the CTAs
/// and the order's group of 8 all multiples of its size; `pair` is then that size. A launch
/// without a cluster, or one outside that contract (the host makes none), runs with `pair`
/// 1: each CTA loads all four boxes and waits for no other. A cluster's dB adds to dW by
/// reduce-adds ([Note: sm90 loaded sums] needs one CTA a tile). Measured on the H100
/// (session 39, docs/performance.md): no faster (L's dB 3.55 ms a block against 3.48),
/// so the planner's default, plan::kDbCluster, is no clusters.
/// dB's persistent tiles over `rows` (the chunk's columns) x k, in groups of DRHS_GROUP row
/// tiles (plan::kDRhsOrderGroup).
enum : int { DRHS_GROUP = 8 }; // an enumerator: NVRTC warns of an unused constexpr variable
template <class Cfg>
__device__ __forceinline__ PersistentTiles drhs_tiles(i64 rows, i64 k) {
  return persistent_tiles<Cfg>(rows, k, DRHS_GROUP);
}
/// The CTAs sharing dB's B tiles: the cluster's where the launch keeps the contract, else 1.
template <class Cfg> __device__ __forceinline__ u32 drhs_pair(i64 rows) {
  if constexpr (Cfg::CLUSTER_M == 1)
    return 1u;
  const u32 c = cluster_nctarank();
  const i64 tiles_m = (rows + 127) / 128;
  return c > 1 && tiles_m % c == 0 && gridDim.x % c == 0 && DRHS_GROUP % c == 0 ? c : 1u;
}

/// GemmDRhs: out [cols, k] rows [chunk_begin, + chunk_cols) = dZ^T * A, K = n
/// (A operand dZ [n, chunk_cols] MN-major, B operand the forward A [n, k]
/// MN-major). `accumulate` (row blocks after the first of an f32 out; any out
/// when the call accumulates into it) adds to what out holds. With GROUP_SUMS (a
/// bf16/f16 out), GroupSumEpilogue adds the target group sums before the rounding.
template <class Cfg, class OutElem, bool GROUP_SUMS = false, class TargetT = long long>
__device__ __forceinline__ void
gemm_drhs_kernel(const TensorMap &map_a, const TensorMap &map_b, void *out,
                 i64 n, i64 k, i64 chunk_begin, i64 chunk_cols,
                 bool accumulate, const void *sums = nullptr, const void *head = nullptr,
                 const void *target = nullptr, i64 cols = 0, i64 group_rows = 1) {
  if constexpr (GROUP_SUMS) {
    static_assert(OutElem::BYTES == 2, "gemm_drhs: group sums are for a dB rounded once");
    GroupSumEpilogue<TargetT, RoundedOutEpilogue<OutElem>> e{
        {out, chunk_cols, k, chunk_begin, accumulate}, static_cast<const u16 *>(sums), head,
        target, n, k, cols, chunk_begin, chunk_cols, group_rows};
    gemm_tiles<Cfg>(map_a, map_b, drhs_tiles<Cfg>(chunk_cols, k), e, n,
                    drhs_pair<Cfg>(chunk_cols));
  } else if constexpr (OutElem::BYTES == 4) {
    // elem_f32: written, or added to by float2 vector reductions (F32OutEpilogue).
    F32OutEpilogue e{static_cast<float *>(out), chunk_cols, k, k, chunk_begin, accumulate};
    gemm_tiles<Cfg>(map_a, map_b, drhs_tiles<Cfg>(chunk_cols, k), e, n,
                    drhs_pair<Cfg>(chunk_cols));
  } else {
    RoundedOutEpilogue<OutElem> e{out, chunk_cols, k, chunk_begin, accumulate};
    gemm_tiles<Cfg>(map_a, map_b, drhs_tiles<Cfg>(chunk_cols, k), e, n,
                    drhs_pair<Cfg>(chunk_cols));
  }
}

/// GemmDRhs with an f32 out written through shared memory and TMA ([Note: sm90 TMA
/// store]): map_out is the f32 [chunk_cols, k] part of out that the chunk covers.
/// `accumulate` adds to it instead of storing: by loading the old values and storing the
/// sums where the config allows it and the launch's n rows of K are at most
/// `loaded_rows` ([Note: sm90 loaded sums]), else by reduce-add copies.
template <class Cfg>
__device__ __forceinline__ void
gemm_drhs_tma_kernel(const TensorMap &map_a, const TensorMap &map_b, const TensorMap &map_out,
                     i64 n, i64 k, i64 chunk_cols, bool accumulate, i64 loaded_rows,
                     i64 slab_split = -1, const TensorMap *map_tail = nullptr,
                     i64 slab_head = 0) {
  static_assert(Cfg::TMA_STORE, "gemm_drhs_tma_kernel needs a TMA_STORE config");
  if (threadIdx.x == 0)
    tma_prefetch(&map_out);
  F32TmaOutEpilogue<Cfg> e{&map_out, accumulate,
                           Cfg::LOADED_SUMS && accumulate && n <= loaded_rows};
  // [Note: stored values in dW]: with slab_split >= 0, the launch's slabs through map_a,
  // the rows from slab_head on through map_tail ([Note: slab tails]).
  gemm_tiles<Cfg>(map_a, map_b, drhs_tiles<Cfg>(chunk_cols, k), e, n,
                  drhs_pair<Cfg>(chunk_cols), SlabA{nullptr, slab_split, map_tail, slab_head});
}

} // namespace sm90
} // namespace lcejit

#endif // __CUDA_ARCH_FEAT_SM90_ALL
