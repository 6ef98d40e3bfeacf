// verify.cpp — owns Graph::verify(): topological refs, ownership, unique names, placeholder/output layout.
#include <stdexcept>
#include <string_view>
#include <unordered_set>

#include "graph/graph.h"

namespace cdynamo::graph {
namespace {

[[noreturn]] void fail(const Node& n, const std::string& what) {
  throw std::runtime_error("graph verify: node '" + n.name + "' (" + op_name(n.op) + ", #" +
                           std::to_string(n.index) + "): " + what);
}

}  // namespace

void Graph::verify() const {
  std::unordered_set<std::string_view> names;
  names.reserve(nodes_.size() * 2);
  bool seen_non_placeholder = false;
  const Node* output = nullptr;

  for (size_t i = 0; i < nodes_.size(); ++i) {
    const Node& n = *nodes_[i];
    if (n.index != static_cast<int>(i)) fail(n, "index " + std::to_string(n.index) + " != position " + std::to_string(i));
    if (!names.insert(n.name).second) fail(n, "duplicate name '" + n.name + "'");

    if (n.op == OpKind::Placeholder) {
      if (seen_non_placeholder) fail(n, "placeholder after a non-placeholder node");
    } else {
      seen_non_placeholder = true;
    }
    if (n.op == OpKind::Output) {
      if (output) fail(n, "more than one output node (first: '" + output->name + "')");
      output = &n;
    } else if (output) {
      fail(*output, "output is not the last node (followed by '" + n.name + "')");
    }

    auto check = [&](const Arg& a, auto&& self) -> void {
      switch (a.kind) {
        case Arg::Kind::NodeRef: {
          const Node* r = a.node;
          if (r == nullptr) fail(n, "null node reference");
          bool owned = r->index >= 0 && static_cast<size_t>(r->index) < nodes_.size() &&
                       nodes_[static_cast<size_t>(r->index)].get() == r;
          if (!owned) fail(n, "argument '" + r->name + "' is not a node of this graph");
          if (static_cast<size_t>(r->index) >= i) fail(n, "argument '" + r->name + "' is defined at or after its use");
          if (r->op == OpKind::Output) fail(n, "argument '" + r->name + "' is the output node");
          return;
        }
        case Arg::Kind::Const: return;
        case Arg::Kind::Tuple:
        case Arg::Kind::List:
        case Arg::Kind::Dict:
        case Arg::Kind::Slice:
          if (a.kind == Arg::Kind::Dict && a.keys.size() != a.items.size()) fail(n, "dict argument with mismatched keys");
          for (const Arg& it : a.items) self(it, self);
          return;
      }
    };
    for (const Arg& a : n.args) check(a, check);
    for (const auto& kv : n.kwargs) check(kv.second, check);
  }
  if (!output) {
    throw std::runtime_error("graph verify: no output node" +
                             (nodes_.empty() ? std::string(" (empty graph)") : " (last node '" + nodes_.back()->name + "')"));
  }
}

}  // namespace cdynamo::graph
