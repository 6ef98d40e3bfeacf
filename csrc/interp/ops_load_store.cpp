// ops_load_store.cpp — owns handlers for loads, stores, attribute access and stack shuffling opcodes.
#include "bytecode/bytecode.h"
#include "interp/tracer.h"

namespace cdynamo::interp {

namespace {

using bytecode::Instruction;

void nop(Tracer&, const Instruction&) {}

void load_fast(Tracer& t, const Instruction& i) {
  ValuePtr v = t.load_local(i.arg);
  if (!v) t.unsupported("local variable '" + t.local_name(i.arg) + "' referenced before assignment");
  t.push(v);
}

void store_fast(Tracer& t, const Instruction& i) {
  t.locals[i.arg] = t.pop();
  t.local_loaded[i.arg] = 1;
}

void delete_fast(Tracer& t, const Instruction& i) {
  // `del` of an unbound local raises UnboundLocalError: left to Python.
  if (!t.local_bound(i.arg)) t.unsupported("del of local variable '" + t.local_name(i.arg) + "' that is not bound");
  t.locals[i.arg] = nullptr;
  t.local_loaded[i.arg] = 1;
}

// A tuple constant of the code object (possibly nested) as a Tuple of constants.
ValuePtr constant_tuple(Tracer& t, py::handle c) {
  std::vector<ValuePtr> items;
  for (auto item : py::reinterpret_borrow<py::tuple>(c)) {
    if (PyTuple_CheckExact(item.ptr())) items.push_back(constant_tuple(t, item));
    else if (is_constant_object(item)) items.push_back(Value::constant(py::reinterpret_borrow<py::object>(item)));
    else t.unsupported(std::string("constant tuple holding ") + Py_TYPE(item.ptr())->tp_name);
  }
  return Value::tuple(std::move(items));
}

void load_const(Tracer& t, const Instruction& i) {
  py::handle c = t.const_at(i.arg);
  if (is_constant_object(c)) {
    t.push(Value::constant(py::reinterpret_borrow<py::object>(c)));
    return;
  }
  if (PyTuple_CheckExact(c.ptr())) {
    t.push(constant_tuple(t, c));
    return;
  }
  if (PyCode_Check(c.ptr())) {  // for MAKE_FUNCTION
    t.push(Value::object(py::reinterpret_borrow<py::object>(c)));
    return;
  }
  t.unsupported(std::string("constant of type ") + Py_TYPE(c.ptr())->tp_name);
}

void load_global(Tracer& t, const Instruction& i) {
  // 3.11: the low bit asks for a NULL pushed before the global.
  std::string name = py::str(t.name_at(i.arg >> 1)).cast<std::string>();
  ValuePtr v = t.load_global(name);
  if (i.arg & 1) t.push(Value::null());
  t.push(v);
}

void load_deref(Tracer& t, const Instruction& i) {
  // Cells and free variables hold their content in the slot, or in the slot's Cell once captured.
  ValuePtr box = t.cell_of(i.arg);
  ValuePtr v = box ? box->self : t.load_local(i.arg);
  if (!v) t.unsupported("free variable '" + t.local_name(i.arg) + "' referenced before assignment");
  t.push(v);
}


void load_attr(Tracer& t, const Instruction& i) {
  ValuePtr obj = t.pop();
  t.push(t.load_attr(obj, py::str(t.name_at(i.arg)).cast<std::string>()));
}

void load_method(Tracer& t, const Instruction& i) {
  // Modelled as [NULL, bound callable]: CALL then sees a plain callable and `n` arguments.
  ValuePtr obj = t.pop();
  ValuePtr m = t.load_attr(obj, py::str(t.name_at(i.arg)).cast<std::string>());
  t.push(Value::null());
  t.push(m);
}

void store_subscr(Tracer& t, const Instruction&) {
  ValuePtr key = t.pop();
  ValuePtr container = t.pop();
  ValuePtr value = t.pop();
  if (t.dict_store(container, key, value)) return;
  if (container->kind == VKind::List && key->is_const() && PyLong_CheckExact(key->obj.ptr())) {
    // A list is one object wherever it is referenced: assign in place (a list from the frame is
    // written back after the graph).
    long n = static_cast<long>(container->items.size());
    long idx = key->obj.cast<long>();
    if (idx < 0) idx += n;
    if (idx < 0 || idx >= n) t.unsupported("list assignment index out of range (IndexError is raised by Python)");
    t.will_mutate(container);
    container->items[static_cast<size_t>(idx)] = value;
    return;
  }
  if (container->kind == VKind::List && key->is_const() && PySlice_Check(key->obj.ptr())) {
    // xs[a:b] = iterable: done by Python on a list of stand-in indices, which says where each item goes.
    std::vector<ValuePtr> repl = t.unpack_iterable(value);
    size_t n = container->items.size();
    py::list model;
    for (size_t k = 0; k < n; ++k) model.append(py::int_(k));
    py::list marks;
    for (size_t k = 0; k < repl.size(); ++k) marks.append(py::int_(-1 - static_cast<long>(k)));
    if (PyObject_SetItem(model.ptr(), key->obj.ptr(), marks.ptr()) < 0) {
      PyErr_Clear();
      t.unsupported("slice assignment on a list that Python would reject");
    }
    std::vector<ValuePtr> items;
    for (auto m : model) {
      long k = m.cast<long>();
      items.push_back(k >= 0 ? container->items[static_cast<size_t>(k)] : repl[static_cast<size_t>(-1 - k)]);
    }
    t.will_mutate(container);
    container->items = std::move(items);
    return;
  }
  if (!container->is_tensor()) t.unsupported("item assignment on " + container->describe());
  // operator.setitem returns None; the node is kept for its effect on the tensor.
  t.setitem(container, key, value);
}

void delete_subscr(Tracer& t, const Instruction&) {
  ValuePtr key = t.pop();
  ValuePtr container = t.pop();
  if (t.dict_delete(container, key)) return;
  if (container->kind == VKind::List && key->is_const() &&
      (PyLong_CheckExact(key->obj.ptr()) || PySlice_Check(key->obj.ptr()))) {
    // Done by Python on a list of stand-in indices: what is left says which items stay.
    py::list model;
    for (size_t k = 0; k < container->items.size(); ++k) model.append(py::int_(k));
    if (PyObject_DelItem(model.ptr(), key->obj.ptr()) < 0) {
      PyErr_Clear();
      t.unsupported("del of a list item that Python would reject (IndexError)");
    }
    std::vector<ValuePtr> items;
    for (auto m : model) items.push_back(container->items[m.cast<size_t>()]);
    t.will_mutate(container);
    container->items = std::move(items);
    return;
  }
  t.unsupported("del of an item of " + container->describe());
}

// obj.name = value on an object of the frame: recorded and replayed after the graph, in program order.
void store_attr(Tracer& t, const Instruction& i) {
  t.store_attr(t.peek(1), py::str(t.name_at(i.arg)).cast<std::string>(), t.peek(2));
  t.pop();
  t.pop();
}

// `global name; name = value`: recorded and replayed after the graph, in program order.
void store_global(Tracer& t, const Instruction& i) {
  if (t.trusted_globals())
    t.unsupported("assignment to a global of library code");
  if (!t.in_frame_module())
    t.unsupported("assignment to a global of another module (an inlined function's)");
  ValuePtr value = t.peek(1);
  if (value->kind == VKind::Iter || value->kind == VKind::Null || value->made_in_trace)
    t.unsupported("global assignment of " + value->describe());
  t.pop();
  t.attr_stores.push_back({nullptr, py::str(t.name_at(i.arg)).cast<std::string>(), value});
}

void pop_top(Tracer& t, const Instruction&) { t.pop(); }

void push_null(Tracer& t, const Instruction&) { t.push(Value::null()); }

void copy(Tracer& t, const Instruction& i) { t.push(t.peek(i.arg)); }

void swap(Tracer& t, const Instruction& i) { std::swap(t.peek(1), t.peek(i.arg)); }

}  // namespace

void register_load_store(HandlerTable& t) {
  auto on = [&](const char* name, Handler h) { on_opcode(t, name, h); };
  on("NOP", nop);
  on("RESUME", nop);
  on("MAKE_CELL", nop);
  on("COPY_FREE_VARS", nop);
  on("LOAD_FAST", load_fast);
  on("STORE_FAST", store_fast);
  on("DELETE_FAST", delete_fast);
  on("LOAD_CONST", load_const);
  on("LOAD_GLOBAL", load_global);
  on("LOAD_DEREF", load_deref);
  on("LOAD_ATTR", load_attr);
  on("LOAD_METHOD", load_method);
  on("STORE_SUBSCR", store_subscr);
  on("DELETE_SUBSCR", delete_subscr);
  on("STORE_ATTR", store_attr);
  on("STORE_GLOBAL", store_global);
  on("POP_TOP", pop_top);
  on("PUSH_NULL", push_null);
  on("COPY", copy);
  on("SWAP", swap);
}

}  // namespace cdynamo::interp
