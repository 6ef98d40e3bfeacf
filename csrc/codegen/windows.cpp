// windows.cpp — owns choosing the cut points of long functions (stack depth, try/loop ranges, definite
// assignment of the live locals).
#include "codegen/windows.h"

#include <climits>
#include <stdexcept>

#include "bytecode/flow.h"
#include "compat/compat.h"

namespace cdynamo::codegen {

namespace {

// Per instruction: the plain locals bound on every path reaching it (forward must-analysis).
std::vector<std::vector<char>> definitely_bound(const bytecode::Bytecode& bc, int nlocals, int nargs,
                                                const std::vector<std::vector<size_t>>& succ) {
  const size_t n = bc.insts.size();
  std::vector<std::vector<char>> in(n, std::vector<char>(static_cast<size_t>(nlocals), 1));
  std::vector<char> seen(n, 0);
  if (n == 0) return in;
  for (int s = 0; s < nlocals; ++s) in[0][static_cast<size_t>(s)] = s < nargs;
  seen[0] = 1;
  bool changed = true;
  while (changed) {
    changed = false;
    for (size_t k = 0; k < n; ++k) {
      if (!seen[k]) continue;
      std::vector<char> out = in[k];
      const auto* inst = bc.insts[k].get();
      for (const auto& a : bytecode::fast_accesses(*inst)) {
        if (a.slot < 0 || a.slot >= nlocals) continue;
        if (a.kind == bytecode::FastAccess::Write) out[static_cast<size_t>(a.slot)] = 1;
        if (a.kind == bytecode::FastAccess::Delete) out[static_cast<size_t>(a.slot)] = 0;
      }
      for (size_t s : succ[k]) {
        std::vector<char>& dst = in[s];
        if (!seen[s]) {
          seen[s] = 1;
          dst = out;
          changed = true;
          continue;
        }
        for (size_t j = 0; j < out.size(); ++j)
          if (dst[j] && !out[j]) {
            dst[j] = 0;
            changed = true;
          }
      }
    }
  }
  return in;
}

}  // namespace

WindowPlan plan_windows(PyCodeObject* code, const bytecode::Bytecode& bc,
                        const std::vector<std::vector<size_t>>& succ, const std::vector<std::vector<char>>& live) {
  WindowPlan plan;
  const size_t n = bc.insts.size();
  plan.cut.assign(n, 0);
  plan.args.resize(0);
  if (n < kWindowedFunction) return plan;
  const int flags = CO_GENERATOR | CO_COROUTINE | CO_ASYNC_GENERATOR | CO_ITERABLE_COROUTINE;
  if (code->co_flags & flags) return plan;
  const int nlocals = code->co_nlocals;
  if (compat::code_nlocalsplus(code) != nlocals) return plan;  // cells or free variables
  std::vector<int> depth;
  try {
    bytecode::stack_depths(bc, depth);
  } catch (const std::runtime_error&) {
    return plan;
  }
  // Instructions inside a try/with range or a loop (a backward jump's span), by difference counts.
  std::vector<int> covered(n + 1, 0);
  for (const auto& e : bc.exception_table) {
    int s = bc.index_of(e.start), t = bc.index_of(e.end), h = bc.index_of(e.target);
    if (s < 0 || t < 0 || h < 0) return plan;
    ++covered[static_cast<size_t>(s)];
    --covered[static_cast<size_t>(t) + 1];
  }
  for (size_t j = 0; j < n; ++j) {
    const auto* i = bc.insts[j].get();
    if (!i->target || !bytecode::is_backward_jump(i->opcode)) continue;
    int t = bc.index_of(i->target);
    if (t < 0) return plan;
    ++covered[static_cast<size_t>(t)];
    --covered[j + 1];
  }
  const std::vector<std::vector<char>> bound = definitely_bound(bc, nlocals, compat::code_total_args(code), succ);
  const int resume = bytecode::opcode_by_name("RESUME");
  size_t start = 0;
  while (start < n && bc.insts[start]->opcode != resume) ++start;
  plan.args.assign(n, {});
  bool any = false;
  size_t last = start;
  int inside = 0;
  for (size_t i = 0; i < n; ++i) {
    inside += covered[i];
    if (i <= start || i < last + kWindowInstructions || inside != 0 || depth[i] != 0) continue;
    std::vector<int> args;
    bool ok = true;
    for (int s = 0; s < nlocals && ok; ++s) {
      if (!live[i][static_cast<size_t>(s)]) continue;
      ok = bound[i][static_cast<size_t>(s)] != 0;
      args.push_back(s);
    }
    if (!ok) continue;
    plan.cut[i] = 1;
    plan.args[i] = std::move(args);
    last = i;
    any = true;
  }
  if (!any) plan.args.clear();
  return plan;
}

}  // namespace cdynamo::codegen
