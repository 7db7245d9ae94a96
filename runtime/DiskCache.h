//===- DiskCache.h - Content-addressed on-disk cubin cache -----------------===//
//
// Layout under the root (LCEJIT_CACHE_DIR), <v> = kDiskCacheFormatVersion:
//
//   <root>/v<v>/<key[0:2]>/<key>.cubin   header + cubin payload
//   <root>/v<v>/<key[0:2]>/<key>.json    manifest: key, arch, options, NVRTC version,
//                                        source hash, sizes, creation time, ptxas info, log
//
// [Note: cache keys] The key is the XXH3-128 content hash (compiler/support/ContentHash.h,
// 32 hex digits; [Note: content hash] there says why not SHA-256) of everything that
// changes the binary (CacheKeyInputs, one field each):
//   format   the cache format version (kDiskCacheFormatVersion);
//   build    lcejit's build id: a content hash of the compiler's sources, not a time
//            stamp ([Note: build id] in compiler/support/BuildId.h);
//   source   the complete CUDA source (the emitted code and the device-header prelude);
//   nvrtc    NVRTC's full identity, nvrtcFullVersion(): major.minor from nvrtcVersion(),
//            the release and compiler build id NVRTC writes into PTX, and the file name
//            and size of the libnvrtc actually loaded;
//   options  the full NVRTC option list (includes the arch and the -I dirs);
//   arch     the target arch;
//   headers  a content hash of the embedded device headers the source was emitted with
//            (codegen::deviceHeaderHash(); today their text is also inside the source,
//            this field keeps the key honest should a source ever #include them instead);
//   includes a content hash of the headers the source reaches through -I (cuda_bf16.h,
//            cuda_fp16.h and what they include): includedHeadersHash() in Nvrtc.h. The -I
//            paths alone would let an edited or replaced toolkit header reuse old cubins.
// Each field is framed with its name and length, so no two different field lists hash
// the same bytes. It deliberately does not contain N or the bucket: the source is what
// the bucket changes, so two buckets that produce the same source share one cubin. The
// GPU's SM count is not in it either: it changes the plan (splits), so it reaches the
// key through the source (the Program cache key in ops/lib/LceJit.h has it).
//
// [Note: atomic writes] Every file is written to a unique temporary name in its final
// directory (O_EXCL), fsync'd, then rename(2)'d over the final name, and the directory
// is fsync'd. Readers see either no file or a complete one, and concurrent writers of
// the same key (threads or processes) each rename a complete file: the last one wins.
// The manifest is renamed first and the cubin last, so the cubin is the commit point. A
// writer killed mid-write leaves its temporary behind; sweeps delete it once it is stale
// ([Note: eviction]).
//
// [Note: failure policy] A load never throws and never crashes on bad data. An entry
// whose cubin header is wrong (magic, version, sizes, header checksum), whose payload
// does not match the XXH3-128 in the header, whose manifest is missing or unparsable or
// names another key or payload, is a miss; the caller recompiles and stores over it.
// Bad entries are not deleted (a concurrent writer may be replacing them this instant).
// A store that cannot write (unwritable or missing-and-uncreatable directory, full disk)
// returns false and warns once per DiskCache on stderr; the process continues with the
// in-memory cache.
//
// [Note: eviction] The cache is capped (LCEJIT_CACHE_MAX_MB, default 1024 MiB; 0 = no
// cap). Every store ends with a sweep over <root>/v*/??/: entries (cubin + manifest, of
// every format version, so old versions age out) are summed, and while the total is over
// the cap the least recently used entry is deleted (the cubin first, so a reader sees a
// miss, then the manifest). Recency is the cubin's mtime: a store sets it, and every hit
// sets it to now (utimensat; a read-only cache simply keeps its store times). The entry
// just stored is never evicted, even when it alone exceeds the cap. Processes sweep
// concurrently without locks: a delete that fails (another process got there first) is
// ignored, and a reader that loses a race with an eviction sees a miss and recompiles. A
// manifest without its cubin is a store between its two renames and is never evicted
// (that would strand the cubin about to arrive); only once older than staleTempAge is it
// deleted as the leftover of a dead writer. One race remains: evicting an entry while
// another process re-stores the same key can leave the new cubin without a manifest,
// which the next load reports as a bad entry (a miss) and the recompile repairs.
// The same sweep deletes temporaries of the atomic-write scheme ('.<name>.tmp.*', see
// [Note: atomic writes]) older than Limits::staleTempAge (default 1 hour): only a writer
// that died mid-write leaves one, and no live writer keeps one that long.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <nlohmann/json.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace lcejit::runtime {

/// Bump when the file format or the key material changes: old entries then live in
/// another directory (v1, v2, ...), are never read, and age out under the size cap.
/// 2: the key gained the full NVRTC identity, the device-header and include-content hashes
/// and a content-hash build id.
/// 3: XXH3-128 instead of SHA-256 for the key (32 hex digits), the payload and header
/// checks (a 48-byte header) and the manifest's hashes.
inline constexpr uint32_t kDiskCacheFormatVersion = 3;

/// Everything the disk key covers. See [Note: cache keys].
struct CacheKeyInputs {
  uint32_t formatVersion = kDiskCacheFormatVersion;
  std::string buildId;      ///< lcejit::buildId()
  std::string source;       ///< the complete CUDA source
  std::string nvrtcVersion; ///< nvrtcFullVersion()
  std::vector<std::string> options; ///< exactly what NVRTC gets (nvrtcOptions())
  std::string arch;             ///< e.g. "sm_90a"
  std::string deviceHeaderHash; ///< codegen::deviceHeaderHash() of the emitter (or "")
  std::string includeHash;      ///< includedHeadersHash(source, -I dirs)
};

/// The disk key: 32 lowercase hex digits. See [Note: cache keys].
std::string cacheKey(const CacheKeyInputs &inputs);

/// True for 32 lowercase hex digits.
bool isValidCacheKey(std::string_view key);

/// The cubin file: a 48-byte header, then the payload.
///   0  magic "LCEJITCB"    8  u32 format version   12 u32 header size (48)
///   16 u64 payload size   24  XXH3-128 of payload (16 bytes, canonical)
///   40 first 8 bytes of XXH3-128 of header bytes [0, 40)
/// All integers little-endian.
inline constexpr size_t kCubinHeaderBytes = 48;
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
  /// See [Note: eviction].
  struct Limits {
    int64_t maxBytes = int64_t(1024) << 20; ///< 0 = no cap (LCEJIT_CACHE_MAX_MB)
    std::chrono::seconds staleTempAge{3600}; ///< older temporaries are deleted
  };

  /// `root` is the cache directory (LCEJIT_CACHE_DIR); nothing is created until a store.
  explicit DiskCache(std::filesystem::path root);
  DiskCache(std::filesystem::path root, Limits limits);

  const std::filesystem::path &root() const { return root_; }
  std::filesystem::path cubinPath(std::string_view key) const;
  std::filesystem::path manifestPath(std::string_view key) const;

  const Limits &limits() const { return limits_; }

  /// The entry, or std::nullopt on a miss (absent, corrupt or unreadable entry). A hit
  /// marks the entry as used now (its recency for eviction).
  /// Throws Error(InvalidArgument) only for a malformed key.
  std::optional<DiskEntry> load(std::string_view key);

  /// Writes the entry atomically, then sweeps (see sweep()) keeping this entry.
  /// `manifest` (an object) gets the fields key, format_version, cubin_bytes,
  /// cubin_xxh128 and created added. Returns false when the entry could not be written
  /// (warned once per DiskCache). Thread- and process-safe.
  bool store(std::string_view key, std::span<const uint8_t> cubin, nlohmann::json manifest);

  /// What one sweep found and did.
  struct SweepResult {
    int64_t entries = 0;      ///< complete entries found (every format version)
    int64_t bytesBefore = 0;  ///< their total size (cubin + manifest)
    int64_t bytesAfter = 0;   ///< after evicting
    int64_t evicted = 0;      ///< entries deleted to get under the cap
    int64_t staleTemps = 0;   ///< stale temporaries deleted
    int64_t orphans = 0;      ///< stale manifests without a cubin deleted
  };
  /// Deletes stale temporaries, then evicts least recently used entries while the total
  /// is over limits().maxBytes, never the entry `keep` (a key of this format version, or
  /// empty). See [Note: eviction]. Never throws; failures to stat or delete are skipped.
  SweepResult sweep(std::string_view keep = {});

  struct Stats {
    int64_t hits = 0;
    int64_t misses = 0;  ///< absent entries
    int64_t corrupt = 0; ///< entries present but rejected
    int64_t stores = 0;
    int64_t storeFailures = 0;
    int64_t evictions = 0;  ///< entries this DiskCache evicted
    int64_t staleTemps = 0; ///< stale temporaries this DiskCache deleted
  };
  Stats stats() const;

private:
  std::filesystem::path root_;
  Limits limits_;
  std::atomic<int64_t> hits_{0}, misses_{0}, corrupt_{0}, stores_{0}, storeFailures_{0};
  std::atomic<int64_t> evictions_{0}, staleTemps_{0};
  std::atomic<bool> warnedWrite_{false}, warnedCorrupt_{false};
};

/// [Note: memos] A memo keeps one small fact that costs time to compute and is a pure
/// function of an identity string, so that a process finds it on disk instead of
/// computing it again: `<root>/v<v>/memo/<name>-<XXH3-128 of identity>.json`, an object
/// {name, identity, value, created}. Used once today: NVRTC's PTX banner, which takes an
/// NVRTC compile to read (10-30 ms, the largest part of a process's first call on a warm
/// cache) and is a function of the libnvrtc file ([Note: NVRTC identity] in Nvrtc.h).
/// A load returns the value only when the file parses and its name and identity equal
/// the request's byte for byte (the file name alone is a hash); anything else is a miss,
/// never an error. A store writes atomically ([Note: atomic writes]) and returns false
/// when it cannot write. Memos are not swept ([Note: eviction] sweeps `v*/??/`): there is
/// one a distinct identity, a few hundred bytes each.
inline constexpr size_t kMemoMaxBytes = 16 * 1024;
/// Where a memo lives. Throws Error(InvalidArgument) when `name` is not 1 to 32 of
/// [a-z0-9-].
std::filesystem::path memoPath(const std::filesystem::path &root, std::string_view name,
                               std::string_view identity);
/// The memo's value, or std::nullopt (absent, unreadable, malformed, another identity).
std::optional<std::string> loadMemo(const std::filesystem::path &root, std::string_view name,
                                    std::string_view identity);
/// Writes the memo (an empty value is Error(InvalidArgument)); false when it could not.
bool storeMemo(const std::filesystem::path &root, std::string_view name,
               std::string_view identity, std::string_view value);

} // namespace lcejit::runtime
