// trace.h — owns `Trace`, the state one trace builds and its frames share (graph, guards, inputs, side effects,
// objects of the frame by identity), and `TraceOptions`, what the hook decides about a trace before it runs.
#pragma once

#include <pybind11/pybind11.h>

#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "graph/graph.h"
#include "guards/guard.h"
#include "interp/value.h"

namespace cdynamo::interp {

// An attribute assignment on an object of the frame (or, with a null `obj`, an assignment to a global of
// the frame), replayed as Python after the graph, in program order.
struct AttrStore {
  ValuePtr obj;  // has a Source; null for a global
  std::string name;
  ValuePtr value;
};

// A graph input: where it comes from, its placeholder, and the value seen at compile time.
struct Input {
  SourcePtr source;
  graph::Node* node = nullptr;
  py::object value;
};

// The graph under construction and what it relies on and leaves behind: shared by every frame of one trace (the
// traced frame and the callees inlined into it). Codegen and the hook read it once the trace stopped.
struct Trace {
  graph::Graph graph;
  guards::GuardSet guards;
  std::vector<Input> inputs;
  // Per input (set by translate before codegen): 1 if the graph call gets it from the guard check (a source read
  // through the frame's objects), so the rewritten code does not load it.
  std::vector<char> lifted_inputs;
  // Tensors the graph holds as constants (get_attr targets, assume_constant_result): set on the GraphModule's root.
  std::vector<std::pair<std::string, py::object>> graph_attrs;
  std::vector<AttrStore> attr_stores;  // pending `obj.name = value` side effects, in program order
  // Lists, dicts and sets from the frame (with a Source and `frame_container()`) whose contents the trace changed, in
  // first-change order: codegen writes their final contents back into the real objects after the graph.
  std::vector<ValuePtr> mutated;
  // The value of each list / dict / set object read from the frame: one object seen through two sources
  // (an argument and a global) is one value, so a change made through one is seen through the other.
  std::unordered_map<PyObject*, ValuePtr> frame_containers;
  // The same for plain Python instances (lazy identity): one object read through two sources is one value.
  std::unordered_map<PyObject*, ValuePtr> frame_objects;
  // Tensors used as keys of dicts of the trace, by their example (what a Dict value holds in `keys` for them: a
  // tensor hashes by identity, and one tensor has one example, an in-place op's result included), so a key read
  // back (iteration, views) is that tensor again. The values own the examples the map is keyed by.
  std::unordered_map<PyObject*, ValuePtr> tensor_keys;
  // Whether a container of the frame (or an item of an object) was written in this trace: from then on an
  // attribute read pins the object's identity (the container could be its __dict__).
  bool items_written = false;
};

// What the hook (hook/translate.cpp) sets before Tracer::run: dynamic shapes, a continuation's layout, and what an
// earlier attempt at the same frame taught.
struct TraceOptions {
  // Dynamic shapes (cdynamo._dynamic): the callback's `dynamic` argument (None, True or False), and for a trace with
  // fake tensors its TraceShapes (ShapeEnv + FakeTensorMode); empty for a static trace (meta examples).
  py::object cb_dynamic = py::none();
  py::object shapes;
  bool dynamic() const { return static_cast<bool>(shapes); }
  // Tensor operations inside a frame's try block: allowed while tracing (ops_in_try records them); the
  // graph then must fail cleanly (a failed call reruns the frame as Python, which reaches the handler), or
  // the frame is traced again with them refused.
  bool allow_ops_in_try = true;
  // Free-variable slots whose cell only this frame uses (a continuation's closure over the cells of the
  // frame it continues): assignments to them are traced like local stores and written back at a break.
  std::vector<char> owned_free;
  bool owns_free(int slot) const {
    return static_cast<size_t>(slot) < owned_free.size() && owned_free[static_cast<size_t>(slot)];
  }
  // For a continuation of a long function: per instruction, >= 0 where its window ends (a tail call to the
  // next part of the function starts); the trace stops there with a graph break.
  std::vector<int> window_end;
  bool at_window_end(size_t index) const { return index < window_end.size() && window_end[index] >= 0; }
  // An instruction an earlier trace of this frame failed at after adding guards (a BreakAt restart, restart.h): the
  // trace stops there with a graph break, giving `break_at_reason`. -1 otherwise.
  int break_at = -1;
  std::string break_at_reason;
};

}  // namespace cdynamo::interp
