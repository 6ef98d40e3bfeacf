// make_code.cpp — owns building a new code object from a Bytecode via `code.replace(...)`.
#include "bytecode/detail.h"

#include <exception>

namespace cdynamo::bytecode {

namespace {

// Sets kwargs[key] = value; `value` is a new reference that this call consumes.
void set_item(PyObject* kwargs, const char* key, PyObject* value) {
  detail::Ref v(value);
  if (!v || PyDict_SetItemString(kwargs, key, v.get()) < 0) detail::throw_python_error("make_code");
}

}  // namespace

PyObject* make_code(PyCodeObject* base, const Bytecode& bc, PyObject* overrides) {
  try {
    if (base == nullptr || !PyCode_Check(reinterpret_cast<PyObject*>(base))) {
      PyErr_SetString(PyExc_TypeError, "make_code: base is not a code object");
      return nullptr;
    }
    if (overrides != nullptr && !PyDict_Check(overrides)) {
      PyErr_SetString(PyExc_TypeError, "make_code: overrides must be a dict");
      return nullptr;
    }
    int firstlineno = base->co_firstlineno;
    if (overrides != nullptr) {
      PyObject* fl = PyDict_GetItemString(overrides, "co_firstlineno");  // borrowed (or nullptr)
      if (fl != nullptr) {
        const long v = PyLong_AsLong(fl);
        if (v == -1 && PyErr_Occurred()) return nullptr;
        firstlineno = static_cast<int>(v);
      }
    }
    Assembled a = assemble(bc, firstlineno);
    detail::Ref kwargs(PyDict_New());  // new reference
    if (!kwargs) return nullptr;
    // Py_NewRef hands set_item a new reference; Assembled keeps its own.
    set_item(kwargs.get(), "co_code", Py_NewRef(a.code));
    set_item(kwargs.get(), "co_exceptiontable", Py_NewRef(a.exceptiontable));
    set_item(kwargs.get(), "co_linetable", Py_NewRef(a.linetable));
    set_item(kwargs.get(), "co_stacksize", PyLong_FromLong(a.stacksize));
    if (overrides != nullptr && PyDict_Update(kwargs.get(), overrides) < 0) return nullptr;
    detail::Ref replace(PyObject_GetAttrString(reinterpret_cast<PyObject*>(base), "replace"));  // new reference
    if (!replace) return nullptr;
    detail::Ref args(PyTuple_New(0));  // new reference
    if (!args) return nullptr;
    return PyObject_Call(replace.get(), args.get(), kwargs.get());  // new reference (or nullptr + error)
  } catch (const std::exception& e) {
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_RuntimeError, e.what());
    return nullptr;
  }
}

}  // namespace cdynamo::bytecode
