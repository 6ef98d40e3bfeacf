// skip_files.cpp — owns the list of directories whose code is library code (torch, the stdlib, cdynamo):
// never captured by the hook, never inlined by the tracer.
#include "interp/skip_files.h"

namespace cdynamo::interp {

namespace {
std::vector<std::string>& prefixes() {
  static auto* v = new std::vector<std::string>();  // process lifetime
  return *v;
}
}  // namespace

void set_skip_dirs(std::vector<std::string> dirs) {
  for (auto& d : dirs)
    if (!d.empty() && d.back() != '/') d += '/';
  prefixes() = std::move(dirs);
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
  for (const auto& p : prefixes())
    if (file.rfind(p, 0) == 0) return true;
  return false;
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
  for (const char* part : {"/torch/backends/", "/torch/_jit_internal.py", "/torch/nn/utils/", "/torch/overrides.py",
                           "/_collections_abc.py"})
    if (file.find(part) != std::string::npos) return true;
  return false;
}

}  // namespace cdynamo::interp
