#include "service/decode/decode_session_table.h"

#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/lock.h"
#include "base/status_macros.h"

namespace leapcache::decode {

DecodeSessionTable::DecodeSessionTable(const DecodeOptions& options, core::CheckpointStore* store,
                                       compute::Compute* compute)
    : options_(options),
      store_(store),
      compute_(compute != nullptr ? compute : &compute::CpuCompute()) {
  const absl::Duration interval = std::min(absl::Seconds(1), options_.idle_timeout / 4);
  reaper_ = std::thread([this, interval] {
    while (!stop_reaper_.WaitForNotificationWithTimeout(interval)) Reap(absl::Now());
  });
}

DecodeSessionTable::~DecodeSessionTable() {
  stop_reaper_.Notify();
  reaper_.join();
}

absl::StatusOr<SessionInfo> DecodeSessionTable::Open(const OpenRequest& request) {
  LC_ASSIGN_OR_RETURN(core::NamespaceInfo ns, store_->GetNamespace(request.ns));
  core::HeadRange heads = request.heads;
  if (heads.begin == 0 && heads.end == 0) heads = {0, ns.spec.model.total_heads};
  if (heads.begin < 0 || heads.empty() || heads.end > ns.spec.model.total_heads) {
    return absl::InvalidArgumentError(absl::StrCat("heads [", heads.begin, ", ", heads.end,
                                                   ") are not a range of the namespace's ",
                                                   ns.spec.model.total_heads, " heads"));
  }
  if (request.slots < 1 || request.slots > options_.max_slots) {
    return absl::InvalidArgumentError(
        absl::StrCat("slots must be in 1..", options_.max_slots, " (got ", request.slots, ")"));
  }
  if (!std::isfinite(request.scale) || request.scale < 0.0f) {
    return absl::InvalidArgumentError(
        absl::StrCat("scale must be finite and >= 0 (got ", request.scale, ")"));
  }
  compute::DecodeShape shape;
  shape.spec = ns.spec.format;
  shape.slots = request.slots;
  shape.layers = ns.spec.model.linear_layers;
  shape.heads = heads.size();
  shape.l2norm_qk = request.l2norm_qk;
  shape.scale = request.scale > 0.0f
                    ? request.scale
                    : 1.0f / std::sqrt(static_cast<float>(shape.spec.dk));  // FLA's default

  const size_t estimate = compute::LiveStateBytes(shape);
  {
    base::WriterLock lock(&mu_);
    if (sessions_.size() >= static_cast<size_t>(options_.max_sessions)) {
      ++stats_.refused;
      return absl::ResourceExhaustedError(
          absl::StrCat(options_.max_sessions, " decode sessions are open already"));
    }
    const std::string& tenant = ns.spec.tenant;
    if (options_.max_sessions_per_tenant > 0 &&
        per_tenant_[tenant] >= options_.max_sessions_per_tenant) {
      ++stats_.refused;
      return absl::ResourceExhaustedError(absl::StrCat(
          "tenant ", tenant, " holds ", per_tenant_[tenant],
          " decode sessions, its quota (tenant_max_decode_sessions)"));
    }
    if (estimate > options_.memory_budget - std::min(options_.memory_budget, reserved_bytes_)) {
      ++stats_.refused;
      return absl::ResourceExhaustedError(absl::StrCat(
          "a session of ", request.slots, " slots needs ", estimate, " bytes of live state; ",
          options_.memory_budget - std::min(options_.memory_budget, reserved_bytes_), " of ",
          options_.memory_budget, " are free"));
    }
    reserved_bytes_ += estimate;
    ++per_tenant_[tenant];  // held while the backend is made, so racing opens count it
  }
  absl::StatusOr<std::unique_ptr<compute::LiveStates>> live = compute_->OpenLiveStates(shape);
  base::WriterLock lock(&mu_);
  reserved_bytes_ -= estimate;
  if (!live.ok()) {
    --per_tenant_[ns.spec.tenant];
    ++stats_.refused;
    return live.status();
  }
  SessionInfo info;
  info.id = next_id_++;
  info.ns = request.ns;
  info.heads = heads;
  info.shape = shape;
  info.backend = (*live)->name();
  info.state_bytes = (*live)->state_bytes();
  info.side_bytes = ns.side_bytes;
  reserved_bytes_ += info.state_bytes;
  sessions_[info.id] = std::make_shared<DecodeSession>(info, *std::move(live), store_);
  tenant_of_[info.id] = ns.spec.tenant;
  ++stats_.opened;
  return info;
}

absl::StatusOr<std::shared_ptr<DecodeSession>> DecodeSessionTable::Find(SessionId id) const {
  base::WriterLock lock(&mu_);
  auto it = sessions_.find(id);
  if (it == sessions_.end()) {
    return absl::NotFoundError(
        absl::StrCat("no decode session ", id, " (closed or idle too long)"));
  }
  return it->second;
}

absl::Status DecodeSessionTable::Close(SessionId id) {
  std::shared_ptr<DecodeSession> closed;  // ended (states freed) outside the lock
  {
    base::WriterLock lock(&mu_);
    auto it = sessions_.find(id);
    if (it == sessions_.end()) {
      return absl::NotFoundError(absl::StrCat("no decode session ", id));
    }
    closed = std::move(it->second);
    sessions_.erase(it);
    ForgetTenantLocked(id);
    reserved_bytes_ -= closed->info().state_bytes;
    stats_.steps += closed->steps();
    stats_.request_steps += closed->request_steps();
    ++stats_.closed;
  }
  closed->End();
  return absl::OkStatus();
}

size_t DecodeSessionTable::Reap(absl::Time now) {
  std::vector<std::shared_ptr<DecodeSession>> reaped;  // ended outside the lock
  {
    base::WriterLock lock(&mu_);
    for (auto it = sessions_.begin(); it != sessions_.end();) {
      if (it->second->last_used() + options_.idle_timeout < now) {
        reserved_bytes_ -= it->second->info().state_bytes;
        stats_.steps += it->second->steps();
        stats_.request_steps += it->second->request_steps();
        reaped.push_back(std::move(it->second));
        ForgetTenantLocked(it->first);
        sessions_.erase(it++);
      } else {
        ++it;
      }
    }
    stats_.reaped += reaped.size();
  }
  for (const std::shared_ptr<DecodeSession>& s : reaped) s->End();
  return reaped.size();
}

void DecodeSessionTable::ForgetTenantLocked(SessionId id) {
  auto it = tenant_of_.find(id);
  if (it == tenant_of_.end()) return;
  --per_tenant_[it->second];
  tenant_of_.erase(it);
}

TableStats DecodeSessionTable::Stats() const {
  base::WriterLock lock(&mu_);
  TableStats s = stats_;
  for (const auto& [id, session] : sessions_) {
    s.steps += session->steps();
    s.request_steps += session->request_steps();
  }
  s.sessions = sessions_.size();
  s.state_bytes = reserved_bytes_;
  return s;
}

}  // namespace leapcache::decode
