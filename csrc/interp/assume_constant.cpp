// assume_constant.cpp — owns calls to functions marked assume_constant_result (cdynamo's or torch._dynamo's):
// the call runs at trace time and its result is a constant of the graph (tensors as get_attr attributes).
#include <cctype>

#include "guards/tensor_match.h"
#include "interp/skip_files.h"
#include "interp/torch_rules.h"
#include "interp/tracer.h"

namespace cdynamo::interp {

namespace {

std::string attr_base(py::handle f) {
  std::string name = py::str(py::getattr(f, "__name__", py::str("fn"))).cast<std::string>();
  std::string out = "_const_";
  for (char c : name) out += (std::isalnum(static_cast<unsigned char>(c)) || c == '_') ? c : '_';
  return out;
}

}  // namespace

struct Tracer::ConstantResults {
  // The real Python value of an argument known while tracing: constants, objects of the frame, graph inputs
  // (their tensors as the frame holds them), tuples/lists/dicts of those. Throws Unsupported otherwise.
  static py::object real_value(Tracer& t, const ValuePtr& v, const std::string& what) {
    switch (v->kind) {
      case VKind::Const: return v->obj;
      case VKind::Object:
        if (v->made_in_trace() || !v->obj) break;
        t.realize(v);  // which object it is matters to the call: pinned by identity
        return v->obj;
      case VKind::Tensor:
        if (graph::Node* n = v->tensor().node; n && n->op == graph::OpKind::Placeholder)
          for (const auto& in : t.inputs)
            if (in.node == n) return in.value;
        t.unsupported(what + " with a tensor computed by the graph (only tensors the frame holds are known while "
                      "tracing)");
      case VKind::Tuple:
      case VKind::List: {
        py::list items;
        for (const auto& i : v->items) items.append(real_value(t, i, what));
        if (v->kind == VKind::List) return items;
        py::handle cls = v->kind == VKind::Tuple ? v->tuple_class() : py::handle();
        if (cls && !is_structseq_class(cls)) return tuple_maker(cls)(py::tuple(items));  // a namedtuple
        return py::tuple(items);
      }
      case VKind::Dict: {
        // A dict of the frame (its contents may change under the trace), or one keyed by a tensor of the graph.
        if (v->source || v->default_dict() || v->tensor_keyed()) break;
        py::dict d;
        for (size_t i = 0; i < v->keys.size(); ++i) d[v->keys[i]] = real_value(t, v->items[i], what);
        return d;
      }
      default: break;
    }
    t.unsupported(what + " with " + v->describe() + " (not known while tracing)");
  }
};

bool marked_constant_result(py::handle f) {
  if (function_marked(f.ptr(), "_dynamo_marked_constant")) return true;
  // torch's device-capability queries (lists of device type names, fixed for the process): what torch.optim's
  // _default_to_fused_or_foreach asks. Called while tracing, their result a constant, as torch._dynamo folds them.
  if (!f || !PyFunction_Check(f.ptr())) return false;
  PyObject* mod = PyFunction_GET_MODULE(f.ptr());  // borrowed, may be NULL
  if (!mod || !PyUnicode_Check(mod) || PyUnicode_CompareWithASCIIString(mod, "torch.utils._foreach_utils") != 0) return false;
  std::string name = py::str(py::getattr(f, "__name__", py::str(""))).cast<std::string>();
  return name == "_get_fused_kernels_supported_devices" || name == "_get_foreach_kernels_supported_devices";
}

ValuePtr Tracer::constant_result(const std::string& attr, py::handle result, int depth) {
  if (depth > 8) unsupported("assume_constant_result: result nested too deep");
  if (guards::is_tensor(result.ptr())) {
    // A get_attr of the graph: the tensor itself, held by the GraphModule (as torch._dynamo registers it).
    std::string name = attr + "_" + std::to_string(graph_attrs.size());
    graph_attrs.emplace_back(name, py::reinterpret_borrow<py::object>(result));
    py::object example = examples_.of_constant(result);
    graph::Node* n = graph.get_attr(name, example);
    return Value::tensor(n, example, result.attr("device"));
  }
  if (is_constant_object(result)) return Value::constant(py::reinterpret_borrow<py::object>(result));
  if (PyTuple_CheckExact(result.ptr()) || PyList_CheckExact(result.ptr())) {
    std::vector<ValuePtr> items;
    for (auto item : py::reinterpret_borrow<py::sequence>(result)) items.push_back(constant_result(attr, item, depth + 1));
    return PyTuple_CheckExact(result.ptr()) ? Value::tuple(std::move(items)) : Value::list(std::move(items));
  }
  unsupported("assume_constant_result: the result is a " + std::string(Py_TYPE(result.ptr())->tp_name) +
              " (constants, tensors and tuples/lists of them are supported)");
}

ValuePtr Tracer::call_constant_result(const ValuePtr& fn, const std::vector<ValuePtr>& args,
                                      const std::vector<std::pair<std::string, ValuePtr>>& kwargs) {
  py::handle f = fn->obj;
  std::string what = "assume_constant_result function " + callable_name(f);
  py::tuple pargs(args.size());
  for (size_t i = 0; i < args.size(); ++i) pargs[i] = ConstantResults::real_value(*this, args[i], "call to " + what);
  py::dict pkw;
  for (const auto& kv : kwargs)
    pkw[py::str(kv.first)] = ConstantResults::real_value(*this, kv.second, "call to " + what);
  py::object r;
  try {
    r = f(*pargs, **pkw);  // at trace time, capture off: its frames run as Python
  } catch (py::error_already_set& e) {
    unsupported(what + " raised while tracing: " + std::string(e.what()));
  }
  return constant_result(attr_base(f), r, 0);
}

}  // namespace cdynamo::interp
