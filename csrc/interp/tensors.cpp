// tensors.cpp — owns Python conveniences on tensors rewritten into graph ops: Tensor.type() and iteration
// over a tensor's first dimension; also len() of torch.nn's module containers.
#include "interp/torch_rules.h"
#include "interp/tracer.h"

namespace cdynamo::interp {

namespace {

constexpr long kMaxTensorUnroll = 1024;  // rows of a tensor a loop may unroll into the graph

// torch.FloatTensor and the other legacy tensor types are instances of torch's `tensortype` metaclass.
bool is_legacy_tensor_type(py::handle cls) {
  py::handle meta = reinterpret_cast<PyObject*>(Py_TYPE(cls.ptr()));
  return py::str(meta.attr("__module__")).cast<std::string>() == "torch" &&
         py::str(meta.attr("__name__")).cast<std::string>() == "tensortype";
}

}  // namespace

ValuePtr Tracer::tensor_type(const ValuePtr& self, const std::vector<ValuePtr>& args,
                             const std::vector<std::pair<std::string, ValuePtr>>& kwargs) {
  auto& refs = PyRefs::get();
  bool cpu = self->tensor().device.attr("type").cast<std::string>() == "cpu";
  bool strided = self->tensor().example.attr("layout").is(refs.torch.attr("strided"));
  if (!kwargs.empty() || args.size() > 1) unsupported("Tensor.type() with keyword or extra arguments");
  if (args.empty()) {
    // The legacy type name ("torch.FloatTensor") follows from dtype, device and layout, all guarded by the
    // tensor's TENSOR_MATCH: the name a CPU tensor of this dtype has.
    if (!cpu || !strided) unsupported("Tensor.type() of a non-CPU or non-strided tensor");
    py::object probe = refs.torch.attr("empty")(0, py::arg("dtype") = self->tensor().example.attr("dtype"));
    return Value::constant(probe.attr("type")());
  }
  const ValuePtr& a = args[0];
  py::object dtype;
  if (a->is_const() && py::isinstance(a->obj, refs.torch.attr("dtype"))) {
    dtype = a->obj;  // x.type(torch.float64) is x.to(torch.float64): the device stays
  } else {
    // x.type("torch.DoubleTensor") / x.type(torch.DoubleTensor): a CPU tensor of that dtype.
    py::object cls;
    if (a->is_const() && PyUnicode_CheckExact(a->obj.ptr())) {
      std::string s = a->obj.cast<std::string>();
      if (s.rfind("torch.", 0) == 0 && s.find('.', 6) == std::string::npos)
        cls = py::getattr(refs.torch, s.substr(6).c_str(), py::none());
    } else if (a->kind == VKind::Object || a->is_const()) {
      cls = a->obj;
    }
    if (!cls || cls.is_none() || !is_legacy_tensor_type(cls) || cls.attr("is_cuda").cast<bool>() ||
        cls.attr("is_sparse").cast<bool>())
      unsupported("Tensor.type(" + a->describe() + ")");
    if (!cpu || !strided) unsupported("Tensor.type() moving a tensor between devices or layouts");
    dtype = cls.attr("dtype");
  }
  return call_tensor_method(self, "to", {Value::constant(dtype)}, {});
}

std::vector<ValuePtr> Tracer::unpack_tensor(const ValuePtr& v) {
  // iter(tensor) is iter(tensor.unbind(0)): its rows, as tensor[i] views (the length is guarded by the
  // tensor's TENSOR_MATCH: shapes are static). A 0-d tensor raises TypeError in Python.
  py::object shape = v->tensor().example.attr("shape");
  if (py::len(shape) == 0) unsupported("iteration over a 0-d tensor");
  long n = shape[py::int_(0)].cast<long>();
  if (n > kMaxTensorUnroll) unsupported("iteration over a tensor of " + std::to_string(n) + " rows (too long to unroll)");
  py::object getitem = PyRefs::get().operator_mod.attr("getitem");
  std::vector<ValuePtr> rows;
  for (long i = 0; i < n; ++i) rows.push_back(apply_operator(getitem, {v, Value::constant(py::int_(i))}));
  return rows;
}

ValuePtr Tracer::module_container_len(const ValuePtr& v) {
  // len() of an nn.ModuleList / nn.Sequential / nn.ModuleDict of the frame whose __len__ is torch.nn's own
  // (the number of children): the size of its _modules dict, guarded.
  auto& refs = PyRefs::get();
  if (v->kind != VKind::Object || !v->source) return nullptr;
  if (ValuePtr n = parameter_list_len(*this, v)) return n;  // library_values.cpp
  py::handle o = v->obj;
  for (const py::object* c : {&refs.nn_module_list, &refs.nn_sequential, &refs.nn_module_dict}) {
    if (!py::isinstance(o, *c)) continue;
    if (!py::type::handle_of(o).attr("__len__").is(c->attr("__len__"))) return nullptr;
    py::object mods = o.attr("_modules");
    if (!PyDict_CheckExact(mods.ptr())) return nullptr;
    guards.add(guards::length_match(guards::Source::attr(v->source, "_modules"), mods.ptr()));
    return Value::constant(py::int_(PyDict_GET_SIZE(mods.ptr())));
  }
  return nullptr;
}

}  // namespace cdynamo::interp
