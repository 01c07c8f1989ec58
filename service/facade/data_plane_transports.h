// DataPlaneTransports: the service's side of every data-plane backend of this build
// (transport/backend.h), made once at start, and the choice among an engine's offers: the first
// backend in the table's order of preference that the engine offered, that is usable here and
// that can serve this engine (data_plane.proto). Thread-safe.
#pragma once

#include <sys/types.h>

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "transport/backend.h"

namespace leapcache::server {

class DataPlaneTransports {
 public:
  static std::unique_ptr<DataPlaneTransports> Create(const transport::ServiceSettings& settings);

  // What the service knows of an engine that named `host` (its host name), `pid` and
  // `gpu_uuid` (empty: none).
  transport::PeerInfo Peer(const std::string& host, pid_t pid, const std::string& gpu_uuid) const;
  // The memory the service reaches over `kind` ({} if unusable or not built).
  transport::Capabilities capabilities(transport::TransportKind kind) const;
  // The preferred offer both sides support; FAILED_PRECONDITION naming every offer and why this
  // service cannot take it if none.
  absl::StatusOr<transport::Offer> Choose(std::span<const transport::Offer> offers,
                                          const transport::PeerInfo& peer) const;
  // The service's connection to the engine for the chosen offer (nullptr for in-band backends).
  absl::StatusOr<std::unique_ptr<transport::PeerConnection>> Connect(
      const transport::Offer& offer, const transport::PeerInfo& peer) const;

 private:
  struct Entry {
    const transport::Backend* backend;
    std::unique_ptr<transport::ServiceBackend> service;  // null if it could not be made
    absl::Status status;                                 // why not usable, if not
  };
  const Entry* Find(transport::TransportKind kind) const;

  std::vector<Entry> entries_;  // in Backends() order
  std::string host_;            // this machine's host name
};

}  // namespace leapcache::server
