// guard_tree.cpp — owns building and checking GuardTree (one node per interned source, per-node memos).
#include "guards/guard_tree.h"

#include <algorithm>
#include <cstring>

#include "compat/versions.h"
#include "guards/shape_guard.h"
#include "guards/tensor_match.h"
#include "guards/tree_util.h"

namespace cdynamo::guards {

namespace {

// object's __class__ getset descriptor (borrowed from object's immortal type dict).
PyObject* object_class_descriptor() {
  static PyObject* d = _PyType_Lookup(&PyBaseObject_Type, field_names().class_);  // borrowed
  return d;
}

uint8_t cost_of(GuardKind k) {
  switch (k) {
    case GuardKind::TypeMatch:
    case GuardKind::IdMatch: return 0;
    case GuardKind::TensorMatch:
    case GuardKind::LengthMatch:
    case GuardKind::NoModuleHooks:
    case GuardKind::DictContains: return 1;
    case GuardKind::DictKeys: return 2;
    default: return 3;  // EQUALS_MATCH (__eq__), HASATTR (descriptors)
  }
}

// An exact immutable constant: equal to the same object forever (EQUALS_MATCH on it is a function of identity).
bool immutable_constant(PyObject* o) {
  return o == Py_None || PyBool_Check(o) || PyLong_CheckExact(o) || PyFloat_CheckExact(o) || PyUnicode_CheckExact(o) ||
         PyBytes_CheckExact(o) || PyComplex_CheckExact(o);
}

// An exact str or int key: its hash and equality run no Python code and never change.
bool plain_key(PyObject* k) { return k && (PyUnicode_CheckExact(k) || PyLong_CheckExact(k)); }

// True if every object of class `cls` (borrowed) reads `cls` for `x.__class__` (kind Attr: getattr; GenericAttr:
// object.__getattribute__): the class keeps object's __class__ descriptor and, for getattr, object's __getattribute__.
bool class_reads_type(PyObject* cls, Source::Kind kind) {
  if (!PyType_Check(cls)) return false;
  auto* type = reinterpret_cast<PyTypeObject*>(cls);
  return _PyType_Lookup(type, field_names().class_) == object_class_descriptor() &&
         (kind == Source::Kind::GenericAttr || generic_getattribute(type));
}

PyObject* hook_name(int i) {
  static PyObject* names[4] = {PyUnicode_InternFromString("_forward_pre_hooks"), PyUnicode_InternFromString("_forward_hooks"),
                               PyUnicode_InternFromString("_backward_pre_hooks"),
                               PyUnicode_InternFromString("_backward_hooks")};  // owned for the process
  return names[i];
}

// True if `a` and `b` (guards on one node) check the same thing of its value: identity, type, equality with one
// object, or a length; other kinds are never merged.
bool same_check(const Guard& a, const Guard& b) {
  if (a.kind != b.kind) return false;
  switch (a.kind) {
    case GuardKind::IdMatch:
      return a.identity().object == b.identity().object && a.identity().weak.get() == b.identity().weak.get();
    case GuardKind::TypeMatch: return a.type().type.get() == b.type().type.get();
    case GuardKind::EqualsMatch: return a.constant().value.get() == b.constant().value.get();
    case GuardKind::LengthMatch:
      return a.length().type.get() == b.length().type.get() && a.length().length == b.length().length;
    default: return false;
  }
}

}  // namespace

GuardTree::GuardTree(const GuardSet& set) {
  const auto& guards = set.guards();
  for (const Guard& g : guards)  // first: the classes TYPE_MATCH pins, so `x.__class__` steps can share a class root
    if (g.kind == GuardKind::TypeMatch && g.source && PyType_Check(g.type().type.get()))
      type_matched_.emplace(intern(g.source.get()), g.type().type.get());
  for (uint32_t i = 0; i < guards.size(); ++i) {
    const Guard& g = guards[i];
    switch (g.kind) {
      case GuardKind::GradMode:
      case GuardKind::DefaultDtype:
      case GuardKind::Autocast:
      case GuardKind::GlobalState: state_guards_.push_back(i); continue;
      case GuardKind::ShapeEnv: generic_guards_.push_back(i); continue;
      case GuardKind::NoAliasing:
      case GuardKind::StorageOverlap:
      case GuardKind::SameObject: {
        Relation r;
        r.guard = i;
        for (const auto& s : g.related()) r.nodes.push_back(intern(s.get()));
        // `a is a`: equal source paths share a node, whose value is fetched once per check (a pending attribute
        // store guards the object it was made on against itself this way): true on every check.
        if (g.kind == GuardKind::SameObject && !r.nodes.empty() &&
            std::all_of(r.nodes.begin(), r.nodes.end(), [&](uint32_t id) { return id == r.nodes.front(); }))
          continue;
        relations_.push_back(std::move(r));
        continue;
      }
      default: break;
    }
    if (!g.source) {  // not expected: decided by the guard itself
      generic_guards_.push_back(i);
      continue;
    }
    Node& n = nodes_[intern(g.source.get())];
    Leaf leaf;
    leaf.guard = i;
    leaf.kind = g.kind;
    leaf.tensor = g.tensor_or_null();
    if (g.kind == GuardKind::TypeMatch) leaf.type = g.type().type.get();
    leaf.cost = cost_of(g.kind);
    PyObject* len_type = g.kind == GuardKind::LengthMatch ? g.length().type.get() : nullptr;  // borrowed
    leaf.pure = len_type && PyType_Check(len_type) &&
                !(PyType_GetFlags(reinterpret_cast<PyTypeObject*>(len_type)) & Py_TPFLAGS_HEAPTYPE);
    leaf.skip = Skip::Never;
    switch (g.kind) {
      case GuardKind::IdMatch: leaf.skip = Skip::SameObject; break;
      case GuardKind::EqualsMatch:
        if (immutable_constant(g.constant().value.get())) leaf.skip = Skip::SameObject;
        break;
      case GuardKind::LengthMatch:
        if (g.length().type.get() == reinterpret_cast<PyObject*>(&PyTuple_Type)) leaf.skip = Skip::SameObject;
        if (g.length().type.get() == reinterpret_cast<PyObject*>(&PyDict_Type)) leaf.skip = Skip::SameContents;
        break;
      case GuardKind::DictKeys:
      case GuardKind::DictContains:
        if (g.kind == GuardKind::DictKeys || plain_key(g.key().key.get())) leaf.skip = Skip::SameContents;
        break;
      case GuardKind::NoModuleHooks: leaf.skip = Skip::Hooks; break;
      default: break;
    }
    // The same check on the same node (a class root's guards, read once per instance path): kept once.
    if (std::any_of(n.leaves.begin(), n.leaves.end(), [&](const Leaf& l) { return same_check(guards[l.guard], g); }))
      continue;
    n.wants_own = n.wants_own || leaf.skip == Skip::SameContents || leaf.skip == Skip::Hooks;
    n.id_leaf = n.id_leaf || g.kind == GuardKind::IdMatch;
    n.has_hooks = n.has_hooks || leaf.skip == Skip::Hooks;
    n.leaves.push_back(leaf);
  }
  for (const auto& s : set.input_sources()) input_nodes_.push_back(intern(s.get()));
  needed_.assign(nodes_.size(), 0);
  for (uint32_t id : input_nodes_) needed_[id] = 1;
  for (const Relation& r : relations_)
    for (uint32_t id : r.nodes) needed_[id] = 1;
  for (Node& n : nodes_) {
    std::stable_sort(n.leaves.begin(), n.leaves.end(), [](const Leaf& a, const Leaf& b) { return a.cost < b.cost; });
    n.leaf_begin = static_cast<uint32_t>(leaves_.size());
    leaves_.insert(leaves_.end(), n.leaves.begin(), n.leaves.end());
    n.leaf_end = static_cast<uint32_t>(leaves_.size());
    n.child_begin = static_cast<uint32_t>(child_ids_.size());
    child_ids_.insert(child_ids_.end(), n.children.begin(), n.children.end());
    n.child_end = static_cast<uint32_t>(child_ids_.size());
    std::vector<Leaf>().swap(n.leaves);
    std::vector<uint32_t>().swap(n.children);
  }
  for (Relation& r : relations_)  // relations run after every leaf passed: a TENSOR_MATCHed value is a tensor
    for (uint32_t id : r.nodes)
      r.tensor.push_back(std::any_of(leaves_.begin() + nodes_[id].leaf_begin, leaves_.begin() + nodes_[id].leaf_end,
                                     [](const Leaf& l) { return l.kind == GuardKind::TensorMatch; }));
  type_matched_.clear();
}

uint32_t GuardTree::intern(const Source* s) {
  auto have = by_source_.find(s);
  if (have != by_source_.end()) return have->second;
  int32_t parent = s->base ? static_cast<int32_t>(intern(s->base.get())) : -1;
  PyObject* cls = class_root_of(s, parent);  // borrowed; nullptr: an ordinary step from the parent
  // The step from the parent: kind, operands, and the parent's node (equal paths share a node); a class root: the
  // step kind and the class (every x.__class__ of x TYPE_MATCHed to it shares the node).
  std::string key = cls ? "class|" + std::to_string(static_cast<int>(s->kind)) + "|" +
                              std::to_string(reinterpret_cast<uintptr_t>(cls))
                        : std::to_string(parent) + "|" + std::to_string(static_cast<int>(s->kind)) + "|" +
                              std::to_string(s->index) + "|" + std::to_string(reinterpret_cast<uintptr_t>(s->owner)) +
                              "|" + std::to_string(reinterpret_cast<uintptr_t>(s->builtins)) + "|" + s->name;
  auto [it, fresh] = by_step_.emplace(std::move(key), static_cast<uint32_t>(nodes_.size()));
  if (fresh) {
    Node n;
    n.source = s;
    n.kind = s->kind;
    n.name_obj = s->name_obj;
    if (cls) {
      n.class_of = cls;
      n.class_ver = compat::type_version(reinterpret_cast<PyTypeObject*>(cls));
    } else {
      n.owner = s->owner;
      n.parent = parent;
      n.depth = parent < 0 ? 0 : nodes_[parent].depth + 1;
    }
    nodes_.push_back(std::move(n));
    if (cls || parent < 0) roots_.push_back(it->second);
    else nodes_[parent].children.push_back(it->second);
  }
  by_source_.emplace(s, it->second);
  return it->second;
}

PyObject* GuardTree::class_root_of(const Source* s, int32_t parent) const {
  if (parent < 0 || (s->kind != Source::Kind::Attr && s->kind != Source::Kind::GenericAttr) ||
      s->name_obj != field_names().class_)
    return nullptr;
  auto t = type_matched_.find(static_cast<uint32_t>(parent));
  return t != type_matched_.end() && class_reads_type(t->second, s->kind) ? t->second : nullptr;
}

// A class root's value: the class itself while it reads its own type for `__class__` (re-checked when its version
// changed), else missing (the check fails).
PyObject* GuardTree::fetch_class(Node& n, bool* same, Stamp* stamp) const {
  auto* cls = reinterpret_cast<PyTypeObject*>(n.class_of);
  uint64_t ver = compat::type_version(cls);
  if (!ver || ver != n.class_ver) {
    if (!class_reads_type(n.class_of, n.kind)) return nullptr;
    n.class_ver = ver;
  }
  *same = n.memo.value == n.class_of && n.memo.from_ver == kClassRoot;
  stamp->from = n.class_of;
  stamp->from_ver = kClassRoot;
  Py_INCREF(n.class_of);
  return n.class_of;
}

// The node's value from its parent's (borrowed; nullptr for a root): a new reference or nullptr (missing). *same:
// proven the object the memo holds. *stamp: the stamp read now (from_ver 0: none), recorded if the node passes.
PyObject* GuardTree::fetch(Walk& w, Node& n, PyObject* parent, bool parent_same, bool* same, Stamp* stamp) const {
  if (n.class_of) return fetch_class(n, same, stamp);
  const Source& s = *n.source;  // dereferenced on the paths that read afresh
  const Memo& m = n.memo;
  *same = false;
  PyObject* dict = nullptr;   // borrowed: the dict the value is an item of
  PyObject* dict2 = nullptr;  // borrowed: builtins
  PyObject* key = n.owner && n.kind == Source::Kind::DictItem ? n.owner : n.name_obj;
  switch (n.kind) {
    case Source::Kind::DictItem:
      if (parent && (n.owner ? PyDict_Check(parent) && plain_key(n.owner) : PyDict_CheckExact(parent))) dict = parent;
      break;
    case Source::Kind::Global: dict = PyDict_CheckExact(w.fv.globals) ? w.fv.globals : nullptr; break;
    case Source::Kind::ModuleGlobal: dict = PyDict_CheckExact(s.owner) ? s.owner : nullptr; break;
    case Source::Kind::Builtin:
      if (PyDict_CheckExact(w.fv.globals) && w.fv.builtins && PyDict_CheckExact(w.fv.builtins)) {
        dict = w.fv.globals;
        dict2 = w.fv.builtins;
      }
      break;
    case Source::Kind::ModuleBuiltin:
      if (PyDict_CheckExact(s.owner) && PyDict_CheckExact(s.builtins)) {
        dict = s.owner;
        dict2 = s.builtins;
      }
      break;
    case Source::Kind::Item: {
      // An item of an exact tuple proven to be the object seen before: the same item (tuples never change).
      PyObject* v = s.fetch_step(w.fv, parent);  // new
      if (v && parent_same && PyTuple_CheckExact(parent)) {
        *same = m.from_ver == kTupleItem && m.from == parent && m.value == v;
        stamp->from = parent;
        stamp->from_ver = kTupleItem;
      }
      return v;
    }
    case Source::Kind::Attr: return fetch_attr(w, n, parent, parent_same, same, stamp);
    case Source::Kind::GenericAttr: return fetch_generic_attr(w, n, parent, same, stamp);
    default:  // locals, closure cells, sequence items: one load, nothing to memoize
      return s.fetch_step(w.fv, parent);
  }
  if (n.parent >= 0 && !parent) return nullptr;
  uint64_t ver = compat::dict_version(dict);
  uint64_t ver2 = dict2 ? compat::dict_version(dict2) : 0;
  bool stampable = ver && (!dict2 || ver2) && (dict2 || plain_key(key));
  if (stampable && m.from_ver && m.value && m.from == dict && m.from_ver == ver && m.from2 == dict2 &&
      m.from2_ver == ver2) {
    *same = true;
    *stamp = Stamp{m.from, m.from_ver, m.from2, m.from2_ver};
    Py_INCREF(m.value);
    return m.value;  // held by the unchanged dict
  }
  PyObject* v = s.fetch_step(w.fv, parent);  // new (dict lookups of str / int keys: no Python code runs)
  if (v && stampable) {
    stamp->from = dict;
    stamp->from_ver = ver;
    stamp->from2 = dict2;
    stamp->from2_ver = ver2;
  }
  return v;
}

PyObject* GuardTree::fetch_attr(Walk& w, Node& n, PyObject* parent, bool parent_same, bool* same, Stamp* stamp) const {
  const Source& s = *n.source;
  const Memo& m = n.memo;
  if (!parent) return nullptr;
  if (PyFunction_Check(parent) || PyCell_Check(parent)) {
    // Functions and cells (neither can be subclassed): their data descriptors read a field, and an instance
    // __dict__ never shadows one. A function's __closure__ never changes: proven with the function.
    const FieldNames& f = field_names();
    PyObject* v = nullptr;  // borrowed
    bool field = true;
    if (PyCell_Check(parent)) {
      if (n.name_obj == f.cell_contents) v = PyCell_GET(parent);
      else field = false;
    } else if (n.name_obj == f.closure) {
      v = PyFunction_GET_CLOSURE(parent);
      if (!v) v = Py_None;
      *same = parent_same && m.value == v && m.from_ver == kTupleItem && m.from == parent;
      stamp->from = parent;
      stamp->from_ver = parent_same ? kTupleItem : 0;
    } else if (n.name_obj == f.code) {
      v = PyFunction_GET_CODE(parent);
    } else if (n.name_obj == f.defaults) {
      v = PyFunction_GET_DEFAULTS(parent);
      if (!v) v = Py_None;
    } else if (n.name_obj == f.name) {
      v = reinterpret_cast<PyFunctionObject*>(parent)->func_name;
    } else {
      field = false;
    }
    if (field) {
      Py_XINCREF(v);
      return v;  // new reference, or nullptr (an empty cell)
    }
    return s.fetch_step(w.fv, parent);
  }
  if (n.name_obj == field_names().class_) {  // both interned: equal names are one object
    // obj.__class__ is type(obj) while the class keeps object's __class__ descriptor and object's
    // __getattribute__ (both fixed while the class's version is); a stamp (class, version) proves the same class.
    PyTypeObject* type = Py_TYPE(parent);
    uint64_t tver = compat::type_version(type);
    if (tver && m.from_ver == tver && m.from == type) {
      *same = m.value == reinterpret_cast<PyObject*>(type);
      *stamp = Stamp{m.from, m.from_ver, m.from2, m.from2_ver};
      Py_INCREF(type);
      return reinterpret_cast<PyObject*>(type);
    }
    PyObject* v = s.fetch_step(w.fv, parent);  // new
    if (v == reinterpret_cast<PyObject*>(type) && tver && compat::type_version(type) == tver &&
        _PyType_Lookup(type, field_names().class_) == object_class_descriptor() && generic_getattribute(type)) {
      stamp->from = type;
      stamp->from_ver = tver;
    }
    return v;
  }
  if (PyType_Check(parent) && type_getattribute(Py_TYPE(parent))) {
    // An attribute of a class read through type's __getattribute__ (its metaclass `type`, or one such as ABCMeta
    // or EnumType that keeps it; a metaclass __getattr__ runs only for a missing attribute): fixed while the
    // class's and the metaclass's versions are, when it is what the class's MRO holds, its __get__(None, cls) is
    // itself (a function, a property, a value with no __get__) and the metaclass has no data descriptor of that
    // name (which would win); or `__mro__`, type's own member, which only a version change replaces.
    auto* cls = reinterpret_cast<PyTypeObject*>(parent);
    PyTypeObject* meta = Py_TYPE(parent);
    uint64_t tver = compat::type_version(cls);
    uint64_t mver = compat::type_version(meta);
    if (tver && mver && m.from_ver == tver && m.from == cls && m.from2 == meta && m.from2_ver == mver && m.value) {
      *same = true;
      *stamp = Stamp{m.from, m.from_ver, m.from2, m.from2_ver};
      Py_INCREF(m.value);
      return m.value;  // held by the class's (or a base's) unchanged dict, or the class's MRO
    }
    PyObject* v = s.fetch_step(w.fv, parent);  // new
    if (v && tver && mver && compat::type_version(cls) == tver && compat::type_version(meta) == mver &&
        Py_TYPE(parent) == meta) {
      PyObject* meta_attr = _PyType_Lookup(meta, s.name_obj);  // borrowed
      bool held = false;
      if (n.name_obj == field_names().mro) {
        held = meta_attr && meta_attr == _PyType_Lookup(&PyType_Type, s.name_obj) && v == cls->tp_mro;
      } else if (!(meta_attr && Py_TYPE(meta_attr)->tp_descr_set) && _PyType_Lookup(cls, s.name_obj) == v) {
        held = PyFunction_Check(v) || Py_TYPE(v) == &PyProperty_Type || !Py_TYPE(v)->tp_descr_get;
      }
      if (held) *stamp = Stamp{cls, tver, meta, mver};
    }
    return v;
  }
  return fetch_generic_attr(w, n, parent, same, stamp);
}

PyObject* GuardTree::fetch_generic_attr(Walk& w, Node& n, PyObject* parent, bool* same, Stamp* stamp) const {
  const Source& s = *n.source;
  const Memo& m = n.memo;
  if (!parent) return nullptr;
  PyTypeObject* type = Py_TYPE(parent);
  uint64_t tver = compat::type_version(type);
  PyObject* idict = tver ? compat::versioned_instance_dict(parent) : nullptr;  // borrowed
  uint64_t dver = compat::dict_version(idict);
  if (dver && m.from_ver && m.from == idict && m.from_ver == dver && m.from2 == type && m.from2_ver == tver &&
      m.value) {
    *same = true;
    *stamp = Stamp{m.from, m.from_ver, m.from2, m.from2_ver};
    Py_INCREF(m.value);
    return m.value;  // held by the unchanged instance dict, or by the unchanged class (and its bases)
  }
  PyObject* v = s.fetch_step(w.fv, parent);  // new (may run Python: a property, __getattr__)
  // Recorded when object's __getattribute__ reads it (fixed while the class's version is) and the instance dict
  // is unchanged since: the dict's item (no data descriptor of that name on the class); the instance dict itself
  // (`__dict__` is the getset descriptor CPython gives instances); or the class's plain value (no __get__) that
  // the dict lacks (`attribute_map`, a class-level default).
  if (v && dver && compat::type_version(type) == tver && Py_TYPE(parent) == type &&
      compat::dict_version(idict) == dver &&
      (s.kind == Source::Kind::GenericAttr || generic_getattribute(type))) {
    PyObject* descr = _PyType_Lookup(type, s.name_obj);  // borrowed
    PyObject* item = PyDict_GetItemWithError(idict, s.name_obj);  // borrowed
    if (!item) PyErr_Clear();
    bool data_descr = descr && Py_TYPE(descr)->tp_descr_set;
    bool held = (item == v && !data_descr) ||
                (v == idict && descr && Py_TYPE(descr) == &PyGetSetDescr_Type && n.name_obj == field_names().dict) ||
                (!item && descr == v && !Py_TYPE(v)->tp_descr_get);
    if (held) *stamp = Stamp{idict, dver, type, tver};
  }
  return v;
}

namespace {
// Counts the visits iterating a node's leaves now (a leaf that runs Python may let another thread or a nested
// check in): leaves are reordered only by a visit that is alone.
struct Busy {
  uint32_t& n;
  explicit Busy(uint32_t& c) : n(c) { ++n; }
  ~Busy() { --n; }
  Busy(const Busy&) = delete;
  Busy& operator=(const Busy&) = delete;
};
}  // namespace

bool GuardTree::visit(Walk& w, uint32_t id, PyObject* parent, bool parent_same) const {
  Node& n = nodes_[id];
  bool same = false;
  Stamp stamp;
  PyObject* v = fetch(w, n, parent, parent_same, &same, &stamp);  // new
  const bool proven = same;  // v is the object the memo held (its children's memos may rely on it)
  if (!v) return false;  // every node has a guard beneath it or a relation over it: all fail on a missing value
  w.set(id, v);          // owned by the walk
  const auto& guards = w.guards;
  // The value's own state (its dict's version, or its instance dict's), read before any leaf runs: what is
  // recorded if the leaves pass. Skips compare the state read again at the leaf (a leaf that ran Python may
  // have changed it, or replaced the instance dict).
  const void* own = nullptr;
  uint64_t own_ver = n.wants_own ? own_state(v, &own) : 0;
  bool hooks_checked = false;
  {
    Busy busy(n.busy);
    Leaf* leaves = leaves_.data() + n.leaf_begin;
    const size_t nleaves = n.leaf_end - n.leaf_begin;
    for (size_t i = 0; i < nleaves; ++i) {
      Leaf& leaf = leaves[i];
      if (leaf.skip != Skip::Never && n.memo.leaves_ok && n.memo.value == v) {
        // The memo is read again here (a nested check may have written it since), and its leaves_ok is about
        // memo.value. SameObject: a stamp proved v is the object the memo holds. SameContents / Hooks: the
        // verdict is a function of v's own dict, and a dict state's version is unique over all dicts, so the
        // same (dict, version) as when the leaves passed proves it without a stamp on v (a fresh `kwargs`).
        if (leaf.skip == Skip::SameObject) {
          if (same) continue;
        } else {
          const void* cur = nullptr;
          uint64_t cur_ver = own_state(v, &cur);
          if (cur_ver && cur == n.memo.own && cur_ver == n.memo.own_ver) {
            if (leaf.skip == Skip::SameContents) continue;
            if (hooks_empty(n.memo.hooks)) continue;  // Hooks: held by `cur`, unchanged
          }
        }
      }
      if (leaf.skip == Skip::Hooks) hooks_checked = true;
      if (leaf.type && reinterpret_cast<PyObject*>(Py_TYPE(v)) == leaf.type) continue;
      if (leaf.kind == GuardKind::TensorMatch && leaf.tensor->matches(v, w.keys())) continue;
      if (guards[leaf.guard].check_value(v, nullptr)) continue;
      // Failed: counted, and moved ahead of a neighbour no cheaper that fails less often.
      ++leaf.fails;
      if (n.busy == 1 && i > 0 && leaves[i - 1].fails < leaf.fails && leaves[i - 1].cost >= leaf.cost)
        std::swap(leaves[i - 1], leaves[i]);
      n.memo.leaves_ok = false;
      return false;
    }
  }
  if (own) {  // recorded only if unchanged since read (and then `own` is still the live dict of v)
    const void* cur = nullptr;
    if (own_state(v, &cur) != own_ver || cur != own) own = nullptr;
  }
  // Passed: what this visit saw is written as one record (no Python code runs from here to the end of it). A value
  // read under no stamp keeps only its own dict's state (from_ver 0: never taken for the object itself).
  if (n.has_hooks && own && (hooks_checked || n.memo.own != own || n.memo.own_ver != own_ver || n.memo.value != v)) {
    // The hook dicts sit in `own` (the instance dict, unchanged while its version is): kept for the next check.
    PyObject* d = const_cast<PyObject*>(static_cast<const PyObject*>(own));
    for (int k = 0; k < 4; ++k) {
      PyObject* h = PyDict_GetItemWithError(d, hook_name(k));  // borrowed (str key: no Python code runs)
      if (!h) PyErr_Clear();
      n.memo.hooks[k] = h;
    }
  }
  n.memo.from = stamp.from;
  n.memo.from_ver = stamp.from_ver;
  n.memo.from2 = stamp.from2;
  n.memo.from2_ver = stamp.from2_ver;
  n.memo.value = v;
  n.memo.own = own;
  n.memo.own_ver = own ? own_ver : 0;
  n.memo.leaves_ok = true;
  // An ID_MATCH that passed proves v is the guard's object (held by the guard, or checked alive through its weak
  // reference): the same object as on every passing check, so its children read their memos as under a stamp.
  const bool held = proven || n.id_leaf;
  if (n.child_begin == n.child_end) return true;
  if (!n.replay.ops.empty()) {
    if (n.replay.anchor == v && replay(w, n)) return true;
    n.replay.ops.clear();  // something below changed: walked, and rebuilt if it passes (a few times at most)
  }
  for (uint32_t k = n.child_begin; k < n.child_end; ++k)
    if (!visit(w, child_ids_[k], v, held)) return false;
  if (n.replay.builds < kReplayBuilds) w.offered.push_back(id);
  return true;
}

bool GuardTree::check_relation(Walk& w, Relation& r) const {
  const Guard& g = w.guards[r.guard];
  // The identities the verdict depends on: the objects (NO_TENSOR_ALIASING, DUPLICATE_INPUT) or their storages.
  const bool overlap = g.kind == GuardKind::StorageOverlap;
  const bool storages = (g.kind == GuardKind::NoAliasing && g.distinct().storages) || overlap;
  bool comparable = true;  // STORAGE_OVERLAP: every value has a storage
  const size_t n = r.nodes.size();
  const void* small[16];
  std::vector<const void*> big;
  const void** keys = n <= 16 ? small : (big.resize(n), big.data());
  for (size_t i = 0; i < n; ++i) {
    PyObject* v = w.values[r.nodes[i]];  // borrowed from the walk
    if (!v) return false;
    // A tensor's storage where storages are compared, else the object. A TENSOR_MATCHed value is a tensor (its
    // class may change since, only to a tensor class of the same layout): no is_tensor for it.
    const void* k = storages && (r.tensor[i] || is_tensor(v)) ? storage_key(v) : nullptr;
    comparable = comparable && (k || !overlap);
    keys[i] = k ? k : v;
  }
  if (r.passed && comparable && r.last.size() == n && std::memcmp(r.last.data(), keys, n * sizeof(const void*)) == 0)
    return true;  // the same identities as a passing check: the same verdict
  if (!g.check(w.fv, nullptr)) return false;
  if (comparable) {
    r.last.assign(keys, keys + n);
    r.passed = true;
  }
  return true;
}

bool GuardTree::check(const std::vector<Guard>& guards, const FrameView& fv, std::vector<PyObject*>* inputs) const {
  // Global state first once it has failed here (a train / eval or grad-mode switch), else after the walk (an
  // entry for other inputs fails at its first tensor without reading torch's state).
  auto state_ok = [&] {
    for (uint32_t i : state_guards_)
      if (!guards[i].check(fv, nullptr)) {
        ++state_fails_;
        return false;
      }
    return true;
  };
  if (state_fails_ && !state_ok()) return false;
  Walk w(guards, fv, nodes_.size());
  const bool replayed = !roots_replay_.ops.empty() && run_replay(w, roots_replay_);
  if (!replayed) roots_replay_.ops.clear();  // walked below; rebuilt if the walk passes (a few times at most)
  w.roots_walked = !replayed;
  for (uint32_t r : replayed ? walked_roots_ : roots_)
    if (!visit(w, r, nullptr, false)) return false;
  if (!state_fails_ && !state_ok()) return false;
  for (Relation& r : relations_)
    if (!check_relation(w, r)) return false;
  for (uint32_t i : generic_guards_)
    if (!guards[i].check(fv, nullptr)) return false;
  if (passes_ < 2) ++passes_;
  if (passes_ >= 2 && (!w.offered.empty() || (w.roots_walked && roots_replay_.builds < kReplayBuilds)))
    build_replays(w);
  if (inputs) {
    // Every node was visited and fetched by a passing walk; no Python ran after its fetch that the guards did
    // not see through (leaves run after the fetch, relations and SHAPE_ENV read the same values).
    for (uint32_t id : input_nodes_) {
      PyObject* v = w.values[id];  // owned by the walk
      Py_INCREF(v);
      inputs->push_back(v);  // new reference, the caller's
    }
  }
  return true;
}

}  // namespace cdynamo::guards
