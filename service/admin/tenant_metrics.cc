#include "service/admin/tenant_metrics.h"

namespace leapcache::server {

TenantMetrics::TenantMetrics(metrics::Registry* r)
    : bytes_(r->AddGauge("leapcache_tenant_bytes",
                         "Memory held by the tenant's checkpoints and puts in flight, every tier "
                         "(whole pages; the quota is tenant_max_bytes).")),
      pinned_bytes_(r->AddGauge("leapcache_tenant_pinned_bytes",
                                "Memory of the tenant's pinned checkpoints "
                                "(the quota is tenant_max_pinned_bytes).")),
      pending_puts_(r->AddGauge("leapcache_tenant_pending_puts",
                                "The tenant's uncommitted puts (tenant_max_pending_puts).")),
      namespaces_(r->AddGauge("leapcache_tenant_namespaces",
                              "The tenant's registered namespaces (tenant_max_namespaces).")),
      refusals_(r->AddCounter("leapcache_tenant_quota_refusals_total",
                              "Requests refused (RESOURCE_EXHAUSTED) because the tenant was at "
                              "a quota, by quota.")) {}

void TenantMetrics::Update(const std::vector<core::TenantStats>& tenants) {
  absl::MutexLock lock(&mu_);
  for (const core::TenantStats& t : tenants) {
    const metrics::Labels l{{"tenant", t.tenant}};
    bytes_.Add(l).Set(static_cast<double>(t.bytes));
    pinned_bytes_.Add(l).Set(static_cast<double>(t.pinned_bytes));
    pending_puts_.Add(l).Set(static_cast<double>(t.pending_puts));
    namespaces_.Add(l).Set(static_cast<double>(t.namespaces));
    for (const auto& [quota, now] : {std::pair<const char*, uint64_t>{"bytes", t.refused_bytes},
                                     {"pinned_bytes", t.refused_pinned_bytes},
                                     {"pending_puts", t.refused_pending_puts},
                                     {"namespaces", t.refused_namespaces}}) {
      uint64_t& counted = counted_[{t.tenant, quota}];
      metrics::Counter& c = refusals_.Add({{"tenant", t.tenant}, {"quota", quota}});
      if (now > counted) c.Increment(static_cast<double>(now - counted));
      counted = now;
    }
  }
}

}  // namespace leapcache::server
