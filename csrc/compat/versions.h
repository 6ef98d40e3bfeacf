// versions.h — owns the version stamps of dicts, instance dicts and types that say "unchanged since last seen".
#pragma once

#include <Python.h>

#include <cstdint>

namespace cdynamo::compat {

// A stamp of a dict's contents (borrowed `dict`, any dict or subclass): every insertion, replacement or deletion
// gives the dict a new stamp, and no two dict states, of any dicts alive now or ever, share one (a dict made at a
// freed dict's address gets a fresh stamp). 0: no stamp available (the caller must not memoize); on 3.13, every
// dict with split values (an object's materialized __dict__ shares its inline values, written without a stamp).
uint64_t dict_version(PyObject* dict);
// The instance __dict__ of `obj` (borrowed), materialized if the object keeps its attributes inline, when every
// attribute store of the object is then a store into that dict (so dict_version covers them); nullptr (no
// error left set) otherwise.
PyObject* versioned_instance_dict(PyObject* obj);
// A stamp of a type's own attributes and those of its bases: changes whenever any of them is set or deleted (and
// on __bases__ assignment), unique over all types; 0 when the type has none now (the caller must not memoize).
uint64_t type_version(PyTypeObject* type);

// The hot form of `versioned_instance_dict(obj) == dict && dict_version(dict) == ver` for a guard list that recorded
// `dict` (non-null, taken from versioned_instance_dict) at stamp `ver` (non-zero): inline where the object keeps a
// materialized managed dict (an nn.Module, after its first attribute read through a guard), out of line otherwise.
inline bool instance_dict_is(PyObject* obj, const void* dict, uint64_t ver);
// dict_version of a live dict object (borrowed; any dict or subclass), inline: the caller knows it is a dict.
inline uint64_t live_dict_version(PyObject* dict);

#if defined(__GNUC__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"  // ma_version_tag: deprecated in 3.12, kept to 3.13
#endif

inline uint64_t live_dict_version(PyObject* dict) {
#if PY_VERSION_HEX >= 0x030D0000
  return dict_version(dict);  // 3.13: split values carry no stamp (dict_version says when)
#else
  return reinterpret_cast<PyDictObject*>(dict)->ma_version_tag;
#endif
}

inline bool instance_dict_is(PyObject* obj, const void* dict, uint64_t ver) {
#if PY_VERSION_HEX >= 0x030D0000
  (void)obj, (void)dict, (void)ver;
  return false;  // 3.13: no stamp on instance dicts (versioned_instance_dict gives none)
#else
  if (PyType_HasFeature(Py_TYPE(obj), Py_TPFLAGS_MANAGED_DICT)) {
    // 3.11: the values pointer at slot -4 and the dict at slot -3 before the object; 3.12: one tagged slot at -3
    // (low bit set: inline values). A materialized dict is the dict every attribute store of the object writes.
#if PY_VERSION_HEX >= 0x030C0000
    const uintptr_t slot = reinterpret_cast<const uintptr_t*>(obj)[-3];
    if (!(slot & 1)) {
      PyObject* d = reinterpret_cast<PyObject*>(slot);  // borrowed: the object holds its dict
#else
    if (!reinterpret_cast<void* const*>(obj)[-4]) {
      PyObject* d = reinterpret_cast<PyObject* const*>(obj)[-3];  // borrowed: the object holds its dict
#endif
      return d == dict && live_dict_version(d) == ver;  // a live dict at the recorded address: its stamp decides
    }
  }
  PyObject* d = versioned_instance_dict(obj);  // borrowed
  return d == dict && dict_version(d) == ver;
#endif
}

#if defined(__GNUC__)
#pragma GCC diagnostic pop
#endif

}  // namespace cdynamo::compat
