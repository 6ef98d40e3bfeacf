// deepcopy.cpp — owns copy.deepcopy in the trace: structural copies of the values the trace knows, and of
// plain-data objects read from the frame (a new object of their class holding copies of their attributes).
#include <unordered_map>

#include "interp/tracer.h"

namespace cdynamo::interp {

namespace {

bool is_objects(PyTypeObject* type, const char* name) {
  PyObject* mine = _PyType_Lookup(type, py::str(name).ptr());                  // borrowed
  PyObject* base = _PyType_Lookup(&PyBaseObject_Type, py::str(name).ptr());  // borrowed
  return mine == base;
}

// True if copy.deepcopy of an object of `type` makes `type.__new__(type)` and fills its __dict__ with deep
// copies of the original's, running no code of the class: object's __new__, __reduce_ex__, __reduce__ and
// __getstate__; no __deepcopy__, __setstate__ or __getattr__ (copy asks hasattr(y, "__setstate__")); no
// __slots__; no entry in copyreg.dispatch_table; only Python classes above it. A Python __getattribute__ is
// allowed: copy reads `y.__dict__` through it, which these classes leave to object.
bool deepcopied_by_dict(PyTypeObject* type) {
  if (!is_plain_python_type(type)) return false;
  for (const char* name : {"__reduce_ex__", "__reduce__", "__getstate__"})
    if (!is_objects(type, name)) return false;
  for (const char* name : {"__deepcopy__", "__setstate__", "__getattr__"})
    if (_PyType_Lookup(type, py::str(name).ptr())) return false;
  PyObject* mro = type->tp_mro;  // borrowed
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(mro); ++i) {
    auto* t = reinterpret_cast<PyTypeObject*>(PyTuple_GET_ITEM(mro, i));
    // tp_dict is NULL for a static type on 3.12+ (its dict lives in the interpreter): only heap types are read here
    if (t != &PyBaseObject_Type && t->tp_dict && PyDict_GetItemString(t->tp_dict, "__slots__")) return false;
  }
  int in_table = PyDict_Contains(PyRefs::get().copyreg_dispatch.ptr(), reinterpret_cast<PyObject*>(type));
  if (in_table < 0) throw py::error_already_set();
  return in_table == 0;
}

}  // namespace

ValuePtr Tracer::deepcopy_call(py::handle f, const std::vector<ValuePtr>& args,
                               const std::vector<std::pair<std::string, ValuePtr>>& kwargs) {
  if (!f.is(PyRefs::get().copy_deepcopy)) return nullptr;
  if (args.size() != 1 || !kwargs.empty()) unsupported("copy.deepcopy with a memo argument");
  CopyMemo memo;
  return deep_copy(args[0], memo);
}

ValuePtr Tracer::deep_copy(const ValuePtr& v, CopyMemo& memo) {
  auto seen = memo.find(v.get());
  if (seen != memo.end()) return seen->second;
  if (v->is_sym()) return v;  // a symbolic int / float (a dynamic attribute): immutable, copied as itself
  switch (v->kind) {
    case VKind::Const:
      return v;  // immutable: copy.deepcopy returns the object itself (or an equal tuple of them)
    case VKind::Tuple: {
      std::vector<ValuePtr> items;
      for (const auto& item : v->items) items.push_back(deep_copy(item, memo));
      ValuePtr out = Value::tuple(std::move(items), py::reinterpret_borrow<py::object>(v->tuple_class()));
      return memo[v.get()] = out;
    }
    case VKind::List: {
      ValuePtr out = Value::list({});
      memo[v.get()] = out;
      for (const auto& item : v->items) out->items.push_back(deep_copy(item, memo));
      return out;
    }
    case VKind::Dict: {
      // A dict-like object of another kind, or one keyed by a tensor (deepcopy copies the key too).
      if ((v->frame_container() && !v->source) || v->default_dict() || v->tensor_keyed()) break;
      ValuePtr out = Value::dict({}, {});
      memo[v.get()] = out;
      out->keys = v->keys;  // hashable constants: copied as themselves
      for (const auto& item : v->items) out->items.push_back(deep_copy(item, memo));
      return out;
    }
    case VKind::Set:
      if (v->frozenset_result() || v->tensor_keyed()) break;
      return memo[v.get()] = Value::set(v->keys);
    case VKind::Instance: {
      if (!deepcopied_by_dict(reinterpret_cast<PyTypeObject*>(v->instance().cls->obj.ptr())) ||
          (autograd_.ctx && v == autograd_.ctx))
        break;
      ValuePtr out = Value::new_instance(VKind::Instance, v->instance().cls);
      memo[v.get()] = out;
      out->keys = v->keys;
      for (const auto& item : v->items) out->items.push_back(deep_copy(item, memo));
      return out;
    }
    case VKind::Object: {
      PyObject* o = v->obj.ptr();
      // Functions, classes and builtin functions are copied as themselves (copy's atomic types).
      if (!v->bound_self() && !v->partial() && !v->super_of() && !v->slot() &&
          (PyFunction_Check(o) || PyType_Check(o) || PyCFunction_Check(o)))
        return v;
      if (v->source && !v->made_in_trace() && !v->is_modelled() && v->bound_name().empty() && deepcopied_by_dict(Py_TYPE(o)))
        return copy_frame_object(v, memo);
      if (v->source && PyDict_CheckExact(o)) return copy_constant_dict(v, memo);
      break;
    }
    default:
      break;
  }
  if (v->is_tensor()) unsupported("copy.deepcopy of a tensor (torch._dynamo does not trace it either)");
  unsupported("copy.deepcopy of " + v->describe());
}

ValuePtr Tracer::copy_frame_object(const ValuePtr& v, CopyMemo& memo) {
  // The copy is made of the object's state read now, each attribute guarded through obj.__dict__[name];
  // its class by identity. A missing instance dict is an empty one (Python makes it on first access).
  PyObject* o = v->obj.ptr();
  py::object dict = py::reinterpret_steal<py::object>(PyObject_GenericGetAttr(o, py::str("__dict__").ptr()));  // new
  if (!dict) throw py::error_already_set();
  ValuePtr cls = wrap(reinterpret_cast<PyObject*>(Py_TYPE(o)), type_source(v));
  ValuePtr state = wrap(dict, guards::Source::generic_attr(v->source, "__dict__"));
  if (state->kind != VKind::Dict) unsupported("copy.deepcopy of an object whose __dict__ has keys that are not str");
  ValuePtr out = Value::new_instance(VKind::Instance, cls);
  memo[v.get()] = out;
  out->keys = state->keys;
  for (const auto& item : state->items) out->items.push_back(deep_copy(item, memo));
  return out;
}

ValuePtr Tracer::copy_constant_dict(const ValuePtr& v, CopyMemo& memo) {
  // A dict of the frame whose keys are not all str (a config's id2label): modelled when keys and values are
  // constants, guarded by equality with its contents now.
  PyObject* d = v->obj.ptr();
  std::vector<py::object> keys;
  std::vector<ValuePtr> items;
  PyObject *k, *item;  // borrowed
  Py_ssize_t pos = 0;
  while (PyDict_Next(d, &pos, &k, &item)) {
    py::handle kh(k), ih(item);
    if (!is_constant_object(kh) || !is_constant_object(ih) || guards::is_tensor(item))
      unsupported("copy.deepcopy of a dict holding " + std::string(Py_TYPE(is_constant_object(kh) ? item : k)->tp_name));
    keys.push_back(py::reinterpret_borrow<py::object>(k));
    items.push_back(Value::constant(py::reinterpret_borrow<py::object>(item)));
  }
  py::object snapshot = py::reinterpret_steal<py::object>(PyDict_Copy(d));  // new
  if (!snapshot) throw py::error_already_set();
  guards.add(guards::equals_match(v->source, snapshot.ptr()));
  return memo[v.get()] = Value::dict(std::move(keys), std::move(items));
}

}  // namespace cdynamo::interp
