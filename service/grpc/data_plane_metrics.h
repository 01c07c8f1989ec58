// DataPlaneMetrics: where the data plane's transfers spend their time on the service, phase by
// phase (service/facade/data_plane.h, TransferPhase), so a slow get can be told apart into its
// session, lease, listing and movement costs from a scrape:
//   leapcache_data_plane_phase_seconds{op,phase}   histogram, successful transfers only (get:
//                                                   session, open, list, move; put: session,
//                                                   open, move, commit)
//   leapcache_data_plane_transfers_total{op,code}  transfers finished, by status code
//   leapcache_data_plane_device_transfers_total{op} successful transfers whose bytes moved
//                                                   between the GPU tier and the engine's GPU
//                                                   memory without the host
//   leapcache_data_plane_transfer_channels          transfer channels open now
//   leapcache_data_plane_channel_transfers_total{op} transfers that came through a channel
//   leapcache_data_plane_channel_transfer_seconds{op} a channel transfer's time on the service,
//                                                   request taken to reply written (a channel's
//                                                   counterpart of an RPC's duration)
// `op` is "get" or "put"; the RPC's own latency is leapcache_rpc_duration_seconds.
#pragma once

#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "service/facade/data_plane.h"
#include "service/metrics/registry.h"

namespace leapcache::server {

// kLookup: a lookup batch through a transfer channel (RecordChannel only: it has no phases).
enum class TransferOp { kGet, kPut, kLookup };

class DataPlaneMetrics {
 public:
  // Registers the families. `registry` must outlive this object.
  explicit DataPlaneMetrics(metrics::Registry* registry);
  DataPlaneMetrics(const DataPlaneMetrics&) = delete;
  DataPlaneMetrics& operator=(const DataPlaneMetrics&) = delete;

  void Record(TransferOp op, const absl::Status& status, const TransferTimes& times);
  // A transfer channel opened or closed; a transfer through one took `served` on the service.
  void ChannelOpened() { channels_.Increment(); }
  void ChannelClosed() { channels_.Decrement(); }
  void RecordChannel(TransferOp op, absl::Duration served);

 private:
  metrics::Family<metrics::Histogram>& phase_;
  metrics::Family<metrics::Counter>& transfers_;
  metrics::Family<metrics::Counter>& device_transfers_;
  metrics::Gauge& channels_;
  metrics::Family<metrics::Counter>& channel_transfers_;
  metrics::Family<metrics::Histogram>& channel_seconds_;
};

// Bounds for phases that run from about a microsecond (a session lookup) to seconds.
std::vector<double> PhaseSecondsBuckets();

}  // namespace leapcache::server
