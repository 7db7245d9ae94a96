//===- ContentHashTest.cpp - XXH3-128 through ContentHash --------------------===//
//
// The expected digests were computed outside lcejit: Python's `xxhash` package (4.1.0,
// which bundles its own xxHash 0.8.4) and `xxhsum -H2` (Debian's xxhash 0.8.1) agree on
// every one. The lengths cross each of XXH3-128's code paths (0, 1-3, 4-8, 9-16, 17-128,
// 129-240 bytes, then the long loop with its 256-byte streaming buffer and 1024-byte
// blocks).
//
//===----------------------------------------------------------------------===//

#include "compiler/support/ContentHash.h"

#include <gtest/gtest.h>

#include <set>
#include <vector>

using namespace lcejit;

namespace {

/// Byte i is ((i * 31 + 7) ^ (i >> 8)) & 0xff.
std::vector<uint8_t> pattern(size_t n) {
  std::vector<uint8_t> p(n);
  for (size_t i = 0; i < n; ++i)
    p[i] = static_cast<uint8_t>((i * 31 + 7) ^ (i >> 8));
  return p;
}

TEST(ContentHashTest, KnownVectors) {
  EXPECT_EQ(contentHashHex(std::string_view("")), "99aa06d3014798d86001c324468d497f");
  EXPECT_EQ(contentHashHex(std::string_view("abc")), "06b05ab6733a618578af5f94892f3950");
  EXPECT_EQ(contentHashHex(std::string(1000000, 'a')), "a545df8e384a9579b1fd6fae5285c4eb");
}

TEST(ContentHashTest, EveryLengthClass) {
  const std::pair<size_t, const char *> vectors[] = {
      {1, "495b62073ef70ca44c5cca45d0f4811f"},     {3, "46f66cb93538156515f7093b173d005c"},
      {4, "7fefeeffb4d0eab3b987ca5d9241572a"},     {8, "803c675a846cc6c256bb836ceb6d4baa"},
      {9, "d46556872d230f224376673580310154"},     {16, "650fe308c566747df853dd94614dfa07"},
      {17, "18217300b5132d5a78c349fe81b2f26c"},    {128, "b4f87b99d2db8a511e04fad9f0cacb4d"},
      {129, "6881633650cd8924c51bc887976aef63"},   {240, "de57aab31e77a2ff93e173833f75ab66"},
      {241, "92b991a7192f3f080b3b630948ce4a00"},   {1024, "e46b39afc6d4fe0bd218d699d62a6d8b"},
      {1025, "33ec9cca459a5e2638f5f1f86ddfa599"},  {100000, "13b40976b86afcf43af21d5f4869b6ec"},
  };
  for (const auto &[n, hex] : vectors)
    EXPECT_EQ(contentHashHex(std::span<const uint8_t>(pattern(n))), hex) << n << " bytes";
}

TEST(ContentHashTest, EverySplitPointMatchesOneShot) {
  // 1100 bytes: splits land inside and across the 256-byte buffer and the 1024-byte block.
  std::vector<uint8_t> msg = pattern(1100);
  const std::string whole = contentHashHex(std::span<const uint8_t>(msg));
  for (size_t cut = 0; cut <= msg.size(); ++cut) {
    ContentHash h;
    h.update(std::span<const uint8_t>(msg).subspan(0, cut));
    h.update(std::span<const uint8_t>(msg).subspan(cut));
    ASSERT_EQ(h.finishHex(), whole) << "cut at " << cut;
  }
}

TEST(ContentHashTest, ManySmallPiecesMatchOneShot) {
  std::vector<uint8_t> msg = pattern(100000);
  for (size_t piece : {size_t(1), size_t(7), size_t(64), size_t(255), size_t(4096)}) {
    ContentHash h;
    for (size_t at = 0; at < msg.size(); at += piece)
      h.update(msg.data() + at, std::min(piece, msg.size() - at));
    EXPECT_EQ(h.finishHex(), "13b40976b86afcf43af21d5f4869b6ec") << "pieces of " << piece;
  }
}

TEST(ContentHashTest, DifferentInputsDiffer) {
  std::set<std::string> seen;
  std::vector<uint8_t> msg = pattern(300);
  // Every length prefix and every single-bit flip of one byte: all distinct.
  for (size_t n = 0; n <= msg.size(); ++n)
    seen.insert(contentHashHex(std::span<const uint8_t>(msg.data(), n)));
  for (int bit = 0; bit < 8; ++bit) {
    std::vector<uint8_t> flipped = msg;
    flipped[150] ^= static_cast<uint8_t>(1u << bit);
    seen.insert(contentHashHex(std::span<const uint8_t>(flipped)));
  }
  EXPECT_EQ(seen.size(), msg.size() + 1 + 8);
  EXPECT_NE(contentHashHex(std::string_view("ab")), contentHashHex(std::string_view("ba")));
}

TEST(ContentHashTest, FinishResets) {
  ContentHash h;
  h.update("something else");
  h.finish();
  h.update("abc");
  EXPECT_EQ(h.finishHex(), "06b05ab6733a618578af5f94892f3950");
  EXPECT_EQ(h.finishHex(), "99aa06d3014798d86001c324468d497f"); // nothing since: empty
}

TEST(ContentHashTest, DigestBytesAndHex) {
  ContentHash::Digest d = contentHash(std::string_view("abc"));
  static_assert(ContentHash::kDigestBytes == 16 && ContentHash::kHexDigits == 32);
  EXPECT_EQ(d[0], 0x06); // canonical (big-endian) order, as xxhsum prints it
  EXPECT_EQ(d[15], 0x50);
  EXPECT_EQ(toHex(d), "06b05ab6733a618578af5f94892f3950");
  const uint8_t bytes[] = {0x00, 0x0f, 0xa5, 0xff};
  EXPECT_EQ(toHex(bytes), "000fa5ff");
}

} // namespace
