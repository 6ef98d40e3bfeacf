// state.h — owns the per-thread callback, installation of the eval-frame hook and OptimizedCallable.
#pragma once

#include <Python.h>

namespace cdynamo::hook {

// The callback of the calling thread: nullptr (no capture), run_only() or a Callback object. Borrowed.
PyObject* current_callback();
// Sets the calling thread's callback (borrowed `cb`, nullptr for none) and returns the previous one as a
// new reference (or nullptr). Installs the PEP 523 hook while any thread has a callback.
PyObject* exchange_callback(PyObject* cb);
// The RUN_ONLY sentinel (borrowed, process lifetime).
PyObject* run_only();

// The OptimizedCallable type: calling it runs `fn` with the thread's callback set to `cb` for the
// duration of the call (restored on return and on exceptions).
extern PyTypeObject OptimizedCallableType;
// New reference: OptimizedCallable(fn, cb); `cb` may be Py_None (disable capture inside).
PyObject* make_optimized_callable(PyObject* fn, PyObject* cb);
// Readies the type and the sentinel; call once at module init. Returns -1 with an error set on failure.
int init_state();

}  // namespace cdynamo::hook
