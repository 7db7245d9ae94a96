//===- Sm90Launch.cpp - Launching the sm_90a GEMM kernels ------------------===//

#include "runtime/Sm90Launch.h"

#include "compiler/support/Check.h"
#include "lcejit/Error.h"

#include <algorithm>

namespace lcejit::runtime {

int64_t sm90GridSize(const Sm90GemmLaunch &l, int numSMs) {
  const int64_t tiles = ((l.m + l.bm - 1) / l.bm) * ((l.n + l.bn - 1) / l.bn);
  if (l.grid > 0)
    return l.grid;
  return std::max<int64_t>(1, std::min<int64_t>(tiles, numSMs));
}

void checkSm90GemmLaunch(const Sm90GemmLaunch &l) {
  LCEJIT_CHECK_ARG(l.m >= 0 && l.n >= 0 && l.k >= 0, "sm90 GEMM sizes m = {}, n = {}, k = {}",
                   l.m, l.n, l.k);
  LCEJIT_CHECK_ARG(l.bn > 0 && l.sharedBytes > 0, "sm90 GEMM bn = {}, sharedBytes = {}", l.bn,
                   l.sharedBytes);
  LCEJIT_CHECK_ARG(l.bm == 128 || l.bm == 64 || l.bm == 192, "sm90 GEMM bm = {} (64, 128 or 192)",
                   l.bm);
  // The kernel checks its block against its GemmConfig (launch_ok): a wrong count of
  // these two returns from every CTA having written nothing.
  LCEJIT_CHECK_ARG(l.threads == 384 || l.threads == 512,
                   "sm90 GEMM threads = {} (the kernel's codegen::sm90GemmThreads: 384 or 512)",
                   l.threads);
  LCEJIT_CHECK_ARG(l.clusterM == 1 || (l.clusterM == 2 && l.bKMajor),
                   "sm90 GEMM clusterM = {} (1, or 2 with a K-major B)", l.clusterM);
  LCEJIT_CHECK_ARG(l.ldOut >= l.n, "sm90 GEMM ldOut = {} is smaller than n = {}", l.ldOut, l.n);
  LCEJIT_CHECK_ARG(l.group > 0, "sm90 GEMM group = {}", l.group);
  LCEJIT_CHECK_ARG(l.m < (int64_t{1} << 31) && l.n < (int64_t{1} << 31) &&
                       l.k < (int64_t{1} << 31),
                   "sm90 GEMM sizes m = {}, n = {}, k = {}: TMA coordinates are 32-bit", l.m,
                   l.n, l.k);
}

void launchSm90Gemm(const Module &module, CUfunction f, const Sm90GemmLaunch &l,
                    CUstream stream) {
  checkSm90GemmLaunch(l);
  if (l.m == 0 || l.n == 0)
    return;
  LCEJIT_CHECK_ARG(l.out != 0, "sm90 GEMM output is a null pointer");
  CUtensorMap mapA, mapB;
  if (l.k == 0) {
    // An empty product: the kernel stores zeros and reads nothing, so the maps only
    // have to be valid descriptors (of a placeholder address that is never accessed).
    const CUdeviceptr placeholder = 256;
    mapA = encodeSm90Operand({placeholder, true, 1, 1, 8, l.bm});
    mapB = encodeSm90Operand({placeholder, true, 1, 1, 8, l.bn});
  } else {
    mapA = encodeSm90Operand({l.a, l.aKMajor, l.m, l.k, l.lda, l.bm});
    mapB = encodeSm90Operand({l.b, l.bKMajor, l.n, l.k, l.ldb, l.bn / l.clusterM});
  }

  int64_t grid = sm90GridSize(l, l.grid > 0 ? 0 : currentDeviceInfo().numSMs);
  // [Note: sm90 multicast]: pairs only where CTAs 2i and 2i + 1 always hold row tiles 2r
  // and 2r + 1 of one column (lcejit::sm90::gemm): even row tiles, group and grid. An odd
  // default grid drops one CTA.
  const int64_t rowTiles = (l.m + l.bm - 1) / l.bm;
  if (l.clusterM == 2 && l.grid == 0 && grid > 1 && grid % 2 == 1)
    --grid;
  const bool pairs = l.clusterM == 2 && l.k > 0 && rowTiles % 2 == 0 && l.group % 2 == 0 &&
                     grid % 2 == 0;
  module.reserveDynamicShared(f, l.sharedBytes);

  CUdeviceptr out = l.out;
  long long ldOut = l.ldOut, m = l.m, n = l.n, k = l.k;
  int group = l.group;
  void *params[] = {&mapA, &mapB, &out, &ldOut, &m, &n, &k, &group};
  CUlaunchConfig cfg{};
  cfg.gridDimX = static_cast<unsigned>(grid);
  cfg.gridDimY = 1;
  cfg.gridDimZ = 1;
  // [Note: sm90 three consumers]: 192-row tiles run a third consumer warpgroup.
  cfg.blockDimX = static_cast<unsigned>(l.threads);
  cfg.blockDimY = 1;
  cfg.blockDimZ = 1;
  cfg.sharedMemBytes = static_cast<unsigned>(l.sharedBytes);
  cfg.hStream = stream;
  CUlaunchAttribute cluster{};
  if (pairs) {
    cluster.id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
    cluster.value.clusterDim.x = 2;
    cluster.value.clusterDim.y = 1;
    cluster.value.clusterDim.z = 1;
    cfg.attrs = &cluster;
    cfg.numAttrs = 1;
  }
  LCEJIT_CU(cudaDriver().launchKernelEx(&cfg, f, params, nullptr));
}

} // namespace lcejit::runtime
