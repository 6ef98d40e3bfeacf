// rebuild.h — owns emitting bytecode that rebuilds symbolic values after the graph ran: from graph outputs,
// Sources, constants and pinned objects.
#pragma once

#include <unordered_map>
#include <vector>

#include "codegen/emitter.h"
#include "interp/trace.h"
#include "interp/value.h"

namespace cdynamo::codegen {

// The builtin that calls a function with capture off (made by the hook stage at import; the Rebuilder emits
// calls to it to make the library objects the trace modelled). Borrowed: kept for the process lifetime.
void set_untraced_call(PyObject* fn);

// While one is alive (on the compiling thread), the trace's tensor keys (Trace::tensor_keys: a dict key's or set
// element's example -> its tensor value): a dict or set of the trace keyed by tensors is rebuilt with those tensors
// (graph outputs, or the frame's own) as its keys, in the trace's order. hook/translate.cpp opens one around
// collect_outputs and the code's emission; without one such a dict is Unsupported.
class TensorKeysScope {
 public:
  explicit TensorKeysScope(const interp::Trace& t);
  ~TensorKeysScope();
  TensorKeysScope(const TensorKeysScope&) = delete;
  TensorKeysScope& operator=(const TensorKeysScope&) = delete;

 private:
  const std::unordered_map<PyObject*, interp::ValuePtr>* outer_;
};

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
  // Side effects of the trace (containers from the frame written back, attribute and global stores) are
  // done in two steps so that no value is read after the state it came from changed: stage_effects()
  // evaluates every target and new value into temporaries (reads only); pin() does the same for a value
  // the caller pushes afterwards; commit_effects() then writes (stack neutral).
  static bool has_effects(const interp::Trace& t) { return !t.attr_stores.empty() || !t.mutated.empty(); }
  void stage_effects(const interp::Trace& t);
  void pin(const interp::ValuePtr& v);
  void commit_effects();
  // torch._C._set_grad_enabled(enabled) (stack neutral): the mode of a with block continued after a break.
  void set_grad_mode(bool enabled);
  // DELETE_FAST of every temporary made by share(), stage_effects() and pin(), once nothing reads them
  // (on one exit path; another path may still load and release them).
  void release();

 private:
  int stage(const interp::ValuePtr& v);  // push(v) into a new temporary; returns its slot
  // Pushes fn((items...)) (a namedtuple's _make, iter): items built above the NULL and `fn`.
  void call_on_tuple(py::handle fn, const std::vector<interp::ValuePtr>& items, int above);
  // push()'s cases: graph output `node` (a tensor or a symbolic number) read from the outputs tuple (false when it
  // is not one); an Object value; a Record (ModelOutput); a slice of symbolic bounds (their values now).
  bool push_output(graph::Node* node, int above);
  void push_object(const interp::ValuePtr& v, int above);
  void push_record(const interp::ValuePtr& v, int above);
  void push_slice(const interp::ValuePtr& v);
  // A dict key or set element: a constant, or the tensor value a tensor key's example stands for (TensorKeysScope).
  void push_key(const py::object& key, int above);
  // One staged effect: write-back of container contents (`name` empty, `obj_slot` the container) or a
  // store of `value_slot` to attribute `name` of `obj_slot` (a global when obj_slot < 0).
  struct Effect {
    int obj_slot = -1;
    int value_slot = -1;
    std::string name;
    bool write_back = false;
  };
  std::vector<Effect> effects_;
  std::vector<int> temps_;
  Emitter& e_;
  std::unordered_map<const interp::Value*, int> shared_;  // value -> temporary local holding it
  int out_slot_;
  std::unordered_map<graph::Node*, int> index_;
};

// Graph nodes whose values must leave the graph to rebuild `values`: tensors without a Source,
// reachable through tuples/lists, deduplicated in first-seen order.
std::vector<graph::Node*> collect_outputs(const std::vector<interp::ValuePtr>& values);

// True if pushing `v` reads a Source rooted in the frame's fast locals (directly, or through items, a
// receiver or a class): such a value must be read before the rewritten frame stores any local.
bool reads_frame_locals(const interp::ValuePtr& v);

// The values the trace's side effects store: attribute/global store values, and for each container from
// the frame that changed, a tuple of its new contents.
std::vector<interp::ValuePtr> effect_values(const interp::Trace& t);

}  // namespace cdynamo::codegen
