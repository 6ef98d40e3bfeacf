// skip_files.h — owns which source files are library code (never captured, never inlined).
#pragma once

#include <Python.h>

#include <string>
#include <vector>

namespace cdynamo::interp {

// Replaces the library directories (`skip`) and the directories inside them that hold user code again
// (`keep`: site-packages under the stdlib directory); the longest directory containing a file decides ('/'
// is appended where missing). Set from Python at import time (cdynamo._core), never computed inside the
// frame hook, where running Python would re-enter it.
void set_skip_dirs(std::vector<std::string> skip, std::vector<std::string> keep);
// True if `code` comes from a library directory or a frozen module.
bool is_library_file(PyCodeObject* code);
// True for library code of torch.nn's modules (Linear.forward, ...), which the tracer may inline.
bool is_torch_nn_module_file(PyCodeObject* code);
// Library code that is inlined with guarded globals: small torch helpers that model code calls
// (torch.backends.*, torch._jit_internal, torch.overrides, torch.nn.utils, torch.nn._reduction).
bool is_inlinable_library_file(PyCodeObject* code);

}  // namespace cdynamo::interp
