#include "gpu/format/format.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "gpu/format/crc32c.h"

namespace leapcache {
namespace {

TEST(Crc32c, CheckValue) { EXPECT_EQ(Crc32c("123456789", 9), 0xE3069283u); }

TEST(Layout, EightBitIsExactly1_1875BytesPerElement) {
  const BlobSpec s = BlobSpec::Leap(StateKind::kGdn, 8);
  ASSERT_TRUE(ValidateSpec(s).ok());
  EXPECT_EQ(ComputeLayout(s).payload_bytes, 19456u);
}

// Bit-at-a-time CRC-32C, straight from the definition.
uint32_t SlowCrc32c(const uint8_t* p, size_t n) {
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = 0; i < n; ++i) {
    c ^= p[i];
    for (int b = 0; b < 8; ++b) c = (c >> 1) ^ ((c & 1u) ? 0x82F63B78u : 0u);
  }
  return ~c;
}

TEST(Crc32c, Rfc3720TestVectors) {
  std::vector<uint8_t> buf(32, 0x00);
  EXPECT_EQ(Crc32c(buf.data(), buf.size()), 0x8A9136AAu);
  buf.assign(32, 0xFF);
  EXPECT_EQ(Crc32c(buf.data(), buf.size()), 0x62A8AB43u);
  for (int i = 0; i < 32; ++i) buf[i] = static_cast<uint8_t>(i);
  EXPECT_EQ(Crc32c(buf.data(), buf.size()), 0x46DD794Eu);
  for (int i = 0; i < 32; ++i) buf[i] = static_cast<uint8_t>(31 - i);
  EXPECT_EQ(Crc32c(buf.data(), buf.size()), 0x113FDB5Cu);
  EXPECT_EQ(Crc32c(nullptr, 0), 0u);
}

TEST(Crc32c, MatchesBitwiseReferenceAtEveryLengthAndAlignment) {
  constexpr uint32_t kSeed = 31;
  SCOPED_TRACE("seed " + std::to_string(kSeed));
  std::mt19937 rng(kSeed);
  std::vector<uint8_t> data(400);
  for (uint8_t& b : data) b = static_cast<uint8_t>(rng());
  for (size_t offset = 0; offset < 8; ++offset) {
    for (size_t n = 0; n + offset <= 300; ++n) {
      ASSERT_EQ(Crc32c(data.data() + offset, n), SlowCrc32c(data.data() + offset, n))
          << "offset " << offset << " length " << n;
    }
  }
  // Extending over any split equals one pass.
  for (size_t split = 0; split <= data.size(); split += 7) {
    const uint32_t head = Crc32c(data.data(), split);
    EXPECT_EQ(Crc32cExtend(head, data.data() + split, data.size() - split),
              Crc32c(data.data(), data.size()))
        << "split " << split;
  }
}

TEST(Crc32c, CombineEqualsOnePassOverTheConcatenation) {
  std::mt19937 rng(17);
  std::vector<uint8_t> data(70000);
  for (uint8_t& b : data) b = static_cast<uint8_t>(rng());
  for (size_t a : {size_t{0}, size_t{1}, size_t{64}, size_t{999}}) {
    for (size_t b : {size_t{0}, size_t{1}, size_t{7}, size_t{64}, size_t{19520}, size_t{65536}}) {
      const Crc32cCombiner combiner(b);
      EXPECT_EQ(combiner.Combine(Crc32c(data.data(), a), Crc32c(data.data() + a, b)),
                Crc32c(data.data(), a + b))
          << a << " + " << b;
    }
  }
  // Folding equal-sized pieces, as a checkpoint's blobs are folded.
  const size_t piece = 1000;
  const Crc32cCombiner fold(piece);
  uint32_t crc = 0;
  for (size_t at = 0; at + piece <= data.size(); at += piece) {
    crc = fold.Combine(crc, Crc32c(data.data() + at, piece));
  }
  EXPECT_EQ(crc, Crc32c(data.data(), data.size() / piece * piece));
}

// ---------------------------------------------------------------------------------------------
// ValidateSpec

BlobSpec Plain(Codec codec, int bits) {
  BlobSpec s;
  s.codec = codec;
  s.bits = bits;
  s.r = 0;
  s.smoothing = false;
  return s;
}

// Expects INVALID_ARGUMENT whose message starts with the bad field's name.
void ExpectRejected(const BlobSpec& s, const std::string& field) {
  const Status st = ValidateSpec(s);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << s.ToString() << ": " << st.ToString();
  EXPECT_EQ(st.message().rfind(field, 0), 0u)
      << "message of " << s.ToString() << " does not name " << field << ": " << st.message();
}

TEST(ValidateSpec, AcceptsEveryDocumentedCombination) {
  for (StateKind kind : {StateKind::kGdn, StateKind::kKda}) {
    for (int bits : {8, 6, 4}) {
      EXPECT_TRUE(ValidateSpec(BlobSpec::Leap(kind, bits)).ok());
      EXPECT_TRUE(ValidateSpec(BlobSpec::Leap(kind, bits, 16, 256)).ok());
      EXPECT_TRUE(ValidateSpec(Plain(Codec::kIntRow, bits)).ok());
      EXPECT_TRUE(ValidateSpec(Plain(Codec::kIntCol, bits)).ok());
      for (int r = 0; r <= kMaxRank; ++r) {
        BlobSpec s = BlobSpec::Leap(kind, bits);
        s.r = r;
        EXPECT_TRUE(ValidateSpec(s).ok()) << s.ToString();
        s.smoothing = false;
        EXPECT_TRUE(ValidateSpec(s).ok()) << s.ToString();
      }
    }
  }
  EXPECT_TRUE(ValidateSpec(Plain(Codec::kFp32, 32)).ok());
  EXPECT_TRUE(ValidateSpec(Plain(Codec::kBf16, 16)).ok());
  EXPECT_TRUE(ValidateSpec(Plain(Codec::kFp16, 16)).ok());
  for (int d = 16; d <= 256; d += 16) {
    BlobSpec s = BlobSpec::Leap(StateKind::kGdn, 8, d, 272 - d);
    EXPECT_TRUE(ValidateSpec(s).ok()) << s.ToString();
  }
  for (int p : {1, 32}) {
    BlobSpec s = BlobSpec::Leap(StateKind::kKda, 8);
    s.p = p;
    EXPECT_TRUE(ValidateSpec(s).ok()) << s.ToString();
  }
}

TEST(ValidateSpec, RejectsBadFieldsNamingThem) {
  for (int d : {100, 8, 0, -16, 272, 512, 15}) {
    BlobSpec s = BlobSpec::Leap(StateKind::kGdn, 8);
    s.dk = d;
    ExpectRejected(s, "dk");
    s = BlobSpec::Leap(StateKind::kGdn, 8);
    s.dv = d;
    ExpectRejected(s, "dv");
  }
  for (int bits : {0, 1, 2, 3, 5, 7, 16, 32}) {
    BlobSpec s = BlobSpec::Leap(StateKind::kGdn, 8);
    s.bits = bits;
    ExpectRejected(s, "bits");
    BlobSpec row = Plain(Codec::kIntRow, bits);
    ExpectRejected(row, "bits");
  }
  ExpectRejected(Plain(Codec::kFp32, 16), "bits");
  ExpectRejected(Plain(Codec::kBf16, 8), "bits");
  ExpectRejected(Plain(Codec::kFp16, 32), "bits");
  for (int p : {0, 33, -1, 255}) {
    BlobSpec s = BlobSpec::Leap(StateKind::kGdn, 8);
    s.p = p;
    ExpectRejected(s, "p ");
  }
  for (int r : {9, -1, 16}) {
    BlobSpec s = BlobSpec::Leap(StateKind::kGdn, 8);
    s.r = r;
    ExpectRejected(s, "r ");
  }
  for (Codec c : {Codec::kFp32, Codec::kBf16, Codec::kFp16, Codec::kIntRow, Codec::kIntCol}) {
    const int bits = c == Codec::kFp32 ? 32 : (c == Codec::kBf16 || c == Codec::kFp16) ? 16 : 8;
    BlobSpec s = Plain(c, bits);
    s.r = 1;
    ExpectRejected(s, "r ");
    s.r = 0;
    s.smoothing = true;
    ExpectRejected(s, "smoothing");
  }
  BlobSpec s = BlobSpec::Leap(StateKind::kGdn, 8);
  s.kind = static_cast<StateKind>(3);
  ExpectRejected(s, "kind");
  s = BlobSpec::Leap(StateKind::kGdn, 8);
  s.codec = static_cast<Codec>(7);
  ExpectRejected(s, "unknown codec");
  s.codec = static_cast<Codec>(0);
  ExpectRejected(s, "unknown codec");
}

TEST(BlobSpec, LeapDefaultsPerBitWidth) {
  const BlobSpec s8 = BlobSpec::Leap(StateKind::kKda, 8, 64, 128);
  EXPECT_EQ(s8.codec, Codec::kLeap);
  EXPECT_EQ(s8.kind, StateKind::kKda);
  EXPECT_EQ(s8.dk, 64);
  EXPECT_EQ(s8.dv, 128);
  EXPECT_EQ(s8.p, 16);
  EXPECT_TRUE(s8.smoothing);
  EXPECT_EQ(s8.r, 4);
  EXPECT_EQ(BlobSpec::Leap(StateKind::kGdn, 6).r, 6);
  EXPECT_EQ(BlobSpec::Leap(StateKind::kGdn, 4).r, 8);
  EXPECT_EQ(s8.flags(), kFlagSmoothing);
  EXPECT_EQ(s8.ToString(), "leap/kda dk=64 dv=128 bits=8 p=16 r=4 smoothing");
}

// ---------------------------------------------------------------------------------------------
// ComputeLayout

std::vector<BlobSpec> AllSpecs(int dk, int dv) {
  std::vector<BlobSpec> specs = {Plain(Codec::kFp32, 32), Plain(Codec::kBf16, 16),
                                 Plain(Codec::kFp16, 16)};
  for (int bits : {8, 6, 4}) {
    specs.push_back(Plain(Codec::kIntRow, bits));
    specs.push_back(Plain(Codec::kIntCol, bits));
    for (int r : {0, 1, 4, 8}) {
      for (bool smoothing : {true, false}) {
        BlobSpec s = BlobSpec::Leap(StateKind::kGdn, bits);
        s.r = r;
        s.smoothing = smoothing;
        specs.push_back(s);
      }
    }
  }
  for (BlobSpec& s : specs) {
    s.dk = dk;
    s.dv = dv;
  }
  return specs;
}

TEST(Layout, DefaultLeapSizes) {
  // codes + (row + column fp32 scales) + r fp16 pairs of (dk + dv).
  EXPECT_EQ(ComputeLayout(BlobSpec::Leap(StateKind::kGdn, 8)).payload_bytes, 16384u + 1024u + 4 * 512u);
  EXPECT_EQ(ComputeLayout(BlobSpec::Leap(StateKind::kGdn, 6)).payload_bytes, 12288u + 1024u + 6 * 512u);
  EXPECT_EQ(ComputeLayout(BlobSpec::Leap(StateKind::kGdn, 4)).payload_bytes, 8192u + 1024u + 8 * 512u);
  EXPECT_EQ(ComputeLayout(BlobSpec::Leap(StateKind::kKda, 8)).payload_bytes, 19456u);
  EXPECT_EQ(ComputeLayout(BlobSpec::Leap(StateKind::kGdn, 8)).blob_bytes(), 19456u + 64u);
}

TEST(Layout, SectionsFollowTheFormulaAreAlignedAndContiguous) {
  for (auto [dk, dv] : {std::pair{128, 128}, std::pair{16, 32}, std::pair{64, 128}, std::pair{256, 16}}) {
    for (const BlobSpec& s : AllSpecs(dk, dv)) {
      ASSERT_TRUE(ValidateSpec(s).ok()) << s.ToString();
      const PayloadLayout l = ComputeLayout(s);
      SCOPED_TRACE(s.ToString());
      EXPECT_EQ(l.codes_offset, 0u);
      EXPECT_EQ(l.codes_bytes, static_cast<size_t>(dk) * dv * s.bits / 8);
      const bool rows = s.codec == Codec::kIntRow || (s.codec == Codec::kLeap && s.smoothing);
      const bool cols = s.codec == Codec::kIntCol || s.codec == Codec::kLeap;
      EXPECT_EQ(HasRowScales(s), rows);
      EXPECT_EQ(HasColScales(s), cols);
      EXPECT_EQ(l.row_scale_bytes, rows ? 4u * dk : 0u);
      EXPECT_EQ(l.col_scale_bytes, cols ? 4u * dv : 0u);
      EXPECT_EQ(l.comp_bytes, s.codec == Codec::kLeap ? 2u * s.r * (dk + dv) : 0u);
      // Sections in order, back to back, each on a 16-byte boundary.
      size_t end = l.codes_bytes;
      for (auto [off, bytes] : {std::pair{l.row_scale_offset, l.row_scale_bytes},
                                std::pair{l.col_scale_offset, l.col_scale_bytes},
                                std::pair{l.comp_offset, l.comp_bytes}}) {
        if (bytes == 0) continue;
        EXPECT_EQ(off, end);
        EXPECT_EQ(off % 16, 0u);
        end = off + bytes;
      }
      EXPECT_EQ(l.payload_bytes, end);
      EXPECT_EQ(l.blob_bytes(), kHeaderBytes + end);
    }
  }
}

TEST(LayoutFingerprint, DistinguishesLayouts) {
  std::set<uint32_t> seen;
  size_t count = 0;
  for (auto [dk, dv] : {std::pair{128, 128}, std::pair{16, 32}, std::pair{32, 16}, std::pair{64, 128}}) {
    for (BlobSpec s : AllSpecs(dk, dv)) {
      for (StateKind kind : {StateKind::kGdn, StateKind::kKda}) {
        s.kind = kind;
        s.p = 1;
        seen.insert(LayoutFingerprint(s));
        ++count;
        // p does not change the layout: windows of any length share checkpoints.
        BlobSpec other_window = s;
        other_window.p = 16;
        EXPECT_EQ(LayoutFingerprint(other_window), LayoutFingerprint(s));
      }
    }
  }
  EXPECT_EQ(seen.size(), count);
}

// ---------------------------------------------------------------------------------------------
// SealBlob / ParseBlob

// A sealed blob of `spec` with a random payload.
std::vector<uint8_t> RandomBlob(const BlobSpec& spec, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> blob(ComputeLayout(spec).blob_bytes());
  for (size_t i = kHeaderBytes; i < blob.size(); ++i) blob[i] = static_cast<uint8_t>(rng());
  SealBlob(spec, blob);
  return blob;
}

// Recomputes the header CRC after a deliberate header edit, so the edit itself is what
// ParseBlob sees.
void ResealHeader(std::vector<uint8_t>& blob) {
  StoreU32(blob.data() + header::kHeaderCrc, Crc32c(blob.data(), header::kHeaderCrc));
}

bool SameSpec(const BlobSpec& a, const BlobSpec& b) {
  return a.kind == b.kind && a.dk == b.dk && a.dv == b.dv && a.codec == b.codec &&
         a.bits == b.bits && a.p == b.p && a.r == b.r && a.smoothing == b.smoothing;
}

TEST(ParseBlob, ReturnsTheSpecOfEverySealedBlob) {
  uint32_t seed = 1;
  for (auto [dk, dv] : {std::pair{128, 128}, std::pair{16, 32}, std::pair{64, 128}}) {
    for (BlobSpec s : AllSpecs(dk, dv)) {
      s.kind = seed % 2 ? StateKind::kGdn : StateKind::kKda;
      s.p = 1 + seed % 32;
      const std::vector<uint8_t> blob = RandomBlob(s, seed++);
      const StatusOr<BlobSpec> parsed = ParseBlob(blob);
      ASSERT_TRUE(parsed.ok()) << s.ToString() << ": " << parsed.status().ToString();
      EXPECT_TRUE(SameSpec(*parsed, s)) << parsed->ToString() << " vs " << s.ToString();
      // The header fields sit where header:: says, little-endian.
      const uint8_t* h = blob.data();
      EXPECT_EQ(LoadU32(h + header::kMagic), kBlobMagic);
      EXPECT_EQ(h[0], 'L');
      EXPECT_EQ(h[3], 'T');
      EXPECT_EQ(LoadU16(h + header::kVersion), 1);
      EXPECT_EQ(LoadU16(h + header::kHeaderSize), 64);
      EXPECT_EQ(h[header::kCodec], static_cast<uint8_t>(s.codec));
      EXPECT_EQ(h[header::kBits], s.bits);
      EXPECT_EQ(h[header::kWindow], s.p);
      EXPECT_EQ(h[header::kRank], s.r);
      EXPECT_EQ(h[header::kOrientation], 1);
      EXPECT_EQ(LoadU16(h + header::kDk), dk);
      EXPECT_EQ(LoadU16(h + header::kDv), dv);
      EXPECT_EQ(LoadU32(h + header::kPayloadBytes), ComputeLayout(s).payload_bytes);
      EXPECT_EQ(LoadU32(h + header::kFingerprint), LayoutFingerprint(s));
      EXPECT_EQ(LoadU32(h + header::kPayloadCrc), Crc32c(h + 64, blob.size() - 64));
      for (size_t i = header::kReserved; i < header::kHeaderCrc; ++i) EXPECT_EQ(h[i], 0) << i;
    }
  }
}

TEST(ParseHeader, ReadsTheDeclaredSpecOfAnIntactHeaderOnly) {
  const BlobSpec s = BlobSpec::Leap(StateKind::kKda, 6, 16, 32);
  std::vector<uint8_t> blob = RandomBlob(s, 4);
  StatusOr<BlobSpec> declared = ParseHeader(blob);
  ASSERT_TRUE(declared.ok()) << declared.status().ToString();
  EXPECT_TRUE(SameSpec(*declared, s)) << declared->ToString();
  // A damaged payload is ParseBlob's to find: the header still says what the blob claims to be.
  blob[kHeaderBytes + 3] ^= 0x40;
  EXPECT_FALSE(ParseBlob(blob).ok());
  ASSERT_TRUE(ParseHeader(blob).ok());
  EXPECT_TRUE(SameSpec(*ParseHeader(blob), s));
  // A header that fails its own checksum declares nothing.
  blob[header::kBits] ^= 1;
  EXPECT_EQ(ParseHeader(blob).status().code(), StatusCode::kDataLoss);
  EXPECT_EQ(ParseHeader(std::span(blob).first(kHeaderBytes - 1)).status().code(),
            StatusCode::kDataLoss);
}

void ExpectCorrupt(const std::vector<uint8_t>& blob, const std::string& what) {
  const StatusOr<BlobSpec> parsed = ParseBlob(blob);
  ASSERT_FALSE(parsed.ok()) << what;
  const StatusCode c = parsed.status().code();
  EXPECT_TRUE(c == StatusCode::kDataLoss || c == StatusCode::kInvalidArgument)
      << what << ": " << parsed.status().ToString();
}

TEST(ParseBlob, RejectsEveryTruncationAndExtension) {
  const BlobSpec s = BlobSpec::Leap(StateKind::kGdn, 8, 16, 32);
  const std::vector<uint8_t> blob = RandomBlob(s, 5);
  ASSERT_TRUE(ParseBlob(blob).ok());
  for (size_t n = 0; n < blob.size(); ++n) {
    // A fresh allocation of exactly n bytes, so ASan catches a read past the end.
    const std::vector<uint8_t> cut(blob.begin(), blob.begin() + n);
    const StatusOr<BlobSpec> parsed = ParseBlob(cut);
    ASSERT_FALSE(parsed.ok()) << "length " << n;
    EXPECT_EQ(parsed.status().code(), StatusCode::kDataLoss) << n << ": " << parsed.status().ToString();
  }
  std::vector<uint8_t> longer = blob;
  longer.push_back(0);
  ExpectCorrupt(longer, "one byte too long");
}

TEST(ParseBlob, RejectsEveryFlippedHeaderBitAndSampledPayloadBits) {
  for (const BlobSpec& s : {BlobSpec::Leap(StateKind::kKda, 6, 16, 32), Plain(Codec::kFp32, 32)}) {
    std::vector<uint8_t> blob = RandomBlob(s, 9);
    for (size_t byte = 0; byte < kHeaderBytes; ++byte) {
      for (int bit = 0; bit < 8; ++bit) {
        blob[byte] ^= static_cast<uint8_t>(1u << bit);
        ExpectCorrupt(blob, s.ToString() + " header byte " + std::to_string(byte) + " bit " +
                                std::to_string(bit));
        blob[byte] ^= static_cast<uint8_t>(1u << bit);
      }
    }
    std::mt19937 rng(17);
    std::uniform_int_distribution<size_t> pos(kHeaderBytes, blob.size() - 1);
    for (int i = 0; i < 300; ++i) {
      const size_t at = i < 2 ? (i == 0 ? kHeaderBytes : blob.size() - 1) : pos(rng);
      const uint8_t mask = static_cast<uint8_t>(1u + rng() % 255);
      blob[at] ^= mask;
      const StatusOr<BlobSpec> parsed = ParseBlob(blob);
      ASSERT_FALSE(parsed.ok()) << "payload byte " << at;
      EXPECT_EQ(parsed.status().code(), StatusCode::kDataLoss);
      blob[at] ^= mask;
    }
    ASSERT_TRUE(ParseBlob(blob).ok());
  }
}

// ParseBlobHeader (the header, the blob's size and its payload's CRC from elsewhere) answers
// exactly as ParseBlob of the whole blob: every flipped header bit with and without a resealed
// header CRC, damaged payloads, and blobs cut or extended past the header.
TEST(ParseBlobHeader, AnswersAsParseBlobOfTheWholeBlob) {
  const auto same = [](const std::vector<uint8_t>& blob, const std::string& what) {
    const StatusOr<BlobSpec> whole = ParseBlob(blob);
    const uint32_t payload_crc = Crc32c(blob.data() + kHeaderBytes, blob.size() - kHeaderBytes);
    const StatusOr<BlobSpec> parts =
        ParseBlobHeader(std::span(blob).first(kHeaderBytes), blob.size(), payload_crc);
    ASSERT_EQ(whole.ok(), parts.ok()) << what;
    if (whole.ok()) {
      EXPECT_TRUE(SameSpec(*whole, *parts)) << what;
    } else {
      EXPECT_EQ(whole.status().code(), parts.status().code()) << what;
      EXPECT_EQ(whole.status().message(), parts.status().message()) << what;
    }
  };
  std::mt19937 rng(29);
  for (const BlobSpec& s : {BlobSpec::Leap(StateKind::kKda, 6, 16, 32), Plain(Codec::kFp32, 32),
                            BlobSpec::Leap(StateKind::kGdn, 4, 128, 128)}) {
    std::vector<uint8_t> blob = RandomBlob(s, 11);
    same(blob, "sealed");
    for (size_t byte = 0; byte < kHeaderBytes; ++byte) {
      for (int bit = 0; bit < 8; ++bit) {
        std::vector<uint8_t> b = blob;
        b[byte] ^= static_cast<uint8_t>(1u << bit);
        const std::string what =
            s.ToString() + " header byte " + std::to_string(byte) + " bit " + std::to_string(bit);
        same(b, what);
        if (byte < header::kHeaderCrc) {
          ResealHeader(b);
          same(b, what + " resealed");
        }
      }
    }
    for (int i = 0; i < 50; ++i) {
      std::vector<uint8_t> b = blob;
      b[kHeaderBytes + rng() % (b.size() - kHeaderBytes)] ^= static_cast<uint8_t>(1u + rng() % 255);
      same(b, "payload");
    }
    for (size_t n : {kHeaderBytes, kHeaderBytes + 1, blob.size() - 1, blob.size() + 1}) {
      std::vector<uint8_t> b = blob;
      b.resize(n, 0);
      same(b, "length " + std::to_string(n));
    }
  }
}

TEST(ParseBlob, ResealedHeaderEditsAreStillRejected) {
  const BlobSpec s = BlobSpec::Leap(StateKind::kGdn, 8, 16, 32);
  const std::vector<uint8_t> good = RandomBlob(s, 3);
  auto edited = [&](auto edit) {
    std::vector<uint8_t> b = good;
    edit(b.data());
    ResealHeader(b);
    return ParseBlob(b).status();
  };
  Status st = edited([](uint8_t* h) { StoreU16(h + header::kVersion, 2); });
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.ToString();
  EXPECT_NE(st.message().find("version"), std::string::npos) << st.message();
  st = edited([](uint8_t* h) { StoreU16(h + header::kVersion, 0); });
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.ToString();

  st = edited([](uint8_t* h) { h[header::kReserved + 5] = 1; });
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.ToString();
  EXPECT_NE(st.message().find("reserved"), std::string::npos) << st.message();
  st = edited([](uint8_t* h) { h[header::kOrientation] = 0; });
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.ToString();
  st = edited([](uint8_t* h) { StoreU16(h + header::kFlags, 0x3); });
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.ToString();
  st = edited([](uint8_t* h) { h[header::kCodec] = 7; });
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.ToString();
  st = edited([](uint8_t* h) { h[header::kKind] = 0; });
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.ToString();
  st = edited([](uint8_t* h) { h[header::kRank] = 9; });
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.ToString();
  st = edited([](uint8_t* h) { h[header::kMagic] ^= 1; });
  EXPECT_EQ(st.code(), StatusCode::kDataLoss) << st.ToString();
  st = edited([](uint8_t* h) { StoreU16(h + header::kHeaderSize, 65); });
  EXPECT_EQ(st.code(), StatusCode::kDataLoss) << st.ToString();

  // The header claims another shape: payload size, blob size or fingerprint disagree.
  st = edited([](uint8_t* h) { StoreU16(h + header::kDk, 32); });
  EXPECT_FALSE(st.ok());
  st = edited([](uint8_t* h) {  // dk and dv swapped: same payload size, other fingerprint
    StoreU16(h + header::kDk, 32);
    StoreU16(h + header::kDv, 16);
  });
  EXPECT_EQ(st.code(), StatusCode::kDataLoss) << st.ToString();
  st = edited([](uint8_t* h) {  // consistent size field, wrong blob size
    BlobSpec other = BlobSpec::Leap(StateKind::kGdn, 8, 32, 32);
    StoreU16(h + header::kDk, 32);
    StoreU32(h + header::kPayloadBytes, static_cast<uint32_t>(ComputeLayout(other).payload_bytes));
    StoreU32(h + header::kFingerprint, LayoutFingerprint(other));
  });
  EXPECT_EQ(st.code(), StatusCode::kDataLoss) << st.ToString();
  // fp32 16x32 and 32x16 payloads have the same size: only the fingerprint tells them apart.
  {
    const BlobSpec f = [] {
      BlobSpec p = Plain(Codec::kFp32, 32);
      p.dk = 16;
      p.dv = 32;
      return p;
    }();
    std::vector<uint8_t> b = RandomBlob(f, 4);
    StoreU16(b.data() + header::kDk, 32);
    StoreU16(b.data() + header::kDv, 16);
    ResealHeader(b);
    const StatusOr<BlobSpec> parsed = ParseBlob(b);
    ASSERT_FALSE(parsed.ok());
    EXPECT_EQ(parsed.status().code(), StatusCode::kDataLoss);
    EXPECT_NE(parsed.status().message().find("fingerprint"), std::string::npos);
  }
  st = edited([](uint8_t* h) { StoreU32(h + header::kPayloadCrc, LoadU32(h + header::kPayloadCrc) ^ 1u); });
  EXPECT_EQ(st.code(), StatusCode::kDataLoss) << st.ToString();
}

}  // namespace
}  // namespace leapcache
