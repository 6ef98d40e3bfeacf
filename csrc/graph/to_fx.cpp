// to_fx.cpp — owns Graph::to_fx(): one pass building torch.fx.Graph + GraphModule with our node names.
#include <memory>
#include <optional>
#include <string>

#include "graph/graph.h"
#include "graph/node_meta.h"

namespace cdynamo::graph {
namespace {

// Python objects looked up once. Released from an atexit hook so nothing outlives the interpreter.
struct FxCache {
  py::object graph_cls;        // torch.fx.Graph
  py::object graph_module_cls; // torch.fx.GraphModule
  py::object module_cls;       // torch.nn.Module
  py::str s_create_node{"create_node"};
  py::str s_meta{"meta"};
  py::str s_example_value{"example_value"};
  py::str op_strs[6];
};

FxCache* g_cache = nullptr;

FxCache& cache() {
  if (g_cache) return *g_cache;
  auto c = std::make_unique<FxCache>();
  py::module_ fx = py::module_::import("torch.fx");
  c->graph_cls = fx.attr("Graph");
  c->graph_module_cls = fx.attr("GraphModule");
  c->module_cls = py::module_::import("torch.nn").attr("Module");
  const OpKind ops[6] = {OpKind::Placeholder, OpKind::GetAttr,    OpKind::CallFunction,
                         OpKind::CallMethod,  OpKind::CallModule, OpKind::Output};
  for (OpKind k : ops) c->op_strs[static_cast<int>(k)] = py::str(op_name(k));
  py::module_::import("atexit").attr("register")(py::cpp_function([] {
    delete g_cache;
    g_cache = nullptr;
  }));
  g_cache = c.release();
  return *g_cache;
}

py::object to_py(const Arg& a, const std::vector<py::object>& fx_nodes);

py::tuple to_py_tuple(const std::vector<Arg>& items, const std::vector<py::object>& fx_nodes) {
  py::tuple t(items.size());
  for (size_t i = 0; i < items.size(); ++i) {
    py::object v = to_py(items[i], fx_nodes);
    PyTuple_SET_ITEM(t.ptr(), static_cast<Py_ssize_t>(i), v.release().ptr());
  }
  return t;
}

py::object to_py(const Arg& a, const std::vector<py::object>& fx_nodes) {
  switch (a.kind) {
    case Arg::Kind::NodeRef: return fx_nodes[static_cast<size_t>(a.node->index)];
    case Arg::Kind::Const: return a.value ? a.value : py::none();
    case Arg::Kind::Tuple: return to_py_tuple(a.items, fx_nodes);
    case Arg::Kind::List: {
      py::list l(a.items.size());
      for (size_t i = 0; i < a.items.size(); ++i) {
        py::object v = to_py(a.items[i], fx_nodes);
        PyList_SET_ITEM(l.ptr(), static_cast<Py_ssize_t>(i), v.release().ptr());
      }
      return l;
    }
    case Arg::Kind::Slice: {
      py::object b[3];
      for (size_t i = 0; i < 3; ++i) b[i] = to_py(a.items[i], fx_nodes);
      PyObject* s = PySlice_New(b[0].ptr(), b[1].ptr(), b[2].ptr());  // new reference
      if (!s) throw py::error_already_set();
      return py::reinterpret_steal<py::object>(s);
    }
    case Arg::Kind::Dict: {
      py::dict d;
      for (size_t i = 0; i < a.items.size(); ++i) d[py::str(a.keys[i])] = to_py(a.items[i], fx_nodes);
      return d;
    }
  }
  return py::none();
}

}  // namespace

py::object Graph::to_fx(py::object root, const std::string& class_name, bool meta) const {
  verify();  // NodeRefs below index fx_nodes by position; foreign or forward refs must not get there.
  FxCache& c = cache();
  py::object fx_graph = c.graph_cls();
  py::object create_node = fx_graph.attr(c.s_create_node);
  std::vector<py::object> fx_nodes(nodes_.size());
  if (!root || root.is_none()) root = c.module_cls();
  std::optional<MetaWriter> writer;
  if (meta && node_meta()) writer.emplace(root);
  for (const auto& up : nodes_) {
    const Node& n = *up;
    py::tuple args = to_py_tuple(n.args, fx_nodes);
    py::dict kwargs;
    for (const auto& [k, v] : n.kwargs) kwargs[py::str(k)] = to_py(v, fx_nodes);
    py::object target = n.target ? n.target : py::none();
    py::object fx_node = create_node(c.op_strs[static_cast<int>(n.op)], target, args, kwargs, py::str(n.name));
    if (n.example_value && !n.example_value.is_none()) {
      py::object meta = fx_node.attr(c.s_meta);
      meta[c.s_example_value] = n.example_value;
    }
    if (writer) writer->write(n, fx_node.attr(c.s_meta));
    fx_nodes[static_cast<size_t>(n.index)] = std::move(fx_node);
  }
  return c.graph_module_cls(root, fx_graph, py::str(class_name));
}

}  // namespace cdynamo::graph
