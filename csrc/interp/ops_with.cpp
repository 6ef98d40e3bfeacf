// ops_with.cpp — owns `with` blocks the graph can hold: torch.no_grad() / torch.enable_grad() (BEFORE_WITH,
// the context objects' construction, the grad-mode switches recorded in the graph), and functions decorated
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

void before_with(Tracer& t, const Instruction&) {
  ValuePtr ctx = t.peek(1);
  int target = ctx->kind == VKind::Object ? grad_context_target(ctx->obj) : -1;
  if (target < 0) t.unsupported("`with` on " + ctx->describe() + " (only torch.no_grad/enable_grad are traced)");
  t.pop();
  ValuePtr exit = Value::grad_exit_value(ctx->obj.attr("__exit__"), guards::grad_mode_enabled());
  t.set_grad_mode(target == 1);
  t.push(exit);
  t.push(Value::constant(py::none()));  // what __enter__ returns
}

// __exit__ of a `with torch.no_grad()/enable_grad()` block continued after a graph break: sets grad mode to
// its `self` (Py_True / Py_False) and returns None, so an exception propagates. Borrowed arguments.
PyObject* grad_exit(PyObject* self, PyObject* const*, Py_ssize_t nargs) {
  if (nargs != 3) {
    PyErr_SetString(PyExc_TypeError, "__exit__ takes 3 arguments");
    return nullptr;
  }
  guards::set_grad_mode_enabled(self == Py_True);
  Py_RETURN_NONE;
}

PyMethodDef grad_exit_def = {"_cdynamo_grad_exit", reinterpret_cast<PyCFunction>(reinterpret_cast<void*>(grad_exit)),
                             METH_FASTCALL, "Restores grad mode on leaving a with block continued after a graph break."};

}  // namespace

py::handle grad_exit_callable(bool enabled) {
  static PyObject* fns[2] = {nullptr, nullptr};  // new references kept for the process lifetime
  PyObject*& f = fns[enabled ? 1 : 0];
  if (!f) f = PyCFunction_New(&grad_exit_def, enabled ? Py_True : Py_False);
  if (!f) throw py::error_already_set();
  return f;
}

int grad_exit_mode(py::handle obj) {
  for (int mode = 0; mode < 2; ++mode)
    if (obj.ptr() == grad_exit_callable(mode == 1).ptr()) return mode;
  return -1;
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
      py::object wrapped = PyRefs::get().torch.attr("no_grad")()(py::module_::import("builtins").attr("eval")("lambda: None"));
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
  static PyObject* base_clone = py::object(py::module_::import("torch.utils._contextlib")
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

void register_with(HandlerTable& t) {
  on_opcode(t, "BEFORE_WITH", before_with);
}

}  // namespace cdynamo::interp
