// cache.cpp — owns code-extra storage, its registry for reset() and the cleanup of injected globals.
#include "hook/cache.h"

#include <algorithm>

#include <stdexcept>
#include <unordered_set>

#include "compat/compat.h"
#include "hook/state.h"

namespace cdynamo::hook {

namespace {

Py_ssize_t g_extra_index = -1;
std::unordered_set<CodeExtra*>* g_registry = new std::unordered_set<CodeExtra*>();  // process lifetime

// While reset_all replaces an extra, CPython calls free_extra *before* it clears the slot: a destructor
// that ran Python then could find the half-freed extra through the code object. Such frees are deferred
// until the slot is clear.
bool g_defer_free = false;
std::vector<CodeExtra*>* g_deferred = new std::vector<CodeExtra*>();  // process lifetime

void free_extra(void* p) {
  // Called by CPython (GIL held) when the code object dies or its extra is replaced.
  // CPython calls it with NULL for a code object whose slot is empty.
  auto* e = static_cast<CodeExtra*>(p);
  if (!e) return;
  g_registry->erase(e);
  if (e->pins > 0) {  // in use by a running eval_frame: freed by its last unpin
    e->detached = true;
    return;
  }
  if (g_defer_free) {
    g_deferred->push_back(e);
    return;
  }
  delete e;
}

int g_running = 0;  // compiled calls in progress, all threads (GIL held)
// Injected global names whose removal waits for g_running to reach 0: (globals dict, name), owned.
std::vector<std::pair<py::object, std::string>>* g_pending = new std::vector<std::pair<py::object, std::string>>();

void remove_injected(PyObject* globals, const std::string& name) {
  if (PyDict_DelItemString(globals, name.c_str()) < 0) PyErr_Clear();
}

void flush_pending() {
  while (!g_pending->empty() && g_running == 0) {
    auto item = std::move(g_pending->back());
    g_pending->pop_back();
    remove_injected(item.first.ptr(), item.second);  // may run Python (a dict's values die): re-check
  }
}

}  // namespace

RunningCompiled::RunningCompiled() { ++g_running; }
RunningCompiled::~RunningCompiled() {
  if (--g_running == 0 && !g_pending->empty()) {
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);  // the compiled call's own error, if any, survives the cleanup
    flush_pending();
    PyErr_Restore(type, value, tb);
  }
}

ExtraPin::~ExtraPin() {
  if (--e_->pins == 0 && e_->detached) delete e_;
}

namespace {

void drop_injected(CacheEntry& e) {
  if (!e.globals || !PyDict_Check(e.globals.ptr())) return;
  for (const auto& name : e.injected) {
    if (g_running > 0) g_pending->emplace_back(e.globals, name);
    else remove_injected(e.globals.ptr(), name);
  }
  e.injected.clear();
}

}  // namespace

CodeExtra::~CodeExtra() {
  g_registry->erase(this);
  for (auto& e : entries) drop_injected(*e);
}

void drop_dead_entries(CodeExtra* extra) {
  auto& v = extra->entries;
  for (size_t i = 0; i < v.size();) {
    if (!v[i]->guards.dead()) {
      ++i;
      continue;
    }
    std::shared_ptr<CacheEntry> e = std::move(v[i]);
    v.erase(v.begin() + static_cast<std::ptrdiff_t>(i));
    ++extra->dead_drops;
    drop_injected(*e);  // e itself dies here (or when a caller running it lets go)
  }
}

bool entry_serves(const CacheEntry& e, PyObject* cb) {
  if (e.callback.ptr() == cb || !e.backend || cb == run_only()) return true;
  PyObject* backend = PyObject_GetAttrString(cb, "backend");  // new reference
  if (!backend) {
    PyErr_Clear();
    return false;
  }
  bool same = backend == e.backend.ptr();
  Py_DECREF(backend);
  return same;
}

CacheEntry* newest_entry(const CodeExtra* extra) {
  CacheEntry* best = nullptr;
  for (const auto& e : extra->entries)
    if (!best || e->serial > best->serial) best = e.get();
  return best;
}

bool continuation_too_deep(PyThreadState* tstate) {
  const int limit = Py_GetRecursionLimit();
  return compat::recursion_headroom(tstate) < std::min(limit / 4, 200);
}

CodeExtra* get_extra(PyCodeObject* code) {
  return static_cast<CodeExtra*>(compat::code_get_extra(code, static_cast<int>(g_extra_index)));
}

CodeExtra* ensure_extra(PyCodeObject* code) {
  if (CodeExtra* e = get_extra(code)) return e;
  auto* e = new CodeExtra();
  e->code = code;
  if (!compat::code_set_extra(code, static_cast<int>(g_extra_index), e)) {
    delete e;
    throw std::runtime_error("cannot attach cache data to code object");
  }
  g_registry->insert(e);
  return e;
}

void reset_all() {
  // Freeing one extra can free others (its rewritten and resume codes die with it), so take one element
  // at a time from the live registry instead of iterating a snapshot.
  while (!g_registry->empty()) {
    CodeExtra* e = *g_registry->begin();
    // Replacing the extra with NULL makes CPython call free_extra on the old value (which erases it).
    // That can drop the last reference to the code object itself (a continuation's record holds its
    // user code), so hold one (new reference, released after the call) while CPython writes into it.
    PyCodeObject* code = e->code;
    Py_INCREF(code);
    g_defer_free = true;  // no Python runs until it is reset below
    bool cleared = compat::code_set_extra(code, static_cast<int>(g_extra_index), nullptr);
    g_defer_free = false;
    if (!cleared) g_registry->erase(e);  // leaked rather than left dangling in the code object
    std::vector<CodeExtra*> dead;
    dead.swap(*g_deferred);
    for (CodeExtra* d : dead) delete d;  // may run Python: the slot is clear now
    Py_DECREF(code);
  }
}

size_t extra_count() { return g_registry->size(); }

int init_cache() {
  if (g_extra_index >= 0) return 0;
  g_extra_index = compat::code_extra_index(free_extra);
  return g_extra_index < 0 ? -1 : 0;
}

}  // namespace cdynamo::hook
