// ops_arith.cpp — owns handlers for BINARY_OP, COMPARE_OP, unary operators, subscripts, IS_OP, CONTAINS_OP.
#include "bytecode/bytecode.h"
#include "compat/opargs.h"
#include "interp/tracer.h"

namespace cdynamo::interp {

namespace {

using bytecode::Instruction;

py::object op_fn(const char* name) { return PyRefs::get().operator_mod.attr(name); }

bool user_operand(const ValuePtr& v, const std::string& dunder) {
  if (v->kind != VKind::Instance && v->kind != VKind::Object) return false;
  PyObject* f = user_class_attr(v, dunder.c_str());  // borrowed
  return f && PyFunction_Check(f);
}

bool not_implemented(const ValuePtr& r) { return r && r->is_const() && r->obj.ptr() == Py_NotImplemented; }

bool same_identity(const ValuePtr& a, const ValuePtr& b, bool* known) {
  *known = true;
  if (a == b) return true;
  bool a_obj = a->kind == VKind::Const || a->kind == VKind::Object;
  bool b_obj = b->kind == VKind::Const || b->kind == VKind::Object;
  if (a_obj && b_obj) return a->obj.ptr() == b->obj.ptr();
  // A tensor (or container built in the trace) is never None / a constant.
  if ((a->is_tensor() && b_obj) || (b->is_tensor() && a_obj)) return false;
  // An object made in the trace is none that existed before it, and no other value of the trace.
  auto fresh = [](const ValuePtr& v) { return v->kind == VKind::Instance || v->kind == VKind::Record; };
  if ((fresh(a) && (b_obj || fresh(b) || b->is_tensor())) || (fresh(b) && (a_obj || a->is_tensor()))) return false;
  if (a->is_tensor() && b->is_tensor()) {
    if (a->tensor().node == b->tensor().node) return true;
  }
  *known = false;
  return false;
}

}  // namespace

struct Tracer::ArithOps {
  // `a <op> b` where an operand is a user object whose class defines the operator in Python (a Variable of a
  // tape-based autograd): the dunder inlined, as Python dispatches it (in-place form first, then the plain one;
  // the reflected form of the right operand when the left has none or answers NotImplemented). nullptr when no
  // operand is such an object.
  static ValuePtr user_binary(Tracer& t, const std::string& name, const ValuePtr& a, const ValuePtr& b) {
    bool inplace = name.size() > 1 && name[0] == 'i' && name != "is_";
    std::string base = inplace ? name.substr(1) : name;
    if (!base.empty() && base.back() == '_') base.pop_back();  // and_, or_
    const std::string plain = "__" + base + "__", reflected = "__r" + base + "__", in_place = "__i" + base + "__";
    bool left = (inplace && user_operand(a, in_place)) || user_operand(a, plain);
    bool right = user_operand(b, reflected);
    if (!left && !right) return nullptr;
    if (left && right) {
      // Python asks the right operand first when its class is a proper subclass of the left's: not modelled.
      PyObject* ta = a->kind == VKind::Instance ? a->instance().cls->obj.ptr() : reinterpret_cast<PyObject*>(Py_TYPE(a->obj.ptr()));
      PyObject* tb = b->kind == VKind::Instance ? b->instance().cls->obj.ptr() : reinterpret_cast<PyObject*>(Py_TYPE(b->obj.ptr()));
      int sub = ta != tb ? PyObject_IsSubclass(tb, ta) : 0;
      if (sub < 0) throw py::error_already_set();
      if (sub) t.unsupported("operator " + base + " with a right operand of a subclass of the left's class");
    }
    if (left) {
      ValuePtr r;
      if (inplace && user_operand(a, in_place)) r = t.call_user_dunder(a, in_place.c_str(), {b});
      if (!r || not_implemented(r)) r = user_operand(a, plain) ? t.call_user_dunder(a, plain.c_str(), {b}) : nullptr;
      if (r && !not_implemented(r)) return r;
    } else if (a->kind == VKind::Instance || a->kind == VKind::Object || a->is_tensor()) {
      // The left operand's own operator (a builtin type's, a tensor's) would run first: not modelled.
      t.unsupported("operator " + base + " between " + a->describe() + " and " + b->describe());
    }
    if (right) {
      ValuePtr r = t.call_user_dunder(b, reflected.c_str(), {a});
      if (r && !not_implemented(r)) return r;
    }
    t.unsupported("operator " + base + " between " + a->describe() + " and " + b->describe() + " returned NotImplemented");
  }

  static void binary_op(Tracer& t, const Instruction& i) {
    // BINARY_OP's argument order is the NB_* order of 3.11 (opcode._nb_ops).
    static const char* names[] = {"add",      "and_",     "floordiv", "lshift",  "matmul",  "mul",      "mod",
                                  "or_",      "pow",      "rshift",   "sub",     "truediv", "xor",      "iadd",
                                  "iand",     "ifloordiv", "ilshift", "imatmul", "imul",    "imod",     "ior",
                                  "ipow",     "irshift",  "isub",     "itruediv", "ixor"};
    if (i.arg < 0 || i.arg >= static_cast<int>(sizeof(names) / sizeof(names[0])))
      t.unsupported("BINARY_OP " + std::to_string(i.arg));
    ValuePtr b = t.pop();
    ValuePtr a = t.pop();
    // In-place operators on immutable constants behave like the plain operator (`n = 0; n += tensor` is
    // `0 + tensor`; an in-place node with a literal target is not even valid FX code).
    constexpr int kFirstInplace = 13;  // names[13 + k] is the in-place form of names[k]
    int op = i.arg >= kFirstInplace && a->is_const() ? i.arg - kFirstInplace : i.arg;
    if (ValuePtr r = user_binary(t, names[op], a, b)) {
      t.push(r);
      return;
    }
    t.push(t.apply_operator(op_fn(names[op]), {a, b}));
  }

  static void compare_op(Tracer& t, const Instruction& i) {
    static const char* names[] = {"lt", "le", "eq", "ne", "gt", "ge"};
    const int op = compat::opargs::compare_op(i.arg);
    if (op < 0 || op > 5) t.unsupported("COMPARE_OP " + std::to_string(i.arg));
    ValuePtr b = t.pop();
    ValuePtr a = t.pop();
    ValuePtr r = t.apply_operator(op_fn(names[op]), {a, b});
    if (compat::opargs::compare_op_to_bool(i.arg)) {
      // 3.13 folds TO_BOOL into a comparison that feeds a condition. Before a truth jump the result stays as it
      // is (the jump takes its truth value); otherwise a constant becomes its bool and anything else (a
      // tensor) stops the trace here, so that Python compares and converts.
      static const int if_true = bytecode::opcode_by_name("POP_JUMP_IF_TRUE");
      static const int if_false = bytecode::opcode_by_name("POP_JUMP_IF_FALSE");
      const int next = t.pc + 1 < t.bc.insts.size() ? t.bc.insts[t.pc + 1]->opcode : -1;
      if (next < 0 || (next != if_true && next != if_false)) {
        if (!r->is_const()) t.unsupported("truth value of the comparison " + r->describe());
        int truth = PyObject_IsTrue(r->obj.ptr());
        if (truth < 0) throw py::error_already_set();
        r = Value::constant(py::bool_(truth == 1));
      }
    }
    t.push(r);
  }

  static void unary(Tracer& t, const char* name) {
    ValuePtr a = t.pop();
    t.push(t.apply_operator(op_fn(name), {a}));
  }

  static void unary_negative(Tracer& t, const Instruction&) { unary(t, "neg"); }

  static void unary_positive(Tracer& t, const Instruction&) { unary(t, "pos"); }

  static void unary_invert(Tracer& t, const Instruction&) { unary(t, "invert"); }

  static void unary_not(Tracer& t, const Instruction&) {
    ValuePtr a = t.pop();
    if (!a->is_constant_like()) t.unsupported("`not` on " + a->describe() + " (needs its truth value)");
    t.push(t.apply_operator(op_fn("not_"), {a}));
  }

  static void binary_subscr(Tracer& t, const Instruction&) {
    ValuePtr key = t.pop();
    ValuePtr container = t.pop();
    if (container->kind == VKind::Record) {
      t.push(t.record_item(container, key));
      return;
    }
    if (t.dict_subscr(container, key)) return;
    if (ValuePtr child = t.module_item(container, key)) {
      t.push(child);
      return;
    }
    if (ValuePtr item = t.tensor_keyed_item(container, key)) {  // optimizer.cpp
      t.push(item);
      return;
    }
    if ((container->kind == VKind::Tuple || container->kind == VKind::List) && key->is_const()) {
      py::handle k = key->obj;
      if (PyLong_Check(k.ptr()) && !PyBool_Check(k.ptr())) {
        long n = static_cast<long>(container->items.size());
        long idx = PyLong_AsLong(k.ptr());
        if (idx < 0) idx += n;
        if (idx < 0 || idx >= n) t.unsupported("index out of range");
        t.push(container->items[idx]);
        return;
      }
      if (PySlice_Check(k.ptr())) {
        Py_ssize_t start, stop, step, len;
        if (PySlice_Unpack(k.ptr(), &start, &stop, &step) < 0) throw py::error_already_set();
        len = PySlice_AdjustIndices(static_cast<Py_ssize_t>(container->items.size()), &start, &stop, step);
        std::vector<ValuePtr> items;
        for (Py_ssize_t j = 0; j < len; ++j) items.push_back(container->items[start + j * step]);
        t.push(container->kind == VKind::Tuple ? Value::tuple(std::move(items)) : Value::list(std::move(items)));
        return;
      }
      t.unsupported("subscript of a sequence with " + key->describe());
    }
    if (ValuePtr r = t.call_user_dunder(container, "__getitem__", {key})) {
      t.push(r);
      return;
    }
    t.push(t.apply_operator(op_fn("getitem"), {container, key}));
  }

  // BINARY_SLICE (3.12): container[start:stop] with constant bounds, as BUILD_SLICE 2; BINARY_SUBSCR.
  static void binary_slice(Tracer& t, const Instruction& i) {
    ValuePtr stop = t.pop();
    ValuePtr start = t.pop();
    t.push(slice_of(t, start, stop));
    binary_subscr(t, i);
  }

  // CALL_INTRINSIC_1 (3.12): the intrinsics ordinary code uses in expressions.
  static void call_intrinsic_1(Tracer& t, const Instruction& i) {
    if (i.arg == compat::opargs::kIntrinsicUnaryPositive) {
      unary(t, "pos");
      return;
    }
    if (i.arg == compat::opargs::kIntrinsicListToTuple) {
      ValuePtr l = t.pop();
      if (l->kind != VKind::List) t.unsupported("list-to-tuple on " + l->describe());
      t.push(Value::tuple(l->items));
      return;
    }
    t.unsupported("CALL_INTRINSIC_1 " + std::to_string(i.arg));
  }

  static void is_op(Tracer& t, const Instruction& i) {
    ValuePtr b = t.pop();
    ValuePtr a = t.pop();
    bool known = false;
    bool same = same_identity(a, b, &known);
    if (!known) t.unsupported("`is` between " + a->describe() + " and " + b->describe());
    t.push(Value::constant(py::bool_(i.arg ? !same : same)));
  }

  static void contains_op(Tracer& t, const Instruction& i) {
    ValuePtr container = t.pop();
    ValuePtr item = t.pop();
    if (container->kind == VKind::Dict) {
      bool in = t.dict_contains(container, item)->obj.cast<bool>();
      t.push(Value::constant(py::bool_(i.arg ? !in : in)));
      return;
    }
    if (container->kind == VKind::DictView) {
      bool in = false;
      if (container->view_of().part == ViewPart::Keys) {
        in = t.dict_contains(container->view_of().dict, item)->obj.cast<bool>();
      } else {
        // values: each value compared with `item` (identity, then ==); items: the key looked up, then its value
        // compared. Only constants are compared with == at trace time (a tensor's == needs its data).
        const Value& d = *container->view_of().dict;
        auto equal = [&](const ValuePtr& stored, const ValuePtr& probe) {
          if (stored == probe) return true;
          if (!stored->is_constant_like() || !probe->is_constant_like())
            t.unsupported("`in` on a dict view comparing " + probe->describe() + " with " + stored->describe());
          int r = PyObject_RichCompareBool(stored->as_python().ptr(), probe->as_python().ptr(), Py_EQ);
          if (r < 0) throw py::error_already_set();
          return r == 1;
        };
        if (container->view_of().part == ViewPart::Values) {
          for (const auto& v : d.items)
            if ((in = equal(v, item))) break;
        } else {
          std::vector<ValuePtr> pair;
          if (item->kind == VKind::Tuple || (item->is_const() && PyTuple_Check(item->obj.ptr()))) pair = t.unpack_iterable(item);
          if (pair.size() == 2) {
            ValuePtr found = t.dict_contains(container->view_of().dict, pair[0]);
            if (found->obj.cast<bool>()) in = equal(d.items[static_cast<size_t>(d.find_key(pair[0]->as_python()))], pair[1]);
          } else if (!item->is_constant_like()) {
            t.unsupported("`in` on dict items with " + item->describe());
          }
        }
      }
      t.push(Value::constant(py::bool_(i.arg ? !in : in)));
      return;
    }
    if (container->kind == VKind::Set) {
      bool tensor = item->is_tensor() && item->tensor().example;  // by identity: its example (Trace::tensor_keys)
      if (!item->is_const() && !tensor) t.unsupported("`in` on a set with " + item->describe());
      bool in = container->find_key(tensor ? item->tensor().example : item->obj) >= 0;
      t.push(Value::constant(py::bool_(i.arg ? !in : in)));
      return;
    }
    if ((container->kind == VKind::List || container->kind == VKind::Tuple) && !container->is_constant_like()) {
      // Identity first, then ==, as Python's sequence `in` does; a tensor's == would need its data.
      bool in = false;
      for (const auto& x : container->items) {
        if (x == item || (x->is_tensor() && item->is_tensor() && x->tensor().node == item->tensor().node)) {
          in = true;
          break;
        }
        if (!(x->is_constant_like() && item->is_constant_like()) &&
            !(x->kind == VKind::Object && item->kind == VKind::Object))
          t.unsupported("`in` comparing " + item->describe() + " with " + x->describe());
        if (x->kind == VKind::Object) {
          if (x->obj.is(item->obj)) {
            in = true;
            break;
          }
          // Objects whose classes keep object's == (classes of plain metaclasses, e.g. `type(p) in [Tensor, Parameter]`)
          // compare by identity: not equal.
          richcmpfunc base_cmp = PyBaseObject_Type.tp_richcompare;
          if (Py_TYPE(x->obj.ptr())->tp_richcompare == base_cmp && Py_TYPE(item->obj.ptr())->tp_richcompare == base_cmp) {
            t.realize(x);
            t.realize(item);
            continue;
          }
          t.unsupported("`in` comparing objects by ==");
        }
        int r = PyObject_RichCompareBool(x->as_python().ptr(), item->as_python().ptr(), Py_EQ);
        if (r < 0) throw py::error_already_set();
        if (r == 1) {
          in = true;
          break;
        }
      }
      t.push(Value::constant(py::bool_(i.arg ? !in : in)));
      return;
    }
    if (ValuePtr r = t.tensor_key_in(container, item)) {  // optimizer.cpp
      bool in = r->obj.cast<bool>();
      t.push(Value::constant(py::bool_(i.arg ? !in : in)));
      return;
    }
    if (ValuePtr r = t.call_user_dunder(container, "__contains__", {item})) {
      // `in` takes the truth of what __contains__ returns.
      if (!r->is_const()) t.unsupported("`in` whose __contains__ returned " + r->describe());
      int b = PyObject_IsTrue(r->obj.ptr());
      if (b < 0) throw py::error_already_set();
      t.push(Value::constant(py::bool_(i.arg ? b == 0 : b == 1)));
      return;
    }
    if (!container->is_constant_like() || !item->is_constant_like())
      t.unsupported("`in` on " + container->describe());
    int r = PySequence_Contains(container->as_python().ptr(), item->as_python().ptr());
    if (r < 0) throw py::error_already_set();
    t.push(Value::constant(py::bool_(i.arg ? r == 0 : r == 1)));
  }
};

void Tracer::register_arith(HandlerTable& t) {
  auto on = [&](const char* name, Handler h) { on_opcode(t, name, h); };
  on("BINARY_OP", ArithOps::binary_op);
  on("COMPARE_OP", ArithOps::compare_op);
  on("BINARY_SLICE", ArithOps::binary_slice);
  on("CALL_INTRINSIC_1", ArithOps::call_intrinsic_1);
  on("UNARY_NEGATIVE", ArithOps::unary_negative);
  on("UNARY_POSITIVE", ArithOps::unary_positive);
  on("UNARY_INVERT", ArithOps::unary_invert);
  on("UNARY_NOT", ArithOps::unary_not);
  on("BINARY_SUBSCR", ArithOps::binary_subscr);
  on("IS_OP", ArithOps::is_op);
  on("CONTAINS_OP", ArithOps::contains_op);
}

}  // namespace cdynamo::interp
