//===- DiskCache.cpp - Content-addressed on-disk cubin cache ---------------===//

#include "runtime/DiskCache.h"
#include "compiler/support/Check.h"
#include "compiler/support/ContentHash.h"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <fcntl.h>
#include <map>
#include <random>
#include <sys/stat.h>
#include <unistd.h>

namespace lcejit::runtime {

namespace fs = std::filesystem;

namespace {

constexpr char kMagic[8] = {'L', 'C', 'E', 'J', 'I', 'T', 'C', 'B'};

void putLE(uint8_t *p, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i)
    p[i] = static_cast<uint8_t>(v >> (8 * i));
}

uint64_t getLE(const uint8_t *p, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i)
    v |= uint64_t(p[i]) << (8 * i);
  return v;
}

std::string errnoText(int err) { return std::strerror(err); }

/// Reads a whole file. Returns false if it does not exist or cannot be read.
bool readFile(const fs::path &path, std::vector<uint8_t> *out, int *err) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    *err = errno;
    return false;
  }
  out->clear();
  uint8_t buf[1 << 16];
  while (true) {
    ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0) {
      *err = errno;
      ::close(fd);
      return false;
    }
    if (n == 0)
      break;
    out->insert(out->end(), buf, buf + n);
  }
  ::close(fd);
  return true;
}

bool writeAll(int fd, const uint8_t *data, size_t size) {
  while (size > 0) {
    ssize_t n = ::write(fd, data, size);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      return false;
    data += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

/// A name no other thread or process uses: pid, a per-process counter, random bits.
std::string uniqueTempName(const std::string &finalName) {
  static std::atomic<uint64_t> counter{0};
  thread_local std::mt19937_64 rng{std::random_device{}()};
  return fmt::format(".{}.tmp.{}.{}.{:016x}", finalName, ::getpid(), counter.fetch_add(1), rng());
}

/// See [Note: atomic writes]. Returns "" on success, else the reason.
std::string writeFileAtomically(const fs::path &dir, const std::string &name,
                                std::span<const uint8_t> bytes) {
  fs::path tmp;
  int fd = -1;
  for (int attempt = 0; attempt < 8 && fd < 0; ++attempt) {
    tmp = dir / uniqueTempName(name);
    fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0 && errno != EEXIST)
      return fmt::format("cannot create {}: {}", tmp.string(), errnoText(errno));
  }
  if (fd < 0)
    return fmt::format("cannot create a unique temporary file in {}", dir.string());
  auto fail = [&](const std::string &what) {
    int err = errno; // before anything below can change it
    if (fd >= 0)
      ::close(fd);
    ::unlink(tmp.c_str());
    return fmt::format("{} {}: {}", what, tmp.string(), errnoText(err));
  };
  if (!writeAll(fd, bytes.data(), bytes.size()))
    return fail("cannot write");
  if (::fsync(fd) != 0)
    return fail("cannot fsync");
  int rc = ::close(fd);
  fd = -1;
  if (rc != 0)
    return fail("cannot close");
  fs::path final = dir / name;
  if (::rename(tmp.c_str(), final.c_str()) != 0)
    return fail("cannot rename to " + final.string() + " from");
  // Make the rename itself durable. Best effort: some file systems refuse fsync on dirs.
  if (int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC); dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
  return "";
}

std::string nowIso8601() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

} // namespace

//===----------------------------------------------------------------------===//
// Keys and the cubin file format
//===----------------------------------------------------------------------===//

std::string cacheKey(const CacheKeyInputs &in) {
  ContentHash h;
  auto field = [&](std::string_view name, std::string_view value) {
    h.update(fmt::format("{}:{}:", name, value.size()));
    h.update(value);
    h.update("\n");
  };
  field("format", std::to_string(in.formatVersion));
  field("build", in.buildId);
  field("source", in.source);
  field("nvrtc", in.nvrtcVersion);
  field("options", std::to_string(in.options.size()));
  for (const std::string &o : in.options)
    field("option", o);
  field("arch", in.arch);
  field("headers", in.deviceHeaderHash);
  field("includes", in.includeHash);
  return h.finishHex();
}

namespace {
bool isLowerHex(std::string_view s) {
  return std::all_of(s.begin(), s.end(),
                     [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}
} // namespace

bool isValidCacheKey(std::string_view key) {
  return key.size() == ContentHash::kHexDigits && isLowerHex(key);
}

std::vector<uint8_t> encodeCubinFile(std::span<const uint8_t> payload) {
  std::vector<uint8_t> file(kCubinHeaderBytes + payload.size());
  uint8_t *h = file.data();
  std::memcpy(h, kMagic, 8);
  putLE(h + 8, kDiskCacheFormatVersion, 4);
  putLE(h + 12, kCubinHeaderBytes, 4);
  putLE(h + 16, payload.size(), 8);
  ContentHash::Digest payloadHash = contentHash(payload);
  std::memcpy(h + 24, payloadHash.data(), 16);
  ContentHash::Digest headerHash = contentHash(std::span<const uint8_t>(h, 40));
  std::memcpy(h + 40, headerHash.data(), 8);
  if (!payload.empty())
    std::memcpy(h + kCubinHeaderBytes, payload.data(), payload.size());
  return file;
}

std::optional<std::vector<uint8_t>> decodeCubinFile(std::span<const uint8_t> file,
                                                    std::string *why) {
  auto reject = [&](std::string reason) -> std::optional<std::vector<uint8_t>> {
    if (why)
      *why = std::move(reason);
    return std::nullopt;
  };
  if (file.size() < kCubinHeaderBytes)
    return reject(fmt::format("file of {} bytes is shorter than the header", file.size()));
  const uint8_t *h = file.data();
  if (std::memcmp(h, kMagic, 8) != 0)
    return reject("bad magic");
  ContentHash::Digest headerHash = contentHash(std::span<const uint8_t>(h, 40));
  if (std::memcmp(h + 40, headerHash.data(), 8) != 0)
    return reject("header checksum mismatch");
  if (uint64_t v = getLE(h + 8, 4); v != kDiskCacheFormatVersion)
    return reject(fmt::format("format version {} (expected {})", v, kDiskCacheFormatVersion));
  if (uint64_t hs = getLE(h + 12, 4); hs != kCubinHeaderBytes)
    return reject(fmt::format("header size {}", hs));
  uint64_t size = getLE(h + 16, 8);
  if (size != file.size() - kCubinHeaderBytes)
    return reject(fmt::format("payload size {} but {} bytes follow the header (truncated?)",
                              size, file.size() - kCubinHeaderBytes));
  std::span<const uint8_t> payload = file.subspan(kCubinHeaderBytes);
  ContentHash::Digest payloadHash = contentHash(payload);
  if (std::memcmp(h + 24, payloadHash.data(), 16) != 0)
    return reject("payload hash (XXH3-128) mismatch");
  return std::vector<uint8_t>(payload.begin(), payload.end());
}

//===----------------------------------------------------------------------===//
// DiskCache
//===----------------------------------------------------------------------===//

DiskCache::DiskCache(fs::path root) : DiskCache(std::move(root), Limits{}) {}

DiskCache::DiskCache(fs::path root, Limits limits) : root_(std::move(root)), limits_(limits) {}

fs::path DiskCache::cubinPath(std::string_view key) const {
  LCEJIT_CHECK_ARG(isValidCacheKey(key), "cache key '{}' is not {} lowercase hex digits", key,
                   ContentHash::kHexDigits);
  return root_ / fmt::format("v{}", kDiskCacheFormatVersion) / std::string(key.substr(0, 2)) /
         (std::string(key) + ".cubin");
}

fs::path DiskCache::manifestPath(std::string_view key) const {
  fs::path p = cubinPath(key);
  p.replace_extension(".json");
  return p;
}

std::optional<DiskEntry> DiskCache::load(std::string_view key) {
  fs::path cubin = cubinPath(key), manifest = manifestPath(key);
  auto corrupt = [&](const std::string &why) -> std::optional<DiskEntry> {
    ++corrupt_;
    if (!warnedCorrupt_.exchange(true))
      fmt::print(stderr,
                 "lcejit: warning: ignoring bad kernel cache entry {}: {} (it will be "
                 "recompiled; further bad entries are not reported)\n",
                 cubin.string(), why);
    return std::nullopt;
  };
  std::vector<uint8_t> file;
  int err = 0;
  if (!readFile(cubin, &file, &err)) {
    if (err == ENOENT || err == ENOTDIR) {
      ++misses_;
      return std::nullopt;
    }
    return corrupt(fmt::format("cannot read: {}", errnoText(err)));
  }
  std::string why;
  std::optional<std::vector<uint8_t>> payload = decodeCubinFile(file, &why);
  if (!payload)
    return corrupt(why);

  std::vector<uint8_t> text;
  if (!readFile(manifest, &text, &err)) {
    // An eviction in another process between our two reads: the cubin is gone too. That
    // is an ordinary miss, not a bad entry.
    struct stat st;
    if (err == ENOENT && ::stat(cubin.c_str(), &st) != 0 && errno == ENOENT) {
      ++misses_;
      return std::nullopt;
    }
    return corrupt(fmt::format("manifest {}: {}", manifest.string(), errnoText(err)));
  }
  nlohmann::json m = nlohmann::json::parse(text.begin(), text.end(), nullptr, false);
  if (m.is_discarded() || !m.is_object())
    return corrupt("manifest is not a JSON object");
  auto field = [&](const char *name) {
    auto it = m.find(name);
    return it != m.end() && it->is_string() ? it->get<std::string>() : std::string();
  };
  if (field("key") != key)
    return corrupt("manifest names another key");
  if (field("cubin_xxh128") != contentHashHex(*payload))
    return corrupt("manifest describes another cubin");
  ++hits_;
  // Recency for eviction ([Note: eviction]). Best effort: a read-only cache keeps the
  // store time, and a concurrent eviction may already have removed the file.
  ::utimensat(AT_FDCWD, cubin.c_str(), nullptr, 0);
  return DiskEntry{std::move(*payload), std::move(m)};
}

bool DiskCache::store(std::string_view key, std::span<const uint8_t> cubin,
                      nlohmann::json manifest) {
  fs::path dir = cubinPath(key).parent_path();
  auto failed = [&](const std::string &why) {
    ++storeFailures_;
    if (!warnedWrite_.exchange(true))
      fmt::print(stderr,
                 "lcejit: warning: cannot write the kernel cache under {}: {} (continuing "
                 "without the disk cache; set LCEJIT_CACHE_DIR or LCEJIT_CACHE=0)\n",
                 root_.string(), why);
    return false;
  };
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec)
    return failed(fmt::format("cannot create {}: {}", dir.string(), ec.message()));

  if (!manifest.is_object())
    manifest = nlohmann::json::object();
  manifest["key"] = std::string(key);
  manifest["format_version"] = kDiskCacheFormatVersion;
  manifest["cubin_bytes"] = cubin.size();
  manifest["cubin_xxh128"] = contentHashHex(cubin);
  manifest["created"] = nowIso8601();
  std::string text = manifest.dump(2) + "\n";
  std::string k(key);
  if (std::string err = writeFileAtomically(
          dir, k + ".json",
          std::span<const uint8_t>(reinterpret_cast<const uint8_t *>(text.data()), text.size()));
      !err.empty())
    return failed(err);
  if (std::string err = writeFileAtomically(dir, k + ".cubin", encodeCubinFile(cubin));
      !err.empty())
    return failed(err);
  ++stores_;
  sweep(key);
  return true;
}

namespace {

bool isTemporaryName(const std::string &name) {
  return name.size() > 1 && name[0] == '.' && name.find(".tmp.") != std::string::npos;
}

bool isVersionDirName(const std::string &name) {
  return name.size() >= 2 && name[0] == 'v' &&
         std::all_of(name.begin() + 1, name.end(), [](char c) { return c >= '0' && c <= '9'; });
}

/// A key of any format version: 32 hex digits (XXH3-128, format 3 on), or 64 (SHA-256,
/// formats 1 and 2), so old entries are swept too.
bool isEntryName(std::string_view key) {
  return (key.size() == ContentHash::kHexDigits || key.size() == 64) && isLowerHex(key);
}

int64_t mtimeNs(const struct stat &st) {
  return int64_t(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
}

/// One entry found by a sweep: a cubin and/or a manifest of one key in one version dir.
struct SweptEntry {
  fs::path dir;
  std::string key;
  int64_t bytes = 0;
  int64_t cubinMtime = -1, manifestMtime = -1;
  bool keep = false; ///< the entry just stored
  int64_t recency() const { return cubinMtime >= 0 ? cubinMtime : manifestMtime; }
};

} // namespace

DiskCache::SweepResult DiskCache::sweep(std::string_view keep) {
  SweepResult r;
  const std::string current = fmt::format("v{}", kDiskCacheFormatVersion);
  const int64_t nowNs = std::chrono::duration_cast<std::chrono::nanoseconds>(
                            std::chrono::system_clock::now().time_since_epoch())
                            .count();
  const int64_t staleNs =
      std::chrono::duration_cast<std::chrono::nanoseconds>(limits_.staleTempAge).count();
  std::map<std::pair<std::string, std::string>, SweptEntry> entries; // (dir, key)
  std::error_code ec;
  // Every step tolerates a directory or file vanishing under it (other processes sweep).
  for (fs::directory_iterator v(root_, ec), end; !ec && v != end; v.increment(ec)) {
    std::string vname = v->path().filename().string();
    if (!isVersionDirName(vname))
      continue;
    std::error_code ec2;
    for (fs::directory_iterator sub(v->path(), ec2); !ec2 && sub != end; sub.increment(ec2)) {
      if (sub->path().filename().string().size() != 2)
        continue;
      std::error_code ec3;
      for (fs::directory_iterator f(sub->path(), ec3); !ec3 && f != end; f.increment(ec3)) {
        const fs::path &path = f->path();
        std::string name = path.filename().string();
        struct stat st;
        if (::lstat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode))
          continue;
        if (isTemporaryName(name)) {
          if (nowNs - mtimeNs(st) > staleNs && ::unlink(path.c_str()) == 0)
            ++r.staleTemps;
          continue;
        }
        std::string ext = path.extension().string();
        std::string key = path.stem().string();
        if ((ext != ".cubin" && ext != ".json") || !isEntryName(key))
          continue; // not ours: left alone
        SweptEntry &e = entries[{sub->path().string(), key}];
        e.dir = sub->path();
        e.key = key;
        e.bytes += st.st_size;
        (ext == ".cubin" ? e.cubinMtime : e.manifestMtime) = mtimeNs(st);
        e.keep = e.keep || (vname == current && key == keep);
      }
    }
  }
  std::vector<const SweptEntry *> order;
  for (const auto &[id, e] : entries) {
    if (e.cubinMtime < 0) {
      // A manifest without its cubin: a store in progress (the manifest is renamed first)
      // unless it is stale. Evicting one mid-store would leave that store's cubin without
      // a manifest, so only stale ones go (a store that died between its two renames).
      if (nowNs - e.manifestMtime > staleNs &&
          ::unlink((e.dir / (e.key + ".json")).c_str()) == 0)
        ++r.orphans;
      continue;
    }
    ++r.entries;
    r.bytesBefore += e.bytes;
    order.push_back(&e);
  }
  r.bytesAfter = r.bytesBefore;
  if (limits_.maxBytes > 0 && r.bytesAfter > limits_.maxBytes) {
    std::stable_sort(order.begin(), order.end(), [](const SweptEntry *a, const SweptEntry *b) {
      return a->recency() < b->recency();
    });
    for (const SweptEntry *e : order) {
      if (r.bytesAfter <= limits_.maxBytes)
        break;
      if (e->keep)
        continue; // never the entry just stored
      // The cubin first: without it the entry is a plain miss for every reader.
      ::unlink((e->dir / (e->key + ".cubin")).c_str());
      ::unlink((e->dir / (e->key + ".json")).c_str());
      r.bytesAfter -= e->bytes;
      ++r.evicted;
    }
  }
  evictions_ += r.evicted;
  staleTemps_ += r.staleTemps;
  return r;
}

DiskCache::Stats DiskCache::stats() const {
  return Stats{hits_.load(),         misses_.load(),    corrupt_.load(), stores_.load(),
               storeFailures_.load(), evictions_.load(), staleTemps_.load()};
}

//===----------------------------------------------------------------------===//
// Memos ([Note: memos] in DiskCache.h)
//===----------------------------------------------------------------------===//

namespace {

/// A memo's name: lowercase letters, digits and '-' (it is part of a file name).
bool isMemoName(std::string_view name) {
  return !name.empty() && name.size() <= 32 &&
         std::all_of(name.begin(), name.end(), [](char c) {
           return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-';
         });
}

} // namespace

std::filesystem::path memoPath(const std::filesystem::path &root, std::string_view name,
                               std::string_view identity) {
  LCEJIT_CHECK_ARG(isMemoName(name),
                   "memo name '{}' must be 1 to 32 of [a-z0-9-] (it names a file)", name);
  return root / fmt::format("v{}", kDiskCacheFormatVersion) / "memo" /
         fmt::format("{}-{}.json", name, contentHashHex(identity));
}

std::optional<std::string> loadMemo(const std::filesystem::path &root, std::string_view name,
                                    std::string_view identity) {
  const fs::path path = memoPath(root, name, identity);
  std::vector<uint8_t> bytes;
  int err = 0;
  if (!readFile(path, &bytes, &err) || bytes.size() > kMemoMaxBytes)
    return std::nullopt;
  nlohmann::json j = nlohmann::json::parse(bytes.begin(), bytes.end(), nullptr,
                                           /*allow_exceptions=*/false);
  if (!j.is_object())
    return std::nullopt;
  auto text = [&](const char *field) -> const std::string * {
    auto it = j.find(field);
    return it != j.end() && it->is_string() ? it->get_ptr<const std::string *>() : nullptr;
  };
  const std::string *n = text("name"), *id = text("identity"), *value = text("value");
  // The file name is a hash of the identity: the identity itself must match, byte for byte.
  if (!n || !id || !value || *n != name || *id != identity || value->empty())
    return std::nullopt;
  return *value;
}

bool storeMemo(const std::filesystem::path &root, std::string_view name,
               std::string_view identity, std::string_view value) {
  const fs::path path = memoPath(root, name, identity);
  LCEJIT_CHECK_ARG(!value.empty(), "memo '{}': the value must not be empty", name);
  std::string text = nlohmann::json{{"name", std::string(name)},
                                    {"identity", std::string(identity)},
                                    {"value", std::string(value)},
                                    {"created", nowIso8601()}}
                         .dump(2) +
                     "\n";
  if (text.size() > kMemoMaxBytes)
    return false;
  std::error_code ec;
  fs::create_directories(path.parent_path(), ec);
  if (ec)
    return false;
  return writeFileAtomically(path.parent_path(), path.filename().string(),
                             std::span<const uint8_t>(
                                 reinterpret_cast<const uint8_t *>(text.data()), text.size()))
      .empty();
}

} // namespace lcejit::runtime
