// shape_guard.cpp — owns evaluating SHAPE_ENV guards: reading slots from a frame, the int64 evaluator with
// Python's semantics and overflow checks, the fallback call and the failure reasons.
#include "guards/shape_guard.h"

#include <bit>
#include <climits>

#include "guards/tensor_match.h"

namespace cdynamo::guards {

namespace {

using Code = ShapeOp::Code;

// repr() of a float as Python prints it (shortest round-trip digits, nan, inf).
std::string py_repr_double(double d) {
  char* s = PyOS_double_to_string(d, 'r', 0, Py_DTSF_ADD_DOT_0, nullptr);  // PyMem-allocated, or NULL
  if (!s) {
    PyErr_Clear();
    return std::to_string(d);
  }
  std::string out(s);
  PyMem_Free(s);
  return out;
}

// Python's a // b and a % b on int64; false (with *err set) on b == 0 or INT64_MIN // -1.
bool floordiv(int64_t a, int64_t b, int64_t* out, ShapeResult* err) {
  if (b == 0) return *err = ShapeResult::DivisionByZero, false;
  if (a == INT64_MIN && b == -1) return *err = ShapeResult::Overflow, false;
  int64_t q = a / b;  // truncates toward zero
  if (a % b != 0 && ((a < 0) != (b < 0))) --q;
  *out = q;
  return true;
}
bool pymod(int64_t a, int64_t b, int64_t* out, ShapeResult* err) {
  if (b == 0) return *err = ShapeResult::DivisionByZero, false;
  if (b == -1) return *out = 0, true;  // INT64_MIN % -1 is undefined in C++
  int64_t r = a % b;
  if (r != 0 && ((r < 0) != (b < 0))) r += b;  // |r| < |b|: cannot overflow
  *out = r;
  return true;
}
// a ** b for b >= 0 by squaring; the base is squared only while bits of b remain (then the result would
// contain that square, so an overflow there is an overflow of the result).
bool ipow(int64_t a, int64_t b, int64_t* out, ShapeResult* err) {
  if (b < 0) return *err = ShapeResult::NegativeExponent, false;
  int64_t r = 1;
  while (b) {
    if ((b & 1) && __builtin_mul_overflow(r, a, &r)) return *err = ShapeResult::Overflow, false;
    b >>= 1;
    if (b && __builtin_mul_overflow(a, a, &a)) return *err = ShapeResult::Overflow, false;
  }
  *out = r;
  return true;
}

const char* error_text(ShapeResult r) {
  switch (r) {
    case ShapeResult::Overflow: return "integer overflow";
    case ShapeResult::DivisionByZero: return "division by zero";
    case ShapeResult::NegativeExponent: return "negative exponent";
    default: return "";
  }
}

// Runs ops[begin, end) on `values`, with `stack` (max_depth entries) as scratch. No allocation. The
// compiler checked every operand count, so `n` never goes below what an instruction pops.
ShapeResult run(const ShapeOp* ops, size_t begin, size_t end, const int64_t* values, int64_t* stack) {
  size_t n = 0;  // entries on the stack
  ShapeResult err = ShapeResult::False;
  for (size_t pc = begin; pc < end; ++pc) {
    const ShapeOp& op = ops[pc];
    switch (op.code) {
      case Code::Slot: stack[n++] = values[op.arg]; continue;
      case Code::Const: stack[n++] = op.arg; continue;
      default: break;
    }
    if (op.code >= Code::Neg) {  // unary operators and jumps (ShapeOp::Code keeps them last)
      int64_t& a = stack[n - 1];
      switch (op.code) {
        case Code::Neg:
        case Code::Abs:
          if ((op.code == Code::Neg || a < 0) && __builtin_sub_overflow(int64_t{0}, a, &a)) return ShapeResult::Overflow;
          break;
        case Code::Not: a = a == 0; break;
        case Code::Truth: a = a != 0; break;
        case Code::JumpIfFalseOrPop:
        case Code::JumpIfTrueOrPop:
          if ((a != 0) == (op.code == Code::JumpIfTrueOrPop)) pc = static_cast<size_t>(op.arg) - 1;  // keeps it
          else --n;
          break;
        default: break;
      }
      continue;
    }
    const int64_t b = stack[--n];
    int64_t& l = stack[n - 1];
    switch (op.code) {
      case Code::Add:
        if (__builtin_add_overflow(l, b, &l)) return ShapeResult::Overflow;
        break;
      case Code::Mul:
        if (__builtin_mul_overflow(l, b, &l)) return ShapeResult::Overflow;
        break;
      case Code::Max: l = l > b ? l : b; break;
      case Code::Min: l = l < b ? l : b; break;
      case Code::FloorDiv:
        if (!floordiv(l, b, &l, &err)) return err;
        break;
      case Code::Mod:
        if (!pymod(l, b, &l, &err)) return err;
        break;
      case Code::Pow:
        if (!ipow(l, b, &l, &err)) return err;
        break;
      case Code::Eq: l = l == b; break;
      case Code::Ne: l = l != b; break;
      case Code::Lt: l = l < b; break;
      case Code::Le: l = l <= b; break;
      case Code::Gt: l = l > b; break;
      case Code::Ge: l = l >= b; break;
      default: break;
    }
  }
  return stack[0] != 0 ? ShapeResult::True : ShapeResult::False;
}

}  // namespace

std::string ShapeProgram::slot_name(const ShapeSlot& s) {
  std::string base = s.source->dynamo_name();
  switch (s.kind) {
    case ShapeSlot::Kind::Size: return base + ".size()[" + std::to_string(s.dim) + "]";
    case ShapeSlot::Kind::Stride: return base + ".stride()[" + std::to_string(s.dim) + "]";
    case ShapeSlot::Kind::StorageOffset: return base + ".storage_offset()";
    case ShapeSlot::Kind::Int:
    case ShapeSlot::Kind::Float: return base;
  }
  return base;
}

ShapeResult ShapeProgram::eval(size_t i, const int64_t* values) const {
  std::vector<int64_t> stack(max_depth_ + 1);
  size_t end = i + 1 < starts_.size() ? starts_[i + 1] : ops_.size();
  return run(ops_.data(), starts_[i], end, values, stack.data());
}

// Fetches each source once and reads its slots into values[]; false (with *why) if one cannot be read.
bool ShapeProgram::read_slots(const FrameView& fv, int64_t* values, std::string* why) const {
  for (size_t k = 0; k + 1 < source_begin_.size(); ++k) {
    const ShapeSlot& first = slots_[source_slots_[source_begin_[k]]];
    PyObject* v = first.source->fetch(fv);  // new
    const char* problem = v ? nullptr : "value is missing";
    for (uint32_t j = source_begin_[k]; !problem && j < source_begin_[k + 1]; ++j) {
      const ShapeSlot& s = slots_[source_slots_[j]];
      int64_t* out = &values[source_slots_[j]];
      int64_t unused = 0;
      switch (s.kind) {
        case ShapeSlot::Kind::Size:
          if (!tensor_geometry(v, s.dim, out, &unused)) problem = "not a tensor with that dimension";
          break;
        case ShapeSlot::Kind::Stride:
          if (!tensor_geometry(v, s.dim, &unused, out)) problem = "not a tensor with that dimension";
          break;
        case ShapeSlot::Kind::StorageOffset:
          if (!tensor_storage_offset(v, out)) problem = "not a tensor with a storage offset";
          break;
        case ShapeSlot::Kind::Int: {
          if (!PyLong_CheckExact(v)) {
            problem = "not an int";
            break;
          }
          int overflow = 0;
          long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
          if (overflow) problem = "does not fit in int64";
          *out = static_cast<int64_t>(x);
          break;
        }
        case ShapeSlot::Kind::Float:
          if (!PyFloat_CheckExact(v)) {
            problem = "not a float";
            break;
          }
          *out = std::bit_cast<int64_t>(PyFloat_AS_DOUBLE(v));
          break;
      }
      if (problem && why) *why = slot_name(s) + " cannot be read: " + problem;
    }
    if (!v && why) *why = slot_name(first) + " cannot be read: " + problem;
    Py_XDECREF(v);
    if (problem) return false;
  }
  return true;
}

std::string ShapeProgram::values_of(const std::vector<uint32_t>& slots, const int64_t* values) const {
  std::string s;
  for (uint32_t i : slots) {
    const bool f = slots_[i].kind == ShapeSlot::Kind::Float;
    std::string v = f ? py_repr_double(std::bit_cast<double>(values[i])) : std::to_string(values[i]);
    s += (s.empty() ? "" : ", ") + slot_name(slots_[i]) + " = " + v;
  }
  return s.empty() ? s : " (" + s + ")";
}

bool ShapeProgram::check(const FrameView& fv, std::string* why) const {
  const size_t need = slots_.size() + max_depth_ + 1;
  int64_t inline_buf[kInline];
  std::vector<int64_t> heap;  // only for guards reading more than kInline slots + stack
  int64_t* values = inline_buf;
  if (need > kInline) {
    heap.resize(need);
    values = heap.data();
  }
  int64_t* stack = values + slots_.size();
  if (!read_slots(fv, values, why)) return false;
  for (size_t i = 0; i < starts_.size(); ++i) {
    size_t end = i + 1 < starts_.size() ? starts_[i + 1] : ops_.size();
    ShapeResult r = run(ops_.data(), starts_[i], end, values, stack);
    if (r == ShapeResult::True) continue;
    if (why) {
      *why = texts_[i] + " failed";
      if (r != ShapeResult::False) *why += std::string(": ") + error_text(r);
      *why += values_of(used_[i], values);
    }
    return false;
  }
  if (!fallback_) return true;
  // The relations not lowered: a Python call on a fresh list of the slot values.
  PyObject* list = PyList_New(static_cast<Py_ssize_t>(slots_.size()));  // new
  for (size_t i = 0; list && i < slots_.size(); ++i) {
    PyObject* x = slots_[i].kind == ShapeSlot::Kind::Float ? PyFloat_FromDouble(std::bit_cast<double>(values[i]))
                                                           : PyLong_FromLongLong(values[i]);  // new, stolen
    if (!x) {
      Py_CLEAR(list);
      break;
    }
    PyList_SET_ITEM(list, static_cast<Py_ssize_t>(i), x);
  }
  PyObject* result = list ? PyObject_CallOneArg(fallback_, list) : nullptr;  // new
  Py_XDECREF(list);
  int ok = result ? PyObject_IsTrue(result) : -1;
  Py_XDECREF(result);
  if (ok == 1) return true;
  if (why) {
    std::string what;
    for (size_t i = starts_.size(); i < texts_.size(); ++i) what += (what.empty() ? "" : "; ") + texts_[i];
    *why = (what.empty() ? std::string("fallback guard") : what) + (ok == 0 ? " failed" : " raised an exception");
    if (ok < 0) {
      PyObject *type, *value, *tb;  // owned after the fetch
      PyErr_Fetch(&type, &value, &tb);
      PyObject* text = value ? PyObject_Str(value) : nullptr;  // new
      const char* t = text ? PyUnicode_AsUTF8(text) : nullptr;  // borrowed buffer of text
      if (type) *why += std::string(" (") + reinterpret_cast<PyTypeObject*>(type)->tp_name + (t && *t ? ": " + std::string(t) : "") + ")";
      Py_XDECREF(text);
      Py_XDECREF(type);
      Py_XDECREF(value);
      Py_XDECREF(tb);
    }
    *why += values_of(all_slots_, values);
  }
  PyErr_Clear();
  return false;
}

Guard shape_guard(std::vector<ShapeSlot> slots, PyObject* exprs, PyObject* fallback, std::vector<std::string> texts) {
  return Guard(GuardKind::ShapeEnv, nullptr, "SHAPE_ENV",
               ShapeCheck(std::make_unique<ShapeProgram>(std::move(slots), exprs, fallback, std::move(texts))));
}

}  // namespace cdynamo::guards
