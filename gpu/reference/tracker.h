// StateTracker: one head's recurrent state under some storage format, advanced token by token.
// Implementations: PerStepState (the state is re-encoded after every token: the baselines) and
// WindowState (LeapQuant's per-window format). The accuracy and replay tools drive both through
// this interface.
#pragma once

#include "gpu/format/status.h"
#include "gpu/reference/recurrence.h"

namespace leapcache::reference {

class StateTracker {
 public:
  virtual ~StateTracker() = default;
  // Advances one token and writes o[dv]. On error (non-finite input, a state the codec cannot
  // hold) returns the status and leaves the tracker unchanged.
  virtual Status Step(const StepInput& in, float* o) = 0;
  // The state the representation currently holds, as dense fp32 [dk][dv].
  virtual void State(float* S_kv) const = 0;
};

}  // namespace leapcache::reference
