// node_meta.h — owns writing a node's provenance (inline stack, nn.Module scopes) as torch._dynamo's node meta.
#pragma once

#include <unordered_map>

#include "graph/graph.h"

namespace cdynamo::graph {

// Whether to_fx writes stack_trace / nn_module_stack / source_fn_stack (on by default; _C._testing switches it
// off to measure what it costs).
void set_node_meta(bool on);
bool node_meta();

// Writes the meta of the nodes of one to_fx call. A stack_trace is formatted once per distinct inline stack (the
// stack frames are interned by the graph) and a module stack once per distinct scope; each node gets its own dict
// and list objects, as torch._dynamo's nodes do.
class MetaWriter {
 public:
  explicit MetaWriter(py::handle root);  // root: the GraphModule's root module (call_module targets), borrowed
  // meta["nn_module_stack"] (nodes made inside a module call), ["source_fn_stack"] (call_* nodes) and
  // ["stack_trace"] (nodes with a location) of `n`, written into the fx node's meta dict `fx_meta` (borrowed).
  void write(const Node& n, py::handle fx_meta);

 private:
  struct ScopeMeta {
    py::object stack;  // the nn_module_stack dict, copied per node
    py::object layer;  // a torch.nn layer class naming the ops made in it in source_fn_stack, or empty
  };
  py::object stack_trace(const SrcFrame* innermost);
  const ScopeMeta& scope_meta(const ModuleScope* scope);
  py::handle root_;
  std::unordered_map<const SrcFrame*, py::object> traces_;
  std::unordered_map<const ModuleScope*, ScopeMeta> scopes_;
};

}  // namespace cdynamo::graph
