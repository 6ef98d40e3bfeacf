// guard_build.cpp — owns the guard builders: each reads the value seen at compile time and fills its kind's payload.
#include "guards/guard.h"

#include <stdexcept>

namespace cdynamo::guards {

Guard tensor_match(SourcePtr src, PyObject* value, uint64_t dynamic_sizes, uint64_t dynamic_strides) {
  return Guard(GuardKind::TensorMatch, std::move(src), "TENSOR_MATCH",
               TensorCheck{TensorMatch::make(value, dynamic_sizes, dynamic_strides)});
}

namespace {
// A new strong reference to `o` (borrowed), for a payload to own.
OwnedRef own(PyObject* o) {
  Py_INCREF(o);
  return OwnedRef(o);
}
}  // namespace

Guard type_match(SourcePtr src, PyObject* value) {
  return Guard(GuardKind::TypeMatch, std::move(src), "TYPE_MATCH",
               TypeCheck{own(reinterpret_cast<PyObject*>(Py_TYPE(value)))});
}

Guard id_match(SourcePtr src, PyObject* value) {
  bool fn_like = PyModule_Check(value) || PyFunction_Check(value) || PyCFunction_Check(value) || PyType_Check(value);
  IdentityCheck id;
  id.object = value;
  // Weakly held where possible (user objects, modules made per call must not be kept alive by a cache
  // entry); otherwise owned, which pins the identity compared against.
  if (!PyModule_Check(value)) {
    id.weak = OwnedRef(PyWeakref_NewRef(value, nullptr));  // new reference, or NULL
    if (!id.weak) PyErr_Clear();
  }
  if (!id.weak) id.strong = own(value);
  return Guard(GuardKind::IdMatch, std::move(src), fn_like ? "FUNCTION_MATCH" : "ID_MATCH", std::move(id));
}

Guard equals_match(SourcePtr src, PyObject* value) {
  return Guard(GuardKind::EqualsMatch, std::move(src), "EQUALS_MATCH", ConstantCheck{own(value)});
}

Guard length_match(SourcePtr src, PyObject* value) {
  Py_ssize_t n = PyObject_Length(value);
  if (n < 0) {
    PyErr_Clear();
    throw std::runtime_error("length guard on an object without len()");
  }
  return Guard(GuardKind::LengthMatch, std::move(src), PyTuple_Check(value) ? "TUPLE_LENGTH" : "LIST_LENGTH",
               LengthCheck{own(reinterpret_cast<PyObject*>(Py_TYPE(value))), n});
}

Guard dict_keys_match(SourcePtr src, PyObject* dict) {
  OwnedRef list(PyDict_Keys(dict));  // new list, or NULL
  if (!list) throw std::runtime_error("DICT_KEYS guard on a non-dict");
  OwnedRef keys(PyList_AsTuple(list.get()));  // new tuple, or NULL
  if (!keys) throw std::runtime_error("DICT_KEYS guard: keys could not be copied");
  return Guard(GuardKind::DictKeys, std::move(src), "DICT_KEYS", KeysCheck{std::move(keys)});
}

Guard has_attr(SourcePtr src, const std::string& name, bool present) {
  OwnedRef n(PyUnicode_InternFromString(name.c_str()));  // new, or NULL
  if (!n) throw std::runtime_error("HASATTR guard: bad attribute name");
  return Guard(GuardKind::HasAttr, std::move(src), present ? "HASATTR" : "NO_HASATTR", AttrCheck{std::move(n), present});
}

Guard dict_contains(SourcePtr src, PyObject* key, bool present) {
  return Guard(GuardKind::DictContains, std::move(src), present ? "DICT_CONTAINS" : "DICT_LACKS",
               KeyCheck{own(key), present});
}

Guard autocast_guard() { return Guard(GuardKind::Autocast, nullptr, "AUTOCAST", AutocastCheck{autocast_state()}); }

Guard no_module_hooks(SourcePtr module) {
  OwnedRef names(Py_BuildValue("(ssss)", "_forward_pre_hooks", "_forward_hooks", "_backward_pre_hooks",
                               "_backward_hooks"));  // new tuple of names, or NULL
  if (!names) throw std::runtime_error("NO_HOOKS guard: cannot build names");
  for (Py_ssize_t i = 0; i < 4; ++i) PyUnicode_InternInPlace(&PyTuple_GET_ITEM(names.get(), i));
  return Guard(GuardKind::NoModuleHooks, std::move(module), "NO_HOOKS", HooksCheck{std::move(names)});
}

Guard global_state_guard() {
  return Guard(GuardKind::GlobalState, nullptr, "GLOBAL_STATE", GlobalStateCheck{global_state_code()});
}

Guard grad_mode_guard() { return Guard(GuardKind::GradMode, nullptr, "GRAD_MODE", GradModeCheck{grad_mode_enabled()}); }

Guard default_dtype_guard() {
  return Guard(GuardKind::DefaultDtype, nullptr, "DEFAULT_DTYPE", DefaultDtypeCheck{default_dtype_code()});
}

Guard no_aliasing(std::vector<SourcePtr> srcs, bool storages) {
  return Guard(GuardKind::NoAliasing, nullptr, "NO_TENSOR_ALIASING", DistinctCheck{std::move(srcs), storages});
}

std::vector<int> storage_groups(const std::vector<PyObject*>& values) {
  std::vector<int> groups(values.size());
  std::vector<const void*> keys(values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    keys[i] = storage_key(values[i]);
    groups[i] = static_cast<int>(i);
    if (!keys[i]) continue;
    for (size_t j = 0; j < i; ++j)
      if (keys[j] == keys[i]) {
        groups[i] = static_cast<int>(j);
        break;
      }
  }
  return groups;
}

Guard storage_overlap(std::vector<SourcePtr> srcs, const std::vector<PyObject*>& values) {
  return Guard(GuardKind::StorageOverlap, nullptr, "STORAGE_OVERLAP", OverlapCheck{std::move(srcs), storage_groups(values)});
}

Guard same_object(SourcePtr a, SourcePtr b) {
  return Guard(GuardKind::SameObject, nullptr, "DUPLICATE_INPUT", SameCheck{{std::move(a), std::move(b)}});
}

}  // namespace cdynamo::guards
