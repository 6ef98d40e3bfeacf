// compat_code.cpp — the parts of compat.h that are one code on every supported CPython (3.11-3.13): code-object
// slots and kinds, co_extra, argument counts, weak references; the per-version spellings are the #if below.
#include <Python.h>

#define Py_BUILD_CORE 1
#include <internal/pycore_code.h>
#undef Py_BUILD_CORE

#include "compat/compat.h"

namespace cdynamo::compat {

const int kFastLocal = CO_FAST_LOCAL;
const int kFastCell = CO_FAST_CELL;
const int kFastFree = CO_FAST_FREE;

int code_nlocalsplus(PyCodeObject* code) { return code->co_nlocalsplus; }
PyObject* code_localsplus_name(PyCodeObject* code, int i) {
  return PyTuple_GET_ITEM(code->co_localsplusnames, i);  // borrowed
}
int code_localsplus_kind(PyCodeObject* code, int i) {
  return static_cast<unsigned char>(PyBytes_AS_STRING(code->co_localspluskinds)[i]);
}

#if PY_VERSION_HEX < 0x030C0000  // 3.11 spells the co_extra API with underscores
#define CD_REQUEST_EXTRA_INDEX _PyEval_RequestCodeExtraIndex
#define CD_GET_EXTRA _PyCode_GetExtra
#define CD_SET_EXTRA _PyCode_SetExtra
#else
#define CD_REQUEST_EXTRA_INDEX PyUnstable_Eval_RequestCodeExtraIndex
#define CD_GET_EXTRA PyUnstable_Code_GetExtra
#define CD_SET_EXTRA PyUnstable_Code_SetExtra
#endif

int code_extra_index(void (*free_fn)(void*)) { return static_cast<int>(CD_REQUEST_EXTRA_INDEX(free_fn)); }

void* code_get_extra(PyCodeObject* code, int index) {
  void* p = nullptr;
  if (CD_GET_EXTRA(reinterpret_cast<PyObject*>(code), index, &p) < 0) {
    PyErr_Clear();
    return nullptr;
  }
  return p;
}

bool code_set_extra(PyCodeObject* code, int index, void* value) {
  if (CD_SET_EXTRA(reinterpret_cast<PyObject*>(code), index, value) < 0) {
    PyErr_Clear();
    return false;
  }
  return true;
}

int code_total_args(PyCodeObject* code) {
  int n = code->co_argcount + code->co_kwonlyargcount;
  if (code->co_flags & CO_VARARGS) n++;
  if (code->co_flags & CO_VARKEYWORDS) n++;
  return n;
}

#if PY_VERSION_HEX < 0x030D0000
// Borrowed from PyWeakref_GetObject (Py_None once dead), returned as a new reference.
PyObject* weakref_get(PyObject* ref) {
  PyObject* obj = PyWeakref_GetObject(ref);  // borrowed
  if (!obj) {
    PyErr_Clear();
    return nullptr;
  }
  return obj == Py_None ? nullptr : Py_NewRef(obj);
}
bool weakref_dead(PyObject* ref) { return PyWeakref_GET_OBJECT(ref) == Py_None; }
#else
PyObject* weakref_get(PyObject* ref) {
  PyObject* obj = nullptr;
  if (PyWeakref_GetRef(ref, &obj) < 0) {  // obj: a new reference, or NULL once dead
    PyErr_Clear();
    return nullptr;
  }
  return obj;
}
bool weakref_dead(PyObject* ref) {
  PyObject* obj = weakref_get(ref);  // new reference or nullptr
  Py_XDECREF(obj);
  return obj == nullptr;
}
#endif

}  // namespace cdynamo::compat
