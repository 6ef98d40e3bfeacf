// decode.cpp — owns decoding a code object's deoptimized co_code into a Bytecode (targets and handlers resolved).
#include "bytecode/detail.h"
#include "opcodes_gen.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace cdynamo::bytecode {

namespace {

std::string at(int offset) { return " at offset " + std::to_string(offset); }

void resolve_exception_table(Bytecode& bc, PyCodeObject* code, const std::vector<Instruction*>& by_unit) {
  // co_exceptiontable is a borrowed field of the code object.
  const auto raw = parse_exception_table(detail::bytes_view(code->co_exceptiontable, "co_exceptiontable"));
  const int code_bytes = static_cast<int>(by_unit.size()) * 2;
  std::vector<int> offsets;  // instruction start offsets, ascending
  offsets.reserve(bc.insts.size());
  for (const auto& inst : bc.insts) offsets.push_back(inst->offset);
  for (const auto& e : raw) {
    const std::string where = "exception table entry " + std::to_string(e.start) + " to " + std::to_string(e.end);
    if (e.start < 0 || e.end > code_bytes || e.end <= e.start) throw std::runtime_error(where + ": out of range");
    if (e.target < 0 || e.target >= code_bytes || by_unit[e.target / 2] == nullptr) {
      throw std::runtime_error(where + ": handler " + std::to_string(e.target) + " is not an instruction start");
    }
    auto first = std::lower_bound(offsets.begin(), offsets.end(), e.start);
    auto last = std::lower_bound(offsets.begin(), offsets.end(), e.end);  // one past the last covered
    if (first == last) throw std::runtime_error(where + ": covers no instruction");
    ExceptionEntry entry;
    entry.start = bc.insts[static_cast<size_t>(first - offsets.begin())].get();
    entry.end = bc.insts[static_cast<size_t>(last - offsets.begin()) - 1].get();
    entry.target = by_unit[e.target / 2];
    entry.depth = e.depth;
    entry.lasti = e.lasti;
    bc.exception_table.push_back(entry);
  }
}

}  // namespace

Bytecode decode(PyCodeObject* code) {
  if (code == nullptr || !PyCode_Check(reinterpret_cast<PyObject*>(code))) {
    throw std::runtime_error("decode: not a code object");
  }
  // PyCode_GetCode returns a new reference to the deoptimized co_code bytes.
  detail::Ref co_code(PyCode_GetCode(code));
  if (!co_code) detail::throw_python_error("decode: PyCode_GetCode");
  const std::string_view bytes = detail::bytes_view(co_code.get(), "co_code");
  if (bytes.size() % 2 != 0) throw std::runtime_error("decode: co_code has odd length");
  const size_t n = bytes.size() / 2;
  // co_linetable is a borrowed field.
  const auto positions =
      parse_location_table(detail::bytes_view(code->co_linetable, "co_linetable"), code->co_firstlineno, n);

  Bytecode bc;
  std::vector<Instruction*> by_unit(n, nullptr);  // instruction starting at code unit i (its first prefix)
  std::vector<std::pair<Instruction*, long long>> jumps;  // pending jump -> target byte offset
  size_t i = 0;
  while (i < n) {
    const size_t start = i;
    unsigned long long ext = 0;
    int prefixes = 0;
    int op = deopt(static_cast<unsigned char>(bytes[2 * i]));
    while (op == gen::kExtendedArg) {
      if (++prefixes > 3) throw std::runtime_error("decode: more than 3 EXTENDED_ARG" + at(static_cast<int>(2 * start)));
      ext = (ext | static_cast<unsigned char>(bytes[2 * i + 1])) << 8;
      if (++i >= n) throw std::runtime_error("decode: EXTENDED_ARG at end of code" + at(static_cast<int>(2 * start)));
      op = deopt(static_cast<unsigned char>(bytes[2 * i]));
    }
    if (op == gen::kCache || opname(op)[0] == '<') {
      throw std::runtime_error(std::string("decode: invalid opcode ") + std::to_string(op) + at(static_cast<int>(2 * i)));
    }
    // 3.13's tier-2 executors patch ENTER_EXECUTOR into the live code; co_code (PyCode_GetCode) gives the
    // original instruction back, so one here means bytes that did not come from co_code.
    static const int enter_executor = opcode_by_name("ENTER_EXECUTOR");  // 3.13+; -1 before
    if (enter_executor >= 0 && op == enter_executor)
      throw std::runtime_error("decode: ENTER_EXECUTOR (a tier-2 executor) in co_code" + at(static_cast<int>(2 * i)));
    const unsigned long long full = ext | static_cast<unsigned char>(bytes[2 * i + 1]);
    if (full > 0x7FFFFFFFull) throw std::runtime_error("decode: oparg overflow" + at(static_cast<int>(2 * i)));
    const size_t end = i + 1 + static_cast<size_t>(cache_entries(op));
    if (end > n) throw std::runtime_error("decode: truncated inline cache" + at(static_cast<int>(2 * i)));

    auto inst = std::make_unique<Instruction>();
    inst->opcode = op;
    inst->arg = has_arg(op) ? static_cast<int>(full) : 0;
    inst->offset = static_cast<int>(2 * start);
    inst->pos = positions[i];  // the opcode's own code unit, as tracebacks report it
    if (gen::kHasJrel[op]) {
      const long long delta = is_backward_jump(op) ? -static_cast<long long>(full) : static_cast<long long>(full);
      jumps.emplace_back(inst.get(), 2 * (static_cast<long long>(end) + delta));
    } else if (gen::kHasJabs[op]) {
      jumps.emplace_back(inst.get(), 2 * static_cast<long long>(full));
    }
    by_unit[start] = inst.get();
    bc.insts.push_back(std::move(inst));
    i = end;
  }
  for (auto& [inst, target] : jumps) {
    if (target < 0 || target >= static_cast<long long>(2 * n) || by_unit[static_cast<size_t>(target / 2)] == nullptr) {
      throw std::runtime_error(std::string("decode: ") + opname(inst->opcode) + at(inst->offset) + " jumps to " +
                               std::to_string(target) + ", which is not an instruction start");
    }
    inst->target = by_unit[static_cast<size_t>(target / 2)];
  }
  resolve_exception_table(bc, code, by_unit);
  return bc;
}

}  // namespace cdynamo::bytecode
