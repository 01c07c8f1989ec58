// What a tier that checks a put's units where they lie (MemoryTier::DigestUnits: the GPU tier's
// kernel, or a host tier hidden behind the CPU reference) must answer at commit: exactly what a
// host tier's checks answer for the same bytes, status and message, for every kind of damage.
// A fixture for the GPU tier's device test and the core's unit test alike.
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "gpu/format/format.h"
#include "service/core/checkpoint_store.h"
#include "service/core/host_tier.h"
#include "tests/unit/core/test_util.h"

namespace leapcache::core::testing {

inline BlobSpec Format(Codec codec, int bits, int d) {
  if (codec == Codec::kLeap) return BlobSpec::Leap(StateKind::kGdn, bits, d, d);
  BlobSpec s;
  s.kind = StateKind::kGdn;
  s.dk = d;
  s.dv = d;
  s.codec = codec;
  s.bits = bits;
  s.p = 1;
  s.r = 0;
  s.smoothing = false;
  return s;
}

inline NamespaceSpec SpecWithSide(const BlobSpec& format, DType conv) {
  NamespaceSpec spec = SmallSpec("tenant-digest", 3, 4, format);
  if (conv != DType{}) {
    spec.model.conv = {4 * 8, 3, conv};  // 8 channels per head, width 3
    spec.model.extra_bytes = 5;
  }
  return spec;
}

inline void SetU32(uint8_t* p, uint32_t v) { std::memcpy(p, &v, 4); }
inline void SetU16(uint8_t* p, uint16_t v) { std::memcpy(p, &v, 2); }

// One store on a digesting tier and one on a host tier, the same namespace in each: every put is
// committed in both from the same bytes, and the two answers must be the same.
class DigestComparisonTest : public ::testing::Test {
 protected:
  // The tier whose commits check digests: not host-addressable, DigestUnits implemented.
  virtual std::unique_ptr<MemoryTier> MakeDigestingTier(size_t budget_bytes, size_t page_bytes) = 0;

  void Open(const NamespaceSpec& spec) {
    std::vector<std::unique_ptr<MemoryTier>> d, h;
    d.push_back(MakeDigestingTier(64 * 65536, 65536));
    h.push_back(std::move(HostTier::Create("host", 64 * 65536, 65536)).value());
    digesting_ = std::move(CheckpointStore::Create(QuietOptions(), std::move(d))).value();
    host_ = std::move(CheckpointStore::Create(QuietOptions(), std::move(h))).value();
    ns_ = *digesting_->GetNamespace(*digesting_->RegisterNamespace(spec));
    ASSERT_EQ(*host_->RegisterNamespace(spec), ns_.id);
  }
  // Commits `bytes` (with `crc`) in both stores; the digesting store's status, after checking
  // that the host store's is the same code and message.
  absl::Status CommitBoth(const std::vector<uint8_t>& bytes, uint32_t crc, int key) {
    absl::Status answers[2];
    CheckpointStore* stores[2] = {digesting_.get(), host_.get()};
    for (int i = 0; i < 2; ++i) {
      PutRequest req;
      req.ns = ns_.id;
      req.hash = HashOf(key);
      req.position = PositionAt(1);
      req.heads = all();
      absl::StatusOr<Reservation> r = stores[i]->Reserve(req);
      EXPECT_TRUE(r.ok()) << r.status();
      if (!r.ok()) return r.status();
      EXPECT_TRUE(stores[i]->Upload(r->id, 0, bytes).ok());
      answers[i] = stores[i]->Commit(r->id, crc);
      if (!answers[i].ok()) {
        EXPECT_TRUE(stores[i]->Abort(r->id).ok());
      }
    }
    EXPECT_EQ(answers[0].code(), answers[1].code()) << answers[0] << " / " << answers[1];
    EXPECT_EQ(answers[0].message(), answers[1].message());
    return answers[0];
  }
  HeadRange all() const { return {0, ns_.spec.model.total_heads}; }
  uint8_t* Unit(std::vector<uint8_t>& bytes, size_t u) const {
    return bytes.data() + u * ns_.unit_bytes;
  }
  // Reseals unit u's blob after its payload changed, so that only the values are wrong.
  void Reseal(std::vector<uint8_t>& bytes, size_t u) const {
    SealBlob(ns_.spec.format, std::span<uint8_t>(Unit(bytes, u), ns_.blob_bytes));
  }
  void ResealHeader(std::vector<uint8_t>& bytes, size_t u) const {
    uint8_t* h = Unit(bytes, u);
    SetU32(h + header::kHeaderCrc, Crc32c(h, header::kHeaderCrc));
  }

  // Commits each of a list of corruptions of a clean checkpoint (every value rule, header and
  // payload damage, two bad values of which the lower is reported) in eight formats with and
  // without conv states, in both stores, expecting the same answer from each; the number of
  // corrupted puts refused in `refused_out`.
  void CompareCorruptedCommits(int* refused_out) {
    struct Case {
      Codec codec;
      int bits;
      DType conv;
    };
    const Case cases[] = {{Codec::kLeap, 8, DType::kBf16},  {Codec::kLeap, 4, DType{}},
                          {Codec::kLeap, 6, DType::kFp32},  {Codec::kIntRow, 8, DType::kFp16},
                          {Codec::kIntCol, 4, DType{}},     {Codec::kFp32, 32, DType::kFp16},
                          {Codec::kBf16, 16, DType::kFp32}, {Codec::kFp16, 16, DType::kBf16}};
    std::mt19937 rng(20261204);
    int key = 0, refused = 0;
    for (const Case& c : cases) {
      SCOPED_TRACE(Format(c.codec, c.bits, 32).ToString() + " conv " +
                   std::to_string(static_cast<int>(c.conv)));
      Open(SpecWithSide(Format(c.codec, c.bits, 32), c.conv));
      const size_t units = ns_.Units(all());
      const PayloadLayout l = ComputeLayout(ns_.spec.format);
      const std::vector<uint8_t> clean = CheckpointBytes(ns_, 7, all());
      auto any_unit = [&] { return static_cast<size_t>(rng() % units); };
      // Each corruption of the clean bytes; the answers are compared inside CommitBoth.
      std::vector<std::pair<std::string, std::function<void(std::vector<uint8_t>&)>>> edits;
      edits.push_back({"none", [](std::vector<uint8_t>&) {}});
      edits.push_back({"payload byte", [&](std::vector<uint8_t>& b) {
                         Unit(b, any_unit())[kHeaderBytes + rng() % l.payload_bytes] ^= 0x10;
                       }});
      edits.push_back(
          {"header byte", [&](std::vector<uint8_t>& b) { Unit(b, any_unit())[header::kDk] ^= 1; }});
      // The two fields in which a put's headers differ: a bad header checksum, and a payload
      // checksum field under a resealed header.
      edits.push_back({"header checksum", [&](std::vector<uint8_t>& b) {
                         Unit(b, any_unit())[header::kHeaderCrc + 1] ^= 4;
                       }});
      edits.push_back({"payload checksum field", [&](std::vector<uint8_t>& b) {
                         const size_t u = any_unit();
                         Unit(b, u)[header::kPayloadCrc] ^= 1;
                         ResealHeader(b, u);
                       }});
      edits.push_back({"declared bits", [&](std::vector<uint8_t>& b) {
                         const size_t u = any_unit();
                         Unit(b, u)[header::kBits] = c.bits == 8 ? 4 : 8;
                         ResealHeader(b, u);
                       }});
      edits.push_back({"reserved byte", [&](std::vector<uint8_t>& b) {
                         const size_t u = any_unit();
                         Unit(b, u)[header::kReserved + 3] = 1;
                         ResealHeader(b, u);
                       }});
      const auto value = [&](size_t offset, size_t bytes, size_t width, uint32_t bad) {
        return [&, offset, bytes, width, bad](std::vector<uint8_t>& b) {
          const size_t u = any_unit();
          const size_t n = bytes / width;
          // Two bad elements: the lower one is reported.
          for (size_t e : {rng() % n, rng() % n}) {
            uint8_t* p = Unit(b, u) + offset + e * width;
            if (width == 4)
              SetU32(p, bad);
            else
              SetU16(p, static_cast<uint16_t>(bad));
          }
          if (offset < ns_.blob_bytes) Reseal(b, u);
        };
      };
      const size_t payload = kHeaderBytes;
      if (l.row_scale_bytes > 0) {
        for (uint32_t bad : {0x7FC00000u, 0u, 0xBF800000u, 0x7F800000u}) {
          edits.push_back(
              {"row scale", value(payload + l.row_scale_offset, l.row_scale_bytes, 4, bad)});
        }
      }
      if (l.col_scale_bytes > 0) {
        edits.push_back({"column scale",
                         value(payload + l.col_scale_offset, l.col_scale_bytes, 4, 0x80000000u)});
      }
      if (c.codec == Codec::kFp32) {
        edits.push_back(
            {"fp32 element", value(payload + l.codes_offset, l.codes_bytes, 4, 0xFF800001u)});
      } else if (c.codec == Codec::kBf16) {
        edits.push_back(
            {"bf16 element", value(payload + l.codes_offset, l.codes_bytes, 2, 0x7F81u)});
      } else if (c.codec == Codec::kFp16) {
        edits.push_back(
            {"fp16 element", value(payload + l.codes_offset, l.codes_bytes, 2, 0xFC00u)});
      }
      if (l.comp_bytes > 0) {
        edits.push_back({"compensator", value(payload + l.comp_offset, l.comp_bytes, 2, 0x7E00u)});
      }
      if (ns_.conv_bytes > 0) {
        const size_t width = DTypeBytes(c.conv);
        const uint32_t bad = width == 4 ? 0x7F800000u : c.conv == DType::kBf16 ? 0xFF80u : 0x7C00u;
        edits.push_back({"conv", value(ns_.blob_bytes, ns_.conv_bytes, width, bad)});
        // Bad values in two units: the first unit's is reported.
        edits.push_back({"conv in two units", [&, width, bad](std::vector<uint8_t>& b) {
                           for (size_t u : {units - 1, units / 2}) {
                             uint8_t* p = Unit(b, u) + ns_.blob_bytes +
                                          (rng() % (ns_.conv_bytes / width)) * width;
                             if (width == 4)
                               SetU32(p, bad);
                             else
                               SetU16(p, static_cast<uint16_t>(bad));
                           }
                         }});
      }
      for (auto& [name, edit] : edits) {
        SCOPED_TRACE(name);
        for (int round = 0; round < 3; ++round) {
          std::vector<uint8_t> bytes = clean;
          edit(bytes);
          const absl::Status st = CommitBoth(bytes, Crc(bytes), ++key);
          if (name == "none") {
            ASSERT_TRUE(st.ok()) << st;
            absl::StatusOr<ReadLease> lease = digesting_->Get(ns_.id, HashOf(key), all());
            ASSERT_TRUE(lease.ok()) << lease.status();
            EXPECT_EQ(LeaseBytes(*lease), bytes);
            EXPECT_EQ(lease->UnitCrc(ns_.spec.model.linear_layers - 1, all().end - 1),
                      Crc({bytes.data() + (units - 1) * ns_.unit_bytes, ns_.unit_bytes}));
          } else {
            EXPECT_FALSE(st.ok());
            ++refused;
          }
          if (name == "none") break;
        }
      }
      // The right bytes under the wrong checksum.
      EXPECT_EQ(CommitBoth(clean, Crc(clean) ^ 1, ++key).code(), absl::StatusCode::kDataLoss);
    }
    *refused_out = refused;
  }

  std::unique_ptr<CheckpointStore> digesting_, host_;
  NamespaceInfo ns_;
};

}  // namespace leapcache::core::testing
