// compat_versions.cpp — owns versions.h: dict version tags (3.11-3.13), type version tags, instance dicts.
#include "compat/versions.h"

#include "compat/compat.h"

#if defined(__GNUC__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"  // ma_version_tag: deprecated in 3.12, kept to 3.13
#endif

namespace cdynamo::compat {

uint64_t dict_version(PyObject* dict) {
  if (!dict || !PyDict_Check(dict)) return 0;
  auto* d = reinterpret_cast<PyDictObject*>(dict);
#if PY_VERSION_HEX >= 0x030D0000
  // 3.13: a split dict's values may be an object's inline values (its materialized __dict__), which the object's
  // attribute stores write without changing the dict's version (`obj.a = v` leaves obj.__dict__'s tag as it
  // was): no stamp for a dict with split values.
  if (d->ma_values) return 0;
#endif
  // 3.11-3.13: ma_version_tag is a global counter's next value, taken by every new dict and every change
  // (3.12+ keep watcher bits in the low 12 bits, which only ever make a stamp differ spuriously).
  return d->ma_version_tag;
}

PyObject* versioned_instance_dict(PyObject* obj) {
#if PY_VERSION_HEX >= 0x030D0000
  // 3.13: a materialized dict may share the object's inline values, which attribute stores can write
  // without a dict version change: no memo on instance dicts.
  (void)obj;
  return nullptr;
#else
  // 3.11 / 3.12: _PyObject_GetDictPtr materializes inline attribute values into a dict and drops the values,
  // after which every attribute store goes through the dict (and bumps its version).
  PyObject** dp = _PyObject_GetDictPtr(obj);
  if (!dp) {
    PyErr_Clear();
    return nullptr;
  }
  PyObject* d = *dp;  // borrowed: the object holds its dict
  return d && PyDict_CheckExact(d) ? d : nullptr;
#endif
}

uint64_t type_version(PyTypeObject* type) {
  if (!type || !PyType_HasFeature(type, Py_TPFLAGS_VALID_VERSION_TAG)) return 0;
  return type->tp_version_tag;
}

}  // namespace cdynamo::compat

#if defined(__GNUC__)
#pragma GCC diagnostic pop
#endif
