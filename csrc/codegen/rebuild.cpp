// rebuild.cpp — owns the value-rebuilding emitter shared by straight-line and graph-break codegen.
#include "codegen/rebuild.h"

#include <unordered_set>

namespace cdynamo::codegen {

using interp::ValuePtr;
using interp::VKind;

namespace {
void collect(const ValuePtr& v, std::vector<graph::Node*>& out, std::unordered_set<graph::Node*>& seen) {
  if (v->is_tensor()) {
    if (!v->source && seen.insert(v->node).second) out.push_back(v->node);
  } else if (v->kind == VKind::Tuple || v->kind == VKind::List) {
    if (v->kind == VKind::List && v->source && v->obj) return;  // rebuilt from its source
    for (const auto& i : v->items) collect(i, out, seen);
  } else if (v->kind == VKind::Method) {
    collect(v->self, out, seen);
  }
}
}  // namespace

std::vector<graph::Node*> collect_outputs(const std::vector<ValuePtr>& values) {
  std::vector<graph::Node*> out;
  std::unordered_set<graph::Node*> seen;
  for (const auto& v : values)
    if (v) collect(v, out, seen);
  return out;
}

Rebuilder::Rebuilder(Emitter& e, const std::vector<graph::Node*>& outputs, int out_slot) : e_(e), out_slot_(out_slot) {
  for (size_t i = 0; i < outputs.size(); ++i) index_[outputs[i]] = static_cast<int>(i);
}

void Rebuilder::push(const ValuePtr& v, int above) {
  switch (v->kind) {
    case VKind::Tensor: {
      if (v->source) {
        e_.load_source(*v->source);
        return;
      }
      auto it = index_.find(v->node);
      if (it == index_.end()) throw interp::Unsupported("tensor value is not a graph output");
      if (out_slot_ >= 0) e_.emit("LOAD_FAST", out_slot_);
      else e_.emit("COPY", above + 1);
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
      if (v->source && (v->kind == VKind::List ? static_cast<bool>(v->obj) : true)) {
        e_.load_source(*v->source);  // the caller's own object: identity preserved
        return;
      }
      int k = 0;
      for (const auto& i : v->items) push(i, above + k++);
      e_.emit(v->kind == VKind::Tuple ? "BUILD_TUPLE" : "BUILD_LIST", static_cast<int>(v->items.size()));
      return;
    }
    case VKind::Null:
      e_.emit("PUSH_NULL");
      return;
    case VKind::Method:
      throw interp::Unsupported("cannot rebuild a bound method on its own");
  }
}

}  // namespace cdynamo::codegen
