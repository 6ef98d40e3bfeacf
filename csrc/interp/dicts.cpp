// dicts.cpp — owns dicts made in the trace: BUILD_MAP / BUILD_CONST_KEY_MAP / DICT_UPDATE / DICT_MERGE,
// subscripts, `in`, item assignment and deletion, iteration, dict(), and the dict methods models use.
#include "bytecode/bytecode.h"
#include "guards/tensor_match.h"
#include "interp/tracer.h"

namespace cdynamo::interp {

namespace {

using bytecode::Instruction;

// A plain tuple of constants (no namedtuple, no list inside): a constant key, as `(device, dtype)` groupings use.
bool constant_tuple(const ValuePtr& k) {
  if (k->kind != VKind::Tuple || k->tuple_class()) return false;
  for (const auto& i : k->items)
    if (!i->is_const() && !constant_tuple(i)) return false;
  return true;
}

void set_item(const ValuePtr& d, py::object key, ValuePtr v) {
  int at = d->find_key(key);
  if (at >= 0) {
    d->items[static_cast<size_t>(at)] = std::move(v);
  } else {
    d->keys.push_back(std::move(key));
    d->items.push_back(std::move(v));
  }
}

}  // namespace

struct Tracer::DictOps {
  static py::object key_of(Tracer& t, const ValuePtr& k) {
    if (constant_tuple(k)) {
      py::object key = k->as_python();
      if (PyObject_Hash(key.ptr()) == -1) throw py::error_already_set();
      return key;
    }
    // A class hashed by identity (its metaclass keeps type's hash: type, ABCMeta) is a key too ({list: f}); the
    // instruction that looks it up pins its identity.
    if (k->kind == VKind::Object && PyType_Check(k->obj.ptr()) && Py_TYPE(k->obj.ptr())->tp_hash == PyType_Type.tp_hash)
      return k->obj;
    // A tensor hashes by identity, as torch._dynamo keys it: its example stands for it in `keys` (one tensor has one
    // example; an in-place op gives back its receiver's).
    if (k->is_tensor() && k->tensor().example && guards::is_tensor(k->tensor().example.ptr())) {
      t.tensor_keys.emplace(k->tensor().example.ptr(), k);
      return k->tensor().example;
    }
    if (!k->is_const()) t.unsupported("dict key " + k->describe() + " (only constant keys are traced)");
    if (PyObject_Hash(k->obj.ptr()) == -1) throw py::error_already_set();
    return k->obj;
  }

  // A dict value about to be changed in place (a dict from the frame is written back after the graph).
  static ValuePtr& own_dict(Tracer& t, ValuePtr& d, const char* what) {
    if (d->kind != VKind::Dict) t.unsupported(std::string(what) + " on " + d->describe());
    t.will_mutate(d);
    return d;
  }

  // The key `k` stored into `d`: a tensor key only into a dict made in the trace (the write-back of a dict of the
  // frame rebuilds its keys as constants).
  static py::object stored_key(Tracer& t, const ValuePtr& d, const ValuePtr& k) {
    if (k->is_tensor() && d->source) t.unsupported("a tensor stored as a key of " + d->describe());
    return key_of(t, k);
  }

  static void update_from(Tracer& t, const ValuePtr& d, const ValuePtr& src, bool merge) {
    if (src->kind != VKind::Dict) t.unsupported("dict update from " + src->describe());
    t.will_mutate(d);
    for (size_t i = 0; i < src->keys.size(); ++i) {
      if (merge && d->find_key(src->keys[i]) >= 0) t.unsupported("duplicate keyword argument in ** unpacking");
      set_item(d, src->keys[i], src->items[i]);
    }
  }

  static void build_map(Tracer& t, const Instruction& i) {
    std::vector<ValuePtr> kv = t.popn(static_cast<size_t>(2 * i.arg));
    ValuePtr d = Value::dict({}, {});
    for (size_t k = 0; k < kv.size(); k += 2) set_item(d, key_of(t, kv[k]), kv[k + 1]);
    t.push(d);
  }

  static void build_const_key_map(Tracer& t, const Instruction& i) {
    ValuePtr keys = t.pop();
    std::vector<ValuePtr> values = t.popn(static_cast<size_t>(i.arg));
    std::vector<ValuePtr> key_values = t.unpack_iterable(keys);
    if (key_values.size() != values.size()) t.unsupported("BUILD_CONST_KEY_MAP with mismatched keys");
    ValuePtr d = Value::dict({}, {});
    for (size_t k = 0; k < values.size(); ++k) set_item(d, key_of(t, key_values[k]), values[k]);
    t.push(d);
  }

  static void dict_update(Tracer& t, const Instruction& i) {
    ValuePtr src = t.pop();
    update_from(t, own_dict(t, t.peek(static_cast<size_t>(i.arg)), "DICT_UPDATE"), src, false);
  }

  static void dict_merge(Tracer& t, const Instruction& i) {
    ValuePtr src = t.pop();
    update_from(t, own_dict(t, t.peek(static_cast<size_t>(i.arg)), "DICT_MERGE"), src, true);
  }

  // MAP_ADD(i): dict comprehension step; value on top, key below it, the dict `i` below those.
  static void map_add(Tracer& t, const Instruction& i) {
    ValuePtr value = t.pop();
    ValuePtr key = t.pop();
    ValuePtr& d = own_dict(t, t.peek(static_cast<size_t>(i.arg)), "MAP_ADD");
    set_item(d, stored_key(t, d, key), value);
  }
};

bool Tracer::dict_subscr(const ValuePtr& d, const ValuePtr& key) {
  if (d->kind != VKind::Dict) return false;
  py::object k = DictOps::key_of(*this, key);
  int at = d->find_key(k);
  const DictOf* dd = d->default_dict();
  if (at < 0 && dd && !(dd->factory->is_const() && dd->factory->obj.is_none())) {
    // defaultdict.__missing__: the factory's value is stored under the key, then returned.
    if (key->is_tensor() && d->source) unsupported("a tensor stored as a key of " + d->describe());
    ValuePtr made = call(dd->factory, {}, {});
    will_mutate(d);
    set_item(d, k, made);
    push(made);
    return true;
  }
  if (at < 0) {
    // In an inlined function, a KeyError that a modelled handler (Mapping.get) may catch.
    if (inline_depth() > 0 && key->is_constant_like()) raise_builtin_exception(py::handle(PyExc_KeyError), {key});
    unsupported("dict has no key " + key->describe() + " (KeyError is raised by Python)");
  }
  push(d->items[static_cast<size_t>(at)]);
  return true;
}

bool Tracer::dict_store(ValuePtr& d, const ValuePtr& key, const ValuePtr& value) {
  if (d->kind != VKind::Dict) return false;
  py::object k = DictOps::stored_key(*this, d, key);
  set_item(DictOps::own_dict(*this, d, "item assignment"), k, value);
  return true;
}

bool Tracer::dict_delete(ValuePtr& d, const ValuePtr& key) {
  if (d->kind != VKind::Dict) return false;
  DictOps::own_dict(*this, d, "item deletion");
  int at = d->find_key(DictOps::key_of(*this, key));
  if (at < 0) unsupported("del of a missing dict key (KeyError is raised by Python)");
  d->keys.erase(d->keys.begin() + at);
  d->items.erase(d->items.begin() + at);
  return true;
}

ValuePtr Tracer::dict_contains(const ValuePtr& d, const ValuePtr& key) {
  return Value::constant(py::bool_(d->find_key(DictOps::key_of(*this, key)) >= 0));
}

ValuePtr Tracer::key_value(const py::object& k) {
  if (!guards::is_tensor(k.ptr())) return Value::constant(k);
  auto it = tensor_keys.find(k.ptr());
  if (it == tensor_keys.end()) unsupported("a tensor key the trace has no value for");
  return it->second;
}

ValuePtr Tracer::call_dict_method(ValuePtr d, const std::string& name, std::vector<ValuePtr> args,
                                  std::vector<std::pair<std::string, ValuePtr>> kwargs) {
  if (name == "get" && kwargs.empty() && (args.size() == 1 || args.size() == 2)) {
    int at = d->find_key(DictOps::key_of(*this, args[0]));
    if (at >= 0) return d->items[static_cast<size_t>(at)];
    return args.size() == 2 ? args[1] : Value::constant(py::none());
  }
  // Live views (a key added later shows through them), with the set operations and comparisons of Python's.
  if (name == "keys" && args.empty() && kwargs.empty()) return Value::dict_view_of(d, ViewPart::Keys);
  if (name == "values" && args.empty() && kwargs.empty()) return Value::dict_view_of(d, ViewPart::Values);
  if (name == "items" && args.empty() && kwargs.empty()) return Value::dict_view_of(d, ViewPart::Items);
  if (name == "copy" && args.empty() && kwargs.empty())
    return d->default_dict() ? Value::default_dict_of(d->default_dict()->factory, d->keys, d->items)
                             : Value::dict(d->keys, d->items);
 if (name == "clear" && args.empty() && kwargs.empty()) {
    will_mutate(d);
    d->keys.clear();
    d->items.clear();
    return Value::constant(py::none());
  }
  if (name == "update" && args.size() <= 1) {
    will_mutate(d);
    if (args.size() == 1) DictOps::update_from(*this, d, args[0], false);
    for (auto& kv : kwargs) set_item(d, py::str(kv.first), kv.second);
    return Value::constant(py::none());
  }
  if (name == "setdefault" && kwargs.empty() && (args.size() == 1 || args.size() == 2)) {
    py::object k = DictOps::stored_key(*this, d, args[0]);
    int at = d->find_key(k);
    if (at >= 0) return d->items[static_cast<size_t>(at)];
    ValuePtr v = args.size() == 2 ? args[1] : Value::constant(py::none());
    will_mutate(d);
    set_item(d, k, v);
    return v;
  }
  if (name == "pop" && kwargs.empty() && (args.size() == 1 || args.size() == 2)) {
    int at = d->find_key(DictOps::key_of(*this, args[0]));
    if (at < 0) {
      if (args.size() == 2) return args[1];
      unsupported("dict.pop of a missing key (KeyError is raised by Python)");
    }
    ValuePtr v = d->items[static_cast<size_t>(at)];
    will_mutate(d);
    d->keys.erase(d->keys.begin() + at);
    d->items.erase(d->items.begin() + at);
    return v;
  }
  unsupported("dict." + name + "() is not traced yet");
}

ValuePtr Tracer::wrap_default_dict(py::handle value, SourcePtr src) {
  // An optimizer's `state` (a defaultdict keyed by tensors, filled by the real _init_group, optimizer.cpp) is an
  // attribute: only variables are taken, and only with string keys.
  using K = guards::Source::Kind;
  if (src->kind != K::Local && src->kind != K::Global && src->kind != K::ModuleGlobal && src->kind != K::Closure)
    return nullptr;
  PyObject* v = value.ptr();
  static PyObject* dd_type =
      py::object(loaded_module("collections").attr("defaultdict")).release().ptr();  // process lifetime
  constexpr Py_ssize_t kMaxKeys = 64;  // one guard per key
  if (reinterpret_cast<PyObject*>(Py_TYPE(v)) != dd_type || PyDict_GET_SIZE(v) > kMaxKeys) return nullptr;
  PyObject *k, *item;  // borrowed
  Py_ssize_t pos = 0;
  while (PyDict_Next(v, &pos, &k, &item))
    if (!PyUnicode_CheckExact(k)) return nullptr;
  // DICT_KEYS takes exact dicts: the type and length, and each key's presence, are guarded; that is the set of keys,
  // not their order (a key deleted and set again between calls moves to the end), so the trace never iterates it.
  // Known limit: a write-back after the graph puts the keys in the order seen at compile time.
  guards.add(guards::length_match(src, v));
  std::vector<py::object> keys;
  std::vector<ValuePtr> items;
  py::dict d = py::reinterpret_borrow<py::dict>(value);
  for (auto kv : d) {
    guards.add(guards::dict_contains(src, kv.first.ptr(), true));
    keys.push_back(py::reinterpret_borrow<py::object>(kv.first));
    items.push_back(wrap(kv.second, guards::Source::dict_item_key(src, kv.first.ptr())));
  }
  ValuePtr factory = wrap(value.attr("default_factory"), guards::Source::attr(src, "default_factory"));
  ValuePtr out = Value::default_dict_of(std::move(factory), std::move(keys), std::move(items));
  out->source = std::move(src);
  out->set_frame_container(py::reinterpret_borrow<py::object>(value));  // the real object: identity, written back
  return out;
}

ValuePtr Tracer::make_default_dict(const std::vector<ValuePtr>& args, const Kwargs& kwargs) {
  // defaultdict(factory=None, *rest, **kwargs): the factory must be callable or None (Python raises TypeError).
  ValuePtr factory = args.empty() ? Value::constant(py::none()) : args[0];
  bool none = factory->is_const() && factory->obj.is_none();
  if (!none && (factory->kind != VKind::Object || (!factory->made_in_trace() && !PyCallable_Check(factory->obj.ptr()))))
    unsupported("collections.defaultdict with a default factory that is " + factory->describe());
  std::vector<ValuePtr> rest(args.size() > 1 ? args.begin() + 1 : args.end(), args.end());
  ValuePtr d = make_dict(rest, kwargs);
  d->dict_of().factory = factory;
  return d;
}

ValuePtr Tracer::make_dict(const std::vector<ValuePtr>& args, const std::vector<std::pair<std::string, ValuePtr>>& kwargs) {
  ValuePtr d = Value::dict({}, {});
  if (args.size() > 1) unsupported("dict() with more than one positional argument");
  if (args.size() == 1) {
    if (args[0]->kind == VKind::Dict) {
      DictOps::update_from(*this, d, args[0], false);
    } else {
      for (const auto& pair : unpack_iterable(args[0])) {
        std::vector<ValuePtr> kv = unpack_iterable(pair);
        if (kv.size() != 2) unsupported("dict() from items that are not pairs");
        set_item(d, DictOps::key_of(*this, kv[0]), kv[1]);
      }
    }
  }
  for (const auto& kv : kwargs) set_item(d, py::str(kv.first), kv.second);
  return d;  // made here: nothing to undo
}

void Tracer::register_dicts(HandlerTable& t) {
  auto on = [&](const char* name, Handler h) { on_opcode(t, name, h); };
  on("BUILD_MAP", DictOps::build_map);
  on("BUILD_CONST_KEY_MAP", DictOps::build_const_key_map);
  on("DICT_UPDATE", DictOps::dict_update);
  on("DICT_MERGE", DictOps::dict_merge);
  on("MAP_ADD", DictOps::map_add);
}

}  // namespace cdynamo::interp
