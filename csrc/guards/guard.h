// guard.h — owns Guard (a kind, its source, its typed payload), GuardSet and the builders: what a cache entry checks.
#pragma once

#include <Python.h>

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <variant>
#include <vector>

#include "guards/guard_kinds.h"
#include "guards/source.h"
#include "guards/tensor_match.h"

namespace cdynamo::guards {

class ShapeProgram;  // shape_guard.h
class GuardTree;     // guard_tree.h

// One check a cache entry must pass. `kind` says what is checked and which payload (guard_kinds.h) holds what it is
// checked against; the constructor refuses a payload of another family, and each accessor below checks that the
// payload is its own (std::logic_error otherwise), as Value's do.
struct Guard {
 public:
  const GuardKind kind;  // fixed at construction, with the payload that is its own
  SourcePtr source;   // the value checked; null for global-state, relational and SHAPE_ENV guards
  std::string label;  // printed kind name ("TENSOR_MATCH", "FUNCTION_MATCH", ...)

  // Throws std::logic_error if `payload` is not `kind`'s.
  Guard(GuardKind kind, SourcePtr source, std::string label, GuardPayload payload);
  Guard(const Guard&) = delete;
  Guard& operator=(const Guard&) = delete;
  Guard(Guard&&) noexcept;
  ~Guard();

  const TensorCheck& tensor() const { return as<TensorCheck>("tensor"); }
  const TypeCheck& type() const { return as<TypeCheck>("type"); }
  const IdentityCheck& identity() const { return as<IdentityCheck>("identity"); }
  const ConstantCheck& constant() const { return as<ConstantCheck>("constant"); }
  const LengthCheck& length() const { return as<LengthCheck>("length"); }
  const KeysCheck& keys() const { return as<KeysCheck>("keys"); }
  const AttrCheck& attr() const { return as<AttrCheck>("attr"); }
  const KeyCheck& key() const { return as<KeyCheck>("key"); }
  const HooksCheck& hooks() const { return as<HooksCheck>("hooks"); }
  const GradModeCheck& grad_mode() const { return as<GradModeCheck>("grad_mode"); }
  const DefaultDtypeCheck& default_dtype() const { return as<DefaultDtypeCheck>("default_dtype"); }
  const AutocastCheck& autocast() const { return as<AutocastCheck>("autocast"); }
  const GlobalStateCheck& global_state() const { return as<GlobalStateCheck>("global_state"); }
  const DistinctCheck& distinct() const { return as<DistinctCheck>("distinct"); }
  const OverlapCheck& overlap() const { return as<OverlapCheck>("overlap"); }
  const SameCheck& same() const { return as<SameCheck>("same"); }
  const ShapeCheck& shape() const { return as<ShapeCheck>("shape"); }
  // The sources of a relational guard (NO_TENSOR_ALIASING, STORAGE_OVERLAP, DUPLICATE_INPUT); throws for others.
  const std::vector<SourcePtr>& related() const;
  // TENSOR_MATCH's TensorMatch (owned by this guard), nullptr for every other kind.
  const TensorMatch* tensor_or_null() const {
    const TensorCheck* t = std::get_if<TensorCheck>(&payload_);
    return t ? t->match.get() : nullptr;
  }

  // True for an ID_MATCH whose object has died: the guard can never pass again.
  bool dead() const;
  // True if the guard holds; on failure fills *why (if given) with "<describe>: <reason>".
  bool check(const FrameView& fv, std::string* why) const;
  // check() of a guard with a `source`, given the source's value (borrowed; nullptr: missing): the guard tree
  // fetches each value once for every guard on it.
  bool check_value(PyObject* v, std::string* why) const;
  // "local 'x' TENSOR_MATCH"; SHAPE_ENV: "SHAPE_ENV: <text>; <text>; ..." (GuardSet::describe gives one line
  // per text instead).
  std::string describe() const;

 private:
  template <class T>
  const T& as(const char* accessor) const {
    if (const T* p = std::get_if<T>(&payload_)) return *p;
    wrong_payload(accessor);
  }
  [[noreturn]] void wrong_payload(const char* accessor) const;
  bool check_state(std::string* why) const;  // check() of the global-state kinds
  bool check_relation(const FrameView& fv, std::string* why) const;  // check() of the relational kinds

  GuardPayload payload_;  // what `kind` checks against: its family's struct (guard_kinds.h)
};

class GuardSet {
 public:
  GuardSet();
  ~GuardSet();
  GuardSet(GuardSet&&) noexcept;
  GuardSet& operator=(GuardSet&&) noexcept;
  void add(Guard g);
  // Evaluates every guard; no Python calls for locals/globals/tensors. Never leaves a Python error set.
  // Without `why`: the guard tree (guard_tree.h) decides. With `why`: the guards in order, as a flat list,
  // so the first failing guard of the list is the one named.
  bool check(const FrameView& fv, std::string* why = nullptr) const;
  // check() by the guard tree that, when it passes, also appends the values of the input sources
  // (set_input_sources) as the walk fetched them (new references) to *inputs: the graph's lifted inputs, not
  // looked up again. On failure *inputs is left as it was.
  bool check_inputs(const FrameView& fv, std::vector<PyObject*>* inputs) const;
  // Sources whose values check_inputs hands out, in order; each is a node of the tree (with no guard of its own
  // a missing value fails the check, as every guarded source's does). Replaces any earlier list.
  void set_input_sources(std::vector<SourcePtr> sources);
  const std::vector<SourcePtr>& input_sources() const { return input_sources_; }
  // The guards as a tree, one line per source, indented under the source it is read from (CDYNAMO_LOGS=guards).
  std::string tree_text() const;
  // The guards in the order added (the tree reads them).
  const std::vector<Guard>& guards() const { return guards_; }
  // One line per guard, in order; a SHAPE_ENV guard gives one "SHAPE_ENV: <text>" line per relation.
  std::vector<std::string> describe() const;
  size_t size() const { return guards_.size(); }
  // True if some guard holds an object that has died (the entry can never match again).
  bool dead() const;
  // True if an equivalent guard (same kind and source text) is already present.
  bool has(GuardKind kind, const Source& src) const;

 private:
  // The evaluation plan, built by add(): guards_ in order, with runs of consecutive TENSOR_MATCH guards on
  // fast sources and NO_TENSOR_ALIASING on fast sources evaluated by borrowed, allocation-free fast
  // tests. A fast test that fails hands the guard to Guard::check, which decides and explains; a fast
  // test that passes implies Guard::check would pass.
  struct Step {
    enum class Op : uint8_t { Generic, Tensors, NoAliasing };
    Op op;
    uint32_t guard;  // index into guards_ (Tensors: of the first guard of the run)
    uint32_t begin;  // Tensors: range in tensor_checks_; NoAliasing: range in alias_refs_
    uint32_t end;
  };
  void plan(const Guard& g, uint32_t index);
  bool flat_check(const FrameView& fv, std::string* why) const;
  const GuardTree& tree() const;  // built on first use after add()
  mutable std::unique_ptr<GuardTree> tree_;  // owns the nodes and their per-node memo (updated by check())

  std::vector<Guard> guards_;
  std::vector<SourcePtr> input_sources_;  // check_inputs' sources (interned into the tree)
  // "kind|text" of each guard (add's dedup) and "kind|source text" of each guard with a source (has()):
  // hashed, so adding N guards does not describe every earlier guard again (quadratic on big frames).
  std::unordered_set<std::string> texts_;
  std::unordered_set<std::string> sourced_;
  std::vector<Step> steps_;
  // The base sources of the guards' sources, numbered for FetchMemo; equal paths share a slot.
  uint32_t base_slot(const Source* s);
  bool deep_sources_ = false;  // some guard reads a source two or more steps from the frame (memoized)
  FetchMemo::Slots base_slots_;
  std::unordered_map<std::string, uint32_t> slot_by_path_;
  uint32_t nslots_ = 0;
  std::vector<FastTensorCheck> tensor_checks_;
  std::vector<FastRef> alias_refs_;
};

// Builders. All take borrowed `value` (the value seen at compile time). SHAPE_ENV's builder, shape_guard(), is
// in shape_guard.h.
// dynamic_sizes / dynamic_strides: bit d set = dimension d's size / stride is not checked (dimensions 0..63;
// its relations live in a SHAPE_ENV guard). ndim, dtype, device, ... are still checked.
Guard tensor_match(SourcePtr src, PyObject* value, uint64_t dynamic_sizes = 0, uint64_t dynamic_strides = 0);
Guard type_match(SourcePtr src, PyObject* value);
Guard id_match(SourcePtr src, PyObject* value);
Guard equals_match(SourcePtr src, PyObject* value);
Guard length_match(SourcePtr src, PyObject* value);
Guard dict_keys_match(SourcePtr src, PyObject* dict);
Guard has_attr(SourcePtr src, const std::string& name, bool present);
// `key` (borrowed, hashable) is (or is not) a key of the dict (or dict subclass) at `src`, past any override.
Guard dict_contains(SourcePtr src, PyObject* key, bool present);
Guard no_module_hooks(SourcePtr module);
// torch.nn.Module.__getattr__ (borrowed, kept for the process; nullptr if torch.nn cannot be read): HASATTR decides
// at C level for classes that keep it. The first call imports torch.nn.
PyObject* nn_module_getattr();
Guard grad_mode_guard();
Guard default_dtype_guard();
Guard autocast_guard();
Guard global_state_guard();
// storages: the sources are tensors whose storages must also be distinct (inputs that overlap in memory
// change what a backend may assume: aot_eager functionalizes mutations per input).
Guard no_aliasing(std::vector<SourcePtr> sources, bool storages = false);
// The tensors at `sources` share storages as `values` (borrowed, parallel) do now.
Guard storage_overlap(std::vector<SourcePtr> sources, const std::vector<PyObject*>& values);
// Per value, the index of the first value with the same storage (tensors without one: their own index).
std::vector<int> storage_groups(const std::vector<PyObject*>& values);
Guard same_object(SourcePtr a, SourcePtr b);

}  // namespace cdynamo::guards
