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

Guard::Guard(Guard&& o) noexcept
    : kind(o.kind),
      source(std::move(o.source)),
      tensor(std::move(o.tensor)),
      shape(std::move(o.shape)),
      expected(o.expected),
      weak(o.weak),
      length(o.length),
      state(o.state),
      sources(std::move(o.sources)),
      groups(std::move(o.groups)),
      label(std::move(o.label)) {
  o.expected = nullptr;
  o.weak = nullptr;
}

Guard::~Guard() {
  if (weak) Py_DECREF(weak);  // `expected` is borrowed then
  else Py_XDECREF(expected);
}

bool Guard::dead() const { return weak && compat::weakref_dead(weak); }

bool GuardSet::dead() const {
  for (const auto& g : guards_)
    if (g.dead()) return true;
  return false;
}

namespace {
std::string repr_of(PyObject* o);
}  // namespace

std::string Guard::describe() const {
  if (kind == GuardKind::GradMode) return "global state GRAD_MODE (" + std::string(state ? "enabled" : "disabled") + ")";
  if (kind == GuardKind::DefaultDtype) return "global state DEFAULT_DTYPE";
  if (kind == GuardKind::Autocast) return "global state AUTOCAST";
  if (kind == GuardKind::GlobalState) return "global state GLOBAL_STATE (inference mode, deterministic, torch function, dispatch modes)";
  if (kind == GuardKind::NoAliasing || kind == GuardKind::StorageOverlap) {
    std::string s = kind == GuardKind::StorageOverlap ? "STORAGE_OVERLAP(" : state ? "NO_STORAGE_ALIASING(" : "NO_TENSOR_ALIASING(";
    for (size_t i = 0; i < sources.size(); ++i) s += (i ? ", " : "") + sources[i]->describe();
    return s + ")";
  }
  if (kind == GuardKind::SameObject) return sources[0]->describe() + " is " + sources[1]->describe() + " DUPLICATE_INPUT";
  if (kind == GuardKind::ShapeEnv) {
    std::string s;
    for (const auto& t : shape->texts()) s += (s.empty() ? "" : "; ") + t;
    return label + ": " + (s.empty() ? std::string("True") : s);
  }
  if (kind == GuardKind::TensorMatch && (tensor->dynamic_sizes() || tensor->dynamic_strides()))
    return source->describe() + " " + label + " (" + tensor->describe_dynamic() + ")";
  if (kind == GuardKind::HasAttr) return source->describe() + " " + label + "('" + PyUnicode_AsUTF8(expected) + "')";
  if (kind == GuardKind::DictContains) return source->describe() + " " + label + "(" + repr_of(expected) + ")";
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

bool Guard::check(const FrameView& fv, std::string* why) const {
  switch (kind) {
    case GuardKind::GradMode:
      if (grad_mode_enabled() != static_cast<bool>(state)) return fail(why, *this, "grad mode changed");
      return true;
    case GuardKind::DefaultDtype:
      if (default_dtype_code() != state) return fail(why, *this, "default dtype changed");
      return true;
    case GuardKind::Autocast:
      if (autocast_state() != state) return fail(why, *this, "autocast state changed");
      return true;
    case GuardKind::GlobalState: {
      int now = global_state_code();
      if (now == state) return true;
      int d = now ^ state;
      return fail(why, *this, (d & 1)   ? "inference mode changed"
                              : (d & 2) ? "deterministic algorithms setting changed"
                              : (d & 12) ? "torch function enabled state changed"
                              : (d & 0xff0) ? "torch function mode stack changed"
                                         : "torch dispatch mode stack changed");
    }
    case GuardKind::NoAliasing: {
      Fetched objs(fv, sources);
      bool ok = objs.ok;
      if (ok) {
        std::vector<const void*> keys;
        for (PyObject* v : objs.values) keys.push_back(state ? identity_key(v) : v);
        std::sort(keys.begin(), keys.end());
        ok = std::adjacent_find(keys.begin(), keys.end()) == keys.end();
      }
      return ok ? true : fail(why, *this, state ? "tensor inputs share storage" : "tensor inputs alias each other");
    }
    case GuardKind::StorageOverlap: {
      Fetched objs(fv, sources);
      bool ok = objs.ok;
      for (PyObject* v : objs.values) ok = ok && is_tensor(v);
      if (ok) ok = storage_groups(objs.values) == groups;
      return ok ? true : fail(why, *this, "tensor inputs share storage differently");
    }
    case GuardKind::ShapeEnv: {
      std::string reason;
      if (shape->check(fv, why ? &reason : nullptr)) return true;
      if (why) *why = label + ": " + reason;  // the failing relation names itself
      return false;
    }
    case GuardKind::SameObject: {
      PyObject* a = sources[0]->fetch(fv);  // new
      PyObject* b = sources[1]->fetch(fv);  // new
      bool ok = a && a == b;
      Py_XDECREF(a);
      Py_XDECREF(b);
      return ok ? true : fail(why, *this, "inputs are no longer the same object");
    }
    default:
      break;
  }
  PyObject* v = source->fetch(fv);  // new
  bool ok = check_value(v, why);
  Py_XDECREF(v);
  return ok;
}

bool Guard::check_value(PyObject* v, std::string* why) const {
  if (!v) return fail(why, *this, "value is missing");
  bool ok = true;
  std::string reason;
  switch (kind) {
    case GuardKind::TensorMatch:
      ok = is_tensor(v) && tensor->check(v, &reason);
      if (!ok && reason.empty()) reason = std::string("expected a tensor, got ") + Py_TYPE(v)->tp_name;
      break;
    case GuardKind::TypeMatch:
      ok = reinterpret_cast<PyObject*>(Py_TYPE(v)) == expected;
      if (!ok) reason = std::string("type changed to ") + Py_TYPE(v)->tp_name;
      break;
    case GuardKind::IdMatch:
      if (dead()) {  // another object may sit at the dead one's address
        return fail(why, *this, "the object it was compiled for has died");
      }
      ok = v == expected;
      if (!ok) reason = "object identity changed";
      break;
    case GuardKind::EqualsMatch: {
      ok = Py_TYPE(v) == Py_TYPE(expected);
      if (ok && PyFloat_CheckExact(v) && std::isnan(PyFloat_AS_DOUBLE(v))) {
        ok = std::isnan(PyFloat_AS_DOUBLE(expected));  // any nan is the nan the trace saw (torch._dynamo: isnan)
      } else if (ok) {
        int eq = PyObject_RichCompareBool(v, expected, Py_EQ);
        if (eq < 0) PyErr_Clear();
        ok = eq == 1;
      }
      if (!ok) reason = "expected " + repr_of(expected) + ", actual " + repr_of(v);
      break;
    }
    case GuardKind::NoModuleHooks: {
      // The four hook dicts live in the instance __dict__; a missing one counts as empty.
      PyObject** dp = _PyObject_GetDictPtr(v);
      PyObject* d = dp ? *dp : nullptr;  // borrowed
      ok = d != nullptr;
      for (Py_ssize_t i = 0; ok && i < PyTuple_GET_SIZE(expected); ++i) {
        PyObject* h = PyDict_GetItemWithError(d, PyTuple_GET_ITEM(expected, i));  // borrowed
        if (!h && PyErr_Occurred()) PyErr_Clear();
        ok = !h || (PyDict_Check(h) && PyDict_GET_SIZE(h) == 0);
      }
      if (!ok) reason = "a hook was registered";
      if (ok) {  // NO_HOOKS also means no instance-level forward (`module.forward = f`: _call_impl calls it)
        static PyObject* forward = PyUnicode_InternFromString("forward");  // owned for the process
        PyObject* f = PyDict_GetItemWithError(d, forward);                 // borrowed
        if (!f && PyErr_Occurred()) PyErr_Clear();
        ok = f == nullptr;
        if (!ok) reason = "an instance-level forward was set";
      }
      break;
    }
    case GuardKind::HasAttr: {
      int has = module_has_attr(v, expected);
      if (has < 0) has = PyObject_HasAttr(v, expected);
      ok = has == state;
      if (!ok) reason = std::string("attribute '") + PyUnicode_AsUTF8(expected) + (state ? "' disappeared" : "' appeared");
      break;
    }
    case GuardKind::DictContains: {
      int has = PyDict_Check(v) ? PyDict_Contains(v, expected) : -1;
      if (has < 0) PyErr_Clear();
      ok = has == state;
      if (!ok) reason = has < 0 ? "not a dict" : state ? "key disappeared" : "key appeared";
      break;
    }
    case GuardKind::DictKeys: {
      Py_ssize_t n = PyTuple_GET_SIZE(expected);
      ok = PyDict_CheckExact(v) && PyDict_GET_SIZE(v) == n;
      PyObject *k, *item;  // borrowed
      Py_ssize_t pos = 0;
      for (Py_ssize_t i = 0; ok && PyDict_Next(v, &pos, &k, &item); ++i) {
        PyObject* want = PyTuple_GET_ITEM(expected, i);  // borrowed
        if (k == want) continue;
        int eq = PyObject_RichCompareBool(k, want, Py_EQ);
        if (eq < 0) PyErr_Clear();
        ok = eq == 1;
      }
      if (!ok) reason = "keys changed from " + repr_of(expected);
      break;
    }
    case GuardKind::LengthMatch: {
      ok = reinterpret_cast<PyObject*>(Py_TYPE(v)) == expected;
      if (ok) {
        Py_ssize_t n = PyObject_Length(v);
        if (n < 0) PyErr_Clear();
        ok = n == length;
        if (!ok) reason = "length changed from " + std::to_string(length) + " to " + std::to_string(n);
      } else {
        reason = std::string("type changed to ") + Py_TYPE(v)->tp_name;
      }
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
  for (const auto& src : g.sources)
    for (const Source* s = src ? src->base.get() : nullptr; s; s = s->base.get()) base_slot(s);
  if (g.shape) {  // SHAPE_ENV: the bases of its slots' sources (a Generic step below)
    for (const auto& slot : g.shape->slots()) {
      if (slot.source->base && slot.source->base->base) deep_sources_ = true;
      for (const Source* s = slot.source->base.get(); s; s = s->base.get()) base_slot(s);
    }
  }
  FastRef ref;
  if (g.kind == GuardKind::TensorMatch && g.source && g.tensor && g.source->fast_ref(&ref)) {
    auto at = static_cast<uint32_t>(tensor_checks_.size());
    tensor_checks_.push_back(FastTensorCheck{ref, g.tensor.get()});  // TensorMatch is heap-owned by g
    Step* last = steps_.empty() ? nullptr : &steps_.back();
    if (last && last->op == Step::Op::Tensors && last->end == at && last->guard + (last->end - last->begin) == index) {
      ++last->end;  // extends the run of consecutive tensor guards
    } else {
      steps_.push_back(Step{Step::Op::Tensors, index, at, at + 1});
    }
    return;
  }
  if (g.kind == GuardKind::NoAliasing && g.sources.size() <= kMaxFastAliasing) {
    std::vector<FastRef> refs(g.sources.size());
    bool all = true;
    for (size_t i = 0; i < g.sources.size() && all; ++i) all = g.sources[i]->fast_ref(&refs[i]);
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
        if (!fast_all_distinct(fv, alias_refs_.data() + s.begin, s.end - s.begin, guards_[s.guard].state != 0) &&
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
    for (const auto& t : g.shape->texts()) out.push_back(g.label + ": " + t);
    if (g.shape->texts().empty()) out.push_back(g.describe());
  }
  return out;
}

bool GuardSet::has(GuardKind kind, const Source& src) const {
  return sourced_.count(std::to_string(static_cast<int>(kind)) + "|" + src.describe()) > 0;
}

namespace {
Guard base(GuardKind k, SourcePtr src, const char* label) {
  Guard g;
  g.kind = k;
  g.source = std::move(src);
  g.label = label;
  return g;
}
}  // namespace

Guard tensor_match(SourcePtr src, PyObject* value, uint64_t dynamic_sizes, uint64_t dynamic_strides) {
  Guard g = base(GuardKind::TensorMatch, std::move(src), "TENSOR_MATCH");
  g.tensor = TensorMatch::make(value, dynamic_sizes, dynamic_strides);
  return g;
}

Guard type_match(SourcePtr src, PyObject* value) {
  Guard g = base(GuardKind::TypeMatch, std::move(src), "TYPE_MATCH");
  g.expected = reinterpret_cast<PyObject*>(Py_TYPE(value));
  Py_INCREF(g.expected);  // owned
  return g;
}

Guard id_match(SourcePtr src, PyObject* value) {
  bool fn_like = PyModule_Check(value) || PyFunction_Check(value) || PyCFunction_Check(value) || PyType_Check(value);
  Guard g = base(GuardKind::IdMatch, std::move(src), fn_like ? "FUNCTION_MATCH" : "ID_MATCH");
  g.expected = value;
  // Weakly held where possible (user objects, modules made per call must not be kept alive by a cache
  // entry); otherwise owned, which pins the identity compared against.
  if (!PyModule_Check(value)) {
    g.weak = PyWeakref_NewRef(value, nullptr);  // new reference, or NULL
    if (g.weak) return g;
    PyErr_Clear();
  }
  Py_INCREF(g.expected);
  return g;
}

Guard equals_match(SourcePtr src, PyObject* value) {
  Guard g = base(GuardKind::EqualsMatch, std::move(src), "EQUALS_MATCH");
  g.expected = value;
  Py_INCREF(g.expected);  // owned
  return g;
}

Guard length_match(SourcePtr src, PyObject* value) {
  Guard g = base(GuardKind::LengthMatch, std::move(src), "LIST_LENGTH");
  g.expected = reinterpret_cast<PyObject*>(Py_TYPE(value));
  Py_INCREF(g.expected);  // owned
  g.length = PyObject_Length(value);
  if (g.length < 0) {
    PyErr_Clear();
    throw std::runtime_error("length guard on an object without len()");
  }
  if (PyTuple_Check(value)) g.label = "TUPLE_LENGTH";
  return g;
}

Guard dict_keys_match(SourcePtr src, PyObject* dict) {
  Guard g = base(GuardKind::DictKeys, std::move(src), "DICT_KEYS");
  g.expected = PyDict_Keys(dict);  // owned: a list, made a tuple below
  if (!g.expected) throw std::runtime_error("DICT_KEYS guard on a non-dict");
  PyObject* t = PyList_AsTuple(g.expected);  // new
  Py_DECREF(g.expected);
  if (!t) throw std::runtime_error("DICT_KEYS guard: keys could not be copied");
  g.expected = t;  // owned
  return g;
}

Guard has_attr(SourcePtr src, const std::string& name, bool present) {
  Guard g = base(GuardKind::HasAttr, std::move(src), present ? "HASATTR" : "NO_HASATTR");
  g.expected = PyUnicode_InternFromString(name.c_str());  // owned
  if (!g.expected) throw std::runtime_error("HASATTR guard: bad attribute name");
  g.state = present ? 1 : 0;
  return g;
}

Guard dict_contains(SourcePtr src, PyObject* key, bool present) {
  Guard g = base(GuardKind::DictContains, std::move(src), present ? "DICT_CONTAINS" : "DICT_LACKS");
  Py_INCREF(key);
  g.expected = key;  // owned
  g.state = present ? 1 : 0;
  return g;
}

Guard autocast_guard() {
  Guard g = base(GuardKind::Autocast, nullptr, "AUTOCAST");
  g.state = autocast_state();
  return g;
}

Guard no_module_hooks(SourcePtr module) {
  Guard g = base(GuardKind::NoModuleHooks, std::move(module), "NO_HOOKS");
  g.expected = Py_BuildValue("(ssss)", "_forward_pre_hooks", "_forward_hooks", "_backward_pre_hooks",
                             "_backward_hooks");  // owned tuple of names
  if (!g.expected) throw std::runtime_error("NO_HOOKS guard: cannot build names");
  for (Py_ssize_t i = 0; i < 4; ++i) PyUnicode_InternInPlace(&PyTuple_GET_ITEM(g.expected, i));
  return g;
}

Guard global_state_guard() {
  Guard g = base(GuardKind::GlobalState, nullptr, "GLOBAL_STATE");
  g.state = global_state_code();
  return g;
}

Guard grad_mode_guard() {
  Guard g = base(GuardKind::GradMode, nullptr, "GRAD_MODE");
  g.state = grad_mode_enabled() ? 1 : 0;
  return g;
}

Guard default_dtype_guard() {
  Guard g = base(GuardKind::DefaultDtype, nullptr, "DEFAULT_DTYPE");
  g.state = default_dtype_code();
  return g;
}

Guard no_aliasing(std::vector<SourcePtr> srcs, bool storages) {
  Guard g = base(GuardKind::NoAliasing, nullptr, "NO_TENSOR_ALIASING");
  g.sources = std::move(srcs);
  g.state = storages ? 1 : 0;
  return g;
}

std::vector<int> storage_groups(const std::vector<PyObject*>& values) {
  std::vector<int> groups(values.size());
  std::vector<const void*> keys(values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    keys[i] = storage_key(values[i]);
    groups[i] = static_cast<int>(i);
    if (!keys[i]) continue;
    for (size_t j = 0; j < i; ++j)
      if (keys[j] == keys[i]) {
        groups[i] = static_cast<int>(j);
        break;
      }
  }
  return groups;
}

Guard storage_overlap(std::vector<SourcePtr> srcs, const std::vector<PyObject*>& values) {
  Guard g = base(GuardKind::StorageOverlap, nullptr, "STORAGE_OVERLAP");
  g.sources = std::move(srcs);
  g.groups = storage_groups(values);
  return g;
}

Guard same_object(SourcePtr a, SourcePtr b) {
  Guard g = base(GuardKind::SameObject, nullptr, "DUPLICATE_INPUT");
  g.sources = {std::move(a), std::move(b)};
  return g;
}

}  // namespace cdynamo::guards
