// guard_replay.cpp — owns GuardTree's replay lists: a passing subtree's memo checks flattened into one list.
#include <algorithm>
#include <unordered_map>
#include <unordered_set>

#include "compat/versions.h"
#include "guards/guard_tree.h"
#include "guards/tensor_match.h"
#include "guards/tree_util.h"

namespace cdynamo::guards {

namespace {

// Identity of an op for de-duplication: the same stamp read twice (an instance dict proving several attributes,
// a dict proving its items and its own contents) is checked once.
struct OpKey {
  int code;
  const void* obj;
  const void* a;
  uint64_t ver;
  const void* b;
  uint64_t ver2;  // Leaf / FieldLeaf: the guard (two guards on one value are two checks)
  bool operator==(const OpKey& o) const {
    return code == o.code && obj == o.obj && a == o.a && ver == o.ver && b == o.b && ver2 == o.ver2;
  }
};
struct OpKeyHash {
  size_t operator()(const OpKey& k) const {
    size_t h = std::hash<const void*>()(k.obj) * 31 + std::hash<const void*>()(k.a);
    h = (h * 31 + std::hash<uint64_t>()(k.ver)) * 31 + std::hash<uint64_t>()(k.ver2);
    return h * 7 + static_cast<size_t>(k.code);
  }
};

// An empty dict that nothing ever fills (a NO_HOOKS op's stand-in for a module's missing hook dict): made once,
// owned here for the life of the process (borrowed by the ops).
PyObject* empty_dict() {
  static PyObject* d = PyDict_New();  // new reference, kept
  if (!d) PyErr_Clear();
  return d;
}

}  // namespace

// True if a HASATTR that holds now is proven by v's class version and instance dict state: the name is present,
// found in the instance dict (the memo's own dict, at its recorded version), and the class (with a version tag)
// has no attribute of that name and reads attributes with object's __getattribute__.
bool GuardTree::has_attr_by_dict(const Guard& g, PyObject* v, const Memo& m) {
  PyObject* name = g.attr().name.get();  // borrowed from the guard
  PyTypeObject* type = Py_TYPE(v);
  if (!g.attr().present || !name || !PyUnicode_CheckExact(name) || !m.own || !compat::type_version(type)) return false;
  auto* own = static_cast<PyObject*>(const_cast<void*>(m.own));
  if (compat::versioned_instance_dict(v) != own || compat::dict_version(own) != m.own_ver) return false;
  if (!generic_getattribute(type) || _PyType_Lookup(type, name)) return false;
  return PyDict_Contains(own, name) == 1;  // a str key: no Python code runs
}

// True if a NO_HASATTR on an nn.Module holds now and is proven by versions, which it appends to *ops: the class (at its
// version) keeps Module's __getattr__ and object's __getattribute__ and has no attribute of that name; the instance
// dict (the memo's own dict, at its version) lacks it, and so do its `_parameters`, `_buffers` and `_modules` dicts
// (at their versions): then Module.__getattr__ raises AttributeError and hasattr is false.
bool GuardTree::module_lacks(const Guard& g, PyObject* v, const Memo& m, std::vector<Op>* ops) {
  static PyObject* getattr_name = PyUnicode_InternFromString("__getattr__");  // owned for the process
  PyObject* name = g.attr().name.get();  // borrowed from the guard
  PyTypeObject* type = Py_TYPE(v);
  uint64_t tver = compat::type_version(type);
  PyObject* module_getattr = nn_module_getattr();  // borrowed; initialized by the HASATTR check that passed
  if (g.attr().present || !name || !PyUnicode_CheckExact(name) || !m.own || !tver || !module_getattr) return false;
  auto* own = static_cast<PyObject*>(const_cast<void*>(m.own));
  if (compat::versioned_instance_dict(v) != own || compat::dict_version(own) != m.own_ver) return false;
  if (!generic_getattribute(type) || _PyType_Lookup(type, getattr_name) != module_getattr ||
      _PyType_Lookup(type, name) || PyDict_Contains(own, name) != 0)
    return false;
  std::vector<Op> proof;
  Op o;
  o.code = Op::InstAttr;
  o.obj = v;
  o.a = own;
  o.ver = m.own_ver;
  o.b = type;
  o.ver2 = tver;
  proof.push_back(o);
  for (const char* part : {"_parameters", "_buffers", "_modules"}) {
    PyObject* d = PyDict_GetItemString(own, part);  // borrowed (str key: no Python code runs)
    if (!d) continue;  // Module.__getattr__ skips a missing one
    uint64_t ver = compat::dict_version(d);
    if (!PyDict_CheckExact(d) || !ver || PyDict_Contains(d, name) != 0) return false;
    Op dv;
    dv.code = Op::DictVer;
    dv.obj = d;
    dv.ver = ver;
    proof.push_back(dv);
  }
  ops->insert(ops->end(), proof.begin(), proof.end());
  return true;
}

// True if a NO_HASATTR on v holds now and is proven by v's version: v is a class whose metaclass is `type` (with a
// version tag), and neither it (with its bases) nor `type` has an attribute of that name.
bool GuardTree::class_lacks(const Guard& g, PyObject* v) {
  PyObject* name = g.attr().name.get();  // borrowed from the guard
  if (g.attr().present || !name || !PyUnicode_CheckExact(name) || !PyType_CheckExact(v)) return false;
  auto* cls = reinterpret_cast<PyTypeObject*>(v);
  return compat::type_version(cls) && !_PyType_Lookup(cls, name) && !_PyType_Lookup(&PyType_Type, name);
}

// A function's or cell's field as fetch_attr reads it (borrowed; nullptr: an empty cell).
PyObject* GuardTree::read_field(PyObject* holder, Field f) {
  switch (f) {
    case Field::CellContents: return PyCell_GET(holder);
    case Field::Code: return PyFunction_GET_CODE(holder);
    case Field::Defaults: {
      PyObject* d = PyFunction_GET_DEFAULTS(holder);
      return d ? d : Py_None;
    }
    case Field::Name: return reinterpret_cast<PyFunctionObject*>(holder)->func_name;
    case Field::TypeName: return reinterpret_cast<PyHeapTypeObject*>(holder)->ht_name;
    case Field::PropertyGet: return property_fget(holder);
    case Field::Closure: {
      PyObject* c = PyFunction_GET_CLOSURE(holder);
      return c ? c : Py_None;
    }
  }
  return nullptr;
}

// The ops in order, each distinct one kept at its first place (its stamp is proven there for all later uses: no
// Python runs while a list runs).
// Then one instance-dict check per object: an InstAttr (the class and the instance dict at their versions) whose
// object had an Own check on the same dict state becomes that Own, upgraded in its place (so the ops after it, which
// read the hook dicts the dict holds, still follow their proof); and a TypeIs that an InstAttr on the same object and
// class implies is dropped (a list passes only if all its ops do, so a check may sit anywhere in it).
std::vector<GuardTree::Op> GuardTree::dedup(const std::vector<Op>& ops) {
  std::unordered_set<OpKey, OpKeyHash> seen;
  std::vector<Op> unique;
  unique.reserve(ops.size());
  for (const Op& o : ops)
    if (seen.insert(OpKey{static_cast<int>(o.code), o.obj, o.a, o.ver, o.b, o.ver2}).second) unique.push_back(o);
  std::unordered_map<const void*, size_t> own_at;  // object -> index of its Own op
  std::vector<uint8_t> drop(unique.size(), 0);
  for (size_t i = 0; i < unique.size(); ++i) {
    Op& o = unique[i];
    if (o.code == Op::Own) {
      own_at.emplace(o.obj, i);
    } else if (o.code == Op::InstAttr) {
      auto it = own_at.find(o.obj);
      if (it == own_at.end()) continue;
      Op& own = unique[it->second];
      if (own.code == Op::Own && own.a == o.a && own.ver == o.ver) {
        own = o;  // the Own, now also checking the class: this InstAttr is then the same check
        drop[i] = 1;
      } else if (own.code == Op::InstAttr && own.a == o.a && own.ver == o.ver && own.b == o.b && own.ver2 == o.ver2) {
        drop[i] = 1;
      }
    }
  }
  std::unordered_set<OpKey, OpKeyHash> classes;  // (object, class) pairs an InstAttr checks
  for (size_t i = 0; i < unique.size(); ++i)
    if (!drop[i] && unique[i].code == Op::InstAttr)
      classes.insert(OpKey{0, unique[i].obj, unique[i].b, 0, nullptr, 0});
  std::vector<Op> merged;
  merged.reserve(unique.size());
  for (size_t i = 0; i < unique.size(); ++i) {
    const Op& o = unique[i];
    if (drop[i] || (o.code == Op::TypeIs && classes.count(OpKey{0, o.obj, o.a, 0, nullptr, 0}))) continue;
    merged.push_back(o);
  }
  return merged;
}

bool GuardTree::replay(Walk& w, const Node& n) const {
  if (Py_TYPE(n.replay.anchor) != n.replay.anchor_type) return false;  // another object at the anchor's address
  return run_replay(w, n.replay);
}

bool GuardTree::run_replay(Walk& w, const Replay& r) const {
  for (const Op& op : r.ops) {
    switch (op.code) {
      case Op::FrameGlobals:
        if (w.fv.globals != op.obj) return false;
        break;
      case Op::FrameBuiltins:
        if (w.fv.builtins != op.obj) return false;
        break;
      case Op::DictVer:  // op.obj: a dict (checked when the list was built) proven alive by the ops before
        if (compat::live_dict_version(op.obj) != op.ver) return false;
        break;
      case Op::InstAttr: {
        auto* type = static_cast<PyTypeObject*>(const_cast<void*>(op.b));
        if (Py_TYPE(op.obj) != type || compat::type_version(type) != op.ver2) return false;
        if (!compat::instance_dict_is(op.obj, op.a, op.ver)) return false;
        break;
      }
      case Op::ClassVer:
        if (compat::type_version(reinterpret_cast<PyTypeObject*>(op.obj)) != op.ver) return false;
        break;
      case Op::TypeIs:
        if (reinterpret_cast<const void*>(Py_TYPE(op.obj)) != op.a) return false;
        break;
      case Op::Tensor:
        if (!static_cast<const TensorMatch*>(op.a)->matches(op.obj, w.keys())) return false;
        break;
      case Op::Own:  // own_state's check: a dict value is its own dict (a dict stays one); else its instance dict
        if (op.a == op.obj ? compat::live_dict_version(op.obj) != op.ver : !compat::instance_dict_is(op.obj, op.a, op.ver))
          return false;
        break;
      case Op::HookEmpty: {  // dicts (checked when built) the proven instance dict holds: a dict's class stays a dict
        auto* fourth = reinterpret_cast<PyObject*>(static_cast<uintptr_t>(op.ver));
        if ((PyDict_GET_SIZE(op.obj) | PyDict_GET_SIZE(static_cast<PyObject*>(const_cast<void*>(op.a))) |
             PyDict_GET_SIZE(static_cast<PyObject*>(const_cast<void*>(op.b))) | PyDict_GET_SIZE(fourth)) != 0)
          return false;
        break;
      }
      case Op::Leaf:
        if (!w.guards[op.ver2].check_value(op.obj, nullptr)) return false;
        break;
      case Op::FieldLeaf: {
        PyObject* v = read_field(op.obj, static_cast<Field>(op.ver));  // borrowed from the proven holder
        if (!v || !w.guards[op.ver2].check_value(v, nullptr)) return false;
        break;
      }
      case Op::FieldItemLeaf: {
        PyObject* t = read_field(op.obj, static_cast<Field>(op.ver & 0xff));  // borrowed from the proven holder
        const Py_ssize_t i = static_cast<Py_ssize_t>(op.ver >> 8);
        if (!t || !PyTuple_CheckExact(t) || PyTuple_GET_SIZE(t) <= i) return false;
        if (!w.guards[op.ver2].check_value(PyTuple_GET_ITEM(t, i), nullptr)) return false;  // borrowed item
        break;
      }
      case Op::Value: break;
    }
  }
  // Every stamp held: each value is the object the memos hold (borrowed from its unchanged holder); the walk owns
  // one reference to each value it keeps.
  for (const Op& op : r.values) {
    Py_INCREF(op.obj);
    w.set(op.node, op.obj);
  }
  return true;
}

// Appends the checks that prove node `id` (below a replay root) and its subtree unchanged, given `parent`, the
// parent's value (proven by the ops already appended). False if some node was not read under a stamp or has a
// leaf that may run Python or is not a function of what the stamps prove: that subtree is walked.
bool GuardTree::replay_ops(const Walk& w, uint32_t id, PyObject* parent, bool proven, std::vector<Op>* ops,
                           std::vector<Op>* values, std::vector<uint8_t>* covered) const {
  const Node& n = nodes_[id];
  const Memo& m = n.memo;
  if (n.parent >= 0 && n.kind == Source::Kind::Attr && proven && parent && PyCode_Check(parent) &&
      n.source->name.rfind("co_", 0) == 0)
    return code_subtree_ops(id, covered);
  if (n.parent >= 0 && n.kind == Source::Kind::Item && PyTuple_CheckExact(parent))
    return proven && tuple_item_ops(w, id, parent, ops, values, covered);
  if (n.parent >= 0 && !m.from_ver) return live_ops(w, id, parent, proven, ops, values, covered);
  PyObject* v = m.value;  // borrowed: held under the stamp checked first
  if (!v || !m.from_ver || !m.leaves_ok) return false;
  if (n.parent < 0 && !root_ops(w, n, ops)) return false;
  auto op = [](Op::Code c, PyObject* obj, const void* a, uint64_t ver) {
    Op o;
    o.code = c;
    o.obj = obj;
    o.a = a;
    o.ver = ver;
    return o;
  };
  if (n.parent >= 0) switch (n.kind) {
    case Source::Kind::DictItem:
      if (m.from != parent || m.from2 || !PyDict_Check(parent)) return false;
      ops->push_back(op(Op::DictVer, parent, nullptr, m.from_ver));
      break;
    case Source::Kind::Attr:
    case Source::Kind::GenericAttr:
      if (m.from_ver == kTupleItem) {  // a function's __closure__: fixed for the proven function
        if (m.from != parent || !PyFunction_Check(parent)) return false;
      } else if (m.from == parent && PyType_Check(parent) && m.from2 == Py_TYPE(parent)) {
        // A class's attribute, fixed while the class's and its metaclass's versions are (the metaclass is read
        // only once the class's type is proven to be it: the class holds it then). `type` itself never changes.
        auto* meta = static_cast<PyObject*>(const_cast<void*>(m.from2));
        ops->push_back(op(Op::TypeIs, parent, meta, 0));
        if (meta != reinterpret_cast<PyObject*>(&PyType_Type)) ops->push_back(op(Op::ClassVer, meta, nullptr, m.from2_ver));
        ops->push_back(op(Op::ClassVer, parent, nullptr, m.from_ver));
      } else if (m.from2) {  // an attribute found in the instance dict, or the class's value the dict lacks
        Op o = op(Op::InstAttr, parent, m.from, m.from_ver);
        o.b = m.from2;
        o.ver2 = m.from2_ver;
        ops->push_back(o);
      } else {  // obj.__class__ outside a class root: walked
        return false;
      }
      break;
    default: return false;
  }
  bool own_checked = false;
  for (uint32_t i = n.leaf_begin; i < n.leaf_end; ++i) {
    const Leaf& leaf = leaves_[i];
    if (leaf.skip == Skip::SameObject) continue;
    if (leaf.skip == Skip::SameContents || leaf.skip == Skip::Hooks) {
      if (!m.own) return false;
      if (!own_checked) ops->push_back(op(Op::Own, v, m.own, m.own_ver));
      own_checked = true;
      if (leaf.skip == Skip::Hooks) {
        if (!hooks_empty(m.hooks)) return false;
        // One op for the four dicts (a missing one: an empty dict of our own, never filled).
        PyObject* h[4];
        for (int k = 0; k < 4; ++k) h[k] = m.hooks[k] ? m.hooks[k] : empty_dict();
        if (!h[0]) return false;
        Op o = op(Op::HookEmpty, h[0], h[1], reinterpret_cast<uintptr_t>(h[3]));
        o.b = h[2];
        ops->push_back(o);
      }
      continue;
    }
    if (leaf.type) ops->push_back(op(Op::TypeIs, v, leaf.type, 0));
    else if (leaf.kind == GuardKind::TensorMatch) ops->push_back(op(Op::Tensor, v, leaf.tensor, 0));
    else if (leaf.pure) {
      ops->push_back(op(Op::Leaf, v, nullptr, 0));
      ops->back().ver2 = leaf.guard;
    } else if (leaf.kind == GuardKind::HasAttr && class_lacks(w.guards[leaf.guard], v)) {
      // hasattr(C, name) is false while C (at this version) and `type` have no attribute of that name.
      ops->push_back(op(Op::ClassVer, v, nullptr, compat::type_version(reinterpret_cast<PyTypeObject*>(v))));
    } else if (leaf.kind == GuardKind::HasAttr && module_lacks(w.guards[leaf.guard], v, m, ops)) {
      // module_lacks appended the proof: the class, the instance dict and its three parameter/buffer/module dicts.
    } else if (leaf.kind == GuardKind::HasAttr && has_attr_by_dict(w.guards[leaf.guard], v, m)) {
      // hasattr(v, name) is true while v's class (at this version) has no attribute of that name and reads
      // attributes with object's __getattribute__, and v's instance dict (at this version) holds the name.
      Op o = op(Op::InstAttr, v, m.own, m.own_ver);
      o.b = Py_TYPE(v);
      o.ver2 = compat::type_version(Py_TYPE(v));
      ops->push_back(o);
    } else {
      return false;
    }  // a leaf that reads more than the stamps prove, or may run Python
  }
  if (needed_[id]) {
    Op o = op(Op::Value, v, nullptr, 0);
    o.node = id;
    values->push_back(o);
  }
  (*covered)[id] = 1;
  for (uint32_t k = n.child_begin; k < n.child_end; ++k)
    if (!replay_ops(w, child_ids_[k], v, true, ops, values, covered)) return false;
  return true;
}

// A field of a function or cell proven by its parent (a closure cell's contents, a function's __code__, __defaults__
// or __name__), read with no stamp: read live by the list and each leaf run on it, when every leaf is a function
// of the value that runs no Python. Its children are listed only below an ID_MATCH (the value is then the guard's
// object, alive while the guard passes).
bool GuardTree::live_ops(const Walk& w, uint32_t id, PyObject* parent, bool proven, std::vector<Op>* ops,
                         std::vector<Op>* values, std::vector<uint8_t>* covered) const {
  const Node& n = nodes_[id];
  if (n.class_of || needed_[id]) return false;
  if (n.kind == Source::Kind::GenericAttr) return class_attr_ops(w, id, parent, ops, values, covered);
  if (n.kind != Source::Kind::Attr) return false;
  const FieldNames& f = field_names();
  Field field;
  if (PyCell_Check(parent) && n.name_obj == f.cell_contents) field = Field::CellContents;
  else if (PyType_CheckExact(parent) && (PyType_GetFlags(reinterpret_cast<PyTypeObject*>(parent)) & Py_TPFLAGS_HEAPTYPE) &&
           n.name_obj == f.name)
    field = Field::TypeName;  // type's __name__ descriptor (a data descriptor: it wins) reads ht_name
  else if (Py_TYPE(parent) == &PyProperty_Type && n.name_obj == field_names().fget && property_fget(parent))
    field = Field::PropertyGet;  // a member (read-only as an attribute; property.__init__ may set it again)
  else if (!PyFunction_Check(parent)) return class_attr_ops(w, id, parent, ops, values, covered);
  else if (n.name_obj == f.code) field = Field::Code;
  else if (n.name_obj == f.defaults) field = Field::Defaults;
  else if (n.name_obj == f.name) field = Field::Name;
  else if (n.name_obj == f.closure) field = Field::Closure;
  else return false;
  // The value now (this check passed for it): children are listed below a function's closure (fixed for the proven
  // function) or an ID_MATCH (the guard's object, alive while it passes).
  PyObject* now = read_field(parent, field);  // borrowed
  PyObject* held = field == Field::Closure && proven ? now : nullptr;
  if (!live_leaf_ops(w, n, now, Op::FieldLeaf, parent, static_cast<uint64_t>(field), &held, ops)) return false;
  (*covered)[id] = 1;
  if (!held) {  // a tuple read live (a function's __defaults__): its items are read live too
    if (n.child_begin == n.child_end) return true;
    if (!now || !PyTuple_CheckExact(now)) return false;
    for (uint32_t k = n.child_begin; k < n.child_end; ++k)
      if (!live_item_ops(w, child_ids_[k], parent, field, now, ops, values, covered)) return false;
    return true;
  }
  for (uint32_t k = n.child_begin; k < n.child_end; ++k)
    if (!replay_ops(w, child_ids_[k], held, true, ops, values, covered)) return false;
  return true;
}

bool GuardTree::live_leaf_ops(const Walk& w, const Node& n, PyObject* now, Op::Code code, PyObject* holder, uint64_t at,
                              PyObject** held, std::vector<Op>* ops) const {
  for (uint32_t i = n.leaf_begin; i < n.leaf_end; ++i) {
    const Leaf& leaf = leaves_[i];
    bool pure = leaf.kind == GuardKind::IdMatch || leaf.kind == GuardKind::TypeMatch || leaf.pure ||
                (leaf.kind == GuardKind::EqualsMatch && leaf.skip == Skip::SameObject);
    if (!pure) return false;
    if (leaf.kind == GuardKind::IdMatch) {
      // Below it, the value is the guard's object; a value changed since the leaf passed (Python run by a later
      // leaf) is not listed.
      if (now != w.guards[leaf.guard].identity().object) return false;
      *held = now;
    }
    Op o;
    o.code = code;
    o.obj = holder;
    o.ver = at;
    o.ver2 = leaf.guard;
    ops->push_back(o);
  }
  return true;
}

bool GuardTree::live_item_ops(const Walk& w, uint32_t id, PyObject* holder, Field field, PyObject* tuple,
                              std::vector<Op>* ops, std::vector<Op>* values, std::vector<uint8_t>* covered) const {
  const Node& n = nodes_[id];
  const int index = n.source->index;
  if (n.kind != Source::Kind::Item || needed_[id] || index < 0 || index >= PyTuple_GET_SIZE(tuple)) return false;
  PyObject* now = PyTuple_GET_ITEM(tuple, index);  // borrowed from the tuple
  PyObject* held = nullptr;
  const uint64_t at = static_cast<uint64_t>(field) | (static_cast<uint64_t>(index) << 8);
  if (!live_leaf_ops(w, n, now, Op::FieldItemLeaf, holder, at, &held, ops)) return false;
  if (n.child_begin != n.child_end && !held) return false;
  (*covered)[id] = 1;
  for (uint32_t k = n.child_begin; k < n.child_end; ++k)
    if (!replay_ops(w, child_ids_[k], held, true, ops, values, covered)) return false;
  return true;
}

bool GuardTree::code_subtree_ops(uint32_t id, std::vector<uint8_t>* covered) const {
  const Node& n = nodes_[id];
  if (needed_[id]) return false;
  (*covered)[id] = 1;
  for (uint32_t k = n.child_begin; k < n.child_end; ++k)
    if (!code_subtree_ops(child_ids_[k], covered)) return false;
  return true;
}

// An attribute an instance reads from its class (a class-level default such as `gradient_checkpointing = False`):
// the class's value while the class (at its version) reads attributes with object's __getattribute__ and holds a
// plain value there (no descriptor), and the instance dict (at its version) lacks the name. One InstAttr proves all.
bool GuardTree::class_attr_ops(const Walk& w, uint32_t id, PyObject* parent, std::vector<Op>* ops,
                               std::vector<Op>* values, std::vector<uint8_t>* covered) const {
  const Node& n = nodes_[id];
  if (PyType_CheckExact(parent)) return class_property_ops(w, id, parent, ops, values, covered);
  PyTypeObject* type = Py_TYPE(parent);
  uint64_t tver = compat::type_version(type);
  PyObject* idict = tver ? compat::versioned_instance_dict(parent) : nullptr;  // borrowed
  uint64_t dver = compat::dict_version(idict);
  if (!dver || !PyUnicode_CheckExact(n.name_obj)) return false;
  if (n.kind == Source::Kind::Attr && !generic_getattribute(type)) return false;
  PyObject* v = _PyType_Lookup(type, n.name_obj);  // borrowed from the class's (or a base's) dict
  if (!v || Py_TYPE(v)->tp_descr_get || v != w.values[id]) return false;  // the value this check passed with
  if (PyDict_Contains(idict, n.name_obj) != 0) return false;  // a str key: no Python code runs
  Op o;
  o.code = Op::InstAttr;
  o.obj = parent;
  o.a = idict;
  o.ver = dver;
  o.b = type;
  o.ver2 = tver;
  ops->push_back(o);
  for (uint32_t i = n.leaf_begin; i < n.leaf_end; ++i) {
    const Leaf& leaf = leaves_[i];
    if (leaf.skip == Skip::SameObject) continue;
    Op l;
    l.obj = v;
    if (leaf.type) {
      l.code = Op::TypeIs;
      l.a = leaf.type;
    } else if (leaf.pure) {
      l.code = Op::Leaf;
      l.ver2 = leaf.guard;
    } else {
      return false;
    }
    ops->push_back(l);
  }
  (*covered)[id] = 1;
  for (uint32_t k = n.child_begin; k < n.child_end; ++k)
    if (!replay_ops(w, child_ids_[k], v, true, ops, values, covered)) return false;
  return true;
}

// A property read from a class whose metaclass is `type` (`Config.output_attentions`): property.__get__(None, C) is
// the property itself, fixed while C's version is (and `type` has no attribute of that name).
bool GuardTree::class_property_ops(const Walk& w, uint32_t id, PyObject* parent, std::vector<Op>* ops,
                                   std::vector<Op>* values, std::vector<uint8_t>* covered) const {
  const Node& n = nodes_[id];
  auto* cls = reinterpret_cast<PyTypeObject*>(parent);
  uint64_t tver = compat::type_version(cls);
  PyObject* v = tver && PyUnicode_CheckExact(n.name_obj) ? _PyType_Lookup(cls, n.name_obj) : nullptr;  // borrowed
  if (!v || Py_TYPE(v) != &PyProperty_Type || v != w.values[id] || _PyType_Lookup(&PyType_Type, n.name_obj))
    return false;
  Op o;
  o.code = Op::ClassVer;
  o.obj = parent;
  o.ver = tver;
  ops->push_back(o);
  for (uint32_t i = n.leaf_begin; i < n.leaf_end; ++i)
    if (leaves_[i].skip != Skip::SameObject) return false;
  (*covered)[id] = 1;
  for (uint32_t k = n.child_begin; k < n.child_end; ++k)
    if (!replay_ops(w, child_ids_[k], v, true, ops, values, covered)) return false;
  return true;
}

// An item of a proven exact tuple (a closure's cell, a default, an argument tuple seen before): the same object as
// long as the tuple is, so it needs no check of its own; leaves that are functions of its identity passed for it.
bool GuardTree::tuple_item_ops(const Walk& w, uint32_t id, PyObject* parent, std::vector<Op>* ops,
                               std::vector<Op>* values, std::vector<uint8_t>* covered) const {
  const Node& n = nodes_[id];
  const int index = n.source->index;
  if (index < 0 || index >= PyTuple_GET_SIZE(parent)) return false;
  PyObject* v = PyTuple_GET_ITEM(parent, index);  // borrowed from the tuple
  if (needed_[id]) {
    Op o;
    o.code = Op::Value;
    o.obj = v;
    o.node = id;
    values->push_back(o);
  }
  for (uint32_t i = n.leaf_begin; i < n.leaf_end; ++i) {
    const Leaf& leaf = leaves_[i];
    if (leaf.skip == Skip::SameObject) continue;
    Op o;
    o.obj = v;
    if (leaf.type) {
      o.code = Op::TypeIs;
      o.a = leaf.type;
    } else if (leaf.kind == GuardKind::TensorMatch) {
      o.code = Op::Tensor;
      o.a = leaf.tensor;
    } else if (leaf.pure) {
      o.code = Op::Leaf;
      o.ver2 = leaf.guard;
    } else {
      return false;
    }
    ops->push_back(o);
  }
  (*covered)[id] = 1;
  for (uint32_t k = n.child_begin; k < n.child_end; ++k)
    if (!replay_ops(w, child_ids_[k], v, true, ops, values, covered)) return false;
  return true;
}

// The stamp of a root's fetch: the frame's globals (and builtins) or a module's dicts at their versions, or a class
// root's class at the version it was last seen reading its own type for `__class__`. False: walked.
bool GuardTree::root_ops(const Walk& w, const Node& n, std::vector<Op>* ops) const {
  const Memo& m = n.memo;
  auto push = [&](Op::Code c, PyObject* obj, uint64_t ver) {
    Op o;
    o.code = c;
    o.obj = obj;
    o.ver = ver;
    ops->push_back(o);
  };
  auto* from = static_cast<PyObject*>(const_cast<void*>(m.from));
  auto* from2 = static_cast<PyObject*>(const_cast<void*>(m.from2));
  if (n.class_of) {
    if (m.from_ver != kClassRoot || !n.class_ver) return false;
    push(Op::ClassVer, n.class_of, n.class_ver);
    return true;
  }
  switch (n.kind) {
    case Source::Kind::Global:
      if (from != w.fv.globals || from2) return false;
      push(Op::FrameGlobals, from, 0);
      push(Op::DictVer, from, m.from_ver);
      return true;
    case Source::Kind::Builtin:
      if (from != w.fv.globals || !from2 || from2 != w.fv.builtins) return false;
      push(Op::FrameGlobals, from, 0);
      push(Op::FrameBuiltins, from2, 0);
      push(Op::DictVer, from, m.from_ver);
      push(Op::DictVer, from2, m.from2_ver);
      return true;
    case Source::Kind::ModuleGlobal:
      if (from != n.source->owner || from2) return false;
      push(Op::DictVer, from, m.from_ver);  // the source owns the module's dict
      return true;
    case Source::Kind::ModuleBuiltin:
      if (from != n.source->owner || !from2 || from2 != n.source->builtins) return false;
      push(Op::DictVer, from, m.from_ver);
      push(Op::DictVer, from2, m.from2_ver);
      return true;
    default: return false;
  }
}

void GuardTree::build_roots_replay(Walk& w, std::vector<uint8_t>* covered) const {
  ++roots_replay_.builds;
  std::vector<Op> ops, values;
  std::vector<uint32_t> walked;
  for (uint32_t r : roots_) {
    std::vector<Op> mine, mine_values;
    std::vector<uint8_t> seen(nodes_.size(), 0);
    if (!replay_ops(w, r, nullptr, true, &mine, &mine_values, &seen)) {
      walked.push_back(r);
      continue;
    }
    ops.insert(ops.end(), mine.begin(), mine.end());
    values.insert(values.end(), mine_values.begin(), mine_values.end());
    for (size_t i = 0; i < seen.size(); ++i) (*covered)[i] |= seen[i];
  }
  if (ops.empty()) return;
  roots_replay_.ops = dedup(ops);
  roots_replay_.values = std::move(values);
  walked_roots_ = std::move(walked);
}

void GuardTree::build_replays(Walk& w) const {
  std::vector<uint8_t> covered(nodes_.size(), 0);
  if (w.roots_walked && roots_replay_.builds < kReplayBuilds) build_roots_replay(w, &covered);
  // Highest first: a node inside a subtree that got a list is covered by it.
  std::sort(w.offered.begin(), w.offered.end(), [&](uint32_t a, uint32_t b) { return nodes_[a].depth < nodes_[b].depth; });
  for (uint32_t id : w.offered) {
    Node& n = nodes_[id];
    if (covered[id] || !n.replay.ops.empty() || n.replay.builds >= kReplayBuilds) continue;
    ++n.replay.builds;
    PyObject* v = w.values[id];  // owned by the walk: this check's value of the root
    std::vector<Op> ops, values;
    std::vector<uint8_t> mine(nodes_.size(), 0);
    bool ok = true;
    // Below an ID_MATCH (run by the visit before its list, as now) the value is the guard's object itself.
    for (uint32_t k = n.child_begin; ok && k < n.child_end; ++k)
      ok = replay_ops(w, child_ids_[k], v, n.id_leaf, &ops, &values, &mine);
    if (!ok || ops.empty()) continue;
    n.replay.anchor = v;
    n.replay.anchor_type = Py_TYPE(v);
    n.replay.ops = dedup(ops);
    n.replay.values = std::move(values);
    for (size_t i = 0; i < covered.size(); ++i) covered[i] |= mine[i];
  }
}

}  // namespace cdynamo::guards
