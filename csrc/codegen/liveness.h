// liveness.h — owns liveness of fast locals over decoded bytecode (which locals a continuation needs).
#pragma once

#include <vector>

#include "bytecode/bytecode.h"
#include "bytecode/flow.h"

namespace cdynamo::codegen {

using bytecode::successors;  // bytecode/flow.h

// live[i][slot] != 0 iff local `slot` (< nlocals) may be read before being written on some path starting
// at instruction i (successors: fall-through, jump targets, exception handlers covering i).
std::vector<std::vector<char>> live_locals(const bytecode::Bytecode& bc, int nlocals);
std::vector<std::vector<char>> live_locals(const bytecode::Bytecode& bc, int nlocals,
                                          const std::vector<std::vector<size_t>>& succ);

}  // namespace cdynamo::codegen
