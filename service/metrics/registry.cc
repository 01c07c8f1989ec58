#include "service/metrics/registry.h"

#include <cstdio>
#include <cstdlib>

#include "absl/strings/match.h"

namespace leapcache::metrics {
namespace {

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "metrics registry: %s\n", what.c_str());
  std::abort();
}

bool ValidMetricName(const std::string& name) {
  if (name.empty()) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    const bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':';
    if (!alpha && !(i > 0 && c >= '0' && c <= '9')) return false;
  }
  return true;
}

}  // namespace

void CheckLabelName(const std::string& name) {
  bool ok = !name.empty() && !absl::StartsWith(name, "__");
  for (size_t i = 0; ok && i < name.size(); ++i) {
    const char c = name[i];
    const bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
    ok = alpha || (i > 0 && c >= '0' && c <= '9');
  }
  if (!ok) Die("invalid label name '" + name + "'");
}

void Registry::CheckNewName(const std::string& name) const {
  if (!ValidMetricName(name)) Die("invalid metric name '" + name + "'");
  if (!absl::StartsWith(name, prefix_)) Die("metric '" + name + "' lacks the prefix " + prefix_);
  for (const AnyFamily& f : families_) {
    const std::string& existing =
        std::visit([](const auto& p) -> const std::string& { return p->name(); }, f);
    if (existing == name) Die("metric '" + name + "' registered twice");
  }
}

Family<Counter>& Registry::AddCounter(const std::string& name, const std::string& help) {
  absl::MutexLock lock(&mu_);
  CheckNewName(name);
  if (!absl::EndsWith(name, "_total")) Die("counter '" + name + "' must end in _total");
  auto family = std::make_unique<Family<Counter>>(name, help, MetricType::kCounter,
                                                  [] { return std::make_unique<Counter>(); });
  Family<Counter>& ref = *family;
  families_.emplace_back(std::move(family));
  return ref;
}

Family<Gauge>& Registry::AddGauge(const std::string& name, const std::string& help) {
  absl::MutexLock lock(&mu_);
  CheckNewName(name);
  if (absl::EndsWith(name, "_total")) Die("gauge '" + name + "' must not end in _total");
  auto family = std::make_unique<Family<Gauge>>(name, help, MetricType::kGauge,
                                                [] { return std::make_unique<Gauge>(); });
  Family<Gauge>& ref = *family;
  families_.emplace_back(std::move(family));
  return ref;
}

Family<Histogram>& Registry::AddHistogram(const std::string& name, const std::string& help,
                                          std::vector<double> buckets) {
  absl::MutexLock lock(&mu_);
  CheckNewName(name);
  Histogram probe(buckets);  // checks the bounds now, at registration
  auto family = std::make_unique<Family<Histogram>>(name, help, MetricType::kHistogram, [buckets] {
    return std::make_unique<Histogram>(buckets);
  });
  Family<Histogram>& ref = *family;
  families_.emplace_back(std::move(family));
  return ref;
}

std::vector<FamilySnapshot> Registry::Collect() const {
  absl::MutexLock lock(&mu_);
  std::vector<FamilySnapshot> out;
  out.reserve(families_.size());
  for (const AnyFamily& f : families_) {
    out.push_back(std::visit([](const auto& p) { return p->Collect(); }, f));
  }
  return out;
}

}  // namespace leapcache::metrics
