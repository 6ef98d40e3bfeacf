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
  } else if (v->kind == VKind::Tuple || v->kind == VKind::List || v->kind == VKind::Dict) {
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

namespace {
void count_lists(const ValuePtr& v, std::unordered_map<const interp::Value*, int>& n,
                 std::vector<const interp::Value*>& order) {
  if (!v || (v->kind != VKind::Tuple && v->kind != VKind::List && v->kind != VKind::Dict)) return;
  if ((v->kind == VKind::List && !(v->source && v->obj)) || v->kind == VKind::Dict) {
    if (n[v.get()]++ == 0) order.push_back(v.get());
    else return;  // its items were counted on first sight
  }
  for (const auto& i : v->items) count_lists(i, n, order);
}
}  // namespace

void Rebuilder::share(const std::vector<ValuePtr>& roots) {
  std::unordered_map<const interp::Value*, int> n;
  std::vector<const interp::Value*> order;
  for (const auto& r : roots) count_lists(r, n, order);
  // Innermost first (a shared list inside a shared list is loaded, not rebuilt); `order` is outer-first.
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    if (n[*it] < 2) continue;
    // Find the owning ValuePtr again to call push() (which recurses through items).
    for (const auto& r : roots) {
      std::vector<ValuePtr> work{r};
      ValuePtr found;
      while (!work.empty() && !found) {
        ValuePtr w = work.back();
        work.pop_back();
        if (!w) continue;
        if (w.get() == *it) found = w;
        else if (w->kind == VKind::Tuple || w->kind == VKind::List || w->kind == VKind::Dict)
          for (const auto& i : w->items) work.push_back(i);
      }
      if (found) {
        push(found, 0);
        int slot = e_.add_local("___list" + std::to_string(shared_.size()));
        e_.emit("STORE_FAST", slot);
        shared_[*it] = slot;
        break;
      }
    }
  }
}

void Rebuilder::replay_attr_stores(const std::vector<interp::AttrStore>& stores) {
  for (const auto& s : stores) {
    if (!s.obj) {
      push(s.value, 0);
      e_.emit("STORE_GLOBAL", e_.name_index(s.name));
      continue;
    }
    push(s.value, 0);
    push(s.obj, 1);
    e_.emit("STORE_ATTR", e_.name_index(s.name));
  }
}

void Rebuilder::push(const ValuePtr& v, int above) {
  if (v->kind == VKind::List || v->kind == VKind::Dict) {
    auto it = shared_.find(v.get());
    if (it != shared_.end()) {
      e_.emit("LOAD_FAST", it->second);
      return;
    }
  }
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
      if (v->made_in_trace)
        throw interp::Unsupported("a function made in the trace cannot be passed back to Python yet");
      if (v->self) {  // a bound method: its receiver, then the attribute again
        push(v->self, above);
        e_.emit("LOAD_ATTR", e_.name_index(v->name));
        return;
      }
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
    case VKind::Method:  // a method of a tensor or dict of the trace: its receiver, then the attribute
      push(v->self, above);
      e_.emit("LOAD_ATTR", e_.name_index(v->name));
      return;
    case VKind::Dict: {
      int k = 0;
      for (size_t i = 0; i < v->items.size(); ++i) {
        e_.load_const(v->keys[i]);
        push(v->items[i], above + k + 1);
        k += 2;
      }
      e_.emit("BUILD_MAP", static_cast<int>(v->items.size()));
      return;
    }
    case VKind::Iter: {
      // An iterator over values known at trace time: iter() of a tuple of the items not yet consumed.
      if (v->pos != 0) throw interp::Unsupported("cannot rebuild an iterator in the middle of a loop");
      e_.emit("PUSH_NULL");
      e_.load_const(py::module_::import("builtins").attr("iter"));
      int k = 0;
      for (const auto& i : v->items) push(i, above + 2 + k++);
      e_.emit("BUILD_TUPLE", static_cast<int>(v->items.size()));
      e_.emit("PRECALL", 1);
      e_.emit("CALL", 1);
      return;
    }
  }
}

}  // namespace cdynamo::codegen
