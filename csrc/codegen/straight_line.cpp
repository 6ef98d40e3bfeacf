// straight_line.cpp — owns codegen for frames traced to RETURN_VALUE: one compiled call and the rebuilt result.
#include <unordered_map>
#include <unordered_set>

#include "codegen/codegen.h"
#include "codegen/emitter.h"

namespace cdynamo::codegen {

using interp::ValuePtr;
using interp::VKind;

namespace {

void collect(const ValuePtr& v, std::vector<graph::Node*>& out, std::unordered_set<graph::Node*>& seen) {
  if (v->is_tensor()) {
    if (seen.insert(v->node).second) out.push_back(v->node);
  } else if (v->kind == VKind::Tuple || v->kind == VKind::List) {
    for (const auto& i : v->items) collect(i, out, seen);
  }
}

// Pushes values rebuilt from the graph-output tuple sitting `depth` slots below the top of the stack.
class Rebuilder {
 public:
  Rebuilder(Emitter& e, const std::vector<graph::Node*>& outputs) : e_(e) {
    for (size_t i = 0; i < outputs.size(); ++i) index_[outputs[i]] = static_cast<int>(i);
  }
  // Emits code pushing `v`; `above` is how many values sit above the output tuple before the push.
  void push(const ValuePtr& v, int above) {
    switch (v->kind) {
      case VKind::Tensor: {
        auto it = index_.find(v->node);
        if (it == index_.end()) throw interp::Unsupported("tensor result is not a graph output");
        e_.emit("COPY", above + 1);
        e_.load_const(py::int_(it->second));
        e_.emit("BINARY_SUBSCR");
        return;
      }
      case VKind::Const:
        e_.load_const(v->obj);
        return;
      case VKind::Object:
        if (v->source) e_.load_source(*v->source);
        else e_.load_const(v->obj);
        return;
      case VKind::Tuple:
      case VKind::List: {
        if (v->kind == VKind::List && v->source && v->obj) {
          e_.load_source(*v->source);  // the caller's own list object: identity preserved
          return;
        }
        int k = 0;
        for (const auto& i : v->items) push(i, above + k++);
        e_.emit(v->kind == VKind::Tuple ? "BUILD_TUPLE" : "BUILD_LIST", static_cast<int>(v->items.size()));
        return;
      }
      default:
        throw interp::Unsupported("cannot rebuild " + v->describe() + " after the graph");
    }
  }

 private:
  Emitter& e_;
  std::unordered_map<graph::Node*, int> index_;
};

}  // namespace

std::vector<graph::Node*> collect_outputs(const std::vector<ValuePtr>& values) {
  std::vector<graph::Node*> out;
  std::unordered_set<graph::Node*> seen;
  for (const auto& v : values) collect(v, out, seen);
  return out;
}

py::object straight_line(interp::Tracer& t, const std::string& compiled_name,
                         const std::vector<graph::Node*>& outputs) {
  Emitter e(t.code);
  e.copy_prefix(t.bc);
  e.emit("LOAD_GLOBAL", (e.name_index(compiled_name) << 1) | 1);
  for (const auto& in : t.inputs) e.load_source(*in.source);
  int n = static_cast<int>(t.inputs.size());
  e.emit("PRECALL", n);
  e.emit("CALL", n);
  const ValuePtr& ret = t.return_value;
  if (ret->is_tensor() && outputs.size() == 1 && outputs[0] == ret->node) {
    e.emit("UNPACK_SEQUENCE", 1);
  } else {
    Rebuilder r(e, outputs);
    r.push(ret, 0);
    e.emit("SWAP", 2);
    e.emit("POP_TOP");
  }
  e.emit("RETURN_VALUE");
  return e.finish(true);
}

}  // namespace cdynamo::codegen
