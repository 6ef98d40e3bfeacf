// source.cpp — owns fetching Sources from a FrameView and their readable names.
#include "guards/source.h"

#include <stdexcept>

namespace cdynamo::guards {

namespace {
std::shared_ptr<Source> make(Source::Kind k, int index, const std::string& name, SourcePtr base) {
  auto s = std::make_shared<Source>();
  s->kind = k;
  s->index = index;
  s->name = name;
  s->base = std::move(base);
  if (!name.empty()) {
    s->name_obj = PyUnicode_InternFromString(name.c_str());  // new reference, owned by Source
    if (!s->name_obj) throw std::runtime_error("cannot intern source name");
  }
  return s;
}
}  // namespace

Source::~Source() {
  Py_XDECREF(name_obj);
  Py_XDECREF(owner);
  Py_XDECREF(builtins);
}

SourcePtr Source::local(int slot, const std::string& n) { return make(Kind::Local, slot, n, nullptr); }
SourcePtr Source::global(const std::string& n) { return make(Kind::Global, 0, n, nullptr); }
SourcePtr Source::builtin(const std::string& n) { return make(Kind::Builtin, 0, n, nullptr); }
SourcePtr Source::closure(int slot, const std::string& n) { return make(Kind::Closure, slot, n, nullptr); }
SourcePtr Source::closure_cell(int slot, const std::string& n) { return make(Kind::ClosureCell, slot, n, nullptr); }
SourcePtr Source::call(SourcePtr b) { return make(Kind::Call, 0, "", std::move(b)); }
SourcePtr Source::attr(SourcePtr b, const std::string& n) { return make(Kind::Attr, 0, n, std::move(b)); }
SourcePtr Source::item(SourcePtr b, int i) { return make(Kind::Item, i, "", std::move(b)); }
SourcePtr Source::generic_attr(SourcePtr b, const std::string& n) {
  return make(Kind::GenericAttr, 0, n, std::move(b));
}
SourcePtr Source::random_value(int i, PyObject* make_value) {
  auto s = make(Kind::RandomValue, i, "random_value_" + std::to_string(i), nullptr);
  Py_INCREF(make_value);
  s->owner = make_value;  // owned by the Source
  return s;
}
SourcePtr Source::dict_item(SourcePtr b, const std::string& k) { return make(Kind::DictItem, 0, k, std::move(b)); }
SourcePtr Source::dict_item_key(SourcePtr b, PyObject* key) {
  auto s = make(Kind::DictItem, 0, "", std::move(b));
  Py_INCREF(key);
  s->owner = key;  // owned
  return s;
}
SourcePtr Source::dict_key(SourcePtr b, int i) { return make(Kind::DictKey, i, "", std::move(b)); }
SourcePtr Source::dict_value(SourcePtr b, int i) { return make(Kind::DictValue, i, "", std::move(b)); }
SourcePtr Source::module_global(PyObject* globals, const std::string& n) {
  auto s = make(Kind::ModuleGlobal, 0, n, nullptr);
  Py_INCREF(globals);
  s->owner = globals;  // owned
  return s;
}
SourcePtr Source::module_builtin(PyObject* globals, PyObject* b, const std::string& n) {
  auto s = make(Kind::ModuleBuiltin, 0, n, nullptr);
  Py_INCREF(globals);
  s->owner = globals;  // owned
  Py_INCREF(b);
  s->builtins = b;  // owned
  return s;
}

namespace {
// The key (or value) at live position `index` of dict `d` (borrowed; any dict subclass: its storage, no Python code
// runs): a NEW reference, or nullptr (not a dict, or too short).
PyObject* dict_entry_at(PyObject* d, int index, bool key) {
  if (!d || !PyDict_Check(d) || index < 0 || index >= PyDict_GET_SIZE(d)) return nullptr;
  Py_ssize_t pos = 0;
  PyObject *k, *v;  // borrowed
  for (int seen = 0; PyDict_Next(d, &pos, &k, &v); ++seen) {
    if (seen < index) continue;
    PyObject* r = key ? k : v;
    Py_INCREF(r);
    return r;
  }
  return nullptr;
}
}  // namespace

PyObject* Source::fetch(const FrameView& fv) const {
  if (!base) return fetch_step(fv, nullptr);
  PyObject* b = base->fetch_base(fv);  // new
  if (!b) return nullptr;
  PyObject* v = fetch_step(fv, b);  // new
  Py_DECREF(b);
  return v;
}

PyObject* Source::fetch_step(const FrameView& fv, PyObject* b) const {
  switch (kind) {
    case Kind::Local: {
      PyObject* v = fv.localsplus[index];  // borrowed
      Py_XINCREF(v);
      return v;
    }
    case Kind::Global: {
      PyObject* v = PyDict_GetItemWithError(fv.globals, name_obj);  // borrowed
      if (!v) {
        PyErr_Clear();
        return nullptr;
      }
      Py_INCREF(v);
      return v;
    }
    case Kind::ModuleGlobal:
    case Kind::ModuleBuiltin: {
      PyObject* v = PyDict_GetItemWithError(owner, name_obj);  // borrowed
      if (kind == Kind::ModuleBuiltin) {
        if (v) return nullptr;  // shadowed by a module global: the builtin source is "missing"
        PyErr_Clear();
        v = PyDict_GetItemWithError(builtins, name_obj);  // borrowed
      }
      if (!v) {
        PyErr_Clear();
        return nullptr;
      }
      Py_INCREF(v);
      return v;
    }
    case Kind::Builtin: {
      // A global of the same name shadows the builtin: then the builtin source is "missing".
      if (PyDict_GetItemWithError(fv.globals, name_obj)) return nullptr;
      PyErr_Clear();
      PyObject* v = PyDict_Check(fv.builtins) ? PyDict_GetItemWithError(fv.builtins, name_obj) : nullptr;
      if (!v) {
        PyErr_Clear();
        return nullptr;
      }
      Py_INCREF(v);
      return v;
    }
    case Kind::Closure:
    case Kind::ClosureCell: {
      if (!fv.closure) return nullptr;
      Py_ssize_t i = index - fv.nfree_base;
      if (i < 0 || i >= PyTuple_GET_SIZE(fv.closure)) return nullptr;
      PyObject* cell = PyTuple_GET_ITEM(fv.closure, i);  // borrowed
      PyObject* v = kind == Kind::ClosureCell ? cell : PyCell_GET(cell);  // borrowed
      Py_XINCREF(v);
      return v;
    }
    case Kind::Attr:
    case Kind::GenericAttr: {  // getattr, or object.__getattribute__ past the class's override
      if (!b) return nullptr;
      PyObject* v = kind == Kind::Attr ? PyObject_GetAttr(b, name_obj) : PyObject_GenericGetAttr(b, name_obj);  // new
      if (!v) PyErr_Clear();
      return v;
    }
    case Kind::DictItem: {
      if (!b) return nullptr;
      PyObject* v = nullptr;  // borrowed
      if (owner) v = PyDict_Check(b) ? PyDict_GetItemWithError(b, owner) : nullptr;
      else v = PyDict_CheckExact(b) ? PyDict_GetItemWithError(b, name_obj) : nullptr;
      Py_XINCREF(v);
      if (!v) PyErr_Clear();
      return v;  // new reference or nullptr
    }
    case Kind::Call: {  // base(): a new object from the call (no Python error left set on failure)
      if (!b) return nullptr;
      PyObject* v = PyObject_CallNoArgs(b);  // new
      if (!v) PyErr_Clear();
      return v;
    }
    case Kind::DictKey:
    case Kind::DictValue: return dict_entry_at(b, index, kind == Kind::DictKey);  // new reference or nullptr
    case Kind::RandomValue: {  // a fresh value (draws a random number: only the rewritten code's input load calls it)
      PyObject* v = PyObject_CallNoArgs(owner);  // new
      if (!v) PyErr_Clear();
      return v;
    }
    case Kind::Item: {
      if (!b) return nullptr;
      PyObject* v = nullptr;
      if (PyTuple_CheckExact(b)) {
        if (index >= 0 && index < PyTuple_GET_SIZE(b)) {
          v = PyTuple_GET_ITEM(b, index);  // borrowed
          Py_INCREF(v);
        }
      } else if (PyList_CheckExact(b)) {
        if (index >= 0 && index < PyList_GET_SIZE(b)) {
          v = PyList_GET_ITEM(b, index);  // borrowed
          Py_INCREF(v);
        }
      } else {
        v = PySequence_GetItem(b, index);  // new
        if (!v) PyErr_Clear();
      }
      return v;
    }
  }
  return nullptr;
}

PyObject* Source::fetch_base(const FrameView& fv) const {
  FetchMemo* m = FetchMemo::active();
  if (!m) return fetch(fv);
  auto it = m->slots_->find(this);
  if (it == m->slots_->end()) return fetch(fv);
  PyObject*& v = m->values_[it->second];
  if (v == FetchMemo::unfetched()) v = fetch(fv);  // keeps the new reference (or nullptr)
  Py_XINCREF(v);
  return v;  // new reference
}

bool Source::fast_ref(FastRef* out) const {
  if (kind == Kind::Local) {
    *out = FastRef{index, -1};
    return true;
  }
  if (kind == Kind::Item && index >= 0 && base && base->kind == Kind::Local) {
    *out = FastRef{base->index, index};
    return true;
  }
  return false;
}

std::string Source::describe() const {
  switch (kind) {
    case Kind::Local: return "local '" + name + "'";
    case Kind::Global: return "global '" + name + "'";
    case Kind::Builtin: return "builtin '" + name + "'";
    case Kind::Closure: return "closure '" + name + "'";
    case Kind::ClosureCell: return "cell of closure '" + name + "'";
    case Kind::Attr: return base->describe() + "." + name;
    case Kind::GenericAttr: return "object.__getattribute__(" + base->describe() + ", '" + name + "')";
    case Kind::Item: return base->describe() + "[" + std::to_string(index) + "]";
    case Kind::RandomValue: return "random value " + std::to_string(index);
    case Kind::Call: return base->describe() + "()";
    case Kind::DictKey: return "key " + std::to_string(index) + " of " + base->describe();
    case Kind::DictValue: return "value " + std::to_string(index) + " of " + base->describe();
    case Kind::DictItem: {
      if (!owner) return base->describe() + "['" + name + "']";
      PyObject* r = PyObject_Repr(owner);  // new
      std::string k = r && PyUnicode_Check(r) ? PyUnicode_AsUTF8(r) : "?";
      Py_XDECREF(r);
      PyErr_Clear();
      return base->describe() + "[" + k + "]";
    }
    case Kind::ModuleGlobal:
    case Kind::ModuleBuiltin: {
      PyObject* mod = PyDict_GetItemString(owner, "__name__");  // borrowed
      std::string m = mod && PyUnicode_Check(mod) ? PyUnicode_AsUTF8(mod) : "?";
      return std::string(kind == Kind::ModuleGlobal ? "global '" : "builtin '") + m + "." + name + "'";
    }
  }
  return "?";
}

std::string Source::dynamo_name() const {
  switch (kind) {
    case Kind::Local:
    case Kind::Closure:
    case Kind::ClosureCell: return "L['" + name + "']";
    case Kind::Global:
    case Kind::Builtin:
    case Kind::ModuleGlobal:
    case Kind::ModuleBuiltin: return "G['" + name + "']";
    case Kind::Attr:
    case Kind::GenericAttr: return base->dynamo_name() + "." + name;
    case Kind::Item: return base->dynamo_name() + "[" + std::to_string(index) + "]";
    case Kind::RandomValue: return name;  // torch._dynamo's RandomValueSource: random_value_<i>
    case Kind::Call: return base->dynamo_name() + "()";
    case Kind::DictKey: return "list(" + base->dynamo_name() + ".keys())[" + std::to_string(index) + "]";
    case Kind::DictValue: {  // torch._dynamo's DictGetItemSource keyed by its ConstDictKeySource
      std::string d = base->dynamo_name();
      return d + "[list(" + d + ".keys())[" + std::to_string(index) + "]]";
    }
    case Kind::DictItem: {
      if (owner) {  // a non-string key
        PyObject* r = PyObject_Repr(owner);  // new
        std::string k = r && PyUnicode_Check(r) ? PyUnicode_AsUTF8(r) : "?";
        Py_XDECREF(r);
        PyErr_Clear();
        return base->dynamo_name() + "[" + k + "]";
      }
      // torch._dynamo rewrites "._modules['k']" (and _parameters, _buffers) as ".k" in module paths.
      if (base->kind == Kind::Attr && (base->name == "_modules" || base->name == "_parameters" || base->name == "_buffers"))
        return base->base->dynamo_name() + "." + name;
      return base->dynamo_name() + "['" + name + "']";
    }
  }
  return "?";
}

const Source* Source::root() const {
  const Source* s = this;
  while (s->base) s = s->base.get();
  return s;
}

}  // namespace cdynamo::guards
