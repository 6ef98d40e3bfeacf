// emitter.cpp — owns instruction emission, pool management and code-object finishing for codegen.
#include "codegen/emitter.h"

#include "interp/services.h"

#include <algorithm>

#include <stdexcept>

#include "compat/compat.h"
#include "compat/opargs.h"
#include "interp/tracer.h"

namespace cdynamo::codegen {

Emitter::Emitter(PyCodeObject* code) : code_(code) {
  names_ = py::list(py::reinterpret_borrow<py::tuple>(code->co_names));
  consts_ = py::list(py::reinterpret_borrow<py::tuple>(code->co_consts));
  varnames_ = py::list(py::handle(reinterpret_cast<PyObject*>(code)).attr("co_varnames"));
  pos_.line = code->co_firstlineno;
  pos_.end_line = code->co_firstlineno;
}

int Emitter::name_index(const std::string& name) {
  for (size_t i = 0; i < names_.size(); ++i)
    if (py::str(names_[i]).cast<std::string>() == name) return static_cast<int>(i);
  names_.append(py::str(name));
  return static_cast<int>(names_.size() - 1);
}

int Emitter::const_index(py::handle value) {
  for (size_t i = 0; i < consts_.size(); ++i) {
    py::handle c = consts_[i];
    if (c.ptr() == value.ptr()) return static_cast<int>(i);
  }
  consts_.append(value);
  return static_cast<int>(consts_.size() - 1);
}

bytecode::Instruction* Emitter::emit(const char* opname, int arg) {
  int op = bytecode::opcode_by_name(opname);
  if (op < 0) throw std::runtime_error(std::string("unknown opcode ") + opname);
  bytecode::Instruction* i = bc.append(op, arg);
  i->pos = pos_;
  return i;
}

void Emitter::null_before_callable() {
  if (compat::opargs::kNullBeforeCallable) push_null();
}

void Emitter::null_after_callable() {
  if (!compat::opargs::kNullBeforeCallable) push_null();
}

void Emitter::load_closure(int slot) {
  if (compat::opargs::kHasLoadClosure) {
    emit("LOAD_CLOSURE", slot);
    return;
  }
  closure_loads_.push_back(emit("LOAD_FAST", slot));
}

void Emitter::load_callable(py::handle fn) {
  null_before_callable();
  load_const(fn);
  null_after_callable();
}

std::vector<std::pair<int, int>> Emitter::make_function_sequence(bool closure) {
  std::vector<std::pair<int, int>> seq;
  if (compat::opargs::kMakeFunctionFlags) {
    seq.emplace_back(bytecode::opcode_by_name("MAKE_FUNCTION"), closure ? 0x08 : 0);
  } else {
    seq.emplace_back(bytecode::opcode_by_name("MAKE_FUNCTION"), 0);
    if (closure) seq.emplace_back(bytecode::opcode_by_name("SET_FUNCTION_ATTRIBUTE"), 0x08);
  }
  return seq;
}

void Emitter::make_function(bool closure) {
  for (const auto& [op, arg] : make_function_sequence(closure)) bc.append(op, arg)->pos = pos_;
}

void Emitter::load_global(const std::string& name, bool push_null) {
  emit("LOAD_GLOBAL", compat::opargs::load_global_arg(name_index(name), push_null));
}

void Emitter::load_attr(const std::string& name) {
  emit("LOAD_ATTR", compat::opargs::load_attr_arg(name_index(name), false));
}

void Emitter::load_method(const std::string& name) {
  if (compat::opargs::kHasLoadMethod) emit("LOAD_METHOD", name_index(name));
  else emit("LOAD_ATTR", compat::opargs::load_attr_arg(name_index(name), true));
}

std::vector<std::pair<int, int>> Emitter::call_sequence(int n, int kw_names_const) {
  std::vector<std::pair<int, int>> seq;
  if (compat::opargs::kHasCallKw && kw_names_const >= 0) {  // 3.13: the names tuple on the stack, CALL_KW
    seq.emplace_back(bytecode::opcode_by_name("LOAD_CONST"), kw_names_const);
    seq.emplace_back(bytecode::opcode_by_name("CALL_KW"), n);
    return seq;
  }
  if (kw_names_const >= 0) seq.emplace_back(bytecode::opcode_by_name("KW_NAMES"), kw_names_const);
  if (compat::opargs::kHasPrecall) seq.emplace_back(bytecode::opcode_by_name("PRECALL"), n);
  seq.emplace_back(bytecode::opcode_by_name("CALL"), n);
  return seq;
}

void Emitter::call(int n, int kw_names_const) {
  for (const auto& [op, arg] : call_sequence(n, kw_names_const)) bc.append(op, arg)->pos = pos_;
}

std::optional<Emitter::Jump> Emitter::pop_jump_kind(int opcode) {
  const std::string name = bytecode::opname(opcode);
  if (name.rfind("POP_JUMP_", 0) != 0) return std::nullopt;
  auto ends = [&](const char* s) {
    std::string suffix(s);
    return name.size() >= suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  if (ends("_IF_NOT_NONE")) return Jump::IfNotNone;
  if (ends("_IF_NONE")) return Jump::IfNone;
  if (ends("_IF_TRUE")) return Jump::IfTrue;
  if (ends("_IF_FALSE")) return Jump::IfFalse;
  return std::nullopt;
}

bytecode::Instruction* Emitter::pop_jump_forward(Jump kind) {
  const bool forward_names = bytecode::opcode_by_name("POP_JUMP_FORWARD_IF_TRUE") >= 0;  // 3.11
  const char* base = kind == Jump::IfTrue ? "IF_TRUE" : kind == Jump::IfFalse ? "IF_FALSE"
                     : kind == Jump::IfNone ? "IF_NONE" : "IF_NOT_NONE";
  std::string name = std::string(forward_names ? "POP_JUMP_FORWARD_" : "POP_JUMP_") + base;
  // 3.13's truth jumps take an exact bool: TO_BOOL first (as the compiler emits it).
  if (compat::opargs::kJumpNeedsBool && (kind == Jump::IfTrue || kind == Jump::IfFalse)) emit("TO_BOOL");
  return emit(name.c_str(), 0);
}

size_t Emitter::copy_prefix(const bytecode::Bytecode& original) {
  int resume = bytecode::opcode_by_name("RESUME");
  size_t n = 0;
  for (const auto& inst : original.insts) {
    bytecode::Instruction* c = bc.append(inst->opcode, inst->arg);
    c->pos = inst->pos;
    n++;
    if (inst->opcode == resume) break;
  }
  return n;
}

void Emitter::load_inputs(const std::vector<const guards::Source*>& srcs) {
  // Bases (chains two steps or more from the frame) by their text: every Source object with that text
  // and how many inputs go through it.
  struct Use {
    std::vector<const guards::Source*> objects;
    int count = 0;
  };
  std::unordered_map<std::string, Use> uses;
  std::vector<std::string> order;
  for (const guards::Source* s : srcs)
    for (const guards::Source* b = s->base.get(); b && b->base; b = b->base.get()) {
      std::string key = b->describe();
      auto [it, fresh] = uses.try_emplace(key);
      if (fresh) order.push_back(key);
      it->second.objects.push_back(b);
      it->second.count++;
    }
  // Shortest first, so a longer shared base is built from a shorter one already in a temporary.
  std::stable_sort(order.begin(), order.end(), [](const std::string& a, const std::string& b) { return a.size() < b.size(); });
  std::vector<int> slots;
  for (const auto& key : order) {
    const Use& u = uses[key];
    if (u.count < 2) continue;
    load_source(*u.objects.front());
    int slot = add_local("___base" + std::to_string(slots.size()));
    emit("STORE_FAST", slot);
    slots.push_back(slot);
    for (const guards::Source* o : u.objects) base_slots_[o] = slot;
  }
  for (const guards::Source* s : srcs) load_source(*s);
  for (int slot : slots) emit("DELETE_FAST", slot);
  base_slots_.clear();
}

int Emitter::load_graph_inputs(const interp::Trace& t) {
  std::vector<const guards::Source*> srcs;
  for (size_t i = 0; i < t.inputs.size(); ++i)
    if (i >= t.lifted_inputs.size() || !t.lifted_inputs[i]) srcs.push_back(t.inputs[i].source.get());
  load_inputs(srcs);
  return static_cast<int>(srcs.size());
}

void Emitter::load_source(const guards::Source& src) {
  using K = guards::Source::Kind;
  auto cached = base_slots_.find(&src);
  if (cached != base_slots_.end()) {
    emit("LOAD_FAST", cached->second);
    return;
  }
  switch (src.kind) {
    case K::Local: {
      int kind = compat::code_localsplus_kind(code_, src.index);
      emit((kind & (compat::kFastCell | compat::kFastFree)) ? "LOAD_DEREF" : "LOAD_FAST", src.index);
      return;
    }
    case K::Closure:
      emit("LOAD_DEREF", src.index);
      return;
    case K::Global:
    case K::Builtin:
      load_global(src.name, false);
      return;
    case K::Attr:
      load_source(*src.base);
      load_attr(src.name);
      return;
    case K::ClosureCell:
      load_closure(src.index);
      return;
    case K::Call:  // base()
      null_before_callable();
      load_source(*src.base);
      null_after_callable();
      call(0);
      return;
    case K::RandomValue:  // make_value(): the random call, at this point of the input loads (in trace order)
      load_callable(src.owner);
      call(0);
      return;
    case K::GenericAttr:  // object.__getattribute__(base, name)
      load_callable(py::reinterpret_borrow<py::object>(reinterpret_cast<PyObject*>(&PyBaseObject_Type)).attr("__getattribute__"));
      load_source(*src.base);
      load_const(py::str(src.name));
      call(2);
      return;
    case K::ModuleGlobal:
    case K::ModuleBuiltin:
      load_const(src.kind == K::ModuleGlobal ? src.owner : src.builtins);
      load_const(py::str(src.name));
      emit("BINARY_SUBSCR");
      return;
    case K::DictItem:
      load_source(*src.base);
      if (src.owner) load_const(src.owner);
      else load_const(py::str(src.name));
      emit("BINARY_SUBSCR");
      return;
    case K::Item:
      load_source(*src.base);
      load_const(py::int_(src.index));
      emit("BINARY_SUBSCR");
      return;
    case K::DictKey:  // cdynamo._dict_positions.key_at(base, index) (value_at): the entry at that position
    case K::DictValue: {
      const interp::Services& sv = interp::services();
      load_callable(src.kind == K::DictKey ? sv.dict_key_at : sv.dict_value_at);
      load_source(*src.base);
      load_const(py::int_(src.index));
      call(2);
      return;
    }
  }
}

int Emitter::add_local(const std::string& name) {
  varnames_.append(py::str(name));
  varnames_changed_ = true;
  ++added_locals_;
  return static_cast<int>(varnames_.size() - 1);
}

void Emitter::set_varnames(py::list names, int argcount) {
  varnames_ = std::move(names);
  varnames_changed_ = true;
  argcount_ = argcount;
}

void Emitter::set_freevars(py::tuple freevars) { freevars_ = std::move(freevars); }

py::object Emitter::finish(bool flatten_args, const std::string& name) {
  py::dict overrides;
  if (freevars_) {
    overrides["co_cellvars"] = py::tuple();
    overrides["co_freevars"] = freevars_;
  }
  if (added_locals_ > 0 && (code_->co_ncellvars || code_->co_nfreevars)) {
    // Locals come before the cells and free variables in the frame: those slots moved up. (A cell that
    // is also an argument keeps its argument slot.)
    const int old_nlocals = code_->co_nlocals;
    for (const char* op : {"LOAD_DEREF", "STORE_DEREF", "DELETE_DEREF", "LOAD_CLOSURE", "MAKE_CELL", "LOAD_CLASSDEREF",
                           "LOAD_FROM_DICT_OR_DEREF"}) {
      int opcode = bytecode::opcode_by_name(op);
      for (auto& i : bc.insts)
        if (i->opcode == opcode && i->arg >= old_nlocals) i->arg += added_locals_;
    }
    for (bytecode::Instruction* i : closure_loads_)  // 3.13's LOAD_CLOSURE is a LOAD_FAST of the cell slot
      if (i->arg >= old_nlocals) i->arg += added_locals_;
  }
  if (varnames_changed_) {
    // code.replace() checks co_nlocals against co_varnames but does not recompute it.
    overrides["co_varnames"] = py::tuple(varnames_);
    overrides["co_nlocals"] = py::int_(varnames_.size());
  }
  overrides["co_names"] = py::tuple(names_);
  overrides["co_consts"] = py::tuple(consts_);
  if (flatten_args) {
    overrides["co_argcount"] = argcount_ >= 0 ? argcount_ : compat::code_total_args(code_);
    overrides["co_posonlyargcount"] = 0;
    overrides["co_kwonlyargcount"] = 0;
    overrides["co_flags"] = code_->co_flags & ~(CO_VARARGS | CO_VARKEYWORDS);
  }
  if (!name.empty()) {
    overrides["co_name"] = py::str(name);
    overrides["co_qualname"] = py::str(name);
  }
  PyObject* c = bytecode::make_code(code_, bc, overrides.ptr());  // new reference
  if (!c) throw py::error_already_set();
  return py::reinterpret_steal<py::object>(c);
}

}  // namespace cdynamo::codegen
