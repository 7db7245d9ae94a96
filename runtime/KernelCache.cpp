//===- KernelCache.cpp - Process-wide cache of compiled kernels ------------===//

#include "runtime/KernelCache.h"
#include "compiler/support/BuildId.h"
#include "compiler/support/Check.h"
#include "compiler/support/Knobs.h"
#include "compiler/support/ContentHash.h"

#include <fmt/format.h>

namespace lcejit::runtime {

using json = nlohmann::json;

namespace {

json ptxasToJson(const PtxasKernelInfo &k) {
  return json{{"kernel", k.kernel},
              {"arch", k.arch},
              {"registers", k.registers},
              {"barriers", k.barriers},
              {"shared_bytes", k.sharedBytes},
              {"const_bytes", k.constBytes},
              {"stack_frame_bytes", k.stackFrameBytes},
              {"spill_store_bytes", k.spillStoreBytes},
              {"spill_load_bytes", k.spillLoadBytes},
              {"ptxas_ms", k.ptxasMs},
              {"lines", k.lines}};
}

// Manifest fields are read defensively: DiskCache has already checked the key and the
// cubin, so a field of the wrong type only loses information, it never fails the load.
template <typename T> T field(const json &j, const char *name, T dflt) {
  auto it = j.find(name);
  if (it == j.end())
    return dflt;
  if constexpr (std::is_same_v<T, std::string>) {
    return it->is_string() ? it->get<std::string>() : dflt;
  } else {
    return it->is_number() ? it->get<T>() : dflt;
  }
}

std::vector<std::string> stringList(const json &j, const char *name) {
  std::vector<std::string> out;
  auto it = j.find(name);
  if (it != j.end() && it->is_array())
    for (const json &e : *it)
      if (e.is_string())
        out.push_back(e.get<std::string>());
  return out;
}

PtxasKernelInfo ptxasFromJson(const json &j) {
  PtxasKernelInfo k;
  k.kernel = field<std::string>(j, "kernel", "");
  k.arch = field<std::string>(j, "arch", "");
  k.registers = field<int32_t>(j, "registers", -1);
  k.barriers = field<int32_t>(j, "barriers", 0);
  k.sharedBytes = field<int64_t>(j, "shared_bytes", 0);
  k.constBytes = field<int64_t>(j, "const_bytes", 0);
  k.stackFrameBytes = field<int64_t>(j, "stack_frame_bytes", 0);
  k.spillStoreBytes = field<int64_t>(j, "spill_store_bytes", 0);
  k.spillLoadBytes = field<int64_t>(j, "spill_load_bytes", 0);
  k.ptxasMs = field<double>(j, "ptxas_ms", 0.0);
  k.lines = stringList(j, "lines");
  return k;
}

json manifestFor(const KernelRequest &req, const CompiledBinary &bin) {
  IncludedHeaders included = includedHeaders(req.source, knobs::cudaIncludeDirs());
  json ptxas = json::array();
  for (const PtxasKernelInfo &k : bin.kernels)
    ptxas.push_back(ptxasToJson(k));
  return json{{"label", req.label},
              {"bucket", req.bucket},
              {"arch", bin.arch},
              {"options", bin.options},
              {"nvrtc_version", bin.nvrtcVersion},
              {"nvrtc_full_version", nvrtcFullVersion()},
              {"build_id", std::string(buildId())},
              {"device_header_xxh128", req.deviceHeaderHash},
              {"included_headers", included.files},
              {"included_headers_xxh128", included.hash},
              {"source_xxh128", contentHashHex(req.source)},
              {"source_bytes", req.source.size()},
              {"ptx_bytes", bin.ptx.size()},
              {"compile_ms", bin.compileMs},
              {"ptxas", ptxas},
              {"log", bin.log}};
}

std::shared_ptr<const CompiledBinary> binaryFromDisk(const std::string &key, DiskEntry entry) {
  auto bin = std::make_shared<CompiledBinary>();
  const json &m = entry.manifest;
  bin->key = key;
  bin->cubin = std::move(entry.cubin);
  bin->arch = field<std::string>(m, "arch", "");
  bin->options = stringList(m, "options");
  bin->nvrtcVersion = field<std::string>(m, "nvrtc_version", "");
  bin->log = field<std::string>(m, "log", "");
  bin->compileMs = field<double>(m, "compile_ms", 0.0);
  if (auto it = m.find("ptxas"); it != m.end() && it->is_array())
    for (const json &k : *it)
      if (k.is_object())
        bin->kernels.push_back(ptxasFromJson(k));
  return bin;
}

} // namespace

const char *cacheOriginName(CacheOrigin origin) {
  switch (origin) {
  case CacheOrigin::Memory: return "memory";
  case CacheOrigin::Disk: return "disk";
  case CacheOrigin::Compiled: return "compiled";
  }
  return "?";
}

KernelCache::KernelCache() : KernelCache(Options{}) {}

namespace {
DiskCache::Limits limitsFromKnobs() {
  DiskCache::Limits l;
  l.maxBytes = knobs::cacheMaxMB() << 20;
  return l;
}
} // namespace

KernelCache::KernelCache(Options options) : options_(std::move(options)) { currentDisk(); }

std::shared_ptr<DiskCache> KernelCache::currentDisk() {
  std::lock_guard<std::mutex> lock(diskMu_);
  const int64_t gen = options_.diskDir ? 0 : knobs::generation();
  if (!disk_ || gen != diskGeneration_) {
    std::filesystem::path dir =
        options_.diskDir ? *options_.diskDir : std::filesystem::path(knobs::cacheDir());
    const DiskCache::Limits limits =
        options_.diskLimits ? *options_.diskLimits : limitsFromKnobs();
    if (!disk_ || disk_->root() != dir || disk_->limits().maxBytes != limits.maxBytes)
      disk_ = std::make_shared<DiskCache>(dir, limits);
    diskGeneration_ = gen;
  }
  return disk_;
}

KernelCache &KernelCache::global() {
  // Leaked on purpose: kernels may be requested from other static destructors.
  static KernelCache *cache = new KernelCache();
  return *cache;
}

CacheKeyInputs KernelCache::keyInputsFor(const KernelRequest &req) {
  CacheKeyInputs in;
  in.formatVersion = kDiskCacheFormatVersion;
  in.buildId = std::string(buildId());
  in.source = req.source;
  in.nvrtcVersion = nvrtcFullVersion();
  in.options = nvrtcOptions(req.arch, req.extraOptions);
  in.arch = req.arch;
  in.deviceHeaderHash = req.deviceHeaderHash;
  in.includeHash = includedHeaders(req.source, knobs::cudaIncludeDirs()).hash;
  return in;
}

std::string KernelCache::keyFor(const KernelRequest &req) { return cacheKey(keyInputsFor(req)); }

std::shared_ptr<KernelCache::Slot> KernelCache::slotFor(const std::string &key) {
  std::lock_guard<std::mutex> lock(mapMu_);
  std::shared_ptr<Slot> &slot = slots_[key];
  if (!slot)
    slot = std::make_shared<Slot>();
  return slot;
}

size_t KernelCache::memoryEntries() const {
  std::lock_guard<std::mutex> lock(mapMu_);
  size_t n = 0;
  for (const auto &[key, slot] : slots_) {
    std::lock_guard<std::mutex> slotLock(slot->mu);
    n += slot->binary != nullptr;
  }
  return n;
}

void KernelCache::clearMemory() {
  std::lock_guard<std::mutex> lock(mapMu_);
  slots_.clear();
}

std::shared_ptr<const CompiledBinary> KernelCache::compile(const KernelRequest &req,
                                                           const std::string &key,
                                                           const char *why) {
  if (knobs::assertNoCompile())
    LCEJIT_THROW(Cache,
                 "kernel '{}' (bucket {}, key {}, {}) must be compiled ({}), but "
                 "LCEJIT_ASSERT_NO_COMPILE=1 forbids compiling",
                 req.label, req.bucket, key, req.arch, why);
  NvrtcOutput out = compileCuda(NvrtcRequest{req.source, req.arch, req.extraOptions, req.label});
  ++compiles_;
  if (knobs::logEnabled(knobs::LogTopic::Compile))
    fmt::print(stderr, "lcejit: compile {} key={} bucket={} {:.1f} ms ({})\n", req.label,
               key.substr(0, 16), req.bucket, out.compileMs, why);
  auto bin = std::make_shared<CompiledBinary>();
  bin->key = key;
  bin->arch = out.arch;
  bin->cubin = std::move(out.cubin);
  bin->ptx = std::move(out.ptx);
  bin->log = std::move(out.log);
  bin->kernels = std::move(out.kernels);
  bin->options = std::move(out.options);
  bin->nvrtcVersion = std::move(out.nvrtcVersion);
  bin->compileMs = out.compileMs;
  return bin;
}

KernelLookup KernelCache::get(const KernelRequest &req) {
  const std::string key = keyFor(req);
  std::shared_ptr<Slot> slot = slotFor(key);
  std::lock_guard<std::mutex> lock(slot->mu);

  const bool always = knobs::alwaysCompile();
  const bool diskOn = knobs::cacheEnabled();
  if (!always && slot->binary)
    return {slot->binary, CacheOrigin::Memory};
  if (!always && diskOn) {
    if (std::optional<DiskEntry> entry = currentDisk()->load(key)) {
      slot->binary = binaryFromDisk(key, std::move(*entry));
      return {slot->binary, CacheOrigin::Disk};
    }
  }
  const char *why = always ? "always-compile" : diskOn ? "memory+disk miss" : "cache disabled";
  std::shared_ptr<const CompiledBinary> bin = compile(req, key, why);
  slot->binary = bin;
  if (diskOn)
    currentDisk()->store(key, bin->cubin, manifestFor(req, *bin)); // failure: warned, not fatal
  return {bin, CacheOrigin::Compiled};
}

} // namespace lcejit::runtime
