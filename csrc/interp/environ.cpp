// environ.cpp — owns reads of os.environ in the trace (`get`, `[]`, `in` with a constant str key): the
// answer is a constant of the trace, guarded on the variable's presence and value in os.environ's data.
#include "interp/tracer.h"

namespace cdynamo::interp {

bool Tracer::is_environ(const ValuePtr& v) const {
  return v->kind == VKind::Object && v->source && v->obj.is(PyRefs::get().os_environ);
}

ValuePtr Tracer::environ_call(const ValuePtr& env, const std::string& name, const std::vector<ValuePtr>& args,
                              const std::vector<std::pair<std::string, ValuePtr>>& kwargs) {
  const bool get = name == "get";
  if (!kwargs.empty() || args.empty() || args.size() > (get ? 2u : 1u))
    unsupported("os.environ." + name + "() with these arguments");
  const ValuePtr& key = args[0];
  if (!key->is_const() || !PyUnicode_Check(key->obj.ptr()))
    unsupported("os.environ." + name + "() with the key " + key->describe());
  realize(env);  // which object it is: ID_MATCH on os.environ
  // os.environ keeps the encoded variables in its `_data` dict: guard there, at C level, the key's
  // presence and, when present, its value.
  py::object data = env->obj.attr("_data");
  if (!PyDict_CheckExact(data.ptr())) unsupported("os.environ with an unusual store");
  py::object encoded = env->obj.attr("encodekey")(key->obj);
  SourcePtr dsrc = guards::Source::attr(env->source, "_data");
  PyObject* raw = PyDict_GetItemWithError(data.ptr(), encoded.ptr());  // borrowed, may be NULL
  if (PyErr_Occurred()) throw py::error_already_set();
  guards.add(guards::dict_contains(dsrc, encoded.ptr(), raw != nullptr));
  if (raw) guards.add(guards::equals_match(guards::Source::dict_item_key(dsrc, encoded.ptr()), raw));
  if (name == "__contains__") return Value::constant(py::bool_(raw != nullptr));
  if (!raw) {
    if (get) return args.size() == 2 ? args[1] : Value::constant(py::none());
    unsupported("KeyError: os.environ[" + py::repr(key->obj).cast<std::string>() + "]");
  }
  return Value::constant(env->obj.attr("decodevalue")(py::handle(raw)));
}

}  // namespace cdynamo::interp
