// graph_break.cpp — owns codegen at a graph break: the rewritten frame (graph call, rebuilt state, the
// breaking instruction run as Python) and the __resume_at continuations that re-enter the original bytecode.
#include <algorithm>
#include <optional>
#include <unordered_map>

#include "codegen/codegen.h"
#include "codegen/emitter.h"
#include "codegen/rebuild.h"
#include "codegen/resume_info.h"
#include "bytecode/flow.h"
#include "compat/compat.h"
#include "compat/opargs.h"

namespace cdynamo::codegen {

using interp::Tracer;
using interp::ValuePtr;
using interp::VKind;

namespace {

int nlocals_of(const Tracer& t) { return static_cast<int>(t.frame().code->co_nlocals); }

// A cell or free variable slot (read and written through LOAD_DEREF / STORE_DEREF, shared with closures).
bool is_deref_slot(PyCodeObject* code, int slot) {
  return (compat::code_localsplus_kind(code, slot) & (compat::kFastCell | compat::kFastFree)) != 0;
}

// The cell and free variable slots of `code`, in slot order.
std::vector<int> deref_slots(PyCodeObject* code) {
  std::vector<int> out;
  for (int s = 0; s < compat::code_nlocalsplus(code); ++s)
    if (is_deref_slot(code, s)) out.push_back(s);
  return out;
}

bool is_conditional(const Tracer& t) { return t.output().conditional_break; }

// Stack items consumed by the breaking instruction (it runs as Python in the rewritten code); < 0 when it
// cannot be restarted.
int consumed_by(const bytecode::Instruction& i) { return interp::restart_operands(i); }

// What the rewritten frame holds in a local when the continuation is called.
enum class LocalState { Untouched, Unchanged, Store, Delete };

LocalState local_state(const Tracer& t, int slot) {
  int nargs = compat::code_total_args(t.frame().code);
  if (!t.frame().local_loaded[slot]) return LocalState::Untouched;
  const ValuePtr& v = t.frame().locals[slot];
  if (!v) return slot < nargs ? LocalState::Delete : LocalState::Untouched;
  const guards::Source* s = v->source.get();
  if (slot < nargs && s && s->kind == guards::Source::Kind::Local && s->index == slot) return LocalState::Unchanged;
  if (s && s->kind == guards::Source::Kind::Closure && s->index == slot) return LocalState::Unchanged;
  return LocalState::Store;
}

// The user's code a continuation is made from: the frame's own code, or the one a __resume_at_* frame
// continues (so continuations of continuations do not grow, and decoding/liveness are done once per code).
struct Origin {
  PyCodeObject* code;                // borrowed
  const OriginInfo* info;            // borrowed, lives with `code`
  const ResumeInfo* resume;          // the traced frame's own record, or nullptr when it is user code
  // Index in the origin's bytecode of the traced frame's instruction `i`.
  size_t index(size_t i) const {
    if (!resume) return i;
    int o = i < resume->origin_index.size() ? resume->origin_index[i] : -1;
    if (o < 0) throw interp::Unsupported("graph break in a continuation's prologue");
    return static_cast<size_t>(o);
  }
  // The traced frame's slot holding the origin's local `slot`.
  int slot(int s) const { return resume ? resume->slot_in_resume[static_cast<size_t>(s)] : s; }
};

Origin origin_of(const Tracer& t) {
  Origin o{t.frame().code, nullptr, resume_info(t.frame().code)};
  if (o.resume) {
    o.code = reinterpret_cast<PyCodeObject*>(o.resume->origin.ptr());
    // The traced frame's instructions must be the continuation's prologue followed by the origin's body.
    o.info = &origin_info(o.code);
    const auto& map = o.resume->origin_index;
    bool same = t.frame().bc.insts.size() == map.size();
    static const int load_fast = bytecode::opcode_by_name("LOAD_FAST");
    static const int store_fast = bytecode::opcode_by_name("STORE_FAST");
    for (size_t i = 0; same && i < map.size(); ++i) {
      if (map[i] < 0) continue;
      const int mine = t.frame().bc.insts[i]->opcode, orig = o.info->bc.insts[static_cast<size_t>(map[i])]->opcode;
      // A 3.13 paired fast-local instruction split by make_resume keeps its record in its first half.
      same = mine == orig || (bytecode::is_paired_fast(orig) && (mine == load_fast || mine == store_fast));
    }
    if (!same) throw interp::Unsupported("continuation bytecode does not match its record");
    return o;
  }
  o.info = &origin_info(o.code);
  return o;
}

// Locals of the origin live at its instruction `target` and bound in the rewritten frame at the continuation
// call, as origin slots.
std::vector<int> passed_locals(const Tracer& t, const Origin& o, size_t target) {
  int nargs = compat::code_total_args(t.frame().code);
  const std::vector<char>& live = o.info->live[target];
  std::vector<int> out;
  for (int s = 0; s < static_cast<int>(live.size()); ++s) {
    if (!live[static_cast<size_t>(s)] || is_deref_slot(o.code, s)) continue;  // cells go in the closure
    int slot = o.slot(s);
    LocalState st = local_state(t, slot);
    bool bound = st == LocalState::Store || st == LocalState::Unchanged || (st == LocalState::Untouched && slot < nargs);
    if (bound) out.push_back(s);
  }
  return out;
}

// A tail call to the chain continuation of a cut, in a continuation's copy of the origin.
struct Tail {
  bytecode::Instruction* first;       // its first instruction (jumps to the cut land here)
  bytecode::Instruction* load_chain;  // LOAD_CONST of the chain's code (argument patched by make_resume)
  size_t cut;                         // origin index of the cut
};

// A copy of the instructions of `src` reachable from `entry` (program order kept); `kept` gets the index in
// `src` of each copied instruction (-1 for instructions made here). Code before a continuation's entry that
// no path reaches again is dropped, so a function with N breaks does not make N copies of its whole body.
// In a long function the copy also stops at the cuts of its window plan (other than `entry`): each cut
// reached becomes `return chain(live locals)` (listed in `tails`), the rest of the body being the chain's.
bytecode::Bytecode clone_reachable(const OriginInfo& src, size_t entry, std::vector<int>& kept,
                                   std::vector<Tail>& tails) {
  const size_t n = src.bc.insts.size();
  const WindowPlan& plan = src.windows;
  auto is_cut = [&](size_t k) { return plan.any() && k != entry && plan.cut[k]; };
  std::vector<char> reach(n, 0);
  std::vector<size_t> work{entry};
  reach[entry] = 1;
  while (!work.empty()) {
    size_t i = work.back();
    work.pop_back();
    if (is_cut(i)) continue;
    for (size_t s : src.succ[i])
      if (!reach[s]) {
        reach[s] = 1;
        work.push_back(s);
      }
  }
  bytecode::Bytecode out;
  std::vector<bytecode::Instruction*> map(n, nullptr);
  for (size_t k = 0; k < n; ++k) {
    if (!reach[k]) continue;
    const auto& i = src.bc.insts[k];
    if (is_cut(k)) {
      auto add = [&](const char* op, int arg) {
        bytecode::Instruction* c = out.append(bytecode::opcode_by_name(op), arg);
        c->pos = i->pos;
        kept.push_back(-1);
        return c;
      };
      // [NULL,] chain function [, NULL] (this Python's call layout), the live locals, the call.
      const bool null_first = compat::opargs::kNullBeforeCallable;
      Tail tail{null_first ? add("PUSH_NULL", 0) : nullptr, nullptr, k};
      tail.load_chain = add("LOAD_CONST", 0);
      if (!tail.first) tail.first = tail.load_chain;
      for (const auto& [op, arg] : Emitter::make_function_sequence(false)) add(bytecode::opname(op), arg);
      if (!null_first) add("PUSH_NULL", 0);
      for (int slot : plan.args[k]) add("LOAD_FAST", slot);  // origin slots, remapped with the body's
      const int nargs = static_cast<int>(plan.args[k].size());
      for (const auto& [op, arg] : Emitter::call_sequence(nargs)) add(bytecode::opname(op), arg);
      add("RETURN_VALUE", 0);
      map[k] = tail.first;
      tails.push_back(tail);
      continue;
    }
    bytecode::Instruction* c = out.append(i->opcode, i->arg);
    c->offset = i->offset;
    c->pos = i->pos;
    map[k] = c;
    kept.push_back(static_cast<int>(k));
  }
  for (size_t k = 0; k < n; ++k)
    if (map[k] && !is_cut(k) && src.bc.insts[k]->target)
      map[k]->target = map[static_cast<size_t>(src.bc.index_of(src.bc.insts[k]->target))];
  // An exception entry keeps the reachable part of its range (contiguous in the copy: the range's
  // instructions are consecutive in `src` and the copy keeps their order; cuts are outside every range).
  for (const auto& e : src.bc.exception_table) {
    int s = src.bc.index_of(e.start), t = src.bc.index_of(e.end);
    bytecode::Instruction *first = nullptr, *last = nullptr;
    for (int k = s; k <= t; ++k)
      if (map[static_cast<size_t>(k)]) {
        if (!first) first = map[static_cast<size_t>(k)];
        last = map[static_cast<size_t>(k)];
      }
    if (first) out.exception_table.push_back({first, last, map[static_cast<size_t>(src.bc.index_of(e.target))], e.depth, e.lasti});
  }
  return out;
}

// Builds `__resume_at_<offset>_<n>(stack..., locals...)` from the origin code: a prologue that rebuilds the
// stack (NULLs where the original stack had them (null_at 1); where it had the __exit__ of a torch context block
// (null_at 2), that context made by calling enter_at[i] and entered, as the block's BEFORE_WITH does) and jumps
// into a copy of the origin's bytecode at `target`; `passed` are origin slots. Records where its parts came from (resume_info).
Resume make_resume(const Origin& o, size_t target, const std::vector<char>& null_at, const std::vector<int>& passed,
                   int& counter, const std::vector<py::object>& enter_at = {});

// The code of the chain continuation at `cut` (origin index), made once per origin and cut while one of
// the continuations calling it lives: the origin's body from the cut (up to its next cuts), taking the
// locals live at the cut.
py::object chain_code(const Origin& o, size_t cut, int& counter) {
  auto& chains = o.info->chains;
  auto it = chains.find(cut);
  if (it != chains.end()) {
    PyObject* alive = compat::weakref_get(it->second.ptr());  // new reference; nullptr once dead
    if (alive) return py::reinterpret_steal<py::object>(alive);
  }
  Origin base{o.code, o.info, nullptr};
  Resume r = make_resume(base, cut, {}, o.info->windows.args[cut], counter);
  PyObject* ref = PyWeakref_NewRef(r.code.ptr(), nullptr);  // new reference
  if (!ref) throw py::error_already_set();
  chains[cut] = py::reinterpret_steal<py::object>(ref);
  return r.code;
}

// A continuation holds the origin's cell variables as free variables, and CPython names a read or `del` of an empty
// free variable NameError where the origin raises UnboundLocalError. Before each DELETE_DEREF of such a slot, and each
// LOAD_DEREF of one the origin deletes somewhere, the body calls interp::unbound_cell_check()(cell, name), which raises
// the origin's error. The instruction itself becomes the first of the call (jumps and the exception table refer to it).
// Not on 3.13, where a cell is loaded with LOAD_FAST of a slot that Emitter::finish shifts.
void check_unbound_cells(const Origin& o, bytecode::Bytecode& body, std::vector<int>& kept, Emitter& e,
                         const std::vector<int>& origin_slot_of) {
  if (!compat::opargs::kHasLoadClosure) return;
  const int del_deref = bytecode::opcode_by_name("DELETE_DEREF"), load_deref = bytecode::opcode_by_name("LOAD_DEREF");
  std::vector<char> deleted(static_cast<size_t>(compat::code_nlocalsplus(o.code)), 0);
  for (const auto& i : o.info->bc.insts)
    if (i->opcode == del_deref) deleted.at(static_cast<size_t>(i->arg)) = 1;
  for (size_t k = 0; k < body.insts.size(); ++k) {
    bytecode::Instruction* i = body.insts[k].get();
    if (i->opcode != del_deref && i->opcode != load_deref) continue;
    int slot = origin_slot_of.at(static_cast<size_t>(i->arg));
    if (slot < 0 || (compat::code_localsplus_kind(o.code, slot) & compat::kFastFree) ||
        (i->opcode == load_deref && !deleted[static_cast<size_t>(slot)]))
      continue;
    std::vector<std::pair<int, int>> seq;
    if (compat::opargs::kNullBeforeCallable) seq.emplace_back(bytecode::opcode_by_name("PUSH_NULL"), 0);
    seq.emplace_back(bytecode::opcode_by_name("LOAD_CONST"), e.const_index(interp::unbound_cell_check()));
    if (!compat::opargs::kNullBeforeCallable) seq.emplace_back(bytecode::opcode_by_name("PUSH_NULL"), 0);
    seq.emplace_back(bytecode::opcode_by_name("LOAD_CLOSURE"), i->arg);
    py::object name = py::reinterpret_borrow<py::object>(compat::code_localsplus_name(o.code, slot));
    seq.emplace_back(bytecode::opcode_by_name("LOAD_CONST"), e.const_index(name));
    for (const auto& c : Emitter::call_sequence(2)) seq.push_back(c);
    seq.emplace_back(bytecode::opcode_by_name("POP_TOP"), 0);
    seq.emplace_back(i->opcode, i->arg);  // the original instruction, last
    i->opcode = seq[0].first;
    i->arg = seq[0].second;
    bytecode::Instruction* last = i;
    const int origin_index = kept[k];  // the original instruction keeps it too: a graph break may stop there
    for (size_t s = 1; s < seq.size(); ++s) {
      last = body.insert(k + s, seq[s].first, seq[s].second);
      last->pos = i->pos;
      kept.insert(kept.begin() + static_cast<long>(k + s), s + 1 == seq.size() ? origin_index : -1);
    }
    for (auto& entry : body.exception_table)
      if (entry.end == i) entry.end = last;  // `end` is the last covered instruction
    k += seq.size() - 1;
  }
}

Resume make_resume(const Origin& o, size_t target, const std::vector<char>& null_at, const std::vector<int>& passed,
                   int& counter, const std::vector<py::object>& enter_at) {
  const bytecode::Bytecode& src = o.info->bc;
  Resume r;
  r.name = "__resume_at_" + std::to_string(src.insts[target]->offset) + "_c" + std::to_string(++counter);
  py::tuple old_names = py::handle(reinterpret_cast<PyObject*>(o.code)).attr("co_varnames");
  int nlocals = static_cast<int>(old_names.size());
  // The origin's cells and free variables become the continuation's free variables (its closure is the
  // rewritten frame's cells); its plain locals become arguments (live ones) and locals.
  const std::vector<int> derefs = deref_slots(o.code);
  py::list names;
  std::vector<int> remap(static_cast<size_t>(compat::code_nlocalsplus(o.code)), -1);
  int nstack_args = 0;
  for (size_t i = 0; i < null_at.size(); ++i)
    if (!null_at[i]) names.append(py::str("___stack" + std::to_string(nstack_args++)));
  for (int slot : passed) {
    remap[slot] = static_cast<int>(names.size());
    names.append(old_names[slot]);
  }
  int argcount = static_cast<int>(names.size());
  for (int slot = 0; slot < nlocals; ++slot) {
    if (remap[slot] >= 0 || is_deref_slot(o.code, slot)) continue;
    remap[slot] = static_cast<int>(names.size());
    names.append(old_names[slot]);
  }
  py::list freevars;
  for (int slot : derefs) {
    remap[static_cast<size_t>(slot)] = static_cast<int>(names.size() + freevars.size());
    freevars.append(py::reinterpret_borrow<py::object>(compat::code_localsplus_name(o.code, slot)));
  }
  std::vector<int> kept;
  std::vector<Tail> tails;
  bytecode::Bytecode body = clone_reachable(*o.info, target, kept, tails);
  static const std::vector<int> local_ops = {
      bytecode::opcode_by_name("LOAD_FAST"), bytecode::opcode_by_name("STORE_FAST"),
      bytecode::opcode_by_name("DELETE_FAST"), bytecode::opcode_by_name("LOAD_DEREF"),
      bytecode::opcode_by_name("STORE_DEREF"), bytecode::opcode_by_name("DELETE_DEREF"),
      bytecode::opcode_by_name("LOAD_CLOSURE"), bytecode::opcode_by_name("LOAD_CLASSDEREF"),
      bytecode::opcode_by_name("LOAD_FAST_CHECK"), bytecode::opcode_by_name("LOAD_FAST_AND_CLEAR"),
      bytecode::opcode_by_name("LOAD_FROM_DICT_OR_DEREF")};
  for (size_t k = 0; k < body.insts.size(); ++k) {
    bytecode::Instruction* i = body.insts[k].get();
    if (bytecode::is_paired_fast(i->opcode)) {
      // 3.13's paired forms hold two slots of 4 bits each: remapped slots past 15 split the pair into its
      // two single-slot instructions (the first stays this instruction, which jumps and the exception table
      // refer to).
      const std::vector<bytecode::FastAccess> acc = bytecode::fast_accesses(*i);
      int to[2];
      for (int h = 0; h < 2; ++h) {
        to[h] = remap.at(static_cast<size_t>(acc[static_cast<size_t>(h)].slot));
        if (to[h] < 0) throw interp::Unsupported("a continuation reads a slot it does not have");
      }
      if (to[0] < 16 && to[1] < 16) {
        i->arg = compat::opargs::fast_pair_arg(to[0], to[1]);
        continue;
      }
      auto single = [](bytecode::FastAccess::Kind kind) {
        return bytecode::opcode_by_name(kind == bytecode::FastAccess::Read ? "LOAD_FAST" : "STORE_FAST");
      };
      i->opcode = single(acc[0].kind);
      i->arg = to[0];
      bytecode::Instruction* second = body.insert(k + 1, single(acc[1].kind), to[1]);
      second->pos = i->pos;
      kept.insert(kept.begin() + static_cast<long>(k) + 1, -1);
      ++k;
      continue;
    }
    if (std::find(local_ops.begin(), local_ops.end(), i->opcode) != local_ops.end()) {
      int to = remap.at(static_cast<size_t>(i->arg));
      if (to < 0) throw interp::Unsupported("a continuation reads a slot it does not have");
      i->arg = to;
    }
  }
  Emitter e(o.code);
  std::vector<int> origin_slot_of(names.size() + freevars.size(), -1);
  for (size_t s = 0; s < remap.size(); ++s)
    if (remap[s] >= 0) origin_slot_of[static_cast<size_t>(remap[s])] = static_cast<int>(s);
  check_unbound_cells(o, body, kept, e, origin_slot_of);
  size_t entry_at = static_cast<size_t>(std::find(kept.begin(), kept.end(), static_cast<int>(target)) - kept.begin());
  bytecode::Instruction* entry = body.insts[entry_at].get();
  size_t at = 0;
  auto pro = [&](const char* op, int arg) {
    bytecode::Instruction* i = body.insert(at++, bytecode::opcode_by_name(op), arg);
    i->pos = entry->pos;
    return i;
  };
  if (!derefs.empty()) pro("COPY_FREE_VARS", static_cast<int>(derefs.size()));
  pro("RESUME", 0);
  int k = 0;
  for (size_t s = 0; s < null_at.size(); ++s) {
    if (null_at[s] == 1) {
      pro("PUSH_NULL", 0);
    } else if (null_at[s] == 2) {  // [NULL] make [NULL] CALL 0; BEFORE_WITH; POP_TOP: the block's __exit__ stays
      if (compat::opargs::kNullBeforeCallable) pro("PUSH_NULL", 0);
      pro("LOAD_CONST", e.const_index(enter_at.at(s)));
      if (!compat::opargs::kNullBeforeCallable) pro("PUSH_NULL", 0);
      for (const auto& [op, arg] : Emitter::call_sequence(0)) body.insert(at++, op, arg)->pos = entry->pos;
      pro("BEFORE_WITH", 0);
      pro("POP_TOP", 0);
    } else {
      pro("LOAD_FAST", k++);
    }
  }
  pro("JUMP_FORWARD", 0)->target = entry;

  auto* info = new ResumeInfo();
  info->origin = py::reinterpret_borrow<py::object>(reinterpret_cast<PyObject*>(o.code));
  info->origin_index.assign(at, -1);
  info->origin_index.insert(info->origin_index.end(), kept.begin(), kept.end());
  info->slot_in_resume = remap;
  info->owned_free.assign(names.size() + freevars.size(), 0);
  for (int slot : derefs)
    if (!(compat::code_localsplus_kind(o.code, slot) & compat::kFastFree))
      info->owned_free[static_cast<size_t>(remap[static_cast<size_t>(slot)])] = 1;

  e.bc = std::move(body);
  info->tail_cut.assign(e.bc.insts.size(), -1);
  for (const Tail& tail : tails) {
    tail.load_chain->arg = e.const_index(chain_code(o, tail.cut, counter));
    info->tail_cut[static_cast<size_t>(e.bc.index_of(tail.first))] = static_cast<int>(tail.cut);
  }
  e.set_varnames(names, argcount);
  if (!derefs.empty()) {
    e.set_freevars(py::tuple(freevars));
    r.closure = true;
  }
  r.code = e.finish(true, r.name);
  set_resume_info(reinterpret_cast<PyCodeObject*>(r.code.ptr()), info);
  return r;
}

// Pushes the stack items below the breaking instruction's operands, except NULLs (a continuation's
// prologue recreates those).
void emit_deep_stack(Rebuilder& rb, const Tracer& t, size_t ndeep) {
  for (size_t i = 0; i < ndeep; ++i) {
    const ValuePtr& v = t.frame().stack[i];
    if (v->kind == VKind::Null || v->ctx_exit()) continue;  // recreated by the continuation's prologue
    rb.push(v);
  }
}

// Pushes the continuation as a plain callable with its NULL (this Python's call layout): the published global, or for a continuation with a closure, the function
// made here from its code and the rewritten frame's cells (origin cell/free slot s is the frame's o.slot(s)).
void emit_resume_fn(Emitter& e, const Resume& r, const Origin& o) {
  if (!r.closure) {
    e.load_global(r.name, true);
    return;
  }
  e.null_before_callable();
  const std::vector<int> derefs = deref_slots(o.code);
  for (int s : derefs) e.load_closure(o.slot(s));
  e.emit("BUILD_TUPLE", static_cast<int>(derefs.size()));
  e.load_const(r.code);
  e.make_function(true);
  e.null_after_callable();
}

// Slots whose final value the rewritten frame stores before calling the continuation: plain locals below
// co_nlocals, cells, and free variables the frame owns (a continuation's cells of its origin).
bool rebuilt_slot(const Tracer& t, int slot) {
  int kind = compat::code_localsplus_kind(t.frame().code, slot);
  if (kind & compat::kFastFree) return t.options().owns_free(slot);
  return (kind & compat::kFastCell) || slot < nlocals_of(t);
}

}  // namespace

std::vector<ValuePtr> break_values(const Tracer& t) {
  std::vector<ValuePtr> values(t.frame().stack.begin(), t.frame().stack.end());
  for (size_t slot = 0; slot < t.frame().locals.size(); ++slot)
    if (rebuilt_slot(t, static_cast<int>(slot)) && local_state(t, static_cast<int>(slot)) == LocalState::Store)
      values.push_back(t.frame().locals[slot]);
  return values;
}

namespace {

// The rewritten frame of one graph break while it is emitted: the graph call and the frame's state are emitted
// first (begin), then one of the three ways to continue (window_end, conditional, instruction), then the grad-mode
// handler (finish_grad_block).
struct BreakEmitter {
  const Tracer& t;
  int& counter;
  BreakCode out;
  const size_t pc;
  const bytecode::Instruction& inst;
  const Origin origin;
  Emitter e;
  int tmp = -1;                    // the local holding the graph's outputs, or -1 when no graph runs
  size_t ndeep = 0;                // stack items below the breaking instruction's operands
  std::vector<char> deep_null;     // per deep item: 1 a NULL, 2 a torch context's __exit__ (neither passed to the
                                   // continuation: its prologue makes them), 0 otherwise
  std::vector<py::object> deep_enter;  // per deep item: for a torch context's __exit__, what makes the context
  std::vector<int> ctx_exits;      // locals holding the __exit__ of the contexts entered around the instruction
  size_t grad_range_start = 0;
  std::optional<Rebuilder> rb;

  BreakEmitter(const Tracer& tr, int& c)
      : t(tr),
        counter(c),
        pc(tr.frame().pc),
        inst(*tr.frame().bc.insts[tr.frame().pc]),
        origin(origin_of(tr)),
        e(tr.frame().code) {}

  void begin(const std::string& compiled_name, const std::vector<graph::Node*>& outputs, int consumed);
  void call_resume(int extra_on_stack, const std::vector<int>& passed);
  void window_end(int cut);
  void conditional();
  void instruction(int consumed);
  void rebuild_operands(bool is_call);
  void enter_contexts();
  void leave_contexts();
  void exit_all_contexts();
  void finish_grad_block();
};

// The graph call, then the values the rewritten frame rebuilds, the side effects and the locals it stores: sources
// name the frame's state at entry, so everything the rewritten frame rebuilds is read before the side effects are
// written and before any local is stored or deleted (`r = x; x = f(x)` leaves `r` reading local 'x', which the
// rewritten frame rebinds below).
void BreakEmitter::begin(const std::string& compiled_name, const std::vector<graph::Node*>& outputs, int consumed) {
  ndeep = t.frame().stack.size() - static_cast<size_t>(consumed);
  e.copy_prefix(t.frame().bc);
  if (!compiled_name.empty()) {
    tmp = e.add_local("___graph_out");
    e.load_global(compiled_name, true);
    e.call(e.load_graph_inputs(t.trace()));
    e.emit("STORE_FAST", tmp);
  }
  rb.emplace(e, outputs, tmp);
  const std::vector<ValuePtr> rebuilt = break_values(t);
  std::vector<ValuePtr> roots = rebuilt;
  for (const auto& v : effect_values(t.trace())) roots.push_back(v);
  rb->share(roots);
  if (Rebuilder::has_effects(t.trace())) {
    rb->stage_effects(t.trace());
    for (const auto& v : rebuilt)  // a NULL or a torch context's __exit__ is not rebuilt (emit_deep_stack)
      if (v->kind != VKind::Null && !v->ctx_exit()) rb->pin(v->kind == VKind::Method ? v->bound_self() : v);
    rb->commit_effects();
  } else {
    for (const auto& v : rebuilt)
      if (reads_frame_locals(v)) rb->pin(v->kind == VKind::Method ? v->bound_self() : v);
  }
  // A break inside `with torch.no_grad()/enable_grad()`: the rest of the frame runs in the block's mode; an exception
  // from it (the breaking instruction, the continuation) leaves with the frame's mode again (finish_grad_block).
  if (t.output().grad_mode_after_graph >= 0) rb->set_grad_mode(t.output().grad_mode_after_graph == 1);
  grad_range_start = e.bc.insts.size();
  deep_null.resize(ndeep);
  deep_enter.resize(ndeep);
  for (size_t i = 0; i < ndeep; ++i) {
    const ValuePtr& v = t.frame().stack[i];
    deep_null[i] = v->kind == VKind::Null ? 1 : v->ctx_exit() ? 2 : 0;
    if (const interp::CtxExitOf* x = v->ctx_exit()) {
      deep_enter[i] = x->spec->make;
      ctx_exits.push_back(e.add_local("___ctx_exit" + std::to_string(ctx_exits.size())));
      e.load_const(py::none());  // unbound until entered: the handler (finish_grad_block) skips None
      e.emit("STORE_FAST", ctx_exits.back());
    }
  }
  for (int slot = 0; slot < static_cast<int>(t.frame().locals.size()); ++slot) {
    if (!rebuilt_slot(t, slot)) continue;
    bool cell = is_deref_slot(t.frame().code, slot);  // written into the frame's cell (which closures share)
    LocalState st = local_state(t, slot);
    if (st == LocalState::Store) {
      rb->push(t.frame().locals[slot]);
      e.emit(cell ? "STORE_DEREF" : "STORE_FAST", slot);
    } else if (st == LocalState::Delete) {
      e.emit(cell ? "DELETE_DEREF" : "DELETE_FAST", slot);
    }
  }
}

// Inside torch context blocks the breaking instruction runs in them, as in eager: each made again and entered,
// outermost first (its __exit__ kept in a local), then left after the instruction; the continuation enters them
// again in its prologue.
void BreakEmitter::enter_contexts() {
  size_t k = 0;
  for (size_t i = 0; i < ndeep; ++i) {
    if (deep_null[i] != 2) continue;
    e.load_callable(deep_enter[i]);
    e.call(0);
    e.emit("BEFORE_WITH");
    e.emit("POP_TOP");
    e.emit("STORE_FAST", ctx_exits[k++]);
  }
}

// Calls each __exit__ held in ctx_exits (None: not entered), innermost first (ctx_exit_all_callable).
void BreakEmitter::exit_all_contexts() {
  e.load_callable(interp::ctx_exit_all_callable());
  for (int slot : ctx_exits) e.emit("LOAD_FAST", slot);
  e.call(static_cast<int>(ctx_exits.size()));
  e.emit("POP_TOP");
}

void BreakEmitter::leave_contexts() {
  if (ctx_exits.empty()) return;
  exit_all_contexts();
  for (int slot : ctx_exits) {  // left: an exception from the continuation must not leave them again
    e.load_const(py::none());
    e.emit("STORE_FAST", slot);
  }
}

// Stack now: [NULL, fn, deep..., extra...] (3.13: [fn, NULL, ...]); adds the locals (origin slots, held in the
// frame's) and calls the continuation, returning what it returns.
void BreakEmitter::call_resume(int extra_on_stack, const std::vector<int>& passed) {
  for (int slot : passed) e.emit("LOAD_FAST", origin.slot(slot));
  int nargs = 0;
  for (char n : deep_null) nargs += n ? 0 : 1;
  nargs += extra_on_stack + static_cast<int>(passed.size());
  e.call(nargs);
  e.emit("RETURN_VALUE");
}

// The end of a continuation's window: the frame's state goes to the chain continuation of the cut.
void BreakEmitter::window_end(int cut) {
  if (ndeep != 0) throw interp::Unsupported("a continuation window ends with values on the stack");
  const std::vector<int>& args = origin.info->windows.args[static_cast<size_t>(cut)];
  if (passed_locals(t, origin, static_cast<size_t>(cut)) != args)
    throw interp::Unsupported("a local live after a continuation window is not bound");
  e.null_before_callable();
  e.load_const(chain_code(origin, static_cast<size_t>(cut), counter));
  e.make_function(false);
  e.null_after_callable();
  if (tmp >= 0) e.emit("DELETE_FAST", tmp);
  rb->release();
  call_resume(0, args);
}

// A jump on a tensor's truth value: the rewritten frame jumps on it, each branch calling its own continuation.
void BreakEmitter::conditional() {
  rb->push(t.frame().stack.back());
  std::optional<Emitter::Jump> kind = Emitter::pop_jump_kind(inst.opcode);
  if (!kind) throw interp::Unsupported(std::string("cannot restart ") + bytecode::opname(inst.opcode));
  bytecode::Instruction* j = e.pop_jump_forward(*kind);
  size_t targets[2] = {pc + 1, static_cast<size_t>(t.frame().bc.index_of(inst.target))};
  for (int b = 0; b < 2; ++b) {
    size_t tgt = origin.index(targets[b]);
    std::vector<int> passed = passed_locals(t, origin, tgt);
    Resume r = make_resume(origin, tgt, deep_null, passed, counter, deep_enter);
    size_t first = e.bc.insts.size();
    emit_resume_fn(e, r, origin);
    if (b == 1) j->target = e.bc.insts[first].get();
    emit_deep_stack(*rb, t, ndeep);
    if (tmp >= 0) e.emit("DELETE_FAST", tmp);
    rb->release();
    call_resume(0, passed);
    out.resumes.push_back(std::move(r));
  }
}

// The breaking instruction's own operands. [NULL, method] (3.13: [method, NULL]) before a CALL is rebuilt by the
// method form ([function, self]), which CALL takes the same way; before CALL_FUNCTION_EX the NULL must stay a NULL
// beside the bound method.
void BreakEmitter::rebuild_operands(bool is_call) {
  for (size_t i = ndeep; i < t.frame().stack.size(); ++i) {
    const ValuePtr& v = t.frame().stack[i];
    if (is_call && i + 1 < t.frame().stack.size()) {
      const ValuePtr& next = t.frame().stack[i + 1];
      const ValuePtr* bound = nullptr;
      if (compat::opargs::kNullBeforeCallable && v->kind == VKind::Null && next->kind == VKind::Method) bound = &next;
      if (!compat::opargs::kNullBeforeCallable && v->kind == VKind::Method && next->kind == VKind::Null) bound = &v;
      if (bound) {
        rb->push((*bound)->bound_self());
        e.load_method((*bound)->bound_name());
        ++i;
        continue;
      }
    }
    rb->push(v);
  }
}

// Any other instruction: its operands, then the instruction itself, run as Python; its result goes to the
// continuation after it.
void BreakEmitter::instruction(int consumed) {
  const std::string name = bytecode::opname(inst.opcode);
  const bool is_call_kw = name == "CALL_KW";  // 3.13: the names tuple is the last operand
  const bool is_call = name == "CALL" || is_call_kw;
  // A call pushes its result (dis.stack_effect splits 3.11's over PRECALL and CALL).
  int pushed = is_call ? 1 : consumed + bytecode::stack_effect(inst.opcode, inst.arg, false);
  size_t next = origin.index(pc + 1);
  std::vector<int> passed = passed_locals(t, origin, next);
  std::vector<char> null_at = deep_null;
  // The method form of an attribute load may push a NULL, which cannot be passed to the continuation: the rewritten
  // frame loads the plain attribute instead (the bound attribute) and the continuation's prologue puts the NULL
  // below it, which CALL treats the same way.
  const bool method = name == "LOAD_METHOD" || (name == "LOAD_ATTR" && compat::opargs::load_attr_method(inst.arg));
  if (method) {
    // The NULL on this Python's side of the callable: below it through 3.12, above it on 3.13.
    null_at.push_back(compat::opargs::kNullBeforeCallable ? 1 : 0);
    null_at.push_back(compat::opargs::kNullBeforeCallable ? 0 : 1);
    pushed = 1;
  } else {
    null_at.insert(null_at.end(), static_cast<size_t>(pushed), 0);
  }
  std::vector<py::object> enter_at = deep_enter;
  enter_at.resize(null_at.size());
  Resume r = make_resume(origin, next, null_at, passed, counter, enter_at);
  emit_resume_fn(e, r, origin);
  emit_deep_stack(*rb, t, ndeep);
  rebuild_operands(is_call);
  enter_contexts();
  if (tmp >= 0) e.emit("DELETE_FAST", tmp);
  rb->release();
  if (is_call_kw) {
    e.bc.append(inst.opcode, inst.arg);
  } else if (is_call) {
    int kw = -1;
    for (size_t k = pc; k-- > 0;) {
      std::string prev = bytecode::opname(t.frame().bc.insts[k]->opcode);
      if (prev == "PRECALL") continue;
      if (prev == "KW_NAMES") kw = t.frame().bc.insts[k]->arg;
      break;
    }
    e.call(inst.arg, kw);
  } else if (method) {
    py::handle name = PyTuple_GET_ITEM(t.frame().code->co_names, compat::opargs::load_attr_name(inst.arg));  // borrowed
    e.load_attr(py::str(name).cast<std::string>());
  } else {
    e.bc.append(inst.opcode, inst.arg);
  }
  e.bc.insts.back()->pos = inst.pos;
  leave_contexts();
  call_resume(pushed, passed);
  out.resumes.push_back(std::move(r));
}

// Inside a grad-mode block: an exception from the rest of the rewritten frame sets the frame's mode back, re-raised;
// inside torch context blocks, it leaves those the frame entered and has not left.
void BreakEmitter::finish_grad_block() {
  const bool grad = t.output().grad_mode_after_graph >= 0;
  if ((!grad && ctx_exits.empty()) || e.bc.insts.size() <= grad_range_start) return;
  bytecode::Instruction* first = e.bc.insts[grad_range_start].get();
  bytecode::Instruction* last = e.bc.insts.back().get();
  const size_t handler_at = e.bc.insts.size();  // stack: [exception]
  if (!ctx_exits.empty()) exit_all_contexts();
  if (grad) rb->set_grad_mode(t.output().grad_mode_after_graph == 0);
  bytecode::Instruction* handler = e.bc.insts[handler_at].get();
  e.emit("RERAISE", 0);
  e.bc.exception_table.push_back({first, last, handler, 0, false});
}

}  // namespace

BreakCode graph_break(const Tracer& t, const std::string& compiled_name,
                      const std::vector<graph::Node*>& outputs, int& counter) {
  BreakEmitter b(t, counter);
  // The end of a continuation's window: the frame's state goes to the chain continuation of the cut.
  const int cut = b.origin.resume && b.pc < b.origin.resume->tail_cut.size() ? b.origin.resume->tail_cut[b.pc] : -1;
  const bool cond = cut < 0 && is_conditional(t);
  const int consumed = cut >= 0 ? 0 : cond ? 1 : consumed_by(b.inst);
  if (consumed < 0 || static_cast<size_t>(consumed) > t.frame().stack.size())
    throw interp::Unsupported(std::string("cannot restart ") + bytecode::opname(b.inst.opcode) + " after a graph break");
  b.begin(compiled_name, outputs, consumed);
  if (cut >= 0) b.window_end(cut);
  else if (cond) b.conditional();
  else b.instruction(consumed);
  b.finish_grad_block();
  b.out.code = b.e.finish(true);
  return std::move(b.out);
}

}  // namespace cdynamo::codegen
