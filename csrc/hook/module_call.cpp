// module_call.cpp — owns OptimizedModule.__call__ in C++: nn.Module's no-hook call path without a Python frame.
#include "hook/module_call.h"

#include "guards/tensor_match.h"

namespace cdynamo::hook {

namespace {

// Owned for the life of the process once installed (set once, never released: the class keeps the descriptor).
PyObject* g_nn_globals = nullptr;   // torch.nn.modules.module.__dict__ (the global hook dicts live there)
PyObject* g_fallback = nullptr;     // torch.nn.Module.__call__: every path this one does not take
PyObject* g_hook_names[4] = {};     // the instance's hook dicts
PyObject* g_global_names[4] = {};   // the module-level hook dicts
PyObject* g_compiled_name = nullptr;
PyObject* g_forward_name = nullptr;
PyObject* g_entries_name = nullptr;

// 1: truthy or missing (nn.Module's own path then decides), 0: falsy, -1: error set. `d` borrowed.
int truthy_item(PyObject* d, PyObject* name) {
  PyObject* v = PyDict_GetItemWithError(d, name);  // borrowed
  if (!v) return PyErr_Occurred() ? -1 : 1;
  return PyObject_IsTrue(v);
}

PyObject* call_fallback(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  const Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
  PyObject* small[9];
  PyObject** all = nargs + nkw + 1 <= 9 ? small : static_cast<PyObject**>(PyMem_Malloc((nargs + nkw + 1) * sizeof(PyObject*)));
  if (!all) return PyErr_NoMemory();
  all[0] = self;  // borrowed, as are the rest: the caller holds them for the call
  for (Py_ssize_t i = 0; i < nargs + nkw; ++i) all[i + 1] = args[i];
  PyObject* r = PyObject_Vectorcall(g_fallback, all, static_cast<size_t>(nargs + 1), kwnames);  // new reference
  if (all != small) PyMem_Free(all);
  return r;
}

PyObject* module_call_with(PyObject* self, PyObject* d, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames);

// OptimizedModule.__call__(self, *args, **kwargs): nn.Module.__call__ with its no-hook path inlined. Hooks on the
// wrapper, global module hooks, `module.compile()` and torch.jit tracing take nn.Module's own __call__; otherwise
// the forward's entry (positional or keyword trampoline) is called directly, or `forward` itself when replaced.
PyObject* module_call(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  PyObject* d = PyObject_GenericGetDict(self, nullptr);  // new reference
  if (!d) return nullptr;
  PyObject* r = PyDict_Check(d) ? module_call_with(self, d, args, nargs, kwnames)
                                : call_fallback(self, args, nargs, kwnames);  // new reference
  Py_DECREF(d);
  return r;
}

PyObject* module_call_with(PyObject* self, PyObject* d, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  for (PyObject* name : g_hook_names) {
    const int t = truthy_item(d, name);
    if (t < 0) return nullptr;
    if (t) return call_fallback(self, args, nargs, kwnames);
  }
  for (PyObject* name : g_global_names) {
    const int t = truthy_item(g_nn_globals, name);
    if (t < 0) return nullptr;
    if (t) return call_fallback(self, args, nargs, kwnames);
  }
  PyObject* compiled = PyDict_GetItemWithError(d, g_compiled_name);  // borrowed
  if (!compiled && PyErr_Occurred()) return nullptr;
  if ((compiled && compiled != Py_None) || guards::jit_tracing()) return call_fallback(self, args, nargs, kwnames);
  PyObject* fwd = PyDict_GetItemWithError(d, g_forward_name);         // borrowed
  PyObject* entries = fwd ? PyDict_GetItemWithError(d, g_entries_name) : nullptr;  // borrowed
  if (!entries) {
    if (PyErr_Occurred()) return nullptr;
    return call_fallback(self, args, nargs, kwnames);  // not set up as __init__ does: Module's path says why
  }
  const bool kw = kwnames && PyTuple_GET_SIZE(kwnames) > 0;
  if (PyTuple_CheckExact(entries) && PyTuple_GET_SIZE(entries) == 3 && PyTuple_GET_ITEM(entries, 0) == fwd) {
    PyObject* entry = PyTuple_GET_ITEM(entries, kw ? 2 : 1);  // borrowed from the tuple, held across the call
    Py_INCREF(entry);
    PyObject* r = PyObject_Vectorcall(entry, args, static_cast<size_t>(nargs), kw ? kwnames : nullptr);  // new
    Py_DECREF(entry);
    return r;
  }
  Py_INCREF(fwd);  // a forward the user set: called as it is
  PyObject* r = PyObject_Vectorcall(fwd, args, static_cast<size_t>(nargs), kw ? kwnames : nullptr);  // new
  Py_DECREF(fwd);
  return r;
}

PyMethodDef g_call_def = {"__call__", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)(void)>(module_call)),
                          METH_FASTCALL | METH_KEYWORDS,
                          "Calls the wrapped module's compiled forward (nn.Module.__call__ where hooks or tracing apply)."};

PyObject* intern(const char* s) { return PyUnicode_InternFromString(s); }  // new reference

}  // namespace

bool install_module_call(PyObject* type, PyObject* nn_globals, PyObject* fallback) {
  if (!PyType_Check(type) || !PyDict_Check(nn_globals) || !PyCallable_Check(fallback)) {
    PyErr_SetString(PyExc_TypeError, "install_module_call(type, dict, callable)");
    return false;
  }
  if (!g_nn_globals) {
    const char* hooks[4] = {"_forward_pre_hooks", "_forward_hooks", "_backward_pre_hooks", "_backward_hooks"};
    const char* globals[4] = {"_global_forward_pre_hooks", "_global_forward_hooks", "_global_backward_pre_hooks",
                              "_global_backward_hooks"};
    for (int i = 0; i < 4; ++i) {
      g_hook_names[i] = intern(hooks[i]);
      g_global_names[i] = intern(globals[i]);
      if (!g_hook_names[i] || !g_global_names[i]) return false;
    }
    g_compiled_name = intern("_compiled_call_impl");
    g_forward_name = intern("forward");
    g_entries_name = intern("_cdynamo_entries");
    if (!g_compiled_name || !g_forward_name || !g_entries_name) return false;
    Py_INCREF(nn_globals);
    Py_INCREF(fallback);
    g_nn_globals = nn_globals;
    g_fallback = fallback;
  }
  // A method descriptor of `type`: bound like a function (no bound-method object on a call through type slots)
  // and checks that self is an instance of `type`.
  PyObject* descr = PyDescr_NewMethod(reinterpret_cast<PyTypeObject*>(type), &g_call_def);  // new reference
  if (!descr) return false;
  const int rc = PyObject_SetAttrString(type, "__call__", descr);
  Py_DECREF(descr);
  return rc == 0;
}

}  // namespace cdynamo::hook
