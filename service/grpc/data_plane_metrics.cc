#include "service/grpc/data_plane_metrics.h"

#include <grpcpp/support/status_code_enum.h>

#include "service/grpc/rpc_metrics.h"

namespace leapcache::server {
namespace {

const char* OpLabel(TransferOp op) {
  switch (op) {
    case TransferOp::kGet:
      return "get";
    case TransferOp::kPut:
      return "put";
    case TransferOp::kLookup:
      return "lookup";
  }
  return "unknown";
}

// The phases each op has: a get lists device blobs, a put commits.
std::vector<TransferPhase> PhasesOf(TransferOp op) {
  if (op == TransferOp::kGet) {
    return {TransferPhase::kSession, TransferPhase::kOpen, TransferPhase::kList,
            TransferPhase::kMove};
  }
  return {TransferPhase::kSession, TransferPhase::kOpen, TransferPhase::kMove,
          TransferPhase::kCommit};
}

}  // namespace

std::vector<double> PhaseSecondsBuckets() {
  return {1e-6, 2.5e-6, 5e-6,   1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3,
          5e-3, 1e-2,   2.5e-2, 5e-2, 0.1,    0.25, 0.5,  1.0,    2.5,  10.0};
}

DataPlaneMetrics::DataPlaneMetrics(metrics::Registry* registry)
    : phase_(registry->AddHistogram(
          "leapcache_data_plane_phase_seconds",
          "Time of the data plane's successful transfers on the service, by op and phase.",
          PhaseSecondsBuckets())),
      transfers_(registry->AddCounter("leapcache_data_plane_transfers_total",
                                      "Data-plane transfers finished, by op and status code.")),
      device_transfers_(registry->AddCounter(
          "leapcache_data_plane_device_transfers_total",
          "Successful data-plane transfers whose bytes moved between the GPU tier and the "
          "engine's GPU memory without the host, by op.")),
      channels_(registry
                    ->AddGauge("leapcache_data_plane_transfer_channels",
                               "Open transfer channels (same-host engines' shared memory).")
                    .Add({})),
      channel_transfers_(registry->AddCounter(
          "leapcache_data_plane_channel_transfers_total",
          "Data-plane transfers (and lookup batches) that came through a transfer channel, by "
          "op.")),
      channel_seconds_(registry->AddHistogram(
          "leapcache_data_plane_channel_transfer_seconds",
          "Time of a transfer through a channel on the service, request taken to reply written.",
          PhaseSecondsBuckets())) {
  // Series exist from the start, so rates and quantiles are defined before the first transfer.
  for (TransferOp op : {TransferOp::kGet, TransferOp::kPut}) {
    transfers_.Add({{"op", OpLabel(op)}, {"code", "OK"}});
    device_transfers_.Add({{"op", OpLabel(op)}});
    channel_transfers_.Add({{"op", OpLabel(op)}});
    channel_seconds_.Add({{"op", OpLabel(op)}});
    for (TransferPhase p : PhasesOf(op)) {
      phase_.Add({{"op", OpLabel(op)}, {"phase", TransferPhaseName(p)}});
    }
  }
  channel_transfers_.Add({{"op", OpLabel(TransferOp::kLookup)}});
  channel_seconds_.Add({{"op", OpLabel(TransferOp::kLookup)}});
}

void DataPlaneMetrics::Record(TransferOp op, const absl::Status& status,
                              const TransferTimes& times) {
  transfers_
      .Add({{"op", OpLabel(op)},
            {"code", StatusCodeLabel(static_cast<grpc::StatusCode>(status.code()))}})
      .Increment();
  if (!status.ok()) return;
  if (times.device_to_device) device_transfers_.Add({{"op", OpLabel(op)}}).Increment();
  for (TransferPhase p : PhasesOf(op)) {
    phase_.Add({{"op", OpLabel(op)}, {"phase", TransferPhaseName(p)}})
        .Observe(absl::ToDoubleSeconds(times[p]));
  }
}

void DataPlaneMetrics::RecordChannel(TransferOp op, absl::Duration served) {
  channel_transfers_.Add({{"op", OpLabel(op)}}).Increment();
  channel_seconds_.Add({{"op", OpLabel(op)}}).Observe(absl::ToDoubleSeconds(served));
}

}  // namespace leapcache::server
