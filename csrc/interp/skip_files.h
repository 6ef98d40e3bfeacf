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

// Code objects marked by cdynamo.skip (or torch._dynamo.skip): their frames run as Python, the functions they
// call are still captured, and the tracer never inlines them (a call to one is a graph break). Held for the
// process (strong references): the marks outlive reset(), as the functions they mark do.
void mark_skipped_code(PyCodeObject* code);
bool is_skipped_code(PyCodeObject* code);
// True if `fn` is a Python function whose __dict__ holds a true `name` (a decorator's mark; no Python code runs).
bool function_marked(PyObject* fn, const char* name);
// A function whose __dict__ sets `_torchdynamo_disable` (torch._dynamo.skip marks its functions so).
bool is_skipped_function(PyObject* fn);
// The wrappers of cdynamo.disable(fn, recursive=False) and torch._dynamo.disable(fn, recursive=False) (one code
// each): the frame a wrapper calls directly runs as Python, the frames that one calls are captured again.
void set_nonrecursive_wrapper_codes(const std::vector<PyObject*>& codes);
bool is_nonrecursive_wrapper(PyCodeObject* code);

}  // namespace cdynamo::interp
