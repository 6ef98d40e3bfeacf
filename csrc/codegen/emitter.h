// emitter.h — owns building a new instruction list with its names/consts pools and turning it into a code
// object derived from the original.
#pragma once

#include <unordered_map>

#include <pybind11/pybind11.h>

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "bytecode/bytecode.h"
#include "guards/source.h"

namespace cdynamo::interp {
struct Trace;
}  // namespace cdynamo::interp

namespace cdynamo::codegen {

namespace py = pybind11;

class Emitter {
 public:
  // `code` is borrowed for the Emitter's lifetime; names and consts start as copies of its pools.
  explicit Emitter(PyCodeObject* code);

  bytecode::Bytecode bc;

  int name_index(const std::string& name);
  int const_index(py::handle value);  // by identity (and type), so 1 / True / 1.0 stay distinct
  bytecode::Instruction* emit(const char* opname, int arg = 0);
  // Copies the frame-setup prefix of `original` (MAKE_CELL, COPY_FREE_VARS, ..., up to and including
  // RESUME). Returns the number of instructions copied.
  size_t copy_prefix(const bytecode::Bytecode& original);
  // Pushes the value of `src` (LOAD_FAST / LOAD_DEREF / LOAD_GLOBAL / LOAD_ATTR / BINARY_SUBSCR).
  void load_source(const guards::Source& src);
  // Loads the graph inputs `srcs` in order; a base shared by two or more of them (self._modules['0'])
  // is computed once into a temporary local first, when the code allows new locals.
  void load_inputs(const std::vector<const guards::Source*>& srcs);
  // load_inputs of the trace's graph inputs but those the guard check hands to the graph call
  // (t.lifted_inputs); returns how many were loaded.
  int load_graph_inputs(const interp::Trace& t);
  void load_const(py::handle value) { emit("LOAD_CONST", const_index(value)); }

  // Version-neutral emission (the encodings live in compat/opargs.h).
  void push_null() { emit("PUSH_NULL"); }
  // A plain callable for call(): null_before_callable(), then the code pushing the callable, then
  // null_after_callable(); the NULL lands on the side of the callable this Python's CALL expects.
  void null_before_callable();
  void null_after_callable();
  // Pushes `fn` (a constant) as a plain callable for call().
  void load_callable(py::handle fn);
  // Pushes the cell of cell/free slot `slot` (for a closure tuple): LOAD_CLOSURE, which 3.13 spells LOAD_FAST.
  void load_closure(int slot);
  // Makes a function from the code object on top of the stack (below it, a tuple of cells when `closure`).
  void make_function(bool closure);
  // The (opcode, arg) sequence of make_function(closure), for code built outside an Emitter.
  static std::vector<std::pair<int, int>> make_function_sequence(bool closure);
  // Pushes the global `name`, with a NULL when `push_null` (ready for call()).
  void load_global(const std::string& name, bool push_null);
  // TOS.name.
  void load_attr(const std::string& name);
  // TOS.name in the method form: [method, self] or [NULL, attribute], ready for call().
  void load_method(const std::string& name);
  // Calls [NULL|callable, callable|self, n args] (the last len(kw_names) of them by keyword when
  // `kw_names_const` >= 0, a const index of a tuple of names); pushes the result.
  void call(int n, int kw_names_const = -1);
  // The (opcode, arg) sequence of call(n, kw_names_const), for code built outside an Emitter.
  static std::vector<std::pair<int, int>> call_sequence(int n, int kw_names_const = -1);
  // Kinds of conditional jumps, by what they test (the opcode's name differs between versions).
  enum class Jump { IfTrue, IfFalse, IfNone, IfNotNone };
  // A forward conditional jump that pops TOS (on 3.13 a truth jump is TO_BOOL; POP_JUMP_*, as compiled);
  // the caller sets `target` of the returned jump.
  bytecode::Instruction* pop_jump_forward(Jump kind);
  // The kind of a POP_JUMP_* opcode of this Python; nullopt for any other opcode.
  static std::optional<Jump> pop_jump_kind(int opcode);
  // Appends a new local variable and returns its slot. Only for codes without cells/free variables
  // (their slots would shift).
  int add_local(const std::string& name);
  // Replaces co_varnames (and argument layout) in finish(): the first `argcount` names are arguments.
  void set_varnames(py::list names, int argcount);
  // Makes every cell and free variable of the code a free variable named `freevars` (in this order) and
  // the code cell-less: for continuations, which close over the cells of the frame they continue.
  void set_freevars(py::tuple freevars);

  // New reference: the original code with this instruction list and pools, taking its arguments all
  // positionally (co_argcount = every argument slot, no *args/**kwargs flags) when `flatten_args`.
  py::object finish(bool flatten_args, const std::string& name = "");

 private:
  PyCodeObject* code_;
  py::list names_;
  py::list consts_;
  py::list varnames_;
  bool varnames_changed_ = false;
  py::object freevars_;  // set_freevars(), or empty
  int added_locals_ = 0;
  std::vector<bytecode::Instruction*> closure_loads_;  // load_closure()'s LOAD_FASTs (3.13), shifted in finish()
  std::unordered_map<const guards::Source*, int> base_slots_;  // bases held in temporaries (load_inputs)  // add_local() calls: cell / free variable slots move up by this many
  int argcount_ = -1;
  bytecode::Position pos_;
};

}  // namespace cdynamo::codegen
