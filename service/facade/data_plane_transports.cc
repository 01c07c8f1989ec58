#include "service/facade/data_plane_transports.h"

#include <unistd.h>

#include <utility>

#include "absl/strings/str_cat.h"

namespace leapcache::server {

using transport::TransportKind;

std::unique_ptr<DataPlaneTransports> DataPlaneTransports::Create(
    const transport::ServiceSettings& settings) {
  auto t = std::make_unique<DataPlaneTransports>();
  char host[256] = {};
  if (gethostname(host, sizeof(host) - 1) == 0) t->host_ = host;
  for (const transport::Backend& b : transport::Backends()) {
    Entry e{&b, nullptr, absl::OkStatus()};
    absl::StatusOr<std::unique_ptr<transport::ServiceBackend>> made = b.make_service(settings);
    if (made.ok()) {
      e.service = std::move(made).value();
      e.status = e.service->status();
    } else {
      e.status = made.status();
    }
    t->entries_.push_back(std::move(e));
  }
  return t;
}

transport::PeerInfo DataPlaneTransports::Peer(const std::string& host, pid_t pid,
                                              const std::string& gpu_uuid) const {
  return {host, !host.empty() && host == host_, pid, gpu_uuid};
}

const DataPlaneTransports::Entry* DataPlaneTransports::Find(TransportKind kind) const {
  for (const Entry& e : entries_) {
    if (e.backend->kind == kind) return &e;
  }
  return nullptr;
}

transport::Capabilities DataPlaneTransports::capabilities(TransportKind kind) const {
  const Entry* e = Find(kind);
  if (e == nullptr || !e->status.ok()) return {};
  return e->service->capabilities();
}

absl::StatusOr<transport::Offer> DataPlaneTransports::Choose(
    std::span<const transport::Offer> offers, const transport::PeerInfo& peer) const {
  for (const Entry& e : entries_) {
    if (!e.status.ok()) continue;
    for (const transport::Offer& offer : offers) {
      if (offer.kind == e.backend->kind && e.service->CanServe(offer, peer)) return offer;
    }
  }
  std::string offered;
  for (const transport::Offer& offer : offers) {
    absl::StrAppend(&offered, offered.empty() ? "" : ", ", transport::TransportName(offer.kind));
    const Entry* e = Find(offer.kind);
    if (e == nullptr) {
      absl::StrAppend(&offered, ": not built");
    } else if (!e->status.ok()) {
      absl::StrAppend(&offered, ": ", e->status.ToString());
    } else {
      absl::StrAppend(&offered, ": cannot serve this engine");
    }
  }
  return absl::FailedPreconditionError(
      absl::StrCat("no offered transport is available in this service (", offered, ")"));
}

absl::StatusOr<std::unique_ptr<transport::PeerConnection>> DataPlaneTransports::Connect(
    const transport::Offer& offer, const transport::PeerInfo& peer) const {
  const Entry* e = Find(offer.kind);
  if (e == nullptr || !e->status.ok()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "transport ", transport::TransportName(offer.kind), " is not available in this service"));
  }
  return e->service->Connect(offer, peer);
}

}  // namespace leapcache::server
