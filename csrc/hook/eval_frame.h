// eval_frame.h — owns the PEP 523 frame evaluation function and the translation entry point.
#pragma once

#include <Python.h>

#include <string>
#include <vector>

#include "compat/compat.h"
#include "hook/cache.h"

namespace cdynamo::hook {

// The eval-frame function installed while a thread has a callback.
PyObject* eval_frame(PyThreadState* tstate, compat::Frame* frame, int throwflag);

// Translates `frame` under callback `cb` (borrowed) into a new cache entry appended to `extra`.
// Returns the entry, or nullptr with a Python error set when the error must reach the user
// (nopython/fullgraph). Other failures produce a run-as-Python entry or mark the code skipped.
// Code objects whose frames run, with all they call, without capture (torch.compiler.disable's wrapper).
void set_disable_codes(const std::vector<PyObject*>& codes);
std::shared_ptr<CacheEntry> translate(compat::Frame* frame, PyObject* cb, CodeExtra* extra);

// Builds the FrameView of `frame` (borrowed pieces).
guards::FrameView frame_view(compat::Frame* frame);

// True if frames of this code are never captured (torch, the stdlib, cdynamo itself).
bool skip_by_file(PyCodeObject* code);


// Makes the process-wide compile lock (a threading.RLock); called once when cdynamo._C is imported, before the frame
// hook can run. 0, or -1 with a Python error set.
int init_compile_lock();

}  // namespace cdynamo::hook
