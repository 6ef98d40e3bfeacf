// module_call.h — owns OptimizedModule.__call__ in C++ (nn.Module's no-hook call path without a Python frame).
#pragma once

#include <Python.h>

namespace cdynamo::hook {

// Sets `type.__call__` (type: cdynamo's OptimizedModule) to a method descriptor with nn.Module's no-hook path
// inlined: nn.Module.__call__ (`fallback`, kept) where the wrapper or the process has module hooks (`nn_globals`:
// torch.nn.modules.module's dict, kept), `module.compile()` ran or torch.jit traces; else the wrapper's entries.
// All three borrowed. False with a Python error set on failure.
bool install_module_call(PyObject* type, PyObject* nn_globals, PyObject* fallback);

}  // namespace cdynamo::hook
