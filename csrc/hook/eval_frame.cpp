// eval_frame.cpp — owns the hot path: skip rules, cache lookup by guards, running cached code, and the
// hand-off to translation on a miss.
#include "hook/eval_frame.h"

#include <pybind11/pybind11.h>

#include <algorithm>
#include <optional>
#include <stdexcept>

#include "hook/graph_call.h"
#include "hook/state.h"
#include "interp/skip_files.h"

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

// A marker returned by call_entry: the graph failed cleanly and the frame must run as Python.
char g_ran_as_python_marker;
PyObject* const kRanAsPython = reinterpret_cast<PyObject*>(&g_ran_as_python_marker);

// Calls the entry's function with the frame's argument slots (borrowed from the frame, which stays intact).
// Returns a new reference, NULL with an error set, or kRanAsPython (the error was fetched into the entry's
// rerun state: see ran_as_python).
PyObject* call_entry(PyThreadState*, compat::Frame* frame, CacheEntry* e) {
  RunningCompiled running;
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
  clear_clean_failure();
  PyObject* r = PyObject_Vectorcall(e->func.ptr(), compat::frame_localsplus(frame), static_cast<size_t>(e->nargs),
                                    nullptr);  // new reference
  if (!r && e->graph && take_clean_failure(e->graph.ptr())) return kRanAsPython;
  return r;
}

PyObject* ran_as_python(PyThreadState* tstate, compat::Frame* frame, CacheEntry* e) {
  // The graph raised before the rewritten code did anything else (the graph call comes first, its Python
  // side effects are written after it) and changed no input: eager would have run the side effects
  // traced before the failing op. The frame, not yet started, runs as Python instead, raising where
  // eager raises.
  PyObject *type, *value, *tb;
  PyErr_Fetch(&type, &value, &tb);  // owned here
  PyErr_NormalizeException(&type, &value, &tb);
  PyObject* name = compat::frame_code(frame)->co_name;  // borrowed: the frame (and its code) go below
  Py_INCREF(name);
  PyObject* r = compat::eval_default(tstate, frame, 0);  // new reference; the frame is consumed
  if (r && !e->warned_rerun) {
    // Eager did not raise where the graph did: the backend's code is at fault. Said once per entry.
    e->warned_rerun = true;
    if (PyErr_WarnFormat(PyExc_RuntimeWarning, 1,
                         "cdynamo: the compiled graph of %U raised %R, but the frame ran as Python without "
                         "error (its result is used); the backend may be broken",
                         name, value ? value : Py_None) < 0) {
      Py_CLEAR(r);  // warnings turned into errors
    }
  }
  Py_DECREF(name);
  Py_XDECREF(type);
  Py_XDECREF(value);
  Py_XDECREF(tb);
  return r;
}

// Runs the entry's code with the frame's argument slots; the frame itself is either handed to eval_default
// or released unrun (compat::release_unrun_frame). Returns a new reference or NULL.
PyObject* run_entry(PyThreadState* tstate, compat::Frame* frame, CacheEntry* e) {
  if (!e->code || compat::frame_has_object(frame)) {
    drop_handed_inputs();
    return compat::eval_default(tstate, frame, 0);
  }
  PyObject* r = call_entry(tstate, frame, e);
  drop_handed_inputs();  // taken by the graph call, unless the code failed before it
  if (r == kRanAsPython) return ran_as_python(tstate, frame, e);
  compat::release_unrun_frame(tstate, frame);
  return r;
}

// One compile at a time in the process, as torch.compile does: tracing and backends (aot_eager, inductor)
// keep global state. A Python RLock, so a thread waiting for it lets the others run (the GIL is released)
// and a backend that compiles through cdynamo again does not deadlock on itself.
PyObject* g_compile_lock = nullptr;  // owned for the process lifetime; made by init_compile_lock at import

class CompileLock {
 public:
  CompileLock() {
    // Made when cdynamo._C is imported, never here: an import in the frame hook would run a Python-level
    // builtins.__import__ override, whose frame reaches this hook again before the lock exists (endless recursion).
    if (!g_compile_lock) throw std::runtime_error("cdynamo's compile lock was not made at import");
    lock_ = g_compile_lock;
    PyObject* r = PyObject_CallMethod(lock_, "acquire", nullptr);  // new reference
    if (!r) throw py::error_already_set();
    Py_DECREF(r);
  }
  ~CompileLock() {
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);  // the compile's own error survives the release
    PyObject* r = PyObject_CallMethod(lock_, "release", nullptr);  // new reference
    if (!r) PyErr_Clear();
    Py_XDECREF(r);
    PyErr_Restore(type, value, tb);
  }
  CompileLock(const CompileLock&) = delete;
  CompileLock& operator=(const CompileLock&) = delete;

 private:
  PyObject* lock_;  // borrowed (process lifetime)
};

bool plain_function_code(PyCodeObject* code) {
  int flags = code->co_flags;
  if (!(flags & CO_OPTIMIZED) || !(flags & CO_NEWLOCALS)) return false;  // module / class bodies, exec
  if (flags & (CO_GENERATOR | CO_COROUTINE | CO_ASYNC_GENERATOR | CO_ITERABLE_COROUTINE)) return false;
  return true;
}

}  // namespace

namespace {
std::vector<PyObject*>* g_disable_codes = new std::vector<PyObject*>();  // owned, process lifetime

// This thread's callback is off for a scope (frames run inside are not captured), then restored.
class CallbackOff {
 public:
  CallbackOff() : mine_(exchange_callback(nullptr)) {}  // new reference: the callback that was set
  ~CallbackOff() {
    PyObject* none = exchange_callback(mine_);
    Py_XDECREF(none);
    Py_XDECREF(mine_);
  }
  CallbackOff(const CallbackOff&) = delete;
  CallbackOff& operator=(const CallbackOff&) = delete;
  PyObject* callback() const { return mine_; }  // borrowed

 private:
  PyObject* mine_;
};

// A library frame (never captured itself): torch.compiler.disable's wrapper also runs what it calls
// without capture; any other runs as it is.
PyObject* eval_library(PyThreadState* tstate, compat::Frame* frame, int throwflag) {
  PyObject* code = reinterpret_cast<PyObject*>(compat::frame_code(frame));
  for (PyObject* c : *g_disable_codes)
    if (code == c) {
      CallbackOff off;
      return compat::eval_default(tstate, frame, throwflag);
    }
  return compat::eval_default(tstate, frame, throwflag);
}

// Whether the entry's guards pass; an entry whose graph takes lifted inputs gets them handed over by the check.
bool entry_matches(const CacheEntry& e, const guards::FrameView& fv) {
  if (!e.graph || e.guards.input_sources().empty()) return e.guards.check(fv);
  std::vector<PyObject*> lifted;  // new references
  if (!e.guards.check_inputs(fv, &lifted)) return false;
  hand_inputs(e.graph.ptr(), std::move(lifted));  // taken by the graph call the entry's code starts with
  return true;
}

// A new entry runs once without its guards checked (it was just compiled for this frame): its lifted inputs are
// the check's if it passes, else fetched from their sources as the rewritten code would have loaded them. False if
// one is missing.
bool hand_new_entry_inputs(const CacheEntry& e, compat::Frame* frame) {
  if (!e.graph || e.guards.input_sources().empty()) return true;
  guards::FrameView fv = frame_view(frame);
  if (entry_matches(e, fv)) return true;
  std::vector<PyObject*> values;  // new references
  for (const auto& s : e.guards.input_sources()) {
    PyObject* v = s->fetch(fv);  // new reference, or nullptr with no error set
    if (!v) {
      for (PyObject* o : values) Py_DECREF(o);
      return false;
    }
    values.push_back(v);
  }
  hand_inputs(e.graph.ptr(), std::move(values));
  return true;
}

// The first entry of `extra` whose globals and guards fit the frame, held while the caller uses it.
std::shared_ptr<CacheEntry> find_entry(CodeExtra* extra, compat::Frame* frame, PyObject* cb) {
  if (extra->entries.empty()) return nullptr;
  guards::FrameView fv = frame_view(frame);
  for (size_t i = 0; i < extra->entries.size(); ++i) {  // by index: a guard running Python may append
    std::shared_ptr<CacheEntry> e = extra->entries[i];
    if (e->globals.ptr() == fv.globals && entry_serves(*e, cb) && entry_matches(*e, fv)) {
      // Most recently used first, as torch._dynamo orders its entries. Only while no other call (a guard's
      // Python, another thread, a recursion) is walking this list by index; which entry matches never depends
      // on the order (every entry's guards are complete), only how many are checked before it.
      auto& v = extra->entries;
      if (i > 0 && extra->pins == 1 && i < v.size() && v[i] == e)
        std::rotate(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(i), v.begin() + static_cast<std::ptrdiff_t>(i) + 1);
      return e;
    }
  }
  return nullptr;
}
}  // namespace

void set_disable_codes(const std::vector<PyObject*>& codes) {
  for (PyObject* c : *g_disable_codes) Py_DECREF(c);
  g_disable_codes->clear();
  for (PyObject* c : codes) {
    Py_INCREF(c);
    g_disable_codes->push_back(c);
  }
}

PyObject* eval_frame(PyThreadState* tstate, compat::Frame* frame, int throwflag) {
  PyObject* cb = current_callback();
  if (!cb || throwflag || compat::frame_started(frame)) return compat::eval_default(tstate, frame, throwflag);
  // Another tracer (torch.jit.trace) records these ops itself: compiled code would change what it sees.
  if (guards::jit_tracing()) return compat::eval_default(tstate, frame, throwflag);
  // The function a disable(fn, recursive=False) wrapper calls runs as Python; the frames it calls are captured.
  if (interp::is_nonrecursive_wrapper(compat::caller_code(tstate))) return compat::eval_default(tstate, frame, throwflag);
  PyCodeObject* code = compat::frame_code(frame);
  CodeExtra* extra = get_extra(code);
  if (extra) {
    if (extra->skip) return eval_library(tstate, frame, throwflag);
    if (extra->generated) return compat::eval_default(tstate, frame, throwflag);
    if (extra->continuation && continuation_too_deep(tstate)) return compat::eval_default(tstate, frame, throwflag);
  } else if (!plain_function_code(code) || compat::frame_locals_dict(frame) || skip_by_file(code) ||
             interp::is_skipped_code(code) || interp::is_skipped_function(compat::frame_function(frame))) {
    try {
      ensure_extra(code)->skip = true;
    } catch (const std::exception&) {
    }
    return eval_library(tstate, frame, throwflag);
  }
  if (extra && !extra->entries.empty()) {
    ExtraPin pin(extra);  // a guard may run Python, and that Python may reset() or compile this code
    if (std::shared_ptr<CacheEntry> e = find_entry(extra, frame, cb)) return run_entry(tstate, frame, e.get());
  }
  if (cb == run_only()) return compat::eval_default(tstate, frame, throwflag);
  if (!extra) {
    try {
      extra = ensure_extra(code);
    } catch (const std::exception&) {
      return compat::eval_default(tstate, frame, throwflag);
    }
  }
  ExtraPin pin(extra);
  std::shared_ptr<CacheEntry> e;
  {
    std::optional<CompileLock> lock;
    try {
      lock.emplace();
    } catch (py::error_already_set& err) {
      err.restore();
      compat::release_unrun_frame(tstate, frame);  // the frame never runs (3.12: it must still be popped)
      return nullptr;  // the wait was interrupted (KeyboardInterrupt): the user's error
    }
    // Another thread may have compiled this code while we waited: its entry may fit.
    e = find_entry(extra, frame, cb);
    if (!e) {
      {
        CallbackOff off;  // frames run while compiling (shape propagation, fx, the backend) are not captured
        e = translate(frame, off.callback(), extra);
      }
      if (e && !hand_new_entry_inputs(*e, frame)) {
        drop_handed_inputs();
        return compat::eval_default(tstate, frame, throwflag);  // an input is missing: eager raises where it does
      }
    }
  }
  if (!e) {
    if (PyErr_Occurred()) {
      compat::release_unrun_frame(tstate, frame);  // raised instead of running (3.12: still popped)
      return nullptr;
    }
    return compat::eval_default(tstate, frame, throwflag);
  }
  return run_entry(tstate, frame, e.get());
}

int init_compile_lock() {
  if (g_compile_lock) return 0;
  PyObject* threading = PyImport_ImportModule("threading");  // new reference
  if (!threading) return -1;
  g_compile_lock = PyObject_CallMethod(threading, "RLock", nullptr);  // new reference, kept
  Py_DECREF(threading);
  return g_compile_lock ? 0 : -1;
}

}  // namespace cdynamo::hook
