//===- DiskCache.h - Content-addressed on-disk cubin cache -----------------===//
//
// Layout under the root (LCEJIT_CACHE_DIR):
//
//   <root>/v1/<key[0:2]>/<key>.cubin   header + cubin payload
//   <root>/v1/<key[0:2]>/<key>.json    manifest: key, arch, options, NVRTC version,
//                                      source sha, sizes, creation time, ptxas info, log
//
// [Note: cache keys] The key is the SHA-256 of everything that changes the binary: the
// cache format version, lcejit's build id, the CUDA source, the NVRTC version, the full
// NVRTC option list (which includes the arch and the include dirs) and the arch. Each
// field is framed with its name and length, so no two different field lists hash the
// same bytes. It deliberately does not contain N or the bucket: the source is what the
// bucket changes, so two buckets that produce the same source share one cubin.
//
// [Note: atomic writes] Every file is written to a unique temporary name in its final
// directory (O_EXCL), fsync'd, then rename(2)'d over the final name, and the directory
// is fsync'd. Readers see either no file or a complete one, and concurrent writers of
// the same key (threads or processes) each rename a complete file: the last one wins.
// The manifest is renamed first and the cubin last, so the cubin is the commit point.
//
// [Note: failure policy] A load never throws and never crashes on bad data. An entry
// whose cubin header is wrong (magic, version, sizes, header checksum), whose payload
// does not match the SHA-256 in the header, whose manifest is missing or unparsable or
// names another key or payload, is a miss; the caller recompiles and stores over it.
// Bad entries are not deleted (a concurrent writer may be replacing them this instant).
// A store that cannot write (unwritable or missing-and-uncreatable directory, full disk)
// returns false and warns once per DiskCache on stderr; the process continues with the
// in-memory cache.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <nlohmann/json.hpp>

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace lcejit::runtime {

/// Bump when the file format or the key material changes: old entries then live in
/// another directory (v1, v2, ...) and are never read.
inline constexpr uint32_t kDiskCacheFormatVersion = 1;

/// The disk key: 64 lowercase hex digits. See [Note: cache keys].
std::string cacheKey(uint32_t formatVersion, std::string_view buildId, std::string_view source,
                     std::string_view nvrtcVersion, const std::vector<std::string> &options,
                     std::string_view arch);

/// True for 64 lowercase hex digits.
bool isValidCacheKey(std::string_view key);

/// The cubin file: a 64-byte header, then the payload.
///   0  magic "LCEJITCB"    8  u32 format version   12 u32 header size (64)
///   16 u64 payload size   24  SHA-256 of payload (32 bytes)
///   56 first 8 bytes of SHA-256 of header bytes [0, 56)
/// All integers little-endian.
inline constexpr size_t kCubinHeaderBytes = 64;
std::vector<uint8_t> encodeCubinFile(std::span<const uint8_t> payload);
/// The payload, or std::nullopt with the reason in *why.
std::optional<std::vector<uint8_t>> decodeCubinFile(std::span<const uint8_t> file,
                                                    std::string *why = nullptr);

struct DiskEntry {
  std::vector<uint8_t> cubin;
  nlohmann::json manifest;
};

class DiskCache {
public:
  /// `root` is the cache directory (LCEJIT_CACHE_DIR); nothing is created until a store.
  explicit DiskCache(std::filesystem::path root);

  const std::filesystem::path &root() const { return root_; }
  std::filesystem::path cubinPath(std::string_view key) const;
  std::filesystem::path manifestPath(std::string_view key) const;

  /// The entry, or std::nullopt on a miss (absent, corrupt or unreadable entry).
  /// Throws Error(InvalidArgument) only for a malformed key.
  std::optional<DiskEntry> load(std::string_view key);

  /// Writes the entry atomically. `manifest` (an object) gets the fields key,
  /// format_version, cubin_bytes, cubin_sha256 and created added. Returns false when the
  /// entry could not be written (warned once per DiskCache). Thread- and process-safe.
  bool store(std::string_view key, std::span<const uint8_t> cubin, nlohmann::json manifest);

  struct Stats {
    int64_t hits = 0;
    int64_t misses = 0;  ///< absent entries
    int64_t corrupt = 0; ///< entries present but rejected
    int64_t stores = 0;
    int64_t storeFailures = 0;
  };
  Stats stats() const;

private:
  std::filesystem::path root_;
  std::atomic<int64_t> hits_{0}, misses_{0}, corrupt_{0}, stores_{0}, storeFailures_{0};
  std::atomic<bool> warnedWrite_{false}, warnedCorrupt_{false};
};

} // namespace lcejit::runtime
