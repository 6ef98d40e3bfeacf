// ops_call.cpp — owns handlers for the call protocol: PRECALL, CALL, KW_NAMES (3.11, 3.12), CALL_KW (3.13),
// CALL_FUNCTION_EX.
#include "bytecode/bytecode.h"
#include "interp/tracer.h"

namespace cdynamo::interp {

namespace {

using bytecode::Instruction;

// The callable below a call's arguments, from the two stack items there: 3.11/3.12 [NULL|callable,
// callable|self], 3.13 [callable, self|NULL]. A NULL on either side marks a plain callable (a callable is
// never NULL), so one rule reads both layouts; otherwise the first is the function and the second its self.
ValuePtr callee_of(const ValuePtr& first, const ValuePtr& second, std::vector<ValuePtr>& args) {
  if (first->kind == VKind::Null) return second;
  if (second->kind == VKind::Null) return first;
  args.insert(args.begin(), second);
  return first;
}

}  // namespace

struct Tracer::CallOps {
  static void precall(Tracer&, const Instruction&) {}

  static void kw_names(Tracer& t, const Instruction& i) { t.kw_names = py::reinterpret_borrow<py::object>(t.const_at(i.arg)); }

  static void call(Tracer& t, const Instruction& i) {
    size_t n = static_cast<size_t>(i.arg);
    std::vector<ValuePtr> args = t.popn(n);
    ValuePtr second = t.pop();
    ValuePtr first = t.pop();
    ValuePtr fn = callee_of(first, second, args);
    std::vector<std::pair<std::string, ValuePtr>> kwargs;
    if (t.kw_names) {
      py::tuple names = py::reinterpret_borrow<py::tuple>(t.kw_names);
      size_t nk = names.size();
      if (nk > args.size()) t.unsupported("bad KW_NAMES");
      size_t base = args.size() - nk;
      for (size_t k = 0; k < nk; ++k) kwargs.emplace_back(py::str(names[k]).cast<std::string>(), args[base + k]);
      args.resize(base);
      t.kw_names = py::object();
    }
    t.push(t.call(fn, std::move(args), std::move(kwargs)));
  }

  // CALL_KW n (3.13): [callable, self|NULL, args..., names]: the names tuple (a constant) is pushed last.
  static void call_kw(Tracer& t, const Instruction& i) {
    ValuePtr names = t.pop();
    if (!names->is_const() || !PyTuple_CheckExact(names->obj.ptr())) {
      // LOAD_CONST made a Tuple of constants; rebuild the names tuple from it.
      if (names->kind != VKind::Tuple) t.unsupported("CALL_KW with names " + names->describe());
      py::tuple tup(names->items.size());
      for (size_t k = 0; k < names->items.size(); ++k) {
        if (!names->items[k]->is_const()) t.unsupported("CALL_KW with a non-constant name");
        tup[k] = names->items[k]->obj;
      }
      t.kw_names = tup;
    } else {
      t.kw_names = names->obj;
    }
    call(t, i);
  }

  static void call_function_ex(Tracer& t, const Instruction& i) {
    ValuePtr kw = (i.arg & 1) ? t.pop() : nullptr;
    ValuePtr args = t.pop();
    // [NULL, callable] through 3.12, [callable, NULL] on 3.13.
    ValuePtr second = t.pop();
    ValuePtr first = t.pop();
    ValuePtr fn;
    if (first->kind == VKind::Null) fn = second;
    else if (second->kind == VKind::Null) fn = first;
    else t.unsupported("CALL_FUNCTION_EX without NULL");
    std::vector<std::pair<std::string, ValuePtr>> kwargs;
    if (kw) {
      if (kw->kind != VKind::Dict) t.unsupported("call with **" + kw->describe());
      for (size_t k = 0; k < kw->keys.size(); ++k) {
        if (!PyUnicode_Check(kw->keys[k].ptr())) t.unsupported("call with a non-string ** key");
        kwargs.emplace_back(py::str(kw->keys[k]).cast<std::string>(), kw->items[k]);
      }
    }
    if (args->kind == VKind::Const && PyTuple_Check(args->obj.ptr())) {  // *torch.Size, *(1, 2): constants
      std::vector<ValuePtr> items;
      for (auto item : py::reinterpret_borrow<py::tuple>(args->obj)) items.push_back(Value::constant(py::reinterpret_borrow<py::object>(item)));
      t.push(t.call(fn, std::move(items), std::move(kwargs)));
      return;
    }
    if (args->kind == VKind::Iter) {
      // f(*iterator) (a generator expression made in the trace): eager makes a tuple of what is left, consuming
      // the iterator before the call. If the call cannot be traced, the iterator is left as it was, so the
      // instruction can rerun as Python on it.
      IterOf& state = args->iter();
      size_t from = state.pos;
      std::vector<ValuePtr> items(state.items.begin() + static_cast<long>(from), state.items.end());
      state.pos = state.items.size();
      try {
        t.push(t.call(fn, std::move(items), std::move(kwargs)));
      } catch (...) {  // Unsupported, or a restart request that may not be honoured
        state.pos = from;
        throw;
      }
      return;
    }
    if (args->kind != VKind::Tuple && args->kind != VKind::List) t.unsupported("call with *args of " + args->describe());
    t.push(t.call(fn, args->items, std::move(kwargs)));
  }
};

void Tracer::register_call(HandlerTable& t) {
  auto on = [&](const char* name, Handler h) { on_opcode(t, name, h); };
  on("PRECALL", CallOps::precall);
  on("KW_NAMES", CallOps::kw_names);
  on("CALL", CallOps::call);
  on("CALL_KW", CallOps::call_kw);
  on("CALL_FUNCTION_EX", CallOps::call_function_ex);
}

}  // namespace cdynamo::interp
