// guard.h — owns Guard kinds and GuardSet: the checks a cache entry must pass before its code runs.
#pragma once

#include <Python.h>

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_set>
#include <vector>

#include "guards/source.h"
#include "guards/tensor_match.h"

namespace cdynamo::guards {

enum class GuardKind {
  TensorMatch,   // TENSOR_MATCH on the source's tensor
  TypeMatch,     // type(value) is T
  IdMatch,       // value is O (printed FUNCTION_MATCH for functions and modules, ID_MATCH otherwise)
  EqualsMatch,   // type(value) is type(C) and value == C
  LengthMatch,   // type(value) is T and len(value) == n
  DictKeys,      // value is an exact dict whose keys are `expected` (a tuple), in that order
  HasAttr,       // hasattr(value, label-name) == state
  DictContains,  // (key `expected` in the dict value, by dict's own C-level lookup) == state
  NoModuleHooks, // the nn.Module's forward / backward (pre-)hook dicts are all empty (C-level lookups)
  GradMode,      // torch.is_grad_enabled() == expected
  DefaultDtype,  // torch.get_default_dtype() == expected
  Autocast,      // the CPU / CUDA autocast switches and dtypes are as at compile time
  GlobalState,   // inference mode, deterministic algorithms, torch function state and modes as at compile time
  NoAliasing,    // the listed sources are pairwise distinct objects (state 1: tensors with distinct storages)
  StorageOverlap,  // the listed tensors share storages exactly as at compile time (`groups`)
  SameObject,    // the two listed sources hold the same object (a duplicated tensor input)
  ShapeEnv,      // integer relations between sizes / strides / ints of frame values hold (`shape`, shape_guard.h)
};

class ShapeProgram;  // shape_guard.h
class GuardTree;     // guard_tree.h

struct Guard {
  GuardKind kind;
  SourcePtr source;                       // null for global-state guards
  std::unique_ptr<TensorMatch> tensor;    // TensorMatch
  std::unique_ptr<ShapeProgram> shape;    // ShapeEnv: its slots, compiled programs, fallback and texts
  PyObject* expected = nullptr;           // owned: type, object or constant (borrowed when `weak` is set)
  PyObject* weak = nullptr;               // IdMatch: owned weakref to `expected`; the guard does not keep
                                          // the object alive and fails once it has died
  Py_ssize_t length = 0;                  // LengthMatch
  int state = 0;                          // GradMode / DefaultDtype expected value
  std::vector<SourcePtr> sources;         // NoAliasing / SameObject / StorageOverlap
  std::vector<int> groups;                // StorageOverlap: per source, the first source sharing its storage
  std::string label;                      // printed kind name ("TENSOR_MATCH", "FUNCTION_MATCH", ...)

  Guard() = default;
  Guard(const Guard&) = delete;
  Guard& operator=(const Guard&) = delete;
  Guard(Guard&&) noexcept;
  ~Guard();

  // True for an IdMatch whose object has died: the guard can never pass again.
  bool dead() const;
  // True if the guard holds; on failure fills *why (if given) with "<describe>: <reason>".
  bool check(const FrameView& fv, std::string* why) const;
  // check() of a guard with a `source`, given the source's value (borrowed; nullptr: missing): the guard tree
  // fetches each value once for every guard on it.
  bool check_value(PyObject* v, std::string* why) const;
  // "local 'x' TENSOR_MATCH"; SHAPE_ENV: "SHAPE_ENV: <text>; <text>; ..." (GuardSet::describe gives one line
  // per text instead).
  std::string describe() const;
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
