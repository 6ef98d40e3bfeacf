// autograd_fn.cpp — owns custom torch.autograd.Function.apply in the trace: the forward and backward traced
// speculatively (to prove they only compute on tensors), then one graph node that calls `Fn.apply` itself.
#include <algorithm>
#include <unordered_set>

#include "guards/tensor_match.h"
#include "interp/tracer.h"
#include "interp/services.h"

namespace cdynamo::interp {

namespace {

// The methods of a FunctionCtx that the speculative trace models (records or ignores).
bool ctx_method_name(const std::string& name) {
  return name == "save_for_backward" || name == "mark_non_differentiable" || name == "set_materialize_grads" ||
         name == "save_for_forward";
}

// torch.autograd.Function and the function behind its `apply` classmethod (process lifetime).
struct AutogradRefs {
  py::object function_cls, apply_func, setup_context_default, ctx_cls, empty_like;
  static AutogradRefs& get() {
    static auto* r = [] {
      auto* refs = new AutogradRefs();  // process lifetime
      py::object fn_mod = loaded_module("torch.autograd.function");
      refs->function_cls = fn_mod.attr("Function");
      refs->apply_func = refs->function_cls.attr("__dict__")["apply"].attr("__func__");
      refs->setup_context_default = fn_mod.attr("_SingleLevelFunction").attr("__dict__")["setup_context"];
      // The class of the ctx seen by the traced forward/backward: a plain class, so that attribute stores on
      // it meet no descriptor (FunctionCtx's C base has some).
      refs->ctx_cls = loaded_module("builtins").attr("type")("FunctionCtx", py::make_tuple(), py::dict());
      refs->empty_like = loaded_module("torch").attr("empty_like");
      return refs;
    }();
    return *r;
  }
};

// A call target of a graph node that changes a tensor in place (x.add_(...), x[i] = v, x += y, inplace=True).
bool mutates(const graph::Node& n) {
  static const std::unordered_set<std::string> inplace_ops = {"setitem", "iadd", "iand", "ifloordiv", "ilshift",
                                                              "imatmul", "imod", "imul", "ior", "ipow", "irshift",
                                                              "isub", "itruediv", "ixor"};
  std::string name;
  if (n.op == graph::OpKind::CallMethod) {
    name = py::str(n.target).cast<std::string>();
  } else if (n.op == graph::OpKind::CallFunction) {
    name = py::str(py::getattr(n.target, "__name__", py::str(""))).cast<std::string>();
    if (inplace_ops.count(name)) return true;
  } else {
    return false;
  }
  if (name.size() > 1 && name.back() == '_' && name.compare(0, 2, "__") != 0) return true;
  for (const auto& [key, arg] : n.kwargs) {
    if (key == "out") return true;
    if (key == "inplace" && arg.kind == graph::Arg::Kind::Const && py::bool_(arg.value)) return true;
  }
  return false;
}

// The function `cls.name` gives (a staticmethod's function), past a once_differentiable-style wrapper of
// torch.autograd (functools.wraps: the user's function is its __wrapped__); `src` is set to its source.
py::object traced_function(py::handle cls, const char* name, SourcePtr cls_src, SourcePtr* src) {
  *src = guards::Source::attr(cls_src, name);
  PyObject* descr = _PyType_Lookup(reinterpret_cast<PyTypeObject*>(cls.ptr()), py::str(name).ptr());  // borrowed
  if (!descr) return py::none();
  py::object f = py::reinterpret_borrow<py::object>(descr);
  if (Py_IS_TYPE(descr, &PyStaticMethod_Type)) f = f.attr("__func__");
  if (PyFunction_Check(f.ptr()) && py::hasattr(f, "__wrapped__")) {
    auto* code = reinterpret_cast<PyCodeObject*>(PyFunction_GET_CODE(f.ptr()));  // borrowed
    std::string file = py::str(code->co_filename).cast<std::string>();
    if (file.size() >= 27 && file.compare(file.size() - 27, 27, "/torch/autograd/function.py") == 0) {
      f = f.attr("__wrapped__");
      *src = guards::Source::attr(*src, "__wrapped__");
    }
  }
  return f;
}

}  // namespace

ValuePtr Tracer::autograd_ctx_attr(const std::string& name) {
  const ValuePtr& ctx = autograd_.ctx;
  int at = ctx->find_key(py::str(name));
  if (at >= 0) return ctx->items[static_cast<size_t>(at)];
  if (name == "saved_tensors" || name == "saved_variables") {
    if (!autograd_.in_backward) unsupported("ctx." + name + " read in an autograd.Function's forward");
    return Value::tuple(autograd_.saved);
  }
  if (ctx_method_name(name)) return Value::method(ctx, name);
  unsupported("autograd.Function ctx attribute '" + name + "'");
}

ValuePtr Tracer::autograd_ctx_call(const std::string& name, const std::vector<ValuePtr>& args,
                                   const std::vector<std::pair<std::string, ValuePtr>>& kwargs) {
  if (!kwargs.empty()) unsupported("ctx." + name + " with keyword arguments");
  if (autograd_.in_backward) unsupported("ctx." + name + " in an autograd.Function's backward");
  if (name == "save_for_backward") {
    for (const auto& a : args)
      if (!a->is_tensor() && !(a->is_const() && a->obj.is_none()))
        unsupported("ctx.save_for_backward of " + a->describe());
    autograd_.saved = args;
  } else if (name == "mark_non_differentiable") {
    for (const auto& a : args) {
      if (!a->is_tensor()) unsupported("ctx.mark_non_differentiable of " + a->describe());
      autograd_.non_differentiable.push_back(a->tensor().node);
    }
  }
  return Value::constant(py::none());
}

ValuePtr Tracer::autograd_function_apply(const ValuePtr& fn, const std::vector<ValuePtr>& args,
                                         const std::vector<std::pair<std::string, ValuePtr>>& kwargs) {
  py::handle f = fn->obj;
  if (!f || !PyMethod_Check(f.ptr()) || !fn->source) return nullptr;
  auto& refs = AutogradRefs::get();
  py::handle cls = PyMethod_GET_SELF(f.ptr());        // borrowed
  py::handle func = PyMethod_GET_FUNCTION(f.ptr());   // borrowed
  if (!func.is(refs.apply_func) || !PyType_Check(cls.ptr()) || cls.is(refs.function_cls)) return nullptr;
  std::string what = py::str(cls.attr("__qualname__")).cast<std::string>() + ".apply";
  if (!kwargs.empty()) unsupported(what + " with keyword arguments");
  if (autograd_.ctx) unsupported(what + " inside another autograd.Function");
  bool any_grad = false;
  py::tuple needs(args.size());
  for (size_t i = 0; i < args.size(); ++i) {
    const ValuePtr& a = args[i];
    if (!a->is_tensor() && !a->is_constant_like()) unsupported(what + " with argument " + a->describe());
    bool g = a->is_tensor() && guards::grad_mode_enabled() && py::bool_(a->tensor().example.attr("requires_grad"));
    needs[i] = py::bool_(g);
    any_grad = any_grad || g;
  }
  SourcePtr cls_src = guards::Source::attr(fn->source, "__self__"), fwd_src, bwd_src, setup_src;
  py::object forward = traced_function(cls, "forward", cls_src, &fwd_src);
  py::object backward = traced_function(cls, "backward", cls_src, &bwd_src);
  if (!PyFunction_Check(forward.ptr()) || !PyFunction_Check(backward.ptr()))
    unsupported(what + ": forward/backward are not Python functions");
  PyObject* setup = _PyType_Lookup(reinterpret_cast<PyTypeObject*>(cls.ptr()), py::str("setup_context").ptr());
  bool new_style = setup && setup != refs.setup_context_default.ptr();
  py::object setup_fn = new_style ? traced_function(cls, "setup_context", cls_src, &setup_src) : py::none();
  if (new_style && !PyFunction_Check(setup_fn.ptr())) unsupported(what + ": setup_context is not a Python function");

  // --- speculation: trace forward (and setup_context) and backward, then undo every node they made ---
  const TraceMark mark = mark_state();
  ValuePtr ctx = Value::new_instance(VKind::Instance, Value::object(refs.ctx_cls));
  ctx->keys.push_back(py::str("needs_input_grad"));
  std::vector<ValuePtr> need_items;
  for (auto n : needs) need_items.push_back(Value::constant(py::reinterpret_borrow<py::object>(n)));
  ctx->items.push_back(Value::tuple(std::move(need_items)));
  autograd_ = AutogradSpeculation{};
  autograd_.ctx = ctx;
  struct Reset {
    AutogradSpeculation& s;
    ~Reset() { s = AutogradSpeculation{}; }
  } reset{autograd_};

  ValuePtr out;
  if (new_style) {
    out = inline_call(wrap(forward, fwd_src), args, {});
    inline_call(wrap(setup_fn, setup_src), {ctx, Value::tuple(args), out}, {});
  } else {
    std::vector<ValuePtr> fargs{ctx};
    fargs.insert(fargs.end(), args.begin(), args.end());
    out = inline_call(wrap(forward, fwd_src), std::move(fargs), {});
  }
  bool tuple_out = out->kind == VKind::Tuple && !out->tuple_class();
  std::vector<ValuePtr> outs = tuple_out ? out->items : std::vector<ValuePtr>{out};
  for (const auto& o : outs)
    if (!o->is_tensor() && !(o->is_const() && o->obj.is_none()))
      unsupported(what + ": forward returned " + o->describe() + " (only tensors and None are supported)");
  const auto& nodes = graph.nodes();
  for (size_t i = nodes.size() - (graph.mark() - mark.nodes); i < nodes.size(); ++i)
    if (mutates(*nodes[i])) unsupported(what + ": forward changes a tensor in place (" + nodes[i]->name + ")");

  // Examples of the outputs as apply gives them: differentiable outputs require grad when an input does.
  py::tuple examples(outs.size());
  py::object device = py::none();
  for (size_t i = 0; i < outs.size(); ++i) {
    if (!outs[i]->is_tensor()) {
      examples[i] = py::none();
      continue;
    }
    bool nondiff = std::find(autograd_.non_differentiable.begin(), autograd_.non_differentiable.end(),
                             outs[i]->tensor().node) != autograd_.non_differentiable.end();
    const TensorOf& out = outs[i]->tensor();
    py::object floating = out.example.attr("is_floating_point")();
    bool rg = any_grad && !nondiff && (py::bool_(floating) || py::bool_(out.example.attr("is_complex")()));
    examples[i] = out.example.attr("detach")().attr("requires_grad_")(py::bool_(rg));
    if (device.is_none()) device = out.device;
  }
  if (device.is_none()) unsupported(what + ": forward returned no tensor");

  // The backward, with one fresh gradient per output, must trace too (it runs inside the backend's graph).
  std::vector<ValuePtr> bargs{ctx};
  for (const auto& o : outs) {
    if (!o->is_tensor()) {
      bargs.push_back(Value::constant(py::none()));
      continue;
    }
    py::object ex = refs.empty_like(o->tensor().example);
    graph::Node* n = graph.call_function(refs.empty_like, {to_arg(o)}, {}, ex);
    bargs.push_back(Value::tensor(n, ex, o->tensor().device));
  }
  autograd_.in_backward = true;
  ValuePtr grads = inline_call(wrap(backward, bwd_src), std::move(bargs), {});
  std::vector<ValuePtr> gouts = grads->kind == VKind::Tuple ? grads->items : std::vector<ValuePtr>{grads};
  for (const auto& g : gouts)
    if (!g->is_tensor() && !(g->is_const() && g->obj.is_none()))
      unsupported(what + ": backward returned " + g->describe());
  if (!state_unchanged_since(mark)) unsupported(what + ": forward or backward changes Python state");
  graph.rollback(mark.nodes);

  // --- the call itself: Fn.apply(*args) as one node; autograd builds the same backward at run time ---
  std::vector<graph::Arg> gargs;
  for (const auto& a : args) gargs.push_back(to_arg(a));
  py::object result = tuple_out ? py::object(examples) : examples[0];
  py::object target = services().autograd_function_apply()(cls);
  graph::Node* n = graph.call_function(target, std::move(gargs), {}, result);
  return wrap_result(n, result, device);
}

}  // namespace cdynamo::interp
