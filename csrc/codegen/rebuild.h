// rebuild.h — owns emitting bytecode that rebuilds symbolic values after the graph ran: from graph outputs,
// Sources, constants and pinned objects.
#pragma once

#include <unordered_map>
#include <vector>

#include "codegen/emitter.h"
#include "interp/tracer.h"
#include "interp/value.h"

namespace cdynamo::codegen {

class Rebuilder {
 public:
  // Graph output k is read either from a temporary local `out_slot` (>= 0) or, when out_slot < 0, from
  // the output tuple sitting on the stack below the values pushed so far.
  Rebuilder(Emitter& e, const std::vector<graph::Node*>& outputs, int out_slot);
  // Emits code pushing `v`; `above` counts values pushed above the output tuple (stack mode only).
  void push(const interp::ValuePtr& v, int above = 0);
  // Lists made in the trace are objects: one that `roots` reach more than once (a local and a stack
  // slot, two items of a tuple) is built once into a temporary local here, and every push() of it
  // afterwards loads that local, so Python sees one list, as in eager. Call before any push().
  void share(const std::vector<interp::ValuePtr>& roots);
  // Replays the trace's attribute assignments (`obj.name = value`) in program order; stack neutral.
  void replay_attr_stores(const std::vector<interp::AttrStore>& stores);

 private:
  Emitter& e_;
  std::unordered_map<const interp::Value*, int> shared_;  // list value -> temporary local
  int out_slot_;
  std::unordered_map<graph::Node*, int> index_;
};

// Graph nodes whose values must leave the graph to rebuild `values`: tensors without a Source,
// reachable through tuples/lists, deduplicated in first-seen order.
std::vector<graph::Node*> collect_outputs(const std::vector<interp::ValuePtr>& values);

}  // namespace cdynamo::codegen
