// optimizer.cpp — owns torch.optim's `Optimizer._init_group(group, <lists>...)` while tracing: the call is made for
// real on the optimizer (its lazy state initialisation happens at trace time, as torch._dynamo's OptimizerVariable
// does), and the lists it filled are mapped back, element by element, onto values read from the frame with sources
// (params, their grads, the per-parameter state), so that the graph reads them as guarded inputs.
#include "guards/tensor_match.h"
#include "interp/tracer.h"
#include "interp/services.h"

namespace cdynamo::interp {

namespace {

bool ends_with(const std::string& s, const std::string& p) {
  return s.size() >= p.size() && s.compare(s.size() - p.size(), p.size(), p) == 0;
}

// torch.optim.Optimizer, or None when torch.optim cannot be imported (process lifetime, one reference).
py::handle optimizer_class() {
  static PyObject* cls = [] {
    try {
      return py::object(loaded_module("torch.optim").attr("Optimizer")).release().ptr();
    } catch (py::error_already_set&) {
      return py::none().release().ptr();
    }
  }();
  return cls;
}

}  // namespace

ValuePtr Tracer::optimizer_init_group(const ValuePtr& fn, const std::vector<ValuePtr>& args,
                                      const std::vector<std::pair<std::string, ValuePtr>>& kwargs) {
  py::handle f = fn->obj;
  if (!f || !PyFunction_Check(f.ptr()) || args.size() < 2 || !kwargs.empty()) return nullptr;
  // __name__ first (every inlined call asks). Once torch._dynamo has run, torch.optim's _init_group methods are
  // torch._dynamo.disable wrappers (functools.wraps'd: same __name__ and __qualname__); calling one calls the method.
  PyObject* fname = reinterpret_cast<PyFunctionObject*>(f.ptr())->func_name;  // borrowed
  if (!fname || !PyUnicode_Check(fname) || PyUnicode_CompareWithASCIIString(fname, "_init_group") != 0) return nullptr;
  std::string qual = py::str(py::getattr(f, "__qualname__", py::str(""))).cast<std::string>();
  std::string mod = py::str(py::getattr(f, "__module__", py::str(""))).cast<std::string>();
  if (!ends_with(qual, "._init_group") || mod.rfind("torch.optim", 0) != 0) return nullptr;
  const ValuePtr& self = args[0];
  const ValuePtr& group = args[1];
  py::handle opt_cls = optimizer_class();
  if (self->kind != VKind::Object || !self->source || !self->obj || self->made_in_trace() || opt_cls.is_none()) return nullptr;
  int is_opt = PyObject_IsInstance(self->obj.ptr(), opt_cls.ptr());
  if (is_opt < 0) throw py::error_already_set();
  if (!is_opt) return nullptr;
  // The group: a param group read from the frame, unchanged by the trace so far.
  if (group->kind != VKind::Dict || !group->source || !group->frame_container()) return nullptr;
  // What the trace would still write back could be read by the real call before the graph wrote it: attribute
  // stores (a param's .grad), or changes to the group, its params list, the optimizer's state dict or the state of
  // one of the group's params. Then the call is traced as ordinary code instead. (Changes to other groups' state, as
  // SGD's momentum buffers stored after the previous group's update, do not matter to this call.)
  if (!attr_stores.empty()) return nullptr;
  if (!mutated.empty()) {
    std::vector<PyObject*> read{group->frame_container().ptr()};
    PyObject* params_obj = PyDict_GetItemString(group->frame_container().ptr(), "params");  // borrowed
    if (params_obj) read.push_back(params_obj);
    PyObject* state_obj = PyObject_GetAttrString(self->obj.ptr(), "state");  // new
    if (!state_obj) {
      PyErr_Clear();
      return nullptr;
    }
    py::object state_ref = py::reinterpret_steal<py::object>(state_obj);
    read.push_back(state_obj);
    if (params_obj && PyList_Check(params_obj) && PyDict_Check(state_obj))
      for (Py_ssize_t i = 0; i < PyList_GET_SIZE(params_obj); ++i) {
        PyObject* st = PyDict_GetItemWithError(state_obj, PyList_GET_ITEM(params_obj, i));  // borrowed
        if (!st && PyErr_Occurred()) throw py::error_already_set();
        if (st) read.push_back(st);
      }
    for (const auto& m : mutated)
      for (PyObject* r : read)
        if (m->frame_container() && m->frame_container().ptr() == r) return nullptr;
  }
  // The other arguments: empty lists made in the trace (filled by the call) or constants.
  py::list real_args;
  real_args.append(self->obj);
  real_args.append(group->frame_container());
  std::vector<std::pair<ValuePtr, py::list>> lists;
  for (size_t i = 2; i < args.size(); ++i) {
    const ValuePtr& a = args[i];
    if (a->kind == VKind::List && !a->source && a->items.empty()) {
      py::list real;
      lists.emplace_back(a, real);
      real_args.append(real);
    } else if (a->kind == VKind::Const) {
      real_args.append(a->obj);
    } else {
      return nullptr;
    }
  }
  int pos = group->find_key(py::str("params"));
  if (pos < 0) return nullptr;
  ValuePtr params = group->items[static_cast<size_t>(pos)];
  if (params->kind != VKind::List || !params->source) return nullptr;
  for (const auto& p : params->items)
    if (!p->is_tensor() || !p->source) return nullptr;

  realize(self);  // which optimizer it is matters to the call
  py::object result;
  try {
    result = f(*py::tuple(real_args));
  } catch (py::error_already_set& e) {
    // (Python raises the same error when it runs the call; the state it initialised stays initialised.)
    unsupported(qual + " raised while tracing: " + std::string(e.what()));
  }
  // (Optimizers return flags: has_complex, or (has_sparse_grad, has_complex).)
  ValuePtr ret;
  if (is_constant_object(result)) {
    ret = Value::constant(result);
  } else if (PyTuple_CheckExact(result.ptr())) {
    std::vector<ValuePtr> flags;
    for (auto item : py::reinterpret_borrow<py::tuple>(result)) {
      if (!is_constant_object(item) || guards::is_tensor(item.ptr())) unsupported(qual + " returned a tuple of non-constants");
      flags.push_back(Value::constant(py::reinterpret_borrow<py::object>(item)));
    }
    ret = Value::tuple(std::move(flags));
  } else {
    unsupported(qual + " returned a " + std::string(Py_TYPE(result.ptr())->tp_name));
  }

  // Everything the call read or filled the lists with, wrapped from its source (guards included): each param's
  // grad (None too: which params take part is decided by it) and the state of each param that has some.
  guards::SourcePtr state_src = guards::Source::attr(self->source, "state");
  py::object state = self->obj.attr("state");
  for (const auto& p : params->items) {
    py::object real_p;
    for (const auto& in : inputs)
      if (in.node == p->tensor().node) real_p = in.value;
    if (!real_p) unsupported(qual + ": a parameter is not a graph input");
    wrap(real_p.attr("grad"), guards::Source::attr(p->source, "grad"));
    int has = PySequence_Contains(state.ptr(), real_p.ptr());
    if (has < 0) throw py::error_already_set();
    if (!has) continue;
    py::object st = state[real_p];
    ValuePtr w = wrap(st, guards::Source::dict_item_key(state_src, real_p.ptr()));
    if (w->kind != VKind::Dict) unsupported(qual + ": the state of a parameter is not a dict of str keys");
  }
  // The lists, element by element: a tensor read from the frame (by identity) or a constant.
  for (auto& [value, real] : lists) {
    std::vector<ValuePtr> items;
    for (auto item : real) {
      if (guards::is_tensor(item.ptr())) {
        ValuePtr found;
        for (const auto& in : inputs)
          if (in.value.ptr() == item.ptr()) found = Value::tensor(in.node, in.node->example_value, item.attr("device"), in.source);
        if (!found) unsupported(qual + " put a tensor into a list that is not a param, grad or state of the optimizer");
        items.push_back(found);
      } else if (is_constant_object(item)) {
        items.push_back(Value::constant(py::reinterpret_borrow<py::object>(item)));
      } else {
        unsupported(qual + " put a " + std::string(Py_TYPE(item.ptr())->tp_name) + " into a list");
      }
    }
    will_mutate(value);
    value->items = std::move(items);
  }
  // As torch._dynamo does while tracing a param group (note [torch.compile x capturable] in torch.optim): the
  // step takes its capturable path, whose step arithmetic stays on tensors inside the graph. The real group is
  // left as it is (the key is guarded as read); only the traced view reads True.
  int cap = group->find_key(py::str("capturable"));
  if (cap >= 0) group->items[static_cast<size_t>(cap)] = Value::constant(py::bool_(true));
  return ret;
}

namespace {

// torch._inductor.inductor_prims.fma (registers prims.fma on import; process lifetime, one reference), or None.
py::handle fma_prim() {
  static PyObject* fma = [] {
    try {
      return py::object(loaded_module("torch._inductor.inductor_prims").attr("fma")).release().ptr();
    } catch (py::error_already_set&) {
      return py::none().release().ptr();
    }
  }();
  return fma;
}

bool decompositions_enabled() {
  try {
    return services().config.attr("enable_dynamo_decompositions").cast<bool>();
  } catch (py::error_already_set&) {
    return false;
  } catch (py::cast_error&) {
    return false;
  }
}

}  // namespace

ValuePtr Tracer::optimizer_op_decomposition(const ValuePtr& self, const std::string& name, const std::vector<ValuePtr>& args,
                                            const std::vector<std::pair<std::string, ValuePtr>>& kwargs) {
  // torch._dynamo's small decompositions of the in-place ops torch.optim calls with a scalar that may be a tensor
  // (config.enable_dynamo_decompositions): the same nodes, so the same graphs and op counts, and no item() of a
  // tensor scalar. addcmul_/addcdiv_ with `value=`: copy_(fma(mul|div(t1, t2), value, self)); add_ with a tensor
  // `alpha=`: copy_(fma(other, alpha, self)).
  bool addc = (name == "addcmul_" || name == "addcdiv_") && args.size() == 2 && kwargs.size() == 1 && kwargs[0].first == "value";
  bool add = name == "add_" && args.size() == 1 && kwargs.size() == 1 && kwargs[0].first == "alpha" && kwargs[0].second->is_tensor();
  if (!addc && !add) return nullptr;
  if (addc && kwargs[0].second->is_const() && kwargs[0].second->obj.is_none()) return nullptr;
  if (!decompositions_enabled()) return nullptr;
  py::handle fma = fma_prim();
  if (fma.is_none()) return nullptr;
  ValuePtr first = args[0];
  if (addc) {
    py::object op = PyRefs::get().torch.attr(name == "addcmul_" ? "mul" : "div");
    first = call_torch(op, {args[0], args[1]}, {}, false);
  }
  ValuePtr fused = call_torch(fma, {first, kwargs[0].second, self}, {}, false);
  return call_tensor_method(self, "copy_", {fused}, {});
}

py::object Tracer::frame_tensor_key(const ValuePtr& container, const ValuePtr& key) {
  if (container->kind != VKind::Object || !container->source || !container->obj || !PyDict_Check(container->obj.ptr()))
    return py::object();
  PyMappingMethods* own = Py_TYPE(container->obj.ptr())->tp_as_mapping;  // a subclass may override __getitem__
  if (!own || own->mp_subscript != PyDict_Type.tp_as_mapping->mp_subscript) return py::object();
  if (!key->is_tensor() || !key->source || !key->tensor().node || key->tensor().node->op != graph::OpKind::Placeholder)
    return py::object();
  for (const auto& in : inputs)
    if (in.node == key->tensor().node) return in.value;
  return py::object();
}

namespace {
// Keys guarded by position only this far into a dict: a DictKey / DictValue fetch walks the dict's entries up to its
// position on every check; past it (an optimizer's state keyed by hundreds of parameters, which never change) the key
// is pinned by identity and its item read by a hashed lookup, as before.
constexpr int kMaxKeyPosition = 16;

// The position of `key` (borrowed, compared by identity) among the keys of dict `d` (borrowed) in its storage order,
// or -1; *value (if given) gets the value there (borrowed from the dict).
int tensor_key_position(PyObject* d, PyObject* key, PyObject** value = nullptr) {
  Py_ssize_t pos = 0;
  PyObject *k, *v;  // borrowed
  for (int i = 0; PyDict_Next(d, &pos, &k, &v); ++i) {
    if (k != key) continue;
    if (value) *value = v;
    return i;
  }
  return -1;
}
}  // namespace

// The key `real_key` (at `at` in the container's dict) is the frame's tensor `key`: guarded as the same object as the
// dict's key at that position (torch._dynamo's ConstDictKeySource), not pinned to this tensor's identity, so a new
// input held under the same position passes.
void Tracer::guard_tensor_key(const ValuePtr& container, const ValuePtr& key, int at) {
  guards.add(guards::same_object(key->source, guards::Source::dict_key(container->source, at)));
}

ValuePtr Tracer::tensor_key_in(const ValuePtr& container, const ValuePtr& key) {
  if (container->kind != VKind::Object || !container->source || !container->obj ||
      !PyDict_Check(container->obj.ptr()) || !key->is_tensor() || !key->tensor().node)
    return nullptr;
  PySequenceMethods* own = Py_TYPE(container->obj.ptr())->tp_as_sequence;  // a subclass may override __contains__
  if (!own || own->sq_contains != PyDict_Type.tp_as_sequence->sq_contains) return nullptr;
  py::object real_key = frame_tensor_key(container, key);
  if (!real_key) {
    // A tensor the graph made (not an input, nor an in-place result of one: those share its example) is in no dict
    // of the frame: the trace changes such a dict only as a Dict value.
    for (const auto& in : inputs)
      if (in.node->example_value.is(key->tensor().example)) return nullptr;
    return Value::constant(py::bool_(false));
  }
  int has = PyDict_Contains(container->obj.ptr(), real_key.ptr());
  if (has < 0) throw py::error_already_set();
  int at = has == 1 ? tensor_key_position(container->obj.ptr(), real_key.ptr()) : -1;
  if (at >= 0 && at < kMaxKeyPosition) {
    guard_tensor_key(container, key, at);
    return Value::constant(py::bool_(true));
  }
  // Absent (or present only by equality, or far into the dict): which tensor it is and whether it is a key, as now.
  guards.add(guards::id_match(key->source, real_key.ptr()));
  guards.add(guards::dict_contains(container->source, real_key.ptr(), has == 1));
  return Value::constant(py::bool_(has == 1));
}

ValuePtr Tracer::tensor_keyed_item(const ValuePtr& container, const ValuePtr& key) {
  // d[t] on a dict (or dict subclass: an optimizer's `state` defaultdict) read from the frame, keyed by a tensor the
  // frame holds: the item read through a C-level lookup (no __missing__) and wrapped from its source. The key is
  // found by identity at a position of the dict's storage: guarded as the same object as the key there, the item read
  // as the value there. A missing key (a defaultdict would insert one) is left to Python.
  py::object real_key = frame_tensor_key(container, key);
  if (!real_key) return nullptr;
  PyObject* found = nullptr;  // borrowed from the dict
  int at = tensor_key_position(container->obj.ptr(), real_key.ptr(), &found);
  if (at < 0) unsupported("a tensor key missing from " + container->describe());
  py::object item = py::reinterpret_borrow<py::object>(found);  // owned while wrapped
  if (at >= kMaxKeyPosition) {  // far into a big dict (an optimizer's state): pinned, read by a hashed lookup
    guards.add(guards::id_match(key->source, real_key.ptr()));
    return wrap(item, guards::Source::dict_item_key(container->source, real_key.ptr()));
  }
  guard_tensor_key(container, key, at);
  return wrap(item, guards::Source::dict_value(container->source, at));
}

}  // namespace cdynamo::interp
