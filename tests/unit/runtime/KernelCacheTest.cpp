//===- KernelCacheTest.cpp - Memory + disk + NVRTC kernel cache ------------===//

#include "TestSupport.h"

#include "compiler/support/BuildId.h"
#include "runtime/KernelCache.h"

#include <fstream>
#include <regex>
#include <set>
#include <thread>

using namespace lcejit;
using namespace lcejit::runtime;
using lcejit::testing::expectError;
using lcejit::testing::ScopedEnv;
using lcejit::testing::TempDir;
namespace fs = std::filesystem;

namespace {

/// Knobs that change the cache's behaviour, reset for each test; disk under a temp dir.
struct KernelCacheTest : ::testing::Test {
  TempDir dir;
  ScopedEnv env{{"LCEJIT_CACHE", std::nullopt},
                {"LCEJIT_CACHE_MAX_MB", std::nullopt},
                {"LCEJIT_ALWAYS_COMPILE", std::nullopt},
                {"LCEJIT_ASSERT_NO_COMPILE", std::nullopt},
                {"LCEJIT_LOG", std::nullopt}};
  /// A source no earlier run compiled: see uniqueSourceTag().
  std::string nonce = lcejit::testing::uniqueSourceTag();
  KernelRequest request(const std::string &tag = "") const {
    KernelRequest r;
    r.label = "lce";
    r.bucket = "(256,1024]";
    r.arch = "sm_80";
    r.source = "extern \"C\" __global__ void k" + tag +
               "(float *p, long long n) {\n"
               "  long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;\n"
               "  if (i < n) p[i] = p[i] * 3.f + 1.f;\n}\n" + nonce;
    return r;
  }
  KernelCache::Options options() const { return {dir.path()}; }
  size_t diskEntries() const {
    size_t n = 0;
    if (fs::exists(dir.path()))
      for (const auto &e : fs::recursive_directory_iterator(dir.path()))
        n += e.path().extension() == ".cubin";
    return n;
  }
};

/// A cache without a fixed directory follows LCEJIT_CACHE_DIR as the knobs read it now: a
/// test (or a framework) that points it elsewhere and reloads the knobs gets the new
/// directory, the size cap too, and a fixed directory never moves.
TEST_F(KernelCacheTest, DiskDirectoryFollowsTheKnobsUnlessFixed) {
  TempDir a, b;
  env.set("LCEJIT_CACHE_DIR", a.path().string());
  KernelCache cache; // knob-based
  EXPECT_EQ(cache.disk().root(), a.path());
  env.set("LCEJIT_CACHE_DIR", b.path().string());
  EXPECT_EQ(cache.disk().root(), b.path());
  env.set("LCEJIT_CACHE_MAX_MB", "7");
  EXPECT_EQ(cache.disk().limits().maxBytes, int64_t(7) << 20);
  KernelCache fixed(options());
  env.set("LCEJIT_CACHE_DIR", a.path().string());
  EXPECT_EQ(fixed.disk().root(), dir.path());
  EXPECT_EQ(cache.disk().root(), a.path());
}

TEST_F(KernelCacheTest, CompileOnceThenMemoryHit) {
  KernelCache cache(options());
  KernelLookup first = cache.get(request());
  EXPECT_EQ(first.origin, CacheOrigin::Compiled);
  EXPECT_EQ(cache.compileCount(), 1);
  ASSERT_NE(first.binary, nullptr);
  EXPECT_FALSE(first.binary->cubin.empty());
  EXPECT_NE(first.binary->ptx.find(".target sm_80"), std::string::npos);
  EXPECT_EQ(first.binary->key, KernelCache::keyFor(request()));
  ASSERT_EQ(first.binary->kernels.size(), 1u) << "log: " << first.binary->log;
  EXPECT_EQ(first.binary->kernels[0].kernel, "k");
  EXPECT_GT(first.binary->kernels[0].registers, 0);
  KernelLookup second = cache.get(request());
  EXPECT_EQ(second.origin, CacheOrigin::Memory);
  EXPECT_EQ(second.binary, first.binary);
  EXPECT_EQ(cache.compileCount(), 1) << "a memory hit is not a compile";
  EXPECT_EQ(cache.memoryEntries(), 1u);
  EXPECT_EQ(diskEntries(), 1u);
}

TEST_F(KernelCacheTest, FreshCacheWithWarmDiskDoesNotCompile) {
  std::shared_ptr<const CompiledBinary> compiled;
  {
    KernelCache cache(options());
    compiled = cache.get(request()).binary;
  }
  KernelCache fresh(options());
  KernelLookup hit = fresh.get(request());
  EXPECT_EQ(hit.origin, CacheOrigin::Disk);
  EXPECT_EQ(fresh.compileCount(), 0);
  EXPECT_EQ(hit.binary->cubin, compiled->cubin);
  EXPECT_EQ(hit.binary->options, compiled->options);
  EXPECT_EQ(hit.binary->nvrtcVersion, compiled->nvrtcVersion);
  EXPECT_EQ(hit.binary->log, compiled->log);
  EXPECT_EQ(hit.binary->kernels, compiled->kernels) << "ptxas info comes back from the manifest";
  ASSERT_EQ(hit.binary->kernels.size(), 1u) << "log: " << compiled->log;
  EXPECT_GT(hit.binary->kernels[0].registers, 0);
  EXPECT_TRUE(hit.binary->ptx.empty()) << "PTX is not kept on disk";
  EXPECT_EQ(fresh.get(request()).origin, CacheOrigin::Memory);
}

TEST_F(KernelCacheTest, DifferentSourceArchOrOptionsAreDifferentKernels) {
  KernelCache cache(options());
  KernelRequest a = request("a"), b = request("b");
  KernelRequest sm90 = request("a");
  sm90.arch = "sm_90a";
  KernelRequest lineinfo = request("a");
  lineinfo.extraOptions = {"-lineinfo"};
  std::set<std::string> keys;
  for (const KernelRequest &r : {a, b, sm90, lineinfo}) {
    keys.insert(KernelCache::keyFor(r));
    EXPECT_EQ(cache.get(r).origin, CacheOrigin::Compiled);
  }
  EXPECT_EQ(keys.size(), 4u);
  EXPECT_EQ(cache.compileCount(), 4);
  // The bucket and label are not part of the key: same source, same binary.
  KernelRequest otherBucket = request("a");
  otherBucket.bucket = "(1024,4096]";
  otherBucket.label = "other";
  EXPECT_EQ(KernelCache::keyFor(otherBucket), KernelCache::keyFor(a));
  EXPECT_EQ(cache.get(otherBucket).origin, CacheOrigin::Memory);
}

TEST_F(KernelCacheTest, CacheDisabledSkipsDisk) {
  env.set("LCEJIT_CACHE", "0");
  {
    KernelCache cache(options());
    EXPECT_EQ(cache.get(request()).origin, CacheOrigin::Compiled);
    EXPECT_EQ(cache.get(request()).origin, CacheOrigin::Memory) << "memory cache stays on";
    EXPECT_EQ(cache.compileCount(), 1);
  }
  EXPECT_EQ(diskEntries(), 0u) << "nothing written";
  env.set("LCEJIT_CACHE", "1");
  { KernelCache(options()).get(request()); }
  ASSERT_EQ(diskEntries(), 1u);
  env.set("LCEJIT_CACHE", "0");
  KernelCache fresh(options());
  EXPECT_EQ(fresh.get(request()).origin, CacheOrigin::Compiled) << "disk not read either";
  EXPECT_EQ(fresh.compileCount(), 1);
}

TEST_F(KernelCacheTest, AssertNoCompileThrowsCacheErrorNamingKeyAndReason) {
  KernelCache warm(options());
  warm.get(request());
  env.set("LCEJIT_ASSERT_NO_COMPILE", "1");
  EXPECT_EQ(warm.get(request()).origin, CacheOrigin::Memory) << "hits are allowed";
  EXPECT_EQ(KernelCache(options()).get(request()).origin, CacheOrigin::Disk);

  KernelCache cache(options());
  KernelRequest cold = request("cold");
  std::string msg = expectError(ErrorKind::Cache, [&] { cache.get(cold); });
  EXPECT_NE(msg.find(KernelCache::keyFor(cold)), std::string::npos) << msg;
  EXPECT_NE(msg.find("'lce'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("(256,1024]"), std::string::npos) << msg;
  EXPECT_NE(msg.find("memory+disk miss"), std::string::npos) << msg;
  EXPECT_NE(msg.find("LCEJIT_ASSERT_NO_COMPILE"), std::string::npos) << msg;
  EXPECT_EQ(cache.compileCount(), 0);
  EXPECT_EQ(cache.memoryEntries(), 0u);
}

TEST_F(KernelCacheTest, AlwaysCompileCompilesOnHitsAndCounts) {
  KernelCache cache(options());
  cache.get(request());
  env.set("LCEJIT_ALWAYS_COMPILE", "1");
  EXPECT_EQ(cache.get(request()).origin, CacheOrigin::Compiled);
  EXPECT_EQ(cache.get(request()).origin, CacheOrigin::Compiled);
  EXPECT_EQ(cache.compileCount(), 3);
  KernelCache fresh(options());
  EXPECT_EQ(fresh.get(request()).origin, CacheOrigin::Compiled) << "warm disk is ignored too";
  EXPECT_EQ(fresh.compileCount(), 1);
  EXPECT_FALSE(fresh.get(request()).binary->ptx.empty()) << "dumps get the PTX on a hit";
  env.set("LCEJIT_ASSERT_NO_COMPILE", "1");
  std::string msg = expectError(ErrorKind::Cache, [&] { cache.get(request()); });
  EXPECT_NE(msg.find("always-compile"), std::string::npos) << msg;
}

TEST_F(KernelCacheTest, CompileLogLineFormat) {
  env.set("LCEJIT_LOG", "compile");
  KernelCache cache(options());
  ::testing::internal::CaptureStderr();
  cache.get(request());
  cache.get(request()); // memory hit: no line
  std::string err = ::testing::internal::GetCapturedStderr();
  std::string key = KernelCache::keyFor(request());
  std::regex line("lcejit: compile lce key=" + key.substr(0, 16) +
                  R"( bucket=\(256,1024\] [0-9]+\.[0-9] ms \(memory\+disk miss\)\n)");
  EXPECT_TRUE(std::regex_match(err, line)) << "got: [" << err << "]";

  env.set("LCEJIT_ALWAYS_COMPILE", "1");
  ::testing::internal::CaptureStderr();
  cache.get(request());
  err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("(always-compile)\n"), std::string::npos) << err;
  env.set("LCEJIT_ALWAYS_COMPILE", "0");

  env.set("LCEJIT_CACHE", "0");
  KernelCache noDisk(options());
  ::testing::internal::CaptureStderr();
  noDisk.get(request());
  err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("(cache disabled)\n"), std::string::npos) << err;

  env.set("LCEJIT_LOG", std::nullopt);
  KernelCache quiet(options());
  ::testing::internal::CaptureStderr();
  quiet.get(request("quiet"));
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");
}

TEST_F(KernelCacheTest, ConcurrentRequestsForOneKeyCompileOnce) {
  KernelCache cache(options());
  std::vector<std::thread> threads;
  std::vector<std::shared_ptr<const CompiledBinary>> got(8);
  for (size_t t = 0; t < got.size(); ++t)
    threads.emplace_back([&, t] { got[t] = cache.get(request()).binary; });
  for (std::thread &t : threads)
    t.join();
  EXPECT_EQ(cache.compileCount(), 1);
  for (const auto &b : got)
    EXPECT_EQ(b, got[0]);
}

TEST_F(KernelCacheTest, CorruptDiskEntryIsRecompiledAndRepaired) {
  { KernelCache(options()).get(request()); }
  KernelCache probe(options());
  fs::path cubin = probe.disk().cubinPath(KernelCache::keyFor(request()));
  fs::resize_file(cubin, fs::file_size(cubin) - 10);
  KernelCache fresh(options());
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(fresh.get(request()).origin, CacheOrigin::Compiled);
  ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(fresh.compileCount(), 1);
  KernelCache again(options());
  EXPECT_EQ(again.get(request()).origin, CacheOrigin::Disk);
}

TEST_F(KernelCacheTest, FailedCompileLeavesNothingBehind) {
  TempDir dumps;
  env.set("LCEJIT_DUMP_DIR", dumps.path().string());
  KernelCache cache(options());
  KernelRequest bad = request();
  bad.source = "extern \"C\" __global__ void k(float *p) { p[0] = ; }\n";
  expectError(ErrorKind::Nvrtc, [&] { cache.get(bad); });
  EXPECT_EQ(cache.compileCount(), 0);
  EXPECT_EQ(cache.memoryEntries(), 0u);
  EXPECT_EQ(diskEntries(), 0u);
  expectError(ErrorKind::Nvrtc, [&] { cache.get(bad); }) ;
}

TEST_F(KernelCacheTest, UnwritableDiskStillServesFromMemory) {
  fs::path blocker = dir.path() / "file";
  std::ofstream(blocker) << "x";
  KernelCache cache(KernelCache::Options{blocker / "cache"});
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(cache.get(request()).origin, CacheOrigin::Compiled);
  EXPECT_EQ(cache.get(request()).origin, CacheOrigin::Memory);
  std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("warning"), std::string::npos) << err;
  EXPECT_EQ(cache.compileCount(), 1);
}

//===----------------------------------------------------------------------===//
// What the key covers ([Note: cache keys] in DiskCache.h)
//===----------------------------------------------------------------------===//

TEST_F(KernelCacheTest, KeyInputsAreTheRealComponents) {
  KernelRequest r = request();
  r.deviceHeaderHash = std::string(32, '7');
  CacheKeyInputs in = KernelCache::keyInputsFor(r);
  EXPECT_EQ(in.formatVersion, kDiskCacheFormatVersion);
  EXPECT_EQ(in.buildId, buildId());
  EXPECT_EQ(in.source, r.source);
  EXPECT_EQ(in.nvrtcVersion, nvrtcFullVersion());
  EXPECT_EQ(in.options, nvrtcOptions(r.arch, r.extraOptions));
  EXPECT_EQ(in.arch, r.arch);
  EXPECT_EQ(in.deviceHeaderHash, r.deviceHeaderHash);
  EXPECT_EQ(in.includeHash, includedHeaders(r.source, knobs::cudaIncludeDirs()).hash);
  EXPECT_EQ(KernelCache::keyFor(r), cacheKey(in));
}

TEST_F(KernelCacheTest, OtherDeviceHeadersAreAMiss) {
  KernelRequest r = request();
  r.deviceHeaderHash = std::string(32, '1');
  { KernelCache(options()).get(r); }
  EXPECT_EQ(KernelCache(options()).get(r).origin, CacheOrigin::Disk);
  r.deviceHeaderHash = std::string(32, '2');
  KernelCache fresh(options());
  EXPECT_EQ(fresh.get(r).origin, CacheOrigin::Compiled);
  EXPECT_EQ(fresh.compileCount(), 1);
}

TEST_F(KernelCacheTest, EditedIncludedHeaderIsAMissAndChangesTheCubin) {
  // Same source, same options (the -I dirs are unchanged), other header bytes: the old
  // key would hand out a cubin built from the old header.
  TempDir inc;
  auto writeHeader = [&](const char *value) {
    fs::path p = inc.path() / "lcejit_test_scale.h";
    std::ofstream(p.string() + ".new") << "#define LCEJIT_TEST_SCALE " << value << "\n";
    fs::rename(p.string() + ".new", p);
  };
  std::string dirs = inc.path().string();
  for (const std::string &d : knobs::cudaIncludeDirs())
    dirs += ":" + d;
  env.set("LCEJIT_CUDA_INCLUDE", dirs);
  KernelRequest r = request();
  r.source = "#include <lcejit_test_scale.h>\n" + r.source;
  size_t at = r.source.find("3.f");
  ASSERT_NE(at, std::string::npos);
  r.source.replace(at, 3, "LCEJIT_TEST_SCALE");
  writeHeader("3.f");
  std::shared_ptr<const CompiledBinary> first;
  {
    KernelCache cache(options());
    first = cache.get(r).binary;
  }
  EXPECT_EQ(KernelCache(options()).get(r).origin, CacheOrigin::Disk);
  std::string oldKey = KernelCache::keyFor(r);
  writeHeader("5.f");
  EXPECT_NE(KernelCache::keyFor(r), oldKey);
  KernelCache fresh(options());
  KernelLookup again = fresh.get(r);
  EXPECT_EQ(again.origin, CacheOrigin::Compiled);
  EXPECT_NE(again.binary->cubin, first->cubin) << "the header did change the code";
  nlohmann::json m = fresh.disk().load(again.binary->key)->manifest;
  ASSERT_TRUE(m.at("included_headers").is_array());
  EXPECT_EQ(m.at("included_headers").at(0), (inc.path() / "lcejit_test_scale.h").string());
  EXPECT_EQ(m.at("nvrtc_full_version"), nvrtcFullVersion());
}

TEST_F(KernelCacheTest, DiskCapComesFromTheKnob) {
  EXPECT_EQ(KernelCache(options()).disk().limits().maxBytes, int64_t(1024) << 20);
  env.set("LCEJIT_CACHE_MAX_MB", "3");
  EXPECT_EQ(KernelCache(options()).disk().limits().maxBytes, int64_t(3) << 20);
  env.set("LCEJIT_CACHE_MAX_MB", "0");
  EXPECT_EQ(KernelCache(options()).disk().limits().maxBytes, 0) << "no cap";
  env.set("LCEJIT_CACHE_MAX_MB", "lots");
  std::string msg = expectError(ErrorKind::InvalidArgument, [&] { KernelCache c(options()); });
  EXPECT_NE(msg.find("LCEJIT_CACHE_MAX_MB='lots'"), std::string::npos) << msg;
}

TEST_F(KernelCacheTest, TinyCapEvictsOldKernels) {
  // Capped at one entry: each new kernel evicts the previous one from disk (memory keeps
  // them), and the evicted one recompiles in a fresh process.
  KernelCache::Options o = options();
  o.diskLimits = DiskCache::Limits{};
  o.diskLimits->maxBytes = 1;
  {
    KernelCache cache(o);
    cache.get(request("a"));
    cache.get(request("b"));
    EXPECT_EQ(cache.disk().stats().evictions, 1);
    EXPECT_EQ(diskEntries(), 1u);
  }
  KernelCache fresh(o);
  EXPECT_EQ(fresh.get(request("b")).origin, CacheOrigin::Disk);
  EXPECT_EQ(fresh.get(request("a")).origin, CacheOrigin::Compiled);
}

TEST(BuildIdTest, IsAContentHashNotATimeStamp) {
  std::string id(buildId());
  EXPECT_TRUE(std::regex_match(id, std::regex(R"(\d+\.\d+\.\d+-src\.[0-9a-f]{16})"))) << id;
  EXPECT_GT(buildIdFileCount(), 20) << "compiler/**, runtime/device/*.cuh, runtime caches";
}

} // namespace
