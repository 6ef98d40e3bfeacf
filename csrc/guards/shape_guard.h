// shape_guard.h — owns SHAPE_ENV guards: integer relations between sizes, strides, storage offsets and ints of
// frame values, compiled once into postfix programs and evaluated in int64 without Python.
#pragma once

#include <Python.h>

#include <cstdint>
#include <string>
#include <vector>

#include "guards/guard.h"
#include "guards/source.h"

namespace cdynamo::guards {

// One integer a SHAPE_ENV guard reads from the frame.
struct ShapeSlot {
  SourcePtr source;
  // Size / Stride: tensor.size(dim) / tensor.stride(dim) (0 <= dim < ndim); StorageOffset: tensor.storage_offset();
  // Int: the value itself, an exact int (not a bool, not an int subclass) that fits int64. Float: an exact float,
  // its bits kept in the int64 slot; no program reads it, the fallback gets it as a float (a float input's
  // relations are checked there).
  enum class Kind : uint8_t { Size, Stride, StorageOffset, Int, Float } kind = Kind::Size;
  int dim = 0;
};

// One instruction of a compiled program: a postfix program on an int64 stack (booleans are 0 / 1).
struct ShapeOp {
  // Order matters: the evaluator treats every code from Neg on as unary (or a jump), those before as binary.
  enum class Code : uint8_t {
    Slot,         // push slot `arg`
    Const,        // push `arg`
    Add, Mul, Max, Min,             // binary, pop 2 push 1
    FloorDiv, Mod, Pow,             // Python semantics; b == 0 / b < 0 (pow) is an error
    Eq, Ne, Lt, Le, Gt, Ge,         // pop 2 push 0 / 1
    Neg, Abs, Not, Truth,           // unary (Truth: x != 0)
    JumpIfFalseOrPop,               // top == 0: jump to `arg` keeping it; else pop it (`and`)
    JumpIfTrueOrPop,                // top != 0: jump to `arg` keeping it; else pop it (`or`)
  };
  Code code;
  int64_t arg = 0;
};

// How one evaluation ended.
enum class ShapeResult : uint8_t { True, False, Overflow, DivisionByZero, NegativeExponent };

// The compiled programs of one SHAPE_ENV guard (see shape_guard() for the arguments).
class ShapeProgram {
 public:
  // Throws std::invalid_argument (ValueError through pybind11) naming the first malformed node.
  ShapeProgram(std::vector<ShapeSlot> slots, PyObject* exprs, PyObject* fallback, std::vector<std::string> texts);
  ~ShapeProgram();
  ShapeProgram(const ShapeProgram&) = delete;
  ShapeProgram& operator=(const ShapeProgram&) = delete;

  // Reads every slot from `fv`, runs every program, then the fallback (if any). On failure fills *why (if
  // given) with "<text> failed (<slot> = <value>, ...)" or why a slot could not be read. Calls no Python
  // code and allocates nothing on the pass path when there is no fallback (up to kInline slots + stack).
  // Never leaves a Python error set.
  bool check(const FrameView& fv, std::string* why) const;
  // Runs program `i` on `values` (one per slot): the evaluator alone, for tests.
  ShapeResult eval(size_t i, const int64_t* values) const;

  size_t programs() const { return starts_.size(); }
  const std::vector<ShapeSlot>& slots() const { return slots_; }
  // One readable relation per program, then those the fallback checks.
  const std::vector<std::string>& texts() const { return texts_; }
  // "L['x'].size()[0]", "L['x'].stride()[1]", "L['x'].storage_offset()", "L['n']".
  static std::string slot_name(const ShapeSlot& s);

 private:
  static constexpr size_t kInline = 64;
  bool read_slots(const FrameView& fv, int64_t* values, std::string* why) const;
  std::string values_of(const std::vector<uint32_t>& slots, const int64_t* values) const;

  std::vector<ShapeSlot> slots_;
  std::vector<ShapeOp> ops_;               // all programs, one after another
  std::vector<uint32_t> starts_;           // per program: its first instruction (ends at the next start)
  std::vector<std::vector<uint32_t>> used_;  // per program: the slots it reads (for failure reasons)
  std::vector<uint32_t> all_slots_;        // 0..n-1 (the fallback's failure reason)
  uint32_t max_depth_ = 0;                 // deepest stack of any program
  // Slots grouped by source: source_slots_[source_begin_[k] .. source_begin_[k+1]) read source k, fetched once.
  std::vector<uint32_t> source_slots_;
  std::vector<uint32_t> source_begin_;
  PyObject* fallback_ = nullptr;           // owned; nullptr when None
  std::vector<std::string> texts_;
  friend class ShapeCompiler;
};

// A SHAPE_ENV guard. `exprs`: borrowed Python list (or tuple) of programs, every one must be true; a program is
// a nested tuple:
//   ("slot", i) | ("int", v) | ("bool", b) | ("add", a, b, ...) | ("mul", a, b, ...) | ("neg", a)
//   | ("floordiv", a, b) | ("mod", a, b) | ("pow", a, b) | ("max", a, b, ...) | ("min", a, b, ...) | ("abs", a)
//   | ("eq"|"ne"|"lt"|"le"|"gt"|"ge", a, b) | ("and", a, ...) | ("or", a, ...) | ("not", a)
// with Python's int semantics (floordiv rounds to -inf, mod takes the divisor's sign, and / or short-circuit);
// an int64 overflow, a division by zero or a negative exponent makes the guard fail.
// `fallback`: borrowed, None or a callable taking a list of the slot values (ints) and returning a truthy
// value (the relations not lowered to programs; a Float slot's value is a float); it runs after the programs pass; an exception it raises
// fails the guard. `texts`: one readable relation per program, then (only with a fallback) any number
// describing what the fallback checks. Throws std::invalid_argument (ValueError) on a malformed program,
// a slot index out of range, a bad slot, a fallback that is not callable, or a wrong number of texts.
Guard shape_guard(std::vector<ShapeSlot> slots, PyObject* exprs, PyObject* fallback, std::vector<std::string> texts);

}  // namespace cdynamo::guards
