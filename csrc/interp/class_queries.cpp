// class_queries.cpp — owns cls.__subclasses__() traced as torch._dynamo traces it: the answer now, guarded by calling
// it again (a Call source) at every check, so a subclass defined or collected later recompiles.
#include "interp/tracer.h"

namespace cdynamo::interp {

bool is_type_subclasses(PyObject* cls) {
  static PyObject* key = PyUnicode_InternFromString("__subclasses__");  // process lifetime
  // borrowed from type's own dict (immortal); through the MRO lookup, as 3.12+ keeps a static type's dict out of
  // tp_dict (NULL there)
  static PyObject* own = _PyType_Lookup(&PyType_Type, key);
  PyObject* found = _PyType_Lookup(Py_TYPE(cls), key);                                 // borrowed, may be NULL
  return own && found == own;
}

// `fn` is a class's own __subclasses__ read with a source (objects.cpp); called with no arguments it gives a new list
// of the subclasses alive now, in CPython's order. The list is one made in the trace (the caller may change it); its
// length and each item's identity are guarded through `<class source>.__subclasses__()[i]`, a call re-run at check.
ValuePtr Tracer::subclasses_call(const ValuePtr& fn, const std::vector<ValuePtr>& args, const Kwargs& kwargs) {
  if (fn->kind != VKind::Object || !fn->source || fn->bound_self() || !args.empty() || !kwargs.empty()) return nullptr;
  if (fn->source->kind != guards::Source::Kind::Attr || fn->source->name != "__subclasses__") return nullptr;
  PyObject* f = fn->obj.ptr();
  if (!PyCFunction_Check(f) || !PyCFunction_GET_SELF(f) || !PyType_Check(PyCFunction_GET_SELF(f))) return nullptr;
  if (!is_type_subclasses(PyCFunction_GET_SELF(f))) return nullptr;
  SourcePtr src = guards::Source::call(fn->source);
  py::list now = fn->obj();
  guards.add(guards::length_match(src, now.ptr()));
  std::vector<ValuePtr> items;
  for (size_t i = 0; i < now.size(); ++i) {
    SourcePtr at = guards::Source::item(src, static_cast<int>(i));
    guards.add(guards::id_match(at, now[i].ptr()));  // which class, at which place
    items.push_back(wrap(now[i], at));
  }
  return Value::list(std::move(items));
}

}  // namespace cdynamo::interp
