// guard_tree.h — owns GuardTree: a GuardSet's guards as one node per source, each value fetched once per check,
// with per-node memos that skip what an unchanged dict (version stamps, compat/versions.h) proves unchanged.
#pragma once

#include <Python.h>

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "guards/guard.h"

namespace cdynamo::guards {

// Built from a GuardSet (which keeps the flat, ordered list for reasons and describe()). Sources are interned by
// (parent node, step), so building is linear in the number of guards. A check runs the global-state guards, then
// walks the nodes depth first (a node's value is fetched once from its parent's value; its leaf guards, cheapest
// and most often failing first, then its children), then the relational guards over the fetched values
// (NO_TENSOR_ALIASING, STORAGE_OVERLAP, DUPLICATE_INPUT), then SHAPE_ENV. The verdict is the conjunction of all
// guards, as the flat list gives it.
//
// Memo (soundness): a node reached through a dict (a `_modules` / `_parameters` / `_buffers` item, a global, an
// attribute found in an instance __dict__ of a class with object's __getattribute__ and no data descriptor of
// that name) remembers the stamp it was read under (the dict's version, and the class's version for an
// attribute) and the object read. The same stamp proves the same object is there now (stamps are unique over
// all dict states), so the lookup is skipped, and leaf guards that depend only on the object's identity
// (ID_MATCH, EQUALS_MATCH on an immutable constant, TUPLE_LENGTH) or on its own dict's contents (DICT_KEYS,
// DICT_CONTAINS, NO_HOOKS' hook dicts, re-read for emptiness) are skipped when they passed for that object and
// state. TENSOR_MATCH, TYPE_MATCH, HASATTR, list lengths and everything else run on every check: a tensor's
// metadata (requires_grad, resize_, set_) and an object's class change without any dict changing.
//
// Replay (guard_replay.cpp): from the second passing check on, a subtree whose every node is proven by a stamp (a
// dict item, an instance-dict attribute, a class attribute), by a proven exact tuple (its items) or by a live read
// of a function's or cell's field, and whose leaves run no Python, gets a flat list of the checks its memos make:
// each distinct stamp once, TYPE_MATCH, TENSOR_MATCH, the hook dicts' emptiness, the field reads, in the order the
// walk makes them (an object is read only after the check proving it alive), then the values the inputs and
// relations need. When the subtree's root is reached again with the same object, the list runs instead of the
// walk below it; it gives the verdict the walk would give, and on any miss the walk runs as before and the list
// is dropped. The roots with stamped fetches (globals, builtins, class roots) share one list.
class GuardTree {
 public:
  // Reads the set's guards; keeps indices and Source pointers (owned by the guards' shared sources), not the set,
  // which may move: check() and text() are given its guards again.
  explicit GuardTree(const GuardSet& set);
  GuardTree(const GuardTree&) = delete;
  GuardTree& operator=(const GuardTree&) = delete;
  // The verdict of every guard of the set. Never leaves a Python error set.
  // With `inputs`: when every guard passes, the values of the set's input sources (GuardSet::set_input_sources)
  // as this walk fetched them are appended (new references).
  bool check(const std::vector<Guard>& guards, const FrameView& fv, std::vector<PyObject*>* inputs = nullptr) const;
  // One line per node, indented under its parent: "local 'self'", "  ._modules", "    ['0']: ID_MATCH, NO_HOOKS".
  std::string text(const std::vector<Guard>& guards) const;
  size_t node_count() const { return nodes_.size(); }

 private:
  // One check of a replay list (guard_replay.cpp); `obj` and the pointers are borrowed, proven alive by the ops
  // before it.
  struct Op {
    enum Code : uint8_t {
      FrameGlobals, FrameBuiltins, DictVer, InstAttr, ClassVer, TypeIs, Tensor, Own, HookEmpty, Leaf, FieldLeaf,
      FieldItemLeaf, Value
    };
    Code code;
    uint32_t node = 0;            // Value: the node whose value is handed to the walk
    PyObject* obj = nullptr;      // the value read (DictVer: the dict; FrameGlobals/FrameBuiltins: the frame's dict)
    const void* a = nullptr;      // InstAttr: the instance dict; TypeIs: the type; Tensor: the TensorMatch;
                                  // Own: the own dict
    uint64_t ver = 0;             // a's version (DictVer: obj's; ClassVer: the class obj's)
    const void* b = nullptr;      // InstAttr: the class
    uint64_t ver2 = 0;            // InstAttr: the class's version; Leaf / FieldLeaf: the guard's index
    // HookEmpty: the four hook dicts of a module, all empty: obj, a, b and `ver` (a pointer).
    // FieldLeaf: `ver` is the field of the function or cell `obj` read live (Field), the guard runs on it.
    // FieldItemLeaf: the same field, an exact tuple read live, and its item `ver >> 8` (`ver & 0xff`: the Field).
  };
  enum class Field : uint8_t { CellContents, Code, Defaults, Name, Closure, TypeName, PropertyGet };
  struct Replay {
    PyObject* anchor = nullptr;  // the subtree root's value when built (an identity: compared, never dereferenced)
    PyTypeObject* anchor_type = nullptr;  // its class then (borrowed: an identity as well)
    std::vector<Op> ops;     // the checks, in walk order, each stamp once
    std::vector<Op> values;  // Value ops: the values the walk hands to inputs and relations, set once all pass
    uint8_t builds = 0;          // lists built for this node (capped: a subtree that keeps changing walks)
  };
  enum class Skip : uint8_t { Never, SameObject, SameContents, Hooks };
  struct Leaf {
    uint32_t guard;
    GuardKind kind;
    const TensorMatch* tensor;  // TENSOR_MATCH: owned by the guard
    PyObject* type = nullptr;   // TYPE_MATCH: the class (borrowed from the guard, which owns it), checked inline
    uint8_t cost;  // 0: pointer compares; 1: a few loads or lookups; 2: a loop over items; 3: may call Python
    bool pure = false;  // LIST_LENGTH of a static type's object: runs no Python (a replay list may run it)
    Skip skip;
    uint32_t fails = 0;
  };
  // Where a value was read now (from_ver 0: nowhere provable): the part of a Memo a fetch fills, kept small (a
  // visit makes one per node).
  struct Stamp {
    const void* from = nullptr;
    uint64_t from_ver = 0;
    const void* from2 = nullptr;
    uint64_t from2_ver = 0;
  };
  // What a node's last passing visit saw. Pointers are identities, dereferenced only once a stamp proves the
  // object is still held where it was read.
  struct Memo {
    const void* from = nullptr;  // the dict read (item, global), or the instance dict (attribute)
    uint64_t from_ver = 0;       // its version then (0: no memo)
    const void* from2 = nullptr; // builtins: the builtins dict; attribute: the object's class
    uint64_t from2_ver = 0;
    PyObject* value = nullptr;   // the object read under that stamp
    const void* own = nullptr;   // the value's own dict (a dict value) or instance dict, when its leaves passed
    uint64_t own_ver = 0;
    PyObject* hooks[4] = {nullptr, nullptr, nullptr, nullptr};  // NO_HOOKS: the hook dicts in `own`
    bool leaves_ok = false;      // the leaves passed for `value` (and `own` at own_ver)
  };
  // A check touches the node's own fields, its leaves (a range of leaves_) and its children (a range of
  // child_ids_): contiguous, so a deep tree is walked without a cache miss per source object.
  struct Node {
    const Source* source = nullptr;  // the first source interned here (its step is the accessor)
    Source::Kind kind = Source::Kind::Local;  // copied from `source`
    PyObject* name_obj = nullptr;             // borrowed from `source`
    PyObject* owner = nullptr;                // borrowed from `source`
    int32_t parent = -1;
    uint32_t depth = 0;
    uint32_t leaf_begin = 0, leaf_end = 0;    // leaves_[leaf_begin, leaf_end)
    uint32_t child_begin = 0, child_end = 0;  // child_ids_[child_begin, child_end)
    std::vector<uint32_t> children;           // while building
    std::vector<Leaf> leaves;                 // while building
    bool wants_own = false;  // some leaf skips on the value's own dict state
    bool has_hooks = false;
    bool id_leaf = false;    // an ID_MATCH among the leaves: a passing visit proves the value is the guard's object
    uint32_t busy = 0;  // visits iterating `leaves` now
    // A class root (class_root_of): the class C every `x.__class__` of an x TYPE_MATCHed to C reads (borrowed from
    // that TYPE_MATCH guard's `type()`), and the class version at which C was last seen to read its own type for
    // `__class__` (0: check again).
    PyObject* class_of = nullptr;
    uint64_t class_ver = 0;
    Memo memo;
    Replay replay;
  };
  // A guard over several sources, evaluated on the nodes' values; `last` holds the identities (or storages) of
  // the last passing check: the same identities give the same verdict.
  struct Relation {
    uint32_t guard;
    std::vector<uint32_t> nodes;
    std::vector<uint8_t> tensor;  // per node: it has a TENSOR_MATCH leaf (its value is a tensor once leaves pass)
    std::vector<const void*> last;
    bool passed = false;
  };
  struct Walk;

  uint32_t intern(const Source* s);
  // `x.__class__` (an attribute or object.__getattribute__ step) where x's node has TYPE_MATCH(C) and C reads its own
  // type for `__class__`: one root per C (and step kind), shared by every such x, so the guards on a class (its
  // forward, the forward's closure, ...) are checked once per call, not once per instance (16 decoder layers: one
  // class subtree). Sound because the TYPE_MATCH on each x is checked too and the guards are a conjunction; the root
  // fails (a recompile) if C stops reading its own type for `__class__`. Returns C (borrowed from its TYPE_MATCH) when
  // `s` is such a step under node `parent`, else nullptr; intern() then makes or finds the class root.
  PyObject* class_root_of(const Source* s, int32_t parent) const;
  PyObject* fetch_class(Node& n, bool* same, Stamp* stamp) const;
  PyObject* fetch(Walk& w, Node& n, PyObject* parent, bool parent_same, bool* same, Stamp* stamp) const;
  // fetch()'s attribute cases: a function's or cell's field, obj.__class__, a class attribute, and an attribute read
  // through object's __getattribute__ (Attr falls through to GenericAttr); same contract as fetch().
  PyObject* fetch_attr(Walk& w, Node& n, PyObject* parent, bool parent_same, bool* same, Stamp* stamp) const;
  PyObject* fetch_generic_attr(Walk& w, Node& n, PyObject* parent, bool* same, Stamp* stamp) const;
  bool visit(Walk& w, uint32_t id, PyObject* parent, bool parent_same) const;
  bool check_relation(Walk& w, Relation& r) const;
  // guard_replay.cpp: runs node `id`'s list (true: every check passed, and the needed values are in the walk);
  // builds the lists of the nodes a passing walk offered, highest first, each covering its subtree.
  // The roots have one list too, for those whose fetch is stamped (globals, builtins, class roots): the rest
  // (locals, closure cells) are walked.
  bool replay(Walk& w, const Node& n) const;
  bool run_replay(Walk& w, const Replay& r) const;
  void build_replays(Walk& w) const;
  void build_roots_replay(Walk& w, std::vector<uint8_t>* covered) const;
  // `proven`: `parent` is the object the memos saw (read under a stamp or held by a guard), not only an object at
  // the same address (a list's root): its tuple items and a function's closure are then the same objects too.
  bool replay_ops(const Walk& w, uint32_t id, PyObject* parent, bool proven, std::vector<Op>* ops,
                  std::vector<Op>* values, std::vector<uint8_t>* covered) const;
  bool root_ops(const Walk& w, const Node& n, std::vector<Op>* ops) const;
  bool class_attr_ops(const Walk& w, uint32_t id, PyObject* parent, std::vector<Op>* ops, std::vector<Op>* values,
                      std::vector<uint8_t>* covered) const;
  bool class_property_ops(const Walk& w, uint32_t id, PyObject* parent, std::vector<Op>* ops,
                          std::vector<Op>* values, std::vector<uint8_t>* covered) const;
  bool tuple_item_ops(const Walk& w, uint32_t id, PyObject* parent, std::vector<Op>* ops, std::vector<Op>* values,
                      std::vector<uint8_t>* covered) const;
  bool live_ops(const Walk& w, uint32_t id, PyObject* parent, bool proven, std::vector<Op>* ops,
                std::vector<Op>* values, std::vector<uint8_t>* covered) const;
  // The ops of a live-read node's leaves (each a function of the value that runs no Python), run by `code` on the
  // value `holder` and `at` give; false if a leaf is not such. *held: the value, below a passing ID_MATCH.
  bool live_leaf_ops(const Walk& w, const Node& n, PyObject* now, Op::Code code, PyObject* holder, uint64_t at,
                     PyObject** held, std::vector<Op>* ops) const;
  // An item of a tuple field read live (a function's __defaults__[i]): each leaf run on the item read live.
  bool live_item_ops(const Walk& w, uint32_t id, PyObject* holder, Field field, PyObject* tuple, std::vector<Op>* ops,
                     std::vector<Op>* values, std::vector<uint8_t>* covered) const;
  // Below a code object proven the same (an ID_MATCH): its attributes and everything read from them are functions
  // of the immutable code object, and passed for it.
  bool code_subtree_ops(uint32_t id, std::vector<uint8_t>* covered) const;
  static std::vector<Op> dedup(const std::vector<Op>& ops);
  static PyObject* read_field(PyObject* holder, Field f);
  static bool has_attr_by_dict(const Guard& g, PyObject* v, const Memo& m);
  static bool class_lacks(const Guard& g, PyObject* v);
  static bool module_lacks(const Guard& g, PyObject* v, const Memo& m, std::vector<Op>* ops);
  void text_of(const std::vector<Guard>& guards, uint32_t id, int indent, std::string* out) const;

  mutable std::vector<Node> nodes_;  // mutable: memos change on check()
  mutable std::vector<Leaf> leaves_;  // mutable: failure counts and order change on check()
  std::vector<uint32_t> child_ids_;
  std::vector<uint32_t> roots_;
  std::vector<uint32_t> input_nodes_;     // the nodes of the set's input sources, in order
  std::vector<uint32_t> state_guards_;    // global state: no source
  mutable uint32_t state_fails_ = 0;      // checks failed on global state (then it is checked first)
  std::vector<uint32_t> generic_guards_;  // SHAPE_ENV and relational guards with a source missing a node
  mutable std::vector<Relation> relations_;
  std::unordered_map<const Source*, uint32_t> by_source_;
  std::unordered_map<uint32_t, PyObject*> type_matched_;  // while building: node -> the class its TYPE_MATCH expects
  std::unordered_map<std::string, uint32_t> by_step_;
  std::vector<uint8_t> needed_;  // per node: its value is read after the walk (an input or a relation's source)
  mutable uint32_t passes_ = 0;  // checks passed: lists are built from the second on (memos below a node
                                 // proven on the first pass are filled on the second)
  mutable Replay roots_replay_;             // anchor unused: the roots' fetches read the frame or owned dicts
  mutable std::vector<uint32_t> walked_roots_;  // the roots roots_replay_ does not cover
};

}  // namespace cdynamo::guards
