// bytecode.h — owns the decoded form of a code object (Instruction, ExceptionEntry) and its decode/assemble/print API.
#pragma once

#include <Python.h>

#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace cdynamo::bytecode {

// Source position of one instruction (3.11 location table); -1 means "none".
struct Position {
  int line = -1;
  int end_line = -1;
  int col = -1;
  int end_col = -1;
  bool operator==(const Position&) const = default;
};

struct Instruction {
  int opcode = 0;                  // base (deoptimized) opcode; never EXTENDED_ARG or CACHE
  int arg = 0;                     // full oparg; for jumps the assembler recomputes it from `target`
  int offset = -1;                 // byte offset in the original co_code; -1 if synthesized
  Instruction* target = nullptr;   // jump target for jump opcodes (owned by the same Bytecode)
  Position pos;                    // location; synthesized instructions copy a neighbour's
};

// One exception-table entry; [start, end] inclusive, in Bytecode::insts order.
struct ExceptionEntry {
  Instruction* start = nullptr;
  Instruction* end = nullptr;
  Instruction* target = nullptr;
  int depth = 0;
  bool lasti = false;
};

struct Bytecode {
  std::vector<std::unique_ptr<Instruction>> insts;  // program order; pointers are stable
  std::vector<ExceptionEntry> exception_table;

  // Appends a new synthesized instruction and returns it (owned by insts).
  Instruction* append(int opcode, int arg = 0, Instruction* target = nullptr);
  // Inserts before index `at` and returns it.
  Instruction* insert(size_t at, int opcode, int arg = 0, Instruction* target = nullptr);
  // Index of `inst` in insts, or -1. Amortized O(1): an index of insts is kept, extended as instructions
  // are appended and rebuilt after an insert() before the end.
  int index_of(const Instruction* inst) const;
  // Instruction whose original offset is `offset`, or nullptr.
  Instruction* at_offset(int offset) const;

 private:
  mutable std::unordered_map<const Instruction*, int> index_;  // covers insts[0, indexed_)
  mutable size_t indexed_ = 0;
};

// Opcode facts of the running Python, generated at build time (opcodes_gen.h) plus dis.stack_effect.
// Numeric OP_<NAME> constants are in "opcodes_gen.h" (namespace cdynamo::bytecode::gen).
// stack_effect, stack_depth, assemble, make_code, decode and format need the GIL (a stack_effect memo miss
// calls dis.stack_effect).
bool has_arg(int opcode);
bool is_jump(int opcode);           // relative or absolute jump with a target
bool is_backward_jump(int opcode);  // JUMP_BACKWARD, JUMP_BACKWARD_NO_INTERRUPT, POP_JUMP_BACKWARD_*
bool is_unconditional_jump(int opcode);
bool is_terminator(int opcode);     // RETURN_VALUE, RAISE_VARARGS, RERAISE, unconditional jumps
int cache_entries(int opcode);      // inline cache code units after the instruction
int deopt(int opcode);              // specialized -> base opcode
const char* opname(int opcode);
int opcode_by_name(const char* name);  // -1 if unknown
// Stack effect of (opcode, arg) when the jump is taken (jump=true) or not; throws std::runtime_error on
// an invalid opcode.
int stack_effect(int opcode, int arg, bool jump);

// Decodes co_code (PyCode_GetCode, not the adaptive bytes) of `code`. Does not steal or keep references.
// Throws std::runtime_error on malformed input.
Bytecode decode(PyCodeObject* code);

struct Assembled {
  PyObject* code = nullptr;            // new reference: bytes (co_code)
  PyObject* exceptiontable = nullptr;  // new reference: bytes
  PyObject* linetable = nullptr;       // new reference: bytes
  int stacksize = 0;
  ~Assembled();
  Assembled() = default;
  Assembled(const Assembled&) = delete;
  Assembled& operator=(const Assembled&) = delete;
  Assembled(Assembled&&) noexcept;
};

// Encodes instructions (EXTENDED_ARG to a fixpoint, inline caches zeroed, jump args from targets),
// exception table, location table (relative to firstlineno) and max stack depth.
// Throws std::runtime_error on inconsistent input (bad target, negative stack depth).
Assembled assemble(const Bytecode& bc, int firstlineno);

// Maximum stack depth of `bc` by flow analysis (including exception handlers).
int stack_depth(const Bytecode& bc);
// The same, also filling `depth` with the stack depth before each instruction (INT_MIN: unreachable).
int stack_depths(const Bytecode& bc, std::vector<int>& depth);

// Returns a new reference: `base.replace(co_code=..., co_exceptiontable=..., co_linetable=...,
// co_stacksize=...)` plus any extra keyword overrides in `overrides` (a dict, borrowed, may be nullptr).
// Returns nullptr with a Python error set on failure. The location table is encoded relative to
// overrides["co_firstlineno"] when given, else base->co_firstlineno; overrides win over the computed fields.
PyObject* make_code(PyCodeObject* base, const Bytecode& bc, PyObject* overrides);

// ---- Raw table codecs (3.11 formats); decode/assemble use them, tests call them directly. ----

// One exception-table entry with byte offsets; [start, end) is half-open, as dis reports it.
struct RawExceptionEntry {
  int start = 0;
  int end = 0;
  int target = 0;
  int depth = 0;
  bool lasti = false;
  bool operator==(const RawExceptionEntry&) const = default;
};
// Parses co_exceptiontable bytes. Throws std::runtime_error on truncated or malformed input.
std::vector<RawExceptionEntry> parse_exception_table(std::string_view table);
// Encodes entries as the 3.11 compiler does (offsets must be even, end > start).
std::string encode_exception_table(const std::vector<RawExceptionEntry>& entries);

// Parses co_linetable bytes into one Position per code unit (`code_units` of them; units the table does not
// cover get no location). Throws std::runtime_error on malformed input or a table longer than the code.
std::vector<Position> parse_location_table(std::string_view table, int firstlineno, size_t code_units);
// One instruction's position and its size in code units (EXTENDED_ARG prefixes + opcode + CACHE entries).
struct LocationRun {
  Position pos;
  int units = 1;
};
// Encodes runs exactly as the 3.11 compiler does (entries of at most 8 units; short / one-line / no-column /
// long / no-location forms chosen by the same rules).
std::string encode_location_table(const std::vector<LocationRun>& runs, int firstlineno);

// dis-style listing of `code`'s decoded instructions: line number column, ">>" for jump targets, offset,
// opname, arg and the resolved argument in parentheses, as `dis.dis` prints for 3.11.
std::string format(PyCodeObject* code);
// Same for a Bytecode interpreted against `code`'s names/consts/varnames (offsets as assembled).
std::string format(const Bytecode& bc, PyCodeObject* code);
// Same as `dis.dis(code)`: format(code) followed by every nested code object in co_consts, recursively.
std::string format_recursive(PyCodeObject* code);

}  // namespace cdynamo::bytecode
