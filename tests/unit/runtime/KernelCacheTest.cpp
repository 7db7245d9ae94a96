//===- KernelCacheTest.cpp - Memory + disk + NVRTC kernel cache ------------===//

#include "TestSupport.h"

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

} // namespace
