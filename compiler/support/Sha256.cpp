//===- Sha256.cpp - SHA-256 (FIPS 180-4) -----------------------------------===//

#include "compiler/support/Sha256.h"

#include <algorithm>
#include <cstring>

namespace lcejit {

namespace {

// [Note: constants from their definition] FIPS 180-4 §4.2.2 defines K[t] as the first 32
// bits of the fractional part of the cube root of the t-th prime, and §5.3.3 defines the
// initial hash value H(0) as the same for the square roots of the first 8 primes. Both
// are computed here with exact integer arithmetic: the largest x with x^e <= p * 2^(32e)
// is floor(p^(1/e) * 2^32), whose low 32 bits are the fraction bits.

constexpr std::array<uint32_t, 64> firstPrimes() {
  std::array<uint32_t, 64> primes{};
  uint32_t count = 0;
  for (uint32_t n = 2; count < 64; ++n) {
    bool prime = true;
    for (uint32_t d = 2; d * d <= n; ++d)
      if (n % d == 0) {
        prime = false;
        break;
      }
    if (prime)
      primes[count++] = n;
  }
  return primes;
}

constexpr uint32_t fractionBitsOfRoot(uint32_t p, int e) {
  using u128 = unsigned __int128;
  const u128 target = static_cast<u128>(p) << (32 * e);
  // The root of p < 312 is below 18, so x < 18 * 2^32 < 2^37.
  uint64_t lo = 0, hi = uint64_t(1) << 37;
  while (lo < hi) { // largest x with x^e <= target
    uint64_t mid = lo + (hi - lo + 1) / 2;
    u128 pow = 1;
    for (int i = 0; i < e; ++i)
      pow *= mid;
    if (pow <= target)
      lo = mid;
    else
      hi = mid - 1;
  }
  return static_cast<uint32_t>(lo);
}

constexpr std::array<uint32_t, 64> makeK() {
  std::array<uint32_t, 64> k{};
  auto primes = firstPrimes();
  for (size_t t = 0; t < 64; ++t)
    k[t] = fractionBitsOfRoot(primes[t], 3);
  return k;
}

constexpr std::array<uint32_t, 8> makeH0() {
  std::array<uint32_t, 8> h{};
  auto primes = firstPrimes();
  for (size_t i = 0; i < 8; ++i)
    h[i] = fractionBitsOfRoot(primes[i], 2);
  return h;
}

constexpr std::array<uint32_t, 64> kK = makeK();
constexpr std::array<uint32_t, 8> kH0 = makeH0();

// Spot checks against the values printed in FIPS 180-4.
static_assert(kK[0] == 0x428a2f98u && kK[1] == 0x71374491u && kK[63] == 0xc67178f2u);
static_assert(kH0[0] == 0x6a09e667u && kH0[7] == 0x5be0cd19u);

constexpr uint32_t rotr(uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }
constexpr uint32_t ch(uint32_t x, uint32_t y, uint32_t z) { return (x & y) ^ (~x & z); }
constexpr uint32_t maj(uint32_t x, uint32_t y, uint32_t z) {
  return (x & y) ^ (x & z) ^ (y & z);
}
constexpr uint32_t bigSigma0(uint32_t x) { return rotr(x, 2) ^ rotr(x, 13) ^ rotr(x, 22); }
constexpr uint32_t bigSigma1(uint32_t x) { return rotr(x, 6) ^ rotr(x, 11) ^ rotr(x, 25); }
constexpr uint32_t smallSigma0(uint32_t x) { return rotr(x, 7) ^ rotr(x, 18) ^ (x >> 3); }
constexpr uint32_t smallSigma1(uint32_t x) { return rotr(x, 17) ^ rotr(x, 19) ^ (x >> 10); }

uint32_t loadBigEndian32(const uint8_t *p) {
  return (uint32_t(p[0]) << 24) | (uint32_t(p[1]) << 16) | (uint32_t(p[2]) << 8) | uint32_t(p[3]);
}

} // namespace

void Sha256::reset() {
  state_ = kH0;
  buffered_ = 0;
  totalBytes_ = 0;
}

// FIPS 180-4 §6.2.2: message schedule, 64 rounds, add into the state.
void Sha256::compress(const uint8_t *block) {
  uint32_t w[64];
  for (int t = 0; t < 16; ++t)
    w[t] = loadBigEndian32(block + 4 * t);
  for (int t = 16; t < 64; ++t)
    w[t] = smallSigma1(w[t - 2]) + w[t - 7] + smallSigma0(w[t - 15]) + w[t - 16];

  uint32_t a = state_[0], b = state_[1], c = state_[2], d = state_[3];
  uint32_t e = state_[4], f = state_[5], g = state_[6], h = state_[7];
  for (int t = 0; t < 64; ++t) {
    uint32_t t1 = h + bigSigma1(e) + ch(e, f, g) + kK[static_cast<size_t>(t)] + w[t];
    uint32_t t2 = bigSigma0(a) + maj(a, b, c);
    h = g;
    g = f;
    f = e;
    e = d + t1;
    d = c;
    c = b;
    b = a;
    a = t1 + t2;
  }
  state_[0] += a;
  state_[1] += b;
  state_[2] += c;
  state_[3] += d;
  state_[4] += e;
  state_[5] += f;
  state_[6] += g;
  state_[7] += h;
}

Sha256 &Sha256::update(const void *data, size_t size) {
  const auto *p = static_cast<const uint8_t *>(data);
  totalBytes_ += size;
  if (buffered_ > 0) {
    size_t take = std::min(size, kBlockBytes - buffered_);
    std::memcpy(buffer_.data() + buffered_, p, take);
    buffered_ += take;
    p += take;
    size -= take;
    if (buffered_ < kBlockBytes)
      return *this;
    compress(buffer_.data());
    buffered_ = 0;
  }
  for (; size >= kBlockBytes; p += kBlockBytes, size -= kBlockBytes)
    compress(p);
  if (size > 0) {
    std::memcpy(buffer_.data(), p, size);
    buffered_ = size;
  }
  return *this;
}

// FIPS 180-4 §5.1.1: append 0x80, zeros up to 56 mod 64, then the bit length (64-bit BE).
Sha256::Digest Sha256::finish() {
  const uint64_t bitLength = totalBytes_ * 8;
  buffer_[buffered_++] = 0x80;
  if (buffered_ > 56) {
    std::memset(buffer_.data() + buffered_, 0, kBlockBytes - buffered_);
    compress(buffer_.data());
    buffered_ = 0;
  }
  std::memset(buffer_.data() + buffered_, 0, 56 - buffered_);
  for (int i = 0; i < 8; ++i)
    buffer_[56 + static_cast<size_t>(i)] = static_cast<uint8_t>(bitLength >> (56 - 8 * i));
  compress(buffer_.data());

  Digest digest;
  for (size_t i = 0; i < 8; ++i)
    for (size_t j = 0; j < 4; ++j)
      digest[4 * i + j] = static_cast<uint8_t>(state_[i] >> (24 - 8 * j));
  reset();
  return digest;
}

std::string Sha256::finishHex() {
  Digest d = finish();
  return toHex(d);
}

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

Sha256::Digest sha256(std::string_view data) { return Sha256().update(data).finish(); }
Sha256::Digest sha256(std::span<const uint8_t> data) { return Sha256().update(data).finish(); }
std::string sha256Hex(std::string_view data) { return Sha256().update(data).finishHex(); }
std::string sha256Hex(std::span<const uint8_t> data) { return Sha256().update(data).finishHex(); }

} // namespace lcejit
