// cache.h — owns the per-code cache stored in the code object's extra slot: entries of {guards, code}.
#pragma once

#include <pybind11/pybind11.h>

#include <memory>
#include <string>
#include <vector>

#include "guards/guard.h"

namespace cdynamo::hook {

namespace py = pybind11;

struct CacheEntry {
  guards::GuardSet guards;
  py::object code;             // rewritten code; empty = run the original code as plain Python
  py::object globals;          // the globals the entry was compiled against (identity checked)
  py::object func;             // function object for `code`, made for `func_closure`
  PyObject* func_closure = nullptr;  // borrowed identity of the closure `func` holds
  std::vector<std::string> injected;  // names put into `globals` (compiled fns, resume fns)
  int nargs = 0;               // argument slots passed positionally
  std::string description;     // for logs: what the entry does
};

struct CodeExtra {
  PyCodeObject* code = nullptr;  // borrowed: the extra lives exactly as long as the code
  std::vector<std::unique_ptr<CacheEntry>> entries;
  bool skip = false;       // never capture frames of this code
  bool generated = false;  // produced by cdynamo: run as is
  bool warned = false;     // the recompile-limit warning was given
  bool had_graph = false;  // some entry of this code ever captured a graph
  std::string last_failure;
  ~CodeExtra();
};

// The extra of `code`, or nullptr. Never fails.
CodeExtra* get_extra(PyCodeObject* code);
// The extra of `code`, created on first use. Throws std::runtime_error on failure.
CodeExtra* ensure_extra(PyCodeObject* code);
// Frees every cache entry of every code object (reset()).
void reset_all();
// Number of code objects holding cdynamo cache data.
size_t extra_count();
// Reserves the code-extra index; call once at module init.
int init_cache();

}  // namespace cdynamo::hook
