//===- Sha256Test.cpp - SHA-256 against the standard test vectors ----------===//

#include "compiler/support/Sha256.h"

#include <gtest/gtest.h>

#include <numeric>
#include <vector>

using namespace lcejit;

namespace {

// FIPS 180-4 / NIST CSRC example vectors.
TEST(Sha256Test, Empty) {
  EXPECT_EQ(sha256Hex(std::string_view("")),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
}

TEST(Sha256Test, Abc) {
  EXPECT_EQ(sha256Hex(std::string_view("abc")),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST(Sha256Test, TwoBlockMessage448Bits) {
  EXPECT_EQ(sha256Hex(std::string_view(
                "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq")),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
}

TEST(Sha256Test, Message896Bits) {
  EXPECT_EQ(sha256Hex(std::string_view(
                "abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmno"
                "pqklmnopqrlmnopqrsmnopqrstnopqrstu")),
            "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1");
}

TEST(Sha256Test, OneMillionA) {
  const std::string expected =
      "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0";
  EXPECT_EQ(sha256Hex(std::string(1000000, 'a')), expected);
  // The same message fed in uneven pieces through the incremental API.
  Sha256 h;
  std::string piece(997, 'a');
  size_t left = 1000000;
  while (left > 0) {
    size_t n = std::min(left, piece.size());
    h.update(std::string_view(piece.data(), n));
    left -= n;
  }
  EXPECT_EQ(h.finishHex(), expected);
}

// Lengths around the padding boundary (55/56 bytes: the length fits / does not fit in
// the last block). Expected values from Python's hashlib.
TEST(Sha256Test, PaddingBoundaries) {
  const std::pair<size_t, const char *> cases[] = {
      {55, "9f4390f8d30c2dd92ec9f095b65e2b9ae9b0a925a5258e241c9f1e910f734318"},
      {56, "b35439a4ac6f0948b6d6f9e3c6af0f5f590ce20f1bde7090ef7970686ec6738a"},
      {57, "f13b2d724659eb3bf47f2dd6af1accc87b81f09f59f2b75e5c0bed6589dfe8c6"},
      {63, "7d3e74a05d7db15bce4ad9ec0658ea98e3f06eeecf16b4c6fff2da457ddc2f34"},
      {64, "ffe054fe7ae0cb6dc65c3af9b61d5209f439851db43d0ba5997337df154668eb"},
      {65, "635361c48bb9eab14198e76ea8ab7f1a41685d6ad62aa9146d301d4f17eb0ae0"},
      {119, "31eba51c313a5c08226adf18d4a359cfdfd8d2e816b13f4af952f7ea6584dcfb"},
      {120, "2f3d335432c70b580af0e8e1b3674a7c020d683aa5f73aaaedfdc55af904c21c"},
  };
  for (const auto &[n, hex] : cases)
    EXPECT_EQ(sha256Hex(std::string(n, 'a')), hex) << n << " bytes";
}

TEST(Sha256Test, AllByteValues) {
  std::vector<uint8_t> bytes(256);
  std::iota(bytes.begin(), bytes.end(), 0);
  EXPECT_EQ(sha256Hex(std::span<const uint8_t>(bytes)),
            "40aff2e9d2d8922e47afd4648e6967497158785fbd1da870e7110266bf944880");
}

TEST(Sha256Test, EverySplitPointMatchesOneShot) {
  std::string msg;
  for (int i = 0; i < 200; ++i)
    msg.push_back(static_cast<char>(i * 7 + 3));
  const std::string whole = sha256Hex(msg);
  for (size_t cut = 0; cut <= msg.size(); ++cut) {
    Sha256 h;
    h.update(std::string_view(msg).substr(0, cut));
    h.update(std::string_view(msg).substr(cut));
    ASSERT_EQ(h.finishHex(), whole) << "cut at " << cut;
  }
}

TEST(Sha256Test, FinishResets) {
  Sha256 h;
  h.update("something else");
  h.finish();
  h.update("abc");
  EXPECT_EQ(h.finishHex(), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST(Sha256Test, DigestBytesAndHex) {
  Sha256::Digest d = sha256(std::string_view("abc"));
  EXPECT_EQ(d[0], 0xba);
  EXPECT_EQ(d[31], 0xad);
  const uint8_t bytes[] = {0x00, 0x0f, 0xa5, 0xff};
  EXPECT_EQ(toHex(bytes), "000fa5ff");
}

} // namespace
