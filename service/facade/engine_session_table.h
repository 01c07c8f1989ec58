// EngineSessionTable: the engines attached to the data plane (data_plane.proto), each with its
// transport connection and the descriptors of its registered buffers.
//
// A session holds nothing of the store between calls (leases and put reservations live within
// one transfer call), so ending a session only releases its connection and buffer imports.
// Sessions end on Detach, when their transport reports the engine gone, or when idle past their
// TTL (the reaper thread checks every `reap_interval`); a session in use by a call is never
// reaped.
//
// Locking: the table's mutex is a leaf (never held while ending a session or calling out). A
// session's own mutex serializes its calls and guards its connection and buffers; it is taken
// after the table's is released.
// Thread-safe.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "transport/transport.h"

namespace leapcache::server {

struct EngineIdentity {
  std::string name;
  std::string host;
  uint32_t pid = 0;
  std::string gpu_uuid;
  int gpu_index = -1;
};

struct EngineSession {
  EngineSession(EngineIdentity identity, std::string tenant, transport::TransportKind transport,
                absl::Duration ttl, std::unique_ptr<transport::PeerConnection> connection)
      : identity(std::move(identity)), tenant(std::move(tenant)), transport(transport), ttl(ttl),
        connection(std::move(connection)) {}
  // Releases the buffers' imports, then the connection (imports must go first).
  void End() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);

  const EngineIdentity identity;
  // The tenant of the token that attached it; empty when the server has no tokens_file.
  const std::string tenant;
  const transport::TransportKind transport;
  const absl::Duration ttl;

  absl::Mutex mu;  // serializes the session's calls
  bool ended ABSL_GUARDED_BY(mu) = false;
  // Null for the inline transport.
  std::unique_ptr<transport::PeerConnection> connection ABSL_GUARDED_BY(mu);
  absl::flat_hash_map<uint64_t, std::unique_ptr<transport::RemoteRegion>> buffers
      ABSL_GUARDED_BY(mu);
  uint64_t next_buffer_id ABSL_GUARDED_BY(mu) = 1;
  // Bounce memory of the service's side of transfers, kept between calls.
  std::vector<uint8_t> staging ABSL_GUARDED_BY(mu);
};

class EngineSessionTable {
 public:
  // A session in use by a call: refreshes its idle clock when created and destroyed, and keeps
  // the reaper away meanwhile.
  class Use {
   public:
    Use(EngineSessionTable* table, uint64_t id, std::shared_ptr<EngineSession> session);
    ~Use();
    Use(Use&& other) noexcept;
    Use(const Use&) = delete;
    Use& operator=(const Use&) = delete;
    EngineSession& operator*() const { return *session_; }
    EngineSession* operator->() const { return session_.get(); }
    uint64_t id() const { return id_; }

   private:
    EngineSessionTable* table_;
    uint64_t id_;
    std::shared_ptr<EngineSession> session_;
  };

  explicit EngineSessionTable(absl::Duration reap_interval);
  // Stops the reaper and ends every session.
  ~EngineSessionTable();
  EngineSessionTable(const EngineSessionTable&) = delete;
  EngineSessionTable& operator=(const EngineSessionTable&) = delete;

  // Adds a session; returns its id (never 0, never reused).
  uint64_t Add(std::unique_ptr<EngineSession> session);
  // NOT_FOUND for an unknown, ended or expired session.
  absl::StatusOr<Use> Acquire(uint64_t id);
  // Removes and ends the session. NOT_FOUND if unknown. Waits for the session's call in
  // progress, if any (the caller must not hold the session's mutex).
  absl::Status Remove(uint64_t id);
  // Ends, within a call holding the session's mutex, a session whose transport failed.
  void RemoveLocked(uint64_t id, EngineSession& session) ABSL_EXCLUSIVE_LOCKS_REQUIRED(session.mu);
  // Ends sessions idle past their TTL; returns how many.
  size_t ReapExpired();
  size_t size() const;

 private:
  struct Entry {
    std::shared_ptr<EngineSession> session;
    absl::Time last_used;
    int in_use = 0;
  };
  void Release(uint64_t id);
  void ReaperLoop(absl::Duration interval);

  mutable absl::Mutex mu_;
  absl::flat_hash_map<uint64_t, Entry> sessions_ ABSL_GUARDED_BY(mu_);
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
  absl::Notification stop_;
  std::thread reaper_;
};

}  // namespace leapcache::server
