// dw-rmw-probe: how fast can an SM-resident tile be added into a large f32 matrix in
// global memory, by each of the ways an accumulating dB's epilogue could do it?
//
// The question (docs/hopper.md, "Session 34"): an ordinary block's dB reads and writes all
// of dW in f32 through TMA reduce-adds (the L2 does the read-modify-write), and ncu put
// B's 896-row block at 55 % tensor activity and ~2.8 TB/s of DRAM at 1.76 GHz: neither
// the pipe, the memory nor the power cap saturated. If the L2's reduce-adds are slower
// than a read and a write of the same bytes, the epilogue should load the old tile
// (TMA, ahead of time) and store the sum plainly; if not, its cost is elsewhere.
//
// Each variant walks the matrix (rows x cols f32, row-major) in 128 x 256 tiles,
// persistent CTAs (one a SM, 256 threads), each tile in four chunks of 32 rows x 1 KB:
//
//   bulk-red    the tile's values staged in shared memory, then cp.reduce.async.bulk
//               .add.f32 a row (what dB's TMA reduce-add does, without a tensor map)
//   bulk-st     the same stores without the add (write only: the floor for a plain store)
//   bulk-ld-st  the old chunk loaded by cp.async.bulk into shared memory (a chunk ahead),
//               added to by the threads, stored by cp.async.bulk (an SM-side RMW)
//   red-v4      red.global.add.v4.f32 from registers, coalesced
//   ld-st       ld.global.v4 / st.global.v4 from registers, eight 16-byte loads in flight
//   tensor-red  dB's own path (session 37): 64-row x 32-column f32 boxes staged in the
//               128-byte swizzle and added by cp.reduce.async.bulk.tensor.2d through a
//               tensor map (box 32 x 64, SWIZZLE_128B, L2 promotion 256B, as dB's output
//               map), four boxes a 32 KB chunk (a 64 x 128 quarter of the tile)
//   tensor-red-ns the same boxes unswizzled (SWIZZLE_NONE): whether the box layout
//               changes how the L2 takes the reduce-adds
//
// and reports GB/s of DRAM traffic implied (2 x bytes for a RMW, 1 x for bulk-st), the
// median of --iters runs. Each RMW variant adds a known value; the probe checks a sample
// of elements after the runs (a wrong result fails the probe: exit 1).
//
// Under ncu (`--metrics dram__bytes_read.sum,lts__t_sectors_op_red.sum`) the reduce
// variants say how many times the L2 reads the matrix: once, on an H100 (session 38), while
// the reduce-sector counter reads 1.5 times the matrix's sectors for every one of them. Build (here, no GPU needed; the tensor map's encoder comes from the driver
// through cudaGetDriverEntryPointByVersion, so nothing links libcuda):
//   nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -o .gpu/dw-rmw-probe \
//        tools/probes/dw-rmw-probe.cu
// Run:  .gpu/dw-rmw-probe [rows cols iters staging_chunks]   (default 256000 2304 5 1)
//   staging_chunks: shared-memory chunks of 32 KB in flight for bulk-red / bulk-st
//   (1 = 32 KB as dB's epilogue has today; 4 = the whole 128 KB tile).
#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <string>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define CK(x)                                                                              \
  do {                                                                                     \
    cudaError_t e_ = (x);                                                                  \
    if (e_ != cudaSuccess) {                                                               \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x,                      \
                   cudaGetErrorString(e_));                                                \
      std::exit(2);                                                                        \
    }                                                                                      \
  } while (0)

namespace {

constexpr int kThreads = 256;
constexpr int kTileRows = 128;
constexpr int kTileCols = 256;       // f32: 1 KB a row
constexpr int kChunkRows = 32;       // a chunk: 32 rows x 1 KB = 32 KB
constexpr int kChunkBytes = kChunkRows * kTileCols * 4;
constexpr int kChunksPerTile = kTileRows / kChunkRows;
constexpr int kMaxSlots = 6;         // 6 x 32 KB + barriers < 227 KB

// The value every variant adds at (row, col): small, nonzero, exact in f32 sums.
__host__ __device__ inline float addend(int64_t r, int64_t c) {
  return float(int((r * 7 + c * 3) & 15) + 1) * 0.25f;
}
__host__ __device__ inline float initial(int64_t r, int64_t c) {
  return float(int((r + c * 5) & 31)) - 8.0f;
}

__global__ void init_kernel(float *m, int64_t rows, int64_t cols) {
  int64_t n = rows * cols;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    m[i] = initial(i / cols, i % cols);
}

__device__ inline uint32_t smem_addr(const void *p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// cp.async.bulk.wait_group.read with a runtime count (the instruction takes an immediate).
__device__ inline void bulk_wait_read(int pending) {
  switch (pending) {
  case 0: asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory"); break;
  case 1: asm volatile("cp.async.bulk.wait_group.read 1;" ::: "memory"); break;
  case 2: asm volatile("cp.async.bulk.wait_group.read 2;" ::: "memory"); break;
  case 3: asm volatile("cp.async.bulk.wait_group.read 3;" ::: "memory"); break;
  case 4: asm volatile("cp.async.bulk.wait_group.read 4;" ::: "memory"); break;
  default: asm volatile("cp.async.bulk.wait_group.read 5;" ::: "memory"); break;
  }
}

// Fill a staged chunk (32 rows x 256 f32) with the addends of its global position.
__device__ inline void fill_chunk(float *s, int64_t row0, int64_t col0) {
  for (int i = threadIdx.x; i < kChunkRows * kTileCols / 4; i += kThreads) {
    int r = i / (kTileCols / 4), c4 = (i % (kTileCols / 4)) * 4;
    float4 v = make_float4(addend(row0 + r, col0 + c4), addend(row0 + r, col0 + c4 + 1),
                           addend(row0 + r, col0 + c4 + 2), addend(row0 + r, col0 + c4 + 3));
    reinterpret_cast<float4 *>(s)[i] = v;
  }
}

// bulk-red (reduce = true) and bulk-st (reduce = false): the epilogue of today's dB with
// `slots` chunks of staging in flight.
template <bool reduce>
__global__ void __launch_bounds__(kThreads, 1)
    bulk_store_kernel(float *m, int64_t rows, int64_t cols, int slots) {
  extern __shared__ __align__(128) unsigned char smem[];
  float *stage = reinterpret_cast<float *>(smem);
  int64_t tilesR = rows / kTileRows, tilesC = cols / kTileCols;
  int chunk = 0;
  for (int64_t t = blockIdx.x; t < tilesR * tilesC; t += gridDim.x) {
    int64_t tr = t / tilesC, tc = t % tilesC;  // row-major tile order, as dB's launch walks
    for (int k = 0; k < kChunksPerTile; ++k, ++chunk) {
      int slot = chunk % slots;
      // The slot's previous store must have been read out of shared memory (bulk groups
      // are per thread: every issuing lane waits for its own).
      if (threadIdx.x < kChunkRows)
        bulk_wait_read(slots - 1);
      __syncthreads();
      float *s = stage + size_t(slot) * (kChunkBytes / 4);
      int64_t row0 = tr * kTileRows + k * kChunkRows, col0 = tc * kTileCols;
      fill_chunk(s, row0, col0);
      asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
      __syncthreads();
      if (threadIdx.x < kChunkRows) {  // one lane a row: 32 bulk ops of 1 KB a chunk
        int r = threadIdx.x;
        float *g = m + (row0 + r) * cols + col0;
        uint32_t sa = smem_addr(s + r * kTileCols);
        if (reduce)
          asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], "
                       "[%1], %2;" ::"l"(g),
                       "r"(sa), "r"(kTileCols * 4)
                       : "memory");
        else
          asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" ::"l"(g),
                       "r"(sa), "r"(kTileCols * 4)
                       : "memory");
      }
      if (threadIdx.x < kChunkRows)
        asm volatile("cp.async.bulk.commit_group;" ::: "memory");
    }
  }
  if (threadIdx.x < kChunkRows)
    asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
}

// Byte offset of element (r, c) of a 64 x 32 f32 box in shared memory: under the 128-byte
// swizzle (16-byte unit c / 4 of row r at unit (c / 4) ^ (r % 8)), or row-major without it.
__device__ inline uint32_t box_offset(int r, int c, bool swizzle) {
  int unit = swizzle ? ((c >> 2) ^ (r & 7)) : (c >> 2);
  return uint32_t(r * 128 + (unit << 4) + ((c & 3) << 2));
}

// tensor-red / tensor-red-ns: dB's epilogue itself. A tile is four 32 KB chunks, each a
// 64-row x 128-column quarter staged as four 64 x 32 boxes (8 KB, 1024-byte aligned), each
// box added by one cp.reduce.async.bulk.tensor.2d through `map`; `slots` chunks of staging
// in flight.
__global__ void __launch_bounds__(kThreads, 1)
    tensor_red_kernel(const __grid_constant__ CUtensorMap map, int64_t rows, int64_t cols,
                      int slots, bool swizzle) {
  extern __shared__ __align__(128) unsigned char smem[];
  unsigned char *stage = smem + ((1024 - (smem_addr(smem) & 1023)) & 1023);
  int64_t tilesR = rows / kTileRows, tilesC = cols / kTileCols;
  int chunk = 0;
  for (int64_t t = blockIdx.x; t < tilesR * tilesC; t += gridDim.x) {
    int64_t tr = t / tilesC, tc = t % tilesC;
    for (int k = 0; k < kChunksPerTile; ++k, ++chunk) {
      int slot = chunk % slots;
      if (threadIdx.x == 0)
        bulk_wait_read(slots - 1);
      __syncthreads();
      unsigned char *s = stage + size_t(slot) * kChunkBytes;
      int64_t row0 = tr * kTileRows + (k / 2) * 64, col0 = tc * kTileCols + (k % 2) * 128;
      for (int i = threadIdx.x; i < 4 * 64 * 32; i += kThreads) {
        int b = i / (64 * 32), r = (i / 32) % 64, c = i % 32;
        *reinterpret_cast<float *>(s + b * 8192 + box_offset(r, c, swizzle)) =
            addend(row0 + r, col0 + 32 * b + c);
      }
      asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
      __syncthreads();
      if (threadIdx.x == 0) {
        for (int b = 0; b < 4; ++b)
          asm volatile("cp.reduce.async.bulk.tensor.2d.global.shared::cta.add.tile.bulk_group "
                       "[%0, {%2, %3}], [%1];" ::"l"(reinterpret_cast<uint64_t>(&map)),
                       "r"(smem_addr(s + b * 8192)), "r"(int(col0 + 32 * b)), "r"(int(row0))
                       : "memory");
        asm volatile("cp.async.bulk.commit_group;" ::: "memory");
      }
    }
  }
  if (threadIdx.x == 0)
    asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
}

__device__ inline void mbar_init(uint64_t *b, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(b)), "r"(count)
               : "memory");
}
__device__ inline void mbar_expect_tx(uint64_t *b, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(b)),
               "r"(bytes)
               : "memory");
}
__device__ inline void mbar_wait(uint64_t *b, uint32_t phase) {
  asm volatile("{\n"
               ".reg .pred p;\n"
               "WAIT_%=:\n"
               "mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
               "@!p bra WAIT_%=;\n"
               "}\n" ::"r"(smem_addr(b)),
               "r"(phase)
               : "memory");
}

// bulk-ld-st: the old chunk comes into shared memory by cp.async.bulk (issued `ahead`
// chunks early), the threads add, the sum leaves by cp.async.bulk. Slots: ahead + 1.
__global__ void __launch_bounds__(kThreads, 1)
    bulk_ld_st_kernel(float *m, int64_t rows, int64_t cols, int ahead) {
  extern __shared__ __align__(128) unsigned char smem[];
  int slots = ahead + 1;
  float *stage = reinterpret_cast<float *>(smem);
  uint64_t *full = reinterpret_cast<uint64_t *>(smem + size_t(kMaxSlots) * kChunkBytes);
  int64_t tilesR = rows / kTileRows, tilesC = cols / kTileCols;
  int64_t myTiles = 0;
  for (int64_t t = blockIdx.x; t < tilesR * tilesC; t += gridDim.x)
    ++myTiles;
  int64_t nChunks = myTiles * kChunksPerTile;
  auto chunkRow0 = [&](int64_t c, int64_t &row0, int64_t &col0) {
    int64_t t = blockIdx.x + (c / kChunksPerTile) * int64_t(gridDim.x);
    row0 = (t / tilesC) * kTileRows + (c % kChunksPerTile) * kChunkRows;
    col0 = (t % tilesC) * kTileCols;
  };
  if (threadIdx.x == 0)
    for (int s = 0; s < slots; ++s)
      mbar_init(&full[s], 1);
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  __syncthreads();
  // Lane r < 32 loads and stores row r of a chunk; lane 0 also arms the barrier.
  auto issueLoad = [&](int64_t c) {
    int slot = int(c % slots);
    int64_t row0, col0;
    chunkRow0(c, row0, col0);
    if (threadIdx.x == 0)
      mbar_expect_tx(&full[slot], kChunkBytes);
    __syncwarp();
    if (threadIdx.x < kChunkRows) {
      int r = threadIdx.x;
      const float *g = m + (row0 + r) * cols + col0;
      float *s = stage + size_t(slot) * (kChunkBytes / 4) + r * kTileCols;
      asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], "
                   "[%1], %2, [%3];" ::"r"(smem_addr(s)),
                   "l"(g), "r"(kTileCols * 4), "r"(smem_addr(&full[slot]))
                   : "memory");
    }
  };
  for (int64_t c = 0; c < ahead && c < nChunks; ++c)
    if (threadIdx.x < 32)
      issueLoad(c);
  for (int64_t c = 0; c < nChunks; ++c) {
    int slot = int(c % slots);
    // Refill: chunk c + ahead goes where chunk c - 1 was; its store must have been read.
    if (threadIdx.x < 32) {
      if (threadIdx.x < kChunkRows)
        asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
      __syncwarp();
      if (c + ahead < nChunks)
        issueLoad(c + ahead);
    }
    mbar_wait(&full[slot], uint32_t((c / slots) & 1));
    int64_t row0, col0;
    chunkRow0(c, row0, col0);
    float *s = stage + size_t(slot) * (kChunkBytes / 4);
    for (int i = threadIdx.x; i < kChunkRows * kTileCols / 4; i += kThreads) {
      int r = i / (kTileCols / 4), c4 = (i % (kTileCols / 4)) * 4;
      float4 v = reinterpret_cast<float4 *>(s)[i];
      v.x += addend(row0 + r, col0 + c4);
      v.y += addend(row0 + r, col0 + c4 + 1);
      v.z += addend(row0 + r, col0 + c4 + 2);
      v.w += addend(row0 + r, col0 + c4 + 3);
      reinterpret_cast<float4 *>(s)[i] = v;
    }
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    __syncthreads();
    if (threadIdx.x < kChunkRows) {
      int r = threadIdx.x;
      float *g = m + (row0 + r) * cols + col0;
      asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" ::"l"(g),
                   "r"(smem_addr(s + r * kTileCols)), "r"(kTileCols * 4)
                   : "memory");
      asm volatile("cp.async.bulk.commit_group;" ::: "memory");
    }
  }
  if (threadIdx.x < kChunkRows)
    asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
}

// red-v4 (vecRed = true) and ld-st: from registers, each warp a 1 KB row segment at a time.
template <bool vecRed>
__global__ void __launch_bounds__(kThreads, 1)
    reg_rmw_kernel(float *m, int64_t rows, int64_t cols) {
  int64_t tilesR = rows / kTileRows, tilesC = cols / kTileCols;
  int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (int64_t t = blockIdx.x; t < tilesR * tilesC; t += gridDim.x) {
    int64_t tr = t / tilesC, tc = t % tilesC;
    // 128 rows, 8 warps: 16 rows a warp, 8 rows in flight (two 16-byte lanes a row).
    for (int r0 = warp * 16; r0 < warp * 16 + 16; r0 += 8) {
      float4 old[8][2];
      int64_t col = tc * kTileCols + lane * 4;
      if (!vecRed) {
#pragma unroll
        for (int j = 0; j < 8; ++j)
#pragma unroll
          for (int h = 0; h < 2; ++h)
            old[j][h] = *reinterpret_cast<const float4 *>(
                m + (tr * kTileRows + r0 + j) * cols + col + h * 128);
      }
#pragma unroll
      for (int j = 0; j < 8; ++j)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          int64_t r = tr * kTileRows + r0 + j, c = col + h * 128;
          float4 a = make_float4(addend(r, c), addend(r, c + 1), addend(r, c + 2),
                                 addend(r, c + 3));
          float *g = m + r * cols + c;
          if (vecRed) {
            asm volatile("red.global.add.v4.f32 [%0], {%1, %2, %3, %4};" ::"l"(g), "f"(a.x),
                         "f"(a.y), "f"(a.z), "f"(a.w)
                         : "memory");
          } else {
            float4 o = old[j][h];
            *reinterpret_cast<float4 *>(g) =
                make_float4(o.x + a.x, o.y + a.y, o.z + a.z, o.w + a.w);
          }
        }
    }
  }
}

struct Variant {
  const char *name;
  bool rmw;  // reads and writes every byte (else writes only)
};

} // namespace

int main(int argc, char **argv) {
  int64_t rows = argc > 1 ? std::atoll(argv[1]) : 256000;
  int64_t cols = argc > 2 ? std::atoll(argv[2]) : 2304;
  int iters = argc > 3 ? std::atoi(argv[3]) : 5;
  int slotsArg = argc > 4 ? std::atoi(argv[4]) : 1;
  if (rows <= 0 || rows % kTileRows || cols <= 0 || cols % kTileCols) {
    std::fprintf(stderr, "rows must be a positive multiple of %d and cols of %d (got %lld, %lld)\n",
                 kTileRows, kTileCols, (long long)rows, (long long)cols);
    return 2;
  }
  if (iters < 1 || slotsArg < 1 || slotsArg > kMaxSlots) {
    std::fprintf(stderr, "iters >= 1 and staging_chunks in [1, %d] (got %d, %d)\n", kMaxSlots,
                 iters, slotsArg);
    return 2;
  }
  int dev = 0, sms = 0;
  CK(cudaGetDevice(&dev));
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, dev));
  size_t bytes = size_t(rows) * cols * 4;
  std::printf("%s, %d SMs; matrix %lld x %lld f32 (%.2f GB); tiles 128x256; staging %d x 32 KB\n",
              prop.name, sms, (long long)rows, (long long)cols, bytes / 1e9, slotsArg);
  float *m = nullptr;
  CK(cudaMalloc(&m, bytes));
  size_t smemBulk = size_t(kMaxSlots) * kChunkBytes + kMaxSlots * 8;
  CK(cudaFuncSetAttribute(bulk_store_kernel<true>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                          int(smemBulk)));
  CK(cudaFuncSetAttribute(bulk_store_kernel<false>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                          int(smemBulk)));
  CK(cudaFuncSetAttribute(bulk_ld_st_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                          int(smemBulk)));
  // dB's output map over the matrix (runtime/TensorMap.cpp's settings), and one unswizzled.
  void *encodeFn = nullptr;
  cudaDriverEntryPointQueryResult qres{};
  CK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &encodeFn, 12000, cudaEnableDefault,
                                      &qres));
  if (!encodeFn || qres != cudaDriverEntryPointSuccess) {
    std::fprintf(stderr, "cuTensorMapEncodeTiled not found in the driver\n");
    return 2;
  }
  auto encode = reinterpret_cast<decltype(&cuTensorMapEncodeTiled)>(encodeFn);
  CUtensorMap maps[2];
  for (int sw = 0; sw < 2; ++sw) {
    cuuint64_t dims[2] = {cuuint64_t(cols), cuuint64_t(rows)};
    cuuint64_t strides[1] = {cuuint64_t(cols) * 4};
    cuuint32_t box[2] = {32, 64}, estr[2] = {1, 1};
    CUresult r = encode(&maps[sw], CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 2, m, dims, strides, box,
                        estr, CU_TENSOR_MAP_INTERLEAVE_NONE,
                        sw ? CU_TENSOR_MAP_SWIZZLE_128B : CU_TENSOR_MAP_SWIZZLE_NONE,
                        CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS) {
      std::fprintf(stderr, "cuTensorMapEncodeTiled failed (%d)\n", int(r));
      return 2;
    }
  }
  size_t smemTensor = size_t(kMaxSlots) * kChunkBytes + 1024;
  CK(cudaFuncSetAttribute(tensor_red_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                          int(smemTensor)));
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));

  const Variant variants[] = {{"bulk-red", true},   {"bulk-st", false}, {"bulk-ld-st", true},
                              {"red-v4", true},     {"ld-st", true},    {"tensor-red", true},
                              {"tensor-red-ns", true}};
  int failed = 0;
  for (const Variant &v : variants) {
    std::string name = v.name;
    init_kernel<<<sms * 8, 256>>>(m, rows, cols);
    CK(cudaGetLastError());
    std::vector<float> ms;
    int adds = 0;
    for (int it = 0; it < iters + 1; ++it) {  // the first run warms up, untimed
      CK(cudaEventRecord(e0));
      if (name == "bulk-red")
        bulk_store_kernel<true><<<sms, kThreads, smemBulk>>>(m, rows, cols, slotsArg);
      else if (name == "bulk-st")
        bulk_store_kernel<false><<<sms, kThreads, smemBulk>>>(m, rows, cols, slotsArg);
      else if (name == "bulk-ld-st")
        bulk_ld_st_kernel<<<sms, kThreads, smemBulk>>>(
            m, rows, cols, std::max(1, std::min(slotsArg, kMaxSlots - 1)));
      else if (name == "tensor-red" || name == "tensor-red-ns")
        tensor_red_kernel<<<sms, kThreads, smemTensor>>>(maps[name == "tensor-red"], rows, cols,
                                                         slotsArg, name == "tensor-red");
      else if (name == "red-v4")
        reg_rmw_kernel<true><<<sms, kThreads>>>(m, rows, cols);
      else
        reg_rmw_kernel<false><<<sms, kThreads>>>(m, rows, cols);
      CK(cudaGetLastError());
      CK(cudaEventRecord(e1));
      CK(cudaEventSynchronize(e1));
      float t = 0;
      CK(cudaEventElapsedTime(&t, e0, e1));
      if (it > 0)
        ms.push_back(t);
      ++adds;
    }
    std::sort(ms.begin(), ms.end());
    float med = ms[ms.size() / 2];
    double traffic = double(bytes) * (v.rmw ? 2 : 1);
    std::printf("%-11s median %8.3f ms (min %8.3f, max %8.3f)  %7.1f GB/s of DRAM traffic\n",
                v.name, med, ms.front(), ms.back(), traffic / (med * 1e-3) / 1e9);
    // Check a sample: initial + adds x addend for the RMW variants, addend for bulk-st.
    int bad = 0;
    for (int s = 0; s < 4096; ++s) {
      int64_t r = (int64_t(s) * 7919 + 13) % rows, c = (int64_t(s) * 104729 + 7) % cols;
      float got = 0;
      CK(cudaMemcpy(&got, m + r * cols + c, 4, cudaMemcpyDeviceToHost));
      float want = v.rmw ? initial(r, c) + float(adds) * addend(r, c) : addend(r, c);
      if (got != want && ++bad <= 3)
        std::printf("  MISMATCH %s at (%lld, %lld): %g, expected %g\n", v.name, (long long)r,
                    (long long)c, got, want);
    }
    if (bad)
      ++failed;
  }
  CK(cudaFree(m));
  std::printf(failed ? "FAILED: %d variant(s) wrong\n" : "all variants checked\n", failed);
  return failed ? 1 : 0;
}
