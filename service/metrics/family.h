// Family<T>: all the time series of one metric name, one T per distinct label set, as in
// prometheus-cpp. Add() returns the series for a label set, creating it on first use; the
// reference stays valid for the family's lifetime (series are never removed, so a hot path may
// keep it). Thread-safe.
//
// Label names must match [a-zA-Z_][a-zA-Z0-9_]* and not start with "__" (reserved by
// Prometheus); a bad name is a programmer error and aborts. Values are any UTF-8 text.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "service/metrics/metric_types.h"

namespace leapcache::metrics {

// Sorted by name, so the exposition is deterministic.
using Labels = std::map<std::string, std::string>;

enum class MetricType { kCounter, kGauge, kHistogram };

// One series at collection time.
struct MetricSnapshot {
  Labels labels;
  double value = 0;             // counter and gauge
  HistogramSnapshot histogram;  // histogram
};

// One family at collection time: what the text format renders.
struct FamilySnapshot {
  std::string name;
  std::string help;
  MetricType type = MetricType::kGauge;
  std::vector<MetricSnapshot> metrics;
};

// Aborts with a message unless `name` is a valid label name.
void CheckLabelName(const std::string& name);

template <typename T>
class Family {
 public:
  // `make` builds a new series (histograms: with the family's buckets).
  Family(std::string name, std::string help, MetricType type,
         std::function<std::unique_ptr<T>()> make)
      : name_(std::move(name)), help_(std::move(help)), type_(type), make_(std::move(make)) {}
  Family(const Family&) = delete;
  Family& operator=(const Family&) = delete;

  T& Add(const Labels& labels) {
    absl::MutexLock lock(&mu_);
    auto it = series_.find(labels);
    if (it != series_.end()) return *it->second;
    for (const auto& [k, v] : labels) CheckLabelName(k);
    return *series_.emplace(labels, make_()).first->second;
  }

  const std::string& name() const { return name_; }

  FamilySnapshot Collect() const {
    FamilySnapshot out{name_, help_, type_, {}};
    absl::MutexLock lock(&mu_);
    out.metrics.reserve(series_.size());
    for (const auto& [labels, metric] : series_) {
      MetricSnapshot m;
      m.labels = labels;
      if constexpr (std::is_same_v<T, Histogram>) {
        m.histogram = metric->Snapshot();
      } else {
        m.value = metric->Value();
      }
      out.metrics.push_back(std::move(m));
    }
    return out;
  }

 private:
  const std::string name_;
  const std::string help_;
  const MetricType type_;
  const std::function<std::unique_ptr<T>()> make_;
  mutable absl::Mutex mu_;
  std::map<Labels, std::unique_ptr<T>> series_ ABSL_GUARDED_BY(mu_);
};

}  // namespace leapcache::metrics
