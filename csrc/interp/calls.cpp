// calls.cpp — owns symbolic calls: torch functions and tensor methods into the graph (with meta shape
// propagation), operators and pure builtins folded on constants.
#include <functional>
#include <optional>
#include <unordered_set>

#include "guards/tensor_match.h"
#include "interp/meta_cache.h"
#include "interp/torch_rules.h"
#include "interp/tracer.h"
#include "interp/services.h"

namespace cdynamo::interp {

namespace {

bool any_tensor(const ValuePtr& v) {
  if (v->is_tensor()) return true;
  if (v->kind == VKind::Tuple || v->kind == VKind::List || v->kind == VKind::Dict)
    for (const auto& i : v->items)
      if (any_tensor(i)) return true;
  return false;
}

const ValuePtr* first_tensor(const std::vector<ValuePtr>& args) {
  for (const auto& a : args) {
    if (a->is_tensor()) return &a;
    if (a->kind == VKind::Tuple || a->kind == VKind::List) {
      const ValuePtr* r = first_tensor(a->items);
      if (r) return r;
    }
  }
  return nullptr;
}

// The name of `f` when it is the builtins module's own object of that name (len, dict, zip, ...), else "".
std::string builtin_name(py::handle f) {
  if (!PyCFunction_Check(f.ptr()) && !PyType_Check(f.ptr())) return "";
  py::object name = py::getattr(f, "__name__", py::none());
  if (!PyUnicode_Check(name.ptr())) return "";
  PyObject* real = PyDict_GetItemWithError(PyModule_GetDict(PyRefs::get().builtins.ptr()), name.ptr());  // borrowed
  if (!real) {
    PyErr_Clear();
    return "";
  }
  return real == f.ptr() ? name.cast<std::string>() : "";
}

// functools.lru_cache's C wrapper type (named, as the type object is not exported by the C API).
bool is_lru_cache_wrapper(py::handle f) {
  return std::string(Py_TYPE(f.ptr())->tp_name) == "functools._lru_cache_wrapper";
}

bool is_device_like(py::handle o) {
  return PyUnicode_Check(o.ptr()) || py::isinstance(o, PyRefs::get().torch_device);
}

}  // namespace

struct Tracer::CallSupport {
  // Calls `fn(*args, **kwargs)` on meta example values; a Python error becomes Unsupported. An op with no meta
  // kernel (NotImplementedError naming Meta) is run once more on zero-filled real tensors of the same metadata on
  // `device` (cdynamo._meta_fallback, as fake tensors fall back), when a device is given; that refuses ops whose
  // output shape depends on data, mutating ops and outputs that alias inputs.
  static py::object run_meta(Tracer& t, const std::string& what, py::handle fn, py::tuple args, py::dict kwargs,
                             py::handle device = py::handle()) {
    try {
      return t.examples_.run(fn, args, kwargs);
    } catch (py::error_already_set& e) {
      std::string msg = e.what();
      if (!t.dynamic() && services().config.attr("capture_dynamic_output_shape_ops").cast<bool>()) {
        // An op whose output shape depends on the data (nonzero, unique, masked indexing) has no meta result: under
        // capture_dynamic_output_shape_ops the frame is traced again with fake tensors, where its sizes are
        // unbacked symbols.
        t.request_restart(
            Restart::fake_tensors(what + " under capture_dynamic_output_shape_ops (traced again with fake tensors)", true));
      }
      if (device && e.matches(PyExc_NotImplementedError) && msg.find("Meta") != std::string::npos) {
        try {
          // new reference: meta tensors (or a tuple/list of them) with the real kernel's output metadata
          return services().meta_fallback_run()(fn, args, kwargs, device);
        } catch (py::error_already_set& e2) {
          t.unsupported(what + " failed during shape propagation: " + msg + " (and on zero-filled tensors: " +
                        std::string(e2.what()) + ")");
        }
      }
      if (t.dynamic() && services().op_error_is_genuine(e.value()).cast<bool>())
        t.op_raised(what + " failed during shape propagation: " + msg);
      t.unsupported(what + " failed during shape propagation: " + msg);
    }
  }

  // The shape-propagation step of a graph op: run_meta of fn(*args, **kwargs), memoized under `key` when there is one
  // and the examples allow it (meta tensors: ExampleValues::memoizable).
  static py::object propagate(Tracer& t, const std::string& what, py::handle fn, py::tuple args, py::dict kwargs,
                              py::handle device, std::optional<MetaKey>& key) {
    if (!t.examples_.memoizable()) key.reset();
    py::object result = key ? meta_cache_lookup(*key) : py::object();
    if (result) return result;
    result = run_meta(t, what, fn, std::move(args), std::move(kwargs), device);
    if (key) meta_cache_store(*key, result);
    return result;
  }

  // torch._C._has_torch_function*(args): false when no argument can carry __torch_function__ (tensors
  // whose exact type, guarded by TENSOR_MATCH, is torch.Tensor or nn.Parameter, tensors made by the graph,
  // constants); Unsupported otherwise.
  static bool has_torch_function(Tracer& t, const std::string& what, const std::vector<ValuePtr>& args) {
    auto& refs = PyRefs::get();
    std::vector<ValuePtr> work(args.begin(), args.end());
    while (!work.empty()) {
      ValuePtr v = work.back();
      work.pop_back();
      if (v->kind == VKind::Tuple || v->kind == VKind::List) {
        work.insert(work.end(), v->items.begin(), v->items.end());
      } else if (v->is_tensor()) {
        for (const auto& in : t.inputs) {
          py::handle type = py::type::handle_of(in.value);
          if (in.node == v->tensor().node && !type.is(refs.tensor_type) && !type.is(refs.nn_parameter))
            t.unsupported(what + " on a tensor subclass");
        }
      } else if (v->kind == VKind::Object) {
        if (py::hasattr(v->obj, "__torch_function__")) t.unsupported(what + " on an object with __torch_function__");
      } else if (!v->is_const()) {
        t.unsupported(what + " on " + v->describe());
      }
    }
    return false;
  }
};

bool foldable(const ValuePtr& v) {
  switch (v->kind) {
    case VKind::Const: return true;
    case VKind::Set: return !v->tensor_keyed();  // elements are constants; folded on a fresh set
    case VKind::Dict:
      if (v->default_dict()) return false;  // folded as a plain dict, its type would change
      [[fallthrough]];
    case VKind::Tuple:
    case VKind::List:
      for (const auto& i : v->items)
        if (!foldable(i)) return false;
      return true;
    case VKind::Object: {
      PyObject* o = v->obj.ptr();
      // An exception a handler of an inlined function caught (made in the trace, of a builtin class: its
      // str/repr are pure).
      if (!v->source && v->is_traced_exception() && PyExceptionInstance_Check(o) &&
          !(Py_TYPE(o)->tp_flags & Py_TPFLAGS_HEAPTYPE))
        return true;
      return PyType_Check(o) || PyFunction_Check(o) || PyCFunction_Check(o) || PyModule_Check(o);
    }
    default: return false;
  }
}

ValuePtr Tracer::fold_call(py::handle f, const std::string& what, const std::vector<ValuePtr>& args,
                           const std::vector<std::pair<std::string, ValuePtr>>& kwargs) {
  if (kwargs.empty())
    if (ValuePtr r = sym_builtin(f, args)) return r;  // int(), max(), math.sqrt() of a symbolic size
  // Only values that cannot change or be consumed by the call (constants, classes, functions, modules)
  // are folded: an iterator, a user object or a dict folded at trace time would be used up or go stale
  // (`list(enumerate(...))`, a global dict read by the graph).
  for (const auto& a : args)
    if (!foldable(a)) unsupported(what + " on " + a->describe() + " (not a constant)");
  for (const auto& kv : kwargs)
    if (!foldable(kv.second)) unsupported(what + " on " + kv.second->describe() + " (not a constant)");
  // Lists, dicts and sets are folded on fresh copies: a function that changes its argument (operator's
  // item and in-place functions) or answers with its identity (id) cannot be, nor can iter/int of one.
  static const std::unordered_set<std::string> needs_the_object = {
      "setitem", "delitem", "iadd", "iand", "iconcat", "ifloordiv", "ilshift", "imatmul", "imod", "imul",
      "ior", "ipow", "irshift", "isub", "itruediv", "ixor", "id", "iter", "int"};
  std::string fname = py::str(py::getattr(f, "__name__", py::str(""))).cast<std::string>();
  if (needs_the_object.count(fname))
    for (const auto& a : args)
      if (a->is_container()) unsupported(what + " would change " + a->describe());
  py::tuple pargs(args.size());
  for (size_t i = 0; i < args.size(); ++i) pargs[i] = args[i]->as_python();
  py::dict pkw;
  for (const auto& kv : kwargs) pkw[py::str(kv.first)] = kv.second->as_python();
  py::object r;
  try {
    r = f(*pargs, **pkw);
  } catch (py::error_already_set& e) {
    unsupported(what + " raised during constant folding: " + std::string(e.what()));
  }
  if (is_constant_object(r)) return Value::constant(r);
  if (PyTuple_CheckExact(r.ptr()) || PyList_CheckExact(r.ptr())) {
    std::vector<ValuePtr> items;
    for (auto item : py::reinterpret_borrow<py::sequence>(r)) {
      // Classes too (typing.get_args(Optional[int]) is (int, NoneType)), as a folded class is.
      if (PyType_Check(item.ptr())) {
        items.push_back(Value::object(py::reinterpret_borrow<py::object>(item)));
        continue;
      }
      if (!is_constant_object(item)) unsupported(what + " produced a non-constant sequence");
      items.push_back(Value::constant(py::reinterpret_borrow<py::object>(item)));
    }
    return PyTuple_CheckExact(r.ptr()) ? Value::tuple(std::move(items)) : Value::list(std::move(items));
  }
  if (PyType_Check(r.ptr())) return Value::object(r);
  unsupported(what + " produced " + std::string(Py_TYPE(r.ptr())->tp_name));
}

ValuePtr Tracer::signature_of(const ValuePtr& fn, const std::vector<ValuePtr>& args,
                              const std::vector<std::pair<std::string, ValuePtr>>& kwargs) {
  // inspect.signature(f) of a Python function, or of a method bound to an object of the frame: computed
  // now (the function is guarded by identity, a method through its receiver's class), a constant.
  static PyObject* signature = py::object(loaded_module("inspect").attr("signature")).release().ptr();
  if (fn->kind != VKind::Object || fn->obj.ptr() != signature || args.size() != 1 || !kwargs.empty()) return nullptr;
  const ValuePtr& f = args[0];
  if (f->kind != VKind::Object || !f->obj || !PyFunction_Check(f->obj.ptr()) || f->made_in_trace()) return nullptr;
  py::object target = f->obj;
  if (f->bound_self()) {
    if (f->bound_self()->kind != VKind::Object || !f->bound_self()->obj || f->is_modelled()) return nullptr;
    target = py::reinterpret_steal<py::object>(PyMethod_New(f->obj.ptr(), f->bound_self()->obj.ptr()));  // new
    if (!target) throw py::error_already_set();
  }
  return Value::constant(py::handle(signature)(target));
}

struct Tracer::CallSteps {
  // A bound method value (VKind::Method): namedtuple._replace / _asdict, the ctx of an autograd.Function speculation,
  // os.environ, the methods of containers and records, else a tensor method.
  static ValuePtr call_method_value(Tracer& t, const ValuePtr& fn, std::vector<ValuePtr> args, Kwargs kwargs) {
    const ValuePtr& self = fn->bound_self();
    const std::string& name = fn->bound_name();
    if (self->kind == VKind::Tuple && self->tuple_class() && (name == "_replace" || name == "_asdict")) {
      py::object cls = py::reinterpret_borrow<py::object>(self->tuple_class());
      if (is_structseq_class(cls)) t.unsupported("struct sequence ." + name + "()");
      py::tuple fields = cls.attr("_fields");
      if (name == "_asdict" && args.empty() && kwargs.empty()) {
        std::vector<py::object> keys;
        for (auto k : fields) keys.push_back(py::reinterpret_borrow<py::object>(k));
        return Value::dict(std::move(keys), self->items);
      }
      if (name == "_replace" && args.empty()) {
        Kwargs all;
        for (size_t i = 0; i < fields.size(); ++i) all.emplace_back(py::str(fields[i]).cast<std::string>(), self->items[i]);
        for (auto& kv : kwargs)
          if (!set_kwarg(all, kv.first, kv.second)) t.unsupported("namedtuple._replace with an unknown field '" + kv.first + "'");
        return t.make_namedtuple(cls, {}, all);
      }
    }
    if (t.autograd_.ctx && self == t.autograd_.ctx) return t.autograd_ctx_call(name, args, kwargs);
    if (t.is_environ(self)) return t.environ_call(self, name, args, kwargs);
    switch (self->kind) {
      case VKind::Dict: return t.call_dict_method(self, name, std::move(args), std::move(kwargs));
      case VKind::List:
      case VKind::Tuple: return t.call_list_method(self, name, std::move(args), std::move(kwargs));
      case VKind::Set: return t.call_set_method(self, name, std::move(args), std::move(kwargs));
      case VKind::Record: return t.call_record_method(self, name, std::move(args), std::move(kwargs));
      default: return t.call_tensor_method(self, name, std::move(args), std::move(kwargs));
    }
  }

  // Values the trace models itself: functools.partial, inspect.signature, the slots found through super(), the
  // __exit__ of a traced `with` block. nullptr for any other value.
  static ValuePtr call_modelled(Tracer& t, const ValuePtr& fn, std::vector<ValuePtr>& args, Kwargs& kwargs) {
    if (fn->partial()) return t.call_partial(fn, std::move(args), std::move(kwargs));
    if (ValuePtr sig = t.signature_of(fn, args, kwargs)) return sig;
    if (const SlotOf* slot = fn->slot()) {
      switch (slot->slot) {
        case Slot::Noop:
          if (args.empty() && kwargs.empty()) return Value::constant(py::none());
          break;
        case Slot::SuperGetattribute:
          if (fn->kind == VKind::Object) return t.generic_getattr(slot->self, args, kwargs);
          break;
        case Slot::SuperSetattr:
          if (fn->kind != VKind::Object) break;
          if (args.size() != 2 || !kwargs.empty() || !args[0]->is_const() || !PyUnicode_Check(args[0]->obj.ptr()))
            t.unsupported("super().__setattr__ with a non-constant name");
          t.instance_setattr(slot->self, args[0]->obj.cast<std::string>(), args[1]);
          return Value::constant(py::none());
        case Slot::SuperDictGet:
        case Slot::SuperDictGetitem:
        case Slot::SuperDictContains:
          if (fn->kind == VKind::Object) return t.super_dict_call(slot->self, slot_method_name(slot->slot), args, kwargs);
          break;
      }
    }
    if (fn->ctx_exit()) {  // leaving a traced torch context block normally
      t.exit_torch_context(fn);
      return Value::constant(py::none());
    }
    if (const GradExitOf* g = fn->grad_exit()) {  // leaving a traced `with` block normally: __exit__(None, None, None)
      if (g->mode != kNoopExit) t.set_grad_mode(g->mode == 1);
      return Value::constant(py::none());
    }
    return nullptr;
  }

  // record_function(name, args=None) / nullcontext(enter_result=None) made now from constant arguments.
  static ValuePtr make_noop_context(Tracer& t, py::handle f, const std::vector<ValuePtr>& args, const Kwargs& kwargs) {
    py::tuple real(args.size());
    py::dict kw;
    for (size_t i = 0; i < args.size(); ++i) {
      if (!args[i]->is_const()) t.unsupported(callable_name(f) + "() with " + args[i]->describe());
      real[i] = args[i]->obj;
    }
    for (const auto& kv : kwargs) {
      if (!kv.second->is_const()) t.unsupported(callable_name(f) + "() with " + kv.second->describe());
      kw[py::str(kv.first)] = kv.second->obj;
    }
    return Value::object(f(*real, **kw));
  }

  // `with torch.set_grad_enabled(b):` (b a constant bool; the call right before BEFORE_WITH, or returned at once by a
  // function the `with` calls for its context): its block is that of torch.enable_grad() / no_grad()
  // (set_grad_enabled switches at construction, its __enter__ does nothing, its __exit__ restores the mode before
  // it; nothing runs in between). nullptr for any other call.
  static ValuePtr set_grad_enabled_block(Tracer& t, py::handle f, const std::vector<ValuePtr>& args,
                                         const Kwargs& kwargs) {
    static PyObject* cls = py::object(loaded_module("torch").attr("set_grad_enabled")).release().ptr();  // owned
    if (f.ptr() != cls || t.pc + 1 >= t.bc.insts.size()) return nullptr;
    const std::string next = bytecode::opname(t.bc.insts[t.pc + 1]->opcode);
    const bool returned_to_with = next == "RETURN_VALUE" && !t.call_enters_with_.empty() && t.call_enters_with_.back();
    if (next != "BEFORE_WITH" && !returned_to_with) return nullptr;
    const ValuePtr* mode = args.size() == 1 && kwargs.empty()                          ? &args[0]
                           : args.empty() && kwargs.size() == 1 && kwargs[0].first == "mode" ? &kwargs[0].second
                                                                                            : nullptr;
    if (!mode || !(*mode)->is_const() || !PyBool_Check((*mode)->obj.ptr())) return nullptr;
    auto& refs = PyRefs::get();
    return Value::object(((*mode)->obj.ptr() == Py_True ? refs.torch.attr("enable_grad") : refs.torch.attr("no_grad"))());
  }

  // Python objects the trace knows by what they are (before torch's trace rules classify the callable): bound methods,
  // autograd.Function.apply, context classes, builtin exceptions before `raise`, dict / namedtuple / user classes /
  // records, the builtin rules (builtins.cpp), id(), set(), the iteration builtins and constant folding of a
  // constant's methods. nullptr when none applies.
  static ValuePtr call_known_object(Tracer& t, const ValuePtr& fn, std::vector<ValuePtr>& args, Kwargs& kwargs) {
    py::handle f = fn->obj;
    if (fn->made_module()) return call_made_module(t, fn, std::move(args), std::move(kwargs));
    if (ValuePtr m = make_nn_module(t, fn, args, kwargs)) return m;  // nn.Softmax(dim=-1) inside a forward
    // A bound method calls its function with the receiver first, whatever the function is.
    if (fn->bound_self() && fn->kind == VKind::Object) return t.call_object(fn, std::move(args), std::move(kwargs));
    if (fn->kind == VKind::Object)
      if (ValuePtr r = t.autograd_function_apply(fn, args, kwargs)) return r;
    if (is_grad_context_class(f) && args.empty() && kwargs.empty()) return Value::object(f());
    if (ValuePtr c = set_grad_enabled_block(t, f, args, kwargs)) return c;
    if (ValuePtr c = t.torch_context_call(f, args, kwargs)) return c;
    if (is_noop_context_class(f)) return make_noop_context(t, f, args, kwargs);
    if ((t.inline_depth() > 0 || t.in_user_try(t.pc)) && kwargs.empty() && is_builtin_exception_class(f) &&
        t.pc + 1 < t.bc.insts.size() && t.bc.insts[t.pc + 1]->opcode == bytecode::opcode_by_name("RAISE_VARARGS") &&
        t.bc.insts[t.pc + 1]->arg == 1)
      t.raise_builtin_exception(f, args);  // `raise IndexError("...")` in an inlined function or a try of the frame
    if (f.is(unbound_cell_check()) && args.size() == 2 && args[0]->kind == VKind::Cell) {
      // A continuation's check before it reads or deletes a cell of the function it continues (codegen/graph_break.cpp).
      if (!args[0]->cell().content) t.unsupported("a read or del of a deleted variable (UnboundLocalError)");
      return Value::constant(py::none());
    }
    std::string bname = builtin_name(f);
    if (bname == "dict") return t.make_dict(args, kwargs);
    if (is_namedtuple_class(f)) return t.make_namedtuple(f, args, kwargs);
    if (fn->kind == VKind::Object && fn->source && !fn->bound_self() && is_plain_class(f))
      return t.make_instance(fn, std::move(args), std::move(kwargs));
    if (fn->kind == VKind::Object && fn->source && !fn->bound_self() && is_record_class(f))
      return t.make_record(fn, std::move(args), std::move(kwargs));
    if (ValuePtr r = t.call_builtin(bname, f, args, kwargs)) return r;
    if (bname == "id" && args.size() == 1 && kwargs.empty() && args[0]->kind == VKind::Object && args[0]->source &&
        !args[0]->bound_self() && !guards::is_tensor(args[0]->obj.ptr())) {
      // id() of an object read from the frame (parametrize's cache key): a constant, the object pinned by identity.
      t.guards.add(guards::id_match(args[0]->source, args[0]->obj.ptr()));
      return Value::constant(py::int_(reinterpret_cast<uintptr_t>(args[0]->obj.ptr())));
    }
    if ((bname == "set" || bname == "frozenset") && kwargs.empty()) return t.make_set(args, bname == "frozenset");
    if (!bname.empty() && kwargs.empty())
      if (ValuePtr r = t.call_iter_builtin(bname, args)) return r;
    // Methods of immutable constants ("a_b".split("_"), name.startswith(...)) fold on constant arguments.
    if (PyCFunction_Check(f.ptr()) && kwargs.empty()) {
      PyObject* recv = PyCFunction_GET_SELF(f.ptr());  // borrowed
      if (recv && !PyModule_Check(recv) && is_constant_object(py::handle(recv)) && !guards::is_tensor(recv)) {
        bool all = true;
        for (const auto& a : args) all = all && foldable(a);
        if (all) return t.fold_call(f, callable_name(f), args, {});
      }
    }
    return nullptr;
  }

  // isinstance(tensor, classes): the class argument a class or a tuple of classes (nested tuples flattened, as
  // isinstance does); answered from the tensor's guarded exact type (its TENSOR_MATCH), torch.Tensor for a tensor the
  // graph made. The legacy types (torch.FloatTensor, ...) check dtype, device type and layout. nullptr when unknown.
  static ValuePtr tensor_isinstance(Tracer& t, const ValuePtr& v, const ValuePtr& clsinfo) {
    std::vector<py::object> classes;
    bool known = true;
    std::function<void(const ValuePtr&)> collect = [&](const ValuePtr& c) {
      if (c->kind == VKind::Object && PyType_Check(c->obj.ptr())) {
        classes.push_back(c->obj);
      } else if (c->kind == VKind::Tuple && !c->tuple_class()) {
        for (const auto& i : c->items) collect(i);
      } else {
        known = false;
      }
    };
    collect(clsinfo);
    graph::Node* vnode = v->tensor().node;
    PyObject* real_cls = vnode && vnode->op == graph::OpKind::Placeholder ? nullptr : PyRefs::get().tensor_type.ptr();
    if (!real_cls)
      for (const auto& in : t.inputs)
        if (in.node == vnode) real_cls = reinterpret_cast<PyObject*>(Py_TYPE(in.value.ptr()));
    if (!known || !real_cls) return nullptr;
    bool r = false;
    for (const auto& cls : classes) {
      py::handle meta = reinterpret_cast<PyObject*>(Py_TYPE(cls.ptr()));
      if (py::str(meta.attr("__module__")).cast<std::string>() == "torch" &&
          py::str(meta.attr("__name__")).cast<std::string>() == "tensortype") {
        r = r || (v->tensor().example.attr("dtype").equal(cls.attr("dtype")) &&
                  v->tensor().device.attr("type").cast<std::string>() == (cls.attr("is_cuda").cast<bool>() ? "cuda" : "cpu") &&
                  v->tensor().example.attr("is_sparse").cast<bool>() == cls.attr("is_sparse").cast<bool>());
        continue;
      }
      int sub = PyObject_IsSubclass(real_cls, cls.ptr());
      if (sub < 0) throw py::error_already_set();
      r = r || sub == 1;
    }
    return Value::constant(py::bool_(r));
  }

  // A pure builtin, an operator or a torch metadata function: on tensors an operator node, a metadata answer from the
  // meta examples, abs / pow as the tensor's operators, isinstance of a tensor; on constants folded now.
  static ValuePtr call_pure(Tracer& t, CallKind kind, py::handle f, std::vector<ValuePtr>& args, Kwargs& kwargs) {
    bool tensors = false;
    for (const auto& a : args) tensors |= any_tensor(a);
    for (const auto& kv : kwargs) tensors |= any_tensor(kv.second);
    if (!tensors) return t.fold_call(f, "call to " + callable_name(f), args, kwargs);
    if (kind == CallKind::Operator && kwargs.empty()) return t.apply_operator(f, std::move(args));
    if (kind == CallKind::TorchMetadata) {
      py::tuple margs(args.size());
      for (size_t i = 0; i < args.size(); ++i) margs[i] = t.to_example(args[i]);
      py::dict mkw;
      for (auto& kv : kwargs) mkw[py::str(kv.first)] = t.to_example(kv.second);
      py::object r = CallSupport::run_meta(t, callable_name(f), f, margs, mkw);
      if (!is_constant_object(r)) t.unsupported(callable_name(f) + " returned a non-constant");
      return Value::constant(r);
    }
    std::string name = callable_name(f);
    if (((name == "abs" && args.size() == 1) || (name == "pow" && args.size() == 2)) && kwargs.empty())
      return t.apply_operator(PyRefs::get().operator_mod.attr(name.c_str()), std::move(args));
    if (name == "isinstance" && args.size() == 2 && args[0]->is_tensor() && kwargs.empty())
      if (ValuePtr r = tensor_isinstance(t, args[0], args[1])) return r;
    t.unsupported("call to " + name + " with tensor arguments");
  }

  // A torch function: one graph op; a Python function of torch (torch.nn.functional's) is one op when it runs on meta
  // tensors and returns tensors, otherwise (None in its result, a Python-level check) its body is inlined, the nodes
  // of the failed attempt rolled back so that the retry starts from the same state.
  static ValuePtr call_torch_op(Tracer& t, const ValuePtr& fn, std::vector<ValuePtr>& args, Kwargs& kwargs) {
    py::handle f = fn->obj;
    if (!PyFunction_Check(f.ptr())) return t.call_torch(f, std::move(args), std::move(kwargs), false);
    size_t mark = t.graph.mark();
    try {
      return t.call_torch(f, args, kwargs, false);
    } catch (const Unsupported&) {
      t.graph.rollback(mark);
      return t.inline_call(fn, std::move(args), std::move(kwargs));
    }
  }

  // torch.compiler.is_compiling() and its aliases: True in every traced part. Only torch's own code (torch.optim:
  // _get_value, _stack_if_compiling, the capturable checks) is held to Tracer::compiling_folds.
  static ValuePtr compiling_query(Tracer& t, py::handle f, const std::vector<ValuePtr>& args, const Kwargs& kwargs) {
    if (!args.empty() || !kwargs.empty()) t.unsupported(callable_name(f) + " with arguments");
    if (PyUnicode_Check(t.code->co_filename)) {
      const char* file = PyUnicode_AsUTF8(t.code->co_filename);  // borrowed buffer
      if (!file) throw py::error_already_set();
      if (std::string(file).find("/torch/") != std::string::npos) ++t.compiling_folds;
    }
    return Value::constant(py::bool_(true));
  }

  // torch._assert(cond, msg): a condition known while tracing (a guarded size compared with a constant) that holds has
  // no effect; a false or run-time (tensor) condition runs as Python, which raises or checks it.
  static ValuePtr torch_assert(Tracer& t, const std::vector<ValuePtr>& args, const Kwargs& kwargs) {
    ValuePtr cond = !args.empty() ? args[0] : nullptr;
    for (const auto& kv : kwargs)
      if (kv.first == "condition") cond = kv.second;
    if (!cond || cond->kind != VKind::Const || args.size() + kwargs.size() != 2)
      t.unsupported("torch._assert on a condition known only at run time");
    int truth = PyObject_IsTrue(cond->obj.ptr());
    if (truth < 0) PyErr_Clear();
    if (truth != 1) t.unsupported("torch._assert whose condition is false while tracing");
    return Value::constant(py::none());
  }

  // A callable nothing above knew: a Python function is inlined; functools.lru_cache over a function marked
  // assume_constant_result (transformers' install probes such as is_torch_distributed_available) is called while
  // tracing through the cache, as eager calls it, its result a constant (torch._dynamo reads the mark past the cache
  // wrapper); other objects are called through their class (call_object). nullptr: unsupported.
  // The Python function behind a wrapper torch._dynamo inlines: a torch.jit.script'ed function (torch.jit.script
  // keeps it as `_torchdynamo_inline`) or a function compiled by cdynamo.optimize called inside another trace (its
  // `_fn`, when its callback captures: not disable()'s None nor run()'s sentinel). Read through the wrapper's source,
  // so it is guarded; nullptr for any other callable.
  static ValuePtr wrapped_python_function(Tracer& t, const ValuePtr& fn) {
    py::handle f = fn->obj;
    if (fn->kind != VKind::Object || !fn->source || fn->bound_self() || PyFunction_Check(f.ptr())) return nullptr;
    static PyObject* script_fn =
        py::object(loaded_module("torch._C").attr("ScriptFunction")).release().ptr();  // process lifetime
    const std::string tname = Py_TYPE(f.ptr())->tp_name;
    const char* attr = nullptr;
    if (reinterpret_cast<PyObject*>(Py_TYPE(f.ptr())) == script_fn) {
      attr = "_torchdynamo_inline";
    } else if (tname == "cdynamo._C.OptimizedCallable") {
      py::object cb = py::getattr(f, "_callback", py::none());  // run()'s sentinel is a bare object()
      if (cb.is_none() || Py_TYPE(cb.ptr()) == &PyBaseObject_Type) return nullptr;
      attr = "_fn";
    } else {
      return nullptr;
    }
    py::object inner = py::getattr(f, attr, py::none());
    if (!PyFunction_Check(inner.ptr())) return nullptr;
    return t.wrap(inner, guards::Source::attr(fn->source, attr));
  }

  static ValuePtr call_unknown(Tracer& t, const ValuePtr& fn, std::vector<ValuePtr>& args, Kwargs& kwargs) {
    py::handle f = fn->obj;
    if (PyFunction_Check(f.ptr())) return t.inline_call(fn, std::move(args), std::move(kwargs));
    if (ValuePtr inner = wrapped_python_function(t, fn)) return t.call(inner, std::move(args), std::move(kwargs));
    if (is_lru_cache_wrapper(f)) {
      py::object wrapped = py::getattr(f, "__wrapped__", py::none());
      if (marked_constant_result(wrapped)) return t.call_constant_result(fn, args, kwargs);
    }
    if (fn->kind == VKind::Object && !PyType_Check(f.ptr())) return t.call_object(fn, std::move(args), std::move(kwargs));
    return nullptr;
  }

  // The callable as torch_rules classifies it (classify_callable): torch ops, queries answered while tracing, jit
  // helpers, pure builtins and operators, and the rest.
  static ValuePtr call_by_rule(Tracer& t, const ValuePtr& fn, std::vector<ValuePtr>& args, Kwargs& kwargs) {
    py::handle f = fn->obj;
    CallKind kind = classify_callable(f);
    switch (kind) {
      case CallKind::GraphBreak: t.unsupported("cdynamo.graph_break() was called");
      case CallKind::GradModeQuery:
        // Grad mode is known at every point of the trace (guarded at entry, switched only by traced `with`s).
        if (!args.empty() || !kwargs.empty()) t.unsupported("torch.is_grad_enabled() with arguments");
        return Value::constant(py::bool_(guards::grad_mode_enabled()));
      case CallKind::AutocastQuery:
        // The autocast switches are guarded; the answer for this trace is the one Python gives now.
        t.guards.add(guards::autocast_guard());
        return t.fold_call(f, callable_name(f), args, kwargs);
      case CallKind::TorchFunctionQuery:
        return Value::constant(py::bool_(CallSupport::has_torch_function(t, callable_name(f), args)));
      case CallKind::DispatchModeStackQuery:
        // The stack's depth is part of GLOBAL_STATE (every entry guards it): empty now means empty when the graph
        // runs. A non-empty stack holds mode objects the trace does not model.
        if (!args.empty() || !kwargs.empty()) t.unsupported(callable_name(f) + " with arguments");
        if (guards::dispatch_mode_stack_len() != 0) t.unsupported(callable_name(f) + " while a TorchDispatchMode is active");
        return Value::list({});
      case CallKind::Disallowed: t.unsupported("call to " + callable_name(f) + ", which is marked disallow_in_graph");
      case CallKind::TorchOp: return call_torch_op(t, fn, args, kwargs);
      case CallKind::AllowedInGraph: return t.call_torch(f, std::move(args), std::move(kwargs), false);
      case CallKind::TorchFactory: return t.call_torch(f, std::move(args), std::move(kwargs), true);
      case CallKind::CompilingQuery: return compiling_query(t, f, args, kwargs);
      case CallKind::TorchAssert: return torch_assert(t, args, kwargs);
      case CallKind::JitAnnotate:
        if (args.size() != 2 || !kwargs.empty()) t.unsupported("torch.jit.annotate with other than two arguments");
        return args[1];
      case CallKind::JitUnwrapOptional:
        if (args.size() != 1 || !kwargs.empty()) t.unsupported("torch.jit._unwrap_optional with other than one argument");
        if (args[0]->is_const() && args[0]->obj.is_none()) t.unsupported("torch.jit._unwrap_optional(None) raises");
        return args[0];
      case CallKind::JitIsinstance:
        // Outside TorchScript, container refinement is plain isinstance for a class (typing forms are not traced).
        if (args.size() != 2 || !kwargs.empty() || args[1]->kind != VKind::Object || !PyType_Check(args[1]->obj.ptr()))
          t.unsupported("torch.jit.isinstance with a typing form (only a class is traced)");
        return t.call(Value::object(PyRefs::get().builtins.attr("isinstance")), std::move(args), {});
      case CallKind::TorchMetadata:
      case CallKind::Operator:
      case CallKind::PureBuiltin: return call_pure(t, kind, f, args, kwargs);
      case CallKind::Unknown:
        if (ValuePtr r = call_unknown(t, fn, args, kwargs)) return r;
        break;
    }
    t.unsupported("call to " + callable_name(f) + " is not supported (not a torch operation)");
  }
};

// A call, dispatched in this order: bound-method values, values the trace models, objects it knows, then torch's
// trace rules (see the helpers above; docs/architecture.md "How to add a builtin / a library rule").
ValuePtr Tracer::call(const ValuePtr& fn, std::vector<ValuePtr> args,
                      std::vector<std::pair<std::string, ValuePtr>> kwargs) {
  if (fn->kind == VKind::Method) return CallSteps::call_method_value(*this, fn, std::move(args), std::move(kwargs));
  if (ValuePtr r = random_call(fn, args, kwargs)) return r;      // random_calls.cpp
  if (ValuePtr r = subclasses_call(fn, args, kwargs)) return r;  // class_queries.cpp
  if (ValuePtr r = CallSteps::call_modelled(*this, fn, args, kwargs)) return r;
  if (fn->kind != VKind::Object && fn->kind != VKind::Const) unsupported("call to " + fn->describe());
  if (ValuePtr r = CallSteps::call_known_object(*this, fn, args, kwargs)) return r;
  return CallSteps::call_by_rule(*this, fn, args, kwargs);
}

ValuePtr Tracer::call_torch(py::handle fn, std::vector<ValuePtr> args,
                            std::vector<std::pair<std::string, ValuePtr>> kwargs, bool factory) {
  auto& refs = PyRefs::get();
  std::vector<graph::Arg> gargs;
  py::tuple margs(args.size());
  for (size_t i = 0; i < args.size(); ++i) {
    gargs.push_back(to_arg(args[i]));
    margs[i] = to_example(args[i]);
  }
  std::vector<std::pair<std::string, graph::Arg>> gkwargs;
  py::dict mkw;
  py::object device;
  if (const ValuePtr* ft = first_tensor(args)) device = (*ft)->tensor().device;
  for (auto& kv : kwargs) {
    gkwargs.emplace_back(kv.first, to_arg(kv.second));
    if (kv.first == "device" && kv.second->is_const() && !kv.second->obj.is_none()) {
      device = refs.torch_device(kv.second->obj);
      mkw["device"] = examples_.device_arg(device);  // fake tensors keep their real device
    } else {
      mkw[py::str(kv.first)] = to_example(kv.second);
    }
  }
  if (!device) {
    if (!factory) {
      std::vector<ValuePtr> kwvals;  // torch.cat(tensors=[a, b]): a tensor in a keyword argument's list too
      for (auto& kv : kwargs) kwvals.push_back(kv.second);
      if (const ValuePtr* ft = first_tensor(kwvals)) device = (*ft)->tensor().device;
    }
    if (!device) {
      // A tensor created from nothing lands on torch's default device.
      device = refs.torch.attr("get_default_device")();
      mkw["device"] = examples_.device_arg(device);
    }
  }
  std::string name = callable_name(fn);
  // Memoized shape propagation for torch's own (process-lifetime) functions; never for in-place ones.
  std::optional<MetaKey> key;
  CallKind kind = classify_callable(fn);
  if ((kind == CallKind::TorchOp || kind == CallKind::TorchFactory) && !name.empty() && name.back() != '_' &&
      examples_.memoizable()) {
    key.emplace("F" + std::to_string(reinterpret_cast<uintptr_t>(fn.ptr())));
    for (const auto& a : args) key->add(a);
    for (const auto& kv : kwargs) key->add_kw(kv.first, kv.second);
  }
  py::object result = CallSupport::propagate(*this, name, fn, margs, mkw, device, key);
  if (!guards::is_tensor(result.ptr()) && !PyTuple_Check(result.ptr()) && !PyList_Check(result.ptr()))
    unsupported(name + " returned " + std::string(Py_TYPE(result.ptr())->tp_name) + ", not a tensor");
  graph::Node* n = graph.call_function(py::reinterpret_borrow<py::object>(fn), std::move(gargs), std::move(gkwargs),
                                       result);
  return wrap_result(n, result, device);
}

ValuePtr Tracer::call_tensor_method(const ValuePtr& self, const std::string& name, std::vector<ValuePtr> args,
                                    std::vector<std::pair<std::string, ValuePtr>> kwargs) {
  auto& refs = PyRefs::get();
  py::object device = self->is_tensor() ? self->tensor().device : py::object();
  if (name == "type") return tensor_type(self, args, kwargs);
  if (name == "item" && args.empty() && kwargs.empty() && self->is_tensor() &&
      services().config.attr("capture_scalar_outputs").cast<bool>())
    return scalar_output(self);
  if (ValuePtr r = optimizer_op_decomposition(self, name, args, kwargs)) return r;  // optimizer.cpp
  if (name == "new_tensor") return new_tensor_call(*this, self, args, kwargs);      // library_values.cpp
  if (!tensor_method_allowed(name) && !tensor_method_metadata(name) && name != "cpu")
    unsupported("Tensor." + name + "() needs real tensor data (not supported in a graph)");
  if (name == "cpu") {
    if (device.attr("type").cast<std::string>() == "cpu" && args.empty() && kwargs.empty()) return self;
    unsupported("Tensor.cpu() on a non-CPU tensor");
  }
  std::vector<graph::Arg> gargs{to_arg(self)};
  py::list margs;
  for (auto& a : args) {
    gargs.push_back(to_arg(a));
    if (name == "to" && a->is_const() && is_device_like(a->obj)) {
      device = refs.torch_device(a->obj);  // device moves are recorded, not propagated on meta
      if (!examples_.moves_to_device()) continue;  // (fake tensors move)
    }
    if (name == "to" && a->is_tensor()) device = a->tensor().device;
    margs.append(to_example(a));
  }
  std::vector<std::pair<std::string, graph::Arg>> gkwargs;
  py::dict mkw;
  for (auto& kv : kwargs) {
    gkwargs.emplace_back(kv.first, to_arg(kv.second));
    if (kv.first == "device" && kv.second->is_const() && !kv.second->obj.is_none()) {
      if (name == "to") {
        device = refs.torch_device(kv.second->obj);
        if (examples_.moves_to_device()) mkw["device"] = device;
        continue;
      }
      mkw["device"] = examples_.device_arg(refs.torch_device(kv.second->obj));
      continue;
    }
    mkw[py::str(kv.first)] = to_example(kv.second);
  }
  std::optional<MetaKey> key;
  if (!name.empty() && name.back() != '_' && !tensor_method_metadata(name) && name != "to" &&
      examples_.memoizable()) {
    key.emplace("M" + name);
    key->add(self);
    for (const auto& a : args) key->add(a);
    for (const auto& kv : kwargs) key->add_kw(kv.first, kv.second);
  }
  py::object bound;
  try {
    bound = self->tensor().example.attr(name.c_str());
  } catch (py::error_already_set& e) {
    unsupported("Tensor." + name + ": " + std::string(e.what()));
  }
  py::object result = CallSupport::propagate(*this, "Tensor." + name, bound, py::tuple(margs), mkw, device, key);
  if (tensor_method_metadata(name)) return metadata_value(self, name, args, result);
  if (!tensor_method_allowed(name)) unsupported("Tensor." + name + "() is not supported in a graph");
  if (result.is_none() && name == "__setitem__") unsupported("Tensor.__setitem__ through a call");
  if (!guards::is_tensor(result.ptr()) && !PyTuple_Check(result.ptr()) && !PyList_Check(result.ptr()))
    unsupported("Tensor." + name + " returned " + std::string(Py_TYPE(result.ptr())->tp_name) + ", not a tensor");
  graph::Node* n = graph.call_method(name, std::move(gargs), std::move(gkwargs), result);
  ValuePtr out = wrap_result(n, result, device);
  // An in-place method returns its receiver: a tensor of the frame stays that object when rebuilt (a
  // backend may hand back a copy of a mutated input, aot_eager with aliased inputs does).
  if (name.size() > 1 && name.back() == '_' && name[name.size() - 2] != '_' && out->is_tensor() && self->source)
    out->source = self->source;
  return out;
}

ValuePtr Tracer::apply_operator(py::handle op, std::vector<ValuePtr> args) {
  bool tensors = false;
  for (const auto& a : args) tensors |= any_tensor(a);
  std::string name = py::str(op.attr("__name__")).cast<std::string>();
  if (args.size() == 2 && (name == "eq" || name == "ne")) {
    if (ValuePtr r = sym_tuple_compare(name, args[0], args[1])) return r;
    if (ValuePtr r = identity_compare(*this, name, args[0], args[1])) return r;  // module == module
  }
  if (args.size() == 2) {
    bool containers = false;
    for (const auto& a : args)
      containers |= a->kind == VKind::Set || a->kind == VKind::Dict || a->kind == VKind::DictView ||
                    ((a->kind == VKind::List || a->kind == VKind::Tuple) && !foldable(a));
    if (containers || ((name == "iadd" || name == "imul") && args[0]->kind == VKind::List))
      if (ValuePtr r = container_operator(name, args[0], args[1])) return r;
  }
  if (!tensors) {
    for (const auto& a : args)
      if (a->is_sym()) return sym_operator(op, args);
    return fold_call(op, "operator." + name, args, {});
  }
  // An index tuple may hold tensors (advanced indexing: mask[batch_idx, kv_idx]).
  auto index_tuple = [&](const ValuePtr& a) {
    if (name != "getitem" || a != args.back() || a->kind != VKind::Tuple || a->tuple_class()) return false;
    for (const auto& i : a->items)
      if (!i->is_tensor() && !i->is_constant_like() && !i->is_sym() && i->kind != VKind::Slice) return false;
    return true;
  };
  for (const auto& a : args)
    if (!a->is_tensor() && !a->is_constant_like() && !a->is_sym() && a->kind != VKind::Slice && !index_tuple(a))
      unsupported("operator." + name + " between a tensor and " + a->describe());
  std::vector<graph::Arg> gargs;
  py::tuple margs(args.size());
  py::object device;
  for (size_t i = 0; i < args.size(); ++i) {
    gargs.push_back(to_arg(args[i]));
    margs[i] = to_example(args[i]);
    if (!device && args[i]->is_tensor()) device = args[i]->tensor().device;
  }
  // In-place operators (iadd, imul, ...) mutate their example and are never memoized.
  std::optional<MetaKey> key;
  if (!name.empty() && name[0] != 'i' && examples_.memoizable()) {
    // Elementwise arithmetic and comparisons: a scalar operand's value does not change the result's
    // metadata (x * 1.001 + i in an unrolled loop hits the memo for every i).
    static const char* const by_kind[] = {"add", "sub", "mul", "truediv", "lt", "le", "eq", "ne", "gt", "ge"};
    bool scalar_kind = false;
    for (const char* k : by_kind) scalar_kind = scalar_kind || name == k;
    key.emplace("O" + name);
    for (const auto& a : args) {
      if (scalar_kind) key->add_scalar_kind(a);
      else key->add(a);
    }
  }
  py::object result = CallSupport::propagate(*this, "operator." + name, op, margs, py::dict(), device, key);
  if (!guards::is_tensor(result.ptr()))
    unsupported("operator." + name + " on tensors returned " + std::string(Py_TYPE(result.ptr())->tp_name));
  graph::Node* n = graph.call_function(py::reinterpret_borrow<py::object>(op), std::move(gargs), {}, result);
  ValuePtr out = wrap_result(n, result, device);
  // `x += 1` on a tensor is in place and gives back x itself (see call_tensor_method).
  static const std::unordered_set<std::string> inplace = {"iadd", "iand", "ifloordiv", "ilshift", "imatmul",
                                                          "imod", "imul", "ior", "ipow", "irshift", "isub",
                                                          "itruediv", "ixor"};
  if (inplace.count(name) && out->is_tensor() && args[0]->is_tensor() && args[0]->source)
    out->source = args[0]->source;
  return out;
}

void Tracer::setitem(const ValuePtr& container, const ValuePtr& key, const ValuePtr& value) {
  if (!value->is_tensor() && !value->is_constant_like()) unsupported("item assignment of " + value->describe());
  if (!key->is_tensor() && !key->is_constant_like()) unsupported("item assignment with key " + key->describe());
  py::object op = PyRefs::get().operator_mod.attr("setitem");
  CallSupport::run_meta(*this, "tensor item assignment", op,
                        py::make_tuple(to_example(container), to_example(key), to_example(value)), py::dict());
  graph.call_function(op, {to_arg(container), to_arg(key), to_arg(value)}, {}, py::none());
}

}  // namespace cdynamo::interp
