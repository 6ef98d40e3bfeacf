// state.cpp — owns the thread-local callback, hook installation counting and the OptimizedCallable type.
#include "hook/state.h"

#include <structmember.h>

#include "compat/compat.h"
#include "guards/tensor_match.h"
#include "hook/eval_frame.h"

namespace cdynamo::hook {

namespace {
thread_local PyObject* tl_callback = nullptr;  // strong reference while set
int g_active = 0;                               // threads with a callback; guarded by the GIL
PyObject* g_run_only = nullptr;                 // strong, process lifetime
compat::EvalFrameFn g_previous_hook = nullptr;  // what was installed before ours (another frontend's hook)
}  // namespace

PyObject* current_callback() { return tl_callback; }
PyObject* run_only() { return g_run_only; }

PyObject* exchange_callback(PyObject* cb) {
  if (cb == Py_None) cb = nullptr;
  PyObject* prev = tl_callback;  // ownership moves to the caller
  Py_XINCREF(cb);
  tl_callback = cb;
  if (!prev && cb) {
    if (g_active++ == 0) {
      compat::EvalFrameFn before = compat::set_eval_frame(&eval_frame);
      g_previous_hook = before == &eval_frame ? nullptr : before;
    }
  } else if (prev && !cb) {
    if (--g_active == 0) compat::set_eval_frame(g_previous_hook);
  }
  return prev;
}

namespace {

struct OptimizedCallable {
  PyObject_HEAD
  PyObject* fn;    // strong
  PyObject* cb;    // strong; Py_None = capture disabled inside
  PyObject* dict;  // strong, may be NULL
  vectorcallfunc vectorcall;
};

// torch.compile starts a new generation of inductor's CUDA-graph trees at every entry of a compiled callable
// (torch._dynamo.mutation_guard.GenerationTracker.generation += 1): the trees may then reuse the memory of the
// previous invocation's outputs, which they would otherwise keep apart while any of them is alive (a user's loop
// that keeps the last output). cdynamo does the same at the entry of an OptimizedCallable that captures or runs
// compiled code, once the trees' module (torch._inductor.cudagraph_trees, the counter's only reader) is loaded:
// nothing is imported here, and a process without CUDA graphs pays one dict lookup. Never fails the call.
void next_generation() {
  static PyObject* trees_name = PyUnicode_InternFromString("torch._inductor.cudagraph_trees");  // kept forever
  static PyObject* module_name = PyUnicode_InternFromString("torch._dynamo.mutation_guard");  // kept forever
  static PyObject* tracker_name = PyUnicode_InternFromString("GenerationTracker");            // kept forever
  static PyObject* generation_name = PyUnicode_InternFromString("generation");                // kept forever
  static PyObject* one = PyLong_FromLong(1);                                                   // kept forever
  if (!trees_name || !module_name || !tracker_name || !generation_name || !one) {
    PyErr_Clear();
    return;
  }
  PyObject* modules = PyImport_GetModuleDict();  // borrowed
  PyObject* exc_type, *exc_value, *exc_tb;
  PyErr_Fetch(&exc_type, &exc_value, &exc_tb);  // owned here (none expected; kept intact)
  PyObject* trees = PyDict_GetItemWithError(modules, trees_name);                   // borrowed
  PyObject* mod = trees ? PyDict_GetItemWithError(modules, module_name) : nullptr;  // borrowed
  PyObject* tracker = mod ? PyObject_GetAttr(mod, tracker_name) : nullptr;  // new reference
  PyObject* gen = tracker ? PyObject_GetAttr(tracker, generation_name) : nullptr;  // new reference
  PyObject* next = gen ? PyNumber_Add(gen, one) : nullptr;                  // new reference
  if (next && PyObject_SetAttr(tracker, generation_name, next) < 0) PyErr_Clear();
  PyErr_Clear();  // a lookup that failed
  Py_XDECREF(next);
  Py_XDECREF(gen);
  Py_XDECREF(tracker);
  PyErr_Restore(exc_type, exc_value, exc_tb);  // steals the three
}

PyObject* oc_vectorcall(PyObject* self, PyObject* const* args, size_t nargsf, PyObject* kwnames) {
  auto* o = reinterpret_cast<OptimizedCallable*>(self);
  if (o->cb != Py_None) next_generation();
  PyObject* prev = exchange_callback(o->cb);  // new reference (or NULL)
  PyObject* result = PyObject_Vectorcall(o->fn, args, nargsf, kwnames);  // new reference
  PyObject* mine = exchange_callback(prev);   // restores; returns our cb (new ref)
  Py_XDECREF(prev);
  Py_XDECREF(mine);
  return result;
}

int oc_traverse(PyObject* self, visitproc visit, void* arg) {
  auto* o = reinterpret_cast<OptimizedCallable*>(self);
  Py_VISIT(o->fn);
  Py_VISIT(o->cb);
  Py_VISIT(o->dict);
  return 0;
}

int oc_clear(PyObject* self) {
  auto* o = reinterpret_cast<OptimizedCallable*>(self);
  Py_CLEAR(o->fn);
  Py_CLEAR(o->cb);
  Py_CLEAR(o->dict);
  return 0;
}

void oc_dealloc(PyObject* self) {
  PyObject_GC_UnTrack(self);
  oc_clear(self);
  Py_TYPE(self)->tp_free(self);
}

PyObject* oc_new(PyTypeObject* type, PyObject* args, PyObject* kwargs) {
  static const char* kwlist[] = {"fn", "callback", nullptr};
  PyObject* fn = nullptr;
  PyObject* cb = nullptr;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OO:OptimizedCallable", const_cast<char**>(kwlist), &fn, &cb))
    return nullptr;
  if (!PyCallable_Check(fn)) {
    PyErr_Format(PyExc_TypeError, "OptimizedCallable expects a callable, got %.200s", Py_TYPE(fn)->tp_name);
    return nullptr;
  }
  auto* o = reinterpret_cast<OptimizedCallable*>(type->tp_alloc(type, 0));  // new reference
  if (!o) return nullptr;
  Py_INCREF(fn);
  Py_INCREF(cb);
  o->fn = fn;
  o->cb = cb;
  o->dict = PyDict_New();  // new reference
  o->vectorcall = oc_vectorcall;
  if (!o->dict || PyDict_SetItemString(o->dict, "__wrapped__", fn) < 0) {
    Py_DECREF(o);
    return nullptr;
  }
  return reinterpret_cast<PyObject*>(o);
}

PyObject* oc_descr_get(PyObject* self, PyObject* obj, PyObject*) {
  if (obj == nullptr || obj == Py_None) {
    Py_INCREF(self);
    return self;
  }
  return PyMethod_New(self, obj);  // new reference
}

PyObject* oc_repr(PyObject* self) {
  auto* o = reinterpret_cast<OptimizedCallable*>(self);
  return PyUnicode_FromFormat("<cdynamo.OptimizedCallable of %R>", o->fn);
}

PyObject* oc_get_fn(PyObject* self, void*) {
  PyObject* fn = reinterpret_cast<OptimizedCallable*>(self)->fn;
  Py_INCREF(fn);
  return fn;
}

PyObject* oc_get_cb(PyObject* self, void*) {
  PyObject* cb = reinterpret_cast<OptimizedCallable*>(self)->cb;
  Py_INCREF(cb);
  return cb;
}

PyGetSetDef oc_getset[] = {
    {"_fn", oc_get_fn, nullptr, "the wrapped callable", nullptr},
    {"_callback", oc_get_cb, nullptr, "the callback set while the callable runs", nullptr},
    {"__dict__", PyObject_GenericGetDict, PyObject_GenericSetDict, nullptr, nullptr},
    {nullptr, nullptr, nullptr, nullptr, nullptr},
};

}  // namespace

PyTypeObject OptimizedCallableType = {PyVarObject_HEAD_INIT(nullptr, 0)};

PyObject* make_optimized_callable(PyObject* fn, PyObject* cb) {
  PyObject* args = PyTuple_Pack(2, fn, cb);  // new reference
  if (!args) return nullptr;
  PyObject* r = oc_new(&OptimizedCallableType, args, nullptr);
  Py_DECREF(args);
  return r;
}

int init_state() {
  PyTypeObject& t = OptimizedCallableType;
  t.tp_name = "cdynamo._C.OptimizedCallable";
  t.tp_basicsize = sizeof(OptimizedCallable);
  t.tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL | Py_TPFLAGS_METHOD_DESCRIPTOR;
  t.tp_doc = "Runs a callable with cdynamo's frame callback set for the duration of each call.";
  t.tp_new = oc_new;
  t.tp_dealloc = oc_dealloc;
  t.tp_traverse = oc_traverse;
  t.tp_clear = oc_clear;
  t.tp_call = PyVectorcall_Call;
  t.tp_vectorcall_offset = offsetof(OptimizedCallable, vectorcall);
  t.tp_descr_get = oc_descr_get;
  t.tp_repr = oc_repr;
  t.tp_getset = oc_getset;
  t.tp_dictoffset = offsetof(OptimizedCallable, dict);
  if (PyType_Ready(&t) < 0) return -1;
  if (!g_run_only) {
    g_run_only = PyObject_CallNoArgs(reinterpret_cast<PyObject*>(&PyBaseObject_Type));  // new, kept forever
    if (!g_run_only) return -1;
  }
  return 0;
}

}  // namespace cdynamo::hook
