// library_values.cpp — owns library constructs traced by what they do: torch.Size(...), legacy tensor constructors, Tensor.new_tensor, torch.distributed.is_initialized(), max/min of tensors, identity comparison of modules, nn.ParameterList items.
#include "interp/torch_rules.h"
#include "interp/tracer.h"

namespace cdynamo::interp {

namespace {

// The items of max()/min()'s arguments: the arguments, or the items of one list / tuple argument.
std::vector<ValuePtr> min_max_items(const std::vector<ValuePtr>& args) {
  if (args.size() == 1 && (args[0]->kind == VKind::List || args[0]->kind == VKind::Tuple)) return args[0]->items;
  return args;
}

// nn.ParameterList `v` of the frame whose class keeps torch.nn's own `method` (a subclass may index otherwise).
bool is_parameter_list(const ValuePtr& v, const char* method) {
  if (v->kind != VKind::Object || !v->source || v->bound_self()) return false;
  py::object cls = loaded_module("torch.nn").attr("ParameterList");
  if (!py::isinstance(v->obj, cls)) return false;
  return py::type::handle_of(v->obj).attr(method).is(cls.attr(method));
}

bool is_plain_number(py::handle o) {
  return PyLong_CheckExact(o.ptr()) || PyFloat_CheckExact(o.ptr());
}

}  // namespace

struct Tracer::LibraryValues {
  // A ParameterList's length (its `_size`, what __len__ returns), guarded equal.
  static long parameter_list_size(Tracer& t, const ValuePtr& v) {
    py::object size = py::getattr(v->obj, "_size", py::none());
    if (!PyLong_CheckExact(size.ptr())) t.unsupported("an nn.ParameterList whose _size is not an int");
    t.guards.add(guards::equals_match(guards::Source::attr(v->source, "_size"), size.ptr()));
    return size.cast<long>();
  }
};

ValuePtr Tracer::torch_size_call(Tracer& t, py::handle f, std::vector<ValuePtr>& args, Kwargs& kwargs) {
  if (!kwargs.empty() || args.size() > 1) return nullptr;
  std::vector<ValuePtr> items;
  if (!args.empty()) {
    items = t.unpack_iterable(args[0]);
    if (args[0]->kind == VKind::Iter) args[0]->iter().pos = args[0]->iter().items.size();
  }
  bool constant = true;
  py::object sym_int = loaded_module("torch").attr("SymInt");
  for (const auto& i : items) {
    if (i->is_sym() && py::isinstance(i->sym().example, sym_int)) {
      constant = false;
      continue;
    }
    if (!i->is_const() || !PyLong_Check(i->obj.ptr()))
      t.unsupported("torch.Size(...) holding " + i->describe() + " (a size is an int)");
  }
  if (constant) return t.fold_call(f, "torch.Size", {Value::tuple(std::move(items))}, {});
  return Value::tuple(std::move(items), py::reinterpret_borrow<py::object>(f));  // rebuilt as torch.Size((...))
}

ValuePtr Tracer::legacy_tensor_call(Tracer& t, py::handle f, std::vector<ValuePtr>& args, Kwargs& kwargs) {
  std::string what = "torch." + py::str(f.attr("__name__")).cast<std::string>() + "(...)";
  if (!kwargs.empty()) t.unsupported(what + " with keyword arguments");
  py::object torch = loaded_module("torch");
  // The CPU legacy classes make CPU tensors of their dtype whatever the default device and dtype are.
  Kwargs kw{{"dtype", Value::constant(f.attr("dtype"))}, {"device", Value::constant(torch.attr("device")("cpu"))}};
  bool sizes = true;
  for (const auto& a : args) sizes = sizes && a->is_const() && PyLong_CheckExact(a->obj.ptr());
  bool one_size = args.size() == 1 && args[0]->is_const() && py::isinstance(args[0]->obj, torch.attr("Size"));
  if (sizes || one_size) return t.call_torch(torch.attr("empty"), args, std::move(kw), true);  // uninitialised
  if (args.size() == 1 && (args[0]->kind == VKind::List || args[0]->kind == VKind::Tuple) &&
      args[0]->is_constant_like())
    return t.call_torch(torch.attr("tensor"), args, std::move(kw), true);
  t.unsupported(what + " of " + (args.empty() ? std::string("nothing") : args[0]->describe()) +
                " (only constant data or int sizes are traced)");
}

ValuePtr Tracer::dist_initialized_call(Tracer& t, py::handle, std::vector<ValuePtr>& args, Kwargs& kwargs) {
  if (!args.empty() || !kwargs.empty()) return nullptr;
  // is_initialized() is `GroupMember.WORLD is not None`, which reads distributed_c10d._world._default_pg: that
  // object is guarded by identity (None stays None), so init_process_group() or destroy_process_group() recompiles.
  py::object c10d = loaded_module("torch.distributed.distributed_c10d");
  py::object world = py::getattr(c10d, "_world", py::none());
  if (world.is_none() || !py::hasattr(world, "_default_pg"))
    t.unsupported("torch.distributed.is_initialized() without distributed_c10d._world._default_pg");
  py::object pg = world.attr("_default_pg");
  SourcePtr src = guards::Source::attr(guards::Source::module_global(PyModule_GetDict(c10d.ptr()), "_world"),
                                       "_default_pg");
  t.guards.add(guards::id_match(src, pg.ptr()));
  return Value::constant(py::bool_(!pg.is_none()));
}

ValuePtr Tracer::min_max_of_tensors(Tracer& t, bool is_max, const std::vector<ValuePtr>& args) {
  std::vector<ValuePtr> items = min_max_items(args);
  bool any = false;
  for (const auto& i : items) any = any || i->is_tensor();
  if (!any) return nullptr;
  std::string what = is_max ? "max()" : "min()";
  const TensorOf& first = items[0]->is_tensor() ? items[0]->tensor() : TensorOf{};
  for (const auto& i : items) {
    if (!i->is_tensor()) t.unsupported(what + " of a tensor and " + i->describe() + " (traced only among tensors)");
    py::object ex = i->tensor().example;
    py::object numel = ex.attr("numel")();
    if (!PyLong_CheckExact(numel.ptr())) t.unsupported(what + " of tensors of symbolic size");
    if (numel.cast<long>() != 1)
      t.unsupported(what + " of tensors of " + std::to_string(numel.cast<long>()) +
                    " elements (Python raises: the truth value of such a tensor is ambiguous)");
    if (!ex.attr("shape").equal(first.example.attr("shape")) || !ex.attr("dtype").is(first.example.attr("dtype")) ||
        !i->tensor().device.equal(first.device))
      t.unsupported(what + " of tensors of different shapes, dtypes or devices");
  }
  // Python keeps the first item and replaces it by each later one that compares greater (max) / less (min): the
  // value, NaNs and gradients follow that one item (torch.maximum would propagate NaNs and split ties' gradients).
  py::object cmp = PyRefs::get().operator_mod.attr(is_max ? "gt" : "lt");
  py::object where = loaded_module("torch").attr("where");
  ValuePtr acc = items[0];
  for (size_t k = 1; k < items.size(); ++k) {
    ValuePtr cond = t.apply_operator(cmp, {items[k], acc});
    acc = t.call_torch(where, {cond, items[k], acc}, {}, false);
  }
  return acc;
}

ValuePtr Tracer::new_tensor_call(Tracer& t, const ValuePtr& self, const std::vector<ValuePtr>& args, const Kwargs& kwargs) {
  if (!self->is_tensor() || args.size() != 1) t.unsupported("Tensor.new_tensor() with other than one data argument");
  if (!args[0]->is_constant_like() || (args[0]->is_const() && !is_plain_number(args[0]->obj) &&
                                       !PyBool_Check(args[0]->obj.ptr())))
    t.unsupported("Tensor.new_tensor() of " + args[0]->describe() + " (only constant numbers and lists are traced)");
  Kwargs kw{{"dtype", Value::constant(self->tensor().example.attr("dtype"))},
            {"device", Value::constant(self->tensor().device)}};
  for (const auto& kv : kwargs) {
    if ((kv.first != "dtype" && kv.first != "device" && kv.first != "requires_grad") || !kv.second->is_const())
      t.unsupported("Tensor.new_tensor() with " + kv.first + "=" + kv.second->describe());
    if (!kv.second->obj.is_none()) set_kwarg(kw, kv.first, kv.second);  // None: self's dtype / device
  }
  return t.call_torch(loaded_module("torch").attr("tensor"), args, std::move(kw), true);
}

ValuePtr Tracer::identity_compare(Tracer& t, const std::string& op, const ValuePtr& a, const ValuePtr& b) {
  if (op != "eq" && op != "ne") return nullptr;
  auto by_identity = [](const ValuePtr& v) {
    // (A module made in the trace stands for the one object each run makes there: its identity is its real object's.)
    if (v->kind != VKind::Object || v->bound_self() || v->is_modelled() || (v->made_in_trace() && !v->made_module()))
      return false;
    if (PyType_Check(v->obj.ptr())) return false;  // classes: their metaclass compares
    return Py_TYPE(v->obj.ptr())->tp_richcompare == PyBaseObject_Type.tp_richcompare;
  };
  if (!by_identity(a) || !by_identity(b)) return nullptr;
  // object.__eq__ / __ne__ on both sides: Python answers `a is b`. Objects of the frame are pinned by identity; a
  // module made in the trace is a new object on every run, the same one only to itself.
  for (const ValuePtr* v : {&a, &b}) {
    t.realize(*v);
    if ((*v)->source) t.guards.add(guards::id_match((*v)->source, (*v)->obj.ptr()));
  }
  bool same = a->obj.is(b->obj);
  return Value::constant(py::bool_(op == "eq" ? same : !same));
}

ValuePtr Tracer::parameter_list_item(Tracer& t, const ValuePtr& v, const ValuePtr& key) {
  if (!is_parameter_list(v, "__getitem__")) return nullptr;
  if (!key->is_const() || !PyLong_CheckExact(key->obj.ptr()))
    t.unsupported("nn.ParameterList indexed by " + key->describe() + " (only an int index is traced)");
  long n = LibraryValues::parameter_list_size(t, v);
  long i = key->obj.cast<long>();
  if (i < 0) i += n;
  if (i < 0 || i >= n) t.unsupported("nn.ParameterList index out of range (IndexError is raised by Python)");
  return t.load_attr(v, std::to_string(i));  // ParameterList.__getitem__: getattr(self, str(idx))
}

ValuePtr Tracer::parameter_list_len(Tracer& t, const ValuePtr& v) {
  if (!is_parameter_list(v, "__len__")) return nullptr;
  return Value::constant(py::int_(LibraryValues::parameter_list_size(t, v)));
}

std::optional<std::vector<ValuePtr>> Tracer::parameter_list_items(Tracer& t, const ValuePtr& v) {
  if (!is_parameter_list(v, "__iter__") || !is_parameter_list(v, "__getitem__") || !is_parameter_list(v, "__len__"))
    return std::nullopt;
  long n = LibraryValues::parameter_list_size(t, v);
  std::vector<ValuePtr> out;
  for (long i = 0; i < n; ++i) out.push_back(t.load_attr(v, std::to_string(i)));
  return out;
}

}  // namespace cdynamo::interp
