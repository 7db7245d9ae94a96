//===- ContentHash.cpp - XXH3-128 behind lcejit's ContentHash ---------------===//
//
// The only file that includes xxhash.h, header-only (XXH_INLINE_ALL: every xxHash
// function is static here), so no xxHash symbol reaches liblcejit.so's dynamic table and
// no libxxhash.so is needed at run time. See [Note: content hash] in ContentHash.h.
//
//===----------------------------------------------------------------------===//

#include "compiler/support/ContentHash.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

namespace lcejit {

static_assert(sizeof(XXH3_state_t) == ContentHash::kStateBytes,
              "ContentHash::kStateBytes does not match this xxhash.h");
static_assert(alignof(XXH3_state_t) == ContentHash::kStateAlign,
              "ContentHash::kStateAlign does not match this xxhash.h");
static_assert(sizeof(XXH128_canonical_t) == ContentHash::kDigestBytes);

namespace {
XXH3_state_t *xxh(void *storage) { return static_cast<XXH3_state_t *>(storage); }
} // namespace

void ContentHash::reset() {
  // XXH3_state_t is a plain C struct: the reset initializes every field the hash reads.
  XXH3_128bits_reset(xxh(state()));
}

ContentHash &ContentHash::update(const void *data, size_t size) {
  if (size > 0) // xxHash accepts (nullptr, 0); an empty span's data() may be null
    XXH3_128bits_update(xxh(state()), data, size);
  return *this;
}

ContentHash::Digest ContentHash::finish() {
  XXH128_canonical_t canonical;
  XXH128_canonicalFromHash(&canonical, XXH3_128bits_digest(xxh(state())));
  Digest digest;
  static_assert(sizeof(canonical.digest) == digest.size());
  for (size_t i = 0; i < digest.size(); ++i)
    digest[i] = canonical.digest[i];
  reset();
  return digest;
}

std::string ContentHash::finishHex() { return toHex(finish()); }

std::string toHex(std::span<const uint8_t> bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string s;
  s.reserve(bytes.size() * 2);
  for (uint8_t b : bytes) {
    s.push_back(kDigits[b >> 4]);
    s.push_back(kDigits[b & 15]);
  }
  return s;
}

ContentHash::Digest contentHash(std::string_view data) { return ContentHash().update(data).finish(); }
ContentHash::Digest contentHash(std::span<const uint8_t> data) {
  return ContentHash().update(data).finish();
}
std::string contentHashHex(std::string_view data) { return ContentHash().update(data).finishHex(); }
std::string contentHashHex(std::span<const uint8_t> data) {
  return ContentHash().update(data).finishHex();
}

} // namespace lcejit
