// skip_files.cpp — owns the list of directories whose code is library code (torch, the stdlib, cdynamo), and the
// code objects marked skip or disable(recursive=False): never captured by the hook, never inlined by the tracer.
#include "interp/skip_files.h"

#include <unordered_set>

namespace cdynamo::interp {

namespace {
// (directory with a trailing '/', skip?) pairs; the longest directory containing a file decides.
std::vector<std::pair<std::string, bool>>& prefixes() {
  static auto* v = new std::vector<std::pair<std::string, bool>>();  // process lifetime
  return *v;
}
}  // namespace

void set_skip_dirs(std::vector<std::string> skip, std::vector<std::string> keep) {
  std::vector<std::pair<std::string, bool>> all;
  for (auto* list : {&skip, &keep})
    for (auto& d : *list) {
      if (d.empty()) continue;
      if (d.back() != '/') d += '/';
      all.emplace_back(d, list == &skip);
    }
  prefixes() = std::move(all);
}

namespace {
// co_filename as text; false (no error left set) when it cannot be read.
bool filename_of(PyCodeObject* code, std::string* out) {
  const char* f = PyUnicode_AsUTF8(code->co_filename);  // borrowed buffer
  if (!f) {
    PyErr_Clear();
    return false;
  }
  *out = f;
  return true;
}
}  // namespace

bool is_library_file(PyCodeObject* code) {
  std::string file;
  if (!filename_of(code, &file)) return true;
  if (file.empty() || file[0] == '<') return file.rfind("<frozen", 0) == 0;
  size_t best = 0;
  bool skip = false;
  for (const auto& [dir, is_skip] : prefixes())
    if (dir.size() > best && file.rfind(dir, 0) == 0) {
      best = dir.size();
      skip = is_skip;
    }
  return skip;
}

bool is_torch_nn_module_file(PyCodeObject* code) {
  std::string file;
  if (!filename_of(code, &file)) return false;
  bool nn = file.find("/torch/nn/modules/") != std::string::npos || file.find("/torch/nn/functional.py") != std::string::npos;
  return nn && is_library_file(code);
}

bool is_inlinable_library_file(PyCodeObject* code) {
  std::string file;
  if (!filename_of(code, &file)) return false;
  for (const char* part : {"/torch/backends/", "/torch/_jit_internal.py", "/torch/nn/utils/", "/torch/overrides.py", "/torch/nn/_reduction.py",
                           "/_collections_abc.py", "<frozen _collections_abc>"})  // frozen in 3.11+
    if (file.find(part) != std::string::npos) return true;
  return false;
}

namespace {
std::unordered_set<PyObject*>* g_skipped = new std::unordered_set<PyObject*>();   // owned references, process lifetime
std::vector<PyObject*>* g_nonrecursive = new std::vector<PyObject*>();           // owned references
}  // namespace

void mark_skipped_code(PyCodeObject* code) {
  PyObject* c = reinterpret_cast<PyObject*>(code);
  if (g_skipped->insert(c).second) Py_INCREF(c);
}

bool is_skipped_code(PyCodeObject* code) {
  return !g_skipped->empty() && g_skipped->count(reinterpret_cast<PyObject*>(code)) > 0;
}

bool function_marked(PyObject* fn, const char* name) {
  if (!fn || !PyFunction_Check(fn)) return false;
  PyObject** dp = _PyObject_GetDictPtr(fn);  // the function's __dict__ slot
  PyObject* mark = dp && *dp ? PyDict_GetItemString(*dp, name) : nullptr;  // borrowed
  int truth = mark ? PyObject_IsTrue(mark) : 0;
  if (truth < 0) PyErr_Clear();
  return truth == 1;
}

bool is_skipped_function(PyObject* fn) { return function_marked(fn, "_torchdynamo_disable"); }

void set_nonrecursive_wrapper_codes(const std::vector<PyObject*>& codes) {
  for (PyObject* c : codes) Py_INCREF(c);
  for (PyObject* c : *g_nonrecursive) Py_DECREF(c);
  *g_nonrecursive = codes;
}

bool is_nonrecursive_wrapper(PyCodeObject* code) {
  if (!code) return false;
  for (PyObject* c : *g_nonrecursive)
    if (c == reinterpret_cast<PyObject*>(code)) return true;
  return false;
}

}  // namespace cdynamo::interp
