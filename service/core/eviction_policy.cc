#include "service/core/eviction_policy.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <tuple>

#include "absl/container/flat_hash_map.h"
#include "base/check.h"

namespace leapcache::core {
namespace {

// An ordered set of (priority, tick, id); the policies differ only in how priority is computed.
class OrderedPolicy final : public EvictionPolicy {
 public:
  // half_life <= 0: LRU (priority = tick).
  explicit OrderedPolicy(double half_life) : half_life_(half_life) {}

  void Insert(uint64_t id, double value, uint64_t tick) override {
    LC_CHECK(!items_.contains(id), "EvictionPolicy::Insert of a present id");
    Item item{value, Key{Priority(value, tick), tick, id}};
    order_.insert(item.key);
    items_.emplace(id, item);
  }

  void Touch(uint64_t id, uint64_t tick) override {
    auto it = items_.find(id);
    LC_CHECK(it != items_.end(), "EvictionPolicy::Touch of an absent id");
    order_.erase(it->second.key);
    it->second.key = Key{Priority(it->second.value, tick), tick, id};
    order_.insert(it->second.key);
  }

  void Remove(uint64_t id) override {
    auto it = items_.find(id);
    if (it == items_.end()) return;
    order_.erase(it->second.key);
    items_.erase(it);
  }

  bool Contains(uint64_t id) const override { return items_.contains(id); }
  size_t size() const override { return items_.size(); }

  void ForEachVictim(absl::FunctionRef<bool(uint64_t)> visit) const override {
    for (const Key& k : order_) {
      if (!visit(std::get<2>(k))) return;
    }
  }

 private:
  using Key = std::tuple<double, uint64_t, uint64_t>;  // priority, tick, id
  struct Item {
    double value;
    Key key;
  };

  double Priority(double value, uint64_t tick) const {
    return half_life_ > 0 ? StateAwarePriority(value, tick, half_life_) : static_cast<double>(tick);
  }

  const double half_life_;
  std::set<Key> order_;
  absl::flat_hash_map<uint64_t, Item> items_;
};

}  // namespace

double StateAwarePriority(double value, uint64_t tick, double half_life_accesses) {
  // The floor keeps log2 finite for a (never expected) zero value.
  return std::log2(std::max(value, 1e-300)) + static_cast<double>(tick) / half_life_accesses;
}

std::unique_ptr<EvictionPolicy> MakeLruPolicy() { return std::make_unique<OrderedPolicy>(0.0); }

std::unique_ptr<EvictionPolicy> MakeStateAwarePolicy(double half_life_accesses) {
  LC_CHECK(half_life_accesses > 0, "state-aware half-life must be > 0");
  return std::make_unique<OrderedPolicy>(half_life_accesses);
}

}  // namespace leapcache::core
