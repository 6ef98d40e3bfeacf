// cache.cpp — owns code-extra storage, its registry for reset() and the cleanup of injected globals.
#include "hook/cache.h"

#include <stdexcept>
#include <unordered_set>

namespace cdynamo::hook {

namespace {

Py_ssize_t g_extra_index = -1;
std::unordered_set<CodeExtra*>* g_registry = new std::unordered_set<CodeExtra*>();  // process lifetime

void free_extra(void* p) {
  // Called by CPython (GIL held) when the code object dies or its extra is replaced.
  delete static_cast<CodeExtra*>(p);
}

}  // namespace

CodeExtra::~CodeExtra() {
  g_registry->erase(this);
  for (auto& e : entries) {
    for (const auto& name : e->injected) {
      if (e->globals && PyDict_Check(e->globals.ptr())) {
        if (PyDict_DelItemString(e->globals.ptr(), name.c_str()) < 0) PyErr_Clear();
      }
    }
  }
}

CodeExtra* get_extra(PyCodeObject* code) {
  void* p = nullptr;
  if (_PyCode_GetExtra(reinterpret_cast<PyObject*>(code), g_extra_index, &p) < 0) {
    PyErr_Clear();
    return nullptr;
  }
  return static_cast<CodeExtra*>(p);
}

CodeExtra* ensure_extra(PyCodeObject* code) {
  if (CodeExtra* e = get_extra(code)) return e;
  auto* e = new CodeExtra();
  e->code = code;
  if (_PyCode_SetExtra(reinterpret_cast<PyObject*>(code), g_extra_index, e) < 0) {
    PyErr_Clear();
    delete e;
    throw std::runtime_error("cannot attach cache data to code object");
  }
  g_registry->insert(e);
  return e;
}

void reset_all() {
  // Freeing one extra can free others (its rewritten and resume codes die with it), so take one element
  // at a time from the live registry instead of iterating a snapshot.
  while (!g_registry->empty()) {
    CodeExtra* e = *g_registry->begin();
    // Replacing the extra with NULL makes CPython call free_extra on the old value (which erases it).
    // That can drop the last reference to the code object itself (a continuation's record holds its
    // user code), so hold one (new reference, released after the call) while CPython writes into it.
    PyObject* code = reinterpret_cast<PyObject*>(e->code);
    Py_INCREF(code);
    if (_PyCode_SetExtra(code, g_extra_index, nullptr) < 0) {
      PyErr_Clear();
      g_registry->erase(e);  // leaked rather than left dangling in the code object
    }
    Py_DECREF(code);
  }
}

size_t extra_count() { return g_registry->size(); }

int init_cache() {
  if (g_extra_index >= 0) return 0;
  g_extra_index = _PyEval_RequestCodeExtraIndex(free_extra);
  return g_extra_index < 0 ? -1 : 0;
}

}  // namespace cdynamo::hook
