// symbolic.cpp — owns symbolic numbers of traces with dynamic shapes: sizes read from fake tensors as graph nodes
// (x.size(0), x.numel()) and operators on them (SymNum values).
#include "interp/torch_rules.h"
#include "interp/tracer.h"
#include "interp/services.h"

namespace cdynamo::interp {

namespace {

// True for torch.SymInt / SymBool / SymFloat objects (borrowed).
bool is_symbolic_number(py::handle o) {
  auto& refs = PyRefs::get();
  static PyObject* types = py::make_tuple(refs.torch.attr("SymInt"), refs.torch.attr("SymBool"),
                                          refs.torch.attr("SymFloat")).release().ptr();  // process lifetime
  return PyObject_IsInstance(o.ptr(), types) == 1;
}

bool is_plain_number(const ValuePtr& v) {
  if (!v->is_const()) return false;
  PyObject* o = v->obj.ptr();
  return PyLong_Check(o) || PyFloat_Check(o);  // bool is an int
}

}  // namespace
// The plain number a symbolic one has now: bool(SymBool), int(SymInt), float(SymFloat); the ShapeEnv guards it.
namespace {
// Runs `f` (a conversion of a symbolic number to a plain one); a value computed from tensor data (an unbacked
// symbol, x.item() under capture_scalar_outputs) has no plain value at trace time: Unsupported (a graph break).
template <typename F>
py::object plain_or_unsupported(F f) {
  try {
    return f();
  } catch (py::error_already_set& e) {
    if (!e.matches(PyExc_RuntimeError)) throw;
    throw Unsupported(std::string("a Python number computed from tensor data (.item()) is needed at trace time: ") +
                      e.what());
  }
}
}  // namespace

py::object plain_number(py::handle example) {
  return plain_or_unsupported([&] { return plain_number_now(example); });
}

py::object plain_number_now(py::handle example) {
  auto& refs = PyRefs::get();
  static PyObject* sym_bool = py::object(refs.torch.attr("SymBool")).release().ptr();    // process lifetime
  static PyObject* sym_float = py::object(refs.torch.attr("SymFloat")).release().ptr();  // process lifetime
  if (PyObject_IsInstance(example.ptr(), sym_bool) == 1) {
    int r = PyObject_IsTrue(example.ptr());
    if (r < 0) throw py::error_already_set();
    return py::bool_(r == 1);
  }
  if (PyObject_IsInstance(example.ptr(), sym_float) == 1) {
    PyObject* f = PyNumber_Float(example.ptr());  // new reference, or NULL with the error set (an unbacked float)
    if (!f) throw py::error_already_set();
    return py::reinterpret_steal<py::object>(f);
  }
  PyObject* i = PyNumber_Index(example.ptr());  // new reference
  if (!i) throw py::error_already_set();
  return py::reinterpret_steal<py::object>(i);
}

ValuePtr Tracer::sym_operator(py::handle op, const std::vector<ValuePtr>& args) {
  std::string name = py::str(op.attr("__name__")).cast<std::string>();
  std::vector<graph::Arg> gargs;
  py::tuple ex(args.size());
  for (size_t i = 0; i < args.size(); ++i) {
    if (!args[i]->is_sym() && !is_plain_number(args[i]))
      unsupported("operator." + name + " between a symbolic size and " + args[i]->describe());
    gargs.push_back(to_arg(args[i]));
    ex[i] = to_example(args[i]);
  }
  py::object result;
  try {
    result = op(*ex);
  } catch (py::error_already_set& e) {
    unsupported("operator." + name + " on symbolic sizes: " + std::string(e.what()));
  }
  if (!is_symbolic_number(result)) {
    if (!is_constant_object(result)) unsupported("operator." + name + " on symbolic sizes returned a non-constant");
    return Value::constant(result);
  }
  graph::Node* n = graph.call_function(py::reinterpret_borrow<py::object>(op), std::move(gargs), {}, result);
  return Value::sym_num(n, result);
}

ValuePtr Tracer::scalar_output(const ValuePtr& self) {
  if (!dynamic()) {
    request_restart(Restart::fake_tensors("Tensor.item() under capture_scalar_outputs (traced again with fake tensors)",
                                          true));
  }
  py::object ex = examples_.shapes().attr("unbacked_scalar")(self->tensor().example);
  graph::Node* n = graph.call_method("item", {to_arg(self)}, {}, ex);
  return Value::sym_num(n, ex);
}

ValuePtr Tracer::sym_builtin(py::handle f, const std::vector<ValuePtr>& args) {
  bool any = false;
  for (const auto& a : args) any |= a->is_sym();
  if (!any) return nullptr;
  auto& refs = PyRefs::get();
  if (args.size() == 2 && args[0]->is_sym() && !args[1]->is_sym() && f.is(refs.builtins.attr("isinstance"))) {
    // isinstance(n, cls) of a symbolic number: decided by its Python type (int, float or bool), not its value.
    py::handle ex = args[0]->sym().example;
    py::object proxy = PyObject_IsInstance(ex.ptr(), py::object(refs.torch.attr("SymBool")).ptr()) == 1 ? py::object(py::bool_(false))
                       : PyObject_IsInstance(ex.ptr(), py::object(refs.torch.attr("SymFloat")).ptr()) == 1 ? py::object(py::float_(0.0))
                                                                                                   : py::object(py::int_(0));
    return fold_call(f, "isinstance", {Value::constant(proxy), args[1]}, {});
  }
  struct Entry {
    bool in_math;  // math.<name>, else builtins.<name>
    const char* name;
    const char* torch_fn;  // torch's symbolic version, or nullptr: the function itself (the number's __round__ ...)
    size_t nargs;
  };
  static const Entry table[] = {{false, "int", "sym_int", 1},   {false, "float", "sym_float", 1},
                                {false, "max", "sym_max", 2},   {false, "min", "sym_min", 2},
                                {true, "sqrt", "_sym_sqrt", 1}, {false, "round", nullptr, 1},
                                {false, "round", nullptr, 2},   {true, "floor", nullptr, 1},
                                {true, "ceil", nullptr, 1},     {true, "trunc", nullptr, 1}};
  for (const auto& e : table) {
    if (args.size() != e.nargs) continue;
    py::object real = (e.in_math ? refs.math : refs.builtins).attr(e.name);  // PyRefs: imported once
    if (!real.is(f)) continue;
    if (e.nargs == 1 && std::string(e.name) == "int" && args[0]->is_sym() &&
        PyObject_IsInstance(args[0]->sym().example.ptr(), py::object(refs.torch.attr("SymInt")).ptr()) == 1)
      return args[0];  // int() of a SymInt is itself
    for (const auto& a : args)
      if (!a->is_sym() && !is_plain_number(a)) return nullptr;
    return sym_operator(e.torch_fn ? py::object(refs.torch.attr(e.torch_fn)) : real, args);
  }
  if (args.size() == 1 && f.is(refs.builtins.attr("abs"))) return sym_operator(refs.operator_mod.attr("abs"), args);
  return nullptr;
}

ValuePtr Tracer::sym_tuple_compare(const std::string& name, const ValuePtr& a, const ValuePtr& b) {
  auto items_of = [](const ValuePtr& v, std::vector<ValuePtr>& out) {
    if (v->kind == VKind::Tuple) {
      out = v->items;
      return true;
    }
    if (v->is_const() && PyTuple_Check(v->obj.ptr())) {
      for (auto i : py::reinterpret_borrow<py::tuple>(v->obj)) out.push_back(Value::constant(py::reinterpret_borrow<py::object>(i)));
      return true;
    }
    return false;
  };
  std::vector<ValuePtr> x, y;
  if (!items_of(a, x) || !items_of(b, y)) return nullptr;
  bool any = false;
  for (const auto* side : {&x, &y})
    for (const auto& i : *side) {
      if (!i->is_sym() && !is_plain_number(i)) return nullptr;
      any |= i->is_sym();
    }
  if (!any) return nullptr;
  bool equal = x.size() == y.size();
  for (size_t k = 0; equal && k < x.size(); ++k) {
    py::object r = to_example(x[k]).attr("__eq__")(to_example(y[k]));
    if (r.is(py::handle(Py_NotImplemented))) r = to_example(y[k]).attr("__eq__")(to_example(x[k]));
    int t = PyObject_IsTrue(r.ptr());  // a SymBool: the ShapeEnv guards the answer
    if (t < 0) throw py::error_already_set();
    equal = t == 1;
  }
  return Value::constant(py::bool_(name == "eq" ? equal : !equal));
}

ValuePtr Tracer::metadata_value(const ValuePtr& self, const std::string& name, const std::vector<ValuePtr>& args,
                                py::handle result) {
  if (is_constant_object(result)) return Value::constant(py::reinterpret_borrow<py::object>(result));
  if (!dynamic() || !self->is_tensor()) unsupported("Tensor." + name + " returned a non-constant");
  // x.size() / x.shape / x.stride(): a tuple of per-dimension values, each a constant or read by x.size(d).
  const bool per_dim = name == "size" || name == "shape" || name == "stride";
  if (per_dim && args.empty() && PyTuple_Check(result.ptr())) {
    const std::string method = name == "shape" ? "size" : name;
    std::vector<ValuePtr> items;
    py::tuple t = py::reinterpret_borrow<py::tuple>(result);
    for (size_t d = 0; d < t.size(); ++d) {
      py::object item = t[d];
      if (!is_symbolic_number(item)) {
        items.push_back(Value::constant(item));
        continue;
      }
      graph::Node* n = graph.call_method(method, {to_arg(self), graph::Arg::constant(py::int_(d))}, {}, item);
      items.push_back(Value::sym_num(n, item));
    }
    py::object cls;  // size(): rebuilt as torch.Size((...))
    if (name != "stride") cls = PyRefs::get().torch.attr("Size");
    return Value::tuple(std::move(items), std::move(cls));
  }
  if (is_symbolic_number(result)) {
    std::vector<graph::Arg> gargs{to_arg(self)};
    for (const auto& a : args) gargs.push_back(to_arg(a));
    const std::string method = name == "shape" ? "size" : name;
    graph::Node* n = graph.call_method(method, std::move(gargs), {}, py::reinterpret_borrow<py::object>(result));
    return Value::sym_num(n, py::reinterpret_borrow<py::object>(result));
  }
  unsupported("Tensor." + name + " returned " + std::string(Py_TYPE(result.ptr())->tp_name) + " with symbolic sizes");
}

}  // namespace cdynamo::interp
