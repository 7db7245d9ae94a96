//===- lcejit_emu_sm90.h - Host emulation of the sm_90a mainloop (tests only) ---===//
//
// [Note: sm90 host emulation] The Hopper path (runtime/device/lcejit_sm90.cuh) is
// the default on the H200 and until now ran only there. With LCEJIT_EMU_SM90 (on top of
// LCEJIT_HOST_EMULATION, [Note: host emulation]) the header compiles as host C++, and
// every wrapper of inline PTX in it comes from here under the same name in
// lcejit::sm90. What is modelled, from the PTX ISA (chapters "Asynchronous Warpgroup
// Level Matrix Multiply-Accumulate", "Tensor Copy", "mbarrier", "Parallel
// Synchronization"), not from the kernels' own address arithmetic:
//
//  - CTAs of one cluster run at once, each with its own shared memory (a window whose
//    dynamic part starts at a non-1024-aligned address, so smem_base's rounding is
//    exercised); clusters run one after another, or all at once for a cooperative
//    launch (CTAs that wait on each other's flags).
//  - mbarrier: expected arrivals, pending arrivals and a transaction count per phase; a
//    phase completes when both reach zero; try_wait.parity P succeeds once the phase of
//    parity P has completed (so a fresh barrier passes a wait on parity 1). Arrivals
//    beyond the count, waits on a barrier never initialized, and a deadlock (every
//    thread waiting, [Note: emulated threads as fibers]) abort the test process with
//    the CTAs' barriers; LCEJIT_EMU_TRACE=1 prints every arrival and wait.
//  - TMA (cp.async.bulk.tensor 2D/3D, tile mode): the box is read element by element,
//    out-of-bounds elements as zero, written with the map's 128-byte swizzle (the 16-byte
//    chunk index XORed with bits 7-9 of the shared address), and its bytes complete the
//    transaction on the barrier, at the end of the scheduler's round or of one of the
//    next two in mode Late (at issue in Early); multicast writes every CTA of the mask.
//    Stores (plain and .add for f32) read shared memory when the thread waits on its
//    bulk group (mode Late) or at issue (Early), so a buffer reused before
//    bulk_wait_read shows.
//  - wgmma.mma_async m64nNk16 bf16 -> f32: the operands are decoded from the matrix
//    descriptors (start, LBO, SBO, 128-byte swizzle; K-major, or MN-major with the
//    transpose flag) and each thread computes its own accumulator fragment (warp w of
//    the warpgroup: rows 16 w + l / 4 (+ 8), columns 8 j + 2 (l % 4) + {0, 1}). The
//    warp's lanes meet at every .sync.aligned wgmma instruction and the warpgroup at every
//    mma_async and at the end of every wait_group, as the hardware runs them converged.
//    In mode Late a group is computed when wgmma.wait_group retires it, reading shared
//    memory then: a stage freed before its wgmma retired is overwritten first, and shows.
//  - The proxies: a thread's st.shared writes are visible to TMA (the async proxy) after
//    its fence.proxy.async; a TMA load or store that touches such bytes before it aborts.
//  - Named barriers (bar.sync / bar.arrive with a thread count), barrier.cluster,
//    mapa + remote arrive and ld.shared::cluster, acquire/release flags, red.add.
//
// The tensor maps are this file's own 128-byte format (EmuTensorMap, encoded by the test
// through encode_tensor_map): the driver's is opaque.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <map>

// The kernel-parameter qualifier of the sm90 kernels' tensor maps.
#ifndef __grid_constant__
#define __grid_constant__
#endif

namespace lcejit {
namespace sm90 {
struct TensorMap;
} // namespace sm90
} // namespace lcejit

namespace lcejit_emu {
namespace sm90 {

typedef unsigned int u32;
typedef unsigned long long u64;

/// A tensor map: rank 2 or 3, dims and byte strides of the global tensor (dim 0
/// contiguous), the box, the element size and the swizzle (0 or 128 bytes).
struct EmuTensorMap {
  u64 magic;
  u64 global;
  u64 dims[3];
  u64 strides[3]; ///< bytes; strides[0] = elem_bytes
  u32 box[3];
  u32 rank, elem_bytes, swizzle;
};
static_assert(sizeof(EmuTensorMap) <= 128, "an emulated tensor map fits a CUtensorMap");
inline constexpr u64 kMapMagic = 0x4c43454a49544d41ull; // "LCEJITMA"

/// Writes an EmuTensorMap into the 128 bytes of a kernel's TensorMap parameter.
inline void encode_tensor_map(void *bytes128, const void *global, u32 rank,
                              const u64 *dims, const u64 *strides_bytes, const u32 *box,
                              u32 elem_bytes, u32 swizzle) {
  EmuTensorMap m{};
  m.magic = kMapMagic;
  m.global = reinterpret_cast<u64>(global);
  m.rank = rank;
  m.elem_bytes = elem_bytes;
  m.swizzle = swizzle;
  for (u32 d = 0; d < 3; ++d) {
    m.dims[d] = d < rank ? dims[d] : 1;
    m.box[d] = d < rank ? box[d] : 1;
    m.strides[d] = d == 0 ? elem_bytes : (d < rank ? strides_bytes[d - 1] : 0);
  }
  std::memset(bytes128, 0, 128);
  std::memcpy(bytes128, &m, sizeof m);
}

struct MBar {
  u32 expected = 0, pending = 0, phase = 0;
  long long tx = 0;
  unsigned long long completed = 0; ///< phases completed so far
};

struct NamedBar {
  int arrived = 0, count = 0;
  unsigned long generation = 0;
};

struct PendingWgmma {
  float *d;
  int n;
  u64 desc_a, desc_b;
  int scale_d, trans_a, trans_b;
  u64 digest; ///< of the thread's operand bits at issue (mode Late)
};

struct PendingStore {
  const lcejit::sm90::TensorMap *map;
  u32 src;
  int coord[3];
  bool add;
};

enum class Mode { Late, Early };
inline Mode mode = Mode::Late;
/// In mode Late a TMA load lands tma_delay_min + [0, tma_delay_span) scheduler rounds
/// after the round it was issued in (the emulator's own test fixes it).
inline unsigned tma_delay_min = 0, tma_delay_span = 3;

struct Cluster;

struct CtaState {
  /// Shared addresses are offsets into `window`; the dynamic shared memory starts at
  /// kDynamicStart, deliberately not 1024-aligned.
  static constexpr u32 kDynamicStart = 0x410;
  std::vector<unsigned char> storage;
  unsigned char *window = nullptr;
  u32 dynamic_bytes = 0;
  std::map<u32, MBar> mbars;
  NamedBar named[16];
  Cluster *cluster = nullptr;
  /// [Note: sm90 host emulation] Generic-proxy writes (st.shared) of each thread since its
  /// last fence.proxy.async: a TMA copy (the async proxy) that reads or writes them first is
  /// a race. `unfenced_threads` counts the threads with any.
  std::vector<std::vector<std::pair<u32, u32>>> unfenced;
  int unfenced_threads = 0;
  /// Per 16 bytes of shared memory, the last TMA load that wrote them: its mbarrier and the
  /// count of completed phases that includes it (0: none, or overwritten by st.shared since).
  /// A thread's ld.shared of them needs a wait on that barrier that saw that phase complete.
  std::vector<std::pair<u32, unsigned long long>> loaded_by;
  u32 rank = 0;
  int any[3] = {0, 0, 0}; ///< __syncthreads_or, three calls in rotation
  /// wgmma.mma_async is a warpgroup-wide operation: its 128 threads meet at every one.
  Barrier warpgroup[4] = {Barrier(128, "a warpgroup (wgmma.mma_async, wgmma.wait_group)"),
                          Barrier(128, "a warpgroup (wgmma.mma_async, wgmma.wait_group)"),
                          Barrier(128, "a warpgroup (wgmma.mma_async, wgmma.wait_group)"),
                          Barrier(128, "a warpgroup (wgmma.mma_async, wgmma.wait_group)")};
};

struct Cluster {
  std::vector<CtaState *> ctas;
  std::unique_ptr<Barrier> bar; ///< barrier.cluster: every thread of every CTA
};

struct ThreadSm90 {
  CtaState *cta = nullptr;
  unsigned any_calls = 0;
  std::vector<PendingWgmma> open_wgmma;
  std::deque<std::vector<PendingWgmma>> wgmma_groups;
  std::vector<PendingStore> open_stores;
  std::deque<std::vector<PendingStore>> store_groups;
  /// mbarrier -> completed phases when this thread's last wait on it returned.
  std::map<u32, unsigned long long> observed;
};
inline ThreadSm90 &ts() { return *static_cast<ThreadSm90 *>(::lcejit_emu::tls().ext); }

inline CtaState &cta() { return *ts().cta; }

inline unsigned char *dynamic_smem() { return cta().window + CtaState::kDynamicStart; }

/// The host address of shared address `addr` (`bytes` long) in CTA `c`.
inline unsigned char *at(CtaState &c, u32 addr, u32 bytes, const char *what) {
  if (addr < CtaState::kDynamicStart ||
      static_cast<u64>(addr) + bytes > static_cast<u64>(CtaState::kDynamicStart) + c.dynamic_bytes) {
    std::fprintf(stderr, "lcejit_emu: %s: shared address 0x%x (+%u) outside the dynamic "
                 "shared memory [0x%x, 0x%x)\n",
                 what, addr, bytes, CtaState::kDynamicStart,
                 CtaState::kDynamicStart + c.dynamic_bytes);
    std::abort();
  }
  return c.window + addr;
}

inline u32 smem_addr(const void *p) {
  const unsigned char *q = static_cast<const unsigned char *>(p);
  if (q < cta().window || q >= cta().storage.data() + cta().storage.size())
    fail("__cvta_generic_to_shared of an address outside this CTA's shared memory");
  return static_cast<u32>(q - cta().window);
}

/// 128-byte swizzle on a shared address: bits 4-6 (the 16-byte chunk) XOR bits 7-9.
inline u32 swizzle128(u32 addr) { return addr ^ (((addr >> 7) & 7u) << 4); }

//===----------------------------------------------------------------------===//
// mbarrier
//===----------------------------------------------------------------------===//

inline MBar &mbar_locked(CtaState &c, u32 bar) {
  auto it = c.mbars.find(bar);
  if (it == c.mbars.end()) {
    std::fprintf(stderr, "lcejit_emu: mbarrier at 0x%x used before mbarrier.init\n", bar);
    std::abort();
  }
  return it->second;
}

inline void mbar_complete_if_done(MBar &b) {
  if (b.pending == 0 && b.tx == 0) {
    b.phase ^= 1u;
    ++b.completed;
    b.pending = b.expected;
  }
}

/// LCEJIT_EMU_TRACE=1: every mbarrier event on stderr (debugging a deadlock).
inline const bool trace = std::getenv("LCEJIT_EMU_TRACE") != nullptr;

inline void mbar_arrive_on(CtaState &c, u32 bar, long long tx) {
  ::lcejit_emu::fiber::progress();
  MBar &b = mbar_locked(c, bar);
  if (trace)
    std::fprintf(stderr, "emu: block %u thread %u arrives on 0x%x (rank %u) tx %lld: phase %u "
                 "pending %u tx %lld\n",
                 blockIdx.x, threadIdx.x, bar, c.rank, tx, b.phase, b.pending, b.tx);
  if (b.pending == 0)
    fail("mbarrier: more arrivals in a phase than its count");
  b.tx += tx;
  --b.pending;
  mbar_complete_if_done(b);
}

inline void mbar_complete_tx(CtaState &c, u32 bar, long long bytes) {
  ::lcejit_emu::fiber::progress();
  MBar &b = mbar_locked(c, bar);
  if (trace)
    std::fprintf(stderr, "emu: block %u thread %u completes %lld bytes on 0x%x (rank %u): "
                 "phase %u pending %u tx %lld\n",
                 blockIdx.x, threadIdx.x, bytes, bar, c.rank, b.phase, b.pending, b.tx);
  b.tx -= bytes;
  mbar_complete_if_done(b);
}

/// A generic write of [addr, addr + bytes) by this thread, visible to the async proxy
/// (TMA) only after the thread's next fence.proxy.async.
/// A TMA load writes [dst, dst + bytes) for the current phase of mbarrier `bar`.
inline void note_tma_load(CtaState &c, u32 dst, u32 bytes, u32 bar) {
  if (c.loaded_by.empty())
    c.loaded_by.resize(c.storage.size() / 16 + 1);
  const unsigned long long need = mbar_locked(c, bar).completed + 1;
  for (u32 g = dst / 16; g < (dst + bytes + 15) / 16 && g < c.loaded_by.size(); ++g)
    c.loaded_by[g] = {bar, need};
}
/// Fails when this thread reads shared memory that a TMA load wrote without having waited
/// on the load's mbarrier past the phase the load completed (a read that races the load).
inline void check_tma_loaded_read(u32 addr, u32 bytes, const char *what) {
  CtaState &c = cta();
  for (u32 g = addr / 16; g < (addr + bytes + 15) / 16 && g < c.loaded_by.size(); ++g) {
    const auto [bar, need] = c.loaded_by[g];
    if (need == 0)
      continue;
    const auto it = ts().observed.find(bar);
    if (it == ts().observed.end() || it->second < need) {
      std::fprintf(stderr,
                   "lcejit_emu: block %u thread %u: %s at 0x%x reads what a TMA load wrote "
                   "for phase %llu of mbarrier 0x%x before a wait on it saw that phase "
                   "complete (it saw %llu)\n",
                   blockIdx.x, threadIdx.x, what, addr, need, bar,
                   it == ts().observed.end() ? 0ull : it->second);
      std::abort();
    }
  }
}
inline void note_generic_write(u32 addr, u32 bytes) {
  CtaState &c = cta();
  for (u32 g = addr / 16; g < (addr + bytes + 15) / 16 && g < c.loaded_by.size(); ++g)
    c.loaded_by[g] = {0u, 0ull};
  auto &mine = c.unfenced[threadIdx.x];
  if (mine.empty())
    ++c.unfenced_threads;
  mine.emplace_back(addr, bytes);
}
inline void fence_proxy_async() {
  CtaState &c = cta();
  auto &mine = c.unfenced[threadIdx.x];
  if (!mine.empty()) {
    mine.clear();
    --c.unfenced_threads;
  }
}
/// Fails when the TMA copy `what` touches [lo, lo + bytes) of CTA `c` while a thread's
/// generic write there is not yet fenced for the async proxy.
inline void check_async_proxy(CtaState &c, u32 lo, u32 bytes, const char *what) {
  if (c.unfenced_threads == 0)
    return;
  for (size_t t = 0; t < c.unfenced.size(); ++t)
    for (const auto &[a, n] : c.unfenced[t])
      if (a < lo + bytes && lo < a + n) {
        std::fprintf(stderr, "lcejit_emu: block %u thread %u: %s touches shared memory "
                     "[0x%x, 0x%x) that thread %zu of CTA rank %u wrote by st.shared at 0x%x "
                     "without a fence.proxy.async since: the async proxy may not see it\n",
                     blockIdx.x, threadIdx.x, what, lo, lo + bytes, t, c.rank, a);
        std::abort();
      }
}

/// The mbarriers of every CTA of the launch, for a deadlock's report.
inline void print_mbarriers(const std::vector<CtaState *> &ctas) {
  for (size_t i = 0; i < ctas.size(); ++i)
    for (const auto &[addr, b] : ctas[i]->mbars)
      std::fprintf(stderr, "  CTA %zu (rank %u): mbarrier 0x%x: phase %u, %u of %u arrivals "
                   "pending, tx %lld\n",
                   i, ctas[i]->rank, addr, b.phase, b.pending, b.expected, b.tx);
}

} // namespace sm90
} // namespace lcejit_emu

//===----------------------------------------------------------------------===//
// The wrappers of lcejit_sm90.cuh, same names and signatures.
//===----------------------------------------------------------------------===//

namespace lcejit {
namespace sm90 {

namespace emu = ::lcejit_emu::sm90;
typedef unsigned short u16;

inline emu::u32 smem_addr(const void *p) { return emu::smem_addr(p); }

inline void mbar_init(emu::u32 bar, emu::u32 count) {
  if (count == 0)
    ::lcejit_emu::fail("mbarrier.init with count 0");
  emu::MBar &b = emu::cta().mbars[bar];
  b = emu::MBar{count, count, 0, 0};
}
inline void mbar_fence_init() {}
inline void mbar_expect_tx(emu::u32 bar, emu::u32 bytes) {
  emu::mbar_arrive_on(emu::cta(), bar, bytes);
}
inline void mbar_arrive(emu::u32 bar) { emu::mbar_arrive_on(emu::cta(), bar, 0); }
inline void mbar_arrive_if(emu::u32 bar, emu::u32 pred) {
  if (pred)
    emu::mbar_arrive_on(emu::cta(), bar, 0);
}
inline void mbar_arrive_pair_if(emu::u32 bar, emu::u32 pred, emu::u32 peer,
                                emu::u32 pred_peer) {
  if (pred)
    emu::mbar_arrive_on(emu::cta(), bar, 0);
  if (pred_peer) {
    emu::Cluster *c = emu::cta().cluster;
    if (peer >= c->ctas.size())
      ::lcejit_emu::fail("mapa: cluster rank out of range");
    emu::mbar_arrive_on(*c->ctas[peer], bar, 0);
  }
}
inline void mbar_arrive_cluster(emu::u32 bar, emu::u32 cluster) {
  const emu::u32 lane = threadIdx.x & 31u, cn = cluster >> 8, rank = cluster & 255u;
  if (lane == 0)
    emu::mbar_arrive_on(emu::cta(), bar, 0);
  emu::Cluster *c = emu::cta().cluster;
  const emu::u32 target = rank ^ (lane & (cn - 1u));
  if (target >= c->ctas.size())
    ::lcejit_emu::fail("mapa: cluster rank out of range");
  if (lane != 0 && lane < cn)
    emu::mbar_arrive_on(*c->ctas[target], bar, 0);
}
/// Blocks until the phase of `parity` has completed (the hardware's try_wait suspends
/// for a while and may fail; the callers loop either way).
inline bool mbar_try_wait(emu::u32 bar, emu::u32 parity) {
  emu::CtaState &c = emu::cta();
  emu::mbar_locked(c, bar);
  if (emu::trace)
    std::fprintf(stderr, "emu: block %u thread %u waits parity %u on 0x%x\n", blockIdx.x,
                 threadIdx.x, parity, bar);
  char what[160];
  {
    const emu::MBar &b = emu::mbar_locked(c, bar);
    std::snprintf(what, sizeof what,
                  "mbarrier.try_wait.parity %u on 0x%x (phase %u, %u of %u arrivals pending, "
                  "tx %lld, when the wait began)",
                  parity, bar, b.phase, b.pending, b.expected, b.tx);
  }
  ::lcejit_emu::fiber::wait_for(
      [&] { return (emu::mbar_locked(c, bar).phase & 1u) != (parity & 1u); }, what);
  emu::ts().observed[bar] = emu::mbar_locked(c, bar).completed;
  return true;
}
inline void mbar_wait(emu::u32 bar, emu::u32 parity) {
  while (!mbar_try_wait(bar, parity)) {
  }
}

inline emu::u32 cluster_ctarank() { return emu::cta().rank; }
inline emu::u32 cluster_nctarank() {
  return static_cast<emu::u32>(emu::cta().cluster->ctas.size());
}
inline void cluster_sync() { emu::cta().cluster->bar->wait(); }

//===----------------------------------------------------------------------===//
// TMA
//===----------------------------------------------------------------------===//

namespace detail_emu {
inline const emu::EmuTensorMap &map_of(const TensorMap *map) {
  const emu::EmuTensorMap *m = reinterpret_cast<const emu::EmuTensorMap *>(map);
  if (m->magic != emu::kMapMagic)
    ::lcejit_emu::fail("a tensor map not made by lcejit_emu::sm90::encode_tensor_map");
  return *m;
}
/// Shared byte offset (before the swizzle) of box element (i, j, l) and its global
/// address, or null when out of bounds.
inline const unsigned char *global_elem(const emu::EmuTensorMap &m, long long x, long long y,
                                        long long z) {
  if (x < 0 || y < 0 || z < 0 || static_cast<emu::u64>(x) >= m.dims[0] ||
      static_cast<emu::u64>(y) >= m.dims[1] || static_cast<emu::u64>(z) >= m.dims[2])
    return nullptr;
  return reinterpret_cast<const unsigned char *>(m.global) + x * m.strides[0] +
         y * m.strides[1] + z * m.strides[2];
}
inline emu::u32 box_bytes(const emu::EmuTensorMap &m) {
  return m.box[0] * m.box[1] * m.box[2] * m.elem_bytes;
}
inline emu::u32 shared_of(const emu::EmuTensorMap &m, emu::u32 base, emu::u32 i, emu::u32 j,
                          emu::u32 l) {
  const emu::u32 linear = ((l * m.box[1] + j) * m.box[0] + i) * m.elem_bytes;
  if (m.swizzle == 0)
    return base + linear;
  if (m.box[0] * m.elem_bytes > 128)
    ::lcejit_emu::fail("TMA: a 128-byte swizzle with an inner box over 128 bytes");
  if (base % 1024 != 0)
    ::lcejit_emu::fail("TMA: a swizzled box in shared memory not 1024-byte aligned");
  return emu::swizzle128(base + linear);
}
inline void load_box(emu::CtaState &c, emu::u32 dst, const emu::EmuTensorMap &m, int x, int y,
                     int z) {
  if (dst % 128 != 0)
    ::lcejit_emu::fail("TMA load: shared destination not 128-byte aligned");
  emu::at(c, dst, box_bytes(m), "TMA load destination");
  for (emu::u32 l = 0; l < m.box[2]; ++l)
    for (emu::u32 j = 0; j < m.box[1]; ++j)
      for (emu::u32 i = 0; i < m.box[0]; ++i) {
        unsigned char *s = emu::at(c, shared_of(m, dst, i, j, l), m.elem_bytes, "TMA load");
        const unsigned char *g = global_elem(m, x + static_cast<long long>(i),
                                             y + static_cast<long long>(j),
                                             z + static_cast<long long>(l));
        if (g)
          std::memcpy(s, g, m.elem_bytes);
        else
          std::memset(s, 0, m.elem_bytes);
      }
}
inline void load(emu::u32 dst, const TensorMap *map, emu::u32 bar, int x, int y, int z,
                 emu::u32 mask) {
  const emu::EmuTensorMap &m = map_of(map);
  emu::CtaState &self = emu::cta();
  for (emu::u32 r = 0; r < 16; ++r) {
    if (!(mask & (1u << r)))
      continue;
    if (r >= self.cluster->ctas.size())
      ::lcejit_emu::fail("TMA multicast: a mask bit past the cluster");
    emu::CtaState &c = *self.cluster->ctas[r];
    emu::check_async_proxy(c, dst, box_bytes(m), "a TMA load");
    // At the issue: the phase in progress is the one its bytes complete, landed or not.
    emu::note_tma_load(c, dst, box_bytes(m), bar);
    // In mode Late the box lands, and completes its bytes, at the end of the scheduler's
    // round or of one of the next two (drawn per box): a consumer that reads a stage
    // without waiting on its full barrier reads what was there before.
    ::lcejit_emu::fiber::Scheduler *sched = ::lcejit_emu::fiber::current;
    if (emu::mode == emu::Mode::Late && sched) {
      const emu::EmuTensorMap copy = m; // the map is a parameter of the issuing thread
      sched->defer(emu::tma_delay_min + sched->draw(emu::tma_delay_span),
                   [&c, dst, copy, bar, x, y, z] {
        load_box(c, dst, copy, x, y, z);
        emu::mbar_complete_tx(c, bar, box_bytes(copy));
      });
    } else {
      load_box(c, dst, m, x, y, z);
      emu::mbar_complete_tx(c, bar, box_bytes(m));
    }
  }
}
inline void store_now(const emu::PendingStore &s) {
  const emu::EmuTensorMap &m = map_of(s.map);
  emu::CtaState &c = emu::cta();
  if (s.add && m.elem_bytes != 4)
    ::lcejit_emu::fail("TMA reduce-add: only f32 maps are emulated");
  for (emu::u32 l = 0; l < m.box[2]; ++l)
    for (emu::u32 j = 0; j < m.box[1]; ++j)
      for (emu::u32 i = 0; i < m.box[0]; ++i) {
        const unsigned char *src =
            emu::at(c, shared_of(m, s.src, i, j, l), m.elem_bytes, "TMA store source");
        unsigned char *g = const_cast<unsigned char *>(
            global_elem(m, s.coord[0] + static_cast<long long>(i),
                        s.coord[1] + static_cast<long long>(j),
                        s.coord[2] + static_cast<long long>(l)));
        if (!g)
          continue; // out of bounds: not written
        if (s.add) {
          float a, b;
          std::memcpy(&a, g, 4);
          std::memcpy(&b, src, 4);
          a += b;
          std::memcpy(g, &a, 4);
        } else {
          std::memcpy(g, src, m.elem_bytes);
        }
      }
}
} // namespace detail_emu

inline void tma_prefetch(const TensorMap *map) { detail_emu::map_of(map); }
// [Note: sm90 L2 hints]: the eviction priority changes no byte a load delivers; the
// emulation checks that it is one of the three (L2_NORMAL 0, L2_EVICT_FIRST 1,
// L2_EVICT_LAST 2, declared after this header).
template <int HINT = 0>
inline void tma_load_2d(emu::u32 dst, const TensorMap *map, emu::u32 bar, int x, int y) {
  static_assert(HINT >= 0 && HINT <= 2, "an L2 hint");
  detail_emu::load(dst, map, bar, x, y, 0, 1u << emu::cta().rank);
}
template <int HINT = 0>
inline void tma_load_3d(emu::u32 dst, const TensorMap *map, emu::u32 bar, int x, int y, int z) {
  static_assert(HINT >= 0 && HINT <= 2, "an L2 hint");
  detail_emu::load(dst, map, bar, x, y, z, 1u << emu::cta().rank);
}
template <int HINT = 0>
inline void tma_load_2d_multicast(emu::u32 dst, const TensorMap *map, emu::u32 bar, int x,
                                  int y, u16 mask) {
  static_assert(HINT >= 0 && HINT <= 2, "an L2 hint");
  detail_emu::load(dst, map, bar, x, y, 0, mask);
}
template <bool ADD> inline void tma_store_2d(const TensorMap *map, emu::u32 src, int x, int y) {
  emu::check_async_proxy(emu::cta(), src, detail_emu::box_bytes(detail_emu::map_of(map)),
                         "a TMA store");
  const emu::PendingStore s{map, src, {x, y, 0}, ADD};
  if (emu::mode == emu::Mode::Early)
    detail_emu::store_now(s);
  else
    emu::ts().open_stores.push_back(s);
}
inline void bulk_commit() {
  emu::ts().store_groups.push_back(std::move(emu::ts().open_stores));
  emu::ts().open_stores.clear();
}
namespace detail_emu {
inline void retire_stores(int pending) {
  emu::ThreadSm90 &t = emu::ts();
  while (static_cast<int>(t.store_groups.size()) > pending) {
    for (const emu::PendingStore &s : t.store_groups.front())
      store_now(s);
    t.store_groups.pop_front();
  }
}
} // namespace detail_emu
template <int N> inline void bulk_wait_read() { detail_emu::retire_stores(N); }
template <int N> inline void bulk_wait() { detail_emu::retire_stores(N); }
inline void fence_proxy_async_shared() { emu::fence_proxy_async(); }
inline void st_shared_f32x2(emu::u32 addr, float x, float y) {
  emu::note_generic_write(addr, 8);
  float v[2] = {x, y};
  std::memcpy(emu::at(emu::cta(), addr, 8, "st.shared.v2.f32"), v, 8);
}
inline float2 ld_shared_f32x2(emu::u32 addr) {
  emu::check_tma_loaded_read(addr, 8, "ld.shared.v2.f32");
  float2 v;
  std::memcpy(&v, emu::at(emu::cta(), addr, 8, "ld.shared.v2.f32"), 8);
  return v;
}
inline void st_shared_f32x4(emu::u32 addr, float x, float y, float z, float w) {
  emu::note_generic_write(addr, 16);
  float v[4] = {x, y, z, w};
  std::memcpy(emu::at(emu::cta(), addr, 16, "st.shared.v4.f32"), v, 16);
}
inline float4 ld_cluster_f32x4(emu::u32 addr, emu::u32 rank) {
  emu::Cluster *c = emu::cta().cluster;
  if (rank >= c->ctas.size())
    ::lcejit_emu::fail("mapa: cluster rank out of range");
  float4 v;
  std::memcpy(&v, emu::at(*c->ctas[rank], addr, 16, "ld.shared::cluster.v4.f32"), 16);
  return v;
}

//===----------------------------------------------------------------------===//
// wgmma
//===----------------------------------------------------------------------===//

namespace detail_emu {
/// Element (row, k) of a wgmma operand, rows m or n of the instruction, k < 16, from its
/// matrix descriptor (PTX ISA, "Matrix Descriptor Format" and the canonical layouts with
/// the 128-byte swizzle): K-major, rows of 128 bytes, 8-row groups SBO apart; MN-major
/// (transposed), 64 rows of the operand in 128 bytes per k, k-rows 128 bytes apart in
/// groups of 8 SBO apart, 64-row groups LBO apart.
inline unsigned short operand(emu::u64 desc, bool mn_major, int row, int k) {
  if ((desc >> 62) != 1)
    ::lcejit_emu::fail("wgmma: only the 128-byte swizzle is emulated");
  if (((desc >> 49) & 7u) != 0)
    ::lcejit_emu::fail("wgmma: a descriptor base offset is not emulated");
  const emu::u32 start = static_cast<emu::u32>(desc & 0x3FFFu) << 4;
  const emu::u32 lbo = static_cast<emu::u32>((desc >> 16) & 0x3FFFu) << 4;
  const emu::u32 sbo = static_cast<emu::u32>((desc >> 32) & 0x3FFFu) << 4;
  emu::u32 addr;
  if (!mn_major)
    addr = start + (row / 8) * sbo + (row % 8) * 128 + k * 2;
  else
    addr = start + (row / 64) * lbo + (k / 8) * sbo + (k % 8) * 128 + (row % 64) * 2;
  unsigned short bits;
  std::memcpy(&bits, emu::at(emu::cta(), emu::swizzle128(addr), 2, "wgmma operand"), 2);
  return bits;
}
/// This thread's two rows of A and n / 4 columns of B of one wgmma, as bf16 bits.
struct Operands {
  unsigned short a[2][16], b[64][16];
};
inline void fetch(const emu::PendingWgmma &w, Operands &o) {
  const int t = static_cast<int>(threadIdx.x % 128), warp = t / 32, l = t % 32;
  for (int h = 0; h < 2; ++h)
    for (int k = 0; k < 16; ++k)
      o.a[h][k] = operand(w.desc_a, w.trans_a != 0, 16 * warp + l / 4 + 8 * h, k);
  for (int c = 0; c < w.n / 4; ++c)
    for (int k = 0; k < 16; ++k)
      o.b[c][k] = operand(w.desc_b, w.trans_b != 0, 8 * (c / 2) + 2 * (l % 4) + c % 2, k);
}
inline emu::u64 digest(const Operands &o, int n) {
  emu::u64 h = 1469598103934665603ull; // FNV-1a over the bits
  auto add = [&h](unsigned short v) {
    h = (h ^ v) * 1099511628211ull;
  };
  for (int r = 0; r < 2; ++r)
    for (int k = 0; k < 16; ++k)
      add(o.a[r][k]);
  for (int c = 0; c < n / 4; ++c)
    for (int k = 0; k < 16; ++k)
      add(o.b[c][k]);
  return h;
}
/// Computes a wgmma this thread issued. In mode Late (`check`) its operands are read
/// when its group retires and must be what they were at issue: the hardware reads them
/// at some time in between, so a stage written in that window (freed too early, or
/// filled after the wgmma was issued without waiting on its full barrier) is a race,
/// named here instead of showing as a wrong result or not at all.
inline void compute(const emu::PendingWgmma &w, bool check) {
  Operands o;
  fetch(w, o);
  if (check && digest(o, w.n) != w.digest) {
    std::fprintf(stderr,
                 "lcejit_emu: block %u thread %u: the shared memory a wgmma reads changed "
                 "between wgmma.mma_async and the wait_group that retired it (a stage "
                 "freed before its wgmma retired, or read before its TMA load completed "
                 "its barrier)\n",
                 blockIdx.x, threadIdx.x);
    std::abort();
  }
  float a[2][16], b[64][16];
  for (int h = 0; h < 2; ++h)
    for (int k = 0; k < 16; ++k)
      a[h][k] = ::lcejit_emu::half_bits_to_float(o.a[h][k], true);
  for (int c = 0; c < w.n / 4; ++c)
    for (int k = 0; k < 16; ++k)
      b[c][k] = ::lcejit_emu::half_bits_to_float(o.b[c][k], true);
  for (int i = 0; i < w.n / 2; ++i) {
    // Row 16 w + l / 4 + 8 ((i / 2) % 2), column 8 (i / 4) + 2 (l % 4) + (i % 2).
    const float *ar = a[(i / 2) % 2];
    const float *bc = b[2 * (i / 4) + i % 2];
    double sum = 0;
    for (int k = 0; k < 16; ++k)
      sum += static_cast<double>(ar[k]) * bc[k];
    w.d[i] = static_cast<float>((w.scale_d ? static_cast<double>(w.d[i]) : 0.0) + sum);
  }
}
template <int N, int TA, int TB>
inline void issue(float (&d)[N / 2], emu::u64 desc_a, emu::u64 desc_b, int scale_d) {
  emu::cta().warpgroup[threadIdx.x / 128].wait();
  emu::PendingWgmma w{d, N, desc_a, desc_b, scale_d, TA, TB, 0};
  if (emu::mode == emu::Mode::Early) {
    compute(w, false);
  } else {
    Operands o;
    fetch(w, o);
    w.digest = digest(o, N);
    emu::ts().open_wgmma.push_back(w);
  }
}
} // namespace detail_emu

// .sync.aligned ([Note: sm90 host emulation]): the lanes of a warp meet at every wgmma
// fence, commit and wait, and the warpgroup at every mma_async, as the hardware runs
// them converged. Without this an emulated lane could fall two phases of a stage behind
// its warp's leader, which frees the stage for the warp, and its parity wait would then
// never see its phase (a parity names a phase only within one of the current).
namespace detail_emu {
inline void warp_sync() {
  ::lcejit_emu::tls().cta->warps[static_cast<size_t>(::lcejit_emu::tls().warp)]->bar.wait();
}
} // namespace detail_emu
inline void wgmma_fence() { detail_emu::warp_sync(); }
inline void wgmma_commit() {
  detail_emu::warp_sync();
  emu::ts().wgmma_groups.push_back(std::move(emu::ts().open_wgmma));
  emu::ts().open_wgmma.clear();
}
/// A group retires for the whole warpgroup at once (its wgmma are warpgroup operations):
/// every thread computes its fragments, then the warpgroup meets, and only then may any
/// of its threads free the stages the group read.
template <int N> inline void wgmma_wait() {
  detail_emu::warp_sync();
  emu::ThreadSm90 &t = emu::ts();
  while (static_cast<int>(t.wgmma_groups.size()) > N) {
    for (const emu::PendingWgmma &w : t.wgmma_groups.front())
      detail_emu::compute(w, true);
    t.wgmma_groups.pop_front();
  }
  emu::cta().warpgroup[threadIdx.x / 128].wait();
}
template <int R> inline void fence_acc(float (&)[R]) {}

template <int TA, int TB>
inline void wgmma_m64n64k16(float (&d)[32], emu::u64 a, emu::u64 b, int s) {
  detail_emu::issue<64, TA, TB>(d, a, b, s);
}
template <int TA, int TB>
inline void wgmma_m64n128k16(float (&d)[64], emu::u64 a, emu::u64 b, int s) {
  detail_emu::issue<128, TA, TB>(d, a, b, s);
}
template <int TA, int TB>
inline void wgmma_m64n192k16(float (&d)[96], emu::u64 a, emu::u64 b, int s) {
  detail_emu::issue<192, TA, TB>(d, a, b, s);
}
template <int TA, int TB>
inline void wgmma_m64n256k16(float (&d)[128], emu::u64 a, emu::u64 b, int s) {
  detail_emu::issue<256, TA, TB>(d, a, b, s);
}

//===----------------------------------------------------------------------===//
// Named barriers, flags, reductions, register hints
//===----------------------------------------------------------------------===//

namespace detail_emu {
inline void named_bar(int id, int count, bool wait) {
  if (id <= 0 || id >= 16 || count <= 0 || count % 32 != 0)
    ::lcejit_emu::fail("bar.sync/bar.arrive: bad barrier id or thread count");
  emu::NamedBar &b = emu::cta().named[id];
  if (b.arrived == 0)
    b.count = count;
  else if (b.count != count)
    ::lcejit_emu::fail("bar.sync/bar.arrive: two thread counts on one barrier at once");
  const unsigned long gen = b.generation;
  ::lcejit_emu::fiber::progress();
  if (++b.arrived == b.count) {
    b.arrived = 0;
    ++b.generation;
    return;
  }
  if (wait)
    ::lcejit_emu::fiber::wait_for([&] { return b.generation != gen; }, "bar.sync");
}
} // namespace detail_emu
inline void named_bar_sync(int id, int count) { detail_emu::named_bar(id, count, true); }
inline void named_bar_arrive(int id, int count) { detail_emu::named_bar(id, count, false); }

inline emu::u32 ld_acquire_u32(const emu::u32 *p) {
  return __atomic_load_n(p, __ATOMIC_ACQUIRE);
}
inline void st_release_u32(emu::u32 *p, emu::u32 v) {
  __atomic_store_n(p, v, __ATOMIC_RELEASE);
  ::lcejit_emu::fiber::progress();
}
inline void red_add_f32x2(float *p, float x, float y) {
  p[0] += x;
  p[1] += y;
}
inline void st_cs_u32x2(void *p, emu::u32 x, emu::u32 y) {
  const emu::u32 v[2] = {x, y};
  std::memcpy(p, v, 8);
}
template <int REGS> inline void setmaxnreg_inc() {}
template <int REGS> inline void setmaxnreg_dec() {}

} // namespace sm90
} // namespace lcejit

//===----------------------------------------------------------------------===//
// Other CUDA built-ins of the sm90 header.
//===----------------------------------------------------------------------===//

inline int __shfl_sync(unsigned, int v, int src) {
  return static_cast<int>(__shfl_sync(0xffffffffu, static_cast<long long>(v), src));
}
/// A spin loop's sleep: the fiber lets the others run ([Note: emulated threads as fibers]).
inline void __nanosleep(unsigned) { ::lcejit_emu::fiber::yield(); }
/// Call k of a CTA uses slot k % 3 and clears slot (k + 2) % 3: every thread has read
/// that one (call k - 1) before this barrier, and none can set it (call k + 2) before
/// thread 0 has passed call k + 1's barrier.
inline int __syncthreads_or(int pred) {
  lcejit_emu::sm90::CtaState &c = lcejit_emu::sm90::cta();
  const unsigned k = lcejit_emu::sm90::ts().any_calls++;
  if (pred)
    c.any[k % 3] = 1;
  __syncthreads();
  const int r = c.any[k % 3];
  if (threadIdx.x == 0)
    c.any[(k + 2) % 3] = 0;
  return r;
}
inline void __threadfence() { std::atomic_thread_fence(std::memory_order_seq_cst); }
inline float4 __ldcg(const float4 *p) {
  float4 v;
  __atomic_load(reinterpret_cast<const unsigned long long *>(p),
                reinterpret_cast<unsigned long long *>(&v), __ATOMIC_RELAXED);
  __atomic_load(reinterpret_cast<const unsigned long long *>(p) + 1,
                reinterpret_cast<unsigned long long *>(&v) + 1, __ATOMIC_RELAXED);
  return v;
}
inline void __stcg(float4 *p, float4 v) {
  __atomic_store(reinterpret_cast<unsigned long long *>(p),
                 reinterpret_cast<unsigned long long *>(&v), __ATOMIC_RELAXED);
  __atomic_store(reinterpret_cast<unsigned long long *>(p) + 1,
                 reinterpret_cast<unsigned long long *>(&v) + 1, __ATOMIC_RELAXED);
}

// The per-CTA dynamic shared memory (lcejit_gemm.cuh then declares no array).
#define lcejit_dynamic_smem (::lcejit_emu::sm90::dynamic_smem())

namespace lcejit_emu {
namespace sm90 {

/// Runs a grid of CTAs of `block` threads with `smem_bytes` of dynamic shared memory, in
/// clusters of `cluster` CTAs along x (all of a cluster at once; clusters one after
/// another, or every CTA of a grid row at once when `cooperative`: CTAs that wait on each
/// other's flags).
inline void launch(const long long grid[3], int block, int smem_bytes, int cluster,
                   bool cooperative, const std::function<void()> &kernel) {
  if (cluster < 1 || grid[0] % cluster != 0)
    fail("sm90 launch: the grid is not a whole number of clusters");
  blockDim = Dim3{static_cast<unsigned>(block), 1, 1};
  gridDim = Dim3{static_cast<unsigned>(grid[0]), static_cast<unsigned>(grid[1]),
                 static_cast<unsigned>(grid[2])};
  launch_smem_bytes = static_cast<unsigned>(smem_bytes);
  const long long at_once = cooperative ? grid[0] : cluster;
  for (long long z = 0; z < grid[2]; ++z)
    for (long long y = 0; y < grid[1]; ++y)
      for (long long first = 0; first < grid[0]; first += at_once) {
        std::vector<std::unique_ptr<CtaState>> states;
        std::vector<std::unique_ptr<Cta>> ctas;
        std::vector<std::unique_ptr<Cluster>> clusters;
        for (long long b = first; b < first + at_once; ++b) {
          if ((b - first) % cluster == 0) {
            clusters.push_back(std::make_unique<Cluster>());
            clusters.back()->bar = std::make_unique<Barrier>(block * cluster, "barrier.cluster");
          }
          auto s = std::make_unique<CtaState>();
          s->dynamic_bytes = static_cast<u32>(smem_bytes);
          s->unfenced.resize(static_cast<size_t>(block));
          // The window: shared addresses [0, kDynamicStart + smem) over a host buffer
          // aligned to 1024 bytes, so that the swizzle's address bits are the window's.
          s->storage.assign(CtaState::kDynamicStart + static_cast<size_t>(smem_bytes) + 1024,
                            0xA5);
          const auto raw = reinterpret_cast<std::uintptr_t>(s->storage.data());
          s->window = s->storage.data() + ((1024 - raw % 1024) % 1024);
          s->cluster = clusters.back().get();
          s->rank = static_cast<u32>((b - first) % cluster);
          clusters.back()->ctas.push_back(s.get());
          states.push_back(std::move(s));
          ctas.push_back(std::make_unique<Cta>(block));
        }
        // The mma.sync path's cp.async and ldmatrix checks take one CTA's array.
        ::lcejit_emu::shared_base =
            at_once == 1 ? states[0]->window + CtaState::kDynamicStart : nullptr;
        const size_t threads = static_cast<size_t>(at_once * block);
        ::lcejit_emu::FiberSet set;
        set.states.reserve(threads);
        std::vector<ThreadSm90> sm90_states(threads);
        const std::function<void()> check_end = [] {
          if (trace)
            std::fprintf(stderr, "emu: block %u thread %u returns\n", blockIdx.x,
                         threadIdx.x);
          if (!ts().open_wgmma.empty() || !ts().wgmma_groups.empty())
            fail("a thread ended with wgmma groups not waited for");
          if (!ts().open_stores.empty() || !ts().store_groups.empty())
            fail("a thread ended with TMA stores not waited for (bulk_wait)");
        };
        for (long long b = first; b < first + at_once; ++b) {
          const size_t from = set.states.size();
          ::lcejit_emu::add_fibers(set, *ctas[static_cast<size_t>(b - first)],
                                   Dim3{static_cast<unsigned>(b), static_cast<unsigned>(y),
                                        static_cast<unsigned>(z)},
                                   block, kernel, check_end);
          for (size_t i = from; i < set.states.size(); ++i) {
            sm90_states[i].cta = states[static_cast<size_t>(b - first)].get();
            set.states[i].ext = &sm90_states[i];
          }
        }
        ::lcejit_emu::install_resume(set);
        std::vector<CtaState *> all;
        for (const auto &st : states)
          all.push_back(st.get());
        set.sched.on_deadlock = [&all] { print_mbarriers(all); };
        set.sched.run();
      }
}

} // namespace sm90
} // namespace lcejit_emu

// The library's entry points for the test harness (tests/unit/codegen/HostEmulation.h):
// every emulated module with LCEJIT_EMU_SM90 is one translation unit that has them once
// (not inline: dlsym must find them).
extern "C" void lcejit_emu_sm90_encode(void *bytes, const void *global, unsigned rank,
                                       const unsigned long long *dims,
                                       const unsigned long long *strides, const unsigned *box,
                                       unsigned elem_bytes, unsigned swizzle) {
  lcejit_emu::sm90::encode_tensor_map(bytes, global, rank, dims, strides, box, elem_bytes,
                                      swizzle);
}
extern "C" void lcejit_emu_sm90_set_mode(int late) {
  lcejit_emu::sm90::mode = late ? lcejit_emu::sm90::Mode::Late : lcejit_emu::sm90::Mode::Early;
}
