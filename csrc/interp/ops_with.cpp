// ops_with.cpp — owns `with` blocks the graph can hold: torch.no_grad() / torch.enable_grad() (BEFORE_WITH,
// the context objects' construction, and the grad-mode switches recorded in the graph).
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
  ValuePtr exit = Value::object(ctx->obj.attr("__exit__"));
  exit->grad_exit = guards::grad_mode_enabled() ? 1 : 0;
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

void register_with(HandlerTable& t) {
  on_opcode(t, "BEFORE_WITH", before_with);
}

}  // namespace cdynamo::interp
