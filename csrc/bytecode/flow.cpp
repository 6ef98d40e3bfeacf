// flow.cpp — owns the control-flow successors of a decoded code object and its fast-local accesses.
#include "bytecode/flow.h"

#include "compat/opargs.h"

namespace cdynamo::bytecode {

std::vector<std::vector<size_t>> successors(const Bytecode& bc) {
  size_t n = bc.insts.size();
  std::vector<std::vector<size_t>> succ(n);
  for (size_t i = 0; i < n; ++i) {
    const auto* inst = bc.insts[i].get();
    if (!is_unconditional_jump(inst->opcode) && !is_terminator(inst->opcode) && i + 1 < n)
      succ[i].push_back(i + 1);
    if (inst->target) {
      int t = bc.index_of(inst->target);
      if (t >= 0) succ[i].push_back(static_cast<size_t>(t));
    }
  }
  for (const auto& e : bc.exception_table) {
    int s = bc.index_of(e.start), end = bc.index_of(e.end), h = bc.index_of(e.target);
    if (s < 0 || end < 0 || h < 0) continue;
    for (int i = s; i <= end; ++i) succ[static_cast<size_t>(i)].push_back(static_cast<size_t>(h));
  }
  return succ;
}

namespace {
struct FastOps {
  int load = opcode_by_name("LOAD_FAST"), load_check = opcode_by_name("LOAD_FAST_CHECK"),
      load_clear = opcode_by_name("LOAD_FAST_AND_CLEAR"), store = opcode_by_name("STORE_FAST"),
      del = opcode_by_name("DELETE_FAST"), load_load = opcode_by_name("LOAD_FAST_LOAD_FAST"),
      store_store = opcode_by_name("STORE_FAST_STORE_FAST"), store_load = opcode_by_name("STORE_FAST_LOAD_FAST");
};
const FastOps& fast_ops() {
  static const FastOps ops;  // names missing on this Python are -1 and never match
  return ops;
}
}  // namespace

bool is_paired_fast(int opcode) {
  const FastOps& o = fast_ops();
  return opcode >= 0 && (opcode == o.load_load || opcode == o.store_store || opcode == o.store_load);
}

std::vector<FastAccess> fast_accesses(const Instruction& inst) {
  const FastOps& o = fast_ops();
  const int op = inst.opcode;
  if (op < 0) return {};
  if (op == o.load || op == o.load_check || op == o.load_clear) return {{inst.arg, FastAccess::Read}};
  if (op == o.store) return {{inst.arg, FastAccess::Write}};
  if (op == o.del) return {{inst.arg, FastAccess::Delete}};
  // Paired forms: the high nibble's slot first.
  const int first = compat::opargs::first_fast(inst.arg), second = compat::opargs::second_fast(inst.arg);
  if (op == o.load_load) return {{first, FastAccess::Read}, {second, FastAccess::Read}};
  if (op == o.store_store) return {{first, FastAccess::Write}, {second, FastAccess::Write}};
  if (op == o.store_load) return {{first, FastAccess::Write}, {second, FastAccess::Read}};
  return {};
}

}  // namespace cdynamo::bytecode
