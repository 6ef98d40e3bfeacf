// source.h — owns Source (how to fetch a value again from a frame) and FrameView (the frame pieces it reads).
#pragma once

#include <Python.h>

#include <memory>
#include <unordered_map>
#include <string>
#include <vector>

namespace cdynamo::guards {

// What a Source reads from: the fast locals, globals/builtins and closure of one frame (all borrowed).
struct FrameView {
  PyObject** localsplus = nullptr;
  PyObject* globals = nullptr;
  PyObject* builtins = nullptr;
  PyObject* closure = nullptr;  // tuple of cells or NULL
  int nfree_base = 0;           // localsplus index of the first free variable
};

// A source readable without references, Python calls or errors: fast local `slot`, or item `item` of the
// exact tuple/list held there (item >= 0). peek() returns a BORROWED pointer, or nullptr when the fast
// form does not apply right now (unbound local, not an exact tuple/list, index out of range); callers
// then use Source::fetch, which stays the authority. Borrowed pointers are only valid while no Python
// code runs.
struct FastRef {
  int slot = -1;
  int item = -1;
  PyObject* peek(const FrameView& fv) const {
    PyObject* v = fv.localsplus[slot];  // borrowed from the frame
    if (item < 0 || !v) return v;
    if (PyTuple_CheckExact(v)) return item < PyTuple_GET_SIZE(v) ? PyTuple_GET_ITEM(v, item) : nullptr;  // borrowed
    if (PyList_CheckExact(v)) return item < PyList_GET_SIZE(v) ? PyList_GET_ITEM(v, item) : nullptr;     // borrowed
    return nullptr;
  }
};

struct Source;
using SourcePtr = std::shared_ptr<const Source>;

struct Source {
  // ModuleGlobal / ModuleBuiltin: a global (or builtin, when the module does not shadow it) of another
  // module than the frame's, read from that module's globals dict `owner` (an inlined callee's globals).
  // GenericAttr: object.__getattribute__(base, name), past a __getattribute__ override of base's class
  // (what super().__getattribute__(name) reads in a config class that remaps attribute names).
  // RandomValue: graph input `index` of the trace's module-level `random` calls, made anew on each call of the graph by
  // calling `owner` (no arguments; interp/random_calls.cpp): it never reads the frame, and no guard may use it.
  // Call: base() (the value of calling base with no arguments, anew on every fetch: cls.__subclasses__(), whose answer
  // a guard re-reads).
  // ClosureCell: the cell object itself of free variable `index` (what a `nonlocal` assignment of the frame stores
  // into; Closure reads its contents).
  // DictKey / DictValue: the key / value at position `index` of the dict (or dict subclass) base, in its storage
  // order (PyDict_Next, no Python code): torch._dynamo's ConstDictKeySource and, with a guard that the key there is
  // a given object, its DictGetItemSource (a tensor-keyed dict of the frame looked up by a tensor of the frame).
  enum class Kind { Local, Global, Builtin, Closure, Attr, Item, DictItem, ModuleGlobal, ModuleBuiltin, GenericAttr,
                    RandomValue, ClosureCell, Call, DictKey, DictValue };
  Kind kind = Kind::Local;
  int index = 0;          // Local: localsplus slot; Closure: localsplus slot of the free var; Item: index
  std::string name;       // Local/Global/Builtin/Closure/Attr name
  PyObject* name_obj = nullptr;  // interned str for name (owned)
  SourcePtr base;         // Attr / Item
  PyObject* owner = nullptr;     // ModuleGlobal / ModuleBuiltin: the module's globals dict; DictItem: a
                                 // non-string key (owned)
  PyObject* builtins = nullptr;  // ModuleBuiltin: the builtins dict (owned)

  ~Source();
  static SourcePtr local(int slot, const std::string& name);
  static SourcePtr global(const std::string& name);
  static SourcePtr builtin(const std::string& name);
  static SourcePtr closure(int slot, const std::string& name);
  static SourcePtr closure_cell(int slot, const std::string& name);
  static SourcePtr call(SourcePtr base);
  static SourcePtr attr(SourcePtr base, const std::string& name);
  static SourcePtr item(SourcePtr base, int index);
  static SourcePtr generic_attr(SourcePtr base, const std::string& name);
  // base[name] on an exact dict (nn.Module's _modules / _parameters / _buffers): a C-level lookup.
  static SourcePtr dict_item(SourcePtr base, const std::string& key);
  // base[key] on a dict (or dict subclass, looked up at C level) with any hashable constant key (kept
  // in `owner`): the hooks of an nn.Module, keyed by handle id.
  static SourcePtr dict_item_key(SourcePtr base, PyObject* key);
  // The key / value at position `index` of the dict at base (Kind::DictKey / DictValue).
  static SourcePtr dict_key(SourcePtr base, int index);
  static SourcePtr dict_value(SourcePtr base, int index);
  // Borrowed dicts (a reference is kept by the Source).
  static SourcePtr module_global(PyObject* globals, const std::string& name);
  static SourcePtr module_builtin(PyObject* globals, PyObject* builtins, const std::string& name);
  // The index-th random value of a trace, made by calling `make` (borrowed; the Source keeps a reference).
  static SourcePtr random_value(int index, PyObject* make);

  // Returns a NEW reference to the value, or nullptr (with no Python error left set) when the value is
  // missing (unbound local, deleted global, empty cell, failing attribute/item lookup).
  PyObject* fetch(const FrameView& fv) const;
  // One step of fetch(): the value read from `base_value` (borrowed: the value of `base`, ignored for a source
  // without one). A NEW reference, or nullptr with no Python error left set.
  PyObject* fetch_step(const FrameView& fv, PyObject* base_value) const;
  // fetch() of this source as the base of another one: remembered by the active FetchMemo, if any.
  PyObject* fetch_base(const FrameView& fv) const;
  // True (and fills *out) if this source is a local or an item of a local: then out->peek() returns the
  // value fetch() would return whenever peek() is non-null.
  bool fast_ref(FastRef* out) const;
  // "local 'x'", "global 'torch'", "local 'self'.weight", "local 'xs'[0]".
  std::string describe() const;
  // torch._dynamo's name of the same source with its nn_module_stack spelling: "L['self'].layers.0" (a module's
  // _modules / _parameters / _buffers entry read as an attribute), "G['model']", "L['xs'][0]".
  std::string dynamo_name() const;
  // The local or global at the root of this source (for codegen): true if rooted in the frame's locals.
  const Source* root() const;
};

// While one is alive (one GuardSet check), each source fetched as a base of another is fetched once:
// the guards of a module tree (self._modules['0']._forward_hooks, ..._parameters['weight'], ...) share
// the walk to self._modules['0']. The GuardSet numbers its base sources once, when guards are added
// (`slots`: base source -> slot; equal paths share a slot), so a check allocates nothing per fetch: the
// fetched values live in a flat array. A source without a slot is fetched each time. Instances nest (a
// check that runs Python that checks guards).
class FetchMemo {
 public:
  using Slots = std::unordered_map<const Source*, uint32_t>;
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdangling-pointer"  // the destructor restores active_ (scoped use)
#endif
  FetchMemo(const Slots* slots, uint32_t n) : slots_(slots), n_(n), outer_(active_) {
    values_ = n <= kInline ? inline_ : (heap_.resize(n), heap_.data());
    for (uint32_t i = 0; i < n; ++i) values_[i] = unfetched();
    active_ = this;
  }
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
  ~FetchMemo() {
    for (uint32_t i = 0; i < n_; ++i)
      if (values_[i] != unfetched()) Py_XDECREF(values_[i]);
    active_ = outer_;
  }
  FetchMemo(const FetchMemo&) = delete;
  FetchMemo& operator=(const FetchMemo&) = delete;
  static FetchMemo* active() { return active_; }

 private:
  friend struct Source;
  static constexpr uint32_t kInline = 256;
  static PyObject* unfetched() {
    static char marker;
    return reinterpret_cast<PyObject*>(&marker);  // never dereferenced
  }
  const Slots* slots_;
  uint32_t n_;
  PyObject* inline_[kInline];
  std::vector<PyObject*> heap_;
  PyObject** values_;  // new references (nullptr: missing; unfetched(): not fetched yet)
  FetchMemo* outer_;
  static inline thread_local FetchMemo* active_ = nullptr;  // per thread: a guard that runs Python can let another thread check its own guards
};

}  // namespace cdynamo::guards
