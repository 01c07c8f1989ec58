// The server's wire-only decoding (proto_convert.h), the one status conversion, addresses and
// the namespace fingerprint.
#include <gtest/gtest.h>

#include "service/grpc/grpc_status.h"
#include "service/config/host_port.h"
#include "service/facade/namespace_fingerprint.h"
#include "service/grpc/proto_convert.h"
#include "service/grpc/rpc_metrics.h"

namespace leapcache::server {
namespace {

TEST(WireTest, StatusCodesPassThroughUnchanged) {
  EXPECT_TRUE(ToGrpcStatus(absl::OkStatus()).ok());
  const grpc::Status s = ToGrpcStatus(absl::NotFoundError("unknown namespace 7"));
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(s.error_message(), "unknown namespace 7");
  EXPECT_EQ(ToGrpcStatus(absl::DataLossError("x")).error_code(), grpc::StatusCode::DATA_LOSS);
  EXPECT_EQ(ToGrpcStatus(absl::ResourceExhaustedError("x")).error_code(),
            grpc::StatusCode::RESOURCE_EXHAUSTED);
}

TEST(WireTest, HashesAndChains) {
  EXPECT_TRUE(HashFromProto(std::string(32, 'a'), "hash").ok());
  EXPECT_EQ(HashFromProto(std::string(31, 'a'), "hash").status().code(),
            absl::StatusCode::kInvalidArgument);
  absl::StatusOr<std::vector<core::BlockHash>> chain = ChainFromProto(std::string(64, 'b'));
  ASSERT_TRUE(chain.ok());
  EXPECT_EQ(chain->size(), 2u);
  EXPECT_EQ((*chain)[1][31], 'b');
  EXPECT_FALSE(ChainFromProto(std::string(65, 'b')).ok());
  EXPECT_TRUE(ChainFromProto("")->empty());  // the core rejects the empty chain
}

TEST(WireTest, EnumsAndNumbers) {
  v1::RegisterNamespaceRequest r;
  r.set_tenant("t");
  r.mutable_model()->set_kind(v1::STATE_KIND_KDA);
  r.mutable_model()->set_linear_layers(4000000000u);
  r.mutable_format()->set_codec(v1::CODEC_LEAP);
  absl::StatusOr<core::NamespaceSpec> s = NamespaceSpecFromProto(r);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->model.kind, StateKind::kKda);
  EXPECT_EQ(s->format.kind, StateKind::kKda);
  EXPECT_GT(s->model.linear_layers, 1024);  // still out of range for the core to report
  r.mutable_format()->set_codec(static_cast<v1::Codec>(42));
  EXPECT_EQ(NamespaceSpecFromProto(r).status().code(), absl::StatusCode::kInvalidArgument);
  r.mutable_format()->set_codec(v1::CODEC_UNSPECIFIED);
  EXPECT_FALSE(NamespaceSpecFromProto(r).ok());
  r.mutable_format()->set_codec(v1::CODEC_FP32);
  r.mutable_model()->set_kind(v1::STATE_KIND_UNSPECIFIED);
  EXPECT_FALSE(NamespaceSpecFromProto(r).ok());

  v1::DenseEncoding d;
  EXPECT_FALSE(DenseFromProto(d).ok());
  d.set_dtype(v1::DTYPE_BF16);
  d.set_layout(v1::LAYOUT_VK);
  ASSERT_TRUE(DenseFromProto(d).ok());
  EXPECT_EQ(DenseFromProto(d)->dtype, DType::kBf16);
  EXPECT_EQ(DenseFromProto(d)->layout, Orientation::kVK);

  v1::Position p;
  p.set_blocks(1ull << 63);
  EXPECT_FALSE(PositionFromProto(p).ok());
  EXPECT_EQ(HeadsFromProto(false, {}, 32)->end, 32);
}

TEST(WireTest, Addresses) {
  EXPECT_EQ(ParseHostPort("127.0.0.1:0")->port, 0);
  EXPECT_EQ(ParseHostPort("[::1]:7470")->host, "::1");
  EXPECT_EQ(FormatHostPort("::1", 5), "[::1]:5");
  for (const char* bad :
       {"7470", ":7470", "host:", "host:65536", "host:-1", "::1:7470", "[::1:7", "a b:1",
        "0.0.0.\n\n0:9470", "host\t:1", "[::1 ]:1", "h\x7F:1"}) {
    EXPECT_FALSE(ParseHostPort(bad).ok()) << bad;
  }
}

TEST(WireTest, FingerprintIgnoresTenantOnly) {
  core::NamespaceSpec a;
  a.tenant = "a";
  a.model = {48, 32, 128, 128, StateKind::kGdn};
  a.format = BlobSpec::Leap(StateKind::kGdn, 8);
  core::NamespaceSpec b = a;
  b.tenant = "b";
  EXPECT_EQ(NamespaceFingerprint(a), NamespaceFingerprint(b));
  EXPECT_EQ(NamespaceFingerprint(a).size(), 64u);
  b.format = BlobSpec::Leap(StateKind::kGdn, 6);
  EXPECT_NE(NamespaceFingerprint(a), NamespaceFingerprint(b));
  EXPECT_EQ(CanonicalModelFormat(a), "leapcache.v1 model=48,32,128,128,gdn format=leap,8,16,4,1");
}

TEST(WireTest, RpcMethodLabelsAreBounded) {
  EXPECT_EQ(RpcMetrics::MethodLabel("/leapcache.v1.StateCache/Lookup"), "StateCache/Lookup");
  EXPECT_EQ(RpcMetrics::MethodLabel("/grpc.health.v1.Health/Check"), "Health/Check");
  EXPECT_EQ(RpcMetrics::MethodLabel("/leapcache.v1.DataPlane/TransferGet"),
            "DataPlane/TransferGet");
  EXPECT_EQ(RpcMetrics::MethodLabel("/leapcache.v1.Decode/Step"), "Decode/Step");
  EXPECT_EQ(RpcMetrics::MethodLabel("/leapcache.v1.Decode/TransferGet"), "unknown");
  EXPECT_EQ(RpcMetrics::MethodLabel("/leapcache.v1.StateCache/Nope"), "unknown");
  EXPECT_EQ(RpcMetrics::MethodLabel("/x.Y/Lookup"), "unknown");
  // Every method of the three services has its label, the newest ones included.
  EXPECT_EQ(RpcMetrics::MethodLabel("/leapcache.v1.StateCache/LookupBatch"),
            "StateCache/LookupBatch");
  EXPECT_EQ(RpcMetrics::MethodLabel("/leapcache.v1.DataPlane/OpenTransferChannel"),
            "DataPlane/OpenTransferChannel");
  EXPECT_EQ(RpcMetrics::MethodLabel("/leapcache.v1.Decode/OpenStepChannel"),
            "Decode/OpenStepChannel");
  EXPECT_EQ(RpcMetrics::MethodLabel("/grpc.health.v1.Health/Watch"), "Health/Watch");
  EXPECT_EQ(RpcMetrics::MethodLabel("/leapcache.v1.StateCache/"), "unknown");
}

}  // namespace
}  // namespace leapcache::server
