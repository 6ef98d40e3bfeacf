// services.h — owns the typed view of cdynamo's Python side (cdynamo._services.Services) that the C++ core calls:
// installed once by `_C.set_services` when the package is imported; the core imports no cdynamo module by name.
#pragma once

#include <pybind11/pybind11.h>

namespace cdynamo::interp {

namespace py = pybind11;

// Every handle is a strong reference held for the process's lifetime (the struct is never destroyed: no teardown
// order to get wrong). Each field is the attribute of the same name of the Python object.
struct Services {
  py::object config;                // cdynamo.config (a module: its attributes are read at each use)
  py::object unsupported_error;     // cdynamo.exc.Unsupported (class)
  py::object internal_error;        // cdynamo.exc.InternalError (class)
  py::object allowed_ids;           // set of id(fn) registered by allow_in_graph (changed in place)
  py::object disallowed_ids;        // set of id(fn) registered by disallow_in_graph (changed in place)
  py::object graph_break;           // cdynamo.graph_break
  py::object graph_error_policy;    // _graph_call.error_policy(gm, has_effects) -> (policy, ...)
  py::object graph_save_inputs;     // _graph_call.save_inputs / restore_inputs: a graph call's input snapshots
  py::object graph_restore_inputs;
  py::object frame_is_dynamic;      // _dynamic.frame_is_dynamic(code, cb_dynamic) -> bool
  py::object trace_shapes;          // _dynamic.TraceShapes(code, cb_dynamic)
  py::object need_fake_tensors;     // _dynamic.need_fake_tensors(code)
  py::object op_error_is_genuine;   // _dynamic.op_error_is_genuine(exc) -> bool
  py::object is_user_error;         // _dynamic.is_user_error(exc) -> bool
  py::object observe_tensor;        // _dynamic.observe_tensor(code, cb_dynamic, tensor, name) -> bool
  py::object observe_scalar;        // _dynamic.observe_scalar(code, cb_dynamic, value, name) -> bool
  py::object dict_key_at;           // _dict_positions.key_at(d, i) / value_at(d, i): DictKey / DictValue loads
  py::object dict_value_at;
  py::object ctx_entered;           // _ctx_objects.entered(make, attrs): a torch context remade as entered

  // Functions of modules imported on first need (cold start: an eager first compile imports none of them).
  // Each is resolved once through the Python object's `lazy_<name>()` and kept; borrowed handles returned.
  py::handle aten_meta_run() const;             // _aten_meta.run
  py::handle meta_fallback_run() const;         // _meta_fallback.run
  py::handle autograd_function_apply() const;   // _autograd.FunctionApply
  py::handle random_values() const;             // the _random_values module (interp/random_calls.cpp)

  py::object provider;  // the Python Services object itself
 private:
  py::handle lazy(const char* name, py::object& slot) const;
  mutable py::object aten_meta_run_, meta_fallback_run_, autograd_function_apply_, random_values_;
};

// The installed services; throws std::runtime_error when the cdynamo package has not installed them (cdynamo._C
// used without `import cdynamo`).
const Services& services();
// Reads every field from `provider` (borrowed) and installs them, replacing earlier ones (kept alive: handles
// borrowed from them may still be held). TypeError naming a missing attribute.
void install_services(py::handle provider);

}  // namespace cdynamo::interp
