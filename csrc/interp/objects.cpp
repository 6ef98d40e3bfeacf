// objects.cpp — owns user objects in the trace: attribute reads (instance attributes, class attributes,
// methods bound to their receiver, properties), calls of bound methods and of nn.Module instances
// (forward inlined when the module has no hooks), each guarded through the object's Source.
#include <algorithm>

#include "compat/compat.h"
#include "interp/torch_rules.h"
#include "interp/tracer.h"

namespace cdynamo::interp {

namespace {

// torch.nn.modules.module's global hook dictionaries (guarded empty).
const char* const kGlobalHookDicts[] = {"_global_forward_hooks", "_global_forward_pre_hooks",
                                        "_global_backward_hooks", "_global_backward_pre_hooks",
                                        "_global_forward_hooks_with_kwargs"};

}  // namespace

void Tracer::guard_no_global_module_hooks(Tracer& t, const std::string& what) {
  const py::object& mm = PyRefs::get().nn_module_module;
  PyObject* mm_globals = PyModule_GetDict(mm.ptr());  // borrowed
  for (const char* d : kGlobalHookDicts) {
    py::object hooks = py::getattr(mm, d, py::none());
    if (hooks.is_none()) continue;
    if (py::len(hooks) != 0) t.unsupported(what + " with global " + d);
    t.guards.add(guards::length_match(guards::Source::module_global(mm_globals, d), hooks.ptr()));
  }
}

namespace {

// An instance of random.Random (or a subclass): a generator whose methods draw from its own state.
bool is_random_generator(py::handle o) {
  static PyObject* cls = py::object(loaded_module("random").attr("Random")).release().ptr();  // process lifetime
  return PyObject_TypeCheck(o.ptr(), reinterpret_cast<PyTypeObject*>(cls));
}

bool is_nn_module(py::handle o) {
  PyObject* module_cls = PyRefs::get().nn_module.ptr();  // borrowed (process lifetime)
  int r = PyObject_IsInstance(o.ptr(), module_cls);
  if (r < 0) throw py::error_already_set();
  return r == 1;
}

// The name of an assignment pending on the nn.Module `o` (on any module when `o` is null) that
// Module.__setattr__ files in _parameters / _buffers / _modules when it is replayed: a name that is not a
// plain instance attribute of that module. Empty when there is none.
std::string pending_module_filing(const std::vector<AttrStore>& stores, py::handle o) {
  for (const auto& st : stores) {
    if (!st.obj || (o && !st.obj->obj.is(o)) || (!o && !is_nn_module(st.obj->obj))) continue;
    PyObject** dp = _PyObject_GetDictPtr(st.obj->obj.ptr());
    py::str key(st.name);
    bool plain = dp && *dp && PyDict_GetItemWithError(*dp, key.ptr());  // borrowed
    if (PyErr_Occurred()) throw py::error_already_set();
    if (!plain) return st.name;
  }
  return "";
}

}  // namespace

struct Tracer::ObjectAttrs {
  // A bound method value: the function (guarded by identity through `type(obj).name`) and its receiver.
  static ValuePtr bound_method(Tracer& t, const ValuePtr& self, py::handle func, const std::string& name) {
    SourcePtr fsrc = guards::Source::attr(t.type_source(self), name);
    ValuePtr f = t.wrap(func, fsrc);
    // The function's value may be the one first read through another source (Tracer::wrap: one value per function
    // pinned by identity); its source then names where its closure and defaults are guarded.
    return Value::bound_method(f->obj, f->source ? f->source : fsrc, self, name);
  }

  // obj.name on an object of the frame whose class has a Python __getattribute__ (transformers' configs remap names in
  // theirs): the override inlined, so what it reads (instance __dict__ items, class attributes) is guarded as such and
  // checked without running Python. nullptr when the inline failed before changing anything: the caller then reads
  // the attribute with getattr, guarded on obj.name (a guard that calls the override on every check).
  static ValuePtr through_override(Tracer& t, const ValuePtr& obj, PyObject* ga, const std::string& name) {
    const TraceMark mark = t.mark_state();
    StopInfo stop = t.stop;
    ValuePtr f = t.wrap(ga, guards::Source::attr(t.type_source(obj), "__getattribute__"));
    try {
      return t.inline_call(f, {obj, Value::constant(py::str(name))}, {});
    } catch (const TracedRaise&) {
      throw;  // what Python raises there (a missing attribute: hasattr / getattr's default handle it)
    } catch (const OpRaised&) {
      throw;
    } catch (const Unsupported&) {
      if (!t.unchanged_since(mark)) throw;
      t.stop = std::move(stop);
      return nullptr;
    }
  }
};

namespace {
// The Python __getattribute__ that `type` (borrowed) defines or inherits (borrowed), or nullptr: object's slot.
PyObject* python_getattribute(PyTypeObject* type) {
  static PyObject* name = PyUnicode_InternFromString("__getattribute__");  // owned for the process
  PyObject* ga = _PyType_Lookup(type, name);  // borrowed
  return ga && PyFunction_Check(ga) ? ga : nullptr;
}
}  // namespace

PyObject* Tracer::frame_getattribute_override(py::handle o) const {
  if (PyType_Check(o.ptr()) || PyModule_Check(o.ptr())) return nullptr;
  return python_getattribute(Py_TYPE(o.ptr()));
}

SourcePtr Tracer::type_source(const ValuePtr& obj) const {
  return frame_getattribute_override(obj->obj) ? guards::Source::generic_attr(obj->source, "__class__")
                                               : guards::Source::attr(obj->source, "__class__");
}

ValuePtr Tracer::method_of(const ValuePtr& self, py::handle func, const std::string& name) {
  return ObjectAttrs::bound_method(*this, self, func, name);
}

ValuePtr Tracer::object_attr(const ValuePtr& obj, const std::string& name, bool past_override) {
  py::handle o = obj->obj;
  if (obj->made_module()) return made_module_attr(*this, obj, name);
  if (is_environ(obj) && (name == "get" || name == "__getitem__" || name == "__contains__"))
    return Value::method(obj, name);
  if (!obj->source && PyType_Check(o.ptr())) {
    // A class of torch read as a program constant (nn.LayerNorm from torch.nn's namespace): its functions
    // and constant class attributes are constants too (`nn.LayerNorm.forward(self, x)` in a subclass).
    py::object mod = py::getattr(o, "__module__", py::none());
    PyObject* descr = _PyType_Lookup(reinterpret_cast<PyTypeObject*>(o.ptr()), py::str(name).ptr());  // borrowed
    if (PyUnicode_Check(mod.ptr()) && descr) {
      std::string m = mod.cast<std::string>();
      if (m == "torch" || m.rfind("torch.", 0) == 0) {
        py::object d = py::reinterpret_borrow<py::object>(descr);
        if (PyFunction_Check(descr)) return Value::object(d);
        if (is_constant_object(d)) return Value::constant(d);
        // A member of an enum class of torch's C++ bindings (torch.nn.attention.SDPBackend.MATH): immutable.
        if (Py_TYPE(descr) == reinterpret_cast<PyTypeObject*>(o.ptr()) &&
            py::hasattr(o, "__members__") && std::string(Py_TYPE(o.ptr())->tp_name).rfind("pybind11", 0) == 0)
          return Value::constant(d);
      }
    }
  }
  if (!obj->source && is_op_overload(o) && name.rfind("__", 0) != 0) {
    // torch.ops.aten.mul.Tensor: an overload of a packet read from torch.ops (a program constant).
    py::object a = py::reinterpret_steal<py::object>(PyObject_GetAttrString(o.ptr(), name.c_str()));
    if (!a) {
      PyErr_Clear();
      unsupported("operator " + py::str(o).cast<std::string>() + " has no overload '" + name + "'");
    }
    if (is_op_overload(a)) return Value::object(a);
  }
  if (!obj->source && PyType_Check(o.ptr()) && !PyType_HasFeature(reinterpret_cast<PyTypeObject*>(o.ptr()), Py_TPFLAGS_HEAPTYPE)) {
    // A builtin class (int, float, NoneType: typing.get_args gives them without a source) cannot be changed:
    // its constant attributes (__name__, __qualname__, __module__) are constants of the program.
    py::object a = py::reinterpret_steal<py::object>(PyObject_GetAttrString(o.ptr(), name.c_str()));  // new reference
    if (!a) PyErr_Clear();
    else if (is_constant_object(a)) return Value::constant(a);
  }
  if (!obj->source) unsupported("attribute '" + name + "' of " + obj->describe() + " (an object without a source)");
  if (!past_override)
    if (PyObject* ga = frame_getattribute_override(o))
      if (ValuePtr v = ObjectAttrs::through_override(*this, obj, ga, name)) return v;
  // The real __dict__ does not hold the attributes this trace assigned yet (they are replayed after the
  // graph): read it in Python, after a graph break has replayed them.
  if (name == "__dict__")
    for (const auto& st : attr_stores)
      if (st.obj && st.obj->obj.is(o)) unsupported("__dict__ read after an attribute assignment in the same graph");
  // nn.Module.__setattr__ files a parameter, a submodule or a buffer's new value in these dicts when the
  // assignment is replayed: while one to a name that is not a plain instance attribute is pending, they
  // are read in Python after a graph break. (Counters and other plain attributes do not break.)
  if ((name == "_parameters" || name == "_buffers" || name == "_modules") && is_nn_module(o)) {
    std::string filed = pending_module_filing(attr_stores, o);
    if (!filed.empty()) unsupported("nn.Module." + name + " read after assigning '" + filed + "' in the same graph");
  }
  PyTypeObject* type = Py_TYPE(o.ptr());
  py::str key(name);
  PyObject* descr = _PyType_Lookup(type, key.ptr());  // borrowed, may be NULL
  PyObject* inst_dict = nullptr;                     // borrowed
  if (PyObject** dp = _PyObject_GetDictPtr(o.ptr())) inst_dict = *dp;
  bool in_instance = inst_dict && PyDict_GetItemWithError(inst_dict, key.ptr());
  if (PyErr_Occurred()) throw py::error_already_set();
  if (descr && PyCallable_Check(descr) && name.rfind("__", 0) != 0 && is_random_generator(o))
    unsupported("method '" + name + "' of a random.Random instance: its draws are left to Python (torch._dynamo "
                "replays the generator's trace-time state, the same values on every call)");
  if (descr && !in_instance) {
    if (PyFunction_Check(descr)) return ObjectAttrs::bound_method(*this, obj, descr, name);
    if (Py_IS_TYPE(descr, &PyClassMethod_Type) || Py_IS_TYPE(descr, &PyStaticMethod_Type)) {
      // Found on the class, guarded through it: a classmethod binds the class, a staticmethod nothing.
      SourcePtr csrc = type_source(obj);
      py::object func = py::reinterpret_borrow<py::object>(descr).attr("__func__");
      if (!PyFunction_Check(func.ptr())) unsupported("classmethod/staticmethod '" + name + "' of a non-Python function");
      // ID_MATCH on the function the class gives (cls.name is the function of a staticmethod, a new bound
      // method of a classmethod each time: its __func__).
      SourcePtr fsrc = guards::Source::attr(csrc, name);
      wrap(func, Py_IS_TYPE(descr, &PyClassMethod_Type) ? guards::Source::attr(fsrc, "__func__") : fsrc);
      ValuePtr f = Value::object(func);
      if (Py_IS_TYPE(descr, &PyClassMethod_Type)) {
        f->payload = BoundOf{wrap(reinterpret_cast<PyObject*>(type), csrc), name};
      }
      return f;
    }
    if (PyObject_TypeCheck(descr, &PyProperty_Type)) {
      SourcePtr psrc = guards::Source::attr(type_source(obj), name);
      return inline_call(property_getter(descr, psrc, name), {obj}, {});
    }
  }
  // nn.Module parameters, buffers and submodules live in dicts that Module.__getattr__ (Python) searches:
  // read and guard them through the dict itself, a C-level lookup on every guard check.
  if (!in_instance && !descr && is_nn_module(o)) {
    for (const char* d : {"_parameters", "_buffers", "_modules"}) {
      PyObject* dict = inst_dict ? PyDict_GetItemString(inst_dict, d) : nullptr;  // borrowed
      if (!dict || !PyDict_CheckExact(dict)) continue;
      PyObject* v = PyDict_GetItemWithError(dict, key.ptr());  // borrowed
      if (PyErr_Occurred()) throw py::error_already_set();
      if (!v) continue;
      // Found here first, as Module.__getattr__ finds it (a None parameter such as Linear(bias=False)'s too:
      // its guard is then a dict lookup, not a Python __getattr__ call per check).
      return wrap(v, guards::Source::dict_item(guards::Source::attr(obj->source, d), name));
    }
  }
  // Instance attribute, class attribute or anything else getattr resolves (nn.Module.__getattr__ finds
  // parameters, buffers and submodules): read now, guarded on the value through `obj.name`.
  PyObject* v = PyObject_GetAttr(o.ptr(), key.ptr());  // new reference
  if (!v) {
    PyErr_Clear();
    unsupported("attribute '" + name + "' of " + obj->describe() + " could not be read");
  }
  py::object value = py::reinterpret_steal<py::object>(v);
  // A builtin function stored on the object (self.act = F.gelu) is a plain function; a bound method of
  // another kind (a C method of some object) is not modelled.
  if (PyCFunction_Check(v) && PyCFunction_GET_SELF(v) && !PyModule_Check(PyCFunction_GET_SELF(v))) {
    // cls.__subclasses__ (type's own): the bound method, unguarded (it is the class's, which is guarded); a call of it
    // is traced by subclasses_call (class_queries.cpp), whose guards re-read the answer.
    if (name == "__subclasses__" && PyType_Check(o.ptr()) && obj->source && is_type_subclasses(o.ptr()))
      return Value::object(value, guards::Source::attr(obj->source, name));
    unsupported("attribute '" + name + "' of " + obj->describe() + " is a bound method of another kind");
  }
  return wrap(value, guards::Source::attr(obj->source, name));
}

ValuePtr Tracer::call_user_dunder(const ValuePtr& obj, const char* dunder, std::vector<ValuePtr> args) {
  if (is_environ(obj) && (std::string(dunder) == "__getitem__" || std::string(dunder) == "__contains__"))
    return environ_call(obj, dunder, args, {});
  if (obj->kind == VKind::Instance) {  // made in the trace: the method of its class, guarded on the class
    auto* type = reinterpret_cast<PyTypeObject*>(obj->instance().cls->obj.ptr());
    PyObject* descr = _PyType_Lookup(type, py::str(dunder).ptr());  // borrowed, may be NULL
    if (!descr || !PyFunction_Check(descr)) return nullptr;
    SourcePtr src = guards::Source::attr(obj->instance().cls->source, dunder);
    ValuePtr m = Value::bound_method(wrap(descr, src)->obj, src, obj, dunder);
    return call(m, std::move(args), {});
  }
  if (obj->kind != VKind::Object || !obj->source || is_nn_module(obj->obj)) return nullptr;
  py::str key(dunder);
  PyObject* descr = _PyType_Lookup(Py_TYPE(obj->obj.ptr()), key.ptr());  // borrowed, may be NULL
  if (!descr || !PyFunction_Check(descr)) return nullptr;
  return call(ObjectAttrs::bound_method(*this, obj, descr, dunder), std::move(args), {});
}

namespace {

struct ModuleNode {
  std::string prefix;
  py::object mod;
  SourcePtr src;
};

}  // namespace

struct Tracer::ModuleWalk {
  // The module and its descendants in named_modules() order (each object once), the structure guarded
  // through each _modules dict's keys.
  static std::vector<ModuleNode> walk_modules(Tracer& t, const ModuleNode& root, bool recurse) {
    std::vector<ModuleNode> out{root};
    std::vector<PyObject*> seen{root.mod.ptr()};
    for (size_t i = 0; i < out.size(); ++i) {
      if (!recurse && i > 0) break;
      ModuleNode node = out[i];
      py::object mods = node.mod.attr("_modules");
      if (!PyDict_CheckExact(mods.ptr())) t.unsupported("module without a _modules dict");
      SourcePtr msrc = guards::Source::attr(node.src, "_modules");
      t.guards.add(guards::dict_keys_match(msrc, mods.ptr()));
      for (auto kv : py::reinterpret_borrow<py::dict>(mods)) {
        if (kv.second.is_none() || !PyUnicode_Check(kv.first.ptr())) continue;
        if (std::find(seen.begin(), seen.end(), kv.second.ptr()) != seen.end()) continue;
        seen.push_back(kv.second.ptr());
        std::string name = py::str(kv.first).cast<std::string>();
        t.guards.add(guards::id_match(guards::Source::dict_item(msrc, name), kv.second.ptr()));
        out.push_back({node.prefix.empty() ? name : node.prefix + "." + name,
                       py::reinterpret_borrow<py::object>(kv.second), guards::Source::dict_item(msrc, name)});
      }
    }
    return out;
  }
};

ValuePtr Tracer::module_iteration(const ValuePtr& self, py::handle func, const std::string& name,
                                  const std::vector<ValuePtr>& args,
                                  const std::vector<std::pair<std::string, ValuePtr>>& kwargs) {
  static const char* const names[] = {"children", "named_children", "modules", "named_modules", "parameters",
                                      "named_parameters", "buffers", "named_buffers"};
  bool known = false;
  for (const char* n : names) known = known || name == n;
  if (!known || !self->source || !args.empty()) return nullptr;
  // A parameter, buffer or submodule assigned in this graph is filed by Module.__setattr__ only when
  // replayed: walk the tree in Python after a graph break.
  std::string filed = pending_module_filing(attr_stores, py::handle());
  if (!filed.empty()) unsupported("nn.Module." + name + "() after assigning '" + filed + "' in the same graph");
  // torch.nn.Module's own method, not an override.
  if (!py::getattr(PyRefs::get().nn_module, name.c_str(), py::none()).is(func)) return nullptr;
  bool recurse = true;
  for (const auto& kv : kwargs) {
    if (kv.first != "recurse" || !kv.second->is_const()) return nullptr;
    recurse = PyObject_IsTrue(kv.second->obj.ptr()) == 1;
  }
  bool named = name.rfind("named_", 0) == 0;
  std::string what = named ? name.substr(6) : name;
  ModuleNode root{"", self->obj, self->source};
  std::vector<ValuePtr> items;
  auto add = [&](const std::string& n, ValuePtr v) {
    items.push_back(named ? Value::tuple({Value::constant(py::str(n)), v}) : v);
  };
  if (what == "children") {
    std::vector<ModuleNode> all = ModuleWalk::walk_modules(*this, root, false);
    for (size_t i = 1; i < all.size(); ++i) add(all[i].prefix, wrap(all[i].mod, all[i].src));
  } else if (what == "modules") {
    for (const auto& m : ModuleWalk::walk_modules(*this, root, true))
      add(m.prefix, m.prefix.empty() ? self : wrap(m.mod, m.src));
  } else {
    const char* dict_name = what == "parameters" ? "_parameters" : "_buffers";
    std::vector<PyObject*> seen;
    for (const auto& m : ModuleWalk::walk_modules(*this, root, recurse)) {
      py::object d = m.mod.attr(dict_name);
      if (!PyDict_CheckExact(d.ptr())) unsupported(std::string("module without a ") + dict_name + " dict");
      SourcePtr dsrc = guards::Source::attr(m.src, dict_name);
      guards.add(guards::dict_keys_match(dsrc, d.ptr()));
      for (auto kv : py::reinterpret_borrow<py::dict>(d)) {
        if (kv.second.is_none() || std::find(seen.begin(), seen.end(), kv.second.ptr()) != seen.end()) continue;
        seen.push_back(kv.second.ptr());
        std::string n = py::str(kv.first).cast<std::string>();
        add(m.prefix.empty() ? n : m.prefix + "." + n, wrap(kv.second, guards::Source::dict_item(dsrc, n)));
      }
    }
  }
  return Value::iterator(std::move(items));
}

bool Tracer::slice_only_iterated() {
  // The subscript's result goes straight to GET_ITER, or is the one argument of builtin enumerate whose
  // result goes straight to GET_ITER.
  auto op = [&](size_t i) { return i < bc.insts.size() ? bc.insts[i]->opcode : -1; };
  static const int get_iter = bytecode::opcode_by_name("GET_ITER"), precall = bytecode::opcode_by_name("PRECALL"),
                   call_op = bytecode::opcode_by_name("CALL");
  if (op(pc + 1) == get_iter) return true;
  size_t i = pc + 1;
  if (precall >= 0 && op(i) == precall) ++i;
  if (op(i) != call_op || bc.insts[i]->arg != 1 || op(i + 1) != get_iter) return false;
  static PyObject* enumerate = reinterpret_cast<PyObject*>(&PyEnum_Type);
  for (size_t depth = 1; depth <= 2 && depth <= stack.size(); ++depth) {
    const ValuePtr& v = peek(depth);
    if (v->kind == VKind::Object && v->obj.ptr() == enumerate) return true;
  }
  return false;
}

ValuePtr Tracer::module_item(const ValuePtr& obj, const ValuePtr& key) {
  if (ValuePtr p = parameter_list_item(*this, obj, key)) return p;  // library_values.cpp
  if (obj->kind != VKind::Object || !obj->source || !key->is_const()) return nullptr;
  auto& refs = PyRefs::get();
  py::handle o = obj->obj;
  py::object base;  // the torch.nn container class `o` is an instance of
  for (const py::object* c : {&refs.nn_module_list, &refs.nn_sequential, &refs.nn_module_dict})
    if (py::isinstance(o, *c)) base = *c;
  if (!base) return nullptr;
  bool indexed = !base.is(refs.nn_module_dict);
  // The container's class (a subclass, maybe) must index as torch.nn's own class does.
  if (!py::type::handle_of(o).attr("__getitem__").is(base.attr("__getitem__"))) return nullptr;
  py::object mods = o.attr("_modules");
  if (!PyDict_CheckExact(mods.ptr())) return nullptr;
  SourcePtr msrc = guards::Source::attr(obj->source, "_modules");
  auto child_named = [&](const std::string& k) {  // read through the container's _modules dict
    PyObject* child = PyDict_GetItemString(mods.ptr(), k.c_str());  // borrowed
    if (!child || child == Py_None) unsupported("module container has no child '" + k + "'");
    return wrap(child, guards::Source::dict_item(msrc, k));
  };
  std::string k;
  if (indexed && PySlice_Check(key->obj.ptr()) && slice_only_iterated()) {
    // `for m in self.layers[a:b]` (or `enumerate(self.layers[a:b])`): the slice is a new container that only
    // the loop sees; its children in order (a tuple to iterate), each read through the original container
    // (its size guarded).
    guards.add(guards::length_match(msrc, mods.ptr()));
    py::list keys = py::reinterpret_borrow<py::dict>(mods).attr("keys")();
    py::list picked = keys[py::reinterpret_borrow<py::slice>(key->obj)];
    std::vector<ValuePtr> children;
    for (auto kobj : picked) children.push_back(child_named(py::str(kobj).cast<std::string>()));
    return Value::tuple(std::move(children));
  }
  if (indexed) {
    if (!PyLong_CheckExact(key->obj.ptr())) return nullptr;  // slices make new containers
    long n = static_cast<long>(PyDict_GET_SIZE(mods.ptr()));
    long i = key->obj.cast<long>();
    if (i < 0) i += n;
    if (i < 0 || i >= n) unsupported("module container index out of range (IndexError is raised by Python)");
    guards.add(guards::length_match(msrc, mods.ptr()));  // i-th child is the one named str(i)
    py::list keys = py::reinterpret_borrow<py::dict>(mods).attr("keys")();
    k = py::str(keys[static_cast<size_t>(i)]).cast<std::string>();
  } else {
    if (!PyUnicode_CheckExact(key->obj.ptr())) return nullptr;
    k = key->obj.cast<std::string>();
  }
  return child_named(k);
}

namespace {

bool is_none(const ValuePtr& v) { return v->is_const() && v->obj.is_none(); }

}  // namespace

struct Tracer::ModuleHooks {
  // A guard that `d` (a hook dict held at `src`) still equals its contents now: same hooks, same order.
  static void guard_hook_dict(Tracer& t, const SourcePtr& src, py::handle d) {
    if (py::len(d) == 0) {
      t.guards.add(guards::length_match(src, d.ptr()));
      return;
    }
    py::object copy = py::reinterpret_borrow<py::object>(py::type::handle_of(d))(d);
    t.guards.add(guards::equals_match(src, copy.ptr()));
  }
};

namespace {

// The module export() / optimize(module) traces is called by cdynamo's trampoline (eval_frame.py: module_call,
// keyword-only parameter `_cdynamo_module`): torch._dynamo traces that module's forward as the frame itself, so its
// call is no nn_module_stack entry and the paths of its submodules start at forward's `self`.
constexpr const char* kTrampolineModule = "_cdynamo_module";

bool is_trampoline_module(const guards::Source& s) {
  return s.kind == guards::Source::Kind::Local && s.name == kTrampolineModule;
}

// torch._dynamo's nn_module_stack path of a module read at `src`: "L['self'].layers.0" (a path from the
// trampoline's module is spelled from its forward's first parameter, as torch._dynamo names it).
std::string module_path(const guards::Source& src, const guards::FrameView& fv) {
  std::string path = src.dynamo_name();
  const guards::Source* root = src.root();
  if (!is_trampoline_module(*root)) return path;
  // forward(self, ...): L['self']; a decorator's wrapper(*args, **kwargs) (transformers' forwards): the module is
  // the wrapper's first positional argument, L['args'][0], as torch._dynamo names it from that frame.
  std::string self = "L['self']";
  py::object mod = py::reinterpret_steal<py::object>(root->fetch(fv));  // new reference or NULL
  if (mod) {
    py::object fwd = py::getattr(py::type::of(mod), "forward", py::none());
    py::object co = py::getattr(fwd, "__code__", py::none());
    if (PyCode_Check(co.ptr())) {
      auto* code = reinterpret_cast<PyCodeObject*>(co.ptr());
      if (code->co_argcount > 0)
        self = "L['" + py::str(compat::code_localsplus_name(code, 0)).cast<std::string>() + "']";
      else if (code->co_flags & CO_VARARGS)
        self = "L['" + py::str(compat::code_localsplus_name(code, code->co_kwonlyargcount)).cast<std::string>() +
               "'][0]";
    }
  }
  const std::string prefix = std::string("L['") + kTrampolineModule + "']";
  return self + path.substr(prefix.size());
}

}  // namespace

ValuePtr Tracer::call_module(const ValuePtr& mod, std::vector<ValuePtr> args,
                             std::vector<std::pair<std::string, ValuePtr>> kwargs) {
  // Module._call_impl as the trace sees it: forward pre-hooks, forward, forward hooks, in registration
  // order, each hook inlined like any function. Every hook dict is guarded on its contents (empty ones on
  // their length), the global ones through torch.nn.modules.module's globals.
  py::handle f = mod->obj;
  // A torch.jit ScriptModule (torch.jit.trace / script's result) runs its TorchScript graph: Python, as dynamo.
  static PyObject* script_module = py::object(loaded_module("torch.jit").attr("ScriptModule")).release().ptr();  // process lifetime
  int scripted = PyObject_IsInstance(f.ptr(), script_module);
  if (scripted < 0) throw py::error_already_set();
  if (scripted) unsupported("call to a torch.jit ScriptModule (" + std::string(Py_TYPE(f.ptr())->tp_name) + "): it runs as Python");
  // Nodes made from here to the return (hooks included) are inside this module's call (meta["nn_module_stack"]).
  struct Scope {
    graph::Graph& g;
    graph::ModuleScopePtr saved;
    Scope(graph::Graph& graph, graph::ModuleScopePtr outer) : g(graph), saved(std::move(outer)) {}
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;
    ~Scope() { g.leave_module(std::move(saved)); }
  };
  std::optional<Scope> scope;
  if (mod->source && !is_trampoline_module(*mod->source))  // the module export / optimize(module) traces: no scope
    scope.emplace(graph, graph.enter_module(f.ptr(), reinterpret_cast<PyObject*>(Py_TYPE(f.ptr())),
                                            module_path(*mod->source, fv)));
  // A forward set on the instance (`module.forward = f`, as accelerate's hooks set it) is what _call_impl calls: not
  // traced, the call runs as Python. Its absence is guarded below (NO_HOOKS, or the instance dict's key).
  py::str forward_name("forward");
  PyObject** dict_ptr = _PyObject_GetDictPtr(f.ptr());
  PyObject* inst_dict = dict_ptr && *dict_ptr && PyDict_Check(*dict_ptr) ? *dict_ptr : nullptr;  // borrowed
  if (inst_dict && PyDict_Contains(inst_dict, forward_name.ptr()) != 0)
    unsupported("call of a module whose forward was set on the instance (module.forward = ...)");
  auto hooks_of = [&](const char* d) { return py::getattr(f, d, py::none()); };
  auto size_of = [](const py::object& hooks) { return hooks.is_none() ? size_t{0} : py::len(hooks); };
  for (const char* d : {"_backward_pre_hooks", "_backward_hooks"})
    if (size_of(hooks_of(d)) != 0) unsupported(std::string("module call with ") + d + " registered");
  guard_no_global_module_hooks(*this, "module call");
  py::object pre = hooks_of("_forward_pre_hooks");
  py::object post = hooks_of("_forward_hooks");
  py::object pre_kw = py::none(), post_kw = py::none();
  if (size_of(pre) == 0 && size_of(post) == 0) {
    guards.add(guards::no_module_hooks(mod->source));  // the common case: one C-level check
  } else {
    auto guarded = [&](const char* d) {
      py::object hooks = hooks_of(d);
      if (!hooks.is_none()) ModuleHooks::guard_hook_dict(*this, guards::Source::attr(mod->source, d), hooks);
      return hooks;
    };
    for (const char* d : {"_backward_hooks", "_backward_pre_hooks", "_forward_pre_hooks", "_forward_hooks"}) guarded(d);
    guards.add(guards::dict_contains(guards::Source::attr(mod->source, "__dict__"), forward_name.ptr(), false));
    if (size_of(pre)) pre_kw = guarded("_forward_pre_hooks_with_kwargs");
    if (size_of(post)) {
      post_kw = guarded("_forward_hooks_with_kwargs");
      guarded("_forward_hooks_always_called");  // only matters when forward raises
    }
  }

  auto kwargs_dict = [&] {
    std::vector<py::object> keys;
    std::vector<ValuePtr> values;
    for (auto& kv : kwargs) {
      keys.push_back(py::str(kv.first));
      values.push_back(kv.second);
    }
    return Value::dict(std::move(keys), std::move(values));
  };
  // Each hook is read through its dict (its closure and defaults are then guarded like any function's).
  SourcePtr pre_src = guards::Source::attr(mod->source, "_forward_pre_hooks");
  SourcePtr post_src = guards::Source::attr(mod->source, "_forward_hooks");
  for (auto kv : py::reinterpret_borrow<py::dict>(size_of(pre) ? pre : py::dict())) {
    ValuePtr hook = wrap(kv.second, guards::Source::dict_item_key(pre_src, kv.first.ptr()));
    bool with_kwargs = !pre_kw.is_none() && PyDict_Contains(pre_kw.ptr(), kv.first.ptr()) == 1;
    ValuePtr r = with_kwargs ? call(hook, {mod, Value::tuple(args), kwargs_dict()}, {})
                             : call(hook, {mod, Value::tuple(args)}, {});
    if (is_none(r)) continue;
    if (with_kwargs) {
      if (r->kind != VKind::Tuple || r->items.size() != 2 || r->items[1]->kind != VKind::Dict)
        unsupported("forward pre-hook with kwargs returning " + r->describe());
      args = unpack_iterable(r->items[0]);
      kwargs.clear();
      for (size_t i = 0; i < r->items[1]->keys.size(); ++i)
        kwargs.emplace_back(py::str(r->items[1]->keys[i]).cast<std::string>(), r->items[1]->items[i]);
    } else {
      args = r->kind == VKind::Tuple && !r->tuple_class() ? r->items : std::vector<ValuePtr>{r};
    }
  }
  py::object forward = py::reinterpret_borrow<py::object>(reinterpret_cast<PyObject*>(Py_TYPE(f.ptr())))
                           .attr("forward");
  if (!PyFunction_Check(forward.ptr())) unsupported("module whose forward is not a Python function");
  std::vector<ValuePtr> fwd_args = args;
  PyObject* declared = _PyType_Lookup(Py_TYPE(f.ptr()), py::str("forward").ptr());  // borrowed
  ValuePtr result =
      declared && Py_IS_TYPE(declared, &PyStaticMethod_Type)  // `@staticmethod def forward(x)`: no self
          ? call(wrap(forward, guards::Source::attr(guards::Source::attr(mod->source, "__class__"), "forward")),
                 std::move(fwd_args), kwargs)
          : call_object(ObjectAttrs::bound_method(*this, mod, forward, "forward"), std::move(fwd_args), kwargs);
  for (auto kv : py::reinterpret_borrow<py::dict>(size_of(post) ? post : py::dict())) {
    ValuePtr hook = wrap(kv.second, guards::Source::dict_item_key(post_src, kv.first.ptr()));
    bool with_kwargs = !post_kw.is_none() && PyDict_Contains(post_kw.ptr(), kv.first.ptr()) == 1;
    ValuePtr r = with_kwargs ? call(hook, {mod, Value::tuple(args), kwargs_dict(), result}, {})
                             : call(hook, {mod, Value::tuple(args), result}, {});
    if (!is_none(r)) result = r;
  }
  return result;
}

bool is_plain_python_type(PyTypeObject* type) {
  // The metaclass is type, or abc.ABCMeta (which makes instances as type does); any other: no.
  auto* abc_meta = reinterpret_cast<PyTypeObject*>(PyRefs::get().abc_meta.ptr());
  if (Py_TYPE(type) != &PyType_Type && Py_TYPE(type) != abc_meta) return false;
  if (!(type->tp_flags & Py_TPFLAGS_HEAPTYPE) || type->tp_dictoffset == 0) return false;  // builtin or __slots__
  if (type->tp_new != PyBaseObject_Type.tp_new) return false;  // its own __new__ (or a builtin base's)
  // Only Python classes above it, up to object (no builtin base with hidden state).
  PyObject* mro = type->tp_mro;  // borrowed
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(mro); ++i) {
    auto* t = reinterpret_cast<PyTypeObject*>(PyTuple_GET_ITEM(mro, i));
    if (t != &PyBaseObject_Type && !(t->tp_flags & Py_TPFLAGS_HEAPTYPE)) return false;
  }
  return true;
}

bool is_plain_class(py::handle cls) {
  if (!PyType_Check(cls.ptr())) return false;
  auto* type = reinterpret_cast<PyTypeObject*>(cls.ptr());
  if (type->tp_flags & Py_TPFLAGS_IS_ABSTRACT) return false;  // instantiating it raises TypeError
  if (!is_plain_python_type(type)) return false;
  if (is_nn_module(cls) || _PyType_Lookup(type, py::str("__getattr__").ptr()) ||
      _PyType_Lookup(type, py::str("__setattr__").ptr()) != _PyType_Lookup(&PyBaseObject_Type, py::str("__setattr__").ptr()))
    return false;
  return true;
}

ValuePtr Tracer::make_instance(const ValuePtr& cls, std::vector<ValuePtr> args,
                               std::vector<std::pair<std::string, ValuePtr>> kwargs) {
  ValuePtr inst = Value::new_instance(VKind::Instance, cls);
  auto* type = reinterpret_cast<PyTypeObject*>(cls->obj.ptr());
  PyObject* init = _PyType_Lookup(type, py::str("__init__").ptr());  // borrowed
  if (init == _PyType_Lookup(&PyBaseObject_Type, py::str("__init__").ptr())) {
    if (!args.empty() || !kwargs.empty()) unsupported(describe_class(cls) + "() takes no arguments");
    return inst;
  }
  if (!init || !PyFunction_Check(init)) unsupported(describe_class(cls) + ".__init__ is not a Python function");
  // Guarded as cls.__init__ (so its closure and defaults are guarded through it).
  ValuePtr f = wrap(init, guards::Source::attr(cls->source, "__init__"));
  args.insert(args.begin(), inst);
  ValuePtr r = inline_call(f, std::move(args), std::move(kwargs));
  if (!r->is_const() || !r->obj.is_none()) unsupported("__init__ of " + describe_class(cls) + " returned a value");
  return inst;
}

std::string Tracer::describe_class(const ValuePtr& cls) const {
  return py::str(cls->obj.attr("__qualname__")).cast<std::string>();
}

PyObject* Tracer::getattribute_override(const ValuePtr& inst) const {
  return python_getattribute(reinterpret_cast<PyTypeObject*>(inst->instance().cls->obj.ptr()));
}

ValuePtr Tracer::instance_attr(const ValuePtr& inst, const std::string& name) {
  if (PyObject* ga = getattribute_override(inst)) {
    // The class's own __getattribute__ (a deep-copied transformers config remaps names in it), inlined;
    // guarded as cls.__getattribute__.
    ValuePtr f = wrap(ga, guards::Source::attr(inst->instance().cls->source, "__getattribute__"));
    return inline_call(f, {inst, Value::constant(py::str(name))}, {});
  }
  return instance_generic_attr(inst, name);
}

ValuePtr Tracer::property_getter(PyObject* descr, const SourcePtr& psrc, const std::string& name) {
  if (Py_TYPE(descr)->tp_descr_get != PyProperty_Type.tp_descr_get)
    unsupported("property '" + name + "' of a property subclass with its own __get__");
  py::object fget = py::reinterpret_borrow<py::object>(descr).attr("fget");  // new reference
  if (!PyFunction_Check(fget.ptr())) unsupported("property '" + name + "' with a non-Python getter");
  if (!psrc) return Value::object(fget);
  wrap(descr, psrc);  // ID_MATCH on the property object
  // property.__init__ can be called again on a live property: its getter is pinned as well.
  return wrap(fget, guards::Source::attr(psrc, "fget"));
}

ValuePtr Tracer::instance_generic_attr(const ValuePtr& inst, const std::string& name) {
  if (autograd_.ctx && inst == autograd_.ctx) return autograd_ctx_attr(name);
  if (name == "__class__") return inst->instance().cls;
  if (name == "__dict__") {
    // A view of its attributes, kept equal to them by instance_setattr / instance_delattr; the trace only
    // reads it (see DictOf::frozen).
    ValuePtr& view = inst->instance().dict_view;
    if (!view) {
      view = Value::dict(inst->keys, inst->items);
      view->dict_of().frozen = true;
    }
    return view;
  }
  auto* type = reinterpret_cast<PyTypeObject*>(inst->instance().cls->obj.ptr());
  PyObject* descr = _PyType_Lookup(type, py::str(name).ptr());  // borrowed, may be NULL
  SourcePtr csrc = guards::Source::attr(inst->instance().cls->source, name);
  if (descr && PyObject_TypeCheck(descr, &PyProperty_Type)) {  // a data descriptor wins over the instance
    return inline_call(property_getter(descr, csrc, name), {inst}, {});
  }
  int at = inst->find_key(py::str(name));
  if (at >= 0) return inst->items[static_cast<size_t>(at)];
  if (!descr) {
    // Guarded on the class: the attribute is still missing from it.
    guards.add(guards::has_attr(inst->instance().cls->source, name, false));
    std::string why = "'" + describe_class(inst->instance().cls) + "' object has no attribute '" + name + "'";
    throw TracedRaise(why, py::reinterpret_steal<py::object>(PyObject_CallFunction(PyExc_AttributeError, "s", why.c_str())));
  }
  if (PyFunction_Check(descr)) {
    ValuePtr f = wrap(descr, csrc);
    return Value::bound_method(f->obj, csrc, inst, name);
  }
  if (Py_IS_TYPE(descr, &PyClassMethod_Type) || Py_IS_TYPE(descr, &PyStaticMethod_Type)) {
    wrap(descr, csrc);
    ValuePtr f = Value::object(py::reinterpret_borrow<py::object>(descr).attr("__func__"));
    if (Py_IS_TYPE(descr, &PyClassMethod_Type)) {
      f->payload = BoundOf{inst->instance().cls, name};
    }
    return f;
  }
  if (Py_TYPE(descr)->tp_descr_get) unsupported("class attribute '" + name + "' is a descriptor");
  return wrap(descr, csrc);  // a plain class attribute, guarded on the class
}

void Tracer::store_attr(const ValuePtr& obj, const std::string& name, const ValuePtr& value) {
  if (obj->kind == VKind::Instance) {
    auto* type = reinterpret_cast<PyTypeObject*>(obj->instance().cls->obj.ptr());
    PyObject* setattr_fn = _PyType_Lookup(type, py::str("__setattr__").ptr());  // borrowed
    if (setattr_fn != _PyType_Lookup(&PyBaseObject_Type, py::str("__setattr__").ptr())) {
      // The class's own __setattr__ (a deep-copied transformers config validates and remaps), inlined;
      // guarded as cls.__setattr__. Its super().__setattr__ lands in instance_setattr.
      if (!setattr_fn || !PyFunction_Check(setattr_fn))
        unsupported("attribute assignment on a new " + describe_class(obj->instance().cls) + " object, whose __setattr__ is not Python");
      ValuePtr f = wrap(setattr_fn, guards::Source::attr(obj->instance().cls->source, "__setattr__"));
      ValuePtr r = inline_call(f, {obj, Value::constant(py::str(name)), value}, {});
      if (!r->is_const() || !r->obj.is_none()) unsupported("__setattr__ of " + describe_class(obj->instance().cls) + " returned a value");
      return;
    }
    instance_setattr(obj, name, value);
    return;
  }
  if (obj->kind != VKind::Object || !obj->source || PyModule_Check(obj->obj.ptr()) || PyType_Check(obj->obj.ptr()))
    unsupported("attribute assignment on " + obj->describe());
  if (value->kind == VKind::Iter || value->kind == VKind::Null || value->kind == VKind::Cell || value->made_in_trace())
    unsupported("attribute assignment of " + value->describe());
  attr_stores.push_back({obj, name, value});
}

void Tracer::instance_setattr(const ValuePtr& obj, const std::string& name, const ValuePtr& value) {
  auto* type = reinterpret_cast<PyTypeObject*>(obj->instance().cls->obj.ptr());
  PyObject* descr = _PyType_Lookup(type, py::str(name).ptr());  // borrowed
  if (descr && Py_TYPE(descr)->tp_descr_set) unsupported("assignment to the data descriptor '" + name + "'");
  if (value->kind == VKind::Iter || value->kind == VKind::Null || value->kind == VKind::Cell || value->made_in_trace())
    unsupported("attribute assignment of " + value->describe());
  will_mutate(obj);
  py::str key(name);
  int at = obj->find_key(key);
  if (at >= 0) {
    obj->items[static_cast<size_t>(at)] = value;
  } else {
    obj->keys.push_back(key);
    obj->items.push_back(value);
  }
  sync_dict_view(obj);
}

void Tracer::sync_dict_view(const ValuePtr& obj) {
  const ValuePtr& view = obj->instance().dict_view;
  if (!view) return;
  save_undo(view);
  view->keys = obj->keys;
  view->items = obj->items;
}

void Tracer::instance_delattr(const ValuePtr& obj, const std::string& name) {
  auto* type = reinterpret_cast<PyTypeObject*>(obj->instance().cls->obj.ptr());
  if (_PyType_Lookup(type, py::str("__delattr__").ptr()) != _PyType_Lookup(&PyBaseObject_Type, py::str("__delattr__").ptr()))
    unsupported("delattr on a new " + describe_class(obj->instance().cls) + " object, whose class defines __delattr__");
  PyObject* descr = _PyType_Lookup(type, py::str(name).ptr());  // borrowed
  if (descr && Py_TYPE(descr)->tp_descr_set) unsupported("deletion of the data descriptor '" + name + "'");
  int at = obj->find_key(py::str(name));
  if (at < 0) unsupported("delattr of a missing attribute (AttributeError is raised by Python)");
  will_mutate(obj);
  obj->keys.erase(obj->keys.begin() + at);
  obj->items.erase(obj->items.begin() + at);
  sync_dict_view(obj);
}

ValuePtr Tracer::call_object(const ValuePtr& fn, std::vector<ValuePtr> args,
                             std::vector<std::pair<std::string, ValuePtr>> kwargs) {
  py::handle f = fn->obj;
  if (fn->bound_self() && fn->bound_self()->kind == VKind::Object && is_nn_module(fn->bound_self()->obj))
    if (ValuePtr r = module_iteration(fn->bound_self(), f, fn->bound_name(), args, kwargs)) return r;
  if (fn->bound_self()) {  // a bound Python method: inline with the receiver first
    args.insert(args.begin(), fn->bound_self());
    ValuePtr plain = Value::object(fn->obj, fn->source);
    return inline_call(plain, std::move(args), std::move(kwargs));
  }
  if (fn->source && Py_TYPE(f.ptr()) == reinterpret_cast<PyTypeObject*>(PyRefs::get().functools_partial.ptr())) {
    // A functools.partial from the frame: its function, arguments and keywords read through their sources.
    PartialOf parts;
    parts.fn = wrap(f.attr("func"), guards::Source::attr(fn->source, "func"));
    ValuePtr pargs = wrap(f.attr("args"), guards::Source::attr(fn->source, "args"));
    ValuePtr pkw = wrap(f.attr("keywords"), guards::Source::attr(fn->source, "keywords"));
    if (pargs->kind != VKind::Tuple || pkw->kind != VKind::Dict) unsupported("functools.partial with unusual state");
    parts.args = pargs->items;
    parts.kw_names = pkw->keys;
    parts.kw_values = pkw->items;
    ValuePtr p = Value::partial_of(py::reinterpret_borrow<py::object>(f), std::move(parts));
    return call_partial(p, std::move(args), std::move(kwargs));
  }
  if (fn->source && is_nn_module(f)) return call_module(fn, std::move(args), std::move(kwargs));
  if (kwargs.empty() && !PyType_Check(f.ptr()))  // an object with a Python __call__ (a WeightNorm hook)
    if (ValuePtr r = call_user_dunder(fn, "__call__", args)) return r;
  unsupported("call to " + fn->describe());
}

}  // namespace cdynamo::interp
