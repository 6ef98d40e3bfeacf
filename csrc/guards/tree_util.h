// tree_util.h — owns what guard_tree.cpp and guard_replay.cpp share: the stamps that are not versions (tuple item, class
// root), the own-dict and hook readers, and GuardTree::Walk (one check's fetched values).
#pragma once

#include <Python.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "compat/versions.h"
#include "guards/guard_tree.h"
#include "guards/tensor_match.h"

namespace cdynamo::guards {

// Memo.from_ver of a tuple item (no dict version: the tuple's identity, proven by its parent, is the stamp).
inline constexpr uint64_t kTupleItem = ~uint64_t{0};
// Memo.from_ver of a class root (its value is always the one class).
inline constexpr uint64_t kClassRoot = ~uint64_t{0} - 1;
// Replay lists built for one node at most (a subtree that changes on every call is walked).
inline constexpr uint8_t kReplayBuilds = 4;

// Interned names of the function and cell fields read directly (owned for the process).
struct FieldNames {
  PyObject* cell_contents = PyUnicode_InternFromString("cell_contents");
  PyObject* closure = PyUnicode_InternFromString("__closure__");
  PyObject* code = PyUnicode_InternFromString("__code__");
  PyObject* defaults = PyUnicode_InternFromString("__defaults__");
  PyObject* name = PyUnicode_InternFromString("__name__");
};
inline const FieldNames& field_names() {
  static const FieldNames names;
  return names;
}

inline PyObject* class_name() {
  static PyObject* name = PyUnicode_InternFromString("__class__");  // owned for the process
  return name;
}

inline PyObject* getattribute_name() {
  static PyObject* name = PyUnicode_InternFromString("__getattribute__");  // owned for the process
  return name;
}

// True if `type` (borrowed) reads attributes with object.__getattribute__ (its slot wrapper is borrowed from
// object's immortal type dict).
inline bool generic_getattribute(PyTypeObject* type) {
  static PyObject* slot = _PyType_Lookup(&PyBaseObject_Type, getattribute_name());  // borrowed
  return _PyType_Lookup(type, getattribute_name()) == slot;
}

inline bool hooks_empty(PyObject* const hooks[4]) {
  for (int i = 0; i < 4; ++i) {
    PyObject* h = hooks[i];  // borrowed: held by a dict whose version proved unchanged
    if (h && !(PyDict_Check(h) && PyDict_GET_SIZE(h) == 0)) return false;
  }
  return true;
}

// The state of v's own dict (v itself if a dict, else its instance dict): its version (0: none) and, in *d, the
// dict (borrowed).
inline uint64_t own_state(PyObject* v, const void** d) {
  PyObject* dict = PyDict_Check(v) ? v : compat::versioned_instance_dict(v);  // borrowed
  uint64_t ver = compat::dict_version(dict);
  *d = ver ? dict : nullptr;
  return ver;
}

// Per check: the fetched values (new references, released at the end) and the TLS keys, read once.
struct GuardTree::Walk {
  const std::vector<Guard>& guards;
  const FrameView& fv;
  PyObject** values;  // one per node: new references (nullptr: not fetched)
  size_t n;
  PyObject* inline_values[64];
  std::vector<PyObject*> heap;
  TlsKeys tls;
  bool tls_read = false;
  std::vector<uint32_t> offered;  // nodes with children whose subtree passed without a replay list
  bool roots_walked = false;      // every root was visited (the roots' list did not run)
  Walk(const std::vector<Guard>& g, const FrameView& f, size_t count) : guards(g), fv(f), n(count) {
    if (n > 64) heap.resize(n);
    values = n > 64 ? heap.data() : inline_values;
    std::memset(values, 0, n * sizeof(PyObject*));
  }
  ~Walk() {
    for (size_t i = 0; i < n; ++i) Py_XDECREF(values[i]);
  }
  Walk(const Walk&) = delete;
  Walk& operator=(const Walk&) = delete;
  const TlsKeys& keys() {
    if (!tls_read) {
      tls = read_tls_keys();
      tls_read = true;
    }
    return tls;
  }
};

}  // namespace cdynamo::guards
