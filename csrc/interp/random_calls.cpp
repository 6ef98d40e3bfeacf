// random_calls.cpp — owns module-level `random` calls traced as torch._dynamo traces them (random.random / uniform /
// randint / randrange of constants): each a graph input drawn by the rewritten code before the graph runs.
#include "interp/services.h"
#include "interp/tracer.h"

namespace cdynamo::interp {

namespace {

// cdynamo._random_values, through the services (imported on first need).
py::handle random_values_module() { return services().random_values(); }

// The module-level function `fn` calls (random.uniform, ...), or None: `fn` is that bound method itself, or (a method
// call through the module, split by the trace) its function with the module's hidden generator as the receiver.
// Compared with the random module's own, looked up now: a module attribute the user replaced is not one.
py::object traced_random_fn(const ValuePtr& fn) {
  if (fn->kind != VKind::Object || !fn->obj) return py::none();
  py::object target = fn->obj;
  if (ValuePtr self = fn->bound_self()) {
    py::object inst = py::getattr(loaded_module("random"), "_inst", py::none());
    if (self->kind != VKind::Object || !self->obj.is(inst) || !PyFunction_Check(fn->obj.ptr())) return py::none();
    target = py::getattr(inst, fn->obj.attr("__name__"), py::none());
    py::object func = py::getattr(target, "__func__", py::none());
    if (!func.is(fn->obj)) return py::none();
  }
  py::tuple fns = random_values_module().attr("supported")();
  for (py::handle g : fns)  // a bound method made again by getattr is equal (same receiver and function), not identical
    if (g.is(target) || (fn->bound_self() && g.equal(target))) return py::reinterpret_borrow<py::object>(g);
  return py::none();
}

}  // namespace

// The value is unknown at trace time and new on every call, so the trace cannot fold it or guard on it: a graph input
// (a 0-d tensor and its item(), an unbacked symbol, as Tensor.item() under capture_scalar_outputs) whose Source draws
// it when the rewritten code loads the graph's inputs. Those loads run in input order, which is the order of the
// calls in the trace, before the graph and before any replayed side effect: the Python `random` state is advanced as
// eager advances it. A branch on the value is a graph break (no guard can hold for a value drawn later).
ValuePtr Tracer::random_call(const ValuePtr& fn, const std::vector<ValuePtr>& args, const Kwargs& kwargs) {
  py::object target = traced_random_fn(fn);
  if (target.is_none()) return nullptr;
  py::tuple cargs(args.size());
  for (size_t i = 0; i < args.size(); ++i) {
    if (!args[i]->is_const()) return nullptr;  // a traced argument: left to Python (a graph break)
    cargs[i] = args[i]->obj;
  }
  py::dict ckw;
  for (const auto& [k, v] : kwargs) {
    if (!v->is_const()) return nullptr;
    ckw[py::str(k)] = v->obj;
  }
  // Checked on a copy of the generator's state: a call that raises (randint(5, 1)) is left to Python, where it raises
  // in program order; the arguments are constants, so one that passes here passes at run time.
  py::object make = random_values_module().attr("make")(target, cargs, ckw);
  if (make.is_none()) return nullptr;
  realize(fn);  // which function it is: its identity guarded (and its receiver's, for a split method call)
  if (ValuePtr self = fn->bound_self()) realize(self);
  if (!dynamic()) {
    std::string name = py::str(target.attr("__name__")).cast<std::string>();
    request_restart(Restart::fake_tensors("random." + name + "() (traced again with fake tensors)", true));
  }
  int index = 0;
  for (const auto& in : inputs) index += in.source && in.source->kind == guards::Source::Kind::RandomValue;
  SourcePtr src = guards::Source::random_value(index, make.ptr());
  py::tuple ex = examples_.shapes().attr("random_input")(make.attr("dtype"));
  graph::Node* in = graph.placeholder(src->name, ex[0]);
  inputs.push_back(Input{src, in, py::none()});  // no value of the frame: no guard reads this input
  graph::Node* item = graph.call_method("item", {graph::Arg::ref(in)}, {}, ex[1]);
  return Value::sym_num(item, ex[1]);
}

}  // namespace cdynamo::interp
