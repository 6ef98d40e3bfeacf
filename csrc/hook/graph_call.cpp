// graph_call.cpp — owns the GraphCall type: capture off and grad mode kept around a compiled graph, and the
// clean-failure record (a graph that raised without writing its inputs or drawing random numbers), and the
// untraced-call builtin rewritten code makes modelled library objects with.
#include "hook/graph_call.h"

#include "codegen/rebuild.h"

#include <cstdint>
#include <vector>

#include "guards/tensor_match.h"
#include "hook/rng_state.h"
#include "hook/state.h"

namespace cdynamo::hook {

namespace {

thread_local PyObject* tl_clean_failure = nullptr;  // identity only, never dereferenced

// The lifted inputs a passing guard check fetched for the GraphCall `graph` (identity only), owned.
struct HandOff {
  PyObject* graph = nullptr;
  std::vector<PyObject*> values;
};
thread_local HandOff tl_handoff;

void release(std::vector<PyObject*>& values) {
  std::vector<PyObject*> dying;
  dying.swap(values);  // a dying object's finalizer may hand inputs again: the list is detached first
  for (PyObject* o : dying) Py_DECREF(o);
}

constexpr int64_t kNotTensor = -1;    // an argument that is not a tensor (nothing to compare)
constexpr int64_t kUntracked = -2;    // an inference tensor: no version counter, a write cannot be seen

struct GraphCall {
  PyObject_HEAD
  PyObject* fn;           // strong: the backend's compiled callable
  PyObject* rng_save;     // strong or NULL
  PyObject* rng_restore;  // strong or NULL
  PyObject* snap_mask;    // strong (bytes) or NULL
  PyObject* snap_save;    // strong or NULL
  PyObject* snap_restore; // strong or NULL
  PyObject* draws;         // strong or NULL
  PyObject* draws_restore; // strong or NULL
  vectorcallfunc vectorcall;
  GraphErrorPolicy policy;
  std::vector<int32_t>* plan;  // owned, or NULL: every input is an argument (GraphCallHooks::plan)
  Py_ssize_t nlifted;          // entries of `plan` >= 0
};

int64_t version_of(PyObject* arg) {
  int64_t v = 0;
  if (guards::tensor_version(arg, &v)) return v;
  return guards::is_tensor(arg) ? kUntracked : kNotTensor;
}

// Calls fn(args...) keeping the error that is set across it; false if fn raised (its error dropped).
bool call_keeping_error(PyObject* fn, PyObject* a, PyObject* b) {
  PyObject *type, *value, *tb;
  PyErr_Fetch(&type, &value, &tb);  // the graph's error
  PyObject* r = b ? PyObject_CallFunctionObjArgs(fn, a, b, nullptr) : PyObject_CallOneArg(fn, a);  // new ref
  bool ok = r != nullptr;
  Py_XDECREF(r);
  if (!ok) PyErr_Clear();
  PyErr_Restore(type, value, tb);
  return ok;
}

// After a failed call (error set): whether the inputs and the RNG are as they were before it, putting back
// the snapshot of written inputs and the RNG state where there are.
bool failed_cleanly(GraphCall* g, PyObject* const* args, Py_ssize_t n, const int64_t* before, PyObject* rng,
                    CpuRngState* cpu_rng, PyObject* argtuple, PyObject* copies) {
  if (g->policy == GraphErrorPolicy::Propagate || !PyErr_ExceptionMatches(PyExc_Exception)) return false;
  bool restore = false;
  if (before) {
    const char* mask = copies ? PyBytes_AS_STRING(g->snap_mask) : nullptr;
    Py_ssize_t nmask = copies ? PyBytes_GET_SIZE(g->snap_mask) : 0;
    for (Py_ssize_t i = 0; i < n; ++i) {
      if (before[i] == kNotTensor) continue;
      if (before[i] == kUntracked) return false;
      if (version_of(args[i]) == before[i]) continue;
      if (i >= nmask || !mask[i]) return false;  // written, and no copy to put back
      restore = true;
    }
  }
  if (restore && !call_keeping_error(g->snap_restore, argtuple, copies)) return false;
  if (g->draws && !call_keeping_error(g->draws_restore, g->draws, nullptr)) return false;
  if (cpu_rng && cpu_rng->saved()) return cpu_rng->restore_keeping_error();
  return !rng || call_keeping_error(g->rng_restore, rng, nullptr);
}

PyObject* run_graph(PyObject* self, PyObject* const* args, size_t nargsf, PyObject* kwnames) {
  auto* g = reinterpret_cast<GraphCall*>(self);
  Py_ssize_t n = PyVectorcall_NARGS(nargsf);
  PyObject* prev = exchange_callback(nullptr);  // new reference (or NULL): frames run by the graph are not captured
  bool grad_mode = guards::grad_mode_enabled();
  std::vector<int64_t> before;
  if (g->policy == GraphErrorPolicy::CheckVersions) {
    before.resize(static_cast<size_t>(n));
    for (Py_ssize_t i = 0; i < n; ++i) before[static_cast<size_t>(i)] = version_of(args[i]);
  }
  bool ready = true;
  PyObject* rng = nullptr;       // new reference
  PyObject* argtuple = nullptr;  // new reference
  PyObject* copies = nullptr;    // new reference
  CpuRngState cpu_rng;  // the CPU generator saved in C++ while no CUDA generator is in use (no Python call)
  if (g->rng_save && !cuda_rng_in_use()) {
    ready = cpu_rng.save();
  } else if (g->rng_save) {
    rng = PyObject_CallNoArgs(g->rng_save);
    ready = rng != nullptr;
  }
  if (ready && g->snap_mask && !kwnames) {
    argtuple = PyTuple_New(n);
    ready = argtuple != nullptr;
    for (Py_ssize_t i = 0; ready && i < n; ++i) {
      Py_INCREF(args[i]);
      PyTuple_SET_ITEM(argtuple, i, args[i]);  // steals
    }
    if (ready) copies = PyObject_CallFunctionObjArgs(g->snap_save, g->snap_mask, argtuple, nullptr);
    ready = copies != nullptr;
  }
  PyObject* result = ready ? PyObject_Vectorcall(g->fn, args, nargsf, kwnames) : nullptr;  // new reference
  if (!result) {
    // A graph that switches grad mode (`with torch.no_grad()` inside) and raises half-way must not leave
    // the switched mode behind: eager's `with` would have restored it.
    guards::set_grad_mode_enabled(grad_mode);
    if (ready && failed_cleanly(g, args, n, before.empty() ? nullptr : before.data(), rng, &cpu_rng, argtuple,
                                copies))
      tl_clean_failure = self;
  }
  Py_XDECREF(rng);
  Py_XDECREF(argtuple);
  Py_XDECREF(copies);
  PyObject* none = exchange_callback(prev);  // restores; returns NULL (ours was off)
  Py_XDECREF(none);
  Py_XDECREF(prev);
  return result;
}

// The graph's inputs in order: the call's arguments, with the inputs handed by the guard check spliced in.
PyObject* gc_vectorcall(PyObject* self, PyObject* const* args, size_t nargsf, PyObject* kwnames) {
  auto* g = reinterpret_cast<GraphCall*>(self);
  if (!g->plan) return run_graph(self, args, nargsf, kwnames);
  const std::vector<int32_t>& plan = *g->plan;
  Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
  if (tl_handoff.graph != self || kwnames || static_cast<Py_ssize_t>(tl_handoff.values.size()) != g->nlifted ||
      nargs != static_cast<Py_ssize_t>(plan.size()) - g->nlifted) {
    // Only the entry's rewritten code calls this, right after its guard check handed the inputs over.
    PyErr_SetString(PyExc_RuntimeError, "cdynamo: a compiled graph was called without the inputs its guard check "
                                        "fetched");
    return nullptr;
  }
  std::vector<PyObject*> lifted;  // owned
  lifted.swap(tl_handoff.values);
  tl_handoff.graph = nullptr;
  std::vector<PyObject*> full(plan.size());  // borrowed: from the caller's arguments and `lifted`
  Py_ssize_t a = 0;
  for (size_t i = 0; i < plan.size(); ++i) full[i] = plan[i] < 0 ? args[a++] : lifted[static_cast<size_t>(plan[i])];
  PyObject* r = run_graph(self, full.data(), full.size(), nullptr);  // new reference
  release(lifted);
  return r;
}

int gc_traverse(PyObject* self, visitproc visit, void* arg) {
  auto* g = reinterpret_cast<GraphCall*>(self);
  Py_VISIT(g->fn);
  Py_VISIT(g->rng_save);
  Py_VISIT(g->rng_restore);
  Py_VISIT(g->snap_mask);
  Py_VISIT(g->snap_save);
  Py_VISIT(g->snap_restore);
  Py_VISIT(g->draws);
  Py_VISIT(g->draws_restore);
  return 0;
}

int gc_clear(PyObject* self) {
  auto* g = reinterpret_cast<GraphCall*>(self);
  Py_CLEAR(g->fn);
  Py_CLEAR(g->rng_save);
  Py_CLEAR(g->rng_restore);
  Py_CLEAR(g->snap_mask);
  Py_CLEAR(g->snap_save);
  Py_CLEAR(g->snap_restore);
  Py_CLEAR(g->draws);
  Py_CLEAR(g->draws_restore);
  return 0;
}

void gc_dealloc(PyObject* self) {
  PyObject_GC_UnTrack(self);
  gc_clear(self);
  delete reinterpret_cast<GraphCall*>(self)->plan;
  Py_TYPE(self)->tp_free(self);
}

PyObject* gc_repr(PyObject* self) {
  return PyUnicode_FromFormat("<cdynamo.GraphCall of %R>", reinterpret_cast<GraphCall*>(self)->fn);
}

PyObject* gc_get_fn(PyObject* self, void*) {
  PyObject* fn = reinterpret_cast<GraphCall*>(self)->fn;
  Py_INCREF(fn);
  return fn;
}

PyObject* gc_get_policy(PyObject* self, void*) {
  return PyLong_FromLong(static_cast<long>(reinterpret_cast<GraphCall*>(self)->policy));  // new reference
}

PyObject* gc_get_saves_rng(PyObject* self, void*) {
  return PyBool_FromLong(reinterpret_cast<GraphCall*>(self)->rng_save != nullptr);  // new reference
}

PyObject* gc_get_snapshot(PyObject* self, void*) {
  PyObject* mask = reinterpret_cast<GraphCall*>(self)->snap_mask;
  PyObject* r = mask ? mask : Py_None;
  Py_INCREF(r);
  return r;
}

PyObject* gc_get_lifted(PyObject* self, void*) {
  return PyLong_FromSsize_t(reinterpret_cast<GraphCall*>(self)->nlifted);  // new reference
}

PyGetSetDef gc_getset[] = {
    {"_lifted_inputs", gc_get_lifted, nullptr, "how many inputs the guard check hands over (not loaded by code)",
     nullptr},
    {"_fn", gc_get_fn, nullptr, "the backend's compiled callable", nullptr},
    {"_error_policy", gc_get_policy, nullptr, "0 propagate, 1 clean, 2 check input versions", nullptr},
    {"_snapshot_mask", gc_get_snapshot, nullptr, "the inputs copied before each call (bytes) or None", nullptr},
    {"_saves_rng", gc_get_saves_rng, nullptr, "whether the RNG state is saved around each call", nullptr},
    {nullptr, nullptr, nullptr, nullptr, nullptr},
};

}  // namespace

PyTypeObject GraphCallType = {PyVarObject_HEAD_INIT(nullptr, 0)};

PyObject* make_graph_call(PyObject* fn, GraphErrorPolicy policy, const GraphCallHooks& hooks) {
  if (!PyCallable_Check(fn)) {
    PyErr_Format(PyExc_TypeError, "GraphCall expects a callable, got %.200s", Py_TYPE(fn)->tp_name);
    return nullptr;
  }
  if ((hooks.rng_save == nullptr) != (hooks.rng_restore == nullptr) ||
      (hooks.snap_mask == nullptr) != (hooks.snap_save == nullptr) ||
      (hooks.snap_mask == nullptr) != (hooks.snap_restore == nullptr) ||
      (hooks.snap_mask && !PyBytes_Check(hooks.snap_mask)) || (hooks.draws == nullptr) != (hooks.draws_restore == nullptr)) {
    PyErr_SetString(PyExc_ValueError, "GraphCall: incomplete rng or snapshot hooks");
    return nullptr;
  }
  auto* g = PyObject_GC_New(GraphCall, &GraphCallType);  // new reference
  if (!g) return nullptr;
  PyObject* owned[] = {fn, hooks.rng_save, hooks.rng_restore, hooks.snap_mask, hooks.snap_save, hooks.snap_restore,
                       hooks.draws, hooks.draws_restore};
  for (PyObject* o : owned) Py_XINCREF(o);
  g->fn = fn;
  g->rng_save = hooks.rng_save;
  g->rng_restore = hooks.rng_restore;
  g->snap_mask = hooks.snap_mask;
  g->snap_save = hooks.snap_save;
  g->snap_restore = hooks.snap_restore;
  g->draws = hooks.draws;
  g->draws_restore = hooks.draws_restore;
  g->vectorcall = gc_vectorcall;
  g->policy = policy;
  g->plan = hooks.plan.empty() ? nullptr : new std::vector<int32_t>(hooks.plan);
  g->nlifted = 0;
  for (int32_t k : hooks.plan) g->nlifted += k >= 0 ? 1 : 0;
  PyObject_GC_Track(g);
  return reinterpret_cast<PyObject*>(g);
}

bool take_clean_failure(PyObject* graph) {
  bool mine = tl_clean_failure == graph;
  tl_clean_failure = nullptr;
  return mine;
}

void clear_clean_failure() { tl_clean_failure = nullptr; }

void hand_inputs(PyObject* graph, std::vector<PyObject*>&& values) {
  drop_handed_inputs();
  tl_handoff.values = std::move(values);
  tl_handoff.graph = graph;
}

void drop_handed_inputs() {
  tl_handoff.graph = nullptr;
  if (!tl_handoff.values.empty()) release(tl_handoff.values);
}

namespace {

// untraced_call(fn, *args, **kwargs): fn's call with capture off (frames it runs are not compiled). Rewritten
// code makes the library objects the trace modelled this way (a ModelOutput's own __init__ and
// __post_init__ are run, not traced again on every call).
PyObject* untraced_call(PyObject*, PyObject* const* args, size_t nargsf, PyObject* kwnames) {
  Py_ssize_t n = PyVectorcall_NARGS(nargsf);
  if (n < 1) {
    PyErr_SetString(PyExc_TypeError, "untraced_call needs a callable");
    return nullptr;
  }
  PyObject* prev = exchange_callback(nullptr);  // new reference (or NULL)
  PyObject* result = PyObject_Vectorcall(args[0], args + 1, static_cast<size_t>(n - 1), kwnames);  // new reference
  PyObject* none = exchange_callback(prev);
  Py_XDECREF(none);
  Py_XDECREF(prev);
  return result;
}

PyMethodDef untraced_call_def = {"_cdynamo_untraced_call",
                                 reinterpret_cast<PyCFunction>(reinterpret_cast<void*>(untraced_call)),
                                 METH_FASTCALL | METH_KEYWORDS, "Calls fn(*args, **kwargs) with capture off."};

}  // namespace

int init_graph_call() {
  PyObject* untraced = PyCFunction_New(&untraced_call_def, nullptr);  // new reference, kept for the process
  if (!untraced) return -1;
  codegen::set_untraced_call(untraced);
  PyTypeObject& t = GraphCallType;
  t.tp_name = "cdynamo._C.GraphCall";
  t.tp_basicsize = sizeof(GraphCall);
  t.tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL;
  t.tp_doc = "Runs a compiled graph for rewritten code: capture off, grad mode restored on error.";
  t.tp_dealloc = gc_dealloc;
  t.tp_traverse = gc_traverse;
  t.tp_clear = gc_clear;
  t.tp_call = PyVectorcall_Call;
  t.tp_vectorcall_offset = offsetof(GraphCall, vectorcall);
  t.tp_repr = gc_repr;
  t.tp_getset = gc_getset;
  return PyType_Ready(&t);
}

}  // namespace cdynamo::hook
