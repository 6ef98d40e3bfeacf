// guard.cpp — owns evaluation, description and construction of guards and guard sets.
#include "guards/guard.h"

#include "compat/compat.h"
#include "guards/guard_tree.h"
#include "guards/shape_guard.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <stdexcept>

namespace cdynamo::guards {

namespace {
// True if `payload` is the struct of `kind`'s family (guard_kinds.h).
bool payload_fits(GuardKind kind, const GuardPayload& p) {
  switch (kind) {
    case GuardKind::TensorMatch: return std::holds_alternative<TensorCheck>(p);
    case GuardKind::TypeMatch: return std::holds_alternative<TypeCheck>(p);
    case GuardKind::IdMatch: return std::holds_alternative<IdentityCheck>(p);
    case GuardKind::EqualsMatch: return std::holds_alternative<ConstantCheck>(p);
    case GuardKind::LengthMatch: return std::holds_alternative<LengthCheck>(p);
    case GuardKind::DictKeys: return std::holds_alternative<KeysCheck>(p);
    case GuardKind::HasAttr: return std::holds_alternative<AttrCheck>(p);
    case GuardKind::DictContains: return std::holds_alternative<KeyCheck>(p);
    case GuardKind::NoModuleHooks: return std::holds_alternative<HooksCheck>(p);
    case GuardKind::GradMode: return std::holds_alternative<GradModeCheck>(p);
    case GuardKind::DefaultDtype: return std::holds_alternative<DefaultDtypeCheck>(p);
    case GuardKind::Autocast: return std::holds_alternative<AutocastCheck>(p);
    case GuardKind::GlobalState: return std::holds_alternative<GlobalStateCheck>(p);
    case GuardKind::NoAliasing: return std::holds_alternative<DistinctCheck>(p);
    case GuardKind::StorageOverlap: return std::holds_alternative<OverlapCheck>(p);
    case GuardKind::SameObject: return std::holds_alternative<SameCheck>(p);
    case GuardKind::ShapeEnv: return std::holds_alternative<ShapeCheck>(p);
  }
  return false;
}
}  // namespace

Guard::Guard(GuardKind k, SourcePtr src, std::string lbl, GuardPayload payload)
    : kind(k), source(std::move(src)), label(std::move(lbl)), payload_(std::move(payload)) {
  if (!payload_fits(kind, payload_)) throw std::logic_error("guard " + label + " built with another kind's payload");
}

ShapeCheck::ShapeCheck() = default;
ShapeCheck::ShapeCheck(std::unique_ptr<ShapeProgram> p) : program(std::move(p)) {}
ShapeCheck::ShapeCheck(ShapeCheck&&) noexcept = default;
ShapeCheck& ShapeCheck::operator=(ShapeCheck&&) noexcept = default;
ShapeCheck::~ShapeCheck() = default;

Guard::Guard(Guard&&) noexcept = default;
Guard::~Guard() = default;

void Guard::wrong_payload(const char* accessor) const {
  throw std::logic_error(std::string("Guard::") + accessor + "() on a " + label + " guard");
}

const std::vector<SourcePtr>& Guard::related() const {
  if (const auto* d = std::get_if<DistinctCheck>(&payload_)) return d->sources;
  if (const auto* o = std::get_if<OverlapCheck>(&payload_)) return o->sources;
  return same().sources;
}

bool Guard::dead() const {
  const IdentityCheck* id = std::get_if<IdentityCheck>(&payload_);
  return id && id->weak && compat::weakref_dead(id->weak.get());
}

bool GuardSet::dead() const {
  for (const auto& g : guards_)
    if (g.dead()) return true;
  return false;
}

namespace {
std::string repr_of(PyObject* o);
}  // namespace

std::string Guard::describe() const {
  switch (kind) {
    case GuardKind::GradMode:
      return "global state GRAD_MODE (" + std::string(grad_mode().enabled ? "enabled" : "disabled") + ")";
    case GuardKind::DefaultDtype: return "global state DEFAULT_DTYPE";
    case GuardKind::Autocast: return "global state AUTOCAST";
    case GuardKind::GlobalState:
      return "global state GLOBAL_STATE (inference mode, deterministic, torch function, dispatch modes)";
    case GuardKind::NoAliasing:
    case GuardKind::StorageOverlap: {
      const auto& srcs = related();
      std::string s = kind == GuardKind::StorageOverlap ? "STORAGE_OVERLAP("
                      : distinct().storages             ? "NO_STORAGE_ALIASING("
                                                        : "NO_TENSOR_ALIASING(";
      for (size_t i = 0; i < srcs.size(); ++i) s += (i ? ", " : "") + srcs[i]->describe();
      return s + ")";
    }
    case GuardKind::SameObject: return same().sources[0]->describe() + " is " + same().sources[1]->describe() + " DUPLICATE_INPUT";
    case GuardKind::ShapeEnv: {
      std::string s;
      for (const auto& t : shape().program->texts()) s += (s.empty() ? "" : "; ") + t;
      return label + ": " + (s.empty() ? std::string("True") : s);
    }
    case GuardKind::TensorMatch: {
      const TensorMatch& t = *tensor().match;
      if (t.dynamic_sizes() || t.dynamic_strides()) return source->describe() + " " + label + " (" + t.describe_dynamic() + ")";
      break;
    }
    case GuardKind::HasAttr: return source->describe() + " " + label + "('" + PyUnicode_AsUTF8(attr().name.get()) + "')";
    case GuardKind::DictContains: return source->describe() + " " + label + "(" + repr_of(key().key.get()) + ")";
    default: break;
  }
  return source->describe() + " " + label;
}

namespace {
// The values of `sources` (new references, released on destruction); ok is false when one is missing.
struct Fetched {
  std::vector<PyObject*> values;
  bool ok = true;
  Fetched(const FrameView& fv, const std::vector<SourcePtr>& sources) {
    values.reserve(sources.size());
    for (const auto& s : sources) {
      PyObject* v = s->fetch(fv);  // new
      if (!v) {
        ok = false;
        return;
      }
      values.push_back(v);
    }
  }
  ~Fetched() {
    for (PyObject* v : values) Py_DECREF(v);
  }
  Fetched(const Fetched&) = delete;
  Fetched& operator=(const Fetched&) = delete;
};

// What tells tensor inputs apart when their storages must be distinct: the storage, or the object itself
// for a non-tensor or a tensor without storage.
const void* identity_key(PyObject* v) {
  if (!is_tensor(v)) return v;
  const void* k = storage_key(v);
  return k ? k : v;
}

bool fail(std::string* why, const Guard& g, const std::string& reason) {
  if (why) *why = g.describe() + ": " + reason;
  return false;
}
std::string repr_of(PyObject* o) {
  PyObject* r = PyObject_Repr(o);  // new
  if (!r) {
    PyErr_Clear();
    return "<?>";
  }
  const char* s = PyUnicode_AsUTF8(r);  // borrowed buffer of r
  std::string out = s ? s : "<?>";
  Py_DECREF(r);
  PyErr_Clear();
  return out;
}
}  // namespace

PyObject* nn_module_getattr() {
  static PyObject* module_getattr = [] {
    PyObject* nn = PyImport_ImportModule("torch.nn");  // new
    PyObject* mod = nn ? PyObject_GetAttrString(nn, "Module") : nullptr;  // new
    PyObject* ga = mod ? PyObject_GetAttrString(mod, "__getattr__") : nullptr;  // new (kept)
    Py_XDECREF(mod);
    Py_XDECREF(nn);
    if (!ga) PyErr_Clear();
    return ga;
  }();
  return module_getattr;
}

namespace {

// hasattr(module, name) for an nn.Module whose class keeps torch.nn.Module's __getattr__ and object's
// __getattribute__, decided at C level as Module.__getattr__ would (no AttributeError made and dropped, which
// costs microseconds per absent name): 1 / 0, or -1 when this shortcut does not apply (a descriptor on the
// class, which may raise AttributeError, or unusual dicts): then PyObject_HasAttr decides.
int module_has_attr(PyObject* v, PyObject* name) {
  static PyObject* module_getattr = nn_module_getattr();  // borrowed (kept for the process)
  static PyObject* object_getattribute = _PyType_Lookup(&PyBaseObject_Type, PyUnicode_InternFromString("__getattribute__"));  // borrowed (immortal type)
  static PyObject* getattr_name = PyUnicode_InternFromString("__getattr__");            // owned
  static PyObject* getattribute_name = PyUnicode_InternFromString("__getattribute__");  // owned
  if (!module_getattr || !PyUnicode_CheckExact(name)) return -1;
  PyTypeObject* type = Py_TYPE(v);
  if (_PyType_Lookup(type, getattr_name) != module_getattr || _PyType_Lookup(type, getattribute_name) != object_getattribute)
    return -1;
  PyObject* descr = _PyType_Lookup(type, name);  // borrowed
  if (descr) return Py_TYPE(descr)->tp_descr_get ? -1 : 1;
  PyObject** dp = _PyObject_GetDictPtr(v);
  PyObject* dict = dp ? *dp : nullptr;  // borrowed
  if (!dict || !PyDict_CheckExact(dict)) return -1;
  if (PyDict_Contains(dict, name) == 1) return 1;
  for (const char* part : {"_parameters", "_buffers", "_modules"}) {
    PyObject* d = PyDict_GetItemString(dict, part);  // borrowed
    if (!d) continue;
    if (!PyDict_CheckExact(d)) return -1;
    if (PyDict_Contains(d, name) == 1) return 1;
  }
  if (PyErr_Occurred()) {
    PyErr_Clear();
    return -1;
  }
  return 0;
}

}  // namespace

bool Guard::check_state(std::string* why) const {
  switch (kind) {
    case GuardKind::GradMode:
      return grad_mode_enabled() == grad_mode().enabled || fail(why, *this, "grad mode changed");
    case GuardKind::DefaultDtype:
      return default_dtype_code() == default_dtype().code || fail(why, *this, "default dtype changed");
    case GuardKind::Autocast:
      return autocast_state() == autocast().code || fail(why, *this, "autocast state changed");
    default: break;
  }
  const int was = global_state().code;
  const int now = global_state_code();
  if (now == was) return true;
  const int d = now ^ was;
  return fail(why, *this, (d & 1)      ? "inference mode changed"
                          : (d & 2)    ? "deterministic algorithms setting changed"
                          : (d & 12)   ? "torch function enabled state changed"
                          : (d & 0xff0) ? "torch function mode stack changed"
                                        : "torch dispatch mode stack changed");
}

bool Guard::check_relation(const FrameView& fv, std::string* why) const {
  if (kind == GuardKind::SameObject) {
    PyObject* a = same().sources[0]->fetch(fv);  // new
    PyObject* b = same().sources[1]->fetch(fv);  // new
    bool ok = a && a == b;
    Py_XDECREF(a);
    Py_XDECREF(b);
    return ok || fail(why, *this, "inputs are no longer the same object");
  }
  Fetched objs(fv, related());
  bool ok = objs.ok;
  if (kind == GuardKind::StorageOverlap) {
    for (PyObject* v : objs.values) ok = ok && is_tensor(v);
    return (ok && storage_groups(objs.values) == overlap().groups) ||
           fail(why, *this, "tensor inputs share storage differently");
  }
  const bool storages = distinct().storages;
  if (ok) {
    std::vector<const void*> keys;
    for (PyObject* v : objs.values) keys.push_back(storages ? identity_key(v) : v);
    std::sort(keys.begin(), keys.end());
    ok = std::adjacent_find(keys.begin(), keys.end()) == keys.end();
  }
  return ok || fail(why, *this, storages ? "tensor inputs share storage" : "tensor inputs alias each other");
}

bool Guard::check(const FrameView& fv, std::string* why) const {
  switch (kind) {
    case GuardKind::GradMode:
    case GuardKind::DefaultDtype:
    case GuardKind::Autocast:
    case GuardKind::GlobalState: return check_state(why);
    case GuardKind::NoAliasing:
    case GuardKind::StorageOverlap:
    case GuardKind::SameObject: return check_relation(fv, why);
    case GuardKind::ShapeEnv: {
      std::string reason;
      if (shape().program->check(fv, why ? &reason : nullptr)) return true;
      if (why) *why = label + ": " + reason;  // the failing relation names itself
      return false;
    }
    default:
      break;
  }
  PyObject* v = source->fetch(fv);  // new
  bool ok = check_value(v, why);
  Py_XDECREF(v);
  return ok;
}

namespace {

// NO_HOOKS on `v`: true if its four hook dicts (`names`, read from its instance __dict__; a missing one counts as
// empty) are empty and it has no instance-level forward; else false with *reason set.
bool hooks_empty(PyObject* v, PyObject* names, std::string* reason) {
  PyObject** dp = _PyObject_GetDictPtr(v);
  PyObject* d = dp ? *dp : nullptr;  // borrowed
  bool ok = d != nullptr;
  for (Py_ssize_t i = 0; ok && i < PyTuple_GET_SIZE(names); ++i) {
    PyObject* h = PyDict_GetItemWithError(d, PyTuple_GET_ITEM(names, i));  // borrowed
    if (!h && PyErr_Occurred()) PyErr_Clear();
    ok = !h || (PyDict_Check(h) && PyDict_GET_SIZE(h) == 0);
  }
  if (!ok) {
    *reason = "a hook was registered";
    return false;
  }
  // NO_HOOKS also means no instance-level forward (`module.forward = f`: _call_impl calls it)
  static PyObject* forward = PyUnicode_InternFromString("forward");  // owned for the process
  PyObject* f = PyDict_GetItemWithError(d, forward);                 // borrowed
  if (!f && PyErr_Occurred()) PyErr_Clear();
  if (f) *reason = "an instance-level forward was set";
  return f == nullptr;
}

// DICT_KEYS on `v`: an exact dict whose keys equal `keys` (a tuple), in order.
bool keys_equal(PyObject* v, PyObject* keys) {
  Py_ssize_t n = PyTuple_GET_SIZE(keys);
  bool ok = PyDict_CheckExact(v) && PyDict_GET_SIZE(v) == n;
  PyObject *k, *item;  // borrowed
  Py_ssize_t pos = 0;
  for (Py_ssize_t i = 0; ok && PyDict_Next(v, &pos, &k, &item); ++i) {
    PyObject* want = PyTuple_GET_ITEM(keys, i);  // borrowed
    if (k == want) continue;
    int eq = PyObject_RichCompareBool(k, want, Py_EQ);
    if (eq < 0) PyErr_Clear();
    ok = eq == 1;
  }
  return ok;
}

// EQUALS_MATCH of `v` against `c`: same exact type and equal (any nan equals the nan the trace saw, as
// torch._dynamo's isnan test makes it).
bool equals_constant(PyObject* v, PyObject* c) {
  if (Py_TYPE(v) != Py_TYPE(c)) return false;
  if (PyFloat_CheckExact(v) && std::isnan(PyFloat_AS_DOUBLE(v))) return std::isnan(PyFloat_AS_DOUBLE(c));
  int eq = PyObject_RichCompareBool(v, c, Py_EQ);
  if (eq < 0) PyErr_Clear();
  return eq == 1;
}

}  // namespace

bool Guard::check_value(PyObject* v, std::string* why) const {
  if (!v) return fail(why, *this, "value is missing");
  bool ok = true;
  std::string reason;
  switch (kind) {
    case GuardKind::TensorMatch:
      ok = is_tensor(v) && tensor().match->check(v, &reason);
      if (!ok && reason.empty()) reason = std::string("expected a tensor, got ") + Py_TYPE(v)->tp_name;
      break;
    case GuardKind::TypeMatch:
      ok = reinterpret_cast<PyObject*>(Py_TYPE(v)) == type().type.get();
      if (!ok) reason = std::string("type changed to ") + Py_TYPE(v)->tp_name;
      break;
    case GuardKind::IdMatch:
      if (dead()) return fail(why, *this, "the object it was compiled for has died");  // another may sit at its address
      ok = v == identity().object;
      if (!ok) reason = "object identity changed";
      break;
    case GuardKind::EqualsMatch:
      ok = equals_constant(v, constant().value.get());
      if (!ok) reason = "expected " + repr_of(constant().value.get()) + ", actual " + repr_of(v);
      break;
    case GuardKind::NoModuleHooks: ok = hooks_empty(v, hooks().names.get(), &reason); break;
    case GuardKind::HasAttr: {
      PyObject* name = attr().name.get();  // borrowed from the guard
      int has = module_has_attr(v, name);
      if (has < 0) has = PyObject_HasAttr(v, name);
      ok = (has == 1) == attr().present;
      if (!ok) reason = std::string("attribute '") + PyUnicode_AsUTF8(name) + (attr().present ? "' disappeared" : "' appeared");
      break;
    }
    case GuardKind::DictContains: {
      int has = PyDict_Check(v) ? PyDict_Contains(v, key().key.get()) : -1;
      if (has < 0) PyErr_Clear();
      ok = has == (key().present ? 1 : 0);
      if (!ok) reason = has < 0 ? "not a dict" : key().present ? "key disappeared" : "key appeared";
      break;
    }
    case GuardKind::DictKeys:
      ok = keys_equal(v, keys().keys.get());
      if (!ok) reason = "keys changed from " + repr_of(keys().keys.get());
      break;
    case GuardKind::LengthMatch: {
      const LengthCheck& l = length();
      ok = reinterpret_cast<PyObject*>(Py_TYPE(v)) == l.type.get();
      if (!ok) {
        reason = std::string("type changed to ") + Py_TYPE(v)->tp_name;
        break;
      }
      Py_ssize_t n = PyObject_Length(v);
      if (n < 0) PyErr_Clear();
      ok = n == l.length;
      if (!ok) reason = "length changed from " + std::to_string(l.length) + " to " + std::to_string(n);
      break;
    }
    default:
      break;
  }
  return ok ? true : fail(why, *this, reason);
}

namespace {

// NO_TENSOR_ALIASING on fast sources takes the fast path up to this many sources (stack hash table).
constexpr size_t kMaxFastAliasing = 512;

// True if every ref has a value right now and the values are pairwise distinct objects (storages: the
// tensors' storages are pairwise distinct). Borrowed
// pointers only; no Python calls, no allocation. False means "ask Guard::check".
bool fast_all_distinct(const FrameView& fv, const FastRef* refs, size_t n, bool storages) {
  if (n <= 8) {
    const void* seen[8];
    for (size_t i = 0; i < n; ++i) {
      PyObject* obj = refs[i].peek(fv);  // borrowed
      if (!obj) return false;
      const void* v = storages ? identity_key(obj) : obj;
      for (size_t j = 0; j < i; ++j)
        if (seen[j] == v) return false;
      seen[i] = v;
    }
    return true;
  }
  // Open addressing with linear probing in a table of at least 2n slots.
  unsigned bits = 4;
  while ((size_t{1} << bits) < 2 * n) ++bits;
  const size_t mask = (size_t{1} << bits) - 1;
  const void* table[2 * kMaxFastAliasing];  // the first mask + 1 slots are used
  std::memset(table, 0, (mask + 1) * sizeof(const void*));
  for (size_t i = 0; i < n; ++i) {
    PyObject* obj = refs[i].peek(fv);  // borrowed
    if (!obj) return false;
    const void* v = storages ? identity_key(obj) : obj;
    size_t h = static_cast<size_t>(((reinterpret_cast<uintptr_t>(v) >> 4) * 0x9E3779B97F4A7C15ull) >> (64 - bits));
    while (table[h]) {
      if (table[h] == v) return false;
      h = (h + 1) & mask;
    }
    table[h] = v;
  }
  return true;
}

}  // namespace

void GuardSet::add(Guard g) {
  // The same check on the same source is kept once (a global read twice is guarded once).
  const std::string kind = std::to_string(static_cast<int>(g.kind)) + "|";
  if (!texts_.insert(kind + g.describe()).second) return;
  if (g.source) sourced_.insert(kind + g.source->describe());
  guards_.push_back(std::move(g));
  tree_.reset();  // rebuilt on the next check
  plan(guards_.back(), static_cast<uint32_t>(guards_.size() - 1));
}

uint32_t GuardSet::base_slot(const Source* s) {
  auto have = base_slots_.find(s);
  if (have != base_slots_.end()) return have->second;
  // The path from the frame, made of each step's kind, operands and the slot of its base.
  std::string path = std::to_string(static_cast<int>(s->kind)) + "|" + std::to_string(s->index) + "|" +
                     std::to_string(reinterpret_cast<uintptr_t>(s->owner)) + "|" +
                     std::to_string(reinterpret_cast<uintptr_t>(s->builtins)) + "|" +
                     (s->base ? std::to_string(base_slot(s->base.get())) : std::string("-")) + "|" + s->name;
  auto [it, fresh] = slot_by_path_.emplace(path, nslots_);
  if (fresh) ++nslots_;
  base_slots_.emplace(s, it->second);
  return it->second;
}

void GuardSet::plan(const Guard& g, uint32_t index) {
  if (g.source && g.source->base && g.source->base->base) deep_sources_ = true;
  for (const Source* s = g.source ? g.source->base.get() : nullptr; s; s = s->base.get()) base_slot(s);
  if (g.kind == GuardKind::NoAliasing || g.kind == GuardKind::StorageOverlap || g.kind == GuardKind::SameObject)
    for (const auto& src : g.related())
      for (const Source* s = src ? src->base.get() : nullptr; s; s = s->base.get()) base_slot(s);
  if (g.kind == GuardKind::ShapeEnv) {  // the bases of its slots' sources (a Generic step below)
    for (const auto& slot : g.shape().program->slots()) {
      if (slot.source->base && slot.source->base->base) deep_sources_ = true;
      for (const Source* s = slot.source->base.get(); s; s = s->base.get()) base_slot(s);
    }
  }
  FastRef ref;
  if (g.kind == GuardKind::TensorMatch && g.source && g.source->fast_ref(&ref)) {
    auto at = static_cast<uint32_t>(tensor_checks_.size());
    tensor_checks_.push_back(FastTensorCheck{ref, g.tensor().match.get()});  // heap-owned by g: stable address
    Step* last = steps_.empty() ? nullptr : &steps_.back();
    if (last && last->op == Step::Op::Tensors && last->end == at && last->guard + (last->end - last->begin) == index) {
      ++last->end;  // extends the run of consecutive tensor guards
    } else {
      steps_.push_back(Step{Step::Op::Tensors, index, at, at + 1});
    }
    return;
  }
  if (g.kind == GuardKind::NoAliasing && g.distinct().sources.size() <= kMaxFastAliasing) {
    const auto& sources = g.distinct().sources;
    std::vector<FastRef> refs(sources.size());
    bool all = true;
    for (size_t i = 0; i < sources.size() && all; ++i) all = sources[i]->fast_ref(&refs[i]);
    if (all) {
      auto at = static_cast<uint32_t>(alias_refs_.size());
      alias_refs_.insert(alias_refs_.end(), refs.begin(), refs.end());
      steps_.push_back(Step{Step::Op::NoAliasing, index, at, static_cast<uint32_t>(alias_refs_.size())});
      return;
    }
  }
  steps_.push_back(Step{Step::Op::Generic, index, 0, 0});
}

GuardSet::GuardSet() = default;
GuardSet::~GuardSet() = default;
GuardSet::GuardSet(GuardSet&&) noexcept = default;
GuardSet& GuardSet::operator=(GuardSet&&) noexcept = default;

const GuardTree& GuardSet::tree() const {
  if (!tree_) tree_ = std::make_unique<GuardTree>(*this);
  return *tree_;
}

std::string GuardSet::tree_text() const { return tree().text(guards_); }

namespace {
// CDYNAMO_GUARD_TREE_VERIFY=1 (tests, fuzzing): every tree verdict is compared with the flat list's; a difference
// is printed to stderr and the flat verdict is used.
bool verify_tree() {
  static const bool on = [] {
    const char* v = std::getenv("CDYNAMO_GUARD_TREE_VERIFY");
    return v && *v && std::strcmp(v, "0") != 0;
  }();
  return on;
}
}  // namespace

bool GuardSet::check(const FrameView& fv, std::string* why) const {
  if (why) return flat_check(fv, why);
  bool ok = tree().check(guards_, fv);
  if (verify_tree()) {
    std::string reason;
    bool flat = flat_check(fv, &reason);
    if (flat != ok) {
      std::fprintf(stderr, "cdynamo: GUARD TREE VERDICT DIFFERS: tree %d, flat %d (%s)\n%s", ok ? 1 : 0, flat ? 1 : 0,
                   reason.c_str(), tree_text().c_str());
      return flat;
    }
  }
  return ok;
}

namespace {
// Appends the sources' values fetched from the frame (new references); false (nothing appended) if one is missing.
bool fetch_inputs(const std::vector<SourcePtr>& sources, const FrameView& fv, std::vector<PyObject*>* inputs) {
  const size_t before = inputs->size();
  for (const auto& src : sources) {
    PyObject* v = src->fetch(fv);  // new reference, or nullptr with no error set
    if (!v) {
      for (size_t i = before; i < inputs->size(); ++i) Py_DECREF((*inputs)[i]);
      inputs->resize(before);
      return false;
    }
    inputs->push_back(v);
  }
  return true;
}
}  // namespace

bool GuardSet::check_inputs(const FrameView& fv, std::vector<PyObject*>* inputs) const {
  const size_t before = inputs->size();
  bool ok = tree().check(guards_, fv, inputs);
  if (verify_tree()) {
    std::string reason;
    bool flat = flat_check(fv, &reason);
    if (flat != ok) {
      std::fprintf(stderr, "cdynamo: GUARD TREE VERDICT DIFFERS: tree %d, flat %d (%s)\n%s", ok ? 1 : 0, flat ? 1 : 0,
                   reason.c_str(), tree_text().c_str());
      if (flat) return fetch_inputs(input_sources_, fv, inputs);  // the flat verdict decides; the tree fetched nothing
      ok = false;
    } else if (ok) {  // the handed-out values are what the sources give now (no Python ran since the walk)
      for (size_t i = 0; i < input_sources_.size(); ++i) {
        PyObject* v = input_sources_[i]->fetch(fv);  // new reference
        if (PyErr_Occurred()) PyErr_Clear();
        if (v != (*inputs)[before + i])
          std::fprintf(stderr, "cdynamo: GUARD TREE INPUT DIFFERS: %s\n", input_sources_[i]->describe().c_str());
        Py_XDECREF(v);
      }
    }
  }
  if (!ok) {
    for (size_t i = before; i < inputs->size(); ++i) Py_DECREF((*inputs)[i]);
    inputs->resize(before);
  }
  return ok;
}

void GuardSet::set_input_sources(std::vector<SourcePtr> sources) {
  input_sources_ = std::move(sources);
  tree_.reset();  // rebuilt on the next check
}

bool GuardSet::flat_check(const FrameView& fv, std::string* why) const {
  // Same order and verdicts as evaluating every guard with Guard::check: fast tests only skip guards
  // that would pass.
  std::optional<FetchMemo> memo;
  if (deep_sources_) memo.emplace(&base_slots_, nslots_);
  for (const Step& s : steps_) {
    switch (s.op) {
      case Step::Op::Generic:
        if (!guards_[s.guard].check(fv, why)) return false;
        break;
      case Step::Op::Tensors: {
        const FastTensorCheck* c = tensor_checks_.data() + s.begin;
        const size_t n = s.end - s.begin;
        for (size_t i = first_fast_tensor_failure(fv, c, n); i < n;
             i += 1 + first_fast_tensor_failure(fv, c + i + 1, n - i - 1)) {
          if (!guards_[s.guard + i].check(fv, why)) return false;
        }
        break;
      }
      case Step::Op::NoAliasing:
        if (!fast_all_distinct(fv, alias_refs_.data() + s.begin, s.end - s.begin, guards_[s.guard].distinct().storages) &&
            !guards_[s.guard].check(fv, why))
          return false;
        break;
    }
  }
  return true;
}

std::vector<std::string> GuardSet::describe() const {
  std::vector<std::string> out;
  out.reserve(guards_.size());
  for (const auto& g : guards_) {
    if (g.kind != GuardKind::ShapeEnv) {
      out.push_back(g.describe());
      continue;
    }
    const auto& texts = g.shape().program->texts();
    for (const auto& t : texts) out.push_back(g.label + ": " + t);
    if (texts.empty()) out.push_back(g.describe());
  }
  return out;
}

bool GuardSet::has(GuardKind kind, const Source& src) const {
  return sourced_.count(std::to_string(static_cast<int>(kind)) + "|" + src.describe()) > 0;
}

}  // namespace cdynamo::guards
