// tracer.cpp — owns the run loop, stack helpers, value wrapping (with guards) and attribute reads.
#include "interp/tracer.h"

#include <algorithm>
#include <unordered_map>

#include "bytecode/flow.h"
#include "compat/compat.h"
#include "compat/opargs.h"
#include "guards/tensor_match.h"
#include "interp/services.h"
#include "interp/torch_rules.h"

namespace cdynamo::interp {

PyRefs& PyRefs::get() {
  static PyRefs* refs = [] {
    auto* r = new PyRefs();  // process lifetime: never destroyed (avoids teardown-order issues)
    r->torch = loaded_module("torch");
    r->operator_mod = loaded_module("operator");
    r->builtins = loaded_module("builtins");
    r->math = loaded_module("math");
    r->getattr_fn = r->builtins.attr("getattr");
    r->torch_device = r->torch.attr("device");
    r->meta_device = r->torch_device("meta");
    r->tensor_type = r->torch.attr("Tensor");
    py::object nn = r->torch.attr("nn");
    r->nn_module = nn.attr("Module");
    r->nn_parameter = nn.attr("Parameter");
    r->nn_sequential = nn.attr("Sequential");
    r->nn_module_list = nn.attr("ModuleList");
    r->nn_module_dict = nn.attr("ModuleDict");
    r->nn_module_module = loaded_module("torch.nn.modules.module");
    r->functools_partial = loaded_module("functools").attr("partial");
    r->copy_deepcopy = loaded_module("copy").attr("deepcopy");
    r->os_environ = loaded_module("os").attr("environ");
    r->abc_meta = loaded_module("abc").attr("ABCMeta");
    r->copyreg_dispatch = loaded_module("copyreg").attr("dispatch_table");
    return r;
  }();
  return *refs;
}

bool PyRefs::is_module_instance(PyObject* o) const {
  PyObject* module_cls = nn_module.ptr();  // borrowed (process lifetime)
  return PyType_Check(module_cls) && PyType_IsSubtype(Py_TYPE(o), reinterpret_cast<PyTypeObject*>(module_cls));
}

void on_opcode(HandlerTable& t, const char* name, Handler h) {
  int op = bytecode::opcode_by_name(name);
  if (op >= 0) t[static_cast<size_t>(op)] = h;
}

const HandlerTable& handler_table() {
  static HandlerTable table = [] {
    HandlerTable t{};
    Tracer::register_load_store(t);
    Tracer::register_import(t);
    Tracer::register_arith(t);
    Tracer::register_call(t);
    Tracer::register_build(t);
    Tracer::register_control(t);
    Tracer::register_with(t);
    Tracer::register_iter(t);
    Tracer::register_protocols(t);
    Tracer::register_dicts(t);
    Tracer::register_functions(t);
    Tracer::register_lists(t);
    return t;
  }();
  return table;
}

Tracer::Tracer(PyCodeObject* c, const guards::FrameView& f) : frame_globals_(f.globals), traced_code_(c) {
  code = c;
  fv = f;
  int n = compat::code_nlocalsplus(code);
  locals.assign(n, nullptr);
  local_loaded.assign(n, 0);
}

Tracer::Status Tracer::run() {
  // `with torch.no_grad():` switches the real grad mode while tracing (shape propagation sees it); the
  // frame's own mode is back in place when the trace ends, however it ends.
  struct GradModeRestore {
    bool entry = guards::grad_mode_enabled();
    ~GradModeRestore() { guards::set_grad_mode_enabled(entry); }
  } restore_grad_mode;
  examples_ = ExampleValues(shapes);
  try {
    bc = bytecode::decode(code);
  } catch (const std::exception& e) {
    status = Status::Unsupported;
    stop.reason = std::string("cannot decode bytecode: ") + e.what();
  }
  while (status == Status::Running) {
    // Snapshot what a failing instruction may have changed, to stop cleanly *before* it.
    std::vector<ValuePtr> saved_stack = stack;
    py::object saved_kw = kw_names;
    size_t saved_graph = graph.mark();
    size_t saved_stores = attr_stores.size();
    size_t saved_mutated = mutated.size();
    size_t saved_guards = guards.size();
    int saved_folds = compiling_folds;
    size_t saved_open = open_ctx_.size();
    undo_.clear();
    try {
      if (stopped) {
        status = Status::Returned;
        break;
      }
      if (at_window_end(pc))
        unsupported("end of a continuation window (a very long function is continued in parts)");
      if (static_cast<int>(pc) == break_at) unsupported(break_at_reason);
      try {
        execute_one();
      } catch (const TracedRaise& e) {
        // Raised under a try statement of the traced frame (RAISE_VARARGS, protocols.cpp): its handler, when it
        // catches it, is traced; otherwise Python raises (a break before the instruction).
        if (!enter_exception_handler(e)) throw;
      } catch (const RestartTrace& r) {
        restart = r.request;  // this attempt then stops here as at an unsupported construct
        throw Unsupported(r.what());
      }
    } catch (const Unsupported& e) {
      if (stop.reason.empty()) stop.reason = e.what();
      stop.lineno = lineno_;
      const bool failed_guards = guards.size() > saved_guards;
      stack = std::move(saved_stack);
      kw_names = saved_kw;
      graph.rollback(saved_graph);
      attr_stores.resize(saved_stores);
      for (auto u = undo_.rbegin(); u != undo_.rend(); ++u) {
        u->value->items = std::move(u->items);
        u->value->keys = std::move(u->keys);
        if (u->value->kind == VKind::Cell) u->value->payload = std::move(u->payload);
      }
      undo_.clear();
      mutated.resize(saved_mutated);
      compiling_folds = saved_folds;
      close_torch_contexts(saved_open, false);  // blocks the failed instruction entered (an inlined call's)
      std::string why;
      if (pc < bc.insts.size() && breakable(pc, &why)) {
        status = Status::Break;
        int op = bc.insts[pc]->opcode;
        std::string name = bytecode::opname(op);
        conditional_break = name.find("POP_JUMP") == 0;
      } else {
        status = Status::Unsupported;
        if (!why.empty()) stop.reason += " (" + why + ")";
      }
      // The failed instruction guarded what it read (a callee inlined part way): traced again breaking there at once.
      if (failed_guards && !restart) restart = Restart::break_at(static_cast<int>(pc), stop.reason);
    } catch (py::error_already_set& e) {
      status = Status::Unsupported;
      stop.reason = std::string("Python error during tracing: ") + e.what();
      stop.lineno = lineno_;
      internal_error = true;
      // An error of the user's request (a mark_dynamic constraint that cannot hold) reaches the caller.
      if (dynamic() && is_user_error(e.value()))
        user_error = py::make_tuple(e.type(), e.value(), e.trace());
    } catch (const std::exception& e) {
      status = Status::Unsupported;
      stop.reason = std::string("internal error: ") + e.what();
      stop.lineno = lineno_;
      internal_error = true;
    }
  }
  // A break inside torch context blocks: the graph leaves them (a balanced graph); the rewritten frame enters them
  // again around the breaking instruction and the continuation in its prologue. Whatever the outcome, the real
  // contexts entered while tracing are left here, innermost first.
  try {
    close_torch_contexts(0, status == Status::Break);
  } catch (py::error_already_set& e) {
    status = Status::Unsupported;
    stop.reason = std::string("Python error leaving a torch context after tracing: ") + e.what();
    internal_error = true;
  }
  // A break inside `with torch.no_grad()`: the graph ends in the frame's entry mode (a balanced graph, as
  // backends expect); the rewritten frame then switches to the mode at the break (grad_mode_after_graph).
  if (status == Status::Break && guards::grad_mode_enabled() != restore_grad_mode.entry) {
    grad_mode_after_graph = guards::grad_mode_enabled() ? 1 : 0;
    graph.call_function(PyRefs::get().torch.attr("_C").attr("_set_grad_enabled"),
                        {graph::Arg::constant(py::bool_(restore_grad_mode.entry))}, {}, py::none());
  }
  if (status != Status::Returned) {
    stop.filename = py::str(code->co_filename).cast<std::string>();
    try {
      py::object line = loaded_module("linecache").attr("getline")(stop.filename, stop.lineno);
      stop.line = py::str(line).cast<std::string>();
      while (!stop.line.empty() && (stop.line.back() == '\n' || stop.line.back() == ' ')) stop.line.pop_back();
      size_t s = stop.line.find_first_not_of(' ');
      stop.line = s == std::string::npos ? "" : stop.line.substr(s);
    } catch (py::error_already_set&) {
    }
  }
  return status;
}

bool Tracer::may_hold_attributes(const ValuePtr& c) const {
  // Writing it could change an object's attributes: anything of the frame (an object's items, a dict that
  // may be some object's __dict__), except what cannot be one: lists, sets, tuples, what the trace made (no
  // Source), and the frame's own **kwargs dict (made fresh by the call).
  if (!c || !c->source) return false;
  if (c->kind == VKind::List || c->kind == VKind::Set || c->kind == VKind::Tuple) return false;
  if (c->kind == VKind::Dict && (code->co_flags & CO_VARKEYWORDS) && c->source->kind == guards::Source::Kind::Local) {
    int varkw = code->co_argcount + code->co_kwonlyargcount + ((code->co_flags & CO_VARARGS) ? 1 : 0);
    if (c->source->index == varkw) return false;
  }
  return true;
}

void Tracer::save_undo(const ValuePtr& c) {
  for (const auto& u : undo_)
    if (u.value == c) return;
  undo_.push_back(Undo{c, c->items, c->keys, c->payload});
}

Tracer::TraceMark Tracer::mark_state() const {
  return TraceMark{graph.mark(), attr_stores.size(), mutation_count_, mutated.size()};
}

bool Tracer::state_unchanged_since(const TraceMark& m) const {
  return attr_stores.size() == m.stores && mutation_count_ == m.mutations && mutated.size() == m.mutated;
}

bool Tracer::unchanged_since(const TraceMark& m) const { return graph.mark() == m.nodes && state_unchanged_since(m); }

void Tracer::will_mutate(const ValuePtr& c) {
  if (c->frozen_dict()) unsupported("changing an object's __dict__ (" + c->describe() + ") in place");
  if (may_hold_attributes(c)) items_written = true;
  if (c != autograd_.ctx) ++mutation_count_;
  save_undo(c);
  if (c->source && c->frame_container() && std::find(mutated.begin(), mutated.end(), c) == mutated.end())
    mutated.push_back(c);
}

namespace {
// dict methods whose result depends on the keys only (and hands values out unpinned).
bool key_lookup_method(const std::string& name) {
  return name == "get" || name == "__getitem__" || name == "__contains__" || name == "keys" || name == "pop" ||
         name == "setdefault" || name == "__len__";
}

// The value's own identity guard, if still pending (not its items').
void realize_own(guards::GuardSet& guards, const ValuePtr& v) {
  if (v->pending_id) {
    std::shared_ptr<guards::Guard> g = std::move(v->pending_id);
    guards.add(std::move(*g));
  }
}
}  // namespace

void Tracer::realize(const ValuePtr& v) {
  if (!v) return;
  realize_own(guards, v);
  for (const auto& item : v->items) realize(item);  // containers built in the trace hold no cycles
  if (v->kind == VKind::Iter)
    for (const auto& item : v->iter().items) realize(item);
  if (v->kind == VKind::Cell && v->cell().content && v->cell().content != v) realize(v->cell().content);
  if ((v->kind == VKind::Instance || v->kind == VKind::Record) && v->instance().cls) realize(v->instance().cls);
  if (v->bound_self() && v->bound_self() != v) {
    // A dict the trace models, read by a method that only looks its keys up (kwargs.get('dtype')): the values'
    // identities decide nothing (each is pinned where the trace uses it); any other method pins them all.
    const ValuePtr& self = v->bound_self();
    if (self->kind == VKind::Dict && (!self->frame_container() || PyDict_CheckExact(self->frame_container().ptr())) &&
        key_lookup_method(v->bound_name())) {
      realize_own(guards, self);
    } else {
      realize(self);
    }
  }
  if (const PartialOf* p = v->partial()) {  // its function and positional arguments (not its keyword values)
    for (const auto& a : p->args) realize(a);
    realize(p->fn);
  }
  if (const SuperOf* s = v->super_of()) realize(s->obj);
  if (const SlotOf* s = v->slot()) realize(s->self);
}

namespace {

// How instruction kinds look at the values on top of the stack, for identity guards: only moving values
// (locals, stack shuffles, tuples and lists built from them, the return value) does not depend on which
// objects they are.
enum class Use : uint8_t {
  Move, AttrRead, One, Two, Is, CallN, ArgN, Arg2N, ArgN1, CallEx, Format, StoreAttr, DeleteAttr, WriteItem, Spread,
  Subscript, Contains, Iterate, Intrinsic1, All
};

// A tuple, list or dict the trace models item by item (not an object of the frame with its own methods), or
// a ModelOutput the trace made (read only by field).
bool modelled_container(const ValuePtr& v) {
  return v && (v->kind == VKind::Tuple || v->kind == VKind::List || v->kind == VKind::Dict || v->kind == VKind::Record);
}


// A callee the trace inlines, so that its arguments are only bound to parameters: a Python function (or a
// method bound to a value), or an nn.Module (its forward). Its own instructions pin what they use.
bool inlined_callee(const ValuePtr& fn) {
  if (!fn || fn->kind != VKind::Object || !fn->obj) return false;
  PyObject* f = fn->obj.ptr();
  if (PyFunction_Check(f)) return !fn->bound_self() || !fn->is_modelled();
  return !fn->bound_self() && PyRefs::get().is_module_instance(f);
}

// Builtins whose call looks at an object's type (guarded at wrap), or its attributes (guarded through
// their sources), not at which object it is. Borrowed from builtins (process lifetime).
struct TypeOnlyBuiltins {
  PyObject *isinstance, *issubclass, *len, *hasattr;
  TypeOnlyBuiltins() {
    py::object b = PyRefs::get().builtins;
    isinstance = b.attr("isinstance").ptr();
    issubclass = b.attr("issubclass").ptr();
    len = b.attr("len").ptr();
    hasattr = b.attr("hasattr").ptr();
  }
};

const std::vector<Use>& use_table() {
  static const std::vector<Use> table = [] {
    std::vector<Use> t(256, Use::All);
    auto set = [&](std::initializer_list<const char*> names, Use u) {
      for (const char* n : names) {
        int op = bytecode::opcode_by_name(n);
        if (op >= 0 && op < 256) t[static_cast<size_t>(op)] = u;
      }
    };
    set({"NOP", "RESUME", "CACHE", "EXTENDED_ARG", "LOAD_FAST", "STORE_FAST", "DELETE_FAST", "LOAD_CONST",
         "POP_TOP", "COPY", "SWAP", "PUSH_NULL", "PRECALL", "KW_NAMES", "LOAD_DEREF", "STORE_DEREF",
         "LOAD_CLOSURE", "MAKE_CELL", "COPY_FREE_VARS", "LOAD_GLOBAL", "STORE_GLOBAL", "BUILD_TUPLE",
         "BUILD_LIST", "LIST_APPEND", "RETURN_VALUE", "YIELD_VALUE", "JUMP_FORWARD", "JUMP_BACKWARD",
         "JUMP_BACKWARD_NO_INTERRUPT", "LOAD_FAST_CHECK", "LOAD_FAST_AND_CLEAR", "RETURN_CONST", "END_FOR",
         // 3.13: paired local moves; TO_BOOL only feeds a jump or `not`, which look at the value themselves.
         "LOAD_FAST_LOAD_FAST", "STORE_FAST_STORE_FAST", "STORE_FAST_LOAD_FAST", "TO_BOOL"},
        Use::Move);
    set({"LOAD_ATTR", "LOAD_METHOD"}, Use::AttrRead);
    // 3.12's super().name: [super, class, self] are the arguments of the super() call that 3.11 makes with
    // CALL 0 (callee and NULL only), then an attribute read of the proxy: nothing is looked at by identity
    // (self's type and the class cell are guarded where they were read).
    set({"LOAD_SUPER_ATTR"}, Use::Move);
    // Building argument tuples and dicts (`f(self, *args, **kw)`) moves the items of tuples, lists and dicts.
    set({"LIST_EXTEND", "DICT_UPDATE", "DICT_MERGE", "LIST_TO_TUPLE"}, Use::Spread);
    set({"GET_ITER", "FOR_ITER", "UNPACK_SEQUENCE", "UNPACK_EX"}, Use::Iterate);
    set({"SET_ADD", "SET_UPDATE", "BEFORE_WITH", "UNARY_NEGATIVE", "UNARY_POSITIVE",
         "UNARY_INVERT", "UNARY_NOT", "POP_JUMP_FORWARD_IF_TRUE", "POP_JUMP_FORWARD_IF_FALSE",
         "POP_JUMP_BACKWARD_IF_TRUE", "POP_JUMP_BACKWARD_IF_FALSE", "JUMP_IF_TRUE_OR_POP", "JUMP_IF_FALSE_OR_POP",
         "POP_JUMP_IF_TRUE", "POP_JUMP_IF_FALSE"},
        Use::One);
    // `x is None` jumps: a lazily wrapped object is never None (its guarded type decides).
    set({"POP_JUMP_FORWARD_IF_NONE", "POP_JUMP_FORWARD_IF_NOT_NONE", "POP_JUMP_BACKWARD_IF_NONE",
         "POP_JUMP_BACKWARD_IF_NOT_NONE", "POP_JUMP_IF_NONE", "POP_JUMP_IF_NOT_NONE"},
        Use::Move);
    set({"BINARY_OP", "COMPARE_OP", "MAP_ADD"}, Use::Two);
    set({"IS_OP"}, Use::Is);
    set({"BINARY_SUBSCR"}, Use::Subscript);
    set({"BINARY_SLICE", "STORE_SLICE"}, Use::All);
    set({"CALL_INTRINSIC_1"}, Use::Intrinsic1);
    set({"CONTAINS_OP"}, Use::Contains);
    set({"STORE_ATTR"}, Use::StoreAttr);
    set({"DELETE_ATTR"}, Use::DeleteAttr);
    set({"STORE_SUBSCR", "DELETE_SUBSCR"}, Use::WriteItem);
    set({"CALL", "CALL_KW"}, Use::CallN);
    set({"BUILD_SET", "BUILD_STRING", "BUILD_SLICE"}, Use::ArgN);
    set({"BUILD_MAP"}, Use::Arg2N);
    set({"BUILD_CONST_KEY_MAP"}, Use::Move);  // constant keys; the values are moved into the dict
    set({"CALL_FUNCTION_EX"}, Use::CallEx);
    set({"FORMAT_VALUE"}, Use::Format);
    set({"FORMAT_SIMPLE", "CONVERT_VALUE"}, Use::One);  // 3.13's split FORMAT_VALUE
    set({"FORMAT_WITH_SPEC"}, Use::Two);
    return t;
  }();
  return table;
}

// True if len(v) inlines a Python __len__ of v's class (Tracer::call_builtin): a user object, not a module.
bool python_len(const ValuePtr& v) {
  PyObject* len = user_class_attr(v, "__len__");  // borrowed
  return len && PyFunction_Check(len);
}

}  // namespace

struct Tracer::IdentityUses {
  // The callee of CALL n: above a NULL, or (3.11's method form, a comprehension's `f(iter)`) the item below
  // the arguments and `self`; nullptr when the stack is too short.
  static const ValuePtr* call_callee(const Tracer& t, int nargs) {
    size_t at = static_cast<size_t>(nargs) + 2;
    if (t.stack.size() < at) return nullptr;
    const ValuePtr& below = t.stack[t.stack.size() - at];
    return below && below->kind == VKind::Null ? &t.stack[t.stack.size() - at + 1] : &below;
  }

  // Number of top-of-stack values `inst` may look at by identity (-1: all); notes writes to objects.
  static int identity_uses(Tracer& t, const bytecode::Instruction& inst) {
    const Use use = use_table()[static_cast<size_t>(inst.opcode & 0xff)];
    switch (use) {
      case Use::Move: return 0;
      // Attribute reads are guarded through the attribute's own source, given the type; one written earlier in
      // the trace through another object is guarded by aliasing (Tracer::load_attr). After a container of
      // the frame was written (which could be an object's __dict__), the object is pinned.
      case Use::AttrRead:
        if (!t.stack.empty() && t.stack.back()->kind == VKind::Record) return 0;  // its fields, by name
        return t.items_written ? 1 : 0;
      case Use::One: return 1;
      case Use::Two: return 2;
      case Use::Is:
        // `obj is None` (or any constant): an object wrapped lazily is a plain instance, never a constant, so
        // its guarded type decides.
        if (t.stack.size() >= 2 && (t.stack[t.stack.size() - 1]->is_const() || t.stack[t.stack.size() - 2]->is_const()))
          return 0;
        return 2;
      // An attribute store pins nothing (reads of that attribute through other objects are guarded by aliasing,
      // Tracer::load_attr); a deletion or a subscript store pins its target (and key). Writes to what the trace
      // made itself (no Source) cannot reach an object of the frame.
      case Use::StoreAttr: return 0;
      case Use::DeleteAttr:
      case Use::WriteItem: {
        size_t target_depth = use == Use::DeleteAttr ? 1 : 2;
        if (t.stack.size() < target_depth || t.may_hold_attributes(t.stack[t.stack.size() - target_depth]))
          t.items_written = true;
        return static_cast<int>(target_depth);
      }
      case Use::CallN: {
        // CALL_KW (3.13) has its names tuple above the arguments.
        static const int call_kw = bytecode::opcode_by_name("CALL_KW");  // -1 before 3.13
        const int kw = inst.opcode == call_kw ? 1 : 0;
        const ValuePtr* callee = call_callee(t, inst.arg + kw);
        const ValuePtr& fn = callee ? *callee : nullptr;
        // A ModelOutput's own methods (to_tuple, get, keys, ...) move its fields out.
        if (fn && fn->kind == VKind::Method && fn->bound_self() && fn->bound_self()->kind == VKind::Record) return 0;
        if (fn && fn->kind == VKind::Object && fn->obj) {
          PyObject* f = fn->obj.ptr();
          if (inlined_callee(fn)) return 0;
          if (f == reinterpret_cast<PyObject*>(&PyType_Type)) return 0;  // type(obj): its class, guarded
          // Objects the trace makes: a plain class's __init__ is inlined, a ModelOutput's fields are the
          // arguments, moved.
          if (PyType_Check(f) && !fn->bound_self() && (is_record_class(fn->obj) || (fn->source && is_plain_class(fn->obj))))
            return 0;
          static const TypeOnlyBuiltins builtins;
          if (f == builtins.isinstance || f == builtins.issubclass) return 0;
          // getattr(obj, name[, default]) is an attribute read (see Use::AttrRead).
          if (!kw && (inst.arg == 2 || inst.arg == 3) && f == PyRefs::get().getattr_fn.ptr() && !t.items_written)
            return 0;
          // hasattr(obj, name): the same read, its answer guarded by HASATTR / NO_HASATTR on the object's source.
          if (!kw && inst.arg == 2 && f == builtins.hasattr && !t.items_written) return 0;
          // len() of a modelled tuple / list / dict counts its items without looking at them; len() of a user
          // object whose class defines __len__ in Python inlines it (what that reads is guarded there).
          if (!kw && inst.arg == 1 && f == builtins.len &&
              (modelled_container(t.stack.back()) || python_len(t.stack.back())))
            return 0;
        }
        return inst.arg + 2 + kw;
      }
      case Use::ArgN: return inst.arg;
      case Use::Arg2N: {
        // BUILD_MAP: with constant keys the values are only moved into the dict.
        size_t n = 2 * static_cast<size_t>(inst.arg);
        if (t.stack.size() < n) return -1;
        for (size_t k = t.stack.size() - n; k < t.stack.size(); k += 2)
          if (!t.stack[k]->is_const()) return static_cast<int>(n);
        return 0;
      }
      case Use::ArgN1: return inst.arg + 1;
      // d[k] / seq[i] with a constant key moves one item out; `k in d` looks at the keys only. (`x in seq`
      // compares items, by identity for plain objects: pinned.)
      case Use::Subscript:
        if (t.stack.size() < 2) return -1;
        if (t.frame_tensor_key(t.stack[t.stack.size() - 2], t.stack.back())) return 0;  // guarded by position
        return modelled_container(t.stack[t.stack.size() - 2]) && t.stack.back()->is_const() ? 0 : 2;
      case Use::Contains:
        if (t.stack.size() < 2) return -1;
        if (t.frame_tensor_key(t.stack.back(), t.stack[t.stack.size() - 2])) return 0;  // tensor_key_in guards it
        return t.stack.back()->kind == VKind::Dict && t.stack[t.stack.size() - 2]->is_const() ? 0 : 2;
      case Use::Iterate: {
        // Iterating (or unpacking) a modelled tuple / list / dict, or an iterator over one, moves its items.
        const ValuePtr& top = t.stack.empty() ? nullptr : t.stack.back();
        return modelled_container(top) || (top && top->kind == VKind::Iter) ? 0 : 1;
      }
      case Use::Spread: return !t.stack.empty() && modelled_container(t.stack.back()) ? 0 : 1;
      // 3.12's list-to-tuple (f(*args) building its tuple) moves the items as LIST_TO_TUPLE did; unary + is One.
      case Use::Intrinsic1:
        if (inst.arg == compat::opargs::kIntrinsicListToTuple)
          return !t.stack.empty() && modelled_container(t.stack.back()) ? 0 : 1;
        return 1;
      case Use::CallEx: {
        // f(*args, **kwargs) of a callee the trace inlines, as for CALL.
        // The callable is above its NULL through 3.12, below it on 3.13.
        size_t depth = (inst.arg & 1) ? 3 : 2;
        if (t.stack.size() > depth) {
          const ValuePtr& at = t.stack[t.stack.size() - depth];
          if (inlined_callee(at && at->kind == VKind::Null ? t.stack[t.stack.size() - depth - 1] : at)) return 0;
        }
        return (inst.arg & 1) ? 4 : 3;
      }
      case Use::Format: return (inst.arg & 0x04) ? 2 : 1;
      case Use::All: return -1;
    }
    return -1;
  }
};

void Tracer::execute_one() {
  if (pc >= bc.insts.size()) unsupported("fell off the end of the bytecode");
  const auto& inst = *bc.insts[pc];
  if (inst.pos.line >= 0) lineno_ = inst.pos.line;
  graph.set_location(reinterpret_cast<PyObject*>(code), lineno_, inst.pos.col, inst.pos.end_col);
  Handler h = handler_table()[inst.opcode & 0xff];
  if (!h) unsupported(std::string("opcode ") + bytecode::opname(inst.opcode) + " is not supported yet");
  // Identity guards of the values this instruction looks at are installed once it has run: an instruction
  // that stops the trace (a graph break) runs as Python and needs none.
  int uses = IdentityUses::identity_uses(*this, inst);
  size_t nuse = uses < 0 || static_cast<size_t>(uses) > stack.size() ? stack.size() : static_cast<size_t>(uses);
  std::vector<ValuePtr> used(stack.end() - static_cast<long>(nuse), stack.end());
  size_t before = pc;
  const TraceMark mark = mark_state();
  const size_t nodes = mark.nodes;
  // Dynamic shapes: what the instruction may change before it fails, to run it again on plain numbers.
  std::vector<ValuePtr> stack_before = dynamic() ? stack : std::vector<ValuePtr>{};
  py::object kw_before = kw_names;
  std::string reason_before = stop.reason;
  const size_t undo_before = undo_.size();  // the changes it can take back: none yet (cleared per instruction)
  try {
    h(*this, inst);
  } catch (const TracedRaise&) {
    // An exception raised in the trace (inside an inlined function) may be handled by the caller: the values
    // the instruction looked at decided that it raised, so they are pinned as when it completes, and a graph op
    // it made inside a try block counts as below.
    for (const auto& v : used) realize(v);
    if (graph.mark() != nodes && in_user_try(before)) {
      if (!allow_ops_in_try)
        unsupported("a tensor operation inside a try block (an error it raises at run time must reach the handler)");
      ops_in_try = true;
    }
    throw;
  } catch (const Unsupported& e) {
    // An instruction the trace cannot run on a symbolic number (a fold, an index, a slice bound, a call it
    // cannot inline) runs once more on the plain numbers its operands have now: the ShapeEnv guards them, so
    // the size is specialised (as torch._dynamo specialises) rather than the graph broken. Only when the
    // failed attempt changed nothing the trace cannot take back.
    if (!dynamic() || dynamic_cast<const OpRaised*>(&e) || undo_.size() != undo_before || !state_unchanged_since(mark))
      throw;
    bool any = false;
    for (size_t k = stack_before.size() - nuse; k < stack_before.size(); ++k) {
      ValuePtr c = specialize(stack_before[k]);
      if (c != stack_before[k]) {
        stack_before[k] = c;
        any = true;
      }
    }
    if (!any) throw;
    stack = std::move(stack_before);
    kw_names = kw_before;
    stop.reason = reason_before;
    graph.rollback(nodes);
    pc = before;
    h(*this, inst);
  }
  for (const auto& v : used) realize(v);
  // A graph op that raises at run time (an error shape propagation cannot see, such as max() of an empty
  // tensor) raises from the graph call, outside the frame's try blocks: their handlers would be skipped,
  // unless the failed graph reruns the frame as Python (hook/translate.cpp checks that, see ops_in_try).
  if (graph.mark() != nodes && in_user_try(before)) {
    if (!allow_ops_in_try)
      unsupported("a tensor operation inside a try block (an error it raises at run time must reach the handler)");
    ops_in_try = true;
  }
  if (pc == before) pc++;
}

bool Tracer::covers(const bytecode::ExceptionEntry& e, size_t index) const {
  int i = static_cast<int>(index);
  return i >= bc.index_of(e.start) && i <= bc.index_of(e.end);
}

bool Tracer::handler_is(const bytecode::ExceptionEntry& e, std::initializer_list<std::pair<const char*, int>> ops) const {
  int h = bc.index_of(e.target);
  if (h < 0) return false;
  size_t k = static_cast<size_t>(h);
  for (const auto& [name, arg] : ops) {
    if (k >= bc.insts.size() || bc.insts[k]->opcode != bytecode::opcode_by_name(name) || (arg >= 0 && bc.insts[k]->arg != arg))
      return false;
    ++k;
  }
  return true;
}

bool Tracer::with_cleanup(const bytecode::ExceptionEntry& e) const {
  return handler_is(e, {{"PUSH_EXC_INFO", -1}, {"WITH_EXCEPT_START", -1}});
}

bool Tracer::comprehension_cleanup(const bytecode::ExceptionEntry& e) const {
  // PEP 709 (3.12): an inlined comprehension's handler restores the locals it saved with
  // LOAD_FAST_AND_CLEAR and re-raises: SWAP 2; POP_TOP; SWAP n; STORE_FAST...; RERAISE 0.
  static const int store_fast = bytecode::opcode_by_name("STORE_FAST");
  static const int store_fast_pair = bytecode::opcode_by_name("STORE_FAST_STORE_FAST");  // 3.13; -1 before
  static const int reraise = bytecode::opcode_by_name("RERAISE");
  if (bytecode::opcode_by_name("LOAD_FAST_AND_CLEAR") < 0) return false;
  if (!handler_is(e, {{"SWAP", 2}, {"POP_TOP", -1}, {"SWAP", -1}})) return false;
  size_t k = static_cast<size_t>(bc.index_of(e.target)) + 3;
  size_t stores = 0;
  for (; k < bc.insts.size() && (bc.insts[k]->opcode == store_fast || bc.insts[k]->opcode == store_fast_pair); ++k)
    ++stores;
  return stores > 0 && k < bc.insts.size() && bc.insts[k]->opcode == reraise && bc.insts[k]->arg == 0;
}

bool Tracer::in_user_try(size_t index) const {
  // A with block's cleanup (PUSH_EXC_INFO; WITH_EXCEPT_START) runs __exit__, which the trace models; an
  // inlined comprehension's handler only restores its saved locals.
  for (const auto& e : bc.exception_table)
    if (covers(e, index) && bc.index_of(e.target) >= 0 && !with_cleanup(e) && !comprehension_cleanup(e)) return true;
  return false;
}

bool Tracer::in_handler_range(size_t index) const {
  for (const auto& e : bc.exception_table)
    if (covers(e, index)) return true;
  return false;
}

int restart_operands(const bytecode::Instruction& i) {
  // The instructions a graph break can stop before: the rewritten frame rebuilds their operands and runs
  // them as Python. Keyed by name; names a version does not have never match.
  static const std::unordered_map<std::string, int> fixed = {
      {"BINARY_OP", 2},       {"COMPARE_OP", 2},       {"BINARY_SUBSCR", 2},      {"CONTAINS_OP", 2},
      {"IS_OP", 2},           {"IMPORT_NAME", 2},      {"DELETE_SUBSCR", 2},      {"STORE_ATTR", 2},
      {"STORE_SUBSCR", 3},    {"BINARY_SLICE", 3},     {"STORE_SLICE", 4},        {"LOAD_ATTR", 1},
      {"LOAD_METHOD", 1},     {"UNPACK_SEQUENCE", 1},  {"UNPACK_EX", 1},          {"STORE_GLOBAL", 1},
      {"GET_ITER", 1},        {"LIST_TO_TUPLE", 1},    {"DELETE_ATTR", 1},        {"PRINT_EXPR", 1},
      {"IMPORT_FROM", 1},     {"UNARY_NOT", 1},        {"UNARY_NEGATIVE", 1},     {"UNARY_INVERT", 1},
      {"UNARY_POSITIVE", 1},  {"LOAD_BUILD_CLASS", 0}, {"LOAD_ASSERTION_ERROR", 0}, {"DELETE_GLOBAL", 0},
      {"LOAD_GLOBAL", -2},     {"LIST_APPEND", -2},     {"LIST_EXTEND", -2},       {"DICT_UPDATE", -2},
      {"DICT_MERGE", -2},     {"SET_UPDATE", -2},      {"SET_ADD", -2},           {"MAP_ADD", -2},
      {"MAKE_FUNCTION", -2}};
  const std::string n = bytecode::opname(i.opcode);
  if (n == "CALL") return i.arg + 2;
  if (n == "CALL_KW") return i.arg + 3;  // 3.13: the names tuple above the arguments
  if (n == "FORMAT_SIMPLE" || n == "CONVERT_VALUE" || n == "TO_BOOL") return 1;  // 3.13
  if (n == "FORMAT_WITH_SPEC") return 2;
  if (n == "SET_FUNCTION_ATTRIBUTE") return -2;
  if (n == "BUILD_TUPLE" || n == "BUILD_LIST" || n == "BUILD_SET" || n == "BUILD_STRING" || n == "BUILD_SLICE")
    return i.arg;
  if (n == "BUILD_MAP") return 2 * i.arg;
  if (n == "BUILD_CONST_KEY_MAP") return i.arg + 1;
  if (n == "FORMAT_VALUE") return (i.arg & 0x04) ? 2 : 1;
  if (n == "CALL_FUNCTION_EX") return (i.arg & 1) ? 4 : 3;
  if (n == "CALL_INTRINSIC_1" &&
      (i.arg == compat::opargs::kIntrinsicUnaryPositive || i.arg == compat::opargs::kIntrinsicListToTuple))
    return 1;
  auto it = fixed.find(n);
  if (it == fixed.end()) return -1;
  // -2: a break may stop there, but the rewritten frame cannot restart it (it reaches below its operands).
  return it->second == -2 ? -2 : it->second;
}

bool Tracer::breakable(size_t index, std::string* why) const {
  if (at_window_end(index)) return true;  // an empty stack outside loops and try blocks, by construction
  if (compiling_folds > 0) {
    *why = "after torch.compiler.is_compiling() was taken as True: the frame runs as Python";
    return false;
  }
  const bytecode::Instruction* inst = bc.insts[index].get();
  // Cells are rebuilt by STORE_DEREF in the rewritten frame and handed to the continuation as its
  // closure; a function made in this trace that captures one (its Cell value) cannot be rebuilt.
  for (const auto& box : cell_boxes)
    if (box) {
      *why = "a function made before the break captures a cell variable";
      return false;
    }
  // Zero-argument super() reads the frame's first argument, which a continuation's first argument is not.
  for (int s = 0; s < compat::code_nlocalsplus(code); ++s)
    if ((compat::code_localsplus_kind(code, s) & compat::kFastFree) &&
        py::str(compat::code_localsplus_name(code, s)).cast<std::string>() == "__class__") {
      *why = "graph breaks in methods that call super() without arguments are not supported yet";
      return false;
    }
  // Inside a try/with block only the body of `with torch.no_grad()/enable_grad()` or of a torch context of
  // torch_contexts.cpp (entered again by the continuation's prologue): its __exit__ (stack slot
  // depth-1) is rebuilt as a grad-mode restorer and the continuation keeps the block's cleanup. The frame's
  // handlers must all be with statements' (their cleanup and its re-raise trampoline, COPY 3; POP_EXCEPT;
  // RERAISE 1): a try statement may enclose the block and catch what the breaking instruction raises.
  auto with_handler = [&](const bytecode::ExceptionEntry& e) {
    return with_cleanup(e) || handler_is(e, {{"COPY", 3}, {"POP_EXCEPT", -1}, {"RERAISE", 1}});
  };
  for (const auto& e : bc.exception_table) {
    if (!covers(e, index)) continue;
    const bool on_stack = with_cleanup(e) && e.depth >= 1 && static_cast<size_t>(e.depth) <= stack.size();
    const ValuePtr* exit = on_stack ? &stack[static_cast<size_t>(e.depth - 1)] : nullptr;
    bool grad_with = exit && ((*exit)->grad_exit() || (*exit)->ctx_exit()) &&
                     std::all_of(bc.exception_table.begin(), bc.exception_table.end(), with_handler);
    if (!grad_with) {
      *why = "inside a try/with block";
      return false;
    }
  }
  // inference_mode saves and restores grad mode itself: the rewritten frame's grad-mode switch at the break would
  // not compose with it.
  bool inference = false, grad_block = false;
  for (const auto& v : stack) {
    if (const CtxExitOf* x = v->ctx_exit()) inference |= x->spec->kind == TorchCtxKind::Inference;
    if (const GradExitOf* g = v->grad_exit()) grad_block |= g->mode != kNoopExit;
  }
  if (inference && grad_block) {
    *why = "inside torch.inference_mode() nested with a grad-mode block";
    return false;
  }
  if (loop_depth(index)) {
    *why = "inside a loop: the frame runs as Python";
    return false;
  }
  std::string name = bytecode::opname(inst->opcode);
  if (name.find("POP_JUMP") == 0) {
    bool on_truth = name.find("_IF_TRUE") != std::string::npos || name.find("_IF_FALSE") != std::string::npos;
    if (!on_truth || stack.empty() || (!stack.back()->is_tensor() && !stack.back()->is_sym())) {
      *why = "jump on a value that cannot be rebuilt";
      return false;
    }
    return true;
  }
  if (bytecode::is_jump(inst->opcode) || bytecode::is_terminator(inst->opcode)) {
    *why = "inside a loop or at a control-flow instruction";
    return false;
  }
  if (restart_operands(*inst) != -1) return true;
  *why = "instruction " + name + " cannot be restarted as Python";
  return false;
}

const std::vector<char>& Tracer::loop_back_edges() const {
  // A backward jump closes a loop when its target dominates it (every path from the entry to the jump,
  // exception edges included, passes the target). 3.12 moves exception handlers after the function's normal
  // code: the jump by which a handler (an except clause, a with statement's exit) rejoins the code after its
  // block is backward but closes no loop, and its target does not dominate it (the block reaches the handler
  // without passing there).
  const void* key = bc.insts.empty() ? nullptr : bc.insts.front().get();  // inlining swaps bc: one per code
  if (loop_edges_ready_ && loop_edges_key_ == key) return loop_edges_;
  const size_t n = bc.insts.size();
  const std::vector<std::vector<size_t>> succ = bytecode::successors(bc);
  loop_edges_.assign(n, 0);
  std::vector<char> seen(n);
  std::vector<size_t> work;
  for (size_t j = 0; j < n; ++j) {
    const auto* inst = bc.insts[j].get();
    if (!inst->target || !bytecode::is_backward_jump(inst->opcode)) continue;
    const int t = bc.index_of(inst->target);
    if (t < 0) continue;
    // Is j reachable from the entry without passing t?
    std::fill(seen.begin(), seen.end(), 0);
    bool bypass = false;
    if (t != 0) {
      work.assign(1, 0);
      seen[0] = 1;
      while (!work.empty() && !bypass) {
        size_t i = work.back();
        work.pop_back();
        if (i == j) bypass = true;
        for (size_t k : succ[i])
          if (!seen[k] && k != static_cast<size_t>(t)) {
            seen[k] = 1;
            work.push_back(k);
          }
      }
    }
    loop_edges_[j] = bypass ? 0 : 1;
  }
  loop_edges_ready_ = true;
  loop_edges_key_ = key;
  return loop_edges_;
}

bool Tracer::loop_depth(size_t index) const {
  // An instruction is inside a loop if some loop back edge at or after it targets at or before it.
  const std::vector<char>& edges = loop_back_edges();
  for (size_t j = index; j < bc.insts.size(); ++j) {
    if (!edges[j]) continue;
    int target = bc.index_of(bc.insts[j]->target);
    if (target >= 0 && static_cast<size_t>(target) <= index) return true;
  }
  return false;
}

ValuePtr Tracer::pop() {
  if (stack.empty()) unsupported("stack underflow");
  ValuePtr v = std::move(stack.back());
  stack.pop_back();
  return v;
}

std::vector<ValuePtr> Tracer::popn(size_t n) {
  if (stack.size() < n) unsupported("stack underflow");
  std::vector<ValuePtr> out(stack.end() - static_cast<long>(n), stack.end());
  stack.resize(stack.size() - n);
  return out;
}

ValuePtr& Tracer::peek(size_t depth) {
  if (stack.size() < depth) unsupported("stack underflow");
  return stack[stack.size() - depth];
}

void Tracer::unsupported(const std::string& reason) {
  stop.reason = reason;
  stop.lineno = lineno_;
  throw Unsupported(reason);
}

void Tracer::op_raised(const std::string& reason) {
  stop.reason = reason;
  stop.lineno = lineno_;
  throw OpRaised(reason);
}

py::handle Tracer::const_at(int i) const { return PyTuple_GET_ITEM(code->co_consts, i); }  // borrowed
py::handle Tracer::name_at(int i) const { return PyTuple_GET_ITEM(code->co_names, i); }    // borrowed
std::string Tracer::local_name(int slot) const {
  return py::str(compat::code_localsplus_name(code, slot)).cast<std::string>();
}

bool Tracer::local_bound(int slot) const {
  if (slot < 0 || slot >= static_cast<int>(locals.size())) return false;
  if (locals[slot] || inline_depth_ > 0 || local_loaded[slot]) return locals[slot] != nullptr;
  if (compat::code_localsplus_kind(code, slot) & compat::kFastFree) return true;  // read through its cell
  return fv.localsplus[slot] != nullptr;
}

ValuePtr Tracer::load_local(int slot) {
  if (slot < 0 || slot >= static_cast<int>(locals.size())) unsupported("bad local slot");
  if (inline_depth_ > 0) return locals[slot];  // inlined frames are bound from the call's arguments
  int kind = compat::code_localsplus_kind(code, slot);
  if ((kind & compat::kFastFree) && !attr_stores.empty() && !options().owns_free(slot)) {
    // A `nonlocal` store to this cell made by an inlined closure (or this frame) in this trace: the value it stored.
    if (ValuePtr stored = pending_attr(top_frame_cell(slot), "cell_contents")) return stored;
  }
  if (!local_loaded[slot]) {
    local_loaded[slot] = 1;
    PyObject* v = nullptr;  // borrowed
    SourcePtr src;
    if (kind & compat::kFastFree) {
      src = guards::Source::closure(slot, local_name(slot));
      PyObject* nv = src->fetch(fv);  // new
      if (nv) {
        locals[slot] = wrap(nv, src);
        Py_DECREF(nv);
      }
      return locals[slot];
    }
    v = fv.localsplus[slot];
    if (v) locals[slot] = wrap(v, guards::Source::local(slot, local_name(slot)));
  }
  return locals[slot];
}

namespace {
// A graph input's name spelled from where it came from: x, xs_0, self_weight (made unique by the graph).
std::string placeholder_name(const guards::Source& s) {
  using K = guards::Source::Kind;
  switch (s.kind) {
    case K::Attr:
    case K::GenericAttr: return placeholder_name(*s.base) + "_" + s.name;
    case K::Item: return placeholder_name(*s.base) + "_" + std::to_string(s.index);
    case K::DictItem: {  // self._modules['lin'] -> self_lin: the container's own name adds nothing
      const guards::Source& b = *s.base;
      bool module_dict = b.kind == K::Attr && (b.name == "_modules" || b.name == "_parameters" || b.name == "_buffers");
      return placeholder_name(module_dict ? *b.base : b) + "_" + s.name;
    }
    case K::DictKey: return placeholder_name(*s.base) + "_key_" + std::to_string(s.index);
    case K::DictValue: return placeholder_name(*s.base) + "_value_" + std::to_string(s.index);
    default: return s.name.empty() ? std::string("input") : s.name;
  }
}
}  // namespace

std::string shape_source_name(const guards::Source& s) {
  using K = guards::Source::Kind;
  switch (s.kind) {
    case K::Local:
    case K::Closure: return "L['" + s.name + "']";
    case K::Global: return "G['" + s.name + "']";
    case K::Attr: return shape_source_name(*s.base) + "." + s.name;
    case K::Item: return shape_source_name(*s.base) + "[" + std::to_string(s.index) + "]";
    case K::DictItem: return s.owner ? s.describe() : shape_source_name(*s.base) + "['" + s.name + "']";
    default: return s.describe();
  }
}

py::object loaded_module(const char* name) {
  PyObject* n = PyUnicode_FromString(name);  // new
  if (!n) throw py::error_already_set();
  PyObject* m = PyImport_GetModule(n);  // new reference or NULL
  Py_DECREF(n);
  if (!m) {
    if (PyErr_Occurred()) throw py::error_already_set();
    m = PyImport_ImportModule(name);  // new reference
    if (!m) throw py::error_already_set();
  }
  return py::reinterpret_steal<py::object>(m);
}

bool is_user_error(py::handle exc) {
  try {
    return services().is_user_error(exc).cast<bool>();
  } catch (py::error_already_set&) {
    return false;
  }
}

namespace {
// Where a float that changes becomes a graph input (torch._dynamo passes these as tensors: issue 31): an argument, or
// an item of a list / dict (an optimizer's param_groups[0]['lr']): symbolic once it changed between compiles, or at
// once under compile(dynamic=True); an object's attribute (an nn.Module's lr, or read through an object's __dict__),
// symbolic only once it changed, so that under compile(dynamic=True) too the constants of config objects and torch.nn
// modules (eps, momentum) stay constants. A global (of the frame's module or an inlined callee's) is as an attribute:
// symbolic only once it changed (torch._dynamo: 2 graphs for a global that takes many values).
enum class FloatSource { Constant, Input, Attribute };
// Where an int that changes becomes a SymInt input (automatic dynamic): an argument, or the contents of a closure cell
// (a `nonlocal` counter, read by the frame or by an inlined closure: torch._dynamo makes it dynamic at its second
// value, 2 graphs where a guard per value makes one per call).
bool dynamic_int_source(const guards::Source& s) {
  using K = guards::Source::Kind;
  return s.kind == K::Local || s.kind == K::Closure || (s.kind == K::Attr && s.name == "cell_contents");
}
FloatSource dynamic_float_source(const guards::Source& s) {
  using K = guards::Source::Kind;
  if (s.kind == K::Local) return FloatSource::Input;
  if (s.kind == K::Global || s.kind == K::ModuleGlobal) return FloatSource::Attribute;
  if (s.kind == K::Attr || s.kind == K::GenericAttr) return FloatSource::Attribute;
  if (s.kind != K::Item && s.kind != K::DictItem) return FloatSource::Constant;
  for (const guards::Source* b = s.base.get(); b; b = b->base.get())
    if ((b->kind == K::Attr || b->kind == K::GenericAttr) && b->name == "__dict__") return FloatSource::Attribute;
  return FloatSource::Input;
}
}  // namespace

bool Tracer::code_dynamic_probe(py::handle probe, py::handle value, const guards::Source& src, bool automatic_only) {
  // automatic_only: as under compile(dynamic=None), dynamic once it changed (the default config), never at first sight.
  py::handle dyn = automatic_only && cb_dynamic.is(py::bool_(true)) ? py::handle(Py_None) : py::handle(cb_dynamic);
  py::object r = probe(py::handle(reinterpret_cast<PyObject*>(traced_code_)), dyn, value, shape_source_name(src));
  return r.cast<bool>();
}

void Tracer::request_restart(Restart r) { throw RestartTrace(std::move(r)); }

namespace {
Restart dynamic_input(const guards::Source& src) {
  return Restart::fake_tensors("input " + shape_source_name(src) + " is dynamic now (traced again with symbolic sizes)",
                               false);  // the probe recorded it in the frame's state
}
}  // namespace


ValuePtr Tracer::wrap_dynamic_scalar(py::handle value, const SourcePtr& src, const char* make, bool automatic_only) {
  if (!dynamic()) {
    if (code_dynamic_probe(services().observe_scalar, value, *src, automatic_only))
      request_restart(dynamic_input(*src));
    return nullptr;
  }
  // The value itself while static.
  py::object example =
      examples_.shapes().attr(make)(value, shape_source_name(*src), py::arg("automatic_only") = automatic_only);
  if (Py_TYPE(example.ptr()) == Py_TYPE(value.ptr())) return nullptr;
  guards.add(guards::type_match(src, value.ptr()));
  if (PyTuple_Check(example.ptr())) {
    // A float, as torch._dynamo passes it: the graph input is a 0-d float64 tensor (the call makes it from the
    // float), its item() a backed SymFloat (a branch on it is guarded on the input's value, after the trace).
    py::tuple pair = py::reinterpret_borrow<py::tuple>(example);
    graph::Node* in = graph.placeholder(placeholder_name(*src), pair[0]);
    inputs.push_back(Input{src, in, py::reinterpret_borrow<py::object>(value)});
    graph::Node* item = graph.call_method("item", {graph::Arg::ref(in)}, {}, pair[1]);
    return Value::sym_num(item, pair[1], src);
  }
  graph::Node* n = graph.placeholder(placeholder_name(*src), example);
  inputs.push_back(Input{src, n, py::reinterpret_borrow<py::object>(value)});
  return Value::sym_num(n, example, src);
}

ValuePtr Tracer::specialize(const ValuePtr& v) {
  if (v->is_sym()) return Value::constant(plain_number(v->sym().example));
  if (v->kind == VKind::Slice) {
    const SliceOf& s = v->slice();
    py::object a = specialize(s.start)->obj, b = specialize(s.stop)->obj, c = specialize(s.step)->obj;
    PyObject* sl = PySlice_New(a.ptr(), b.ptr(), c.ptr());  // new reference
    if (!sl) throw py::error_already_set();
    return Value::constant(py::reinterpret_steal<py::object>(sl));
  }
  if (v->kind == VKind::Tuple && !v->source) {
    std::vector<ValuePtr> items;
    bool changed = false;
    for (const auto& i : v->items) {
      items.push_back(specialize(i));
      changed |= items.back() != i;
    }
    if (!changed) return v;
    return Value::tuple(std::move(items), py::reinterpret_borrow<py::object>(v->tuple_class()));
  }
  return v;
}

namespace {
// A plain instance (of a Python class, or a C object such as a context-variable token), not a class,
// module, function, method or nn.Module: its identity is guarded only once the trace uses the object (see
// Value::pending_id).
bool lazy_identity(py::handle value) {
  PyObject* v = value.ptr();
  PyTypeObject* type = Py_TYPE(v);
  // A builtin method bound to an object (made anew on each attribute read) is lazy too; a builtin function
  // (its self a module, or none) is pinned.
  bool builtin_fn = PyCFunction_Check(v) && (!PyCFunction_GET_SELF(v) || PyModule_Check(PyCFunction_GET_SELF(v)));
  if (PyType_Check(v) || PyModule_Check(v) || PyFunction_Check(v) || builtin_fn || PyMethod_Check(v) ||
      PyCode_Check(v) || type == &PyMethodDescr_Type || type == &PyWrapperDescr_Type ||
      type == &PyClassMethodDescr_Type || type == &PyGetSetDescr_Type || type == &PyMemberDescr_Type ||
      type == &PyProperty_Type || type == &PyClassMethod_Type || type == &PyStaticMethod_Type)
    return false;
  return true;
}

// A plain Python function with closure cells and no keyword-only defaults, reached from the frame (not a global or
// a class attribute, which hold one function for the program's life): typically made anew on each call.
bool fresh_closure_of(py::handle value, const guards::Source& src) {
  PyObject* v = value.ptr();
  if (!PyFunction_Check(v) || !Py_IS_TYPE(v, &PyFunction_Type)) return false;
  if (!PyFunction_GET_CLOSURE(v) || PyFunction_GET_KW_DEFAULTS(v)) return false;
  using K = guards::Source::Kind;
  return src.kind == K::Local || src.kind == K::Item || src.kind == K::DictItem;
}

// What a closure made anew on every call (transformers' mask functions passed down each forward) is guarded by
// besides its type, while its identity waits for first use: its code and globals (what its calls and reads run) and
// no keyword-only defaults. Its closure cells, defaults and attributes are guarded where the trace reads them, as
// for a pinned function.
void add_closure_guards(guards::GuardSet& guards, const SourcePtr& src, PyObject* v) {
  guards.add(guards::id_match(guards::Source::attr(src, "__code__"), PyFunction_GET_CODE(v)));
  guards.add(guards::id_match(guards::Source::attr(src, "__globals__"), PyFunction_GET_GLOBALS(v)));
  guards.add(guards::id_match(guards::Source::attr(src, "__kwdefaults__"), Py_None));
}
}  // namespace

ValuePtr Tracer::wrap(py::handle value, SourcePtr src) {
  PyObject* v = value.ptr();
  // A container that holds itself (x = []; x.append(x)) or a huge nest of them is not modelled: bounded
  // depth and size instead of a walk that never ends.
  constexpr int kMaxDepth = 32;
  constexpr size_t kMaxWrapped = 20000;
  struct Depth {
    int& d;
    ~Depth() { --d; }
  } depth{++wrap_depth_};
  if (wrap_depth_ > kMaxDepth) unsupported("an object nested more than 32 levels deep (or a container that holds itself)");
  if (++wrapped_ > kMaxWrapped) unsupported("more than 20000 objects read from the frame's containers");
  if (guards::is_tensor(v)) {
    // The same tensor object seen through two sources shares one placeholder (aliasing preserved).
    for (const auto& in : inputs) {
      if (in.value.ptr() == v) {
        guards.add(guards::same_object(in.source, src));
        return Value::tensor(in.node, in.node->example_value, value.attr("device"), src);
      }
    }
    if (!dynamic() && code_dynamic_probe(services().observe_tensor, value, *src, false))
      request_restart(dynamic_input(*src));
    py::object example = examples_.of_input(value, shape_source_name(*src));
    std::string name = placeholder_name(*src);
    graph::Node* n = graph.placeholder(name, example);
    inputs.push_back(Input{src, n, py::reinterpret_borrow<py::object>(value)});
    if (examples_.guards_metadata_now()) guards.add(guards::tensor_match(src, v));
    return Value::tensor(n, example, value.attr("device"), src);
  }
  // An int argument, or a float argument, float in a list or dict of the frame (an optimizer's lr) or float attribute
  // (an nn.Module's lr): symbolic once it changed between compiles (dynamic_float_source). A float is a 0-d tensor
  // input and its item(), a backed SymFloat (wrap_dynamic_scalar).
  if (PyLong_CheckExact(v) && dynamic_int_source(*src)) {
    if (ValuePtr s = wrap_dynamic_scalar(value, src, "symint", false)) return s;
  } else if (PyFloat_CheckExact(v)) {
    FloatSource kind = dynamic_float_source(*src);
    if (kind != FloatSource::Constant)
      if (ValuePtr s = wrap_dynamic_scalar(value, src, "symfloat", kind == FloatSource::Attribute)) return s;
  }
  if (is_constant_object(value)) {
    guards.add(v == Py_None || PyBool_Check(v) || is_typing_form(value) ? guards::id_match(src, v)
                                                                        : guards::equals_match(src, v));
    return Value::constant(py::reinterpret_borrow<py::object>(value), src);
  }
  if (PyList_CheckExact(v) || PyDict_Check(v) || PySet_CheckExact(v)) {
    // A container object already read through another source is the same value (aliasing kept).
    auto seen = frame_containers.find(v);
    if (seen != frame_containers.end()) {
      guards.add(guards::same_object(seen->second->source, src));
      return seen->second;
    }
    bool plain = PyDict_CheckExact(v) || !PyDict_Check(v);  // else a dict subclass: a defaultdict, or nothing
    if (ValuePtr c = plain ? wrap_container(value, src) : wrap_default_dict(value, src)) {
      frame_containers[v] = c;
      return c;
    }
  }
  PyObject* vtype = reinterpret_cast<PyObject*>(Py_TYPE(v));
  if (PyTuple_CheckExact(v) || (PyTuple_Check(v) && (is_namedtuple_class(vtype) || is_structseq_class(vtype)))) {
    guards.add(guards::length_match(src, v));  // also the exact type: tuple or the namedtuple class
    std::vector<ValuePtr> items;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(v);
    for (Py_ssize_t i = 0; i < n; ++i)
      items.push_back(wrap(PySequence_Fast_GET_ITEM(v, i), guards::Source::item(src, static_cast<int>(i))));
    ValuePtr out = Value::tuple(std::move(items),  // a namedtuple's or struct sequence's class
                                PyTuple_CheckExact(v) ? py::object() : py::reinterpret_borrow<py::object>(vtype));
    out->source = src;
    return out;
  }
  // A bound method made anew on each call (`f(self.method)`): its receiver and its function, when the
  // function is what the receiver's class holds under its name (so `self.name` rebuilds it), not by identity.
  if (PyMethod_Check(v) && PyFunction_Check(PyMethod_GET_FUNCTION(v))) {
    PyObject* func = PyMethod_GET_FUNCTION(v);  // borrowed
    PyObject* self_obj = PyMethod_GET_SELF(v);  // borrowed
    py::str fname = py::reinterpret_borrow<py::object>(func).attr("__name__");
    PyObject* inst_dict = nullptr;  // borrowed
    if (PyObject** dp = _PyObject_GetDictPtr(self_obj)) inst_dict = *dp;
    bool shadowed = inst_dict && PyDict_Check(inst_dict) && PyDict_GetItemWithError(inst_dict, fname.ptr());
    if (PyErr_Occurred()) throw py::error_already_set();
    if (!shadowed && _PyType_Lookup(Py_TYPE(self_obj), fname.ptr()) == func) {
      guards.add(guards::type_match(src, v));
      ValuePtr self = wrap(self_obj, guards::Source::attr(src, "__self__"));
      return method_of(self, func, fname.cast<std::string>());
    }
    // A classmethod bound to its class (`MyFunction.apply`, a new bound method on each read): guarded by
    // its function and its class, as `cls.name` gives it again.
    PyObject* descr = PyType_Check(self_obj) ? _PyType_Lookup(reinterpret_cast<PyTypeObject*>(self_obj), fname.ptr())
                                             : nullptr;  // borrowed
    if (descr && Py_IS_TYPE(descr, &PyClassMethod_Type)) {
      py::object cm_func = py::reinterpret_borrow<py::object>(descr).attr("__func__");
      if (cm_func.ptr() == func) {
        guards.add(guards::type_match(src, v));
        guards.add(guards::id_match(guards::Source::attr(src, "__func__"), func));
        guards.add(guards::id_match(guards::Source::attr(src, "__self__"), self_obj));
        return Value::object(py::reinterpret_borrow<py::object>(value), src);
      }
    }
  }
  // Any other bound method (its function is not a plain Python function: functools.lru_cache's wrapper bound to a
  // logger, transformers' `logger.warning_once`): a new object on each read, so guarded by its function and its
  // receiver, which decide what calling it does, never by its own identity (that failed on every call).
  if (PyMethod_Check(v)) {
    guards.add(guards::type_match(src, v));
    guards.add(guards::id_match(guards::Source::attr(src, "__func__"), PyMethod_GET_FUNCTION(v)));
    guards.add(guards::id_match(guards::Source::attr(src, "__self__"), PyMethod_GET_SELF(v)));
    return Value::object(py::reinterpret_borrow<py::object>(value), src);
  }
  // The __exit__ of a grad-mode `with` block continued after a break (a process-lifetime constant).
  if (int mode = grad_exit_mode(value); mode >= 0) {
    guards.add(guards::id_match(src, v));
    return Value::grad_exit_value(py::reinterpret_borrow<py::object>(value), mode, src);
  }
  // A plain instance of a Python class: its type now, its identity on first use (Tracer::realize), so an
  // object made anew on each call that the trace only moves (a result passed on to a continuation, a value
  // returned) does not recompile; so is a closure reached from the frame (fresh_closure_of), also guarded by its
  // code and globals. Anything else: pinned by identity (attribute reads add their own guards).
  const bool fresh_closure = fresh_closure_of(value, *src);
  const bool lazy = fresh_closure || lazy_identity(value);
  if (lazy) {
    // One instance seen through two sources (a config every layer holds) is one value: the second source is
    // guarded to hold the same object, and everything the trace reads from it is guarded once, through the first.
    auto seen = frame_objects.find(v);
    if (seen != frame_objects.end()) {
      guards.add(guards::same_object(seen->second->source, src));
      return seen->second;
    }
  }
  ValuePtr out = Value::object(py::reinterpret_borrow<py::object>(value), src);
  if (lazy) {
    guards.add(guards::type_match(src, v));
    if (fresh_closure) add_closure_guards(guards, src, v);
    out->pending_id = std::make_shared<guards::Guard>(guards::id_match(src, v));
    frame_objects[v] = out;
  } else {
    guards.add(guards::id_match(src, v));
    if (PyFunction_Check(v) || PyType_Check(v)) {
      // A function or class pinned by identity through a second source (every layer's `type(layer).forward`):
      // the value of the first, so what the trace reads from it (closure cells, defaults) is guarded once.
      auto seen = frame_objects.find(v);
      if (seen != frame_objects.end()) return seen->second;
      frame_objects[v] = out;
    }
  }
  return out;
}

ValuePtr Tracer::wrap_frozen_dict(py::handle value, SourcePtr src) {
  // A dict keyed by classes or typing forms (a dispatch table: {Union: f, list: g}) whose values are classes,
  // functions or None, all compared by identity: its keys in order and, by equality with a snapshot, its values
  // are guarded, so the trace may look keys up in the copy it holds. (Numbers are left out: 1 == True.)
  PyObject* v = value.ptr();
  PyObject *k, *item;  // borrowed
  Py_ssize_t pos = 0;
  constexpr Py_ssize_t kMaxItems = 64;
  if (PyDict_GET_SIZE(v) > kMaxItems) return nullptr;
  while (PyDict_Next(v, &pos, &k, &item)) {
    if (!is_typing_form(k) && !PyType_Check(k)) return nullptr;
    if (item != Py_None && !PyType_Check(item) && !PyFunction_Check(item)) return nullptr;
  }
  py::object snapshot = py::reinterpret_steal<py::object>(PyDict_Copy(v));  // new reference
  if (!snapshot) throw py::error_already_set();
  guards.add(guards::dict_keys_match(src, v));
  guards.add(guards::equals_match(src, snapshot.ptr()));
  std::vector<py::object> keys;
  std::vector<ValuePtr> items;
  pos = 0;
  while (PyDict_Next(v, &pos, &k, &item)) {
    keys.push_back(py::reinterpret_borrow<py::object>(k));
    py::object val = py::reinterpret_borrow<py::object>(item);
    items.push_back(is_constant_object(val) ? Value::constant(val) : Value::object(val));
  }
  ValuePtr out = Value::dict(std::move(keys), std::move(items));
  out->source = std::move(src);
  out->set_frame_container(py::reinterpret_borrow<py::object>(value));  // the real object: identity for codegen
  return out;
}

ValuePtr Tracer::wrap_container(py::handle value, SourcePtr src) {
  PyObject* v = value.ptr();
  ValuePtr out;
  if (PyList_CheckExact(v)) {
    guards.add(guards::length_match(src, v));
    std::vector<ValuePtr> items;
    Py_ssize_t n = PyList_GET_SIZE(v);
    for (Py_ssize_t i = 0; i < n; ++i) {
      py::object item = py::reinterpret_borrow<py::object>(PyList_GET_ITEM(v, i));  // owned while wrapped
      items.push_back(wrap(item, guards::Source::item(src, static_cast<int>(i))));
    }
    out = Value::list(std::move(items));
  } else if (PyDict_CheckExact(v)) {
    // A dict with string keys: its keys (in order) are guarded, its values read through C-level lookups.
    PyObject *k, *item;  // borrowed
    Py_ssize_t pos = 0;
    bool str_keys = true;
    while (PyDict_Next(v, &pos, &k, &item))
      if (!PyUnicode_CheckExact(k)) str_keys = false;
    if (!str_keys) return wrap_frozen_dict(value, src);
    guards.add(guards::dict_keys_match(src, v));
    py::dict d = py::reinterpret_borrow<py::dict>(value);
    std::vector<py::object> keys;
    std::vector<ValuePtr> items;
    for (auto kv : d) {
      keys.push_back(py::reinterpret_borrow<py::object>(kv.first));
      items.push_back(wrap(kv.second, guards::Source::dict_item(src, py::str(kv.first).cast<std::string>())));
    }
    out = Value::dict(std::move(keys), std::move(items));
  } else if (PySet_CheckExact(v)) {
    std::vector<py::object> elements;
    for (auto e : py::reinterpret_borrow<py::set>(value)) {
      if (!is_constant_object(e) || guards::is_tensor(e.ptr())) return nullptr;
      elements.push_back(py::reinterpret_borrow<py::object>(e));
    }
    // The guard compares against the contents seen now, not against the live set.
    py::object copy = py::reinterpret_steal<py::object>(PySet_New(v));  // new
    if (!copy) throw py::error_already_set();
    guards.add(guards::equals_match(src, copy.ptr()));
    out = Value::set(std::move(elements));
  } else {
    return nullptr;
  }
  out->source = std::move(src);
  out->set_frame_container(py::reinterpret_borrow<py::object>(value));  // the real object: identity for codegen
  return out;
}

ValuePtr Tracer::load_global(const std::string& name) {
  py::str key(name);
  if (trusted_globals_) {
    // Globals of torch library code (an inlined torch.nn module): constants of the program, unguarded.
    PyObject* g = PyDict_GetItemWithError(fv.globals, key.ptr());  // borrowed
    if (!g && !PyErr_Occurred() && PyDict_Check(fv.builtins)) g = PyDict_GetItemWithError(fv.builtins, key.ptr());
    if (!g) {
      if (PyErr_Occurred()) throw py::error_already_set();
      unsupported("name '" + name + "' is not defined");
    }
    py::object o = py::reinterpret_borrow<py::object>(g);
    return is_constant_object(o) ? Value::constant(o) : Value::object(o);
  }
  // A global this trace assigned reads back the assigned value (the store is replayed later).
  if (in_frame_module())
    for (auto it = attr_stores.rbegin(); it != attr_stores.rend(); ++it)
      if (!it->obj && it->name == name) return it->value;
  bool other_module = fv.globals != frame_globals_;  // an inlined callee from another module
  PyObject* v = PyDict_GetItemWithError(fv.globals, key.ptr());  // borrowed
  if (v) return wrap(v, other_module ? guards::Source::module_global(fv.globals, name) : guards::Source::global(name));
  if (PyErr_Occurred()) throw py::error_already_set();
  if (other_module && PyDict_Check(fv.builtins)) {
    v = PyDict_GetItemWithError(fv.builtins, key.ptr());  // borrowed
    if (v) return wrap(v, guards::Source::module_builtin(fv.globals, fv.builtins, name));
    if (PyErr_Occurred()) throw py::error_already_set();
    unsupported("name '" + name + "' is not defined");
  }
  if (PyDict_Check(fv.builtins)) {
    v = PyDict_GetItemWithError(fv.builtins, key.ptr());  // borrowed
    if (v) {
      // Builtins are pinned by identity only when not shadowed; the ID guard on the builtin source
      // fails if a global of the same name appears later.
      return wrap(v, guards::Source::builtin(name));
    }
    if (PyErr_Occurred()) throw py::error_already_set();
  }
  unsupported("name '" + name + "' is not defined");
}

ValuePtr Tracer::pending_attr(const ValuePtr& obj, const std::string& name) {
  if (obj->kind != VKind::Object) return nullptr;
  // The same attribute assigned earlier in this trace through another value: whether that value is this
  // object decides what the read gives, so it is guarded (the same object, or a different one).
  if (obj->source)
    for (const auto& st : attr_stores)
      if (st.obj && st.obj.get() != obj.get() && st.obj->source && st.name == name &&
          alias_checked_.insert({st.obj.get(), obj.get()}).second)
        guards.add(st.obj->obj.is(obj->obj) ? guards::same_object(st.obj->source, obj->source)
                                            : guards::no_aliasing({st.obj->source, obj->source}));
  for (auto it = attr_stores.rbegin(); it != attr_stores.rend(); ++it)
    if (it->obj && it->obj->obj.is(obj->obj) && it->name == name) return it->value;
  return nullptr;
}

ValuePtr Tracer::load_attr(const ValuePtr& obj, const std::string& name) {
  // An attribute this trace assigned reads back the assigned value (the store is replayed later).
  if (ValuePtr v = pending_attr(obj, name)) return v;
  if (obj->super_of()) return super_attr(obj, name);
  if (obj->kind == VKind::Tuple && obj->tuple_class()) return namedtuple_attr(obj, name);
  if (obj->kind == VKind::Instance) return instance_attr(obj, name);
  if (obj->kind == VKind::Record) return record_attr(obj, name);
  switch (obj->kind) {
    case VKind::Tensor:
      return tensor_attr(*this, obj, name);
    case VKind::Object: {
      py::handle o = obj->obj;
      if (PyModule_Check(o.ptr())) {
        py::object a = py::reinterpret_steal<py::object>(PyObject_GetAttrString(o.ptr(), name.c_str()));
        if (!a) {
          PyErr_Clear();
          unsupported("module " + py::str(o).cast<std::string>() + " has no attribute '" + name + "'");
        }
        if (is_trusted_module(o)) {
          // torch / math / operator contents are treated as constants of the program.
          if (is_constant_object(a)) return Value::constant(a);
          return Value::object(a);
        }
        if (!obj->source && is_stdlib_module(o)) {
          // A stdlib module read from torch library globals (collections in torch.nn's _ntuple): as trusted.
          if (is_constant_object(a)) return Value::constant(a);
          return Value::object(a);
        }
        if (!obj->source) unsupported("attribute of a module without a source");
        return wrap(a, guards::Source::attr(obj->source, name));
      }
      return object_attr(obj, name);
    }
    case VKind::Const: {
      // Attributes of constants (e.g. dtype.is_floating_point, Size methods) are constant.
      py::object a = py::reinterpret_steal<py::object>(PyObject_GetAttrString(obj->obj.ptr(), name.c_str()));
      if (!a) {
        PyErr_Clear();
        unsupported("constant has no attribute '" + name + "'");
      }
      if (is_constant_object(a)) return Value::constant(a);
      // A Signature's parameters: a read-only view of the Signature's own (immutable) mapping.
      if (name == "parameters" && Py_IS_TYPE(a.ptr(), &PyDictProxy_Type) &&
          std::string(Py_TYPE(obj->obj.ptr())->tp_name) == "Signature")
        return Value::constant(a);
      if (PyCFunction_Check(a.ptr()) || Py_TYPE(a.ptr()) == &PyMethodDescr_Type ||
          std::string(Py_TYPE(a.ptr())->tp_name) == "builtin_function_or_method")
        return Value::object(a);
      unsupported("attribute '" + name + "' of a constant");
    }
    case VKind::Dict:
      if (obj->default_dict() && name == "default_factory") return obj->default_dict()->factory;
      [[fallthrough]];
    case VKind::List:
    case VKind::Set:
      return Value::method(obj, name);
    case VKind::Tuple:
      if (name == "count" || name == "index") return Value::method(obj, name);
      unsupported("attribute '" + name + "' of a tuple");
    default:
      unsupported("attribute '" + name + "' of " + obj->describe());
  }
}

graph::Arg Tracer::to_arg(const ValuePtr& v) {
  switch (v->kind) {
    case VKind::Tensor: return graph::Arg::ref(v->tensor().node);
    case VKind::SymNum: return graph::Arg::ref(v->sym().node);
    case VKind::Slice: {
      const SliceOf& s = v->slice();
      return graph::Arg::slice(to_arg(s.start), to_arg(s.stop), to_arg(s.step));
    }
    case VKind::Const:
      if (is_numpy_scalar(v->obj)) {  // numpy.float64(2.5) in the graph (its repr names `np`, which FX code lacks)
        py::object cls = py::reinterpret_borrow<py::object>(reinterpret_cast<PyObject*>(Py_TYPE(v->obj.ptr())));
        return graph::Arg::ref(graph.call_function(cls, {graph::Arg::constant(v->obj.attr("item")())}, {}, v->obj));
      }
      return graph::Arg::constant(v->obj);
    case VKind::Tuple:
    case VKind::List: {
      std::vector<graph::Arg> items;
      for (const auto& i : v->items) items.push_back(to_arg(i));
      return v->kind == VKind::Tuple ? graph::Arg::tuple(std::move(items)) : graph::Arg::list(std::move(items));
    }
    default:
      unsupported("cannot pass " + v->describe() + " to a graph operation");
  }
}

py::object Tracer::to_example(const ValuePtr& v) {
  switch (v->kind) {
    case VKind::Tensor: return v->tensor().example;
    case VKind::SymNum: return v->sym().example;
    case VKind::Slice: {
      const SliceOf& s = v->slice();
      py::object a = to_example(s.start), b = to_example(s.stop), c = to_example(s.step);
      PyObject* sl = PySlice_New(a.ptr(), b.ptr(), c.ptr());  // new reference
      if (!sl) throw py::error_already_set();
      return py::reinterpret_steal<py::object>(sl);
    }
    case VKind::Const: return v->obj;
    case VKind::Tuple: {
      py::tuple t(v->items.size());
      for (size_t i = 0; i < v->items.size(); ++i) t[i] = to_example(v->items[i]);
      return t;
    }
    case VKind::List: {
      py::list l;
      for (const auto& i : v->items) l.append(to_example(i));
      return l;
    }
    default:
      unsupported("cannot pass " + v->describe() + " to a graph operation");
  }
}

ValuePtr Tracer::wrap_result(graph::Node* node, py::handle result, py::object device) {
  if (guards::is_tensor(result.ptr())) {
    if (!examples_.valid_result(result)) unsupported("operation produced a non-meta tensor during tracing");
    return Value::tensor(node, py::reinterpret_borrow<py::object>(result), device);
  }
  if (PyTuple_Check(result.ptr()) || PyList_Check(result.ptr())) {
    py::sequence seq = py::reinterpret_borrow<py::sequence>(result);
    std::vector<ValuePtr> items;
    auto& refs = PyRefs::get();
    py::object getitem = refs.operator_mod.attr("getitem");
    for (size_t i = 0; i < seq.size(); ++i) {
      py::object item = seq[i];
      if (item.is_none()) {  // an output the op leaves out (attention weights not asked for): None
        items.push_back(Value::constant(item));
        continue;
      }
      if (!guards::is_tensor(item.ptr())) unsupported("operation returned a sequence with non-tensor items");
      graph::Node* n = graph.call_function(getitem, {graph::Arg::ref(node), graph::Arg::constant(py::int_(i))}, {},
                                           item);
      items.push_back(wrap_result(n, item, device));
    }
    if (PyList_Check(result.ptr())) return Value::list(std::move(items));
    py::handle type = reinterpret_cast<PyObject*>(Py_TYPE(result.ptr()));
    py::object cls;  // torch.return_types
    if (is_structseq_class(type)) cls = py::reinterpret_borrow<py::object>(type);
    return Value::tuple(std::move(items), std::move(cls));
  }
  unsupported("operation returned " + std::string(Py_TYPE(result.ptr())->tp_name) + ", not a tensor");
}

}  // namespace cdynamo::interp
