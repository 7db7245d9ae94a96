//===- KernelCache.h - Process-wide cache of compiled kernels --------------===//
//
// get(request) returns the cubin for a CUDA source and arch, looking in this order:
//   1. memory: a map from the disk key to the compiled binary;
//   2. disk:   DiskCache under LCEJIT_CACHE_DIR (skipped when LCEJIT_CACHE=0);
//   3. NVRTC:  compileCuda(), then stored in memory and on disk.
//
// Both levels use the disk key, keyFor(): see [Note: cache keys] in DiskCache.h for what
// it covers. The disk level is capped by LCEJIT_CACHE_MAX_MB ([Note: eviction]).
//
// [Note: compile counting] compileCount() counts real NVRTC compiles only (a memory or
// disk hit is not a compile); tests assert on it ("same bucket -> 1 compile, warm disk in
// a fresh process -> 0"). LCEJIT_ALWAYS_COMPILE=1 compiles even on a hit, and that
// compile counts. LCEJIT_ASSERT_NO_COMPILE=1 turns every compile that would happen into
// Error(Cache) naming the label, the bucket, the key and the reason. With
// LCEJIT_LOG=compile each compile prints exactly one line to stderr:
//
//   lcejit: compile <label> key=<first 16 hex> bucket=<bucket> <ms> ms (<why>)
//
// where <why> is "memory+disk miss", "always-compile" or "cache disabled".
//
// [Note: concurrency] get() is thread-safe. Requests for different keys compile in
// parallel; concurrent requests for the same key wait for one compile. A failed compile
// leaves no entry behind, so the next request tries again.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "runtime/DiskCache.h"
#include "runtime/Nvrtc.h"

#include <atomic>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

namespace lcejit::runtime {

struct KernelRequest {
  KernelRequest() = default;
  /// In field order (a constructor rather than an aggregate, so brace lists written
  /// before deviceHeaderHash existed stay complete).
  KernelRequest(std::string label, std::string bucket, std::string source,
                std::string arch = "sm_90a", std::vector<std::string> extraOptions = {},
                std::string deviceHeaderHash = {})
      : label(std::move(label)), bucket(std::move(bucket)), source(std::move(source)),
        arch(std::move(arch)), extraOptions(std::move(extraOptions)),
        deviceHeaderHash(std::move(deviceHeaderHash)) {}

  std::string label;  ///< program name, for logs and errors (e.g. "lce")
  std::string bucket; ///< shape bucket label, for logs and errors (e.g. "(256,1024]")
  std::string source; ///< complete CUDA C++ source
  std::string arch = "sm_90a";
  std::vector<std::string> extraOptions; ///< NVRTC options after the standard ones
  /// codegen::deviceHeaderHash() of the emitter that wrote `source` ("" for hand-written
  /// sources). Part of the disk key: see [Note: cache keys] in DiskCache.h.
  std::string deviceHeaderHash;
};

/// A compiled module image with what is known about it.
struct CompiledBinary {
  std::string key;
  std::string arch;
  std::vector<uint8_t> cubin;
  std::string ptx; ///< empty when the binary came from the disk cache
  std::string log; ///< the NVRTC log of the compile that produced the cubin
  std::vector<PtxasKernelInfo> kernels;
  std::vector<std::string> options;
  std::string nvrtcVersion;
  double compileMs = 0; ///< of the compile that produced the cubin
};

enum class CacheOrigin { Memory, Disk, Compiled };
const char *cacheOriginName(CacheOrigin origin);

struct KernelLookup {
  std::shared_ptr<const CompiledBinary> binary;
  CacheOrigin origin = CacheOrigin::Compiled;
};

class KernelCache {
public:
  struct Options {
    Options() = default;
    Options(std::optional<std::filesystem::path> diskDir,
            std::optional<DiskCache::Limits> diskLimits = std::nullopt)
        : diskDir(std::move(diskDir)), diskLimits(diskLimits) {}
    /// Disk cache root; default knobs::cacheDir() at construction.
    std::optional<std::filesystem::path> diskDir;
    /// Disk cache cap and sweep ages; default: maxBytes from knobs::cacheMaxMB()
    /// (LCEJIT_CACHE_MAX_MB) at construction, see [Note: eviction] in DiskCache.h.
    std::optional<DiskCache::Limits> diskLimits;
  };

  KernelCache();
  explicit KernelCache(Options options);
  KernelCache(const KernelCache &) = delete;
  KernelCache &operator=(const KernelCache &) = delete;

  /// The process-wide instance.
  static KernelCache &global();

  /// See the file comment. Throws Error(Nvrtc) on a failed compile and Error(Cache) under
  /// LCEJIT_ASSERT_NO_COMPILE=1.
  KernelLookup get(const KernelRequest &request);

  /// Everything the disk key of a request covers ([Note: cache keys] in DiskCache.h):
  /// the exact NVRTC option list, nvrtcFullVersion(), buildId(), the request's device
  /// header hash and the content hash of the headers its source includes through -I.
  static CacheKeyInputs keyInputsFor(const KernelRequest &request);
  /// cacheKey(keyInputsFor(request)).
  static std::string keyFor(const KernelRequest &request);

  /// Real NVRTC compiles done by this cache.
  int64_t compileCount() const { return compiles_.load(); }
  size_t memoryEntries() const;
  /// Forgets the in-memory entries (the disk cache is untouched).
  void clearMemory();
  /// The disk cache in use: the one of Options::diskDir, else the one of LCEJIT_CACHE_DIR
  /// as the knobs read it now (a knobs reload that changes it switches directories).
  DiskCache &disk() { return *currentDisk(); }

private:
  struct Slot {
    std::mutex mu; ///< held while this key is looked up on disk or compiled
    std::shared_ptr<const CompiledBinary> binary;
  };
  std::shared_ptr<Slot> slotFor(const std::string &key);
  std::shared_ptr<const CompiledBinary> compile(const KernelRequest &request,
                                                const std::string &key, const char *why);

  std::shared_ptr<DiskCache> currentDisk();

  Options options_;
  std::mutex diskMu_;
  std::shared_ptr<DiskCache> disk_;
  int64_t diskGeneration_ = -1; ///< knobs::generation() disk_ was opened for
  mutable std::mutex mapMu_;
  std::unordered_map<std::string, std::shared_ptr<Slot>> slots_;
  std::atomic<int64_t> compiles_{0};
};

} // namespace lcejit::runtime
