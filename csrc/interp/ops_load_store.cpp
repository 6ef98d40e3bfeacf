// ops_load_store.cpp — owns handlers for loads, stores, attribute access and stack shuffling opcodes.
#include "bytecode/bytecode.h"
#include "compat/compat.h"
#include "compat/opargs.h"
#include "interp/tracer.h"

namespace cdynamo::interp {

namespace {

using bytecode::Instruction;

}  // namespace

struct Tracer::LoadStoreOps {
  static void nop(Tracer&, const Instruction&) {}

  static void load_fast(Tracer& t, const Instruction& i) {
    // 3.13 compiles LOAD_CLOSURE to a LOAD_FAST of the cell or free slot (plain reads of those are LOAD_DEREF).
    if (!compat::opargs::kHasLoadClosure &&
        (compat::code_localsplus_kind(t.code, i.arg) & (compat::kFastCell | compat::kFastFree))) {
      push_closure_cell(t, i.arg);
      return;
    }
    ValuePtr v = t.load_local(i.arg);
    if (!v) t.unsupported("local variable '" + t.local_name(i.arg) + "' referenced before assignment");
    t.push(v);
  }

  // LOAD_FAST_AND_CLEAR (3.12, PEP 709 inlined comprehensions): saves the local (NULL when unbound) and
  // unbinds it; a STORE_FAST of the saved NULL unbinds it again afterwards.
  static void load_fast_and_clear(Tracer& t, const Instruction& i) {
    ValuePtr v = t.load_local(i.arg);
    t.push(v ? v : Value::null());
    t.locals[i.arg] = nullptr;
    t.local_loaded[i.arg] = 1;
  }

  static void store_fast_slot(Tracer& t, int slot) {
    ValuePtr v = t.pop();
    t.locals[slot] = v->kind == VKind::Null ? nullptr : v;
    t.local_loaded[slot] = 1;
  }

  static void store_fast(Tracer& t, const Instruction& i) { store_fast_slot(t, i.arg); }

  static void load_fast_slot(Tracer& t, int slot) {
    ValuePtr v = t.load_local(slot);
    if (!v) t.unsupported("local variable '" + t.local_name(slot) + "' referenced before assignment");
    t.push(v);
  }

  // 3.13's paired forms: two slots in one oparg (compat/opargs.h), the first one handled first.
  static void load_fast_load_fast(Tracer& t, const Instruction& i) {
    load_fast_slot(t, compat::opargs::first_fast(i.arg));
    load_fast_slot(t, compat::opargs::second_fast(i.arg));
  }

  static void store_fast_store_fast(Tracer& t, const Instruction& i) {
    store_fast_slot(t, compat::opargs::first_fast(i.arg));
    store_fast_slot(t, compat::opargs::second_fast(i.arg));
  }

  static void store_fast_load_fast(Tracer& t, const Instruction& i) {
    store_fast_slot(t, compat::opargs::first_fast(i.arg));
    load_fast_slot(t, compat::opargs::second_fast(i.arg));
  }

  static void delete_fast(Tracer& t, const Instruction& i) {
    // `del` of an unbound local raises UnboundLocalError: left to Python.
    if (!t.local_bound(i.arg)) t.unsupported("del of local variable '" + t.local_name(i.arg) + "' that is not bound");
    t.locals[i.arg] = nullptr;
    t.local_loaded[i.arg] = 1;
  }

  // A tuple constant of the code object (possibly nested) as a Tuple of constants.
  static ValuePtr constant_tuple(Tracer& t, py::handle c) {
    std::vector<ValuePtr> items;
    for (auto item : py::reinterpret_borrow<py::tuple>(c)) {
      if (PyTuple_CheckExact(item.ptr())) items.push_back(constant_tuple(t, item));
      else if (is_constant_object(item)) items.push_back(Value::constant(py::reinterpret_borrow<py::object>(item)));
      else t.unsupported(std::string("constant tuple holding ") + Py_TYPE(item.ptr())->tp_name);
    }
    return Value::tuple(std::move(items));
  }

  static void load_const(Tracer& t, const Instruction& i) {
    py::handle c = t.const_at(i.arg);
    if (is_constant_object(c)) {
      t.push(Value::constant(py::reinterpret_borrow<py::object>(c)));
      return;
    }
    if (PyTuple_CheckExact(c.ptr())) {
      t.push(constant_tuple(t, c));
      return;
    }
    if (py::isinstance(c, PyRefs::get().functools_partial)) {  // a continuation's prologue: what makes a torch context
      t.push(Value::object(py::reinterpret_borrow<py::object>(c)));
      return;
    }
    if (PyCode_Check(c.ptr())) {  // for MAKE_FUNCTION
      t.push(Value::object(py::reinterpret_borrow<py::object>(c)));
      return;
    }
    t.unsupported(std::string("constant of type ") + Py_TYPE(c.ptr())->tp_name);
  }

  // RETURN_CONST (3.12): LOAD_CONST; RETURN_VALUE.
  static void return_const(Tracer& t, const Instruction& i) {
    load_const(t, i);
    t.return_value = t.pop();
    t.stopped = true;
  }

  static void load_global(Tracer& t, const Instruction& i) {
    std::string name = py::str(t.name_at(compat::opargs::load_global_name(i.arg))).cast<std::string>();
    ValuePtr v = t.load_global(name);
    // The NULL goes on the side of the callable this Python's CALL expects (below it through 3.12, above on 3.13).
    const bool null = compat::opargs::load_global_null(i.arg);
    if (null && compat::opargs::kNullBeforeCallable) t.push(Value::null());
    t.push(v);
    if (null && !compat::opargs::kNullBeforeCallable) t.push(Value::null());
  }

  static void load_deref(Tracer& t, const Instruction& i) {
    // Cells and free variables hold their content in the slot, or in the slot's Cell once captured.
    ValuePtr box = t.cell_of(i.arg);
    ValuePtr v = box ? box->cell().content : t.load_local(i.arg);
    if (!v) t.unsupported("free variable '" + t.local_name(i.arg) + "' referenced before assignment");
    t.push(v);
  }

  // The method form (3.11 LOAD_METHOD, 3.12+ LOAD_ATTR with its method bit) is modelled as a bound callable
  // with a NULL on the side this Python's CALL expects ([NULL, bound] through 3.12, [bound, NULL] on 3.13):
  // CALL then sees a plain callable and `n` arguments.
  static void push_attr(Tracer& t, const ValuePtr& obj, int name, bool method) {
    ValuePtr v = t.load_attr(obj, py::str(t.name_at(name)).cast<std::string>());
    if (method && compat::opargs::kNullBeforeCallable) t.push(Value::null());
    t.push(v);
    if (method && !compat::opargs::kNullBeforeCallable) t.push(Value::null());
  }

  static void load_attr(Tracer& t, const Instruction& i) {
    ValuePtr obj = t.pop();
    push_attr(t, obj, compat::opargs::load_attr_name(i.arg), compat::opargs::load_attr_method(i.arg));
  }

  static void load_method(Tracer& t, const Instruction& i) {
    ValuePtr obj = t.pop();
    push_attr(t, obj, i.arg, true);
  }

  // LOAD_SUPER_ATTR (3.12): [super, class, self] -> super(class, self).name (method form when asked). Both
  // the zero-argument and the two-argument forms call super with the class and self on the stack.
  static void load_super_attr(Tracer& t, const Instruction& i) {
    ValuePtr self = t.pop();
    ValuePtr cls = t.pop();
    ValuePtr super_fn = t.pop();
    ValuePtr proxy = t.call(super_fn, {cls, self}, {});
    push_attr(t, proxy, compat::opargs::load_super_attr_name(i.arg), compat::opargs::load_super_attr_method(i.arg));
  }

  static void store_subscr(Tracer& t, const Instruction&) {
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

  // STORE_SLICE (3.12): container[start:stop] = value with constant bounds, as BUILD_SLICE 2; STORE_SUBSCR.
  static void store_slice(Tracer& t, const Instruction& i) {
    ValuePtr stop = t.pop();
    ValuePtr start = t.pop();
    ValuePtr container = t.pop();
    t.push(container);
    t.push(slice_of(t, start, stop));
    store_subscr(t, i);
  }

  static void delete_subscr(Tracer& t, const Instruction&) {
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
  static void store_attr(Tracer& t, const Instruction& i) {
    t.store_attr(t.peek(1), py::str(t.name_at(i.arg)).cast<std::string>(), t.peek(2));
    t.pop();
    t.pop();
  }

  // `del obj.name`: on an object made in the trace only (its attributes are the trace's to change).
  static void delete_attr(Tracer& t, const Instruction& i) {
    if (t.peek(1)->kind != VKind::Instance) t.unsupported("del of an attribute of " + t.peek(1)->describe());
    t.instance_delattr(t.peek(1), py::str(t.name_at(i.arg)).cast<std::string>());
    t.pop();
  }

  // `global name; name = value`: recorded and replayed after the graph, in program order.
  static void store_global(Tracer& t, const Instruction& i) {
    if (t.trusted_globals())
      t.unsupported("assignment to a global of library code");
    if (!t.in_frame_module())
      t.unsupported("assignment to a global of another module (an inlined function's)");
    ValuePtr value = t.peek(1);
    if (value->kind == VKind::Iter || value->kind == VKind::Null || value->made_in_trace())
      t.unsupported("global assignment of " + value->describe());
    t.pop();
    t.attr_stores.push_back({nullptr, py::str(t.name_at(i.arg)).cast<std::string>(), value});
  }

  static void pop_top(Tracer& t, const Instruction&) { t.pop(); }

  static void push_null(Tracer& t, const Instruction&) { t.push(Value::null()); }

  static void copy(Tracer& t, const Instruction& i) { t.push(t.peek(i.arg)); }

  static void swap(Tracer& t, const Instruction& i) { std::swap(t.peek(1), t.peek(i.arg)); }
};

void Tracer::register_load_store(HandlerTable& t) {
  auto on = [&](const char* name, Handler h) { on_opcode(t, name, h); };
  on("NOP", LoadStoreOps::nop);
  on("RESUME", LoadStoreOps::nop);
  on("MAKE_CELL", LoadStoreOps::nop);
  on("COPY_FREE_VARS", LoadStoreOps::nop);
  on("LOAD_FAST", LoadStoreOps::load_fast);
  on("LOAD_FAST_CHECK", LoadStoreOps::load_fast);
  on("LOAD_FAST_AND_CLEAR", LoadStoreOps::load_fast_and_clear);
  on("RETURN_CONST", LoadStoreOps::return_const);
  on("LOAD_SUPER_ATTR", LoadStoreOps::load_super_attr);
  on("STORE_FAST", LoadStoreOps::store_fast);
  on("LOAD_FAST_LOAD_FAST", LoadStoreOps::load_fast_load_fast);
  on("STORE_FAST_STORE_FAST", LoadStoreOps::store_fast_store_fast);
  on("STORE_FAST_LOAD_FAST", LoadStoreOps::store_fast_load_fast);
  on("DELETE_FAST", LoadStoreOps::delete_fast);
  on("LOAD_CONST", LoadStoreOps::load_const);
  on("LOAD_GLOBAL", LoadStoreOps::load_global);
  on("LOAD_DEREF", LoadStoreOps::load_deref);
  on("LOAD_ATTR", LoadStoreOps::load_attr);
  on("LOAD_METHOD", LoadStoreOps::load_method);
  on("STORE_SUBSCR", LoadStoreOps::store_subscr);
  on("STORE_SLICE", LoadStoreOps::store_slice);
  on("DELETE_SUBSCR", LoadStoreOps::delete_subscr);
  on("STORE_ATTR", LoadStoreOps::store_attr);
  on("DELETE_ATTR", LoadStoreOps::delete_attr);
  on("STORE_GLOBAL", LoadStoreOps::store_global);
  on("POP_TOP", LoadStoreOps::pop_top);
  on("PUSH_NULL", LoadStoreOps::push_null);
  on("COPY", LoadStoreOps::copy);
  on("SWAP", LoadStoreOps::swap);
}

}  // namespace cdynamo::interp
