// flow.h — owns the control-flow successors of a decoded code object (shared by the tracer's loop test and
// codegen's liveness) and the fast-local slots each instruction reads and writes.
#pragma once

#include <cstddef>
#include <vector>

#include "bytecode/bytecode.h"

namespace cdynamo::bytecode {

// Per instruction index: the indices control can reach next (fall-through, jump target, the handlers of the
// exception-table entries covering it).
std::vector<std::vector<size_t>> successors(const Bytecode& bc);

// One access of a fast-local slot by an instruction.
struct FastAccess {
  enum Kind { Read, Write, Delete };
  int slot;
  Kind kind;
};
// The fast-local slots `inst` reads, writes or deletes, in the order it does so (LOAD_FAST, LOAD_FAST_CHECK,
// LOAD_FAST_AND_CLEAR — a read that unbinds —, STORE_FAST, DELETE_FAST, and 3.13's paired
// LOAD_FAST_LOAD_FAST / STORE_FAST_STORE_FAST / STORE_FAST_LOAD_FAST); empty for every other instruction.
std::vector<FastAccess> fast_accesses(const Instruction& inst);
// True for the paired forms (two slots in one oparg, 3.13).
bool is_paired_fast(int opcode);

}  // namespace cdynamo::bytecode
