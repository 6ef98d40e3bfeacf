// services.cpp — owns installing and reading the typed services object (services.h).
#include "interp/services.h"

#include <stdexcept>
#include <string>

namespace cdynamo::interp {

namespace {

Services* g_services = nullptr;  // process lifetime; replaced ones are leaked on purpose (borrowed handles survive)

py::object field(py::handle provider, const char* name) {
  if (!py::hasattr(provider, name))
    throw py::type_error(std::string("cdynamo services object lacks attribute '") + name + "'");
  return provider.attr(name);
}

}  // namespace

py::handle Services::lazy(const char* name, py::object& slot) const {
  if (!slot) slot = provider.attr(name)();
  return slot;
}

py::handle Services::aten_meta_run() const { return lazy("lazy_aten_meta_run", aten_meta_run_); }
py::handle Services::meta_fallback_run() const { return lazy("lazy_meta_fallback_run", meta_fallback_run_); }
py::handle Services::autograd_function_apply() const {
  return lazy("lazy_autograd_function_apply", autograd_function_apply_);
}
py::handle Services::random_values() const { return lazy("lazy_random_values", random_values_); }

const Services& services() {
  if (!g_services) throw std::runtime_error("cdynamo._C used before `import cdynamo` installed its services");
  return *g_services;
}

void install_services(py::handle provider) {
  auto* s = new Services();  // never freed (see g_services)
  try {
    s->config = field(provider, "config");
    s->unsupported_error = field(provider, "unsupported_error");
    s->internal_error = field(provider, "internal_error");
    s->allowed_ids = field(provider, "allowed_ids");
    s->disallowed_ids = field(provider, "disallowed_ids");
    s->graph_break = field(provider, "graph_break");
    s->graph_error_policy = field(provider, "graph_error_policy");
    s->graph_save_inputs = field(provider, "graph_save_inputs");
    s->graph_restore_inputs = field(provider, "graph_restore_inputs");
    s->frame_is_dynamic = field(provider, "frame_is_dynamic");
    s->trace_shapes = field(provider, "trace_shapes");
    s->need_fake_tensors = field(provider, "need_fake_tensors");
    s->op_error_is_genuine = field(provider, "op_error_is_genuine");
    s->is_user_error = field(provider, "is_user_error");
    s->observe_tensor = field(provider, "observe_tensor");
    s->observe_scalar = field(provider, "observe_scalar");
    s->dict_key_at = field(provider, "dict_key_at");
    s->dict_value_at = field(provider, "dict_value_at");
    s->ctx_entered = field(provider, "ctx_entered");
    for (const char* lazy :
         {"lazy_aten_meta_run", "lazy_meta_fallback_run", "lazy_autograd_function_apply", "lazy_random_values"})
      field(provider, lazy);
    s->provider = py::reinterpret_borrow<py::object>(provider);
  } catch (...) {
    delete s;
    throw;
  }
  g_services = s;
}

}  // namespace cdynamo::interp
