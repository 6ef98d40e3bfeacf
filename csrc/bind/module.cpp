// module.cpp — owns the pybind11 module cdynamo._C: callback control, OptimizedCallable, reset, skip marks.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "interp/services.h"
#include "interp/aten_meta.h"
#include "interp/meta_cache.h"
#include "interp/torch_rules.h"
#include "interp/skip_files.h"

#include "compat/random_state.h"
#include "hook/cache.h"
#include "hook/eval_frame.h"
#include "hook/graph_call.h"
#include "hook/module_call.h"
#include "hook/state.h"

namespace py = pybind11;
using namespace cdynamo;

void bind_testing(py::module_& m);

PYBIND11_MODULE(_C, m) {
  m.doc() = "cdynamo's C++ core: PEP 523 frame hook, symbolic interpreter, guards and codegen";
  if (hook::init_state() < 0 || hook::init_cache() < 0 || hook::init_graph_call() < 0 || hook::init_compile_lock() < 0)
    throw py::error_already_set();

  m.attr("OptimizedCallable") = py::handle(reinterpret_cast<PyObject*>(&hook::OptimizedCallableType));
  m.attr("GraphCall") = py::handle(reinterpret_cast<PyObject*>(&hook::GraphCallType));
  m.attr("RUN_ONLY") = py::handle(hook::run_only());

  m.def(
      "install_module_call",
      [](py::handle type, py::handle nn_globals, py::handle fallback) {
        if (!hook::install_module_call(type.ptr(), nn_globals.ptr(), fallback.ptr())) throw py::error_already_set();
      },
      py::arg("type"), py::arg("nn_globals"), py::arg("fallback"),
      "Sets OptimizedModule.__call__ to its C++ form (nn.Module.__call__ where hooks, compile() or tracing apply).");
  m.def(
      "random_state_save",
      [](py::handle gen) -> py::object {
        PyObject* b = compat::random_state_save(gen.ptr());  // new reference or NULL
        if (!b && PyErr_Occurred()) throw py::error_already_set();
        return b ? py::reinterpret_steal<py::object>(b) : py::object(py::none());
      },
      py::arg("generator"), "The Mersenne Twister state of a random.Random as bytes, or None (unknown layout).");
  m.def(
      "random_state_restore",
      [](py::handle gen, py::handle blob) { return compat::random_state_restore(gen.ptr(), blob.ptr()); },
      py::arg("generator"), py::arg("state"), "Writes back a random_state_save state; False if it does not fit.");
  m.def(
      "set_services", [](py::object provider) { interp::install_services(provider); }, py::arg("services"),
      "Installs cdynamo._services.Services: the Python functions the C++ core calls (done by `import cdynamo`).");
  m.def(
      "set_callback",
      [](py::object cb) {
        if (!cb.is_none() && cb.ptr() != hook::run_only() && !py::hasattr(cb, "compile_graph"))
          throw py::type_error("set_callback expects None, RUN_ONLY or a callback with compile_graph()");
        PyObject* prev = hook::exchange_callback(cb.ptr());  // new reference or NULL
        if (!prev) return py::object(py::none());
        return py::reinterpret_steal<py::object>(prev);
      },
      py::arg("callback"), "Sets this thread's frame callback; returns the previous one.");
  m.def(
      "get_callback",
      []() {
        PyObject* cb = hook::current_callback();  // borrowed
        return cb ? py::reinterpret_borrow<py::object>(cb) : py::object(py::none());
      },
      "This thread's frame callback (None, RUN_ONLY or a callback).");
  m.def(
      "reset",
      [] {
        hook::reset_all();
        interp::meta_cache_clear();
        interp::clear_classification_cache();
      },
      "Frees every cache entry and the globals they injected, and forgets memoized shape propagation.");
  m.def(
      "call_aten_meta",
      [](py::handle op, py::handle args, py::handle kwargs) { return interp::call_aten_meta(op, args, kwargs); },
      py::arg("op"), py::arg("args"), py::arg("kwargs"),
      "Runs an aten OpOverload on meta tensors with ATen's C++ Meta kernel where torch's Python meta kernel "
      "shadows it; NotImplemented where that does not apply.");
  m.def(
      "aten_meta_kind", [](py::handle op) { return interp::aten_meta_kind(op); }, py::arg("op"),
      "What call_aten_meta runs for `op`: 0 nothing, 1 ATen's C++ Meta kernel, 2 a composite kernel.");
  m.def(
      "meta_cache_stats", [] { return interp::meta_cache_stats(); },
      "(entries, hits) of the shape-propagation memo since the last reset.");
  m.def(
      "skip_code",
      [](py::object code) {
        if (!PyCode_Check(code.ptr())) throw py::type_error("skip_code expects a code object");
        hook::ensure_extra(reinterpret_cast<PyCodeObject*>(code.ptr()))->skip = true;
      },
      py::arg("code"), "Never capture frames of this code object.");
  m.def(
      "mark_skip",
      [](py::object code) {
        if (!PyCode_Check(code.ptr())) throw py::type_error("mark_skip expects a code object");
        auto* c = reinterpret_cast<PyCodeObject*>(code.ptr());
        interp::mark_skipped_code(c);
        hook::ensure_extra(c)->skip = true;
      },
      py::arg("code"),
      "cdynamo.skip: frames of this code run as Python (the functions they call are captured) and the tracer "
      "never inlines it; kept across reset().");
  m.def(
      "set_nonrecursive_wrapper_codes",
      [](py::list codes) {
        std::vector<PyObject*> v;
        for (auto c : codes) {
          if (!PyCode_Check(c.ptr())) throw py::type_error("set_nonrecursive_wrapper_codes expects code objects");
          v.push_back(c.ptr());
        }
        interp::set_nonrecursive_wrapper_codes(v);
      },
      py::arg("codes"), "Wrapper codes whose directly called frame runs as Python (disable(recursive=False)).");
  m.def(
      "set_disable_codes",
      [](py::list codes) {
        std::vector<PyObject*> v;
        for (auto c : codes) {
          if (!PyCode_Check(c.ptr())) throw py::type_error("set_disable_codes expects code objects");
          v.push_back(c.ptr());
        }
        hook::set_disable_codes(v);
      },
      py::arg("codes"), "Code objects whose frames (and what they call) are never captured.");
  m.def("set_skip_dirs", &interp::set_skip_dirs, py::arg("skip"), py::arg("keep") = std::vector<std::string>(),
        "Directories whose code is never captured (torch, the stdlib, cdynamo, skipped libraries), and the "
        "directories inside them that are user code again (site-packages); the longest match decides.");
  m.def(
      "cache_entry_count",
      [](py::object code) {
        if (!PyCode_Check(code.ptr())) throw py::type_error("cache_entry_count expects a code object");
        hook::CodeExtra* e = hook::get_extra(reinterpret_cast<PyCodeObject*>(code.ptr()));
        return e ? e->entries.size() : size_t{0};
      },
      py::arg("code"), "Number of cache entries held for a code object.");

  py::module_ testing = m.def_submodule("_testing", "Each pipeline stage exposed for tests");
  bind_testing(testing);
}
