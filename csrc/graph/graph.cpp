// graph.cpp — owns Graph/Node/Arg construction: op names, Arg factories, node creation, op_count.
#include "graph/graph.h"

#include <utility>

namespace cdynamo::graph {

const char* op_name(OpKind k) {
  switch (k) {
    case OpKind::Placeholder: return "placeholder";
    case OpKind::GetAttr: return "get_attr";
    case OpKind::CallFunction: return "call_function";
    case OpKind::CallMethod: return "call_method";
    case OpKind::CallModule: return "call_module";
    case OpKind::Output: return "output";
  }
  return "?";
}

Arg Arg::ref(Node* n) {
  Arg a;
  a.kind = Kind::NodeRef;
  a.node = n;
  return a;
}

Arg Arg::constant(py::object v) {
  Arg a;
  a.kind = Kind::Const;
  a.value = std::move(v);
  return a;
}

Arg Arg::tuple(std::vector<Arg> items) {
  Arg a;
  a.kind = Kind::Tuple;
  a.items = std::move(items);
  return a;
}

Arg Arg::slice(Arg start, Arg stop, Arg step) {
  Arg a;
  a.kind = Kind::Slice;
  a.items = {std::move(start), std::move(stop), std::move(step)};
  return a;
}

Arg Arg::list(std::vector<Arg> items) {
  Arg a;
  a.kind = Kind::List;
  a.items = std::move(items);
  return a;
}

Arg Arg::dict(std::vector<std::string> keys, std::vector<Arg> values) {
  Arg a;
  a.kind = Kind::Dict;
  a.keys = std::move(keys);
  a.items = std::move(values);
  return a;
}

Node* Graph::add(OpKind op, std::string name, py::object target, std::vector<Arg> args,
                 std::vector<std::pair<std::string, Arg>> kwargs, py::object example_value) {
  auto n = std::make_unique<Node>();
  n->op = op;
  n->name = std::move(name);
  n->target = std::move(target);
  n->args = std::move(args);
  n->kwargs = std::move(kwargs);
  n->example_value = example_value ? std::move(example_value) : py::none();
  n->index = static_cast<int>(nodes_.size());
  if (op != OpKind::Output) {  // placeholders too: torch._dynamo's graph inputs carry where they were first read
    n->where = current_frame();
    n->scope = scope_;
  }
  nodes_.push_back(std::move(n));
  return nodes_.back().get();
}

Node* Graph::placeholder(const std::string& name, py::object example_value) {
  std::string n = unique_name(detail::candidate_for(OpKind::Placeholder, py::str(name)));
  // fx spells the generated forward()'s parameters from placeholder targets: they must be unique too.
  py::str target(n);
  Node* node = add(OpKind::Placeholder, std::move(n), std::move(target), {}, {}, std::move(example_value));
  // Move it behind the existing placeholders; later nodes shift by one.
  size_t at = num_placeholders_++;
  if (at + 1 != nodes_.size()) {
    std::unique_ptr<Node> p = std::move(nodes_.back());
    nodes_.pop_back();
    nodes_.insert(nodes_.begin() + static_cast<long>(at), std::move(p));
    for (size_t i = at; i < nodes_.size(); ++i) nodes_[i]->index = static_cast<int>(i);
  }
  return node;
}

void Graph::rollback(size_t m) {
  while (nodes_.size() - num_placeholders_ > m) {
    used_names_.erase(nodes_.back()->name);
    nodes_.pop_back();
  }
}

Node* Graph::get_attr(const std::string& qualname, py::object example_value) {
  py::str target(qualname);
  std::string n = unique_name(detail::candidate_for(OpKind::GetAttr, target));
  return add(OpKind::GetAttr, std::move(n), std::move(target), {}, {}, std::move(example_value));
}

Node* Graph::call_function(py::object target, std::vector<Arg> args,
                           std::vector<std::pair<std::string, Arg>> kwargs, py::object example_value) {
  std::string n = unique_name(detail::candidate_for(OpKind::CallFunction, target));
  return add(OpKind::CallFunction, std::move(n), std::move(target), std::move(args), std::move(kwargs),
             std::move(example_value));
}

Node* Graph::call_method(const std::string& method, std::vector<Arg> args,
                         std::vector<std::pair<std::string, Arg>> kwargs, py::object example_value) {
  py::str target(method);
  std::string n = unique_name(detail::candidate_for(OpKind::CallMethod, target));
  return add(OpKind::CallMethod, std::move(n), std::move(target), std::move(args), std::move(kwargs),
             std::move(example_value));
}

Node* Graph::call_module(const std::string& qualname, std::vector<Arg> args,
                         std::vector<std::pair<std::string, Arg>> kwargs, py::object example_value) {
  py::str target(qualname);
  std::string n = unique_name(detail::candidate_for(OpKind::CallModule, target));
  return add(OpKind::CallModule, std::move(n), std::move(target), std::move(args), std::move(kwargs),
             std::move(example_value));
}

Node* Graph::output(Arg value) {
  py::str target("output");
  std::string n = unique_name("output");
  std::vector<Arg> args;
  args.push_back(std::move(value));
  return add(OpKind::Output, std::move(n), std::move(target), std::move(args), {}, py::none());
}

int Graph::op_count() const {
  int c = 0;
  for (const auto& n : nodes_) {
    if (n->op == OpKind::CallFunction || n->op == OpKind::CallMethod || n->op == OpKind::CallModule) ++c;
  }
  return c;
}

}  // namespace cdynamo::graph
