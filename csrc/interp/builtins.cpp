// builtins.cpp — owns builtins that iterate values or call functions at trace time (sum, map, filter,
// sorted, min/max with a key, enumerate(start=)), attribute builtins (getattr / hasattr / setattr),
// isinstance on containers, functools.partial, zero- and two-argument super(), and namedtuple classes.
#include <algorithm>
#include <unordered_map>

#include "compat/compat.h"
#include "interp/torch_rules.h"
#include "interp/tracer.h"

namespace cdynamo::interp {

namespace {

ValuePtr iter_of(std::vector<ValuePtr> items) { return Value::iterator(std::move(items)); }

ValuePtr kwarg(const Kwargs& kwargs, const char* name) {
  for (const auto& kv : kwargs)
    if (kv.first == name) return kv.second;
  return nullptr;
}

bool only_kwargs(const Kwargs& kwargs, std::initializer_list<const char*> allowed) {
  for (const auto& kv : kwargs) {
    bool ok = false;
    for (const char* a : allowed) ok = ok || kv.first == a;
    if (!ok) return false;
  }
  return true;
}

// The Python type of a value whose type the trace knows exactly (containers, constants), or nullptr.
// True if isinstance(obj, clsinfo) is decided by type(obj) alone (see the isinstance rule).
bool type_only_instance_check(py::handle obj, py::handle clsinfo) {
  static PyObject* class_attr = PyUnicode_InternFromString("__class__");  // owned, process lifetime
  static PyObject* abc_meta = py::object(loaded_module("abc").attr("ABCMeta")).release().ptr();  // owned
  if (_PyType_Lookup(Py_TYPE(obj.ptr()), class_attr) != _PyType_Lookup(&PyBaseObject_Type, class_attr)) return false;
  auto plain = [&](PyObject* c) {
    return PyType_Check(c) && (Py_IS_TYPE(c, &PyType_Type) || Py_TYPE(c) == reinterpret_cast<PyTypeObject*>(abc_meta));
  };
  if (PyTuple_Check(clsinfo.ptr())) {
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(clsinfo.ptr()); ++i)
      if (!plain(PyTuple_GET_ITEM(clsinfo.ptr(), i))) return false;
    return true;
  }
  return plain(clsinfo.ptr());
}

PyObject* known_type(const ValuePtr& v) {
  switch (v->kind) {
    case VKind::Tuple: return v->tuple_class() ? v->tuple_class().ptr() : reinterpret_cast<PyObject*>(&PyTuple_Type);
    case VKind::List: return reinterpret_cast<PyObject*>(&PyList_Type);
    case VKind::Dict: {
      if (!v->default_dict()) return reinterpret_cast<PyObject*>(&PyDict_Type);
      static PyObject* dd = py::object(loaded_module("collections").attr("defaultdict")).release().ptr();  // process lifetime
      return dd;
    }
    case VKind::Set: return reinterpret_cast<PyObject*>(v->frozenset_result() ? &PyFrozenSet_Type : &PySet_Type);
    case VKind::DictView:
      switch (v->view_of().part) {
        case ViewPart::Keys: return reinterpret_cast<PyObject*>(&PyDictKeys_Type);
        case ViewPart::Values: return reinterpret_cast<PyObject*>(&PyDictValues_Type);
        case ViewPart::Items: return reinterpret_cast<PyObject*>(&PyDictItems_Type);
      }
      return nullptr;
    case VKind::Const: return reinterpret_cast<PyObject*>(Py_TYPE(v->obj.ptr()));
    case VKind::Instance:
    case VKind::Record: return v->instance().cls->obj.ptr();
    default: return nullptr;
  }
}

}  // namespace

bool set_kwarg(Kwargs& kwargs, const std::string& name, ValuePtr value) {
  for (auto& e : kwargs)
    if (e.first == name) {
      e.second = std::move(value);
      return true;
    }
  return false;
}

bool is_namedtuple_class(py::handle cls) {
  if (!PyType_Check(cls.ptr())) return false;
  auto* type = reinterpret_cast<PyTypeObject*>(cls.ptr());
  PyObject* bases = type->tp_bases;  // borrowed
  if (!bases || PyTuple_GET_SIZE(bases) != 1 || PyTuple_GET_ITEM(bases, 0) != reinterpret_cast<PyObject*>(&PyTuple_Type))
    return false;
  return py::hasattr(cls, "_fields") && py::hasattr(cls, "_make");
}

ValuePtr Tracer::make_namedtuple(py::handle cls, const std::vector<ValuePtr>& args, const Kwargs& kwargs) {
  py::tuple fields = cls.attr("_fields");
  size_t n = fields.size();
  if (args.size() > n) unsupported("too many arguments for namedtuple " + callable_name(cls));
  std::vector<ValuePtr> items(n);
  for (size_t i = 0; i < args.size(); ++i) items[i] = args[i];
  for (const auto& kv : kwargs) {
    size_t at = n;
    for (size_t i = 0; i < n; ++i)
      if (py::str(fields[i]).cast<std::string>() == kv.first) at = i;
    if (at == n || items[at]) unsupported("bad keyword argument '" + kv.first + "' for a namedtuple");
    items[at] = kv.second;
  }
  py::dict defaults = cls.attr("_field_defaults");
  for (size_t i = 0; i < n; ++i) {
    if (items[i]) continue;
    PyObject* d = PyDict_GetItemWithError(defaults.ptr(), py::str(fields[i]).ptr());  // borrowed
    if (!d) {
      if (PyErr_Occurred()) throw py::error_already_set();
      unsupported("namedtuple " + callable_name(cls) + " missing a field");
    }
    if (!is_constant_object(d)) unsupported("namedtuple default that is not a constant");
    items[i] = Value::constant(py::reinterpret_borrow<py::object>(d));
  }
  return Value::tuple(std::move(items), py::reinterpret_borrow<py::object>(cls));
}

ValuePtr Tracer::namedtuple_attr(const ValuePtr& nt, const std::string& name) {
  // A torch.Size of symbolic sizes (symbolic.cpp) has no fields: its methods run on its plain value (the trace
  // specialises it, Tracer::execute_one).
  py::handle cls = nt->tuple_class();
  if (!is_structseq_class(cls) && !py::hasattr(cls, "_fields"))
    unsupported("attribute '" + name + "' of a " + callable_name(cls) + " of symbolic sizes");
  py::tuple fields = tuple_field_names(cls);
  for (size_t i = 0; i < fields.size(); ++i)
    if (py::str(fields[i]).cast<std::string>() == name) return nt->items[i];
  if (name == "_fields" && !is_structseq_class(cls)) return Value::constant(fields);
  if (name == "_replace" || name == "_asdict" || name == "count" || name == "index") return Value::method(nt, name);
  unsupported("attribute '" + name + "' of namedtuple " + callable_name(cls));
}

namespace {

// --- builtin rules: one function per builtin (or family), looked up by the builtin's name, which
// builtin_name() only gives for the builtins module's own object (so the lookup is by identity). A rule returns
// nullptr when the call is not one it models: the caller's generic path (classify_callable) goes on. ---

using Args = std::vector<ValuePtr>;
using BuiltinRule = ValuePtr (*)(Tracer&, py::handle, Args&, Kwargs&);

// functools.partial(fn, *args, **kwargs) made in the trace: rebuilt at a graph break by calling functools.partial
// again (codegen/rebuild.cpp).
ValuePtr make_partial(py::handle f, Args& args, Kwargs& kwargs) {
  PartialOf parts;
  parts.fn = args[0];
  parts.args.assign(args.begin() + 1, args.end());
  for (auto& kv : kwargs) {
    parts.kw_names.push_back(py::str(kv.first));
    parts.kw_values.push_back(kv.second);
  }
  parts.made_in_trace = true;
  return Value::partial_of(py::reinterpret_borrow<py::object>(f), std::move(parts));
}

}  // namespace

struct Tracer::BuiltinRules {
  // len(): every value kind whose length the trace knows, in one place.
  static ValuePtr builtin_len(Tracer& t, py::handle, Args& args, Kwargs& kwargs) {
    if (args.size() != 1 || !kwargs.empty()) return nullptr;
    const ValuePtr& v = args[0];
    if (v->kind == VKind::Object && v->source &&
        (PyDict_Check(v->obj.ptr()) || PyList_Check(v->obj.ptr()) || PyTuple_Check(v->obj.ptr()))) {
      // A dict / list / tuple subclass held by an object (an OrderedDict of hooks): its length, guarded.
      t.guards.add(guards::length_match(v->source, v->obj.ptr()));
      return Value::constant(py::int_(PyObject_Length(v->obj.ptr())));
    }
    if (v->kind == VKind::Instance || (v->kind == VKind::Object && v->source)) {
      // A user object whose class defines __len__ in Python: inlined; Python checks the result is an int >= 0.
      if (ValuePtr r = t.call_user_dunder(v, "__len__", {})) {
        if (!r->is_const() || !PyLong_Check(r->obj.ptr()) || PyLong_AsLong(r->obj.ptr()) < 0)
          t.unsupported("__len__ of " + v->describe() + " returned " + r->describe());
        return Value::constant(py::int_(PyLong_AsLong(r->obj.ptr())));
      }
    }
    switch (v->kind) {
      case VKind::Tuple:
      case VKind::List:
      case VKind::Dict: return Value::constant(py::int_(v->items.size()));
      case VKind::Set: return Value::constant(py::int_(v->keys.size()));
      case VKind::DictView: return Value::constant(py::int_(v->view_of().dict->keys.size()));
      case VKind::Record: return Value::constant(py::int_(t.record_present(v).size()));
      default: break;
    }
    if (ValuePtr n = t.module_container_len(v)) return n;
    if (v->is_tensor()) {  // the size of dimension 0: a constant, or a symbolic size
      py::object shape = v->tensor().example.attr("shape");
      if (py::len(shape) == 0) t.unsupported("len() of a 0-d tensor");
      return t.metadata_value(v, "size", {Value::constant(py::int_(0))}, shape[py::int_(0)]);
    }
    return nullptr;
  }

  // zip(..., strict=True) over lists/tuples of known length (torch.optim's loops): lengths that differ make Python
  // raise, so that runs as Python. (zip / enumerate / reversed / list / tuple without keywords: Tracer::call's
  // call_iter_builtin, after these rules.)
  static ValuePtr builtin_zip(Tracer& t, py::handle, Args& args, Kwargs& kwargs) {
    if (args.empty() || kwargs.size() != 1 || kwargs[0].first != "strict" || !kwargs[0].second->is_const() ||
        !PyBool_Check(kwargs[0].second->obj.ptr()))
      return nullptr;
    if (kwargs[0].second->obj.ptr() == Py_True)
      for (const auto& a : args) {
        if (a->kind != VKind::List && a->kind != VKind::Tuple) t.unsupported("zip(strict=True) over " + a->describe());
        if (a->items.size() != args[0]->items.size()) t.unsupported("zip(strict=True) over sequences of different lengths");
      }
    return t.call_iter_builtin("zip", args);
  }

  static ValuePtr builtin_enumerate(Tracer& t, py::handle, Args& args, Kwargs& kwargs) {
    if (args.size() == 1 && kwargs.size() == 1 && kwargs[0].first == "start")
      return t.call_iter_builtin("enumerate", {args[0], kwargs[0].second});
    return nullptr;
  }

  // list() / tuple() of a set, a dict or a dict view (in their iteration order).
  template <bool kList>
  static ValuePtr builtin_sequence(Tracer& t, py::handle, Args& args, Kwargs& kwargs) {
    if (args.size() != 1 || !kwargs.empty() ||
        (args[0]->kind != VKind::Set && args[0]->kind != VKind::Dict && args[0]->kind != VKind::DictView))
      return nullptr;
    std::vector<ValuePtr> items = t.unpack_iterable(args[0]);
    return kList ? Value::list(std::move(items)) : Value::tuple(std::move(items));
  }

  // sum(items[, start]): result = start; result = result + item, as Python's sum does (0 + tensor is a real add).
  static ValuePtr builtin_sum(Tracer& t, py::handle, Args& args, Kwargs& kwargs) {
    if ((args.size() != 1 && args.size() != 2) || !only_kwargs(kwargs, {"start"}) || foldable(args[0])) return nullptr;
    ValuePtr acc = args.size() == 2 ? args[1] : kwarg(kwargs, "start");
    if (!acc) acc = Value::constant(py::int_(0));
    py::object add = PyRefs::get().operator_mod.attr("add");
    for (const auto& item : t.unpack_iterable(args[0])) acc = t.apply_operator(add, {acc, item});
    if (args[0]->kind == VKind::Iter) args[0]->iter().pos = args[0]->iter().items.size();
    return acc;
  }

  // any() / all() over values known now: each item's truth value must be a constant (Python stops at the first
  // deciding item; the items were all computed already, by the trace, in order).
  template <bool kAny>
  static ValuePtr builtin_any_all(Tracer& t, py::handle, Args& args, Kwargs& kwargs) {
    if (args.size() != 1 || !kwargs.empty() || foldable(args[0])) return nullptr;
    std::vector<ValuePtr> items = t.unpack_iterable(args[0]);
    if (args[0]->kind == VKind::Iter) args[0]->iter().pos = args[0]->iter().items.size();
    for (const auto& item : items) {
      if (!item->is_constant_like()) t.unsupported(std::string(kAny ? "any" : "all") + "() on the truth value of " + item->describe());
      int truth = PyObject_IsTrue(item->as_python().ptr());
      if (truth < 0) throw py::error_already_set();
      if ((truth == 1) == kAny) return Value::constant(py::bool_(kAny));
    }
    return Value::constant(py::bool_(!kAny));
  }

  static ValuePtr builtin_map(Tracer& t, py::handle, Args& args, Kwargs& kwargs) {
    if (args.size() < 2 || !kwargs.empty()) return nullptr;
    std::vector<std::vector<ValuePtr>> cols;
    size_t n = SIZE_MAX;
    for (size_t i = 1; i < args.size(); ++i) {
      cols.push_back(t.unpack_iterable(args[i]));
      n = std::min(n, cols.back().size());
    }
    std::vector<ValuePtr> out;
    for (size_t r = 0; r < n; ++r) {
      std::vector<ValuePtr> call_args;
      for (auto& c : cols) call_args.push_back(c[r]);
      out.push_back(t.call(args[0], std::move(call_args), {}));
    }
    return iter_of(std::move(out));
  }

  static ValuePtr builtin_filter(Tracer& t, py::handle, Args& args, Kwargs& kwargs) {
    if (args.size() != 2 || !kwargs.empty()) return nullptr;
    std::vector<ValuePtr> out;
    for (const auto& item : t.unpack_iterable(args[1])) {
      ValuePtr keep = args[0]->is_const() && args[0]->obj.is_none() ? item : t.call(args[0], {item}, {});
      if (!keep->is_constant_like()) t.unsupported("filter() on the truth value of " + keep->describe());
      int truth = PyObject_IsTrue(keep->as_python().ptr());
      if (truth < 0) throw py::error_already_set();
      if (truth) out.push_back(item);
    }
    return iter_of(std::move(out));
  }

  // sorted(items, key=, reverse=) and min / max(items, key=): the order is decided by Python on the keys
  // (constants); the items themselves may be anything.
  static ValuePtr ordered_by_keys(Tracer& t, const std::string& name, Args& args, Kwargs& kwargs) {
    auto& refs = PyRefs::get();
    std::vector<ValuePtr> items = t.unpack_iterable(args[0]);
    if (args[0]->kind == VKind::Iter) args[0]->iter().pos = args[0]->iter().items.size();
    ValuePtr key = kwarg(kwargs, "key");
    py::list keys;
    for (const auto& item : items) {
      ValuePtr k = key && !(key->is_const() && key->obj.is_none()) ? t.call(key, {item}, {}) : item;
      if (!k->is_constant_like()) t.unsupported(name + "() by " + k->describe() + " (needs its value)");
      keys.append(k->as_python());
    }
    py::object range = refs.builtins.attr("range")(items.size());
    if (name != "sorted") {
      if (items.empty()) t.unsupported(name + "() of an empty sequence (ValueError is raised by Python)");
      py::object best = refs.builtins.attr(name.c_str())(range, py::arg("key") = keys.attr("__getitem__"));
      return items[best.cast<size_t>()];
    }
    ValuePtr rev = kwarg(kwargs, "reverse");
    if (rev && !rev->is_const()) t.unsupported("sorted(reverse=...) that is not a constant");
    py::object order = refs.builtins.attr("sorted")(range, py::arg("key") = keys.attr("__getitem__"),
                                                   py::arg("reverse") = rev ? rev->obj : py::bool_(false));
    std::vector<ValuePtr> out;
    for (auto i : order) out.push_back(items[i.cast<size_t>()]);
    return Value::list(std::move(out));
  }

  static ValuePtr builtin_sorted(Tracer& t, py::handle, Args& args, Kwargs& kwargs) {
    bool keyed = kwarg(kwargs, "key") != nullptr;
    if (args.size() == 1 && only_kwargs(kwargs, {"key", "reverse"}) && (keyed || !foldable(args[0])))
      return ordered_by_keys(t, "sorted", args, kwargs);
    return nullptr;
  }

  template <bool kMax>
  static ValuePtr builtin_min_max(Tracer& t, py::handle, Args& args, Kwargs& kwargs) {
    bool keyed = kwarg(kwargs, "key") != nullptr;
    if (args.size() == 1 && keyed && only_kwargs(kwargs, {"key"})) return ordered_by_keys(t, kMax ? "max" : "min", args, kwargs);
    if (kwargs.empty() && !args.empty()) return min_max_of_tensors(t, kMax, args);  // library_values.cpp
    return nullptr;
  }

  // getattr / hasattr of a constant name on a constant (its builtin type's attributes).
  static ValuePtr attr_of_constant(Tracer& t, bool has_only, const ValuePtr& obj, const std::string& attr, Args& args) {
    int has = PyObject_HasAttrString(obj->obj.ptr(), attr.c_str());
    if (has_only) return Value::constant(py::bool_(has == 1));
    if (has == 1) return t.load_attr(obj, attr);
    if (args.size() == 3) return args[2];
    t.unsupported("getattr of a missing attribute of " + obj->describe() + " (AttributeError is raised by Python)");
  }

  // ... on an object of the frame: an attribute this trace assigned (not replayed on the object yet) is there, with the
  // assigned value; otherwise whether it exists is guarded, its value read (and guarded) only when it does (the guard on
  // the value read through obj.attr also fails when the attribute goes away, so presence then needs no guard).
  static ValuePtr attr_of_frame_object(Tracer& t, bool has_only, const ValuePtr& obj, const std::string& attr, Args& args) {
    if (ValuePtr v = t.pending_attr(obj, attr)) return has_only ? Value::constant(py::bool_(true)) : v;
    if (t.frame_getattribute_override(obj->obj)) {
      // Through the class's __getattribute__, inlined (Tracer::object_attr); if it cannot be traced, presence is
      // guarded through getattr below.
      if (ValuePtr r = attr_through_getattribute(t, has_only, obj, attr, args, true)) return r;
    }
    int has = PyObject_HasAttrString(obj->obj.ptr(), attr.c_str());
    if (!has_only && has == 1) return t.load_attr(obj, attr);
    t.guards.add(guards::has_attr(obj->source, attr, has == 1));
    if (has_only) return Value::constant(py::bool_(has == 1));
    if (args.size() == 3) return args[2];
    t.unsupported("getattr of a missing attribute (AttributeError is raised by Python)");
  }

  // hasattr on a tensor: torch.Tensor's own attributes are on every tensor; anything else only on a tensor of the
  // frame that was given one (presence guarded); a tensor the graph makes has no other attribute.
  static ValuePtr hasattr_of_tensor(Tracer& t, const ValuePtr& obj, const std::string& attr) {
    if (PyObject_HasAttrString(PyRefs::get().tensor_type.ptr(), attr.c_str()) == 1) return Value::constant(py::bool_(true));
    if (!obj->source) return Value::constant(py::bool_(false));
    py::object real = py::reinterpret_steal<py::object>(obj->source->fetch(t.fv));  // new reference
    if (!real) t.unsupported("hasattr on a tensor that cannot be fetched again");
    int has = PyObject_HasAttrString(real.ptr(), attr.c_str());
    t.guards.add(guards::has_attr(obj->source, attr, has == 1));
    return Value::constant(py::bool_(has == 1));
  }

  // ... through the class's Python __getattribute__, inlined (Tracer::object_attr): the AttributeError it raises is
  // hasattr's False / getattr's default, when raising it changed nothing (else the trace stops there). `fallback` (an
  // object of the frame): an inline that cannot be traced and changed nothing gives nullptr, and the caller reads the
  // attribute's presence through getattr, guarded; without it (an object made in the trace) it stops the trace.
  static ValuePtr attr_through_getattribute(Tracer& t, bool has_only, const ValuePtr& obj, const std::string& attr,
                                            Args& args, bool fallback) {
    const TraceMark mark = t.mark_state();
    StopInfo stop = t.stop;
    try {
      ValuePtr r = t.load_attr(obj, attr);
      return has_only ? Value::constant(py::bool_(true)) : r;
    } catch (const TracedRaise& e) {
      if (!PyErr_GivenExceptionMatches(e.exc.ptr(), PyExc_AttributeError)) throw;
      if (!t.unchanged_since(mark))
        t.unsupported("getattr through a __getattribute__ that changed state before raising AttributeError");
      if (has_only) return Value::constant(py::bool_(false));
      if (args.size() == 3) return args[2];
      throw;
    } catch (const OpRaised&) {
      throw;
    } catch (const Unsupported&) {
      if (!fallback || !t.unchanged_since(mark)) throw;
      t.stop = std::move(stop);
      return nullptr;
    }
  }

  // ... on an object made in the trace: its own attributes are known; a class attribute's presence is guarded on the
  // class.
  static ValuePtr attr_of_instance(Tracer& t, bool has_only, const ValuePtr& obj, const std::string& attr, Args& args) {
    bool has = obj->find_key(py::str(attr)) >= 0;
    if (!has) {
      has = PyObject_HasAttrString(obj->instance().cls->obj.ptr(), attr.c_str()) == 1;
      t.guards.add(guards::has_attr(obj->instance().cls->source, attr, has));
    }
    if (has_only) return Value::constant(py::bool_(has));
    if (has) return t.load_attr(obj, attr);
    if (args.size() == 3) return args[2];
    t.unsupported("getattr of a missing attribute (AttributeError is raised by Python)");
  }

  template <bool kHas>
  static ValuePtr builtin_getattr(Tracer& t, py::handle, Args& args, Kwargs& kwargs) {
    if (!(args.size() == 2 || (!kHas && args.size() == 3)) || !kwargs.empty() || !args[1]->is_const() ||
        !PyUnicode_Check(args[1]->obj.ptr()))
      return nullptr;
    std::string attr = args[1]->obj.cast<std::string>();
    const ValuePtr& obj = args[0];
    if (obj->is_const()) return attr_of_constant(t, kHas, obj, attr, args);
    if (obj->kind == VKind::Object && obj->source && !PyModule_Check(obj->obj.ptr()))
      return attr_of_frame_object(t, kHas, obj, attr, args);
    if (obj->is_tensor() && kHas) return hasattr_of_tensor(t, obj, attr);
    if (obj->kind == VKind::Instance && t.getattribute_override(obj))
      return attr_through_getattribute(t, kHas, obj, attr, args, false);
    if (obj->kind == VKind::Instance) return attr_of_instance(t, kHas, obj, attr, args);
    if (!kHas && args.size() == 2) return t.load_attr(obj, attr);
    return nullptr;
  }

  static ValuePtr builtin_delattr(Tracer& t, py::handle, Args& args, Kwargs& kwargs) {
    if (args.size() != 2 || !kwargs.empty() || args[0]->kind != VKind::Instance || !args[1]->is_const() ||
        !PyUnicode_Check(args[1]->obj.ptr()))
      return nullptr;
    t.instance_delattr(args[0], args[1]->obj.cast<std::string>());
    return Value::constant(py::none());
  }

  static ValuePtr builtin_setattr(Tracer& t, py::handle, Args& args, Kwargs& kwargs) {
    if (args.size() != 3 || !kwargs.empty() || !args[1]->is_const() || !PyUnicode_Check(args[1]->obj.ptr())) return nullptr;
    t.store_attr(args[0], args[1]->obj.cast<std::string>(), args[2]);
    return Value::constant(py::none());
  }

  // isinstance(v, classes) when v's type is known: containers and constants; an object from the frame (its type
  // guarded: TYPE_MATCH, or ID_MATCH) when isinstance depends on its type alone: the default __class__, and classes
  // whose metaclass is type or ABCMeta (no Protocol checks reading attributes).
  static ValuePtr builtin_isinstance(Tracer&, py::handle, Args& args, Kwargs& kwargs) {
    if (args.size() != 2 || !kwargs.empty()) return nullptr;
    PyObject* type = known_type(args[0]);
    if (!type && args[0]->kind == VKind::Object && args[0]->source && !args[0]->bound_self() && foldable(args[1]) &&
        type_only_instance_check(args[0]->obj, args[1]->as_python()))
      type = reinterpret_cast<PyObject*>(Py_TYPE(args[0]->obj.ptr()));
    if (!type || !foldable(args[1])) return nullptr;
    int r = PyObject_IsSubclass(type, args[1]->as_python().ptr());
    if (r < 0) throw py::error_already_set();
    return Value::constant(py::bool_(r == 1));
  }

  static ValuePtr builtin_type(Tracer& t, py::handle, Args& args, Kwargs& kwargs) {
    if (args.size() != 1 || !kwargs.empty()) return nullptr;
    const ValuePtr& v = args[0];
    if (PyObject* type = known_type(v)) return Value::object(py::reinterpret_borrow<py::object>(type));
    if (v->is_tensor() && v->tensor().node && v->tensor().node->op != graph::OpKind::Placeholder)
      return Value::object(PyRefs::get().tensor_type);  // made by a torch op: exactly torch.Tensor
    if (v->kind == VKind::Object && v->source)  // guarded by identity through obj.__class__
      return t.wrap(reinterpret_cast<PyObject*>(Py_TYPE(v->obj.ptr())), t.type_source(v));
    if ((v->kind == VKind::Instance || v->kind == VKind::Record) && v->instance().cls)
      return v->instance().cls;  // made in the trace: its class
    for (const auto& in : t.inputs)
      if (v->is_tensor() && in.node == v->tensor().node)  // TENSOR_MATCH guards the exact type
        return Value::object(py::reinterpret_borrow<py::object>(reinterpret_cast<PyObject*>(Py_TYPE(in.value.ptr()))));
    return nullptr;
  }

  // super(cls, self) and zero-argument super(): the `__class__` cell and the first argument of the running function.
  static ValuePtr builtin_super(Tracer& t, py::handle, Args& args, Kwargs& kwargs) {
    if (!kwargs.empty() || args.size() > 2) return nullptr;
    ValuePtr cls, self;
    if (args.size() == 2) {
      cls = args[0];
      self = args[1];
    } else if (args.empty()) {
      int nslots = compat::code_nlocalsplus(t.code);
      for (int s = 0; s < nslots; ++s) {
        if (py::str(compat::code_localsplus_name(t.code, s)).cast<std::string>() != "__class__") continue;
        ValuePtr box = t.cell_of(s);
        cls = box ? box->cell().content : t.load_local(s);
      }
      if (t.code->co_argcount > 0) {
        ValuePtr box = t.cell_of(0);
        self = box ? box->cell().content : t.load_local(0);
      }
    }
    bool fresh = self && self->kind == VKind::Instance;
    if (!cls || !self || cls->kind != VKind::Object || !PyType_Check(cls->obj.ptr()) ||
        !(fresh || (self->kind == VKind::Object && self->source)))
      t.unsupported("super() outside a method of an object with a source");
    return Value::super_value(fresh ? py::none() : PyRefs::get().builtins.attr("super")(cls->obj, self->obj), cls, self);
  }

  // iter(seq): the iterator GET_ITER makes. next(it[, default]) on an iterator made in the trace; past its end the
  // default, or StopIteration, which runs as Python.
  static ValuePtr builtin_iter(Tracer& t, py::handle, Args& args, Kwargs& kwargs) {
    if (args.size() != 1 || !kwargs.empty()) return nullptr;
    return make_iterator(t, args[0]);
  }

  static ValuePtr builtin_next(Tracer& t, py::handle, Args& args, Kwargs& kwargs) {
    if (args.empty() || args.size() > 2 || !kwargs.empty() || args[0]->kind != VKind::Iter) return nullptr;
    if (ValuePtr item = iterator_next(t, args[0])) return item;
    if (args.size() == 2) return args[1];
    t.unsupported("next() of an exhausted iterator (StopIteration is raised by Python)");
  }

  // functools.reduce(f, iterable[, initial]): f called on the accumulator and each item, in order.
  static ValuePtr lib_reduce(Tracer& t, py::handle, Args& args, Kwargs& kwargs) {
    if (args.size() < 2 || args.size() > 3 || !kwargs.empty()) return nullptr;
    std::vector<ValuePtr> items = t.unpack_iterable(args[1]);
    if (args[1]->kind == VKind::Iter) args[1]->iter().pos = args[1]->iter().items.size();
    size_t first = 0;
    ValuePtr acc = args.size() == 3 ? args[2] : nullptr;
    if (!acc) {
      if (items.empty()) t.unsupported("functools.reduce() of an empty iterable with no initial value (TypeError)");
      acc = items[0];
      first = 1;
    }
    for (size_t i = first; i < items.size(); ++i) acc = t.call(args[0], {acc, items[i]}, {});
    return acc;
  }

  // itertools.chain(*iterables): an iterator over their items, in order (each iterable read now, as chain reads them
  // lazily: the trace's iterables are known values).
  static ValuePtr lib_chain(Tracer& t, py::handle, Args& args, Kwargs& kwargs) {
    if (!kwargs.empty()) return nullptr;
    std::vector<ValuePtr> out;
    for (const auto& a : args) {
      for (auto& item : t.unpack_iterable(a)) out.push_back(std::move(item));
      if (a->kind == VKind::Iter) a->iter().pos = a->iter().items.size();
    }
    return iter_of(std::move(out));
  }

  // itertools.repeat(x, n) with a constant count: an iterator yielding x n times (without a count it never ends).
  // collections.defaultdict(factory, ...) made in the trace (dicts.cpp).
  static ValuePtr lib_defaultdict(Tracer& t, py::handle, Args& args, Kwargs& kwargs) { return t.make_default_dict(args, kwargs); }

  static ValuePtr lib_repeat(Tracer& t, py::handle, Args& args, Kwargs& kwargs) {
    ValuePtr times = args.size() == 2 ? args[1] : kwarg(kwargs, "times");
    if (args.empty() || args.size() > 2 || !only_kwargs(kwargs, {"times"}) || !times) return nullptr;
    if (!times->is_const() || !PyLong_CheckExact(times->obj.ptr())) t.unsupported("itertools.repeat with a count that is not a constant int");
    long n = std::max(0L, times->obj.cast<long>());
    if (n > 100000) t.unsupported("itertools.repeat of " + std::to_string(n) + " items (too long to unroll)");
    return iter_of(std::vector<ValuePtr>(static_cast<size_t>(n), args[0]));
  }

  static const std::unordered_map<std::string, BuiltinRule>& builtin_rules() {
    static const std::unordered_map<std::string, BuiltinRule> rules = {
        {"len", builtin_len},
        {"zip", builtin_zip},
        {"enumerate", builtin_enumerate},
        {"list", builtin_sequence<true>},
        {"tuple", builtin_sequence<false>},
        {"sum", builtin_sum},
        {"any", builtin_any_all<true>},
        {"all", builtin_any_all<false>},
        {"map", builtin_map},
        {"filter", builtin_filter},
        {"sorted", builtin_sorted},
        {"min", builtin_min_max<false>},
        {"max", builtin_min_max<true>},
        {"getattr", builtin_getattr<false>},
        {"hasattr", builtin_getattr<true>},
        {"delattr", builtin_delattr},
        {"setattr", builtin_setattr},
        {"isinstance", builtin_isinstance},
        {"type", builtin_type},
        {"super", builtin_super},
        {"iter", builtin_iter},
        {"next", builtin_next},
    };
    return rules;
  }

  // --- library rules: functions of the standard library traced by what they do, looked up by the function object's
  // identity (resolved once from their modules). Same contract as the builtin rules. ---

  static const std::unordered_map<PyObject*, BuiltinRule>& library_rules() {
    static const std::unordered_map<PyObject*, BuiltinRule>* rules = [] {
      auto* m = new std::unordered_map<PyObject*, BuiltinRule>();  // process lifetime; keys owned below
      auto add = [&](const char* module, const char* name, BuiltinRule r) {
        py::object f = loaded_module(module).attr(name);
        (*m)[f.release().ptr()] = r;  // a strong reference kept for the process: the key stays valid
      };
      add("functools", "reduce", lib_reduce);
      add("itertools", "chain", lib_chain);
      add("itertools", "repeat", lib_repeat);
      add("collections", "defaultdict", lib_defaultdict);
      add("torch", "Size", torch_size_call);
      for (const char* legacy : {"FloatTensor", "DoubleTensor", "HalfTensor", "BFloat16Tensor", "LongTensor", "IntTensor",
                                 "ShortTensor", "CharTensor", "ByteTensor", "BoolTensor"})
        add("torch", legacy, legacy_tensor_call);
      py::object dist = loaded_module("torch.distributed");
      if (dist.attr("is_available")().cast<bool>()) add("torch.distributed", "is_initialized", dist_initialized_call);
      return m;
    }();
    return *rules;
  }
};

ValuePtr Tracer::call_builtin(const std::string& name, py::handle f, std::vector<ValuePtr>& args, Kwargs& kwargs) {
  if (f.is(PyRefs::get().functools_partial) && !args.empty()) return make_partial(f, args, kwargs);
  if (name.empty()) {
    const auto& lib = BuiltinRules::library_rules();
    auto it = lib.find(f.ptr());
    return it == lib.end() ? nullptr : it->second(*this, f, args, kwargs);
  }
  const auto& rules = BuiltinRules::builtin_rules();
  auto it = rules.find(name);
  return it == rules.end() ? nullptr : it->second(*this, f, args, kwargs);
}

ValuePtr Tracer::super_attr(const ValuePtr& sup, const std::string& name) {
  // The attribute found after `cls` in type(self).__mro__, guarded through that class.
  const ValuePtr& self = sup->super_of()->obj;
  py::object cls = sup->super_of()->cls->obj;
  bool fresh = self->kind == VKind::Instance;  // an object made in the trace: its class value has the source
  py::object self_type = fresh ? self->instance().cls->obj
                               : py::reinterpret_borrow<py::object>(reinterpret_cast<PyObject*>(Py_TYPE(self->obj.ptr())));
  py::tuple mro = self_type.attr("__mro__");
  size_t start = 0;
  while (start < mro.size() && mro[start].ptr() != cls.ptr()) ++start;
  SourcePtr mro_src = fresh ? guards::Source::attr(self->instance().cls->source, "__mro__")
                            : guards::Source::attr(type_source(self), "__mro__");
  for (size_t k = start + 1; k < mro.size(); ++k) {
    PyObject* d = compat::type_dict_item(reinterpret_cast<PyTypeObject*>(mro[k].ptr()), name.c_str());
    if (!d) continue;  // borrowed
    if (mro[k].ptr() == reinterpret_cast<PyObject*>(&PyBaseObject_Type) && name == "__init__") {
      return Value::slot_value(py::none(), Slot::Noop, nullptr);  // object.__init__(self): nothing to do
    }
    if (!PyFunction_Check(d)) {
      // object.__getattribute__ past a class's own override (PretrainedConfig remaps names in its override).
      // object.__setattr__ past a class's own override, on an object made in the trace.
      if (name == "__setattr__" && fresh && mro[k].ptr() == reinterpret_cast<PyObject*>(&PyBaseObject_Type)) {
        // made_in_trace(): never passed back to Python (it would lose its receiver)
        return Value::slot_value(py::reinterpret_borrow<py::object>(d), Slot::SuperSetattr, self);
      }
      if (name == "__getattribute__" && mro[k].ptr() == reinterpret_cast<PyObject*>(&PyBaseObject_Type)) {
        // made_in_trace(): never passed back to Python (it would lose its receiver)
        return Value::slot_value(py::reinterpret_borrow<py::object>(d), Slot::SuperGetattribute, self);
      }
      // dict's own lookups on a dict subclass that overrides them (transformers' registries).
      if (mro[k].ptr() == reinterpret_cast<PyObject*>(&PyDict_Type) &&
          (name == "get" || name == "__getitem__" || name == "__contains__")) {
        Slot s = name == "get" ? Slot::SuperDictGet : name == "__getitem__" ? Slot::SuperDictGetitem : Slot::SuperDictContains;
        // made_in_trace(): never passed back to Python (it would lose its receiver)
        return Value::slot_value(py::reinterpret_borrow<py::object>(d), s, self);
      }
      unsupported("super()." + name + " is not a plain method");
    }
    // Guarded as type(self).__mro__[k].<name>: the same function object while the classes stay as they are.
    SourcePtr fsrc = guards::Source::attr(guards::Source::item(mro_src, static_cast<int>(k)), name);
    ValuePtr f = wrap(d, fsrc);
    return Value::bound_method(f->obj, fsrc, self, name);
  }
  unsupported("super() has no attribute '" + name + "'");
}

ValuePtr Tracer::generic_getattr(const ValuePtr& self, const std::vector<ValuePtr>& args,
                                 const std::vector<std::pair<std::string, ValuePtr>>& kwargs) {
  if (args.size() != 1 || !kwargs.empty() || !args[0]->is_const() || !PyUnicode_Check(args[0]->obj.ptr()))
    unsupported("super().__getattribute__ with a non-constant name");
  std::string name = args[0]->obj.cast<std::string>();
  if (self->kind == VKind::Instance) return instance_generic_attr(self, name);
  if (self->kind != VKind::Object || !self->source) unsupported("super().__getattribute__ of " + self->describe());
  py::str key(name);
  PyObject* descr = _PyType_Lookup(Py_TYPE(self->obj.ptr()), key.ptr());  // borrowed, may be NULL
  PyObject* inst_dict = nullptr;                                           // borrowed
  if (PyObject** dp = _PyObject_GetDictPtr(self->obj.ptr())) inst_dict = *dp;
  bool in_instance = inst_dict && PyDict_GetItemWithError(inst_dict, key.ptr());
  if (PyErr_Occurred()) throw py::error_already_set();
  // Methods and properties are found on the class, where the override plays no part.
  if (descr && !in_instance && (PyFunction_Check(descr) || PyObject_TypeCheck(descr, &PyProperty_Type)))
    return object_attr(self, name, /*past_override=*/true);
  PyObject* v = PyObject_GenericGetAttr(self->obj.ptr(), key.ptr());  // new reference
  if (!v) {
    bool missing = PyErr_ExceptionMatches(PyExc_AttributeError);
    PyErr_Clear();
    // Missing from the instance __dict__ and from the class (its MRO and metaclass): object.__getattribute__
    // raises AttributeError, which the trace raises too (a getattr default, hasattr or except clause handles
    // it). Both absences are guarded through object.__getattribute__, so no override runs in the guard.
    if (missing && !descr && inst_dict && !in_instance) {
      PyObject* cls = reinterpret_cast<PyObject*>(Py_TYPE(self->obj.ptr()));  // borrowed
      int on_class = PyObject_HasAttr(cls, key.ptr());
      if (on_class == 0) {
        guards.add(guards::dict_contains(guards::Source::generic_attr(self->source, "__dict__"), key.ptr(), false));
        guards.add(guards::has_attr(guards::Source::generic_attr(self->source, "__class__"), name, false));
        std::string why = std::string("'") + Py_TYPE(self->obj.ptr())->tp_name + "' object has no attribute '" + name + "'";
        py::object exc = py::reinterpret_steal<py::object>(
            PyObject_CallFunction(PyExc_AttributeError, "s", why.c_str()));  // new reference
        if (!exc) throw py::error_already_set();
        throw TracedRaise(why, exc);
      }
    }
    unsupported("super().__getattribute__('" + name + "') could not be read");
  }
  py::object value = py::reinterpret_steal<py::object>(v);
  if (PyMethod_Check(v) || PyCFunction_Check(v))
    unsupported("super().__getattribute__('" + name + "') is a bound method of another kind");
  return wrap(value, guards::Source::generic_attr(self->source, name));
}

ValuePtr Tracer::super_dict_call(const ValuePtr& self, const std::string& op, const std::vector<ValuePtr>& args,
                                 const std::vector<std::pair<std::string, ValuePtr>>& kwargs) {
  if (self->kind != VKind::Object || !self->source || !PyDict_Check(self->obj.ptr()))
    unsupported("super()." + op + " of " + self->describe());
  size_t max_args = op == "get" ? 2 : 1;
  if (args.empty() || args.size() > max_args || !kwargs.empty() || !args[0]->is_constant_like())
    unsupported("super()." + op + " with these arguments");
  py::object key = args[0]->as_python();
  PyObject* v = PyDict_GetItemWithError(self->obj.ptr(), key.ptr());  // borrowed, dict's own lookup
  if (!v && PyErr_Occurred()) throw py::error_already_set();
  if (op == "__contains__" || !v) {
    guards.add(guards::dict_contains(self->source, key.ptr(), v != nullptr));
    if (op == "__contains__") return Value::constant(py::bool_(v != nullptr));
    if (op == "__getitem__") unsupported("super().__getitem__ of a missing key (KeyError)");
    return args.size() > 1 ? args[1] : Value::constant(py::none());
  }
  return wrap(v, guards::Source::dict_item_key(self->source, key.ptr()));
}

ValuePtr Tracer::call_partial(const ValuePtr& p, std::vector<ValuePtr> args, Kwargs kwargs) {
  const PartialOf& parts = *p->partial();
  std::vector<ValuePtr> all = parts.args;
  all.insert(all.end(), args.begin(), args.end());
  Kwargs kw;
  for (size_t i = 0; i < parts.kw_names.size(); ++i) kw.emplace_back(parts.kw_names[i].cast<std::string>(), parts.kw_values[i]);
  for (auto& kv : kwargs)
    if (!set_kwarg(kw, kv.first, kv.second)) kw.push_back(kv);
  return call(parts.fn, std::move(all), std::move(kw));
}

}  // namespace cdynamo::interp
