// detail.h — owns helpers private to csrc/bytecode (reference holder, Python error text, byte views, sizes).
#pragma once

#include "bytecode/bytecode.h"

#include <string>
#include <string_view>

namespace cdynamo::bytecode::detail {

// Owns one strong reference (or nullptr); releases it on destruction.
class Ref {
 public:
  Ref() = default;
  explicit Ref(PyObject* owned) : p_(owned) {}  // steals `owned` (a new reference or nullptr)
  ~Ref() { Py_XDECREF(p_); }
  Ref(const Ref&) = delete;
  Ref& operator=(const Ref&) = delete;
  Ref(Ref&& o) noexcept : p_(o.p_) { o.p_ = nullptr; }
  PyObject* get() const { return p_; }      // borrowed
  PyObject* release() {                     // hands the reference to the caller
    PyObject* r = p_;
    p_ = nullptr;
    return r;
  }
  explicit operator bool() const { return p_ != nullptr; }

 private:
  PyObject* p_ = nullptr;
};

// Takes (and clears) the pending Python error and throws std::runtime_error("<context>: <Type>: <message>").
[[noreturn]] void throw_python_error(const std::string& context);

// View of a bytes object's buffer (borrowed; valid while `bytes` lives). Throws if it is not bytes.
std::string_view bytes_view(PyObject* bytes, const char* what);

// assemble(), optionally without the stack-depth analysis (format() lists programs whose depth is inconsistent).
Assembled assemble_impl(const Bytecode& bc, int firstlineno, bool with_stack_depth);

// Number of EXTENDED_ARG prefixes needed for `arg`.
inline int extended_args(unsigned arg) { return (arg > 0xFFu) + (arg > 0xFFFFu) + (arg > 0xFFFFFFu); }

// Code units of an instruction: prefixes + opcode + inline caches (arg ignored for opcodes without one).
inline int instr_units(int opcode, int arg) {
  return (has_arg(opcode) ? extended_args(static_cast<unsigned>(arg)) : 0) + 1 + cache_entries(opcode);
}

}  // namespace cdynamo::bytecode::detail
