//===- lcejit_emu.h - Runs generated CUDA modules on the host (tests only)
//-===//
//
// [Note: host emulation] The codegen tests have no GPU. To check numerics
// anyway, they compile a generated module (device helpers + generated kernels,
// unchanged) as host C++ with this header included first and
// LCEJIT_HOST_EMULATION defined, and run it:
//
//  - a CTA is `blockDim.x` threads, each a fiber on one OS thread ([Note: emulated
//    threads as fibers], lcejit_emu_fiber.h); __syncthreads is a CTA barrier; each
//    warp has a barrier for its collective operations (shuffles, mma.sync),
//    double-buffered so one rendezvous per operation suffices;
//  - mma.sync.m16n8k16 is computed from the fragments of all 32 lanes, placed
//  with the
//    PTX ISA tables ("Matrix Fragments for mma.m16n8k16 with floating point
//    type"), transcribed here independently of the loaders in lcejit_mma.cuh;
//    every element of A and B must be placed exactly once (checked);
//  - ldmatrix.m8n8{.trans}.b16 (.x1/.x2/.x4) gathers the row addresses of all
//    32 lanes and hands every lane its fragment as the PTX ISA describes it
//    ("ldmatrix": lane 8j + i addresses row i of matrix j; lane l receives row
//    l >> 2, columns 2 (l % 4) + {0, 1} of each matrix; .trans reads the
//    matrix column-major), transcribed here independently of the mainloop's
//    address computation; every row address must be 16-byte aligned and lie in
//    the launch's dynamic shared memory (checked), like every cp.async
//    destination;
//  - cp.async copies are deferred until cp.async.wait_group retires their group
//  (mode
//    Late: reading a stage before waiting sees stale data), or done at issue
//    (Early: a copy into a stage other threads still read corrupts it). A
//    thread that ends with copies pending aborts. The zero fill of a copy
//    with src-size 0 lands with it, like the data;
//  - atomics are plain read-modify-writes (the fibers of a launch share one OS
//    thread and switch only where they wait); __trap aborts (the device headers no longer
//    trap: launch_ok records a contract violation in the error word).
//
// The only device-header code this does not exercise is the inline PTX itself
// (the hooks under #ifdef LCEJIT_HOST_EMULATION: %dynamic_smem_size in
// lcejit_common.cuh, mma.sync, ldmatrix and the shared-window address in
// lcejit_mma.cuh, cp.async in lcejit_gemm.cuh).
//
//===----------------------------------------------------------------------===//
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "lcejit_emu_fiber.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <limits>
#include <memory>
#include <vector>

// CUDA qualifiers as plain C++.
#undef __device__
#undef __host__
#undef __global__
#undef __forceinline__
#undef __shared__
#undef __launch_bounds__
#define __device__
#define __host__
#define __global__
#define __forceinline__ inline
#define __shared__
#define __launch_bounds__(...)

namespace lcejit_emu {

struct Dim3 {
  unsigned x = 0, y = 0, z = 0;
};

/// A barrier of `count` fibers (a CTA's, a warp's, a warpgroup's, a cluster's).
class Barrier {
public:
  explicit Barrier(int count, const char *what = "a barrier") : count_(count), what_(what) {}
  void wait() {
    const unsigned long gen = generation_;
    fiber::progress();
    if (++arrived_ == count_) {
      arrived_ = 0;
      ++generation_;
      return;
    }
    fiber::wait_for([&] { return generation_ != gen; }, what_);
  }

private:
  int count_;
  const char *what_;
  int arrived_ = 0;
  unsigned long generation_ = 0;
};

struct Warp {
  Barrier bar{32, "a warp's lanes (shuffle, vote, mma.sync, ldmatrix or wgmma)"};
  float shfl[2][32];
  unsigned vote[2][32];
  long long shfl64[2][32];
  double shfld[2][32];
  unsigned a[2][32][4];
  unsigned b[2][32][2];
  const unsigned char *ldsm[2][32];
};

struct Cta {
  explicit Cta(int threads)
      : bar(threads, "__syncthreads"), warps(static_cast<size_t>((threads + 31) / 32)) {
    for (auto &w : warps)
      w = std::make_unique<Warp>();
  }
  Barrier bar;
  std::vector<std::unique_ptr<Warp>> warps;
};

enum class AsyncMode { Late, Early };

struct Copy {
  void *dst;
  const void *src;
  unsigned src_bytes; ///< copied from src; the rest of the 16 bytes is zeroed
};

struct ThreadState {
  Cta *cta = nullptr;
  int lane = 0, warp = 0;
  unsigned shfl_phase = 0, mma_phase = 0, ldsm_phase = 0;
  std::vector<Copy> open;
  std::deque<std::vector<Copy>> groups;
  void *ext = nullptr; ///< the sm90 emulation's per-thread state
};

/// The running fiber's state (set by the launch's scheduler before it resumes a fiber).
inline thread_local ThreadState *tls_now = nullptr;
inline ThreadState &tls() { return *tls_now; }
inline AsyncMode async_mode = AsyncMode::Late;
inline unsigned launch_smem_bytes = 0;
/// The dynamic shared memory array of the module (set by its launchers; null:
/// shared addresses are not checked).
inline const unsigned char *shared_base = nullptr;

} // namespace lcejit_emu

inline thread_local lcejit_emu::Dim3 threadIdx;
inline thread_local lcejit_emu::Dim3 blockIdx;
inline lcejit_emu::Dim3 blockDim;
inline lcejit_emu::Dim3 gridDim;

//===----------------------------------------------------------------------===//
// Intrinsics the device headers use.
//===----------------------------------------------------------------------===//

inline void __syncthreads() { lcejit_emu::tls().cta->bar.wait(); }
[[noreturn]] inline void __trap() { lcejit_emu::fail("__trap()"); }

inline float __int_as_float(int x) {
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}
inline float __uint_as_float(unsigned x) {
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}
inline unsigned __float_as_uint(float x) {
  unsigned u;
  std::memcpy(&u, &x, 4);
  return u;
}
template <class I, class F> inline I emu_trunc_sat(F x) {
  if (x != x)
    return 0;
  const F lo = static_cast<F>(std::numeric_limits<I>::min());
  const F hi = static_cast<F>(std::numeric_limits<I>::max());
  if (x <= lo)
    return std::numeric_limits<I>::min();
  if (x >= hi)
    return std::numeric_limits<I>::max();
  return static_cast<I>(x);
}
inline long long __float2ll_rz(float x) { return emu_trunc_sat<long long>(x); }
inline int __float2int_rz(float x) { return emu_trunc_sat<int>(x); }
inline long long __double2ll_rz(double x) {
  return emu_trunc_sat<long long>(x);
}
inline int __double2int_rz(double x) { return emu_trunc_sat<int>(x); }

namespace lcejit_emu {
/// One warp-wide exchange: every lane publishes v in `slots` (double-buffered by phase)
/// and, after the warp's barrier, reads the value of lane from(its lane).
template <class T, class From>
inline T warp_exchange(T (Warp::*slots)[2][32], T v, From from) {
  ThreadState &t = tls();
  Warp &w = *t.cta->warps[static_cast<size_t>(t.warp)];
  const unsigned p = t.shfl_phase++ & 1u;
  (w.*slots)[p][t.lane] = v;
  w.bar.wait();
  return (w.*slots)[p][from(t.lane) & 31];
}
} // namespace lcejit_emu

inline float __shfl_xor_sync(unsigned, float v, int mask) {
  return lcejit_emu::warp_exchange(&lcejit_emu::Warp::shfl, v,
                                   [mask](int lane) { return lane ^ mask; });
}
inline void __syncwarp(unsigned = 0xffffffffu) {
  lcejit_emu::ThreadState &t = lcejit_emu::tls();
  t.cta->warps[static_cast<size_t>(t.warp)]->bar.wait();
}
inline unsigned __shfl_xor_sync(unsigned, unsigned v, int mask) {
  return static_cast<unsigned>(lcejit_emu::warp_exchange(
      &lcejit_emu::Warp::shfl64, static_cast<long long>(v),
      [mask](int lane) { return lane ^ mask; }));
}
inline double __shfl_xor_sync(unsigned, double v, int mask) {
  return lcejit_emu::warp_exchange(&lcejit_emu::Warp::shfld, v,
                                   [mask](int lane) { return lane ^ mask; });
}

/// Warp votes and an indexed shuffle: every lane of the warp takes part (as the device
/// headers call them).
inline unsigned __ballot_sync(unsigned, bool pred) {
  lcejit_emu::ThreadState &t = lcejit_emu::tls();
  lcejit_emu::Warp &w = *t.cta->warps[static_cast<size_t>(t.warp)];
  const unsigned p = t.shfl_phase++ & 1u;
  w.vote[p][t.lane] = pred ? 1u : 0u;
  w.bar.wait();
  unsigned m = 0;
  for (int i = 0; i < 32; ++i)
    m |= w.vote[p][i] << i;
  return m;
}
inline bool __any_sync(unsigned mask, bool pred) { return __ballot_sync(mask, pred) != 0; }
inline long long __shfl_sync(unsigned, long long v, int src) {
  return lcejit_emu::warp_exchange(&lcejit_emu::Warp::shfl64, v, [src](int) { return src; });
}
inline int __ffs(int x) { return x == 0 ? 0 : __builtin_ctz(static_cast<unsigned>(x)) + 1; }

inline double atomicAdd(double *p, double v) {
  double old = *p;
  *p = old + v;
  return old;
}
inline unsigned long long
atomicCAS(unsigned long long *p, unsigned long long cmp, unsigned long long v) {
  unsigned long long old = *p;
  if (old == cmp)
    *p = v;
  return old;
}
inline unsigned long long atomicMax(unsigned long long *p, unsigned long long v) {
  unsigned long long old = *p;
  if (v > old)
    *p = v;
  return old;
}
inline unsigned atomicMax(unsigned *p, unsigned v) {
  unsigned old = *p;
  if (v > old)
    *p = v;
  return old;
}

namespace lcejit_emu {

//===----------------------------------------------------------------------===//
// The hooks (see LCEJIT_HOST_EMULATION in the device headers).
//===----------------------------------------------------------------------===//

inline unsigned dynamic_smem_size() { return launch_smem_bytes; }

/// Fails unless [p, p + bytes) lies in the launch's dynamic shared memory.
inline void check_shared(const void *p, unsigned bytes, const char *what) {
  if (!shared_base)
    return;
  const unsigned char *q = static_cast<const unsigned char *>(p);
  if (q < shared_base || q + bytes > shared_base + launch_smem_bytes)
    fail(what);
}

inline void complete(const Copy &c) {
  std::memcpy(c.dst, c.src, c.src_bytes);
  std::memset(static_cast<char *>(c.dst) + c.src_bytes, 0, 16 - c.src_bytes);
}

/// cp.async.cg.shared.global [dst], [src], 16, src_bytes.
inline void cp_async_16(void *dst, const void *src, unsigned src_bytes) {
  check_shared(dst, 16, "cp.async destination outside dynamic shared memory");
  if (reinterpret_cast<unsigned long long>(dst) % 16 != 0)
    fail("cp.async destination not 16-byte aligned");
  if (src_bytes != 0 && src_bytes != 16)
    fail("cp.async src-size other than 0 or 16");
  if (src_bytes != 0 && reinterpret_cast<unsigned long long>(src) % 16 != 0)
    fail("cp.async source not 16-byte aligned");
  const Copy c{dst, src, src_bytes};
  if (async_mode == AsyncMode::Early)
    complete(c);
  else
    tls().open.push_back(c);
}
inline void cp_async_commit() {
  tls().groups.push_back(std::move(tls().open));
  tls().open.clear();
}
inline void cp_async_wait(int pending) {
  ThreadState &t = tls();
  while (static_cast<int>(t.groups.size()) > pending) {
    for (const Copy &c : t.groups.front())
      complete(c);
    t.groups.pop_front();
  }
}

inline float half_bits_to_float(unsigned short bits, bool bf16) {
  if (bf16)
    return __uint_as_float(static_cast<unsigned>(bits) << 16);
  __half_raw raw;
  raw.x = bits;
  return __half2float(__half(raw));
}

/// D = A * B + C for the warp; this lane's c0..c3 in, d0..d3 out.
template <bool BF16>
inline void mma_16816(float &c0, float &c1, float &c2, float &c3,
                      const unsigned (&a)[4], const unsigned (&b)[2]) {
  ThreadState &t = tls();
  Warp &w = *t.cta->warps[static_cast<size_t>(t.warp)];
  const unsigned p = t.mma_phase++ & 1u;
  for (int i = 0; i < 4; ++i)
    w.a[p][t.lane][i] = a[i];
  w.b[p][t.lane][0] = b[0];
  w.b[p][t.lane][1] = b[1];
  w.bar.wait();
  // PTX ISA, m16n8k16, .f16/.bf16 multiplicands (groupID = lane >> 2, tig =
  // lane % 4):
  //   A: a_i of register i/2, half i%2 (low half first);
  //      row = groupID for i in {0,1,4,5}, groupID + 8 otherwise;
  //      col = tig*2 + (i & 1) for i < 4, tig*2 + (i & 1) + 8 for i >= 4.
  //   B: b_i of register i/2, half i%2; row = tig*2 + (i & 1) (+ 8 for i >= 2);
  //   col = groupID. C/D: c_i; row = groupID (+ 8 for i >= 2); col = tig*2 + (i
  //   & 1).
  float A[16][16], B[16][8];
  int seenA[16][16] = {}, seenB[16][8] = {};
  for (int L = 0; L < 32; ++L) {
    const int g = L >> 2, tig = L & 3;
    for (int i = 0; i < 8; ++i) {
      const unsigned reg = w.a[p][L][i / 2];
      const unsigned short bits =
          static_cast<unsigned short>((i & 1) ? (reg >> 16) : (reg & 0xffffu));
      const int row = (i < 2 || (i >= 4 && i < 6)) ? g : g + 8;
      const int col = tig * 2 + (i & 1) + (i >= 4 ? 8 : 0);
      A[row][col] = half_bits_to_float(bits, BF16);
      ++seenA[row][col];
    }
    for (int i = 0; i < 4; ++i) {
      const unsigned reg = w.b[p][L][i / 2];
      const unsigned short bits =
          static_cast<unsigned short>((i & 1) ? (reg >> 16) : (reg & 0xffffu));
      const int row = tig * 2 + (i & 1) + (i >= 2 ? 8 : 0);
      const int col = g;
      B[row][col] = half_bits_to_float(bits, BF16);
      ++seenB[row][col];
    }
  }
  for (int r = 0; r < 16; ++r)
    for (int c = 0; c < 16; ++c)
      if (seenA[r][c] != 1 || (c < 8 && seenB[r][c] != 1))
        fail("mma fragment table does not cover A/B exactly once");
  const int g = t.lane >> 2, tig = t.lane & 3;
  float *cs[4] = {&c0, &c1, &c2, &c3};
  for (int i = 0; i < 4; ++i) {
    const int row = g + (i >= 2 ? 8 : 0);
    const int col = tig * 2 + (i & 1);
    float acc = *cs[i];
    for (int k = 0; k < 16; ++k)
      acc = std::fma(A[row][k], B[k][col], acc);
    *cs[i] = acc;
  }
}

/// ldmatrix.sync.aligned.m8n8.x<NUM>{.trans}.shared.b16 for the warp: `row`
/// is the address this lane supplies, r[0 .. NUM) its destination registers.
template <int NUM, bool TRANS>
inline void ldmatrix(unsigned (&r)[NUM], const unsigned char *row) {
  static_assert(NUM == 1 || NUM == 2 || NUM == 4, "ldmatrix .x1/.x2/.x4");
  ThreadState &t = tls();
  Warp &w = *t.cta->warps[static_cast<size_t>(t.warp)];
  const unsigned p = t.ldsm_phase++ & 1u;
  w.ldsm[p][t.lane] = row;
  // PTX ISA, ldmatrix: the eight addresses of matrix j come from threads
  // 8j .. 8j + 7 (threads 0-7 for .x1, 0-15 for .x2, 0-31 for .x4), address i
  // being the start of row i; each row is 8 .b16 elements, 16 bytes, "naturally
  // aligned". The addresses of the other threads are not used.
  if (t.lane < 8 * NUM) {
    if (reinterpret_cast<unsigned long long>(row) % 16 != 0)
      fail("ldmatrix row address not 16-byte aligned");
    check_shared(row, 16, "ldmatrix row outside dynamic shared memory");
  }
  w.bar.wait();
  // "Each thread in a warp loads fragments of a row, with thread 0 receiving
  // the first fragment in its register r, and so on. A group of four threads
  // loads an entire row": thread l holds row l >> 2, elements (l % 4) * 2 and
  // (l % 4) * 2 + 1 (the lower one in the low half), of matrix j in register j.
  // ".trans indicates that the matrix is loaded in column-major format": the
  // address i is then the start of column i, and element (row, col) lies at
  // address col, element row.
  const int row_in = t.lane >> 2;
  for (int j = 0; j < NUM; ++j) {
    unsigned short half[2];
    for (int e = 0; e < 2; ++e) {
      const int col = (t.lane % 4) * 2 + e;
      const unsigned char *src = TRANS ? w.ldsm[p][8 * j + col] + 2 * row_in
                                       : w.ldsm[p][8 * j + row_in] + 2 * col;
      std::memcpy(&half[e], src, 2);
    }
    r[j] = static_cast<unsigned>(half[0]) |
           (static_cast<unsigned>(half[1]) << 16);
  }
}

//===----------------------------------------------------------------------===//
// Launch: CTAs one after another, each as blockDim.x threads.
//===----------------------------------------------------------------------===//

/// The fibers of `threads` CTA threads each (CTA ctas[i] of block index blocks[i]),
/// resumed with their threadIdx, blockIdx and state installed; `check_end` runs at each
/// thread's end. The scheduler is returned unstarted (the sm90 launch adds its hooks).
struct FiberSet {
  std::vector<ThreadState> states;
  std::vector<Dim3> thread_ids, block_ids;
  fiber::Scheduler sched;
};
inline void add_fibers(FiberSet &set, Cta &cta, Dim3 block_id, int threads,
                       const std::function<void()> &kernel,
                       const std::function<void()> &check_end) {
  for (int tid = 0; tid < threads; ++tid) {
    ThreadState st;
    st.cta = &cta;
    st.lane = tid & 31;
    st.warp = tid >> 5;
    set.states.push_back(std::move(st));
    set.thread_ids.push_back(Dim3{static_cast<unsigned>(tid), 0, 0});
    set.block_ids.push_back(block_id);
    char label[64];
    std::snprintf(label, sizeof label, "block (%u, %u, %u) thread %d", block_id.x, block_id.y,
                  block_id.z, tid);
    set.sched.add(
        [&kernel, &check_end] {
          kernel();
          if (!tls().open.empty() || !tls().groups.empty())
            fail("a thread ended with cp.async copies pending");
          if (check_end)
            check_end();
        },
        label);
  }
}
inline void install_resume(FiberSet &set) {
  set.sched.on_resume = [&set](size_t i) {
    threadIdx = set.thread_ids[i];
    blockIdx = set.block_ids[i];
    tls_now = &set.states[i];
  };
}

inline void launch(const long long grid[3], int block, int smem_bytes,
                   const std::function<void()> &kernel) {
  blockDim = Dim3{static_cast<unsigned>(block), 1, 1};
  gridDim = Dim3{static_cast<unsigned>(grid[0]), static_cast<unsigned>(grid[1]),
                 static_cast<unsigned>(grid[2])};
  launch_smem_bytes = static_cast<unsigned>(smem_bytes);
  const std::function<void()> none;
  for (unsigned z = 0; z < gridDim.z; ++z)
    for (unsigned y = 0; y < gridDim.y; ++y)
      for (unsigned x = 0; x < gridDim.x; ++x) {
        Cta cta(block);
        FiberSet set;
        set.states.reserve(static_cast<size_t>(block));
        add_fibers(set, cta, Dim3{x, y, z}, block, kernel, none);
        install_resume(set);
        set.sched.run();
      }
}

} // namespace lcejit_emu

#ifdef LCEJIT_EMU_SM90
#include "lcejit_emu_sm90.h"
#endif
