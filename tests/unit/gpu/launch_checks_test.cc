// The kernel launchers' argument checks, without a GPU: every bad argument of every launcher is
// INVALID_ARGUMENT naming it, found before any CUDA call (so no device is needed to get it, and
// nothing is launched or written). Pointers here are host addresses that are never dereferenced.
//
// Each case changes one argument of a base call that passes every check, so each failure is
// that argument's own.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "gpu/kernels/kernels.h"
#include "gpu/kernels/launch_support.h"

namespace leapcache::kernels {
namespace {

// Host memory standing in for device buffers: 128-byte aligned, poisoned, compared afterwards.
struct FakeDeviceMemory {
  alignas(128) uint8_t bytes[4096];
  FakeDeviceMemory() { std::memset(bytes, 0xA5, sizeof(bytes)); }
  uint8_t* at(size_t offset) { return bytes + offset; }
  bool untouched() const {
    for (uint8_t b : bytes) {
      if (b != 0xA5) return false;
    }
    return true;
  }
};

void ExpectRejected(const Status& s, const std::string& names) {
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
  EXPECT_NE(s.message().find(names), std::string::npos)
      << "message \"" << s.message() << "\" does not name " << names;
}

class LaunchChecksTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto layout = MakePoolLayout(BlobSpec::Leap(StateKind::kGdn, 8), 4, 2);
    ASSERT_TRUE(layout.ok()) << layout.status().ToString();
    layout_ = *layout;
    step_.batch = 2;
    step_.num_heads = 2;
    step_.slot = reinterpret_cast<const int32_t*>(mem_.at(0));
    step_.q = mem_.at(128);
    step_.k = mem_.at(256);
    step_.v = mem_.at(384);
    step_.g = reinterpret_cast<const float*>(mem_.at(512));
    step_.beta = reinterpret_cast<const float*>(mem_.at(640));
    step_.o = mem_.at(768);
    dense_.batch = 2;
    dense_.slot = step_.slot;
    dense_.states = mem_.at(1024);
    ASSERT_TRUE(ValidateStepParams(step_, kKernelDim).ok());
    ASSERT_TRUE(ValidatePoolLayout(layout_, pool()).ok());
    ASSERT_TRUE(ValidateRegionBatch(layout_, dense_.slot, dense_.batch).ok());
    ASSERT_TRUE(ValidateDenseParams(dense_).ok());
  }
  void TearDown() override { EXPECT_TRUE(mem_.untouched()) << "a rejected launch wrote memory"; }

  uint8_t* pool() { return mem_.at(2048); }

  // The step's checks through every step launcher.
  void ExpectStepRejected(const StepParams& p, const std::string& names) {
    ExpectRejected(ValidateStepParams(p, kKernelDim), names);
    ExpectRejected(WindowDecodeStep(layout_, p, pool(), nullptr), names);
    ExpectRejected(WindowDecodeStepAndRefit(layout_, p, pool(), nullptr), names);
    ExpectRejected(Fp32DecodeStep(StateKind::kGdn, p, reinterpret_cast<float*>(pool()), 4, nullptr),
                   names);
  }

  // The pool's checks through every window launcher.
  void ExpectPoolRejected(const PoolLayout& l, const uint8_t* pool, const std::string& names) {
    SCOPED_TRACE(names);
    StepParams p = step_;
    p.num_heads = l.empty() ? step_.num_heads : l.num_heads();  // valid step params
    ExpectRejected(ValidatePoolLayout(l, pool), names);
    ExpectRejected(WindowDecodeStep(l, p, const_cast<uint8_t*>(pool), nullptr), names);
    ExpectRejected(WindowDecodeStepAndRefit(l, p, const_cast<uint8_t*>(pool), nullptr), names);
    ExpectRejected(WindowRefit(l, dense_.slot, 2, const_cast<uint8_t*>(pool), nullptr), names);
    ExpectRejected(WindowEncode(l, dense_, const_cast<uint8_t*>(pool), nullptr), names);
    ExpectRejected(WindowDecode(l, dense_, pool, nullptr), names);
  }

  // The per-region launches' batch checks.
  void ExpectBatchRejected(const PoolLayout& l, const int32_t* slot, int batch,
                           const std::string& names) {
    SCOPED_TRACE(names);
    DenseParams d = dense_;
    d.slot = slot;
    d.batch = batch;
    ExpectRejected(ValidateRegionBatch(l, slot, batch), names);
    ExpectRejected(WindowRefit(l, slot, batch, pool(), nullptr), names);
    ExpectRejected(WindowEncode(l, d, pool(), nullptr), names);
    ExpectRejected(WindowDecode(l, d, pool(), nullptr), names);
  }

  void ExpectDenseRejected(const DenseParams& d, const std::string& names) {
    SCOPED_TRACE(names);
    ExpectRejected(ValidateDenseParams(d), names);
    ExpectRejected(WindowEncode(layout_, d, pool(), nullptr), names);
    ExpectRejected(WindowDecode(layout_, d, pool(), nullptr), names);
  }

  FakeDeviceMemory mem_;
  PoolLayout layout_;
  StepParams step_;
  DenseParams dense_;
};

TEST_F(LaunchChecksTest, StepShapesDtypesAndScale) {
  StepParams p = step_;
  p.batch = -1;
  ExpectStepRejected(p, "batch must be >= 0 (got -1)");
  p = step_;
  p.num_heads = 0;
  ExpectStepRejected(p, "num_heads must be >= 1 (got 0)");
  p = step_;
  p.in_dtype = static_cast<DType>(7);
  ExpectStepRejected(p, "in_dtype");
  p = step_;
  p.out_dtype = static_cast<DType>(7);
  ExpectStepRejected(p, "out_dtype");
  for (float scale :
       {0.0f, std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
        -std::numeric_limits<float>::infinity()}) {
    p = step_;
    p.scale = scale;
    ExpectStepRejected(p, "scale must be finite and non-zero");
  }
  p = step_;
  p.batch = 1 << 20;
  p.num_heads = 1 << 10;
  ExpectStepRejected(p, "batch * num_heads is too large");
  // The window step's heads are the pool's.
  p = step_;
  p.num_heads = 3;
  ExpectRejected(WindowDecodeStep(layout_, p, pool(), nullptr),
                 "num_heads 3 differs from the pool's 2");
  ExpectRejected(WindowDecodeStepAndRefit(layout_, p, pool(), nullptr),
                 "num_heads 3 differs from the pool's 2");
}

TEST_F(LaunchChecksTest, StepPointersNullOrMisaligned) {
  const std::vector<std::pair<std::string, std::function<void(StepParams&, const void*)>>> fields =
      {
          {"slot", [](StepParams& p, const void* x) { p.slot = static_cast<const int32_t*>(x); }},
          {"q", [](StepParams& p, const void* x) { p.q = x; }},
          {"k", [](StepParams& p, const void* x) { p.k = x; }},
          {"v", [](StepParams& p, const void* x) { p.v = x; }},
          {"g", [](StepParams& p, const void* x) { p.g = static_cast<const float*>(x); }},
          {"beta", [](StepParams& p, const void* x) { p.beta = static_cast<const float*>(x); }},
          {"o", [](StepParams& p, const void* x) { p.o = const_cast<void*>(x); }},
      };
  for (const auto& [name, set] : fields) {
    SCOPED_TRACE(name);
    StepParams p = step_;
    set(p, nullptr);
    ExpectStepRejected(p, name + " is null");
    p = step_;
    set(p, mem_.at(3000 + 2));
    ExpectStepRejected(p, name + " must be 4-byte aligned");
  }
  // A batch of zero reads no pointer, so none is checked.
  StepParams empty;
  empty.num_heads = 2;
  EXPECT_TRUE(ValidateStepParams(empty, kKernelDim).ok());
}

TEST_F(LaunchChecksTest, Fp32StepPool) {
  ExpectRejected(Fp32DecodeStep(StateKind::kGdn, step_, nullptr, 4, nullptr), "state_pool is null");
  ExpectRejected(
      Fp32DecodeStep(StateKind::kGdn, step_, reinterpret_cast<float*>(pool() + 4), 4, nullptr),
      "state_pool must be 16-byte aligned");
  ExpectRejected(
      Fp32DecodeStep(StateKind::kGdn, step_, reinterpret_cast<float*>(pool()), 0, nullptr),
      "num_slots must be >= 1");
  ExpectRejected(Fp32DecodeStep(static_cast<StateKind>(9), step_, reinterpret_cast<float*>(pool()),
                                4, nullptr),
                 "unknown kind");
}

TEST_F(LaunchChecksTest, PoolPointerShapeAndCodec) {
  ExpectPoolRejected(layout_, nullptr, "pool is null");
  ExpectPoolRejected(layout_, pool() + 64, "pool must be 128-byte aligned");
  auto small = MakePoolLayout(BlobSpec::Leap(StateKind::kGdn, 8, 64, 64), 4, 2);
  ASSERT_TRUE(small.ok());
  ExpectPoolRejected(*small, pool(), "dk = dv = 128");
  BlobSpec int_col = BlobSpec::Leap(StateKind::kGdn, 8);
  int_col.codec = Codec::kIntCol;
  int_col.r = 0;
  int_col.p = 1;
  int_col.smoothing = false;
  auto other_codec = MakePoolLayout(int_col, 4, 2);
  ASSERT_TRUE(other_codec.ok());
  ExpectPoolRejected(*other_codec, pool(), "leap codec");
  // Every width the kernels serve, both kinds, passes.
  for (StateKind kind : {StateKind::kGdn, StateKind::kKda}) {
    for (int bits : {8, 6, 4}) {
      auto l = MakePoolLayout(BlobSpec::Leap(kind, bits), 4, 2);
      ASSERT_TRUE(l.ok());
      EXPECT_TRUE(ValidatePoolLayout(*l, pool()).ok()) << l->spec().ToString();
    }
  }
}

// A layout's offsets are MakePoolLayout's by construction (its fields are read-only, and it
// refuses what the kernels cannot size their shared arrays for); what a launcher can still be
// handed is an empty, default-constructed one.
TEST_F(LaunchChecksTest, EmptyLayoutIsRefused) {
  ExpectPoolRejected(PoolLayout{}, pool(), "pool layout is empty");
  BlobSpec spec = BlobSpec::Leap(StateKind::kGdn, 8);
  spec.p = kMaxWindow + 1;
  EXPECT_FALSE(MakePoolLayout(spec, 4, 2).ok());
  spec = BlobSpec::Leap(StateKind::kGdn, 8);
  spec.r = kMaxRank + 1;
  EXPECT_FALSE(MakePoolLayout(spec, 4, 2).ok());
  EXPECT_FALSE(MakePoolLayout(BlobSpec::Leap(StateKind::kGdn, 8), 0, 2).ok());
  EXPECT_FALSE(MakePoolLayout(BlobSpec::Leap(StateKind::kGdn, 8), 4, 0).ok());
  // The kernels index regions with an int: slot * num_heads + head.
  EXPECT_TRUE(MakePoolLayout(BlobSpec::Leap(StateKind::kGdn, 8), 1 << 25, 63).ok());
  auto too_many = MakePoolLayout(BlobSpec::Leap(StateKind::kGdn, 8), 1 << 25, 64);
  ASSERT_FALSE(too_many.ok());
  EXPECT_NE(too_many.status().message().find("num_slots * num_heads"), std::string::npos)
      << too_many.status().message();
}

TEST_F(LaunchChecksTest, RegionBatches) {
  ExpectBatchRejected(layout_, dense_.slot, -1, "batch must be >= 0 (got -1)");
  ExpectBatchRejected(layout_, nullptr, 1, "slot is null");
  ExpectBatchRejected(layout_, reinterpret_cast<const int32_t*>(mem_.at(2)), 1,
                      "slot must be 4-byte aligned");
  // One CTA per head, counted in int: 2^26 slots of 32 heads is 2^31.
  auto wide = MakePoolLayout(BlobSpec::Leap(StateKind::kGdn, 8), 1, 32);
  ASSERT_TRUE(wide.ok());
  ExpectBatchRejected(*wide, dense_.slot, 1 << 26, "batch * num_heads is too large");
  EXPECT_TRUE(ValidateRegionBatch(*wide, dense_.slot, (1 << 26) - 1).ok());
  // A batch of zero needs no slots.
  EXPECT_TRUE(ValidateRegionBatch(layout_, nullptr, 0).ok());
}

TEST_F(LaunchChecksTest, DenseStates) {
  DenseParams d = dense_;
  d.states = nullptr;
  ExpectDenseRejected(d, "states is null");
  d = dense_;
  d.dtype = static_cast<DType>(7);
  ExpectDenseRejected(d, "dtype must be fp32 or bf16");
  d = dense_;
  d.layout = static_cast<Orientation>(7);
  ExpectDenseRejected(d, "layout must be kv or vk");
  d = dense_;
  d.dtype = DType::kFp32;
  d.states = mem_.at(1024 + 4);
  ExpectDenseRejected(d, "states must be aligned to two elements (8 bytes)");
  d.dtype = DType::kBf16;
  EXPECT_TRUE(ValidateDenseParams(d).ok());  // two bf16 are four bytes
  d.states = mem_.at(1024 + 2);
  ExpectDenseRejected(d, "states must be aligned to two elements (4 bytes)");
}

}  // namespace
}  // namespace leapcache::kernels
