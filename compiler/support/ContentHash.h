//===- ContentHash.h - Content hashes for cache keys and integrity checks ---===//
//
// The one hash lcejit computes at run time: XXH3-128 from xxHash (Debian's libxxhash-dev),
// behind this small lcejit-owned API so no other file includes xxhash.h. It names kernel
// cache entries (runtime/DiskCache.h, [Note: cache keys]), checks their payloads, and
// fingerprints graphs, device headers and included headers.
//
// [Note: content hash] XXH3-128 is not a cryptographic hash, and nothing here needs one:
// the cache is local (a user's own directory), its keys are never compared with input
// from anyone else, and a chance collision between two honest inputs is as unlikely as
// for SHA-256 cut to 128 bits (2^-128 for a given pair). It is about 90 times faster
// than the SHA-256 it replaced on a CUDA source (docs/runtime.md, "Why XXH3-128"). xxHash is used header-only (XXH_INLINE_ALL, in
// ContentHash.cpp only): liblcejit.so gains no NEEDED library and exports no xxHash
// symbol (the package tests check both). The digest is the canonical big-endian form,
// the same 32 hex digits `xxhsum -H2` prints.
//
// Usage:
//   ContentHash h;
//   h.update(part1);
//   h.update(part2);
//   std::string hex = h.finishHex();   // 32 lowercase hex digits; h is reset
//
//===----------------------------------------------------------------------===//
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace lcejit {

class ContentHash {
public:
  static constexpr size_t kDigestBytes = 16;
  static constexpr size_t kHexDigits = 2 * kDigestBytes;
  /// Size and alignment of xxHash's XXH3_state_t (checked in ContentHash.cpp).
  static constexpr size_t kStateBytes = 576, kStateAlign = 64;
  using Digest = std::array<uint8_t, kDigestBytes>;

  ContentHash() { reset(); }
  ContentHash(const ContentHash &) = delete;
  ContentHash &operator=(const ContentHash &) = delete;

  /// Appends bytes to the message.
  ContentHash &update(const void *data, size_t size);
  ContentHash &update(std::string_view text) { return update(text.data(), text.size()); }
  ContentHash &update(std::span<const uint8_t> bytes) {
    return update(bytes.data(), bytes.size());
  }

  /// The digest of everything updated so far (canonical, big-endian); resets the object.
  Digest finish();
  /// finish() as 32 lowercase hex digits.
  std::string finishHex();

  /// Starts a new message.
  void reset();

private:
  void *state() { return state_; }
  // XXH3_state_t, kept in place so hashing never allocates.
  alignas(kStateAlign) unsigned char state_[kStateBytes];
};

/// One-shot helpers.
ContentHash::Digest contentHash(std::string_view data);
ContentHash::Digest contentHash(std::span<const uint8_t> data);
std::string contentHashHex(std::string_view data);
std::string contentHashHex(std::span<const uint8_t> data);

/// Lowercase hex of bytes.
std::string toHex(std::span<const uint8_t> bytes);

} // namespace lcejit
