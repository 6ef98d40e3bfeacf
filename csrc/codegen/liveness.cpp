// liveness.cpp — owns the backward dataflow computing live fast locals per instruction.
#include "codegen/liveness.h"

#include <string>

namespace cdynamo::codegen {

std::vector<std::vector<char>> live_locals(const bytecode::Bytecode& bc, int nlocals) {
  return live_locals(bc, nlocals, successors(bc));
}

std::vector<std::vector<char>> live_locals(const bytecode::Bytecode& bc, int nlocals,
                                          const std::vector<std::vector<size_t>>& succ) {
  size_t n = bc.insts.size();
  std::vector<std::vector<char>> live(n + 1, std::vector<char>(nlocals, 0));
  bool changed = true;
  while (changed) {
    changed = false;
    for (size_t k = n; k-- > 0;) {
      const auto* inst = bc.insts[k].get();
      std::vector<char> out(nlocals, 0);
      for (size_t s : succ[k])
        for (int j = 0; j < nlocals; ++j) out[j] |= live[s][j];
      // Backwards through the instruction's accesses (3.13's paired forms make two, in order): a write kills,
      // a read or a deletion (of a bound local) makes live.
      const std::vector<bytecode::FastAccess> acc = bytecode::fast_accesses(*inst);
      for (auto a = acc.rbegin(); a != acc.rend(); ++a) {
        if (a->slot < 0 || a->slot >= nlocals) continue;
        out[a->slot] = a->kind == bytecode::FastAccess::Write ? 0 : 1;
      }
      if (out != live[k]) {
        live[k] = std::move(out);
        changed = true;
      }
    }
  }
  live.resize(n);
  return live;
}

}  // namespace cdynamo::codegen
