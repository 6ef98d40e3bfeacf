// made_modules.cpp — owns torch.nn modules made inside the trace (`nn.Softmax(dim=-1)(x)` in a forward): built while
// tracing from constant arguments when the module holds no state, called through its forward, never passed back.
#include "interp/tracer.h"

namespace cdynamo::interp {

namespace {

// A class of torch.nn's own modules (torch.nn.modules.*), a subclass of nn.Module whose forward is a Python function.
bool is_torch_nn_module_class(py::handle cls) {
  if (!PyType_Check(cls.ptr())) return false;
  int sub = PyObject_IsSubclass(cls.ptr(), PyRefs::get().nn_module.ptr());
  if (sub < 0) throw py::error_already_set();
  if (sub != 1) return false;
  py::object mod = py::getattr(cls, "__module__", py::none());
  if (!PyUnicode_Check(mod.ptr()) || mod.cast<std::string>().rfind("torch.nn.modules.", 0) != 0) return false;
  PyObject* forward = _PyType_Lookup(reinterpret_cast<PyTypeObject*>(cls.ptr()), py::str("forward").ptr());  // borrowed
  return forward && PyFunction_Check(forward);
}

bool empty_dict_attr(py::handle obj, const char* name) {
  py::object d = py::getattr(obj, name, py::none());
  return !d.is_none() && py::len(d) == 0;
}

}  // namespace

ValuePtr Tracer::make_nn_module(Tracer& t, const ValuePtr& cls, std::vector<ValuePtr>& args, Kwargs& kwargs) {
  // The class: read through a source (guarded), or from torch's namespace (a program constant, as torch.nn.Softmax).
  if (cls->kind != VKind::Object || cls->bound_self() || !is_torch_nn_module_class(cls->obj)) return nullptr;
  py::tuple real(args.size());
  py::dict kw;
  for (size_t i = 0; i < args.size(); ++i) {
    if (!foldable(args[i])) return nullptr;
    real[i] = args[i]->as_python();
  }
  for (const auto& kv : kwargs) {
    if (!foldable(kv.second)) return nullptr;
    kw[py::str(kv.first)] = kv.second->as_python();
  }
  // Constructing it registers nothing outside the object (no parameter, buffer or submodule, checked below, so no
  // registration hook runs); an object with state is not made here (its parameters would be new on every call).
  py::object inst = cls->obj(*real, **kw);
  for (const char* d : {"_parameters", "_buffers", "_modules", "_forward_hooks", "_forward_pre_hooks",
                        "_backward_hooks", "_backward_pre_hooks"})
    if (!empty_dict_attr(inst, d)) t.unsupported(describe_module_made(cls) + " holds " + d + ": not made in a trace");
  ValuePtr v = Value::object(inst);
  v->payload = ModuleMadeOf{cls, args, kwargs};
  return v;
}

std::string describe_module_made(const ValuePtr& cls) {
  return "torch.nn." + py::str(cls->obj.attr("__name__")).cast<std::string>() + "(...)";
}

ValuePtr Tracer::made_module_attr(Tracer& t, const ValuePtr& mod, const std::string& name) {
  py::handle inst = mod->obj;
  py::object dict = inst.attr("__dict__");
  PyObject* own = PyDict_GetItemString(dict.ptr(), name.c_str());  // borrowed, may be NULL
  if (own) {
    py::object v = py::reinterpret_borrow<py::object>(own);
    if (is_constant_object(v)) return Value::constant(v);
    t.unsupported("attribute '" + name + "' of " + describe_module_made(mod->made_module()->cls) + " (not a constant)");
  }
  PyObject* descr = _PyType_Lookup(Py_TYPE(inst.ptr()), py::str(name).ptr());  // borrowed, may be NULL
  if (descr && PyFunction_Check(descr))
    return Value::bound_method(py::reinterpret_borrow<py::object>(descr), nullptr, mod, name);
  if (descr && is_constant_object(descr)) return Value::constant(py::reinterpret_borrow<py::object>(descr));
  t.unsupported("attribute '" + name + "' of " + describe_module_made(mod->made_module()->cls));
}

ValuePtr Tracer::call_made_module(Tracer& t, const ValuePtr& mod, std::vector<ValuePtr> args, Kwargs kwargs) {
  // Module._call_impl of a module without hooks of its own is its forward, unless a global hook is registered: those
  // dicts are guarded empty through torch.nn.modules.module's globals (as Tracer::call_module does).
  guard_no_global_module_hooks(t, "call of a module made in the trace");
  PyObject* forward = _PyType_Lookup(Py_TYPE(mod->obj.ptr()), py::str("forward").ptr());  // borrowed
  if (!forward || !PyFunction_Check(forward)) t.unsupported("a module made in the trace without a Python forward");
  args.insert(args.begin(), mod);
  return t.inline_call(Value::object(py::reinterpret_borrow<py::object>(forward)), std::move(args), std::move(kwargs));
}

}  // namespace cdynamo::interp
