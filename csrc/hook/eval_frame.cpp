// eval_frame.cpp — owns the hot path: skip rules, cache lookup by guards, running cached code, and the
// hand-off to translation on a miss.
#include "hook/eval_frame.h"

#include <pybind11/pybind11.h>

#include "hook/state.h"

namespace cdynamo::hook {

namespace py = pybind11;

guards::FrameView frame_view(compat::Frame* frame) {
  PyCodeObject* code = compat::frame_code(frame);
  guards::FrameView fv;
  fv.localsplus = compat::frame_localsplus(frame);
  fv.globals = compat::frame_globals(frame);
  fv.builtins = compat::frame_builtins(frame);
  PyObject* fn = compat::frame_function(frame);
  fv.closure = fn ? PyFunction_GET_CLOSURE(fn) : nullptr;  // borrowed
  if (fv.closure == Py_None) fv.closure = nullptr;
  fv.nfree_base = compat::code_nlocalsplus(code) - static_cast<int>(code->co_nfreevars);
  return fv;
}

namespace {

// Runs the entry's code with the frame's argument slots. Returns a new reference or NULL.
PyObject* run_entry(PyThreadState* tstate, compat::Frame* frame, CacheEntry* e) {
  if (!e->code) return compat::eval_default(tstate, frame, 0);
  PyObject* orig = compat::frame_function(frame);  // borrowed
  PyObject* closure = orig ? PyFunction_GET_CLOSURE(orig) : nullptr;
  if (!e->func || e->func_closure != closure) {
    PyObject* fn = PyFunction_New(e->code.ptr(), compat::frame_globals(frame));  // new reference
    if (!fn) return nullptr;
    if (closure && closure != Py_None && PyFunction_SetClosure(fn, closure) < 0) {
      Py_DECREF(fn);
      return nullptr;
    }
    e->func = py::reinterpret_steal<py::object>(fn);
    e->func_closure = closure;  // kept alive by e->func
  }
  return PyObject_Vectorcall(e->func.ptr(), compat::frame_localsplus(frame), static_cast<size_t>(e->nargs), nullptr);
}

bool plain_function_code(PyCodeObject* code) {
  int flags = code->co_flags;
  if (!(flags & CO_OPTIMIZED) || !(flags & CO_NEWLOCALS)) return false;  // module / class bodies, exec
  if (flags & (CO_GENERATOR | CO_COROUTINE | CO_ASYNC_GENERATOR | CO_ITERABLE_COROUTINE)) return false;
  return true;
}

}  // namespace

PyObject* eval_frame(PyThreadState* tstate, compat::Frame* frame, int throwflag) {
  PyObject* cb = current_callback();
  if (!cb || throwflag || compat::frame_started(frame)) return compat::eval_default(tstate, frame, throwflag);
  PyCodeObject* code = compat::frame_code(frame);
  CodeExtra* extra = get_extra(code);
  if (extra) {
    if (extra->skip || extra->generated) return compat::eval_default(tstate, frame, throwflag);
  } else if (!plain_function_code(code) || compat::frame_locals_dict(frame) || skip_by_file(code)) {
    try {
      ensure_extra(code)->skip = true;
    } catch (const std::exception&) {
    }
    return compat::eval_default(tstate, frame, throwflag);
  }
  if (extra && !extra->entries.empty()) {
    guards::FrameView fv = frame_view(frame);
    for (auto& e : extra->entries) {
      if (e->globals.ptr() == fv.globals && e->guards.check(fv)) return run_entry(tstate, frame, e.get());
    }
  }
  if (cb == run_only()) return compat::eval_default(tstate, frame, throwflag);
  if (!extra) {
    try {
      extra = ensure_extra(code);
    } catch (const std::exception&) {
      return compat::eval_default(tstate, frame, throwflag);
    }
  }
  // Frames run while compiling (shape propagation, fx, the backend) are not captured.
  PyObject* mine = exchange_callback(nullptr);  // new reference: our callback
  CacheEntry* e = translate(frame, mine, extra);
  PyObject* none = exchange_callback(mine);
  Py_XDECREF(none);
  Py_XDECREF(mine);
  if (!e) {
    if (PyErr_Occurred()) return nullptr;
    return compat::eval_default(tstate, frame, throwflag);
  }
  return run_entry(tstate, frame, e);
}

}  // namespace cdynamo::hook
