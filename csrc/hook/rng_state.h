// rng_state.h — owns the C++ save and restore of torch's default CPU generator around a graph with random ops
// (no Python call on the hot path), and the test for when CUDA generators need the Python hooks instead.
#pragma once

#include <Python.h>

#include <memory>

namespace cdynamo::hook {

// One saved state of the default CPU generator (at::detail::getDefaultCPUGenerator(), which is
// torch.random.default_generator), taken and put back under the generator's mutex as torch's Python
// get_state / set_state do.
class CpuRngState {
 public:
  CpuRngState();
  ~CpuRngState();
  CpuRngState(const CpuRngState&) = delete;
  CpuRngState& operator=(const CpuRngState&) = delete;
  // Saves the generator's state. False with a Python error set on failure.
  bool save();
  // Puts the saved state back, keeping the Python error that is set across it. False if it failed.
  bool restore_keeping_error();
  bool saved() const { return impl_ != nullptr; }

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// True when torch.cuda has been initialised (torch.cuda._initialized, read from the module's dict: no Python
// call): its generators are then saved and restored by the Python hooks, as torch.cuda.get_rng_state_all does.
bool cuda_rng_in_use();

}  // namespace cdynamo::hook
