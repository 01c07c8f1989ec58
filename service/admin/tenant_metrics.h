// TenantMetrics: what each tenant holds against its quotas (service/core/options.h,
// TenantQuota), from the store's Stats() at scrape time:
//   gauges   leapcache_tenant_bytes{tenant}, leapcache_tenant_pinned_bytes{tenant},
//            leapcache_tenant_pending_puts{tenant}, leapcache_tenant_namespaces{tenant}
//   counter  leapcache_tenant_quota_refusals_total{tenant,quota}  (quota: bytes, pinned_bytes,
//            pending_puts, namespaces)
// Only where tenants are authenticated (a tokens file): tenant names then come from the
// operator's tokens file, a bounded set. Without tokens any client names its tenant, and a label
// per name would let clients create series at will, so nothing is exported.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "service/core/stats.h"
#include "service/metrics/registry.h"

namespace leapcache::server {

class TenantMetrics {
 public:
  // Registers the families. `registry` must outlive this object.
  explicit TenantMetrics(metrics::Registry* registry);
  TenantMetrics(const TenantMetrics&) = delete;
  TenantMetrics& operator=(const TenantMetrics&) = delete;

  // Brings every tenant's series up to `tenants`; refusal counters advance by the snapshot's
  // increase since the last update. Thread-safe (scrapes may overlap).
  void Update(const std::vector<core::TenantStats>& tenants);

 private:
  metrics::Family<metrics::Gauge>& bytes_;
  metrics::Family<metrics::Gauge>& pinned_bytes_;
  metrics::Family<metrics::Gauge>& pending_puts_;
  metrics::Family<metrics::Gauge>& namespaces_;
  metrics::Family<metrics::Counter>& refusals_;
  absl::Mutex mu_;
  // (tenant, quota) -> the refusals already counted.
  std::map<std::pair<std::string, std::string>, uint64_t> counted_ ABSL_GUARDED_BY(mu_);
};

}  // namespace leapcache::server
