// The data plane's session table (service/facade/engine_session_table.h): ids, Acquire/Remove,
// idle expiry that never reaps a session in use, and the end of a session releasing its
// connection and buffer imports.
#include <gtest/gtest.h>

#include <memory>

#include "service/facade/engine_session_table.h"

namespace leapcache::server {
namespace {

// Counts how many of its regions and connections are alive, to see them released.
struct Liveness {
  int regions = 0;
  int connections = 0;
};

class CountedRegion final : public transport::RemoteRegion {
 public:
  explicit CountedRegion(Liveness* l) : l_(l) { ++l_->regions; }
  ~CountedRegion() override { --l_->regions; }
  const transport::BufferDescriptor& descriptor() const override { return d_; }

 private:
  Liveness* l_;
  transport::BufferDescriptor d_;
};

class CountedConnection final : public transport::PeerConnection {
 public:
  explicit CountedConnection(Liveness* l) : l_(l) { ++l_->connections; }
  ~CountedConnection() override {
    // Imports must be gone before their connection.
    EXPECT_EQ(l_->regions, 0);
    --l_->connections;
  }
  transport::TransportKind kind() const override { return transport::TransportKind::kUcx; }
  absl::StatusOr<std::unique_ptr<transport::RemoteRegion>> Import(
      const transport::BufferDescriptor&) override {
    return std::unique_ptr<transport::RemoteRegion>(new CountedRegion(l_));
  }
  absl::Status Execute(transport::RemoteRegion&, std::span<const transport::TransferOp>,
                       absl::Time) override {
    return absl::OkStatus();
  }
  absl::Status health() const override { return absl::OkStatus(); }

 private:
  Liveness* l_;
};

std::unique_ptr<EngineSession> MakeSession(Liveness* l, absl::Duration ttl) {
  auto s = std::make_unique<EngineSession>(EngineIdentity{"engine", "", 0, "", -1}, "",
                                           transport::TransportKind::kUcx, ttl,
                                           std::make_unique<CountedConnection>(l));
  absl::MutexLock lock(&s->mu);
  auto region = s->connection->Import({});
  EXPECT_TRUE(region.ok());
  s->buffers[1] = std::move(region).value();
  return s;
}

TEST(EngineSessionTable, RemoveEndsTheSessionAndReleasesItsImportsThenItsConnection) {
  Liveness l;
  EngineSessionTable table(absl::Hours(1));
  const uint64_t id = table.Add(MakeSession(&l, absl::Hours(1)));
  EXPECT_NE(id, 0u);
  EXPECT_EQ(l.regions, 1);
  EXPECT_EQ(l.connections, 1);
  ASSERT_TRUE(table.Acquire(id).ok());
  ASSERT_TRUE(table.Remove(id).ok());
  EXPECT_EQ(l.regions, 0);
  EXPECT_EQ(l.connections, 0);
  EXPECT_EQ(table.Acquire(id).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(table.Remove(id).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(table.size(), 0u);
}

TEST(EngineSessionTable, IdsAreNeverReused) {
  Liveness l;
  EngineSessionTable table(absl::Hours(1));
  const uint64_t a = table.Add(MakeSession(&l, absl::Hours(1)));
  ASSERT_TRUE(table.Remove(a).ok());
  const uint64_t b = table.Add(MakeSession(&l, absl::Hours(1)));
  EXPECT_NE(a, b);
}

TEST(EngineSessionTable, IdleSessionsExpireButNotWhileInUse) {
  Liveness l;
  EngineSessionTable table(absl::Hours(1));  // reaped by hand below
  const uint64_t id = table.Add(MakeSession(&l, absl::Milliseconds(1)));
  {
    absl::StatusOr<EngineSessionTable::Use> use = table.Acquire(id);
    ASSERT_TRUE(use.ok());
    absl::SleepFor(absl::Milliseconds(20));
    EXPECT_EQ(table.ReapExpired(), 0u) << "a session in use was reaped";
    EXPECT_EQ(l.connections, 1);
  }
  absl::SleepFor(absl::Milliseconds(20));
  EXPECT_EQ(table.ReapExpired(), 1u);
  EXPECT_EQ(l.connections, 0);
  EXPECT_EQ(l.regions, 0);
  EXPECT_EQ(table.Acquire(id).status().code(), absl::StatusCode::kNotFound);
}

TEST(EngineSessionTable, RemoveLockedEndsASessionFromWithinItsCall) {
  Liveness l;
  EngineSessionTable table(absl::Hours(1));
  const uint64_t id = table.Add(MakeSession(&l, absl::Hours(1)));
  {
    absl::StatusOr<EngineSessionTable::Use> use = table.Acquire(id);
    ASSERT_TRUE(use.ok());
    EngineSession& s = **use;
    absl::MutexLock lock(&s.mu);
    table.RemoveLocked(use->id(), s);
    EXPECT_TRUE(s.ended);
  }
  EXPECT_EQ(l.connections, 0);
  EXPECT_EQ(table.size(), 0u);
}

TEST(EngineSessionTable, DestructionEndsEverySession) {
  Liveness a, b;
  {
    EngineSessionTable table(absl::Milliseconds(10));
    table.Add(MakeSession(&a, absl::Hours(1)));
    table.Add(MakeSession(&b, absl::Hours(1)));
    EXPECT_EQ(a.connections + b.connections, 2);
  }
  EXPECT_EQ(a.connections + b.connections, 0);
  EXPECT_EQ(a.regions + b.regions, 0);
}

}  // namespace
}  // namespace leapcache::server
