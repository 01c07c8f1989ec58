// The compute seam on the CPU backend: the one backend choice, the reference codec behind the
// interface (the same blobs and states as the dense-state functions), and spans in device memory
// refused with INVALID_ARGUMENT before anything is written.
#include "service/compute/compute.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "tests/unit/compute/live_states_test_util.h"

namespace leapcache::compute {
namespace {

std::string Describe(size_t i) { return "state " + std::to_string(i); }

std::vector<uint8_t> RandomStates(int n, int dk, int dv, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, 0.3f);
  std::vector<float> f(static_cast<size_t>(n) * dk * dv);
  for (float& x : f) x = normal(rng);
  std::vector<uint8_t> bytes(f.size() * 4);
  std::memcpy(bytes.data(), f.data(), bytes.size());
  return bytes;
}

TEST(ComputeTest, OneChoiceNamesItsValues) {
  EXPECT_EQ(*ParseChoice("cpu"), Choice::kCpu);
  EXPECT_EQ(*ParseChoice("cuda"), Choice::kCuda);
  EXPECT_EQ(*ParseChoice("auto"), Choice::kAuto);
  absl::StatusOr<Choice> bad = ParseChoice("gpu");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("\"gpu\""), std::string::npos) << bad.status();
  absl::StatusOr<std::unique_ptr<Compute>> cpu = MakeCompute(Choice::kCpu, 0);
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  EXPECT_STREQ((*cpu)->name(), "cpu");
  EXPECT_FALSE((*cpu)->takes_device_memory());
  absl::StatusOr<std::unique_ptr<Compute>> automatic = MakeCompute(Choice::kAuto, 0);
  ASSERT_TRUE(automatic.ok()) << automatic.status();
  absl::StatusOr<std::unique_ptr<Compute>> cuda = MakeCompute(Choice::kCuda, 0);
  if (!CudaBuilt()) {
    EXPECT_EQ(cuda.status().code(), absl::StatusCode::kUnimplemented) << cuda.status();
    EXPECT_STREQ((*automatic)->name(), "cpu");
  } else if (!cuda.ok()) {
    EXPECT_EQ(cuda.status().code(), absl::StatusCode::kUnavailable) << cuda.status();
    EXPECT_NE(cuda.status().message().find("compute_backend=cuda"), std::string::npos);
  }
}

TEST(ComputeTest, TheCpuBackendIsTheReferenceCodec) {
  std::mt19937 rng(11);
  const BlobSpec spec = BlobSpec::Leap(StateKind::kGdn, 8, 32, 32);
  const DenseFormat format{DType::kFp32, Orientation::kKV};
  const std::vector<uint8_t> states = RandomStates(3, 32, 32, rng);
  std::vector<std::vector<uint8_t>> blobs;
  ASSERT_TRUE(CpuCompute().Encode(spec, format, {states}, Describe, &blobs).ok());
  ASSERT_EQ(blobs.size(), 3u);
  const size_t state_bytes = DenseStateBytes(format, 32, 32);
  std::vector<float> scratch;
  for (size_t i = 0; i < 3; ++i) {
    absl::StatusOr<std::vector<uint8_t>> want = EncodeDenseState(
        spec, format, std::span(states).subspan(i * state_bytes, state_bytes), &scratch);
    ASSERT_TRUE(want.ok()) << want.status();
    EXPECT_EQ(blobs[i], *want) << i;
  }
  ASSERT_EQ(CpuCompute().DecodeBatch(spec), 1u);
  for (size_t i = 0; i < 3; ++i) {
    std::vector<uint8_t> got(state_bytes, 0xFF), want(state_bytes, 0xFF);
    ASSERT_TRUE(CpuCompute()
                    .Decode(spec, format, 1, [&](size_t) { return std::span(blobs[i]); },
                            Describe, {got})
                    .ok());
    ASSERT_TRUE(DecodeDenseState(blobs[i], format, want, &scratch).ok());
    EXPECT_EQ(got, want) << i;
  }
}

TEST(ComputeTest, TheCpuBackendRefusesDeviceMemoryAndWritesNothing) {
  std::mt19937 rng(12);
  const BlobSpec spec = BlobSpec::Leap(StateKind::kGdn, 8, 32, 32);
  const DenseFormat format{DType::kFp32, Orientation::kKV};
  const std::vector<uint8_t> states = RandomStates(1, 32, 32, rng);
  std::vector<std::vector<uint8_t>> blobs;
  absl::Status st = CpuCompute().Encode(spec, format, {states, Memory::kDevice}, Describe, &blobs);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_NE(st.message().find("device memory"), std::string::npos) << st;
  EXPECT_TRUE(blobs.empty());
  ASSERT_TRUE(CpuCompute().Encode(spec, format, {states}, Describe, &blobs).ok());
  std::vector<uint8_t> out(states.size(), 0xAB);
  st = CpuCompute().Decode(spec, format, 1, [&](size_t) { return std::span(blobs[0]); }, Describe,
                           {out, Memory::kDevice});
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_EQ(out, std::vector<uint8_t>(states.size(), 0xAB));

  DecodeShape shape;
  shape.spec = spec;
  shape.slots = 2;
  shape.layers = 1;
  shape.heads = 2;
  absl::StatusOr<std::unique_ptr<LiveStates>> live = CpuCompute().OpenLiveStates(shape);
  ASSERT_TRUE(live.ok()) << live.status();
  EXPECT_FALSE((*live)->takes_device_memory());
  testing::RandomStep inputs(shape, 1, rng);
  const std::vector<int32_t> slot = {1};
  std::vector<float> o(static_cast<size_t>(shape.heads) * shape.spec.dv, -7.0f);
  LayerStep on_device = inputs.Step(0, slot);
  on_device.memory = Memory::kDevice;
  EXPECT_EQ((*live)->Step(on_device, testing::Fp32Out(o)).code(),
            absl::StatusCode::kInvalidArgument);
  LayerOutput out_on_device = testing::Fp32Out(o);
  out_on_device.memory = Memory::kDevice;
  EXPECT_EQ((*live)->Step(inputs.Step(0, slot), out_on_device).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(o, std::vector<float>(o.size(), -7.0f));
  // Refused steps moved no state: the slot's next step is its first.
  std::vector<float> first(o.size()), again(o.size());
  ASSERT_TRUE((*live)->Step(inputs.Step(0, slot), testing::Fp32Out(first)).ok());
  ASSERT_TRUE((*live)->Reset(1).ok());
  ASSERT_TRUE((*live)->Step(inputs.Step(0, slot), testing::Fp32Out(again)).ok());
  EXPECT_EQ(first, again);
}

}  // namespace
}  // namespace leapcache::compute
