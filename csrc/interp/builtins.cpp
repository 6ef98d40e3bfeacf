// builtins.cpp — owns builtins that iterate values or call functions at trace time (sum, map, filter,
// sorted, min/max with a key, enumerate(start=)), attribute builtins (getattr / hasattr / setattr),
// isinstance on containers, functools.partial, zero- and two-argument super(), and namedtuple classes.
#include "compat/compat.h"
#include "interp/torch_rules.h"
#include "interp/tracer.h"

namespace cdynamo::interp {

namespace {

using Kwargs = std::vector<std::pair<std::string, ValuePtr>>;

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
    case VKind::Tuple: return v->obj ? v->obj.ptr() : reinterpret_cast<PyObject*>(&PyTuple_Type);
    case VKind::List: return reinterpret_cast<PyObject*>(&PyList_Type);
    case VKind::Dict: return reinterpret_cast<PyObject*>(&PyDict_Type);
    case VKind::Set: return reinterpret_cast<PyObject*>(v->obj ? &PyFrozenSet_Type : &PySet_Type);
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
  ValuePtr out = Value::tuple(std::move(items));
  out->obj = py::reinterpret_borrow<py::object>(cls);
  return out;
}

ValuePtr Tracer::namedtuple_attr(const ValuePtr& nt, const std::string& name) {
  // A torch.Size of symbolic sizes (symbolic.cpp) has no fields: its methods run on its plain value (the trace
  // specialises it, Tracer::execute_one).
  if (!is_structseq_class(nt->obj) && !py::hasattr(nt->obj, "_fields"))
    unsupported("attribute '" + name + "' of a " + callable_name(nt->obj) + " of symbolic sizes");
  py::tuple fields = tuple_field_names(nt->obj);
  for (size_t i = 0; i < fields.size(); ++i)
    if (py::str(fields[i]).cast<std::string>() == name) return nt->items[i];
  if (name == "_fields" && !is_structseq_class(nt->obj)) return Value::constant(fields);
  if (name == "_replace" || name == "_asdict" || name == "count" || name == "index") return Value::method(nt, name);
  unsupported("attribute '" + name + "' of namedtuple " + callable_name(nt->obj));
}

ValuePtr Tracer::call_builtin(const std::string& name, py::handle f, std::vector<ValuePtr>& args, Kwargs& kwargs) {
  auto& refs = PyRefs::get();
  if (name == "len" && args.size() == 1 && kwargs.empty() && args[0]->kind == VKind::Object && args[0]->source &&
      (PyDict_Check(args[0]->obj.ptr()) || PyList_Check(args[0]->obj.ptr()) || PyTuple_Check(args[0]->obj.ptr()))) {
    // A dict / list / tuple subclass held by an object (an OrderedDict of hooks): its length, guarded.
    guards.add(guards::length_match(args[0]->source, args[0]->obj.ptr()));
    return Value::constant(py::int_(PyObject_Length(args[0]->obj.ptr())));
  }
  if (name == "len" && args.size() == 1 && kwargs.empty() &&
      (args[0]->kind == VKind::Instance || (args[0]->kind == VKind::Object && args[0]->source))) {
    // A user object whose class defines __len__ in Python: inlined; Python checks the result is an int >= 0.
    if (ValuePtr r = call_user_dunder(args[0], "__len__", {})) {
      if (!r->is_const() || !PyLong_Check(r->obj.ptr()) || PyLong_AsLong(r->obj.ptr()) < 0)
        unsupported("__len__ of " + args[0]->describe() + " returned " + r->describe());
      return Value::constant(py::int_(PyLong_AsLong(r->obj.ptr())));
    }
  }
  if (name == "zip" && !args.empty() && kwargs.size() == 1 && kwargs[0].first == "strict" && kwargs[0].second->is_const() &&
      PyBool_Check(kwargs[0].second->obj.ptr())) {
    // zip(..., strict=True) over lists/tuples of known length (torch.optim's loops): lengths that differ make
    // Python raise, so that runs as Python.
    if (kwargs[0].second->obj.ptr() == Py_True)
      for (const auto& a : args) {
        if (a->kind != VKind::List && a->kind != VKind::Tuple) unsupported("zip(strict=True) over " + a->describe());
        if (a->items.size() != args[0]->items.size()) unsupported("zip(strict=True) over sequences of different lengths");
      }
    return call_iter_builtin(name, args);
  }
  if (name == "enumerate" && args.size() == 1 && kwargs.size() == 1 && kwargs[0].first == "start")
    return call_iter_builtin(name, {args[0], kwargs[0].second});
  if ((name == "list" || name == "tuple") && args.size() == 1 && kwargs.empty() &&
      (args[0]->kind == VKind::Set || args[0]->kind == VKind::Dict || args[0]->kind == VKind::DictView)) {
    std::vector<ValuePtr> items = unpack_iterable(args[0]);
    return name == "list" ? Value::list(std::move(items)) : Value::tuple(std::move(items));
  }
  if (name == "sum" && (args.size() == 1 || args.size() == 2) && only_kwargs(kwargs, {"start"}) && !foldable(args[0])) {
    // result = start; result = result + item, as Python's sum does (0 + tensor is a real add).
    ValuePtr acc = args.size() == 2 ? args[1] : kwarg(kwargs, "start");
    if (!acc) acc = Value::constant(py::int_(0));
    py::object add = refs.operator_mod.attr("add");
    for (const auto& item : unpack_iterable(args[0])) acc = apply_operator(add, {acc, item});
    if (args[0]->kind == VKind::Iter) args[0]->iter().pos = args[0]->iter().items.size();
    return acc;
  }
  if ((name == "any" || name == "all") && args.size() == 1 && kwargs.empty() && !foldable(args[0])) {
    // Over values known now: each item's truth value must be a constant (Python stops at the first
    // deciding item; the items were all computed already, by the trace, in order).
    std::vector<ValuePtr> items = unpack_iterable(args[0]);
    if (args[0]->kind == VKind::Iter) args[0]->iter().pos = args[0]->iter().items.size();
    bool want = name == "any";
    for (const auto& item : items) {
      if (!item->is_constant_like()) unsupported(name + "() on the truth value of " + item->describe());
      int truth = PyObject_IsTrue(item->as_python().ptr());
      if (truth < 0) throw py::error_already_set();
      if ((truth == 1) == want) return Value::constant(py::bool_(want));
    }
    return Value::constant(py::bool_(!want));
  }
  if (name == "map" && args.size() >= 2 && kwargs.empty()) {
    std::vector<std::vector<ValuePtr>> cols;
    size_t n = SIZE_MAX;
    for (size_t i = 1; i < args.size(); ++i) {
      cols.push_back(unpack_iterable(args[i]));
      n = std::min(n, cols.back().size());
    }
    std::vector<ValuePtr> out;
    for (size_t r = 0; r < n; ++r) {
      std::vector<ValuePtr> call_args;
      for (auto& c : cols) call_args.push_back(c[r]);
      out.push_back(call(args[0], std::move(call_args), {}));
    }
    return iter_of(std::move(out));
  }
  if (name == "filter" && args.size() == 2 && kwargs.empty()) {
    std::vector<ValuePtr> out;
    for (const auto& item : unpack_iterable(args[1])) {
      ValuePtr keep = args[0]->is_const() && args[0]->obj.is_none() ? item : call(args[0], {item}, {});
      if (!keep->is_constant_like()) unsupported("filter() on the truth value of " + keep->describe());
      int truth = PyObject_IsTrue(keep->as_python().ptr());
      if (truth < 0) throw py::error_already_set();
      if (truth) out.push_back(item);
    }
    return iter_of(std::move(out));
  }
  bool keyed = kwarg(kwargs, "key") != nullptr;
  if ((name == "sorted" && args.size() == 1 && only_kwargs(kwargs, {"key", "reverse"}) &&
       (keyed || !foldable(args[0]))) ||
      ((name == "min" || name == "max") && args.size() == 1 && keyed && only_kwargs(kwargs, {"key"}))) {
    // The order is decided by Python on the keys (constants); the items themselves may be anything.
    std::vector<ValuePtr> items = unpack_iterable(args[0]);
    if (args[0]->kind == VKind::Iter) args[0]->iter().pos = args[0]->iter().items.size();
    ValuePtr key = kwarg(kwargs, "key");
    py::list keys;
    for (const auto& item : items) {
      ValuePtr k = key && !(key->is_const() && key->obj.is_none()) ? call(key, {item}, {}) : item;
      if (!k->is_constant_like()) unsupported(name + "() by " + k->describe() + " (needs its value)");
      keys.append(k->as_python());
    }
    if (name != "sorted") {
      if (items.empty()) unsupported(name + "() of an empty sequence (ValueError is raised by Python)");
      py::object best = refs.builtins.attr(name.c_str())(loaded_module("builtins").attr("range")(items.size()),
                                                        py::arg("key") = keys.attr("__getitem__"));
      return items[best.cast<size_t>()];
    }
    ValuePtr rev = kwarg(kwargs, "reverse");
    if (rev && !rev->is_const()) unsupported("sorted(reverse=...) that is not a constant");
    py::object order = refs.builtins.attr("sorted")(loaded_module("builtins").attr("range")(items.size()),
                                                   py::arg("key") = keys.attr("__getitem__"),
                                                   py::arg("reverse") = rev ? rev->obj : py::bool_(false));
    std::vector<ValuePtr> out;
    for (auto i : order) out.push_back(items[i.cast<size_t>()]);
    return Value::list(std::move(out));
  }
  if ((name == "getattr" || name == "hasattr") && (args.size() == 2 || (name == "getattr" && args.size() == 3)) &&
      kwargs.empty() && args[1]->is_const() && PyUnicode_Check(args[1]->obj.ptr())) {
    std::string attr = args[1]->obj.cast<std::string>();
    const ValuePtr& obj = args[0];
    if (obj->is_const()) {
      // An immutable constant (None, a number, a str, a dtype, ...): its attributes are its builtin type's.
      int has = PyObject_HasAttrString(obj->obj.ptr(), attr.c_str());
      if (name == "hasattr") return Value::constant(py::bool_(has == 1));
      if (has == 1) return load_attr(obj, attr);
      if (args.size() == 3) return args[2];
      unsupported("getattr of a missing attribute of " + obj->describe() + " (AttributeError is raised by Python)");
    }
    if (obj->kind == VKind::Object && obj->source && !PyModule_Check(obj->obj.ptr())) {
      // An attribute this trace assigned (not replayed on the object yet) is there, with the assigned value.
      if (ValuePtr v = pending_attr(obj, attr)) return name == "hasattr" ? Value::constant(py::bool_(true)) : v;
      // Whether the attribute exists is guarded; its value is read (and guarded) only when it does.
      int has = PyObject_HasAttrString(obj->obj.ptr(), attr.c_str());
      // getattr of a present attribute: the guard on the value read (through obj.attr) also fails when
      // the attribute goes away, so presence needs no guard of its own.
      if (name == "getattr" && has == 1) return load_attr(obj, attr);
      guards.add(guards::has_attr(obj->source, attr, has == 1));
      if (name == "hasattr") return Value::constant(py::bool_(has == 1));
      if (args.size() == 3) return args[2];
      unsupported("getattr of a missing attribute (AttributeError is raised by Python)");
    }
    if (obj->is_tensor() && name == "hasattr") {
      // torch.Tensor's own attributes are on every tensor; anything else only on a tensor of the frame that
      // was given one (presence guarded); a tensor the graph makes has no other attribute.
      if (PyObject_HasAttrString(PyRefs::get().tensor_type.ptr(), attr.c_str()) == 1)
        return Value::constant(py::bool_(true));
      if (!obj->source) return Value::constant(py::bool_(false));
      py::object real = py::reinterpret_steal<py::object>(obj->source->fetch(fv));  // new reference
      if (!real) unsupported("hasattr on a tensor that cannot be fetched again");
      int has = PyObject_HasAttrString(real.ptr(), attr.c_str());
      guards.add(guards::has_attr(obj->source, attr, has == 1));
      return Value::constant(py::bool_(has == 1));
    }
    if (obj->kind == VKind::Instance && getattribute_override(obj)) {
      // Through the class's __getattribute__: the AttributeError it raises is hasattr's / getattr's case,
      // when raising it changed nothing.
      size_t nodes = graph.mark(), stores = attr_stores.size(), muts = mutation_count_;
      try {
        ValuePtr r = load_attr(obj, attr);
        return name == "hasattr" ? Value::constant(py::bool_(true)) : r;
      } catch (const TracedRaise& e) {
        if (!PyErr_GivenExceptionMatches(e.exc.ptr(), PyExc_AttributeError)) throw;
        if (graph.mark() != nodes || attr_stores.size() != stores || mutation_count_ != muts)
          unsupported("getattr through a __getattribute__ that changed state before raising AttributeError");
        if (name == "hasattr") return Value::constant(py::bool_(false));
        if (args.size() == 3) return args[2];
        throw;
      }
    }
    if (obj->kind == VKind::Instance) {
      // Its own attributes are known; a class attribute's presence is guarded on the class.
      bool has = obj->find_key(py::str(attr)) >= 0;
      if (!has) {
        has = PyObject_HasAttrString(obj->instance().cls->obj.ptr(), attr.c_str()) == 1;
        guards.add(guards::has_attr(obj->instance().cls->source, attr, has));
      }
      if (name == "hasattr") return Value::constant(py::bool_(has));
      if (has) return load_attr(obj, attr);
      if (args.size() == 3) return args[2];
      unsupported("getattr of a missing attribute (AttributeError is raised by Python)");
    }
    if (name == "getattr" && args.size() == 2) return load_attr(obj, attr);
    return nullptr;
  }
  if (name == "delattr" && args.size() == 2 && kwargs.empty() && args[0]->kind == VKind::Instance &&
      args[1]->is_const() && PyUnicode_Check(args[1]->obj.ptr())) {
    instance_delattr(args[0], args[1]->obj.cast<std::string>());
    return Value::constant(py::none());
  }
  if (name == "setattr" && args.size() == 3 && kwargs.empty() && args[1]->is_const() &&
      PyUnicode_Check(args[1]->obj.ptr())) {
    store_attr(args[0], args[1]->obj.cast<std::string>(), args[2]);
    return Value::constant(py::none());
  }
  if (name == "isinstance" && args.size() == 2 && kwargs.empty()) {
    PyObject* type = known_type(args[0]);
    // An object from the frame (its type guarded: TYPE_MATCH, or ID_MATCH), when isinstance depends on its
    // type alone: the default __class__, and classes whose metaclass is type or ABCMeta (no Protocol
    // checks reading attributes).
    if (!type && args[0]->kind == VKind::Object && args[0]->source && !args[0]->bound_self() && foldable(args[1]) &&
        type_only_instance_check(args[0]->obj, args[1]->as_python()))
      type = reinterpret_cast<PyObject*>(Py_TYPE(args[0]->obj.ptr()));
    if (type && foldable(args[1])) {
      int r = PyObject_IsSubclass(type, args[1]->as_python().ptr());
      if (r < 0) throw py::error_already_set();
      return Value::constant(py::bool_(r == 1));
    }
    return nullptr;
  }
  if (name == "type" && args.size() == 1 && kwargs.empty()) {
    if (PyObject* type = known_type(args[0])) return Value::object(py::reinterpret_borrow<py::object>(type));
    if (args[0]->is_tensor() && args[0]->tensor().node && args[0]->tensor().node->op != graph::OpKind::Placeholder)
      return Value::object(refs.tensor_type);  // made by a torch op: exactly torch.Tensor
    if (args[0]->kind == VKind::Object && args[0]->source)  // guarded by identity through obj.__class__
      return wrap(reinterpret_cast<PyObject*>(Py_TYPE(args[0]->obj.ptr())),
                  guards::Source::attr(args[0]->source, "__class__"));
    if ((args[0]->kind == VKind::Instance || args[0]->kind == VKind::Record) && args[0]->instance().cls)
      return args[0]->instance().cls;  // made in the trace: its class
    for (const auto& in : inputs)
      if (args[0]->is_tensor() && in.node == args[0]->tensor().node)  // TENSOR_MATCH guards the exact type
        return Value::object(py::reinterpret_borrow<py::object>(reinterpret_cast<PyObject*>(Py_TYPE(in.value.ptr()))));
    return nullptr;
  }
  if (name == "super" && kwargs.empty() && args.size() <= 2) {
    ValuePtr cls, self;
    if (args.size() == 2) {
      cls = args[0];
      self = args[1];
    } else if (args.empty()) {
      // Zero-argument super(): the `__class__` cell and the first argument of the running function.
      int nslots = compat::code_nlocalsplus(code);
      for (int s = 0; s < nslots; ++s) {
        if (py::str(compat::code_localsplus_name(code, s)).cast<std::string>() != "__class__") continue;
        ValuePtr box = cell_of(s);
        cls = box ? box->cell().content : load_local(s);
      }
      if (code->co_argcount > 0) {
        ValuePtr box = cell_of(0);
        self = box ? box->cell().content : load_local(0);
      }
    }
    bool fresh = self && self->kind == VKind::Instance;
    if (!cls || !self || cls->kind != VKind::Object || !PyType_Check(cls->obj.ptr()) ||
        !(fresh || (self->kind == VKind::Object && self->source)))
      unsupported("super() outside a method of an object with a source");
    return Value::super_value(fresh ? py::none() : refs.builtins.attr("super")(cls->obj, self->obj), cls, self);
  }
  if (f.is(refs.functools_partial) && !args.empty()) {
    PartialOf parts;
    parts.fn = args[0];
    parts.args.assign(args.begin() + 1, args.end());
    for (auto& kv : kwargs) {
      parts.kw_names.push_back(py::str(kv.first));
      parts.kw_values.push_back(kv.second);
    }
    parts.made_in_trace = true;  // rebuilt at a graph break by calling functools.partial again (codegen/rebuild.cpp)
    return Value::partial_of(py::reinterpret_borrow<py::object>(f), std::move(parts));
  }
  return nullptr;
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
                            : guards::Source::attr(guards::Source::attr(self->source, "__class__"), "__mro__");
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
    return object_attr(self, name);
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
