// Registry: the set of metric families one process exports, as in prometheus-cpp. Families are
// added once at start-up and live as long as the registry; Collect() snapshots all of them in
// registration order for the text format (text_format.h). Thread-safe.
//
// Naming is enforced here, once, so every exported name follows Prometheus conventions: names
// match [a-zA-Z_:][a-zA-Z0-9_:]* and start with the registry's prefix ("leapcache_"), counters
// end in "_total", and a name is registered once. A violation is a programmer error and aborts
// at start-up, not at scrape time.
#pragma once

#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "service/metrics/family.h"

namespace leapcache::metrics {

class Registry {
 public:
  explicit Registry(std::string prefix = "leapcache_") : prefix_(std::move(prefix)) {}
  Registry(const Registry&) = delete;
  Registry& operator=(const Registry&) = delete;

  Family<Counter>& AddCounter(const std::string& name, const std::string& help);
  Family<Gauge>& AddGauge(const std::string& name, const std::string& help);
  // REQUIRES: bucket bounds finite and strictly ascending; "+Inf" is implied.
  Family<Histogram>& AddHistogram(const std::string& name, const std::string& help,
                                  std::vector<double> buckets);

  std::vector<FamilySnapshot> Collect() const;

 private:
  using AnyFamily = std::variant<std::unique_ptr<Family<Counter>>, std::unique_ptr<Family<Gauge>>,
                                 std::unique_ptr<Family<Histogram>>>;
  void CheckNewName(const std::string& name) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::string prefix_;
  mutable absl::Mutex mu_;
  std::vector<AnyFamily> families_ ABSL_GUARDED_BY(mu_);
};

}  // namespace leapcache::metrics
