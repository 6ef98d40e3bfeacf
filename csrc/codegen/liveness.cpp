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
  const int load_fast = bytecode::opcode_by_name("LOAD_FAST");
  const int store_fast = bytecode::opcode_by_name("STORE_FAST");
  const int delete_fast = bytecode::opcode_by_name("DELETE_FAST");
  const int load_fast_check = bytecode::opcode_by_name("LOAD_FAST_CHECK");          // 3.12+; -1 before
  const int load_fast_and_clear = bytecode::opcode_by_name("LOAD_FAST_AND_CLEAR");  // 3.12+; -1 before
  bool changed = true;
  while (changed) {
    changed = false;
    for (size_t k = n; k-- > 0;) {
      const auto* inst = bc.insts[k].get();
      std::vector<char> out(nlocals, 0);
      for (size_t s : succ[k])
        for (int j = 0; j < nlocals; ++j) out[j] |= live[s][j];
      bool reads = inst->opcode == load_fast || inst->opcode == delete_fast || inst->opcode == load_fast_check ||
                   inst->opcode == load_fast_and_clear;
      bool writes = inst->opcode == store_fast;
      if (writes && inst->arg < nlocals) out[inst->arg] = 0;
      if (reads && inst->arg < nlocals) out[inst->arg] = 1;
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
