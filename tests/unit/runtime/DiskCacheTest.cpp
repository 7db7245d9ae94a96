//===- DiskCacheTest.cpp - On-disk cubin cache and its failure modes -------===//

#include "TestSupport.h"

#include "compiler/support/ContentHash.h"
#include "runtime/DiskCache.h"

#include <atomic>
#include <fcntl.h>
#include <fstream>
#include <map>
#include <set>
#include <sys/stat.h>
#include <ctime>
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

CacheKeyInputs keyInputs() {
  CacheKeyInputs in;
  in.formatVersion = kDiskCacheFormatVersion;
  in.buildId = "0.1.0-src.0123456789abcdef";
  in.source = "__global__ void k() {}";
  in.nvrtcVersion = "13.0 (V13.0.88, CL-36424714, NVVM 7.0.1; libnvrtc.so.13 109338064 bytes)";
  in.options = {"--gpu-architecture=sm_90a", "-std=c++17", "-I/usr/local/cuda/include"};
  in.arch = "sm_90a";
  in.deviceHeaderHash = std::string(32, 'd');
  in.includeHash = std::string(32, 'e');
  return in;
}

std::string someKey(const std::string &salt = "") {
  CacheKeyInputs in = keyInputs();
  in.source += salt;
  return cacheKey(in);
}

/// Sets a file's mtime to `secondsAgo` seconds before now.
void age(const fs::path &p, int64_t secondsAgo) {
  struct timespec times[2];
  ::clock_gettime(CLOCK_REALTIME, &times[0]);
  times[0].tv_sec -= secondsAgo;
  times[1] = times[0];
  ASSERT_EQ(::utimensat(AT_FDCWD, p.c_str(), times, 0), 0) << p;
}

/// Total bytes of the entries (cubins and manifests) under a cache root.
int64_t entryBytes(const fs::path &root) {
  int64_t total = 0;
  if (fs::exists(root))
    for (const auto &e : fs::recursive_directory_iterator(root))
      if (e.is_regular_file() &&
          (e.path().extension() == ".cubin" || e.path().extension() == ".json"))
        total += static_cast<int64_t>(e.file_size());
  return total;
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

/// Every component of the key, flipped one at a time (each a change that alters the
/// binary in real life), with its name.
std::vector<std::pair<std::string, CacheKeyInputs>> flippedKeyInputs() {
  std::vector<std::pair<std::string, CacheKeyInputs>> out;
  auto flip = [&](const std::string &what, auto &&change) {
    CacheKeyInputs in = keyInputs();
    change(in);
    out.emplace_back(what, in);
  };
  flip("format version", [](CacheKeyInputs &in) { in.formatVersion += 1; });
  flip("build id", [](CacheKeyInputs &in) { in.buildId = "0.1.0-src.0123456789abcdee"; });
  flip("source", [](CacheKeyInputs &in) { in.source += " "; });
  flip("NVRTC major.minor", [](CacheKeyInputs &in) { in.nvrtcVersion.replace(0, 4, "13.1"); });
  flip("NVRTC patch release", [](CacheKeyInputs &in) {
    in.nvrtcVersion.replace(in.nvrtcVersion.find("V13.0.88"), 8, "V13.0.89");
  });
  flip("NVRTC build", [](CacheKeyInputs &in) {
    in.nvrtcVersion.replace(in.nvrtcVersion.find("CL-36424714"), 11, "CL-36424715");
  });
  flip("libnvrtc file", [](CacheKeyInputs &in) {
    in.nvrtcVersion.replace(in.nvrtcVersion.find("109338064"), 9, "109338065");
  });
  for (size_t i = 0; i < keyInputs().options.size(); ++i) {
    flip("option " + std::to_string(i) + " changed",
         [i](CacheKeyInputs &in) { in.options[i] += "x"; });
    flip("option " + std::to_string(i) + " dropped",
         [i](CacheKeyInputs &in) { in.options.erase(in.options.begin() + long(i)); });
  }
  flip("option added", [](CacheKeyInputs &in) { in.options.push_back("-lineinfo"); });
  flip("option order", [](CacheKeyInputs &in) { std::swap(in.options[1], in.options[2]); });
  flip("arch", [](CacheKeyInputs &in) { in.arch = "sm_80"; });
  flip("device header hash", [](CacheKeyInputs &in) { in.deviceHeaderHash.back() = 'c'; });
  flip("no device header hash", [](CacheKeyInputs &in) { in.deviceHeaderHash.clear(); });
  flip("included header hash", [](CacheKeyInputs &in) { in.includeHash[0] = 'f'; });
  return out;
}

TEST(CacheKeyTest, DeterministicHexAndSensitiveToEveryField) {
  std::string base = cacheKey(keyInputs());
  EXPECT_TRUE(isValidCacheKey(base)) << base;
  EXPECT_EQ(base, cacheKey(keyInputs()));
  std::map<std::string, std::string> seen = {{base, "base"}};
  for (const auto &[what, in] : flippedKeyInputs()) {
    std::string k = cacheKey(in);
    auto [it, fresh] = seen.emplace(k, what);
    EXPECT_TRUE(fresh) << what << " gives the key of " << it->second;
  }
  EXPECT_GE(seen.size(), 20u);
}

TEST(CacheKeyTest, FlippingAnyComponentIsADiskMiss) {
  TempDir tmp;
  DiskCache c(tmp.path());
  std::vector<uint8_t> payload = payloadOf(1000, 4);
  ASSERT_TRUE(c.store(cacheKey(keyInputs()), payload, nlohmann::json::object()));
  ASSERT_TRUE(c.load(cacheKey(keyInputs())).has_value()) << "the unflipped key hits";
  for (const auto &[what, in] : flippedKeyInputs())
    EXPECT_FALSE(c.load(cacheKey(in)).has_value()) << what << " still hits the old entry";
  EXPECT_EQ(c.stats().corrupt, 0);
}

TEST(CacheKeyTest, FieldsAreFramed) {
  // Moving bytes between adjacent fields must not produce the same key.
  auto key = [](std::string build, std::string source, std::vector<std::string> options,
                std::string headers = "", std::string includes = "") {
    CacheKeyInputs in;
    in.buildId = build;
    in.source = source;
    in.nvrtcVersion = "13.0";
    in.options = options;
    in.arch = "sm_90a";
    in.deviceHeaderHash = headers;
    in.includeHash = includes;
    return cacheKey(in);
  };
  EXPECT_NE(key("ab", "c", {}), key("a", "bc", {}));
  EXPECT_NE(key("b", "s", {"ab", "c"}), key("b", "s", {"a", "bc"}));
  EXPECT_NE(key("b", "s", {"x", ""}), key("b", "s", {"x"}));
  EXPECT_NE(key("b", "s", {}, "h", ""), key("b", "s", {}, "", "h"));
}

TEST(CacheKeyTest, Validation) {
  EXPECT_TRUE(isValidCacheKey(std::string(32, 'a')));
  EXPECT_EQ(someKey().size(), 32u);
  EXPECT_TRUE(isValidCacheKey(someKey()));
  EXPECT_FALSE(isValidCacheKey(std::string(31, 'a')));
  EXPECT_FALSE(isValidCacheKey(std::string(33, 'a')));
  EXPECT_FALSE(isValidCacheKey(std::string(64, 'a'))); // a SHA-256 key of formats 1 and 2
  EXPECT_FALSE(isValidCacheKey(std::string(32, 'A')));
  EXPECT_FALSE(isValidCacheKey("../../etc/passwd" + std::string(16, '0')));
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
  EXPECT_NE(why.find("payload hash"), std::string::npos) << why;
}

TEST(CubinFileTest, OtherFormatVersionIsRejectedEvenWithAValidHeaderChecksum) {
  std::vector<uint8_t> file = encodeCubinFile(payloadOf(100, 3));
  // The next version, header checksum recomputed so only the version differs.
  const uint32_t other = kDiskCacheFormatVersion + 1;
  ASSERT_LT(other, 256u);
  file[8] = static_cast<uint8_t>(other);
  // The header checksum: the first 8 bytes of XXH3-128 of header bytes [0, 40), at 40.
  ContentHash::Digest h = contentHash(std::span<const uint8_t>(file.data(), 40));
  std::copy(h.begin(), h.begin() + 8, file.begin() + 40);
  std::string why;
  EXPECT_FALSE(decodeCubinFile(file, &why).has_value());
  EXPECT_NE(why.find("format version " + std::to_string(other)), std::string::npos) << why;
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
  EXPECT_EQ(e->manifest.at("cubin_xxh128"), contentHashHex(std::span<const uint8_t>(cubin)));
  EXPECT_TRUE(e->manifest.contains("created"));
  DiskCache::Stats s = c.stats();
  EXPECT_EQ(s.hits, 1);
  EXPECT_EQ(s.stores, 1);
  EXPECT_EQ(s.corrupt, 0);
}

TEST_F(DiskCacheTest, LayoutAndNoTemporariesLeft) {
  DiskCache c(tmp.path());
  storeOk(c);
  fs::path dir = tmp.path() / ("v" + std::to_string(kDiskCacheFormatVersion)) / key.substr(0, 2);
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

//===----------------------------------------------------------------------===//
// Memos ([Note: memos])
//===----------------------------------------------------------------------===//

TEST_F(DiskCacheTest, MemoRoundTripUnderItsIdentity) {
  const std::string id = "lib 13.0; /x/libnvrtc.so.13; size 5; ino 7";
  EXPECT_FALSE(loadMemo(tmp.path(), "nvrtc-version", id).has_value());
  ASSERT_TRUE(storeMemo(tmp.path(), "nvrtc-version", id, "13.0 (V13.0.88; lib 5 bytes)"));
  EXPECT_EQ(loadMemo(tmp.path(), "nvrtc-version", id), "13.0 (V13.0.88; lib 5 bytes)");
  const fs::path path = memoPath(tmp.path(), "nvrtc-version", id);
  EXPECT_EQ(path.parent_path(),
            tmp.path() / ("v" + std::to_string(kDiskCacheFormatVersion)) / "memo");
  EXPECT_EQ(path.filename().string(), "nvrtc-version-" + contentHashHex(id) + ".json");
  EXPECT_EQ(filesIn(path.parent_path()), std::vector<std::string>{path.filename().string()})
      << "no temporaries left";
  // Another identity, another name: misses. A store over it replaces the value.
  EXPECT_FALSE(loadMemo(tmp.path(), "nvrtc-version", id + " ").has_value());
  EXPECT_FALSE(loadMemo(tmp.path(), "other", id).has_value());
  ASSERT_TRUE(storeMemo(tmp.path(), "nvrtc-version", id, "second"));
  EXPECT_EQ(loadMemo(tmp.path(), "nvrtc-version", id), "second");
  // A sweep leaves memos alone (it only walks the entry directories).
  DiskCache c(tmp.path(), DiskCache::Limits{1, std::chrono::seconds(0)});
  storeOk(c);
  EXPECT_TRUE(fs::exists(path));
}

TEST_F(DiskCacheTest, MemoFilesThatDoNotMatchAreMisses) {
  const std::string id = "identity A";
  const fs::path path = memoPath(tmp.path(), "nvrtc-version", id);
  ASSERT_TRUE(storeMemo(tmp.path(), "nvrtc-version", id, "value"));
  auto rewrite = [&](const std::string &text) {
    writeBytes(path, std::vector<uint8_t>(text.begin(), text.end()));
  };
  // The file name is only a hash: the identity inside must be the request's.
  rewrite(R"({"name": "nvrtc-version", "identity": "identity B", "value": "value"})");
  EXPECT_FALSE(loadMemo(tmp.path(), "nvrtc-version", id).has_value());
  rewrite(R"({"name": "other", "identity": "identity A", "value": "value"})");
  EXPECT_FALSE(loadMemo(tmp.path(), "nvrtc-version", id).has_value());
  rewrite(R"({"name": "nvrtc-version", "identity": "identity A", "value": ""})");
  EXPECT_FALSE(loadMemo(tmp.path(), "nvrtc-version", id).has_value());
  rewrite(R"({"name": "nvrtc-version", "identity": "identity A", "value": 13})");
  EXPECT_FALSE(loadMemo(tmp.path(), "nvrtc-version", id).has_value());
  rewrite(R"({"name": "nvrtc-version", "identity": "identity A", "val)"); // truncated
  EXPECT_FALSE(loadMemo(tmp.path(), "nvrtc-version", id).has_value());
  rewrite("");
  EXPECT_FALSE(loadMemo(tmp.path(), "nvrtc-version", id).has_value());
  rewrite(std::string(kMemoMaxBytes + 1, ' '));
  EXPECT_FALSE(loadMemo(tmp.path(), "nvrtc-version", id).has_value());
  rewrite(R"({"name": "nvrtc-version", "identity": "identity A", "value": "v2"})");
  EXPECT_EQ(loadMemo(tmp.path(), "nvrtc-version", id), "v2") << "the same file, well formed";
}

TEST_F(DiskCacheTest, MemoStoreFailsQuietlyAndNamesAreChecked) {
  fs::path blocker = tmp.path() / "not-a-dir";
  writeBytes(blocker, {1, 2, 3});
  ::testing::internal::CaptureStderr();
  EXPECT_FALSE(storeMemo(blocker / "cache", "nvrtc-version", "id", "value"));
  EXPECT_FALSE(loadMemo(blocker / "cache", "nvrtc-version", "id").has_value());
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "") << "a memo is an optimization";
  EXPECT_FALSE(storeMemo(tmp.path(), "nvrtc-version", "id", std::string(kMemoMaxBytes, 'x')));
  std::string msg =
      expectError(ErrorKind::InvalidArgument, [&] { memoPath(tmp.path(), "../x", "id"); });
  EXPECT_NE(msg.find("memo name '../x'"), std::string::npos) << msg;
  msg = expectError(ErrorKind::InvalidArgument, [&] { memoPath(tmp.path(), "", "id"); });
  EXPECT_NE(msg.find("memo name ''"), std::string::npos) << msg;
  msg = expectError(ErrorKind::InvalidArgument,
                    [&] { storeMemo(tmp.path(), "nvrtc-version", "id", ""); });
  EXPECT_NE(msg.find("memo 'nvrtc-version': the value must not be empty"), std::string::npos)
      << msg;
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

//===----------------------------------------------------------------------===//
// Size cap (LRU eviction) and stale temporaries: [Note: eviction]
//===----------------------------------------------------------------------===//

struct DiskCacheEvictionTest : ::testing::Test {
  TempDir tmp;
  static constexpr size_t kCubinBytes = 10000;
  /// Room for about `entries` entries of kCubinBytes (manifests are ~300 bytes).
  static DiskCache::Limits capFor(int entries) {
    DiskCache::Limits l;
    l.maxBytes = entries * int64_t(kCubinBytes + kCubinHeaderBytes + 600);
    return l;
  }
  static std::string key(int i) { return someKey("entry " + std::to_string(i)); }
  static std::vector<uint8_t> cubinOf(int i) { return payloadOf(kCubinBytes, uint8_t(i)); }
  /// Stores entry i and makes it look last used `secondsAgo` seconds ago.
  void storeAged(DiskCache &c, int i, int64_t secondsAgo) {
    ASSERT_TRUE(c.store(key(i), cubinOf(i), nlohmann::json::object()));
    age(c.cubinPath(key(i)), secondsAgo);
    age(c.manifestPath(key(i)), secondsAgo);
  }
  bool present(DiskCache &c, int i) {
    return fs::exists(c.cubinPath(key(i))) || fs::exists(c.manifestPath(key(i)));
  }
};

TEST_F(DiskCacheEvictionTest, OverTheCapTheLeastRecentlyUsedEntriesGo) {
  DiskCache c(tmp.path(), capFor(3));
  storeAged(c, 0, 400);
  storeAged(c, 1, 300);
  storeAged(c, 2, 200);
  EXPECT_EQ(c.stats().evictions, 0) << "three entries fit";
  ASSERT_TRUE(c.store(key(3), cubinOf(3), nlohmann::json::object()));
  EXPECT_EQ(c.stats().evictions, 1);
  EXPECT_FALSE(present(c, 0)) << "the oldest goes, cubin and manifest";
  EXPECT_TRUE(present(c, 1) && present(c, 2) && present(c, 3));
  EXPECT_LE(entryBytes(tmp.path()), c.limits().maxBytes);
  EXPECT_FALSE(c.load(key(0)).has_value());
  EXPECT_EQ(c.stats().corrupt, 0) << "an evicted entry is a plain miss";
}

TEST_F(DiskCacheEvictionTest, AHitMakesAnEntryRecent) {
  DiskCache c(tmp.path(), capFor(3));
  storeAged(c, 0, 400);
  storeAged(c, 1, 300);
  storeAged(c, 2, 200);
  ASSERT_TRUE(c.load(key(0)).has_value()); // the oldest store, but used now
  ASSERT_TRUE(c.store(key(3), cubinOf(3), nlohmann::json::object()));
  EXPECT_TRUE(present(c, 0)) << "a hit must refresh the entry's recency";
  EXPECT_FALSE(present(c, 1)) << "the least recently used one goes instead";
  EXPECT_TRUE(present(c, 2) && present(c, 3));
}

TEST_F(DiskCacheEvictionTest, EvictsAsManyAsNeededButNeverTheEntryJustStored) {
  DiskCache c(tmp.path(), capFor(4));
  for (int i = 0; i < 4; ++i)
    storeAged(c, i, 100 * (4 - i));
  // An entry of five ordinary ones' size: everything else must go, and even alone it is
  // over the cap; it stays.
  DiskCache small(tmp.path(), capFor(1));
  std::vector<uint8_t> big = payloadOf(5 * kCubinBytes, 7);
  ASSERT_TRUE(small.store(key(9), big, nlohmann::json::object()));
  EXPECT_EQ(small.stats().evictions, 4);
  for (int i = 0; i < 4; ++i)
    EXPECT_FALSE(present(c, i)) << i;
  auto e = small.load(key(9));
  ASSERT_TRUE(e.has_value()) << "the entry just stored is never evicted";
  EXPECT_EQ(e->cubin, big);
}

TEST_F(DiskCacheEvictionTest, ZeroMeansNoCap) {
  DiskCache::Limits unlimited;
  unlimited.maxBytes = 0;
  DiskCache c(tmp.path(), unlimited);
  for (int i = 0; i < 20; ++i)
    ASSERT_TRUE(c.store(key(i), cubinOf(i), nlohmann::json::object()));
  EXPECT_EQ(c.stats().evictions, 0);
  for (int i = 0; i < 20; ++i)
    EXPECT_TRUE(present(c, i)) << i;
}

TEST_F(DiskCacheEvictionTest, OtherFormatVersionsCountAndAgeOut) {
  // An entry of an older format version (never read by this build; its name is a 64-digit
  // SHA-256 key, as formats 1 and 2 had) and a foreign file.
  fs::path old = tmp.path() / "v1" / "ab";
  fs::create_directories(old);
  fs::path oldCubin = old / (std::string(64, 'a') + ".cubin");
  fs::path oldManifest = old / (std::string(64, 'a') + ".json");
  writeBytes(oldCubin, payloadOf(3 * kCubinBytes, 1));
  writeBytes(oldManifest, {'{', '}'});
  age(oldCubin, 10000);
  fs::path foreign = old / "README";
  writeBytes(foreign, {'h', 'i'});
  DiskCache c(tmp.path(), capFor(2));
  ASSERT_TRUE(c.store(key(0), cubinOf(0), nlohmann::json::object()));
  EXPECT_FALSE(fs::exists(oldCubin)) << "the old version's entry counted and was evicted";
  EXPECT_FALSE(fs::exists(oldManifest));
  EXPECT_TRUE(fs::exists(foreign)) << "files that are not entries are left alone";
  EXPECT_TRUE(present(c, 0));
}

TEST_F(DiskCacheEvictionTest, StaleTemporariesAreRemovedFreshOnesKept) {
  DiskCache::Limits limits;
  limits.staleTempAge = std::chrono::seconds(60);
  DiskCache c(tmp.path(), limits);
  ASSERT_TRUE(c.store(key(0), cubinOf(0), nlohmann::json::object()));
  fs::path dir = c.cubinPath(key(0)).parent_path();
  // What a writer killed mid-write leaves behind (the uniqueTempName() pattern).
  fs::path stale = dir / ("." + key(0) + ".cubin.tmp.12345.0.00000000deadbeef");
  fs::path staleJson = dir / ("." + key(1) + ".json.tmp.12345.1.00000000deadbeef");
  fs::path fresh = dir / ("." + key(0) + ".cubin.tmp.12346.0.00000000feedbeef");
  writeBytes(stale, payloadOf(100, 1));
  writeBytes(staleJson, payloadOf(10, 1));
  writeBytes(fresh, payloadOf(100, 2));
  age(stale, 61);
  age(staleJson, 3600);
  age(fresh, 30); // a live writer's, younger than the limit
  ASSERT_TRUE(c.store(key(2), cubinOf(2), nlohmann::json::object()));
  // key(2) may live in another subdirectory: sweep covers every one.
  EXPECT_FALSE(fs::exists(stale));
  EXPECT_FALSE(fs::exists(staleJson));
  EXPECT_TRUE(fs::exists(fresh));
  EXPECT_EQ(c.stats().staleTemps, 2);
  EXPECT_TRUE(c.load(key(0)).has_value()) << "entries are untouched by the temp sweep";
  DiskCache::SweepResult r = c.sweep();
  EXPECT_EQ(r.staleTemps, 0);
  EXPECT_EQ(r.entries, 2);
  EXPECT_EQ(r.evicted, 0);
}

TEST_F(DiskCacheEvictionTest, AManifestWithoutItsCubinIsAStoreInProgressUntilStale) {
  // Two half-done stores (manifest renamed, cubin not yet): one young, one from a writer
  // that died long ago. Under pressure the young one must survive (its cubin is about to
  // arrive), the stale one goes.
  DiskCache::Limits unlimited;
  unlimited.maxBytes = 0;
  DiskCache setup(tmp.path(), unlimited);
  for (int i = 0; i < 3; ++i)
    storeAged(setup, i, 100);
  storeAged(setup, 3, 500);
  fs::remove(setup.cubinPath(key(0)));
  fs::remove(setup.cubinPath(key(1)));
  age(setup.manifestPath(key(0)), 30);
  age(setup.manifestPath(key(1)), 3600);
  DiskCache::Limits limits = capFor(1);
  limits.staleTempAge = std::chrono::seconds(60);
  DiskCache c(tmp.path(), limits);
  DiskCache::SweepResult r = c.sweep(key(3));
  EXPECT_EQ(r.orphans, 1);
  EXPECT_TRUE(fs::exists(c.manifestPath(key(0)))) << "young: a store in progress";
  EXPECT_FALSE(fs::exists(c.manifestPath(key(1)))) << "stale: a dead writer's";
  EXPECT_EQ(r.entries, 2) << "complete entries only";
  EXPECT_EQ(r.evicted, 1);
  EXPECT_FALSE(present(c, 2)) << "evicted: key(3) is kept even though it is older";
  EXPECT_TRUE(present(c, 3));
}

TEST_F(DiskCacheEvictionTest, DefaultLimits) {
  DiskCache c(tmp.path());
  EXPECT_EQ(c.limits().maxBytes, int64_t(1024) << 20);
  EXPECT_EQ(c.limits().staleTempAge, std::chrono::seconds(3600));
}

TEST_F(DiskCacheEvictionTest, ConcurrentProcessesUnderATinyCap) {
  // Four processes store and load distinct entries into one cache capped at about three
  // entries: every store succeeds, every hit is intact, no entry reads as corrupt, and
  // the cache ends within the cap plus the entries the last sweeps had to keep.
  fflush(nullptr);
  std::vector<pid_t> pids;
  for (int p = 0; p < 4; ++p) {
    pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      DiskCache c(tmp.path(), capFor(3));
      bool ok = true;
      for (int i = 0; i < 15; ++i) {
        int k = p * 100 + i;
        ok = c.store(key(k), cubinOf(k), nlohmann::json::object()) && ok;
        for (int j = std::max(0, i - 3); j <= i; ++j) {
          int kj = p * 100 + j;
          if (auto e = c.load(key(kj)); e && e->cubin != cubinOf(kj))
            ok = false;
        }
      }
      DiskCache::Stats st = c.stats();
      if (!ok || st.corrupt != 0 || st.storeFailures != 0)
        fprintf(stderr, "child %d: ok=%d corrupt=%lld store failures=%lld\n", p, int(ok),
                (long long)st.corrupt, (long long)st.storeFailures);
      _exit(ok && st.corrupt == 0 && st.storeFailures == 0 ? 0 : 1);
    }
    pids.push_back(pid);
  }
  for (pid_t pid : pids) {
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), 0);
  }
  DiskCache c(tmp.path(), capFor(3));
  DiskCache::SweepResult r = c.sweep();
  EXPECT_LE(r.bytesAfter, c.limits().maxBytes);
  EXPECT_LE(r.bytesBefore, capFor(3 + 4).maxBytes);
}

} // namespace
