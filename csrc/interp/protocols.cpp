// protocols.cpp — owns Python protocols of user objects in the trace: iteration through a class's Python
// __iter__ (a collections.abc.Sequence's by __getitem__ up to IndexError), `raise` of builtin exceptions
// inside inlined functions (TracedRaise), which such protocols catch, and the except clauses of inlined
// functions (handler entry, PUSH_EXC_INFO, CHECK_EXC_MATCH, POP_EXCEPT, RERAISE).
#include "interp/tracer.h"

namespace cdynamo::interp {

namespace {

constexpr long kMaxSequenceItems = 100000;

// collections.abc.Sequence.__iter__, the mixin generator (a new reference kept for the process lifetime).
PyObject* sequence_iter() {
  static PyObject* f =
      py::object(loaded_module("collections.abc").attr("Sequence").attr("__dict__")["__iter__"]).release().ptr();
  return f;
}

// collections.abc.Mapping's `get` and `__contains__` mixins (new references kept for the process lifetime): both
// call self[key] under `except KeyError`.
PyObject* mapping_mixin(const char* name) {
  return py::object(loaded_module("collections.abc").attr("Mapping").attr("__dict__")[name]).release().ptr();
}

bool builtin_exception_class(py::handle cls) {
  return PyExceptionClass_Check(cls.ptr()) &&
         !(reinterpret_cast<PyTypeObject*>(cls.ptr())->tp_flags & Py_TPFLAGS_HEAPTYPE);
}

}  // namespace

PyObject* user_class_attr(const ValuePtr& v, const char* name) {
  PyTypeObject* type = nullptr;
  if (v->kind == VKind::Instance) type = reinterpret_cast<PyTypeObject*>(v->instance().cls->obj.ptr());
  else if (v->kind == VKind::Object && v->source && !PyType_Check(v->obj.ptr()) && !PyModule_Check(v->obj.ptr()) &&
           !py::isinstance(v->obj, PyRefs::get().nn_module))
    type = Py_TYPE(v->obj.ptr());
  return type ? _PyType_Lookup(type, py::str(name).ptr()) : nullptr;
}

std::optional<std::vector<ValuePtr>> Tracer::iterate_user_object(const ValuePtr& v) {
  // An object of the frame whose class is a builtin type is iterated (or not) by unpack_iterable's rules.
  if (v->kind == VKind::Object && !PyType_HasFeature(Py_TYPE(v->obj.ptr()), Py_TPFLAGS_HEAPTYPE)) return std::nullopt;
  PyObject* it = user_class_attr(v, "__iter__");  // borrowed
  if (!it) return std::nullopt;
  if (it == sequence_iter()) {
    // Sequence.__iter__ yields self[0], self[1], ... until __getitem__ raises IndexError. The items are read
    // ahead of the loop body here, which is only sound when reading them changes nothing.
    PyObject* getitem = user_class_attr(v, "__getitem__");  // borrowed
    if (!getitem || !PyFunction_Check(getitem)) unsupported("iteration over a Sequence without a Python __getitem__");
    std::vector<ValuePtr> items;
    for (long i = 0;; ++i) {
      if (i > kMaxSequenceItems) unsupported("iteration over a Sequence too long to unroll");
      const TraceMark mark = mark_state();
      bool ended = false;
      ValuePtr item;
      try {
        item = call_user_dunder(v, "__getitem__", {Value::constant(py::int_(i))});
      } catch (const TracedRaise& e) {
        if (!PyErr_GivenExceptionMatches(e.exc.ptr(), PyExc_IndexError)) throw;
        ended = true;
      }
      if (!unchanged_since(mark)) unsupported("iteration over a Sequence whose __getitem__ has side effects");
      if (ended) return items;
      if (!item) unsupported("iteration over " + v->describe());
      items.push_back(item);
    }
  }
  if (!PyFunction_Check(it)) return std::nullopt;
  auto* c = reinterpret_cast<PyCodeObject*>(PyFunction_GET_CODE(it));  // borrowed
  if (c->co_flags & (CO_GENERATOR | CO_COROUTINE | CO_ASYNC_GENERATOR))
    unsupported("iteration through the generator __iter__ of " + v->describe());
  ValuePtr r = call_user_dunder(v, "__iter__", {});
  if (!r || r == v || r->kind == VKind::Instance || r->kind == VKind::Object)
    unsupported("iteration through the __iter__ of " + v->describe());
  return unpack_iterable(r);
}

void Tracer::raise_builtin_exception(py::handle cls, const std::vector<ValuePtr>& args) {
  std::string name = reinterpret_cast<PyTypeObject*>(cls.ptr())->tp_name;
  py::tuple pargs(args.size());
  for (size_t i = 0; i < args.size(); ++i) {
    if (!args[i]->is_constant_like()) unsupported("raise " + name + " with " + args[i]->describe());
    pargs[i] = args[i]->as_python();
  }
  py::object exc = cls(*pargs);
  throw TracedRaise("raise " + name + " in an inlined function", exc);
}

struct Tracer::RaiseOps {
  // RAISE_VARARGS 1 of a builtin exception class or of one just made (see Tracer::call): in an inlined
  // function, or under a try statement of the traced frame, a TracedRaise (its handler is traced when it catches
  // it: Tracer::enter_exception_handler); elsewhere in the traced frame a graph break (Python raises).
  static void raise_varargs(Tracer& t, const bytecode::Instruction& i) {
    if ((t.inline_depth() > 0 || t.in_user_try(t.pc)) && i.arg == 1 && t.peek(1)->kind == VKind::Object && builtin_exception_class(t.peek(1)->obj))
      t.raise_builtin_exception(t.peek(1)->obj, {});
    t.unsupported("raise (Python raises)");
  }
};

bool is_builtin_exception_class(py::handle cls) { return builtin_exception_class(cls); }

ValuePtr Tracer::mapping_mixin_call(py::handle f, const std::vector<ValuePtr>& args,
                                    const std::vector<std::pair<std::string, ValuePtr>>& kwargs) {
  static PyObject* get = mapping_mixin("get");
  static PyObject* contains = mapping_mixin("__contains__");
  const bool is_get = f.ptr() == get;
  if ((!is_get && f.ptr() != contains) || !kwargs.empty()) return nullptr;
  if (args.size() < 2 || args.size() > (is_get ? 3u : 2u)) return nullptr;
  // `try: v = self[key] except KeyError: <default / False>`: self[key] traced (the class's __getitem__
  // inlined); a KeyError it raises (a TracedRaise) is the handler's case.
  try {
    ValuePtr v = call_user_dunder(args[0], "__getitem__", {args[1]});
    if (!v) return nullptr;
    return is_get ? v : Value::constant(py::bool_(true));
  } catch (const TracedRaise& e) {
    if (!PyErr_GivenExceptionMatches(e.exc.ptr(), PyExc_KeyError)) throw;
    if (!is_get) return Value::constant(py::bool_(false));
    return args.size() == 3 ? args[2] : Value::constant(py::none());
  }
}

namespace {

// The exception a handler of an inlined function is running for: the object a TracedRaise carried (made
// in the trace, so it has no source).
bool is_traced_exception(const ValuePtr& v) {
  return v->is_traced_exception() && !v->source && v->obj &&
         PyExceptionInstance_Check(v->obj.ptr());
}

}  // namespace

struct Tracer::ExceptionOps {
  // PUSH_EXC_INFO: exc -> previous exception, exc. The previous one is only restored by POP_EXCEPT (the trace
  // does not model sys.exc_info(), a library call it never folds), so a None stands for it. A handler is reached
  // only through Tracer::enter_exception_handler (an inlined function's, or the traced frame's own for a raise under
  // its try statement), which pushes the traced exception.
  static void push_exc_info(Tracer& t, const bytecode::Instruction&) {
    if (!is_traced_exception(t.peek(1))) t.unsupported("an exception handler (Python runs it)");
    ValuePtr exc = t.pop();
    t.push(Value::constant(py::none()));
    t.push(exc);
  }

  // CHECK_EXC_MATCH: exc, cls -> exc, isinstance(exc, cls) for a class or a tuple of classes.
  static void check_exc_match(Tracer& t, const bytecode::Instruction&) {
    if (!is_traced_exception(t.peek(2))) t.unsupported("an exception handler (Python runs it)");
    ValuePtr cls = t.peek(1);
    py::object c;
    if (cls->kind == VKind::Object && PyExceptionClass_Check(cls->obj.ptr())) {
      c = cls->obj;
    } else if (cls->kind == VKind::Tuple && !cls->tuple_class()) {
      py::tuple tup(cls->items.size());
      for (size_t i = 0; i < cls->items.size(); ++i) {
        const ValuePtr& it = cls->items[i];
        if (it->kind != VKind::Object || !PyExceptionClass_Check(it->obj.ptr()))
          t.unsupported("except clause with " + it->describe());
        tup[i] = it->obj;
      }
      c = tup;
    } else {
      t.unsupported("except clause with " + cls->describe());
    }
    t.pop();
    int match = PyErr_GivenExceptionMatches(t.peek(1)->obj.ptr(), c.ptr());
    t.push(Value::constant(py::bool_(match != 0)));
  }

  // POP_EXCEPT: drops the previous exception PUSH_EXC_INFO saved.
  static void pop_except(Tracer& t, const bytecode::Instruction&) {
    if (t.inline_depth() == 0 && (!t.peek(1)->is_const() || !t.peek(1)->obj.is_none()))
      t.unsupported("an exception handler (Python runs it)");  // the frame's own: only after a traced PUSH_EXC_INFO
    t.pop();
  }

  // RERAISE: the handled exception leaves the handler again (to an outer handler or out of the function).
  static void reraise(Tracer& t, const bytecode::Instruction&) {
    if (!is_traced_exception(t.peek(1))) t.unsupported("re-raise (Python raises)");
    py::object exc = t.pop()->obj;
    throw TracedRaise(std::string("re-raised ") + Py_TYPE(exc.ptr())->tp_name + " in an inlined function", exc);
  }
};

bool Tracer::enter_exception_handler(const TracedRaise& e) {
  if (pc >= bc.insts.size()) return false;
  const bytecode::ExceptionEntry* entry = nullptr;  // 3.11+ tables do not overlap: the first is the innermost
  for (const auto& x : bc.exception_table)
    if (covers(x, pc)) {
      entry = &x;
      break;
    }
  if (!entry) return false;
  // A with statement's cleanup would call __exit__ with the exception, which the trace does not model.
  if (with_cleanup(*entry)) unsupported(std::string(e.what()) + " inside a with block of an inlined function");
  int target = bc.index_of(entry->target);
  if (target < 0 || stack.size() < static_cast<size_t>(entry->depth))
    unsupported(std::string(e.what()) + " with an exception-table entry the trace cannot follow");
  stack.resize(static_cast<size_t>(entry->depth));
  if (entry->lasti) push(Value::constant(py::int_(bc.insts[pc]->offset / 2)));  // f_lasti, in code units
  // A new exception object per run in Python: modelled by the trace, never passed back to Python (codegen
  // refuses to rebuild a modelled value, so a handler that lets it escape runs as Python).
  push(Value::traced_exception(e.exc));
  kw_names = py::object();
  pc = static_cast<size_t>(target);
  return true;
}

void Tracer::register_protocols(HandlerTable& t) {
  on_opcode(t, "RAISE_VARARGS", RaiseOps::raise_varargs);
  on_opcode(t, "PUSH_EXC_INFO", ExceptionOps::push_exc_info);
  on_opcode(t, "CHECK_EXC_MATCH", ExceptionOps::check_exc_match);
  on_opcode(t, "POP_EXCEPT", ExceptionOps::pop_except);
  on_opcode(t, "RERAISE", ExceptionOps::reraise);
}

}  // namespace cdynamo::interp
