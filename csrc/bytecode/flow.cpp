// flow.cpp — owns the control-flow successors of a decoded code object.
#include "bytecode/flow.h"

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

}  // namespace cdynamo::bytecode
