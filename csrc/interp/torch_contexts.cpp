// torch_contexts.cpp — owns torch.autocast / inference_mode / sdpa_kernel blocks: graph enter/exit nodes, real state.
#include "guards/tensor_match.h"
#include "interp/tracer.h"
#include "interp/torch_rules.h"

namespace cdynamo::interp {

namespace {

// The torch callables the contexts are made and recorded with; owned for the process lifetime (never freed).
struct CtxRefs {
  py::object autocast, enter_autocast, exit_autocast;
  py::object inference_mode, enter_inference, exit_inference;
  py::object sdpa_kernel, sdpa_set, sdpa_current, backend_from_string, sdp_backend;
};

py::object attr_or_none(const char* module, const char* name) {
  try {
    return py::module_::import(module).attr(name);
  } catch (py::error_already_set&) {
    return py::none();
  }
}

const CtxRefs& ctx_refs() {
  static const CtxRefs* refs = [] {
    auto* r = new CtxRefs();
    r->autocast = attr_or_none("torch.amp.autocast_mode", "autocast");
    r->enter_autocast = attr_or_none("torch.amp.autocast_mode", "_enter_autocast");
    r->exit_autocast = attr_or_none("torch.amp.autocast_mode", "_exit_autocast");
    r->inference_mode = attr_or_none("torch.autograd.grad_mode", "inference_mode");
    r->enter_inference = attr_or_none("torch.autograd.grad_mode", "_enter_inference_mode");
    r->exit_inference = attr_or_none("torch.autograd.grad_mode", "_exit_inference_mode");
    r->sdpa_kernel = attr_or_none("torch.nn.attention", "sdpa_kernel");
    r->sdpa_set = attr_or_none("torch.nn.attention", "_sdpa_kernel");
    r->sdpa_current = attr_or_none("torch.nn.attention", "_cur_sdpa_kernel_backends");
    r->backend_from_string = attr_or_none("torch.nn.attention", "_backend_from_string");
    r->sdp_backend = attr_or_none("torch.nn.attention", "SDPBackend");
    return r;
  }();
  return *refs;
}

// A constant argument: a constant, or a list / tuple of constants (sdpa_kernel's backends); nullptr otherwise.
py::object constant_arg(const ValuePtr& v) {
  if (v->is_const()) return v->obj;
  if (v->kind != VKind::List && v->kind != VKind::Tuple) return py::object();
  py::list items;
  for (const auto& i : v->items) {
    if (!i->is_const()) return py::object();
    items.append(i->obj);
  }
  if (v->kind == VKind::Tuple && !v->tuple_class()) return py::tuple(items);
  return v->kind == VKind::List ? py::object(items) : py::object();
}

// Which context `fn` makes, or -1.
int context_kind(py::handle fn) {
  const CtxRefs& r = ctx_refs();
  if (!r.autocast.is_none() && !r.enter_autocast.is_none() && PyType_Check(fn.ptr())) {
    int sub = PyObject_IsSubclass(fn.ptr(), r.autocast.ptr());
    if (sub < 0) throw py::error_already_set();
    if (sub) return static_cast<int>(TorchCtxKind::Autocast);
  }
  if (!r.enter_inference.is_none() && fn.is(r.inference_mode)) return static_cast<int>(TorchCtxKind::Inference);
  if (!r.sdpa_set.is_none() && !r.backend_from_string.is_none() && fn.is(r.sdpa_kernel))
    return static_cast<int>(TorchCtxKind::SdpaKernel);
  return -1;
}

// sdpa_kernel(backends, set_priority=False): the backends as a list and the priority flag.
std::pair<py::list, bool> sdpa_arguments(const py::tuple& args, const py::dict& kw) {
  py::object backends = args.size() > 0 ? py::object(args[0]) : kw.contains("backends") ? py::object(kw["backends"]) : py::none();
  py::object prio = args.size() > 1 ? py::object(args[1]) : kw.contains("set_priority") ? py::object(kw["set_priority"]) : py::bool_(false);
  py::list out;
  if (py::isinstance(backends, ctx_refs().sdp_backend)) out.append(backends);
  else for (auto b : backends) out.append(b);
  return {out, py::bool_(prio).cast<bool>()};
}

// The graph argument of a list of SDPBackend values: one _backend_from_string node each (as torch._dynamo bakes
// them in, since the enum is no FX constant).
graph::Arg backend_nodes(graph::Graph& g, py::handle backends) {
  std::vector<graph::Arg> items;
  for (auto b : backends)
    items.push_back(graph::Arg::ref(g.call_function(ctx_refs().backend_from_string,
                                                    {graph::Arg::constant(b.attr("name"))}, {}, py::none())));
  return graph::Arg::list(std::move(items));
}

// Leaves one block: its exit recorded in the graph (when `record`) and made for real.
void exit_one(graph::Graph& g, const CtxExitOf& x, bool record) {
  const CtxRefs& r = ctx_refs();
  switch (x.spec->kind) {
    case TorchCtxKind::Autocast:
      if (record) g.call_function(r.exit_autocast, {graph::Arg::ref(x.enter_node)}, {}, py::none());
      r.exit_autocast(x.real);
      break;
    case TorchCtxKind::Inference:
      if (record) g.call_function(r.exit_inference, {graph::Arg::ref(x.enter_node)}, {}, py::none());
      r.exit_inference(x.real);
      break;
    case TorchCtxKind::SdpaKernel:
      if (record)
        g.call_function(r.sdpa_set, {backend_nodes(g, x.spec->exit_args[0]), graph::Arg::constant(x.spec->exit_args[1])},
                        {}, py::none());
      r.sdpa_set(*x.spec->exit_args);
      break;
  }
}

// Borrowed arguments: each exit not None, last first, called with (None, None, None).
PyObject* ctx_exit_all(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  for (Py_ssize_t i = nargs; i-- > 0;) {
    if (args[i] == Py_None) continue;
    PyObject* r = PyObject_CallFunctionObjArgs(args[i], Py_None, Py_None, Py_None, nullptr);  // new reference
    if (!r) return nullptr;
    Py_DECREF(r);
  }
  Py_RETURN_NONE;
}

PyMethodDef ctx_exit_all_def = {"_cdynamo_ctx_exit_all",
                                reinterpret_cast<PyCFunction>(reinterpret_cast<void*>(ctx_exit_all)), METH_FASTCALL,
                                "Leaves the torch contexts a rewritten frame entered around its breaking instruction."};

}  // namespace

py::handle ctx_exit_all_callable() {
  static PyObject* f = PyCFunction_New(&ctx_exit_all_def, nullptr);  // new reference kept for the process lifetime
  if (!f) throw py::error_already_set();
  return f;
}

ValuePtr Tracer::torch_context_call(py::handle f, const std::vector<ValuePtr>& args, const Kwargs& kwargs) {
  py::object fn = py::reinterpret_borrow<py::object>(f);
  py::list pos;
  py::dict kw;
  if (py::isinstance(f, PyRefs::get().functools_partial)) {  // a continuation's prologue: partial(factory, ...)()
    fn = f.attr("func");
    for (auto a : py::tuple(f.attr("args"))) pos.append(a);
    kw = py::dict(f.attr("keywords"));
  }
  const int kind = context_kind(fn);
  if (kind < 0) return nullptr;
  for (const auto& a : args) {
    py::object c = constant_arg(a);
    if (!c) unsupported(callable_name(fn) + "() with " + a->describe());
    pos.append(c);
  }
  for (const auto& [name, v] : kwargs) {
    py::object c = constant_arg(v);
    if (!c) unsupported(callable_name(fn) + "() with " + v->describe());
    kw[py::str(name)] = c;
  }
  py::tuple real_args(pos);
  py::object obj;
  try {
    obj = fn(*real_args, **kw);
  } catch (py::error_already_set& e) {
    unsupported(callable_name(fn) + "() raised " + e.what());
  }
  auto spec = std::make_shared<TorchCtxSpec>();
  spec->kind = static_cast<TorchCtxKind>(kind);
  spec->make = PyRefs::get().functools_partial(fn, *real_args, **kw);
  switch (spec->kind) {
    case TorchCtxKind::Autocast:
      spec->enter_args = py::make_tuple(obj.attr("device"), obj.attr("fast_dtype"), obj.attr("_enabled"),
                                        obj.attr("_cache_enabled"));
      break;
    case TorchCtxKind::Inference:
      spec->enter_args = py::make_tuple(obj.attr("mode"));
      break;
    case TorchCtxKind::SdpaKernel: {
      auto [backends, prio] = sdpa_arguments(real_args, kw);
      spec->enter_args = py::make_tuple(backends, py::bool_(prio));
      spec->exit_args = py::make_tuple(ctx_refs().sdpa_current(py::arg("with_priority") = prio), py::bool_(prio));
      break;
    }
  }
  ValuePtr v = Value::object(obj);
  v->payload = TorchCtxOf{std::move(spec)};
  return v;
}

namespace {
// What torch.autocast.__enter__ records on the object before switching (the state outside the block), set on the
// trace's stand-in `obj` (never handed out): the object remade after a graph break gets them (codegen/rebuild.cpp),
// so `ac.prev` reads eager's value. The state is the trace's real one, itself fixed by the frame's AUTOCAST guard.
void record_autocast_prev(py::handle obj, py::handle device) {
  py::module_ torch = py::module_::import("torch");
  try {
    obj.attr("prev_cache_enabled") = torch.attr("is_autocast_cache_enabled")();
    obj.attr("prev") = torch.attr("is_autocast_enabled")(device);
    obj.attr("prev_fastdtype") = torch.attr("get_autocast_dtype")(device);
  } catch (py::error_already_set&) {  // an object that takes no attributes: remade without them (as before)
  }
}
}  // namespace

ValuePtr Tracer::enter_torch_context(const ValuePtr& ctx) {
  const std::shared_ptr<const TorchCtxSpec>& spec = ctx->torch_ctx()->spec;
  const CtxRefs& r = ctx_refs();
  CtxExitOf x{spec, nullptr, py::none()};
  switch (spec->kind) {
    case TorchCtxKind::Autocast:
      // Autocast casts CPU (and fake CPU) tensors, never meta ones: a static trace starts again with fake tensors so
      // that the examples have the dtypes eager computes.
      if (spec->enter_args[2].cast<bool>() && !dynamic()) {
        // Not remembered: translate starts every trace under an enabled autocast with fake tensors.
        request_restart(Restart::fake_tensors("an enabled torch.autocast block (traced again with fake tensors)", false));
      }
      record_autocast_prev(ctx->obj, spec->enter_args[0]);
      x.real = r.enter_autocast(*spec->enter_args);
      x.enter_node = graph.call_function(r.enter_autocast, {graph::Arg::constant(spec->enter_args[0]),
                                                            graph::Arg::constant(spec->enter_args[1]),
                                                            graph::Arg::constant(spec->enter_args[2]),
                                                            graph::Arg::constant(spec->enter_args[3])},
                                         {}, py::none());
      break;
    case TorchCtxKind::Inference:
      x.real = r.enter_inference(spec->enter_args[0]);
      x.enter_node = graph.call_function(r.enter_inference, {graph::Arg::constant(spec->enter_args[0])}, {}, py::none());
      break;
    case TorchCtxKind::SdpaKernel:
      r.sdpa_set(*spec->enter_args);
      x.enter_node = graph.call_function(
          r.sdpa_set, {backend_nodes(graph, spec->enter_args[0]), graph::Arg::constant(spec->enter_args[1])}, {},
          py::none());
      break;
  }
  ValuePtr exit = Value::object(ctx->obj);
  exit->payload = std::move(x);
  open_ctx_.push_back(exit);
  return exit;
}

void Tracer::exit_torch_context(const ValuePtr& exit) {
  if (open_ctx_.empty() || open_ctx_.back() != exit) unsupported("leaving a torch context block out of order");
  exit_one(graph, *exit->ctx_exit(), true);
  open_ctx_.pop_back();
}

void Tracer::close_torch_contexts(size_t keep, bool record) {
  while (open_ctx_.size() > keep) {
    ValuePtr x = open_ctx_.back();
    open_ctx_.pop_back();
    exit_one(graph, *x->ctx_exit(), record);
  }
}

}  // namespace cdynamo::interp
