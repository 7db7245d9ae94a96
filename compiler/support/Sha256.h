//===- Sha256.h - SHA-256 (FIPS 180-4) -------------------------------------===//
//
// A small, dependency-free SHA-256 for cache keys and integrity checks of cache entries.
// Written from the FIPS 180-4 specification (sections 4.1.2, 4.2.2, 5.1.1, 5.3.3, 6.2);
// the round constants are derived at compile time from the primes, as the standard
// defines them, and checked against the published values.
//
// Usage:
//   Sha256 h;
//   h.update(part1);
//   h.update(part2);
//   std::string hex = h.finishHex();   // 64 lowercase hex digits; h is reset
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

class Sha256 {
public:
  static constexpr size_t kDigestBytes = 32;
  static constexpr size_t kBlockBytes = 64;
  using Digest = std::array<uint8_t, kDigestBytes>;

  Sha256() { reset(); }

  /// Appends bytes to the message.
  Sha256 &update(const void *data, size_t size);
  Sha256 &update(std::string_view text) { return update(text.data(), text.size()); }
  Sha256 &update(std::span<const uint8_t> bytes) { return update(bytes.data(), bytes.size()); }

  /// Pads, returns the digest of everything updated so far, and resets the object.
  Digest finish();
  /// finish() as 64 lowercase hex digits.
  std::string finishHex();

  /// Starts a new message.
  void reset();

private:
  void compress(const uint8_t *block);

  std::array<uint32_t, 8> state_{};
  std::array<uint8_t, kBlockBytes> buffer_{};
  size_t buffered_ = 0;
  uint64_t totalBytes_ = 0;
};

/// One-shot helpers.
Sha256::Digest sha256(std::string_view data);
Sha256::Digest sha256(std::span<const uint8_t> data);
std::string sha256Hex(std::string_view data);
std::string sha256Hex(std::span<const uint8_t> data);

/// Lowercase hex of bytes.
std::string toHex(std::span<const uint8_t> bytes);

} // namespace lcejit
