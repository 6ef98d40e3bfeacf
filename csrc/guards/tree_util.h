// tree_util.h — owns what guard_tree.cpp and guard_replay.cpp share: the stamps that are not versions (tuple item, class
// root), the own-dict and hook readers, and GuardTree::Walk (one check's fetched values).
#pragma once

#include <Python.h>
#include <structmember.h>

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

// Interned names the tree compares a step's name with, or looks up (owned for the process): the function and cell
// fields read directly, and the attributes whose reads get a proof of their own.
struct FieldNames {
  PyObject* cell_contents = PyUnicode_InternFromString("cell_contents");
  PyObject* closure = PyUnicode_InternFromString("__closure__");
  PyObject* code = PyUnicode_InternFromString("__code__");
  PyObject* defaults = PyUnicode_InternFromString("__defaults__");
  PyObject* name = PyUnicode_InternFromString("__name__");
  PyObject* class_ = PyUnicode_InternFromString("__class__");
  PyObject* dict = PyUnicode_InternFromString("__dict__");
  PyObject* fget = PyUnicode_InternFromString("fget");
  PyObject* mro = PyUnicode_InternFromString("__mro__");
  PyObject* getattribute = PyUnicode_InternFromString("__getattribute__");
};
inline const FieldNames& field_names() {
  static const FieldNames names;
  return names;
}

// True if `meta` (a metaclass, borrowed) reads its classes' attributes with type's __getattribute__ (a __getattr__
// it defines runs only when that finds nothing).
inline bool type_getattribute(PyTypeObject* meta) {
  static PyObject* slot = _PyType_Lookup(&PyType_Type, field_names().getattribute);  // borrowed
  return meta->tp_getattro == PyType_Type.tp_getattro || _PyType_Lookup(meta, field_names().getattribute) == slot;
}

// A property's fget as its member descriptor reads it (borrowed; nullptr if unset or the member is not found). The
// offset comes from property's own member table (public API); property.__init__ may set it again, so it is read live.
inline PyObject* property_fget(PyObject* prop) {
  static Py_ssize_t offset = [] {
    for (PyMemberDef* m = PyProperty_Type.tp_members; m && m->name; ++m)
      if (std::strcmp(m->name, "fget") == 0 && m->type == T_OBJECT) return m->offset;
    return Py_ssize_t{-1};
  }();
  if (offset < 0 || Py_TYPE(prop) != &PyProperty_Type) return nullptr;
  return *reinterpret_cast<PyObject**>(reinterpret_cast<char*>(prop) + offset);
}

// True if `type` (borrowed) reads attributes with object.__getattribute__ (its slot wrapper is borrowed from
// object's immortal type dict).
inline bool generic_getattribute(PyTypeObject* type) {
  static PyObject* slot = _PyType_Lookup(&PyBaseObject_Type, field_names().getattribute);  // borrowed
  return _PyType_Lookup(type, field_names().getattribute) == slot;
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
// A walk's value slots for trees of more than 64 nodes, reused by the thread's later walks: a buffer is handed back
// with every slot null again (only the slots a walk set are cleared), so a call costs what it sets, not the tree's
// size. A nested check (a leaf's Python, a destructor) takes another buffer.
struct WalkSlots {
  std::vector<PyObject*> values;
  std::vector<uint32_t> set;
};
inline thread_local std::vector<WalkSlots> t_free_walk_slots;

struct GuardTree::Walk {
  const std::vector<Guard>& guards;
  const FrameView& fv;
  PyObject** values;  // one per node: new references (nullptr: not fetched); written through set()
  size_t n;
  PyObject* inline_values[64];
  WalkSlots slots;   // trees of more than 64 nodes: the values, and which slots are set
  TlsKeys tls;
  bool tls_read = false;
  std::vector<uint32_t> offered;  // nodes with children whose subtree passed without a replay list
  bool roots_walked = false;      // every root was visited (the roots' list did not run)
  Walk(const std::vector<Guard>& g, const FrameView& f, size_t count) : guards(g), fv(f), n(count) {
    if (n > 64) {
      if (!t_free_walk_slots.empty()) {
        slots = std::move(t_free_walk_slots.back());
        t_free_walk_slots.pop_back();
      }
      if (slots.values.size() < n) slots.values.assign(n, nullptr);  // new or grown: all null
      values = slots.values.data();
    } else {
      values = inline_values;
      std::memset(values, 0, n * sizeof(PyObject*));
    }
  }
  // Takes the new reference `v` into slot `id` (empty until now).
  void set(uint32_t id, PyObject* v) {
    values[id] = v;
    if (n > 64) slots.set.push_back(id);
  }
  ~Walk() {
    if (n <= 64) {
      for (size_t i = 0; i < n; ++i) Py_XDECREF(values[i]);
      return;
    }
    // A destructor that runs Python may start another walk: this buffer is not in the free list until every
    // slot is null again, so that walk takes another.
    for (uint32_t id : slots.set) {
      PyObject* v = values[id];
      values[id] = nullptr;
      Py_XDECREF(v);
    }
    slots.set.clear();
    t_free_walk_slots.push_back(std::move(slots));
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
