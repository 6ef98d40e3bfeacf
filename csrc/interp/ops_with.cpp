// ops_with.cpp — owns `with` blocks the graph can hold: torch.no_grad() / torch.enable_grad() (BEFORE_WITH, the
// context objects' construction, the grad-mode switches recorded in the graph), the torch contexts of
// torch_contexts.cpp (BEFORE_WITH on them), contextlib.nullcontext and
// profiler record_function blocks (no-ops; torch._dynamo ignores the profiler range too), and functions decorated
// with @torch.no_grad() / @torch.enable_grad().
#include "bytecode/bytecode.h"
#include "guards/tensor_match.h"
#include "interp/tracer.h"

namespace cdynamo::interp {

namespace {

using bytecode::Instruction;

// 1 for torch.enable_grad, 0 for torch.no_grad, -1 for anything else (its `with` is not traced).
int grad_context_target(py::handle obj) {
  auto& refs = PyRefs::get();
  py::handle type = reinterpret_cast<PyObject*>(Py_TYPE(obj.ptr()));
  if (type.is(refs.torch.attr("no_grad"))) return 0;
  if (type.is(refs.torch.attr("enable_grad"))) return 1;
  return -1;
}

// A `with` on an object of a no-op context class made in the trace (is_noop_context_class): what its
// __enter__ returns (record_function: the object; nullcontext: its enter_result), or nullptr for other values.
ValuePtr noop_context_enter(const ValuePtr& ctx) {
  if (ctx->kind != VKind::Object || ctx->source) return nullptr;
  py::handle type = reinterpret_cast<PyObject*>(Py_TYPE(ctx->obj.ptr()));
  if (!is_noop_context_class(type)) return nullptr;
  if (py::hasattr(ctx->obj, "enter_result")) return Value::constant(ctx->obj.attr("enter_result"));
  return ctx;
}

// __exit__ of a `with torch.no_grad()/enable_grad()` block continued after a graph break: sets grad mode to
// its `self` (Py_True / Py_False; Py_None: a record_function block, nothing) and returns None, so an exception
// propagates. Borrowed arguments.
PyObject* grad_exit(PyObject* self, PyObject* const*, Py_ssize_t nargs) {
  if (nargs != 3) {
    PyErr_SetString(PyExc_TypeError, "__exit__ takes 3 arguments");
    return nullptr;
  }
  if (self != Py_None) guards::set_grad_mode_enabled(self == Py_True);
  Py_RETURN_NONE;
}

PyMethodDef grad_exit_def = {"_cdynamo_grad_exit", reinterpret_cast<PyCFunction>(reinterpret_cast<void*>(grad_exit)),
                             METH_FASTCALL, "Restores grad mode on leaving a with block continued after a graph break."};

}  // namespace

struct Tracer::WithOps {
  static void before_with(Tracer& t, const Instruction&) {
    ValuePtr ctx = t.peek(1);
    if (const TorchCtxOf* c = ctx->torch_ctx()) {  // torch.autocast / inference_mode / sdpa_kernel (torch_contexts.cpp)
      ValuePtr exit = t.enter_torch_context(ctx);
      t.pop();
      t.push(exit);
      if (c->spec->kind == TorchCtxKind::Autocast) t.push(ctx);  // autocast.__enter__ returns the object
      else if (c->spec->kind == TorchCtxKind::SdpaKernel) t.push(t.make_dict({}, {}));  // the generator yields {}
      else t.push(Value::constant(py::none()));
      return;
    }
    if (ValuePtr entered = noop_context_enter(ctx)) {
      // Made in the trace: nothing outside saw it. A profiler range is not recorded (as torch._dynamo).
      t.pop();
      t.push(Value::grad_exit_value(py::reinterpret_borrow<py::object>(grad_exit_callable(kNoopExit)), kNoopExit));
      t.push(entered);
      return;
    }
    int target = ctx->kind == VKind::Object ? grad_context_target(ctx->obj) : -1;
    if (target < 0)
      t.unsupported("`with` on " + ctx->describe() +
                    " (only torch.no_grad/enable_grad, contextlib.nullcontext and profiler record_function are traced)");
    t.pop();
    ValuePtr exit = Value::grad_exit_value(ctx->obj.attr("__exit__"), guards::grad_mode_enabled() ? 1 : 0);
    t.set_grad_mode(target == 1);
    t.push(exit);
    t.push(Value::constant(py::none()));  // what __enter__ returns
  }
};

py::handle grad_exit_callable(int mode) {
  static PyObject* fns[3] = {nullptr, nullptr, nullptr};  // new references kept for the process lifetime
  PyObject*& f = fns[mode];
  if (!f) f = PyCFunction_New(&grad_exit_def, mode == kNoopExit ? Py_None : mode == 1 ? Py_True : Py_False);
  if (!f) throw py::error_already_set();
  return f;
}

int grad_exit_mode(py::handle obj) {
  for (int mode = 0; mode <= kNoopExit; ++mode)
    if (obj.ptr() == grad_exit_callable(mode).ptr()) return mode;
  return -1;
}

bool is_noop_context_class(py::handle fn) {
  auto load = [](const char* mod, const char* name) {
    try {
      return py::object(loaded_module(mod).attr(name)).release().ptr();  // owned for the process lifetime
    } catch (py::error_already_set&) {
      return static_cast<PyObject*>(nullptr);
    }
  };
  static PyObject* record_function = load("torch.autograd.profiler", "record_function");
  static PyObject* nullcontext = load("contextlib", "nullcontext");
  return fn.ptr() && (fn.ptr() == record_function || fn.ptr() == nullcontext);
}

// The context objects themselves are created at trace time (their constructors have no effects).
bool is_grad_context_class(py::handle fn) {
  auto& refs = PyRefs::get();
  return fn.is(refs.torch.attr("no_grad")) || fn.is(refs.torch.attr("enable_grad"));
}

void Tracer::set_grad_mode(bool enabled) {
  py::object setter = PyRefs::get().torch.attr("_C").attr("_set_grad_enabled");
  graph.call_function(setter, {graph::Arg::constant(py::bool_(enabled))}, {}, py::none());
  guards::set_grad_mode_enabled(enabled);
}

namespace {

// The code of torch.utils._contextlib's `decorate_context` wrapper (what @torch.no_grad() makes), owned for
// the process lifetime; nullptr when torch has none.
PyObject* decorate_context_code() {
  static PyObject* code = [] {
    try {
      // eval with its own globals: without them it reads the calling Python frame's locals (PyEval_GetLocals),
      // which on 3.11/3.12 leaves a snapshot dict of the user's frame holding its objects until that frame ends.
      py::object wrapped = PyRefs::get().torch.attr("no_grad")()(
          loaded_module("builtins").attr("eval")("lambda: None", py::dict()));
      return py::object(wrapped.attr("__code__")).release().ptr();
    } catch (py::error_already_set&) {
      return static_cast<PyObject*>(nullptr);
    }
  }();
  return code;
}

// Index of free variable `name` in `code`'s closure, or -1.
int freevar_index(PyCodeObject* code, const char* name) {
  py::tuple names = py::reinterpret_borrow<py::object>(reinterpret_cast<PyObject*>(code)).attr("co_freevars");
  for (size_t i = 0; i < names.size(); ++i)
    if (py::str(names[i]).cast<std::string>() == name) return static_cast<int>(i);
  return -1;
}

}  // namespace

ValuePtr Tracer::grad_decorated_call(const ValuePtr& fn, std::vector<ValuePtr>& args,
                                     std::vector<std::pair<std::string, ValuePtr>>& kwargs) {
  PyObject* f = fn->obj.ptr();
  if (!decorate_context_code() || !PyFunction_Check(f) || PyFunction_GET_CODE(f) != decorate_context_code()) return nullptr;
  auto* code = reinterpret_cast<PyCodeObject*>(PyFunction_GET_CODE(f));
  PyObject* closure = PyFunction_GET_CLOSURE(f);  // borrowed
  int at_ctx = freevar_index(code, "ctx_factory"), at_func = freevar_index(code, "func");
  if (!closure || at_ctx < 0 || at_func < 0) unsupported("a torch context decorator of an unknown layout");
  PyObject* ctx = PyCell_GET(PyTuple_GET_ITEM(closure, at_ctx));    // borrowed
  PyObject* func = PyCell_GET(PyTuple_GET_ITEM(closure, at_func));  // borrowed
  // @torch.no_grad() / @torch.enable_grad(): ctx_factory is the decorator object's own `clone`.
  static PyObject* base_clone = py::object(loaded_module("torch.utils._contextlib")
                                               .attr("_DecoratorContextManager").attr("clone")).release().ptr();  // owned
  if (!ctx || !func || !PyMethod_Check(ctx) || PyMethod_GET_FUNCTION(ctx) != base_clone || !PyFunction_Check(func))
    unsupported("a function decorated with a torch context other than no_grad / enable_grad");
  PyObject* decorator = PyMethod_GET_SELF(ctx);  // borrowed
  int target = grad_context_target(decorator);
  if (target < 0) unsupported("a function decorated with a torch context other than no_grad / enable_grad");
  // Read through the wrapper's cells, guarded when the wrapper has a source (the decorator object by identity).
  ValuePtr inner;
  if (fn->source) {
    auto cell = [&](int i) {
      return guards::Source::attr(guards::Source::item(guards::Source::attr(fn->source, "__closure__"), i), "cell_contents");
    };
    realize(wrap(decorator, guards::Source::attr(cell(at_ctx), "__self__")));
    inner = wrap(func, cell(at_func));
  } else {
    inner = Value::object(py::reinterpret_borrow<py::object>(func));
  }
  // `with ctx_factory(): return func(*args, **kwargs)`, the block's grad mode recorded in the graph.
  const bool prev = guards::grad_mode_enabled();
  const bool mode = target == 1;
  if (mode != prev) set_grad_mode(mode);
  ValuePtr r;
  try {
    r = inline_call(inner, std::move(args), std::move(kwargs));
  } catch (...) {
    guards::set_grad_mode_enabled(prev);  // the nodes go with the failed instruction; the real mode comes back
    throw;
  }
  if (mode != prev) set_grad_mode(prev);
  return r;
}

void Tracer::register_with(HandlerTable& t) {
  on_opcode(t, "BEFORE_WITH", WithOps::before_with);
}

}  // namespace cdynamo::interp
