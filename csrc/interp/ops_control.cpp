// ops_control.cpp — owns handlers for RETURN_VALUE, jumps on values known at trace time and TO_BOOL (3.13).
#include "bytecode/bytecode.h"
#include "interp/tracer.h"

namespace cdynamo::interp {

namespace {

using bytecode::Instruction;

constexpr int kMaxSteps = 200000;

}  // namespace

struct Tracer::ControlOps {
  static void return_value(Tracer& t, const Instruction&) {
    t.return_value = t.pop();
    t.stopped = true;
  }

  static void jump_to(Tracer& t, const Instruction& i) {
    if (!i.target) t.unsupported("jump without a target");
    if (++t.steps > kMaxSteps) {
      t.unsupported("trace too long (loop did not terminate within the step budget)");
    }
    t.pc = static_cast<size_t>(t.bc.index_of(i.target));
  }

  static void jump(Tracer& t, const Instruction& i) { jump_to(t, i); }

  // Truth value of a value known at trace time; tensors need run-time data.
  static bool truth(Tracer& t, const ValuePtr& v) {
    if (v->is_tensor()) t.unsupported("branch on a tensor's value (data-dependent control flow)");
    if (v->kind == VKind::Tuple || v->kind == VKind::List || v->kind == VKind::Dict) return !v->items.empty();
    if (v->kind == VKind::Set) return !v->keys.empty();  // lengths of containers from the frame are guarded
    if (v->kind == VKind::DictView) return !v->view_of().dict->keys.empty();
    if (v->is_sym()) {
      // A branch on sizes (`if x.shape[0] > 4`): the ShapeEnv guards the answer, as torch._dynamo does (a value
      // from tensor data has none at trace time: a graph break).
      return plain_number(v->sym().example).cast<bool>();
    }
    if (v->kind == VKind::Const || v->kind == VKind::Object) {
      int r = PyObject_IsTrue(v->obj.ptr());
      if (r < 0) throw py::error_already_set();
      return r == 1;
    }
    t.unsupported("truth value of " + v->describe());
  }

  static void pop_jump_if(Tracer& t, const Instruction& i, bool when) {
    ValuePtr v = t.pop();
    if (truth(t, v) == when) jump_to(t, i);
  }

  static void pop_jump_if_true(Tracer& t, const Instruction& i) { pop_jump_if(t, i, true); }

  static void pop_jump_if_false(Tracer& t, const Instruction& i) { pop_jump_if(t, i, false); }

  static void pop_jump_if_none(Tracer& t, const Instruction& i, bool when_none) {
    ValuePtr v = t.pop();
    bool is_none = v->kind == VKind::Const && v->obj.is_none();
    // Only a constant or an object can be None; tensors, containers, iterators and objects made in the trace never are.
    if (v->kind == VKind::Null || v->kind == VKind::Cell) t.unsupported("`is None` on " + v->describe());
    if (is_none == when_none) jump_to(t, i);
  }

  static void pop_jump_if_none_h(Tracer& t, const Instruction& i) { pop_jump_if_none(t, i, true); }

  static void pop_jump_if_not_none_h(Tracer& t, const Instruction& i) { pop_jump_if_none(t, i, false); }

  // True if the instruction after the current one is a truth jump (POP_JUMP_IF_TRUE / _FALSE), which computes
  // the truth value of what it pops itself.
  static bool next_is_truth_jump(const Tracer& t) {
    static const int if_true = bytecode::opcode_by_name("POP_JUMP_IF_TRUE");
    static const int if_false = bytecode::opcode_by_name("POP_JUMP_IF_FALSE");
    if (t.pc + 1 >= t.bc.insts.size()) return false;
    const int op = t.bc.insts[t.pc + 1]->opcode;
    return op >= 0 && (op == if_true || op == if_false);
  }

  // TO_BOOL (3.13): the compiler puts it before truth jumps and `not`. Before a jump the value stays as it is
  // (the jump takes its truth value, and a graph break there runs TO_BOOL again); before anything else a value
  // whose truth the trace knows becomes that bool, and any other stops the trace here, so that Python computes it.
  static void to_bool(Tracer& t, const Instruction&) {
    if (next_is_truth_jump(t)) return;
    ValuePtr v = t.peek(1);
    if (!v->is_constant_like()) t.unsupported("truth value of " + v->describe());
    const bool b = truth(t, v);
    t.pop();
    t.push(Value::constant(py::bool_(b)));
  }

  static void jump_if_or_pop(Tracer& t, const Instruction& i, bool when) {
    ValuePtr v = t.peek(1);
    if (truth(t, v) == when) {
      jump_to(t, i);
    } else {
      t.pop();
    }
  }

  static void jump_if_true_or_pop(Tracer& t, const Instruction& i) { jump_if_or_pop(t, i, true); }

  static void jump_if_false_or_pop(Tracer& t, const Instruction& i) { jump_if_or_pop(t, i, false); }
};

void Tracer::register_control(HandlerTable& t) {
  auto on = [&](const char* name, Handler h) { on_opcode(t, name, h); };
  on("RETURN_VALUE", ControlOps::return_value);
  on("TO_BOOL", ControlOps::to_bool);
  on("JUMP_FORWARD", ControlOps::jump);
  on("JUMP_BACKWARD", ControlOps::jump);
  on("JUMP_BACKWARD_NO_INTERRUPT", ControlOps::jump);
  on("POP_JUMP_IF_TRUE", ControlOps::pop_jump_if_true);  // 3.12 names (forward only)
  on("POP_JUMP_IF_FALSE", ControlOps::pop_jump_if_false);
  on("POP_JUMP_IF_NONE", ControlOps::pop_jump_if_none_h);
  on("POP_JUMP_IF_NOT_NONE", ControlOps::pop_jump_if_not_none_h);
  on("POP_JUMP_FORWARD_IF_TRUE", ControlOps::pop_jump_if_true);
  on("POP_JUMP_BACKWARD_IF_TRUE", ControlOps::pop_jump_if_true);
  on("POP_JUMP_FORWARD_IF_FALSE", ControlOps::pop_jump_if_false);
  on("POP_JUMP_BACKWARD_IF_FALSE", ControlOps::pop_jump_if_false);
  on("POP_JUMP_FORWARD_IF_NONE", ControlOps::pop_jump_if_none_h);
  on("POP_JUMP_BACKWARD_IF_NONE", ControlOps::pop_jump_if_none_h);
  on("POP_JUMP_FORWARD_IF_NOT_NONE", ControlOps::pop_jump_if_not_none_h);
  on("POP_JUMP_BACKWARD_IF_NOT_NONE", ControlOps::pop_jump_if_not_none_h);
  on("JUMP_IF_TRUE_OR_POP", ControlOps::jump_if_true_or_pop);
  on("JUMP_IF_FALSE_OR_POP", ControlOps::jump_if_false_or_pop);
}

}  // namespace cdynamo::interp
