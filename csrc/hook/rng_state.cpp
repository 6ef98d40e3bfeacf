// rng_state.cpp — owns the C++ save / restore of the default CPU generator's state (rng_state.h).
#include "hook/rng_state.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>

#include <exception>
#include <mutex>

namespace cdynamo::hook {

struct CpuRngState::Impl {
  at::Tensor state;  // a byte tensor, as Generator::get_state gives it
};

CpuRngState::CpuRngState() = default;
CpuRngState::~CpuRngState() = default;

bool CpuRngState::save() {
  try {
    at::Generator gen = at::detail::getDefaultCPUGenerator();  // shares the process-wide generator
    auto impl = std::make_unique<Impl>();
    {
      std::scoped_lock<std::mutex> lock(gen.mutex());
      impl->state = gen.get_state();
    }
    impl_ = std::move(impl);
    return true;
  } catch (const std::exception& ex) {
    PyErr_Format(PyExc_RuntimeError, "cdynamo: cannot save the CPU RNG state: %s", ex.what());
    return false;
  }
}

bool CpuRngState::restore_keeping_error() {
  if (!impl_) return false;
  try {
    at::Generator gen = at::detail::getDefaultCPUGenerator();
    std::scoped_lock<std::mutex> lock(gen.mutex());
    gen.set_state(impl_->state);
    return true;
  } catch (const std::exception&) {
    return false;  // the graph's own error stays set; the caller then lets it propagate
  }
}

bool cuda_rng_in_use() {
  // Borrowed references throughout: sys.modules holds torch.cuda, its dict holds the flag.
  PyObject* modules = PyImport_GetModuleDict();
  PyObject* cuda = modules ? PyDict_GetItemString(modules, "torch.cuda") : nullptr;
  if (!cuda || !PyModule_Check(cuda)) return false;  // never imported: no CUDA generator was used
  PyObject* dict = PyModule_GetDict(cuda);
  PyObject* flag = dict ? PyDict_GetItemString(dict, "_initialized") : nullptr;
  if (!flag) return true;  // unreadable: assume in use (the Python hooks decide)
  int on = PyObject_IsTrue(flag);
  if (on < 0) PyErr_Clear();
  return on != 0;
}

}  // namespace cdynamo::hook
