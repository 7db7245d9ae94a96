//===- DiskCacheTest.cpp - On-disk cubin cache and its failure modes -------===//

#include "TestSupport.h"

#include "compiler/support/Sha256.h"
#include "runtime/DiskCache.h"

#include <atomic>
#include <fstream>
#include <set>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

using namespace lcejit;
using namespace lcejit::runtime;
using lcejit::testing::expectError;
using lcejit::testing::TempDir;
namespace fs = std::filesystem;

namespace {

std::vector<uint8_t> payloadOf(size_t size, uint8_t seed) {
  std::vector<uint8_t> p(size);
  for (size_t i = 0; i < size; ++i)
    p[i] = static_cast<uint8_t>(seed + i * 31 + (i >> 8));
  return p;
}

std::string someKey(const std::string &salt = "") {
  return cacheKey(1, "build", "__global__ void k() {}" + salt, "13.0", {"-std=c++17"}, "sm_90a");
}

std::vector<uint8_t> readBytes(const fs::path &p) {
  std::ifstream in(p, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
}

void writeBytes(const fs::path &p, const std::vector<uint8_t> &bytes) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char *>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
}

std::vector<std::string> filesIn(const fs::path &dir) {
  std::vector<std::string> names;
  for (const auto &e : fs::directory_iterator(dir))
    names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

//===----------------------------------------------------------------------===//
// Keys
//===----------------------------------------------------------------------===//

TEST(CacheKeyTest, DeterministicHexAndSensitiveToEveryField) {
  const std::vector<std::string> opts = {"--gpu-architecture=sm_90a", "-std=c++17"};
  std::string base = cacheKey(1, "b1", "src", "13.0", opts, "sm_90a");
  EXPECT_TRUE(isValidCacheKey(base)) << base;
  EXPECT_EQ(base, cacheKey(1, "b1", "src", "13.0", opts, "sm_90a"));
  std::set<std::string> keys = {
      base,
      cacheKey(2, "b1", "src", "13.0", opts, "sm_90a"),
      cacheKey(1, "b2", "src", "13.0", opts, "sm_90a"),
      cacheKey(1, "b1", "src ", "13.0", opts, "sm_90a"),
      cacheKey(1, "b1", "src", "13.1", opts, "sm_90a"),
      cacheKey(1, "b1", "src", "13.0", {"--gpu-architecture=sm_90a"}, "sm_90a"),
      cacheKey(1, "b1", "src", "13.0", opts, "sm_80"),
  };
  EXPECT_EQ(keys.size(), 7u) << "a field change must change the key";
}

TEST(CacheKeyTest, FieldsAreFramed) {
  // Moving bytes between adjacent fields must not produce the same key.
  EXPECT_NE(cacheKey(1, "ab", "c", "13.0", {}, "sm_90a"),
            cacheKey(1, "a", "bc", "13.0", {}, "sm_90a"));
  EXPECT_NE(cacheKey(1, "b", "s", "13.0", {"ab", "c"}, "sm_90a"),
            cacheKey(1, "b", "s", "13.0", {"a", "bc"}, "sm_90a"));
  EXPECT_NE(cacheKey(1, "b", "s", "13.0", {"x", ""}, "sm_90a"),
            cacheKey(1, "b", "s", "13.0", {"x"}, "sm_90a"));
}

TEST(CacheKeyTest, Validation) {
  EXPECT_TRUE(isValidCacheKey(std::string(64, 'a')));
  EXPECT_FALSE(isValidCacheKey(std::string(63, 'a')));
  EXPECT_FALSE(isValidCacheKey(std::string(64, 'A')));
  EXPECT_FALSE(isValidCacheKey("../../etc/passwd" + std::string(48, '0')));
  TempDir tmp;
  DiskCache cache(tmp.path());
  std::string msg = expectError(ErrorKind::InvalidArgument, [&] { cache.load("../x"); });
  EXPECT_NE(msg.find("../x"), std::string::npos) << msg;
}

//===----------------------------------------------------------------------===//
// The cubin file format
//===----------------------------------------------------------------------===//

TEST(CubinFileTest, RoundTrip) {
  for (size_t size : {size_t(0), size_t(1), size_t(7328)}) {
    std::vector<uint8_t> payload = payloadOf(size, 5);
    std::vector<uint8_t> file = encodeCubinFile(payload);
    ASSERT_EQ(file.size(), kCubinHeaderBytes + size);
    EXPECT_EQ(std::string(file.begin(), file.begin() + 8), "LCEJITCB");
    std::string why;
    auto back = decodeCubinFile(file, &why);
    ASSERT_TRUE(back.has_value()) << why;
    EXPECT_EQ(*back, payload);
  }
}

TEST(CubinFileTest, EveryHeaderByteIsChecked) {
  std::vector<uint8_t> file = encodeCubinFile(payloadOf(1000, 1));
  for (size_t i = 0; i < kCubinHeaderBytes; ++i) {
    std::vector<uint8_t> bad = file;
    bad[i] ^= 0x40;
    std::string why;
    EXPECT_FALSE(decodeCubinFile(bad, &why).has_value()) << "header byte " << i;
    EXPECT_FALSE(why.empty());
  }
}

TEST(CubinFileTest, TruncationAndPayloadCorruption) {
  std::vector<uint8_t> file = encodeCubinFile(payloadOf(1000, 2));
  std::string why;
  for (size_t keep : {size_t(0), size_t(10), kCubinHeaderBytes, file.size() - 1}) {
    std::vector<uint8_t> cut(file.begin(), file.begin() + static_cast<long>(keep));
    EXPECT_FALSE(decodeCubinFile(cut, &why).has_value()) << keep;
  }
  std::vector<uint8_t> longer = file;
  longer.push_back(0);
  EXPECT_FALSE(decodeCubinFile(longer, &why).has_value());
  EXPECT_NE(why.find("truncated"), std::string::npos) << why;
  std::vector<uint8_t> flipped = file;
  flipped[kCubinHeaderBytes + 500] ^= 1;
  EXPECT_FALSE(decodeCubinFile(flipped, &why).has_value());
  EXPECT_NE(why.find("SHA-256"), std::string::npos) << why;
}

TEST(CubinFileTest, OtherFormatVersionIsRejectedEvenWithAValidHeaderChecksum) {
  std::vector<uint8_t> file = encodeCubinFile(payloadOf(100, 3));
  file[8] = 2; // version 2, header checksum recomputed so only the version differs
  Sha256::Digest h = sha256(std::span<const uint8_t>(file.data(), 56));
  std::copy(h.begin(), h.begin() + 8, file.begin() + 56);
  std::string why;
  EXPECT_FALSE(decodeCubinFile(file, &why).has_value());
  EXPECT_NE(why.find("format version 2"), std::string::npos) << why;
}

//===----------------------------------------------------------------------===//
// DiskCache
//===----------------------------------------------------------------------===//

struct DiskCacheTest : ::testing::Test {
  TempDir tmp;
  std::string key = someKey();
  std::vector<uint8_t> cubin = payloadOf(4096, 9);

  nlohmann::json manifest() const { return {{"arch", "sm_90a"}, {"label", "test"}}; }
  void storeOk(DiskCache &c) { ASSERT_TRUE(c.store(key, cubin, manifest())); }
  void expectMiss(DiskCache &c) {
    ::testing::internal::CaptureStderr();
    EXPECT_FALSE(c.load(key).has_value());
    ::testing::internal::GetCapturedStderr();
  }
};

TEST_F(DiskCacheTest, MissThenStoreThenHit) {
  DiskCache c(tmp.path());
  EXPECT_FALSE(c.load(key).has_value());
  EXPECT_EQ(c.stats().misses, 1);
  storeOk(c);
  std::optional<DiskEntry> e = c.load(key);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->cubin, cubin);
  EXPECT_EQ(e->manifest.at("arch"), "sm_90a");
  EXPECT_EQ(e->manifest.at("label"), "test");
  EXPECT_EQ(e->manifest.at("key"), key);
  EXPECT_EQ(e->manifest.at("cubin_bytes"), cubin.size());
  EXPECT_EQ(e->manifest.at("cubin_sha256"), sha256Hex(std::span<const uint8_t>(cubin)));
  EXPECT_TRUE(e->manifest.contains("created"));
  DiskCache::Stats s = c.stats();
  EXPECT_EQ(s.hits, 1);
  EXPECT_EQ(s.stores, 1);
  EXPECT_EQ(s.corrupt, 0);
}

TEST_F(DiskCacheTest, LayoutAndNoTemporariesLeft) {
  DiskCache c(tmp.path());
  storeOk(c);
  fs::path dir = tmp.path() / "v1" / key.substr(0, 2);
  EXPECT_EQ(c.cubinPath(key), dir / (key + ".cubin"));
  EXPECT_EQ(c.manifestPath(key), dir / (key + ".json"));
  EXPECT_EQ(filesIn(dir), (std::vector<std::string>{key + ".cubin", key + ".json"}));
  EXPECT_EQ(fs::file_size(c.cubinPath(key)), kCubinHeaderBytes + cubin.size());
}

TEST_F(DiskCacheTest, SecondInstanceReadsWarmCache) {
  {
    DiskCache writer(tmp.path());
    storeOk(writer);
  }
  DiskCache reader(tmp.path());
  auto e = reader.load(key);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->cubin, cubin);
}

TEST_F(DiskCacheTest, SecondProcessReadsWarmCache) {
  DiskCache writer(tmp.path());
  storeOk(writer);
  fflush(nullptr);
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    DiskCache reader(tmp.path());
    auto e = reader.load(key);
    _exit(e && e->cubin == cubin ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "the child process saw a miss or other bytes";
}

TEST_F(DiskCacheTest, TruncatedCubinIsAMissAndIsRepairedByTheNextStore) {
  DiskCache c(tmp.path());
  storeOk(c);
  std::vector<uint8_t> bytes = readBytes(c.cubinPath(key));
  bytes.resize(bytes.size() / 2);
  writeBytes(c.cubinPath(key), bytes);
  ::testing::internal::CaptureStderr();
  EXPECT_FALSE(c.load(key).has_value());
  std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("warning"), std::string::npos) << err;
  EXPECT_EQ(c.stats().corrupt, 1);
  storeOk(c);
  EXPECT_TRUE(c.load(key).has_value());
}

TEST_F(DiskCacheTest, EmptyCubinFileIsAMiss) {
  DiskCache c(tmp.path());
  storeOk(c);
  writeBytes(c.cubinPath(key), {});
  expectMiss(c);
}

TEST_F(DiskCacheTest, CorruptedPayloadByteIsAMiss) {
  DiskCache c(tmp.path());
  storeOk(c);
  std::vector<uint8_t> bytes = readBytes(c.cubinPath(key));
  bytes[kCubinHeaderBytes + 1234] ^= 0x01;
  writeBytes(c.cubinPath(key), bytes);
  expectMiss(c);
  EXPECT_EQ(c.stats().corrupt, 1);
}

TEST_F(DiskCacheTest, CorruptedHeaderIsAMiss) {
  DiskCache c(tmp.path());
  storeOk(c);
  std::vector<uint8_t> bytes = readBytes(c.cubinPath(key));
  bytes[20] ^= 0x01; // payload size field
  writeBytes(c.cubinPath(key), bytes);
  expectMiss(c);
}

TEST_F(DiskCacheTest, WrongMagicIsAMiss) {
  DiskCache c(tmp.path());
  storeOk(c);
  std::vector<uint8_t> bytes = readBytes(c.cubinPath(key));
  bytes[0] = 0x7f; // an ELF file where our header should be
  bytes[1] = 'E';
  writeBytes(c.cubinPath(key), bytes);
  expectMiss(c);
}

TEST_F(DiskCacheTest, BareCubinWithoutHeaderIsAMiss) {
  DiskCache c(tmp.path());
  storeOk(c);
  writeBytes(c.cubinPath(key), cubin);
  expectMiss(c);
}

TEST_F(DiskCacheTest, MissingManifestIsAMiss) {
  DiskCache c(tmp.path());
  storeOk(c);
  fs::remove(c.manifestPath(key));
  expectMiss(c);
  EXPECT_EQ(c.stats().corrupt, 1);
}

TEST_F(DiskCacheTest, GarbageManifestIsAMiss) {
  DiskCache c(tmp.path());
  storeOk(c);
  std::string junk = "{\"key\": \"abc\", truncated";
  writeBytes(c.manifestPath(key), std::vector<uint8_t>(junk.begin(), junk.end()));
  expectMiss(c);
}

TEST_F(DiskCacheTest, ManifestOfAnotherEntryIsAMiss) {
  DiskCache c(tmp.path());
  storeOk(c);
  std::string other = someKey("other");
  ASSERT_TRUE(c.store(other, payloadOf(100, 1), manifest()));
  // The other entry's manifest (names another key) next to our cubin.
  fs::copy_file(c.manifestPath(other), c.manifestPath(key),
                fs::copy_options::overwrite_existing);
  expectMiss(c);
  // A manifest with our key but describing other bytes.
  nlohmann::json m = nlohmann::json::parse(readBytes(c.manifestPath(other)));
  m["key"] = key;
  std::string text = m.dump();
  writeBytes(c.manifestPath(key), std::vector<uint8_t>(text.begin(), text.end()));
  expectMiss(c);
}

TEST_F(DiskCacheTest, UnwritableDirectoryWarnsOnceAndMisses) {
  // A regular file where a directory should be: creation fails even for root.
  fs::path blocker = tmp.path() / "not-a-dir";
  writeBytes(blocker, {1, 2, 3});
  DiskCache c(blocker / "cache");
  ::testing::internal::CaptureStderr();
  EXPECT_FALSE(c.store(key, cubin, manifest()));
  EXPECT_FALSE(c.store(key, cubin, manifest()));
  EXPECT_FALSE(c.load(key).has_value());
  std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("warning"), std::string::npos) << err;
  EXPECT_NE(err.find(blocker.string()), std::string::npos) << err;
  size_t first = err.find("warning");
  EXPECT_EQ(err.find("warning", first + 1), std::string::npos) << "warned twice: " << err;
  EXPECT_EQ(c.stats().storeFailures, 2);
}

TEST_F(DiskCacheTest, ReadOnlyEntryDirectoryFailsStoreGracefully) {
  if (::geteuid() == 0)
    GTEST_SKIP() << "running as root: permissions do not stop writes (covered by "
                    "UnwritableDirectoryWarnsOnceAndMisses)";
  DiskCache c(tmp.path());
  fs::path dir = c.cubinPath(key).parent_path();
  fs::create_directories(dir);
  fs::permissions(dir, fs::perms::owner_read | fs::perms::owner_exec);
  ::testing::internal::CaptureStderr();
  EXPECT_FALSE(c.store(key, cubin, manifest()));
  ::testing::internal::GetCapturedStderr();
  EXPECT_FALSE(c.load(key).has_value());
  fs::permissions(dir, fs::perms::owner_all);
}

TEST_F(DiskCacheTest, ConcurrentWritersAndReadersOfOneKey) {
  DiskCache c(tmp.path());
  std::atomic<int> wrongBytes{0}, failedStores{0};
  std::atomic<bool> done{false};
  std::vector<std::thread> threads;
  ::testing::internal::CaptureStderr();
  for (int t = 0; t < 6; ++t)
    threads.emplace_back([&] {
      for (int i = 0; i < 20; ++i)
        if (!c.store(key, cubin, manifest()))
          ++failedStores;
    });
  std::vector<std::thread> readers;
  for (int t = 0; t < 3; ++t)
    readers.emplace_back([&] {
      while (!done)
        if (auto e = c.load(key); e && e->cubin != cubin)
          ++wrongBytes;
    });
  for (std::thread &t : threads)
    t.join();
  done = true;
  for (std::thread &t : readers)
    t.join();
  ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(failedStores.load(), 0);
  EXPECT_EQ(wrongBytes.load(), 0);
  auto e = c.load(key);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->cubin, cubin);
  // Only the two final files remain: every temporary was renamed away.
  EXPECT_EQ(filesIn(c.cubinPath(key).parent_path()).size(), 2u);
}

TEST_F(DiskCacheTest, ConcurrentWritersWithDifferentBytesNeverYieldAMixedEntry) {
  // Writers disagreeing on the bytes (a nondeterministic compiler) may leave the
  // manifest of one next to the cubin of another: that must read as a miss, and any hit
  // must be exactly one writer's bytes.
  DiskCache c(tmp.path());
  std::vector<std::vector<uint8_t>> versions;
  for (uint8_t v = 0; v < 4; ++v)
    versions.push_back(payloadOf(3000 + v, v));
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  ::testing::internal::CaptureStderr();
  for (size_t t = 0; t < versions.size(); ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < 20; ++i) {
        c.store(key, versions[t], manifest());
        if (auto e = c.load(key);
            e && std::find(versions.begin(), versions.end(), e->cubin) == versions.end())
          ++wrong;
      }
    });
  for (std::thread &t : threads)
    t.join();
  ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(wrong.load(), 0);
}

TEST_F(DiskCacheTest, ConcurrentWriterProcesses) {
  fflush(nullptr);
  std::vector<pid_t> pids;
  for (int p = 0; p < 4; ++p) {
    pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      DiskCache c(tmp.path());
      bool ok = true;
      for (int i = 0; i < 25; ++i) {
        ok = c.store(key, cubin, manifest()) && ok;
        if (auto e = c.load(key); e && e->cubin != cubin)
          ok = false;
      }
      _exit(ok ? 0 : 1);
    }
    pids.push_back(pid);
  }
  for (pid_t pid : pids) {
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), 0);
  }
  DiskCache c(tmp.path());
  auto e = c.load(key);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->cubin, cubin);
  EXPECT_EQ(filesIn(c.cubinPath(key).parent_path()).size(), 2u);
}

} // namespace
