#include "service/facade/engine_session_table.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace leapcache::server {

void EngineSession::End() {
  ended = true;
  buffers.clear();  // imports reference the connection
  connection.reset();
  staging.clear();
  staging.shrink_to_fit();
}

EngineSessionTable::Use::Use(EngineSessionTable* table, uint64_t id,
                             std::shared_ptr<EngineSession> session)
    : table_(table), id_(id), session_(std::move(session)) {}

EngineSessionTable::Use::Use(Use&& other) noexcept
    : table_(std::exchange(other.table_, nullptr)), id_(other.id_),
      session_(std::move(other.session_)) {}

EngineSessionTable::Use::~Use() {
  if (table_ != nullptr) table_->Release(id_);
}

EngineSessionTable::EngineSessionTable(absl::Duration reap_interval) {
  reaper_ = std::thread([this, reap_interval] { ReaperLoop(reap_interval); });
}

EngineSessionTable::~EngineSessionTable() {
  stop_.Notify();
  reaper_.join();
  std::vector<std::shared_ptr<EngineSession>> all;
  {
    absl::MutexLock lock(&mu_);
    for (auto& [id, entry] : sessions_) all.push_back(std::move(entry.session));
    sessions_.clear();
  }
  for (auto& s : all) {
    absl::MutexLock lock(&s->mu);
    s->End();
  }
}

uint64_t EngineSessionTable::Add(std::unique_ptr<EngineSession> session) {
  absl::MutexLock lock(&mu_);
  const uint64_t id = next_id_++;
  sessions_[id] = Entry{std::shared_ptr<EngineSession>(std::move(session)), absl::Now(), 0};
  return id;
}

absl::StatusOr<EngineSessionTable::Use> EngineSessionTable::Acquire(uint64_t id) {
  absl::MutexLock lock(&mu_);
  auto it = sessions_.find(id);
  if (it == sessions_.end()) {
    return absl::NotFoundError(absl::StrCat("session_id ", id, " is unknown or has ended"));
  }
  ++it->second.in_use;
  it->second.last_used = absl::Now();
  return Use(this, id, it->second.session);
}

void EngineSessionTable::Release(uint64_t id) {
  absl::MutexLock lock(&mu_);
  auto it = sessions_.find(id);
  if (it == sessions_.end()) return;
  --it->second.in_use;
  it->second.last_used = absl::Now();
}

absl::Status EngineSessionTable::Remove(uint64_t id) {
  std::shared_ptr<EngineSession> session;
  {
    absl::MutexLock lock(&mu_);
    auto it = sessions_.find(id);
    if (it == sessions_.end()) {
      return absl::NotFoundError(absl::StrCat("session_id ", id, " is unknown or has ended"));
    }
    session = std::move(it->second.session);
    sessions_.erase(it);
  }
  absl::MutexLock lock(&session->mu);
  session->End();
  return absl::OkStatus();
}

void EngineSessionTable::RemoveLocked(uint64_t id, EngineSession& session) {
  {
    absl::MutexLock lock(&mu_);
    auto it = sessions_.find(id);
    if (it != sessions_.end() && it->second.session.get() == &session) sessions_.erase(it);
  }
  session.End();
}

size_t EngineSessionTable::ReapExpired() {
  std::vector<std::shared_ptr<EngineSession>> expired;
  {
    absl::MutexLock lock(&mu_);
    const absl::Time now = absl::Now();
    for (auto it = sessions_.begin(); it != sessions_.end();) {
      Entry& e = it->second;
      if (e.in_use == 0 && now - e.last_used > e.session->ttl) {
        expired.push_back(std::move(e.session));
        sessions_.erase(it++);
      } else {
        ++it;
      }
    }
  }
  for (auto& s : expired) {
    absl::MutexLock lock(&s->mu);
    s->End();
  }
  return expired.size();
}

size_t EngineSessionTable::size() const {
  absl::MutexLock lock(&mu_);
  return sessions_.size();
}

void EngineSessionTable::ReaperLoop(absl::Duration interval) {
  while (!stop_.WaitForNotificationWithTimeout(interval)) ReapExpired();
}

}  // namespace leapcache::server
