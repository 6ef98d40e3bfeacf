// records.cpp — owns Record values: transformers' ModelOutput dataclasses (dict subclasses) made in the trace,
// modelled by their fields (construction, attribute / key / index reads, to_tuple, keys, values, items, get)
// and made for real, with the same field values, only where they reach Python.
#include "compat/compat.h"
#include "interp/tracer.h"

namespace cdynamo::interp {

namespace {

// transformers.utils.generic.ModelOutput (or its old home) in the MRO of `cls`, or nullptr (borrowed).
PyObject* model_output_base(PyTypeObject* type) {
  PyObject* mro = type->tp_mro;  // borrowed
  if (!mro) return nullptr;
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(mro); ++i) {
    auto* t = reinterpret_cast<PyTypeObject*>(PyTuple_GET_ITEM(mro, i));
    if (std::string(t->tp_name) != "ModelOutput") continue;
    PyObject* mod = compat::type_dict_item(t, "__module__");  // borrowed
    if (!mod || !PyUnicode_Check(mod)) continue;
    std::string m = PyUnicode_AsUTF8(mod);
    if (m == "transformers.utils.generic" || m == "transformers.file_utils") return reinterpret_cast<PyObject*>(t);
  }
  return nullptr;
}

// What the trace models, ModelOutput's own: these must not be overridden below it.
const char* const kModelOutputMethods[] = {"__post_init__", "__setattr__", "__setitem__", "__getitem__", "to_tuple",
                                           "keys", "values", "items", "get", "__contains__", "__iter__", "__len__",
                                           "__delitem__", "setdefault", "pop", "update", "__getattribute__"};

py::str field_key(const std::string& s) { return py::str(s); }

// ModelOutput's backward-compatible key names (transformers >= 5.2x's _replace_old_cache_name): `past_key_values`
// and `cache_params` read the `cache` field where the class has no field of that name (older transformers keep
// `past_key_values` as a field of its own).
bool is_old_cache_name(const std::string& s) { return s == "past_key_values" || s == "cache_params"; }

// A function whose code dataclasses generated (compiled from a string).
bool made_by_dataclass(PyObject* fn) {
  PyObject* code = PyFunction_GET_CODE(fn);  // borrowed
  return py::str(reinterpret_cast<PyCodeObject*>(code)->co_filename).cast<std::string>() == "<string>";
}

// Whether a record class's __init__ is ModelOutput's metaclass wrapper (transformers >= 5.2x), which renames
// past_key_values= / cache_params= to cache= whatever the fields are; older ones have the dataclass __init__.
bool init_renames_cache_names(py::handle cls) {
  PyObject* init = _PyType_Lookup(reinterpret_cast<PyTypeObject*>(cls.ptr()), py::str("__init__").ptr());  // borrowed
  return init && PyFunction_Check(init) && !made_by_dataclass(init);
}

int record_key_index(const ValuePtr& rec, py::handle k) {
  int at = rec->find_key(k);
  if (at < 0 && PyUnicode_Check(k.ptr()) && is_old_cache_name(PyUnicode_AsUTF8(k.ptr()))) at = rec->find_key(py::str("cache"));
  return at;
}

}  // namespace

bool is_record_class(py::handle cls) {
  if (!PyType_Check(cls.ptr())) return false;
  auto* type = reinterpret_cast<PyTypeObject*>(cls.ptr());
  if (!PyType_IsSubtype(type, &PyDict_Type)) return false;
  PyObject* base = model_output_base(type);
  if (!base || base == cls.ptr()) return false;
  auto* btype = reinterpret_cast<PyTypeObject*>(base);
  for (const char* name : kModelOutputMethods) {
    py::str key(name);
    if (_PyType_Lookup(type, key.ptr()) != _PyType_Lookup(btype, key.ptr())) return false;
  }
  // The dataclass-generated __init__ (each field assigned through __setattr__, then __post_init__), as
  // is or in ModelOutput's metaclass wrapper (which renames past_key_values / cache_params to cache).
  PyObject* init = _PyType_Lookup(type, py::str("__init__").ptr());  // borrowed
  if (!init || !PyFunction_Check(init)) return false;
  if (!made_by_dataclass(init)) {
    py::object wrapped = py::getattr(py::handle(init), "__wrapped__", py::none());
    PyObject* code = PyFunction_GET_CODE(init);  // borrowed
    std::string file = py::str(reinterpret_cast<PyCodeObject*>(code)->co_filename).cast<std::string>();
    const std::string tail = "transformers/utils/generic.py";
    bool wrapper = file.size() >= tail.size() && file.compare(file.size() - tail.size(), tail.size(), tail) == 0;
    if (!wrapper || !PyFunction_Check(wrapped.ptr()) || !made_by_dataclass(wrapped.ptr())) return false;
  }
  return PyObject_HasAttrString(cls.ptr(), "__dataclass_fields__") == 1;
}

ValuePtr Tracer::make_record(const ValuePtr& cls, std::vector<ValuePtr> args,
                             std::vector<std::pair<std::string, ValuePtr>> kwargs) {
  const std::string what = describe_class(cls);
  py::object dataclasses = loaded_module("dataclasses");
  py::tuple fields = dataclasses.attr("fields")(cls->obj);
  py::object missing = dataclasses.attr("MISSING");
  if (fields.empty()) unsupported(what + " has no fields");
  ValuePtr rec = Value::new_instance(VKind::Record, cls);
  std::vector<char> set(fields.size(), 0);
  for (size_t i = 0; i < fields.size(); ++i) {
    py::handle f = fields[i];
    if (!f.attr("init").cast<bool>() || !py::object(f.attr("default_factory")).is(missing))
      unsupported(what + " has a field with init=False or a default_factory");
    if (i > 0 && !f.attr("default").is_none()) unsupported(what + " has a field whose default is not None");
    rec->keys.push_back(py::str(f.attr("name")));
    rec->items.push_back(nullptr);
  }
  if (args.size() > fields.size()) unsupported(what + "() with too many positional arguments");
  const bool renames = init_renames_cache_names(cls->obj);
  for (size_t i = 0; i < args.size(); ++i) {
    rec->items[i] = args[i];
    set[i] = 1;
  }
  for (auto& kv : kwargs) {
    if (renames && is_old_cache_name(kv.first)) {  // the wrapper's renaming
      for (auto& other : kwargs)
        if (other.first == "cache") unsupported(what + "() with both cache and " + kv.first);
      kv.first = "cache";
    }
    int at = rec->find_key(field_key(kv.first));
    if (at < 0 || set[static_cast<size_t>(at)]) unsupported(what + "() with an unexpected argument '" + kv.first + "'");
    rec->items[static_cast<size_t>(at)] = kv.second;
    set[static_cast<size_t>(at)] = 1;
  }
  for (size_t i = 0; i < fields.size(); ++i) {
    if (set[i]) continue;
    py::object d = fields[i].attr("default");
    if (d.is(missing)) unsupported(what + "() missing the argument '" + py::str(rec->keys[i]).cast<std::string>() + "'");
    rec->items[i] = Value::constant(d);
  }
  for (const auto& v : rec->items)
    if (v->kind == VKind::Iter || v->kind == VKind::Null || v->kind == VKind::Cell || v->made_in_trace())
      unsupported(what + "() with a field holding " + v->describe());
  // __post_init__ treats a lone non-tensor first field as an iterator of (key, value) pairs: not modelled.
  bool others_none = true;
  for (size_t i = 1; i < rec->items.size(); ++i) others_none = others_none && record_none(rec->items[i]);
  if (others_none && !rec->items[0]->is_tensor() && !record_none(rec->items[0]))
    unsupported(what + "() whose only field is not a tensor");
  return rec;
}

bool Tracer::record_none(const ValuePtr& v) const { return v->is_const() && v->obj.is_none(); }

std::vector<size_t> Tracer::record_present(const ValuePtr& rec) const {
  std::vector<size_t> out;
  for (size_t i = 0; i < rec->items.size(); ++i)
    if (!record_none(rec->items[i])) out.push_back(i);
  return out;
}

ValuePtr Tracer::record_attr(const ValuePtr& rec, const std::string& name) {
  int at = rec->find_key(field_key(name));
  if (at >= 0) return rec->items[static_cast<size_t>(at)];
  auto* type = reinterpret_cast<PyTypeObject*>(rec->instance().cls->obj.ptr());
  PyObject* descr = _PyType_Lookup(type, py::str(name).ptr());  // borrowed, may be NULL
  SourcePtr csrc = guards::Source::attr(rec->instance().cls->source, name);
  if (descr && PyObject_TypeCheck(descr, &PyProperty_Type)) {  // ModelOutput.past_key_values -> self.cache
    return inline_call(property_getter(descr, csrc, name), {rec}, {});
  }
  static const char* const methods[] = {"to_tuple", "keys", "values", "items", "get", "__getitem__",
                                        "__contains__", "__len__"};
  for (const char* m : methods)
    if (name == m) return Value::method(rec, name);
  unsupported(describe_class(rec->instance().cls) + " attribute '" + name + "' is not modelled");
}

ValuePtr Tracer::record_item(const ValuePtr& rec, const ValuePtr& key) {
  if (!key->is_const()) unsupported("a " + describe_class(rec->instance().cls) + " subscript with " + key->describe());
  py::handle k = key->obj;
  if (PyUnicode_Check(k.ptr())) {
    int at = record_key_index(rec, k);
    if (at < 0 || record_none(rec->items[static_cast<size_t>(at)]))
      unsupported("KeyError: " + describe_class(rec->instance().cls) + " has no key " + py::repr(k).cast<std::string>());
    return rec->items[static_cast<size_t>(at)];
  }
  std::vector<ValuePtr> present;
  for (size_t i : record_present(rec)) present.push_back(rec->items[i]);
  if (PyLong_Check(k.ptr()) && !PyBool_Check(k.ptr())) {
    long n = static_cast<long>(present.size());
    long idx = PyLong_AsLong(k.ptr());
    if (idx < 0) idx += n;
    if (idx < 0 || idx >= n) unsupported("IndexError: " + describe_class(rec->instance().cls) + " index out of range");
    return present[static_cast<size_t>(idx)];
  }
  if (PySlice_Check(k.ptr())) {
    Py_ssize_t start, stop, step;
    if (PySlice_Unpack(k.ptr(), &start, &stop, &step) < 0) throw py::error_already_set();
    Py_ssize_t len = PySlice_AdjustIndices(static_cast<Py_ssize_t>(present.size()), &start, &stop, step);
    std::vector<ValuePtr> items;
    for (Py_ssize_t j = 0; j < len; ++j) items.push_back(present[static_cast<size_t>(start + j * step)]);
    return Value::tuple(std::move(items));
  }
  unsupported("a " + describe_class(rec->instance().cls) + " subscript with " + key->describe());
}

ValuePtr Tracer::call_record_method(const ValuePtr& rec, const std::string& name, std::vector<ValuePtr> args,
                                    std::vector<std::pair<std::string, ValuePtr>> kwargs) {
  const std::vector<size_t> present = record_present(rec);
  if (!kwargs.empty()) unsupported(describe_class(rec->instance().cls) + "." + name + "() with keyword arguments");
  if (name == "__getitem__" && args.size() == 1) return record_item(rec, args[0]);
  if (!args.empty() && name != "get" && name != "__contains__")
    unsupported(describe_class(rec->instance().cls) + "." + name + "() with arguments");
  std::vector<ValuePtr> out;
  if (name == "to_tuple" || name == "values") {
    for (size_t i : present) out.push_back(rec->items[i]);
    return Value::tuple(std::move(out));
  }
  if (name == "keys") {
    for (size_t i : present) out.push_back(Value::constant(rec->keys[i]));
    return Value::tuple(std::move(out));
  }
  if (name == "items") {
    for (size_t i : present) out.push_back(Value::tuple({Value::constant(rec->keys[i]), rec->items[i]}));
    return Value::tuple(std::move(out));
  }
  if (name == "__len__") return Value::constant(py::int_(present.size()));
  if ((name == "get" && (args.size() == 1 || args.size() == 2)) || (name == "__contains__" && args.size() == 1)) {
    if (!args[0]->is_const()) unsupported(describe_class(rec->instance().cls) + "." + name + "() with " + args[0]->describe());
    int at = PyUnicode_Check(args[0]->obj.ptr()) ? record_key_index(rec, args[0]->obj) : -1;
    bool has = at >= 0 && !record_none(rec->items[static_cast<size_t>(at)]);
    if (name == "__contains__") return Value::constant(py::bool_(has));
    if (has) return rec->items[static_cast<size_t>(at)];
    return args.size() == 2 ? args[1] : Value::constant(py::none());
  }
  unsupported(describe_class(rec->instance().cls) + "." + name + "() is not modelled");
}

}  // namespace cdynamo::interp
