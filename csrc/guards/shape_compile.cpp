// shape_compile.cpp — owns turning SHAPE_ENV programs (nested Python tuples) into ShapeOp instructions, once,
// when the guard is built; every malformed node is a std::invalid_argument naming it.
#include "guards/shape_guard.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>

namespace cdynamo::guards {

namespace {

constexpr int kMaxNesting = 500;  // deeper programs are refused (the compiler recurses per level)

// repr(node), cut to a readable length; never leaves a Python error set.
std::string short_repr(PyObject* node) {
  PyObject* r = PyObject_Repr(node);  // new
  std::string s = "<?>";
  if (r) {
    const char* u = PyUnicode_AsUTF8(r);  // borrowed buffer of r
    if (u) s = u;
    Py_DECREF(r);
  }
  PyErr_Clear();
  if (s.size() > 120) s = s.substr(0, 117) + "...";
  return s;
}

struct Named {
  const char* name;
  ShapeOp::Code code;
};
// Operators taking 1+ operands folded left to right.
constexpr Named kVariadic[] = {{"add", ShapeOp::Code::Add}, {"mul", ShapeOp::Code::Mul},
                               {"max", ShapeOp::Code::Max}, {"min", ShapeOp::Code::Min}};
constexpr Named kBinary[] = {{"floordiv", ShapeOp::Code::FloorDiv}, {"mod", ShapeOp::Code::Mod},
                             {"pow", ShapeOp::Code::Pow},           {"eq", ShapeOp::Code::Eq},
                             {"ne", ShapeOp::Code::Ne},             {"lt", ShapeOp::Code::Lt},
                             {"le", ShapeOp::Code::Le},             {"gt", ShapeOp::Code::Gt},
                             {"ge", ShapeOp::Code::Ge}};
constexpr Named kUnary[] = {{"neg", ShapeOp::Code::Neg}, {"abs", ShapeOp::Code::Abs}, {"not", ShapeOp::Code::Not}};

template <size_t N>
const Named* find(const Named (&table)[N], const char* op) {
  for (const Named& n : table)
    if (std::strcmp(n.name, op) == 0) return &n;
  return nullptr;
}

}  // namespace

// Compiles one program into `p.ops_`, tracking the stack depth and the slots it reads.
class ShapeCompiler {
 public:
  ShapeCompiler(ShapeProgram& p, size_t index) : p_(p), index_(index) {}

  void program(PyObject* root) {
    emit(root, 0);
    if (depth_ != 1) bad(root, "internal: stack depth " + std::to_string(depth_));
    std::sort(used_.begin(), used_.end());
    used_.erase(std::unique(used_.begin(), used_.end()), used_.end());
    p_.used_.push_back(std::move(used_));
  }

 private:
  [[noreturn]] void bad(PyObject* node, const std::string& what) const {
    throw std::invalid_argument("SHAPE_ENV program " + std::to_string(index_) + ": " + what + " in node " +
                                short_repr(node));
  }
  void push(ShapeOp::Code c, int64_t arg, int effect) {
    p_.ops_.push_back(ShapeOp{c, arg});
    depth_ += effect;
    p_.max_depth_ = std::max<uint32_t>(p_.max_depth_, static_cast<uint32_t>(depth_));
  }
  // Reads operand `i` (a borrowed item of the tuple) as an int64.
  int64_t int_operand(PyObject* node, PyObject* v, const char* what) const {
    if (!PyLong_Check(v) || PyBool_Check(v)) bad(node, std::string(what) + " must be an int");
    int overflow = 0;
    long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
    if (overflow || (x == -1 && PyErr_Occurred())) {
      PyErr_Clear();
      bad(node, std::string(what) + " does not fit in int64");
    }
    return static_cast<int64_t>(x);
  }

  void emit(PyObject* node, int nesting) {
    if (nesting > kMaxNesting) bad(node, "nesting deeper than " + std::to_string(kMaxNesting));
    if (!PyTuple_Check(node) || PyTuple_GET_SIZE(node) < 1 || !PyUnicode_Check(PyTuple_GET_ITEM(node, 0)))
      bad(node, "expected a tuple (operator, operands...)");
    const char* op = PyUnicode_AsUTF8(PyTuple_GET_ITEM(node, 0));  // borrowed buffer of the tuple's str
    if (!op) {
      PyErr_Clear();
      bad(node, "operator name is not valid UTF-8");
    }
    const Py_ssize_t n = PyTuple_GET_SIZE(node) - 1;  // operands
    auto arity = [&](bool ok, const char* want) {
      if (!ok) bad(node, std::string("'") + op + "' takes " + want + ", got " + std::to_string(n));
    };
    auto operand = [&](Py_ssize_t i) { return PyTuple_GET_ITEM(node, i + 1); };  // borrowed

    if (std::strcmp(op, "slot") == 0) {
      arity(n == 1, "1 operand");
      int64_t i = int_operand(node, operand(0), "slot index");
      if (i < 0 || static_cast<uint64_t>(i) >= p_.slots_.size())
        bad(node, "slot index out of range (" + std::to_string(p_.slots_.size()) + " slots)");
      if (p_.slots_[static_cast<size_t>(i)].kind == ShapeSlot::Kind::Float)
        bad(node, "a float slot is read by the fallback only");
      used_.push_back(static_cast<uint32_t>(i));
      return push(ShapeOp::Code::Slot, i, +1);
    }
    if (std::strcmp(op, "int") == 0) {
      arity(n == 1, "1 operand");
      return push(ShapeOp::Code::Const, int_operand(node, operand(0), "constant"), +1);
    }
    if (std::strcmp(op, "bool") == 0) {
      arity(n == 1, "1 operand");
      if (!PyBool_Check(operand(0))) bad(node, "'bool' takes True or False");
      return push(ShapeOp::Code::Const, operand(0) == Py_True ? 1 : 0, +1);
    }
    if (const Named* v = find(kVariadic, op)) {
      arity(n >= 1, "1 or more operands");
      emit(operand(0), nesting + 1);
      for (Py_ssize_t i = 1; i < n; ++i) {
        emit(operand(i), nesting + 1);
        push(v->code, 0, -1);
      }
      return;
    }
    if (const Named* b = find(kBinary, op)) {
      arity(n == 2, "2 operands");
      emit(operand(0), nesting + 1);
      emit(operand(1), nesting + 1);
      return push(b->code, 0, -1);
    }
    if (const Named* u = find(kUnary, op)) {
      arity(n == 1, "1 operand");
      emit(operand(0), nesting + 1);
      return push(u->code, 0, 0);
    }
    const bool is_and = std::strcmp(op, "and") == 0;
    if (is_and || std::strcmp(op, "or") == 0) {
      arity(n >= 1, "1 or more operands");
      // a0 Truth J a1 Truth J ... an Truth <end>: each jump skips to the end keeping a decided operand.
      std::vector<size_t> jumps;
      for (Py_ssize_t i = 0; i < n; ++i) {
        emit(operand(i), nesting + 1);
        push(ShapeOp::Code::Truth, 0, 0);
        if (i + 1 < n) {
          jumps.push_back(p_.ops_.size());
          push(is_and ? ShapeOp::Code::JumpIfFalseOrPop : ShapeOp::Code::JumpIfTrueOrPop, 0, -1);
        }
      }
      for (size_t j : jumps) p_.ops_[j].arg = static_cast<int64_t>(p_.ops_.size());
      return;
    }
    bad(node, std::string("unknown operator '") + op + "'");
  }

  ShapeProgram& p_;
  size_t index_;
  int depth_ = 0;
  std::vector<uint32_t> used_;
};

ShapeProgram::ShapeProgram(std::vector<ShapeSlot> slots, PyObject* exprs, PyObject* fallback,
                           std::vector<std::string> texts)
    : slots_(std::move(slots)), texts_(std::move(texts)) {
  for (size_t i = 0; i < slots_.size(); ++i) {
    const ShapeSlot& s = slots_[i];
    if (!s.source) throw std::invalid_argument("SHAPE_ENV slot " + std::to_string(i) + " has no source");
    if ((s.kind == ShapeSlot::Kind::Size || s.kind == ShapeSlot::Kind::Stride) && s.dim < 0)
      throw std::invalid_argument("SHAPE_ENV slot " + std::to_string(i) + " has a negative dim");
  }
  if (!exprs || !(PyList_Check(exprs) || PyTuple_Check(exprs)))
    throw std::invalid_argument("SHAPE_ENV programs must be a list of tuples");
  if (fallback && fallback != Py_None && !PyCallable_Check(fallback))
    throw std::invalid_argument("SHAPE_ENV fallback must be None or callable");
  const bool has_fallback = fallback && fallback != Py_None;
  // A borrowed view of exprs' items: a list may not change while we compile (no Python code runs here).
  const Py_ssize_t n = PySequence_Fast_GET_SIZE(exprs);
  if (texts_.size() < static_cast<size_t>(n) || (!has_fallback && texts_.size() != static_cast<size_t>(n)))
    throw std::invalid_argument("SHAPE_ENV needs one text per program (" + std::to_string(n) + "), plus any for " +
                                "the fallback; got " + std::to_string(texts_.size()));
  for (Py_ssize_t i = 0; i < n; ++i) {
    starts_.push_back(static_cast<uint32_t>(ops_.size()));
    ShapeCompiler(*this, static_cast<size_t>(i)).program(PySequence_Fast_GET_ITEM(exprs, i));  // borrowed item
  }
  for (uint32_t i = 0; i < slots_.size(); ++i) all_slots_.push_back(i);
  // Group the slots by source path so each source is fetched once per check.
  std::vector<std::string> keys;
  std::vector<std::vector<uint32_t>> groups;
  for (uint32_t i = 0; i < slots_.size(); ++i) {
    std::string key = slots_[i].source->describe();
    auto at = std::find(keys.begin(), keys.end(), key);
    if (at == keys.end()) {
      keys.push_back(key);
      groups.emplace_back();
      at = keys.end() - 1;
    }
    groups[static_cast<size_t>(at - keys.begin())].push_back(i);
  }
  for (const auto& g : groups) {
    source_begin_.push_back(static_cast<uint32_t>(source_slots_.size()));
    source_slots_.insert(source_slots_.end(), g.begin(), g.end());
  }
  source_begin_.push_back(static_cast<uint32_t>(source_slots_.size()));
  if (has_fallback) {
    Py_INCREF(fallback);
    fallback_ = fallback;  // owned
  }
}

ShapeProgram::~ShapeProgram() { Py_XDECREF(fallback_); }

}  // namespace cdynamo::guards
