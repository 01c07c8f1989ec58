// UcxTargetWorker: the engine's side of UCX transfers. The service connects an endpoint to this
// worker's address (sent in Attach) and reads and writes the engine's registered buffers; some
// UCX transports (tcp, and active-message fallbacks of others) need the target's worker to make
// progress for that, so a thread progresses the worker for the worker's lifetime. While the
// owner expects a transfer (a transfer RPC is in flight: Busy) the thread polls without
// sleeping, since every wakeup costs a syscall per tcp segment; otherwise it sleeps on the
// worker's event fd.
// Thread-safe: address() may be read from any thread.
#pragma once

#include <ucp/api/ucp.h>

#include <atomic>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "transport/ucx/ucx_context.h"

namespace leapcache::transport {

class UcxTargetWorker {
 public:
  // `context` must outlive the worker.
  static absl::StatusOr<std::unique_ptr<UcxTargetWorker>> Create(UcxContext* context);
  // Stops the progress thread and destroys the worker (peers' later transfers fail).
  ~UcxTargetWorker();
  UcxTargetWorker(const UcxTargetWorker&) = delete;
  UcxTargetWorker& operator=(const UcxTargetWorker&) = delete;

  // The packed worker address a peer connects an endpoint to.
  const std::string& address() const { return address_; }

  // Keeps the progress thread polling while alive (nests).
  class Busy {
   public:
    explicit Busy(UcxTargetWorker* w);
    ~Busy();
    Busy(const Busy&) = delete;
    Busy& operator=(const Busy&) = delete;

   private:
    UcxTargetWorker* w_;
  };

 private:
  UcxTargetWorker(ucp_worker_h worker, std::string address);
  void ProgressLoop();

  ucp_worker_h worker_;
  std::string address_;
  std::atomic<bool> stop_{false};
  std::atomic<int> busy_{0};
  std::thread progress_;
};

// A worker for one thread at a time (the service's connections), and the packed address of a
// worker; shared by both sides.
absl::StatusOr<ucp_worker_h> CreateUcxWorker(UcxContext* context, ucs_thread_mode_t mode);
absl::StatusOr<std::string> UcxWorkerAddress(ucp_worker_h worker);

}  // namespace leapcache::transport
