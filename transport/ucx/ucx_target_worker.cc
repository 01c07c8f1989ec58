#include "transport/ucx/ucx_target_worker.h"

#include <poll.h>

#include <utility>

namespace leapcache::transport {

absl::StatusOr<ucp_worker_h> CreateUcxWorker(UcxContext* context, ucs_thread_mode_t mode) {
  ucp_worker_params_t params{};
  params.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  params.thread_mode = mode;
  ucp_worker_h worker = nullptr;
  if (ucs_status_t st = ucp_worker_create(context->get(), &params, &worker); st != UCS_OK) {
    return UcsError(st, "ucp_worker_create");
  }
  return worker;
}

absl::StatusOr<std::string> UcxWorkerAddress(ucp_worker_h worker) {
  ucp_address_t* address = nullptr;
  size_t length = 0;
  if (ucs_status_t st = ucp_worker_get_address(worker, &address, &length); st != UCS_OK) {
    return UcsError(st, "ucp_worker_get_address");
  }
  std::string packed(reinterpret_cast<const char*>(address), length);
  ucp_worker_release_address(worker, address);
  return packed;
}

absl::StatusOr<std::unique_ptr<UcxTargetWorker>> UcxTargetWorker::Create(UcxContext* context) {
  // MULTI: the progress thread drives the worker while ucp_worker_signal comes from another.
  absl::StatusOr<ucp_worker_h> worker = CreateUcxWorker(context, UCS_THREAD_MODE_MULTI);
  if (!worker.ok()) return worker.status();
  absl::StatusOr<std::string> address = UcxWorkerAddress(*worker);
  if (!address.ok()) {
    ucp_worker_destroy(*worker);
    return address.status();
  }
  return std::unique_ptr<UcxTargetWorker>(new UcxTargetWorker(*worker, std::move(*address)));
}

UcxTargetWorker::UcxTargetWorker(ucp_worker_h worker, std::string address)
    : worker_(worker), address_(std::move(address)) {
  progress_ = std::thread([this] { ProgressLoop(); });
}

UcxTargetWorker::Busy::Busy(UcxTargetWorker* w) : w_(w) {
  if (w_->busy_.fetch_add(1) == 0) ucp_worker_signal(w_->worker_);  // leave the poll now
}

UcxTargetWorker::Busy::~Busy() { w_->busy_.fetch_sub(1); }

UcxTargetWorker::~UcxTargetWorker() {
  stop_ = true;
  ucp_worker_signal(worker_);
  progress_.join();
  ucp_worker_destroy(worker_);
}

void UcxTargetWorker::ProgressLoop() {
  int efd = -1;
  const bool can_sleep = ucp_worker_get_efd(worker_, &efd) == UCS_OK;
  while (!stop_.load()) {
    while (ucp_worker_progress(worker_) != 0) {
    }
    if (!can_sleep || busy_.load() > 0) {
      std::this_thread::yield();
      continue;
    }
    // BUSY: events arrived between the last progress and arming; progress again.
    if (ucp_worker_arm(worker_) == UCS_ERR_BUSY) continue;
    // The timeout only bounds how long a missed signal could delay the stop.
    pollfd fd{efd, POLLIN, 0};
    poll(&fd, 1, 100);
  }
}

}  // namespace leapcache::transport
