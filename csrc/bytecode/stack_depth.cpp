// stack_depth.cpp — owns the max-stack-depth flow analysis over instructions, jumps and exception handlers.
#include "bytecode/detail.h"
#include "compat/opargs.h"
#include "opcodes_gen.h"

#include <algorithm>
#include <climits>
#include <stdexcept>
#include <string>
#include <unordered_map>

namespace cdynamo::bytecode {

namespace {

// "OP at index i (offset o)" followed by the instructions up to i, so an invalid sequence built by codegen
// can be read off the error message.
std::string where(const Bytecode& bc, size_t i) {
  const Instruction& in = *bc.insts[i];
  std::string s = std::string(opname(in.opcode)) + " at index " + std::to_string(i) +
                  (in.offset >= 0 ? " (offset " + std::to_string(in.offset) + ")" : std::string()) + "; listing:";
  for (size_t k = 0; k <= i && k < bc.insts.size(); ++k)
    s += " " + std::to_string(k) + ":" + opname(bc.insts[k]->opcode) + "(" + std::to_string(bc.insts[k]->arg) + ")";
  return s;
}

}  // namespace

int stack_depth(const Bytecode& bc) {
  std::vector<int> depth;
  return stack_depths(bc, depth);
}

int stack_depths(const Bytecode& bc, std::vector<int>& depth) {
  const size_t n = bc.insts.size();
  std::unordered_map<const Instruction*, size_t> index;
  index.reserve(n);
  for (size_t i = 0; i < n; ++i) index.emplace(bc.insts[i].get(), i);
  auto index_of = [&](const Instruction* p, const char* what) {
    auto it = p ? index.find(p) : index.end();
    if (it == index.end()) throw std::runtime_error(std::string("stack_depth: ") + what + " not in this Bytecode");
    return it->second;
  };

  // Handlers covering each instruction (entries may in principle overlap, so keep a list).
  std::vector<std::vector<size_t>> handlers(n);
  for (size_t k = 0; k < bc.exception_table.size(); ++k) {
    const auto& e = bc.exception_table[k];
    const size_t s = index_of(e.start, "exception entry start"), en = index_of(e.end, "exception entry end");
    index_of(e.target, "exception handler");
    if (e.depth < 0) throw std::runtime_error("stack_depth: negative exception entry depth");
    for (size_t i = s; i <= en && i < n; ++i) handlers[i].push_back(k);
  }

  depth.assign(n, INT_MIN);
  std::vector<size_t> work;
  int max_depth = 0;
  auto push = [&](size_t i, int d, size_t from) {
    if (d < 0) throw std::runtime_error("stack_depth: negative stack depth after " + where(bc, from));
    max_depth = std::max(max_depth, d);
    if (i >= n) throw std::runtime_error("stack_depth: control falls off the end after " + where(bc, from));
    if (depth[i] == INT_MIN) {
      depth[i] = d;
      work.push_back(i);
    } else if (depth[i] != d) {
      throw std::runtime_error("stack_depth: inconsistent depth at " + where(bc, i) + ": " + std::to_string(depth[i]) +
                               " vs " + std::to_string(d));
    }
  };
  if (n == 0) return 0;
  depth[0] = 0;
  work.push_back(0);
  std::vector<bool> handler_seen(bc.exception_table.size(), false);
  static const int return_const = opcode_by_name("RETURN_CONST");  // 3.12+; -1 before
  while (!work.empty()) {
    const size_t i = work.back();
    work.pop_back();
    const Instruction& in = *bc.insts[i];
    const int d = depth[i];
    // Jump effects never depend on the oparg (which the assembler recomputes anyway): use 0 to share memo entries.
    const int arg = is_jump(in.opcode) ? 0 : in.arg;
    for (size_t k : handlers[i]) {
      if (handler_seen[k]) continue;
      handler_seen[k] = true;
      const auto& e = bc.exception_table[k];
      push(index_of(e.target, "exception handler"), e.depth + 1 + (e.lasti ? 1 : 0), i);
    }
    if (is_jump(in.opcode)) push(index_of(in.target, "jump target"), d + stack_effect(in.opcode, arg, true), i);
    // RETURN_GENERATOR leaves the value sent on first resumption (POP_TOP drops it); dis.stack_effect says 0
    // because the 3.11 compiler inserts this prefix after computing the depth.
    const bool gen_prefix = in.opcode == gen::OP_RETURN_GENERATOR;
    const int next = d + (gen_prefix ? 1 : stack_effect(in.opcode, arg, false));
    if (next < 0) throw std::runtime_error("stack_depth: negative stack depth after " + where(bc, i));
    max_depth = std::max(max_depth, next);
    // 3.13's compiler counts RETURN_CONST as the LOAD_CONST; RETURN_VALUE it replaces (one more slot).
    if (compat::opargs::kReturnConstNeedsSlot && in.opcode == return_const) max_depth = std::max(max_depth, d + 1);
    if (!is_terminator(in.opcode)) push(i + 1, next, i);
  }
  // 3.13 sizes the stack before removing the unreachable implicit `return None` after a final raise: never 0.
  if (compat::opargs::kReturnConstNeedsSlot) max_depth = std::max(max_depth, 1);
  return max_depth;
}

}  // namespace cdynamo::bytecode
