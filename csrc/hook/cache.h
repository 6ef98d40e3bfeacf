// cache.h — owns the per-code cache stored in the code object's extra slot: entries of {guards, code}.
#pragma once

#include <pybind11/pybind11.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "guards/guard.h"

namespace cdynamo::hook {

namespace py = pybind11;

struct CacheEntry {
  guards::GuardSet guards;
  py::object code;             // rewritten code; empty = run the original code as plain Python
  py::object graph;            // the GraphCall `code` calls first (none for a break with no graph)
  py::object globals;          // the globals the entry was compiled against (identity checked)
  py::object func;             // function object for `code`, made for `func_closure`
  PyObject* func_closure = nullptr;  // borrowed identity of the closure `func` holds
  std::vector<std::string> injected;  // names put into `globals` (compiled fns, resume fns)
  int nargs = 0;               // argument slots passed positionally
  uint64_t serial = 0;         // creation order (entries are kept most recently used first)
  // The nn.Module the frame's first local held when the entry was compiled (a module method's `self`), identity only
  // (borrowed, never dereferenced: it may be gone): the recompile limit counts entries per instance (translate.cpp).
  const void* compiled_for_self = nullptr;
  bool warned_rerun = false;   // warned that the graph raised where the frame, run as Python, did not
  std::string description;     // for logs: what the entry does
  // Compiled for this callback and its backend (strong references): another backend's call compiles anew,
  // as torch._dynamo's backend guard does; the same backend through another optimize() shares the entry.
  py::object callback;
  py::object backend;
};

// True if `e` may serve calls under callback `cb` (borrowed): its own callback, the same backend object,
// or the run-only mode (cached code runs, nothing compiles).
bool entry_serves(const CacheEntry& e, PyObject* cb);

// Lifetimes: CPython owns a CodeExtra through the code object's extra slot; an eval_frame call using it
// pins it (ExtraPin), and reset() or the code's death while it is pinned only detaches it (then the last
// unpin frees it). Entries are shared: a caller checking or running one holds it, so a reset() (or another
// thread) changing `entries` under a guard or a backend that runs Python never frees what is in use.
struct CodeExtra {
  PyCodeObject* code = nullptr;  // borrowed: the code outlives the extra (or a pinned, detached extra)
  std::vector<std::shared_ptr<CacheEntry>> entries;
  int pins = 0;            // eval_frame calls using this extra now (GIL held)
  bool detached = false;   // taken off its code object while pinned: freed by the last unpin
  bool skip = false;       // never capture frames of this code
  bool generated = false;  // produced by cdynamo: run as is
  bool warned = false;     // the recompile-limit warning was given
  bool had_graph = false;  // some entry of this code ever captured a graph
  bool continuation = false;  // a __resume_at_* code: runs compiled only with recursion headroom to spare
  int dead_drops = 0;      // entries dropped because an object they were compiled for died
  std::string last_failure;
  ~CodeExtra();
};

// The entry created last (the recompile reason names its failing guard), or nullptr.
CacheEntry* newest_entry(const CodeExtra* extra);

// Continuations nest one frame per graph break (eager runs the function in one frame): below this much
// headroom a continuation runs as Python, so a chain of breaks never meets a RecursionError eager would not.
bool continuation_too_deep(PyThreadState* tstate);

// Keeps an extra alive for a scope (GIL held throughout).
class ExtraPin {
 public:
  explicit ExtraPin(CodeExtra* e) : e_(e) { ++e_->pins; }
  ~ExtraPin();
  ExtraPin(const ExtraPin&) = delete;
  ExtraPin& operator=(const ExtraPin&) = delete;

 private:
  CodeExtra* e_;
};

// The extra of `code`, or nullptr. Never fails.
CodeExtra* get_extra(PyCodeObject* code);
// The extra of `code`, created on first use. Throws std::runtime_error on failure.
CodeExtra* ensure_extra(PyCodeObject* code);
// Frees every cache entry of every code object (reset()). Names injected into user globals are removed
// once no thread runs compiled code (a running rewritten frame still loads its continuations by name).
// Runs compiled code: while any is running, removals of injected globals wait (RunningCompiled).
struct RunningCompiled {
  RunningCompiled();
  ~RunningCompiled();
};
void reset_all();
// Removes the entries whose guards hold an object that has died (they can never match again).
void drop_dead_entries(CodeExtra* extra);
// Number of code objects holding cdynamo cache data.
size_t extra_count();
// Reserves the code-extra index; call once at module init.
int init_cache();

}  // namespace cdynamo::hook
