// The compute seam's CUDA backend on spans in device memory against the same calls on host
// spans, through the Compute interface as the service calls it: dense states encoded from device
// memory seal the same blobs byte for byte, blobs decoded into device memory are the same bytes,
// and a session stepped on device vectors gives the same outputs bit for bit, token after token
// across refits, with steps of non-finite vectors refused among them and moving nothing. Each in
// place (aligned device memory) and staged on the device (offsets the kernels cannot read in
// place); formats without kernels staged through the host for the CPU reference. Device outputs
// start poisoned, so an unwritten byte shows.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gpu/format/half.h"
#include "gpu/reference/codec.h"
#include "service/compute/compute.h"
#include "tests/gpu/device_buffer.h"
#include "tests/unit/compute/live_states_test_util.h"

namespace leapcache::compute {
namespace {

using leapcache::testing::DeviceBuffer;

std::string Describe(size_t i) { return "state " + std::to_string(i); }

std::unique_ptr<Compute> Cuda() {
  absl::StatusOr<std::unique_ptr<Compute>> c = MakeCompute(Choice::kCuda, 0);
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? *std::move(c) : nullptr;
}

// `n` random dense states of dk x dv in `dtype`, little-endian.
std::vector<uint8_t> RandomStates(int n, int dk, int dv, DType dtype, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, 0.4f);
  const size_t elements = static_cast<size_t>(n) * dk * dv;
  std::vector<uint8_t> bytes(elements * (dtype == DType::kFp32 ? 4 : 2));
  for (size_t i = 0; i < elements; ++i) {
    const float x = normal(rng);
    if (dtype == DType::kFp32) {
      std::memcpy(bytes.data() + 4 * i, &x, 4);
    } else {
      const uint16_t h = FloatToBf16(x);
      std::memcpy(bytes.data() + 2 * i, &h, 2);
    }
  }
  return bytes;
}

// Device memory holding `host` at byte offset `at` of a larger allocation.
struct DeviceCopy {
  DeviceCopy(const std::vector<uint8_t>& host, size_t at) : buffer(host.size() + 64), at(at) {
    LEAPCACHE_CUDA_CHECK(cudaMemset(buffer.get(), 0xFF, buffer.size()));
    LEAPCACHE_CUDA_CHECK(
        cudaMemcpy(buffer.get() + at, host.data(), host.size(), cudaMemcpyHostToDevice));
    size = host.size();
  }
  uint8_t* data() const { return buffer.get() + at; }
  std::span<uint8_t> span() const { return {data(), size}; }
  std::vector<uint8_t> Download() const {
    std::vector<uint8_t> host(size);
    LEAPCACHE_CUDA_CHECK(cudaMemcpy(host.data(), data(), size, cudaMemcpyDeviceToHost));
    return host;
  }
  DeviceBuffer<uint8_t> buffer;
  size_t at = 0;
  size_t size = 0;
};

struct CodecCase {
  BlobSpec spec;
  DenseFormat format;
};

std::vector<CodecCase> Codecs() {
  return {
      {BlobSpec::Leap(StateKind::kGdn, 8, 128, 128), {DType::kFp32, Orientation::kKV}},
      {BlobSpec::Leap(StateKind::kKda, 8, 128, 128), {DType::kBf16, Orientation::kVK}},
      {BlobSpec::Leap(StateKind::kGdn, 4, 128, 128), {DType::kBf16, Orientation::kKV}},
      // No kernels at 64 x 64: the CPU reference, device spans staged through the host.
      {BlobSpec::Leap(StateKind::kGdn, 8, 64, 64), {DType::kFp32, Orientation::kVK}},
  };
}

TEST(DeviceSpansTest, EncodingFromDeviceMemorySealsTheSameBlobs) {
  std::unique_ptr<Compute> cuda = Cuda();
  ASSERT_NE(cuda, nullptr);
  ASSERT_TRUE(cuda->takes_device_memory());
  std::mt19937 rng(21);
  for (const CodecCase& c : Codecs()) {
    // More states than one launch takes (64), so the batches split a device span too.
    const std::vector<uint8_t> states =
        RandomStates(70, c.spec.dk, c.spec.dv, c.format.dtype, rng);
    std::vector<std::vector<uint8_t>> want;
    ASSERT_TRUE(cuda->Encode(c.spec, c.format, {states}, Describe, &want).ok());
    ASSERT_EQ(want.size(), 70u);
    // In place, then at an offset of half an element pair (the kernels move two at a time).
    for (size_t at : {size_t{0}, c.format.dtype == DType::kFp32 ? size_t{4} : size_t{2}}) {
      const DeviceCopy device(states, at);
      std::vector<std::vector<uint8_t>> got;
      const absl::Status st =
          cuda->Encode(c.spec, c.format, {device.span(), Memory::kDevice}, Describe, &got);
      ASSERT_TRUE(st.ok()) << c.spec.ToString() << " at " << at << ": " << st;
      EXPECT_EQ(got, want) << c.spec.ToString() << " at +" << at << " ("
                           << cuda->EncoderFor(c.spec) << ")";
    }
  }
}

TEST(DeviceSpansTest, DecodingIntoDeviceMemoryWritesTheSameBytes) {
  std::unique_ptr<Compute> cuda = Cuda();
  ASSERT_NE(cuda, nullptr);
  std::mt19937 rng(22);
  for (const CodecCase& c : Codecs()) {
    const std::vector<uint8_t> states =
        RandomStates(24, c.spec.dk, c.spec.dv, c.format.dtype, rng);
    std::vector<std::vector<uint8_t>> blobs;
    ASSERT_TRUE(CpuCompute().Encode(c.spec, c.format, {states}, Describe, &blobs).ok());
    const size_t state_bytes = DenseStateBytes(c.format, c.spec.dk, c.spec.dv);
    const size_t batch = std::min<size_t>(blobs.size(), cuda->DecodeBatch(c.spec));
    auto blob = [&](size_t i) { return std::span<const uint8_t>(blobs[i]); };
    std::vector<uint8_t> want(batch * state_bytes, 0xFF);
    ASSERT_TRUE(cuda->Decode(c.spec, c.format, batch, blob, Describe, {want}).ok());
    for (size_t at : {size_t{0}, c.format.dtype == DType::kFp32 ? size_t{4} : size_t{2}}) {
      const DeviceCopy device(std::vector<uint8_t>(want.size(), 0xFF), at);  // poisoned
      const absl::Status st =
          cuda->Decode(c.spec, c.format, batch, blob, Describe, {device.span(), Memory::kDevice});
      ASSERT_TRUE(st.ok()) << c.spec.ToString() << " at " << at << ": " << st;
      EXPECT_TRUE(device.Download() == want)
          << c.spec.ToString() << " at +" << at << " (" << cuda->DecoderFor(c.spec) << ")";
    }
    // A damaged blob is refused naming it, and the device destination keeps its bytes.
    std::vector<std::vector<uint8_t>> damaged = blobs;
    damaged[batch - 1][kHeaderBytes + 5] ^= 0x10;
    const DeviceCopy device(std::vector<uint8_t>(want.size(), 0xAB), 0);
    const absl::Status st = cuda->Decode(
        c.spec, c.format, batch, [&](size_t i) { return std::span<const uint8_t>(damaged[i]); },
        Describe, {device.span(), Memory::kDevice});
    EXPECT_EQ(st.code(), absl::StatusCode::kDataLoss) << st;
    EXPECT_NE(st.message().find(Describe(batch - 1)), std::string::npos) << st;
    EXPECT_TRUE(device.Download() == std::vector<uint8_t>(want.size(), 0xAB));
  }
}

// One layer's vectors laid out in device memory at `at` bytes past 16-byte alignment (0: read
// in place; 2: q, k, v, g and beta all staged on the device).
struct DeviceStep {
  DeviceStep(const testing::RandomStep& in, size_t at) {
    for (const std::vector<float>* v : {&in.q, &in.k, &in.v, &in.g, &in.beta}) {
      std::vector<uint8_t> bytes(v->size() * 4);
      std::memcpy(bytes.data(), v->data(), bytes.size());
      parts.emplace_back(bytes, at);
    }
  }
  LayerStep Step(int layer, std::span<const int32_t> slot) const {
    auto floats = [](const DeviceCopy& d) {
      return std::span<const float>(reinterpret_cast<const float*>(d.data()), d.size / 4);
    };
    LayerStep s{layer,
                slot,
                DType::kFp32,
                parts[0].span(),
                parts[1].span(),
                parts[2].span(),
                floats(parts[3]),
                floats(parts[4])};
    s.memory = Memory::kDevice;
    return s;
  }
  std::vector<DeviceCopy> parts;
};

struct LiveCase {
  StateKind kind;
  bool fp32;  // fp32 live states; else the 8-bit window format
};

class DeviceStepTest : public ::testing::TestWithParam<LiveCase> {};

TEST_P(DeviceStepTest, StepsOnDeviceVectorsMatchHostVectorsBitForBit) {
  std::unique_ptr<Compute> cuda = Cuda();
  ASSERT_NE(cuda, nullptr);
  DecodeShape s;
  s.spec = BlobSpec::Leap(GetParam().kind, 8, 128, 128);
  if (GetParam().fp32) {
    s.spec.codec = Codec::kFp32;
    s.spec.bits = 32;
    s.spec.p = 1;
    s.spec.r = 0;
    s.spec.smoothing = false;
  }
  s.slots = 4;
  s.layers = 2;
  s.heads = 4;
  s.l2norm_qk = true;
  s.scale = 1.0f / std::sqrt(128.0f);
  // One session stepped on host vectors, two on the same vectors in device memory.
  std::vector<std::unique_ptr<LiveStates>> live;
  for (int i = 0; i < 3; ++i) {
    absl::StatusOr<std::unique_ptr<LiveStates>> l = cuda->OpenLiveStates(s);
    ASSERT_TRUE(l.ok()) << l.status();
    ASSERT_STREQ((*l)->name(), "cuda");
    ASSERT_TRUE((*l)->takes_device_memory());
    live.push_back(*std::move(l));
  }
  std::mt19937 rng(GetParam().kind == StateKind::kGdn ? 23 : 24);
  const std::vector<int32_t> slots = {2, -1, 0};
  const size_t out_floats = slots.size() * s.heads * s.spec.dv;
  std::vector<float> want(out_floats);
  // Past two window lengths, so refits run on states stepped from device vectors.
  const int tokens = 2 * s.spec.p + 3;
  for (int t = 0; t < tokens; ++t) {
    for (int l = 0; l < s.layers; ++l) {
      const testing::RandomStep in(s, static_cast<int>(slots.size()), rng);
      std::fill(want.begin(), want.end(), std::nanf(""));
      ASSERT_TRUE(live[0]->Step(in.Step(l, slots), testing::Fp32Out(want)).ok());
      for (size_t at : {size_t{0}, size_t{2}}) {
        const DeviceStep device(in, at);
        const DeviceCopy o(std::vector<uint8_t>(out_floats * 4, 0xFF), at);  // NaN-poisoned
        const LayerOutput out{DType::kFp32, o.span(), Memory::kDevice};
        // A non-finite input first, on tokens next to a refit (the window's last and the
        // next's first): refused by name, and no state moved (the good step below must still
        // match the session that never saw it, which a stepped or refitted state would not).
        if (t == 1 || t == s.spec.p - 1 || t == s.spec.p) {
          testing::RandomStep bad = in;
          std::vector<float>* vectors[5] = {&bad.q, &bad.k, &bad.v, &bad.g, &bad.beta};
          const char* names[5] = {"q", "k", "v", "g", "beta"};
          const int which = (t + l + static_cast<int>(at)) % 5;
          const size_t index = vectors[which]->size() / 2 + 1;
          (*vectors[which])[index] = (t + at) % 2 ? std::nanf("") : -INFINITY;
          const DeviceStep poisoned(bad, at);
          const absl::Status refused = live[at == 0 ? 1 : 2]->Step(poisoned.Step(l, slots), out);
          EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument) << refused;
          EXPECT_EQ(refused.message(), absl::StrCat(names[which], "[", index, "] is not finite"));
        }
        const absl::Status st = live[at == 0 ? 1 : 2]->Step(device.Step(l, slots), out);
        ASSERT_TRUE(st.ok()) << "token " << t << " at +" << at << ": " << st;
        std::vector<float> got(out_floats);
        std::memcpy(got.data(), o.Download().data(), got.size() * 4);
        ASSERT_EQ(std::memcmp(got.data(), want.data(), got.size() * 4), 0)
            << "token " << t << " layer " << l << " at +" << at;
      }
    }
  }
  // The states themselves agree: every slot exports the same checkpoint.
  for (int slot = 0; slot < s.slots; ++slot) {
    const std::vector<std::vector<uint8_t>> host = std::move(live[0]->Export(slot)).value();
    EXPECT_EQ(std::move(live[1]->Export(slot)).value(), host) << slot;
    EXPECT_EQ(std::move(live[2]->Export(slot)).value(), host) << slot;
  }
}

INSTANTIATE_TEST_SUITE_P(Formats, DeviceStepTest,
                         ::testing::Values(LiveCase{StateKind::kGdn, false},
                                           LiveCase{StateKind::kKda, false},
                                           LiveCase{StateKind::kGdn, true}),
                         [](const auto& info) {
                           return std::string(info.param.kind == StateKind::kGdn ? "Gdn" : "Kda") +
                                  (info.param.fp32 ? "Fp32" : "Leap8");
                         });

}  // namespace
}  // namespace leapcache::compute
