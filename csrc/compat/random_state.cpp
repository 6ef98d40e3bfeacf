// random_state.cpp — owns the _random.Random state copy of random_state.h (CPython 3.11-3.13 share the layout).
#include "compat/random_state.h"

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace cdynamo::compat {

namespace {

// Modules/_randommodule.c's RandomObject (3.11, 3.12, 3.13): the index, then the 624 words of MT19937.
struct RandomLayout {
  PyObject_HEAD
  int index;
  uint32_t state[624];
};
constexpr size_t kFirst = offsetof(RandomLayout, index);
constexpr size_t kBytes = sizeof(RandomLayout) - kFirst;

// _random.Random (borrowed, process lifetime) when its instance size is the layout's, else nullptr.
PyTypeObject* known_random_type() {
  static PyTypeObject* type = [] () -> PyTypeObject* {
    PyObject* mod = PyImport_ImportModule("_random");  // new reference
    PyObject* t = mod ? PyObject_GetAttrString(mod, "Random") : nullptr;  // new reference
    Py_XDECREF(mod);
    if (!t) {
      PyErr_Clear();
      return nullptr;
    }
    bool fits = PyType_Check(t) && reinterpret_cast<PyTypeObject*>(t)->tp_basicsize == sizeof(RandomLayout);
    if (!fits) Py_DECREF(t);
    return fits ? reinterpret_cast<PyTypeObject*>(t) : nullptr;  // the reference kept for the process
  }();
  return type;
}

char* state_bytes(PyObject* gen) {
  PyTypeObject* t = known_random_type();
  if (!t || !PyObject_TypeCheck(gen, t)) return nullptr;
  return reinterpret_cast<char*>(gen) + kFirst;
}

}  // namespace

PyObject* random_state_save(PyObject* gen) {
  char* at = state_bytes(gen);
  if (!at) return nullptr;
  return PyBytes_FromStringAndSize(at, static_cast<Py_ssize_t>(kBytes));  // new reference (NULL: memory error set)
}

bool random_state_restore(PyObject* gen, PyObject* blob) {
  char* at = state_bytes(gen);
  if (!at || !PyBytes_Check(blob) || PyBytes_GET_SIZE(blob) != static_cast<Py_ssize_t>(kBytes)) return false;
  std::memcpy(at, PyBytes_AS_STRING(blob), kBytes);
  return true;
}

}  // namespace cdynamo::compat
