// assemble.cpp — owns encoding a Bytecode to co_code / co_exceptiontable / co_linetable (EXTENDED_ARG fixpoint).
#include "bytecode/detail.h"
#include "opcodes_gen.h"

#include <array>
#include <stdexcept>
#include <string>
#include <unordered_map>

namespace cdynamo::bytecode {

namespace {

// For each relative jump opcode: its forward and backward variants (-1 when there is none).
struct JumpVariants {
  std::array<int, 256> forward;
  std::array<int, 256> backward;
};

const JumpVariants& jump_variants() {
  static const JumpVariants v = [] {
    JumpVariants r;
    r.forward.fill(-1);
    r.backward.fill(-1);
    for (int op = 0; op < 256; ++op) {
      if (!gen::kHasJrel[op] || gen::kDeopt[op] != op) continue;
      std::string name = gen::kOpname[op];
      auto swap = [&](const std::string& from, const std::string& to) {
        std::string other = name;
        other.replace(other.find(from), from.size(), to);
        return opcode_by_name(other.c_str());
      };
      if (name.find("BACKWARD") != std::string::npos) {
        r.backward[op] = op;
        r.forward[op] = swap("BACKWARD", "FORWARD");
        if (r.forward[op] < 0) r.forward[op] = gen::OP_JUMP_FORWARD;  // JUMP_BACKWARD_NO_INTERRUPT
      } else {
        r.forward[op] = op;
        if (name.find("FORWARD") != std::string::npos) r.backward[op] = swap("FORWARD", "BACKWARD");
      }
    }
    return r;
  }();
  return v;
}

struct Layout {
  std::vector<int> ops, args, units, offsets;  // offsets in code units
};

// Computes final opcodes/args/sizes: jump args from targets, iterated until no instruction changes size.
// Starts from the smallest sizes and recomputes all jumps per pass from the previous pass's layout, which
// reaches the same (least) fixpoint as the 3.11 compiler.
Layout layout(const Bytecode& bc, const std::unordered_map<const Instruction*, size_t>& index) {
  const size_t n = bc.insts.size();
  Layout l;
  l.ops.resize(n);
  l.args.resize(n);
  l.units.resize(n);
  l.offsets.resize(n + 1);
  std::vector<long> target(n, -1);
  for (size_t i = 0; i < n; ++i) {
    const Instruction& in = *bc.insts[i];
    if (in.opcode < 0 || in.opcode > 255 || opname(in.opcode)[0] == '<' || deopt(in.opcode) == gen::kCache ||
        deopt(in.opcode) == gen::kExtendedArg) {
      throw std::runtime_error("assemble: invalid opcode " + std::to_string(in.opcode) + " at index " +
                               std::to_string(i));
    }
    l.ops[i] = deopt(in.opcode);
    if (is_jump(l.ops[i])) {
      auto it = in.target ? index.find(in.target) : index.end();
      if (it == index.end()) {
        throw std::runtime_error(std::string("assemble: ") + opname(l.ops[i]) + " at index " + std::to_string(i) +
                                 " has a target that is not in this Bytecode");
      }
      target[i] = static_cast<long>(it->second);
      l.args[i] = 0;
    } else {
      if (in.arg < 0) throw std::runtime_error("assemble: negative oparg at index " + std::to_string(i));
      l.args[i] = has_arg(l.ops[i]) ? in.arg : 0;
    }
    l.units[i] = detail::instr_units(l.ops[i], l.args[i]);
  }
  const auto& variants = jump_variants();
  for (int pass = 0;; ++pass) {
    if (pass > 64) throw std::runtime_error("assemble: EXTENDED_ARG sizes did not converge");
    l.offsets[0] = 0;
    for (size_t i = 0; i < n; ++i) l.offsets[i + 1] = l.offsets[i] + l.units[i];
    bool changed = false;
    for (size_t i = 0; i < n; ++i) {
      if (target[i] < 0) continue;
      const int t = l.offsets[static_cast<size_t>(target[i])];
      int op = l.ops[i];
      int arg;
      if (gen::kHasJrel[op]) {
        const int end = l.offsets[i] + l.units[i];
        const bool backward = t < end;
        op = backward ? variants.backward[op] : variants.forward[op];
        if (op < 0) {
          throw std::runtime_error(std::string("assemble: ") + opname(l.ops[i]) + " at index " + std::to_string(i) +
                                   (backward ? " cannot jump backward" : " cannot jump forward"));
        }
        arg = backward ? end - t : t - end;
      } else {
        arg = t;
      }
      l.ops[i] = op;
      l.args[i] = arg;
      const int units = detail::instr_units(op, arg);
      if (units != l.units[i]) {
        l.units[i] = units;
        changed = true;
      }
    }
    if (!changed) break;
  }
  l.offsets[0] = 0;
  for (size_t i = 0; i < n; ++i) l.offsets[i + 1] = l.offsets[i] + l.units[i];
  return l;
}

std::string emit_code(const Layout& l) {
  std::string out;
  out.reserve(static_cast<size_t>(l.offsets.back()) * 2);
  for (size_t i = 0; i < l.ops.size(); ++i) {
    const unsigned arg = static_cast<unsigned>(l.args[i]);
    for (int shift = 8 * detail::extended_args(arg); shift > 0; shift -= 8) {
      out.push_back(static_cast<char>(gen::kExtendedArg));
      out.push_back(static_cast<char>((arg >> shift) & 0xFF));
    }
    out.push_back(static_cast<char>(l.ops[i]));
    out.push_back(static_cast<char>(arg & 0xFF));
    out.append(static_cast<size_t>(cache_entries(l.ops[i])) * 2, '\0');  // inline caches start zeroed
  }
  return out;
}

PyObject* to_bytes(const std::string& s) {
  // New reference.
  PyObject* b = PyBytes_FromStringAndSize(s.data(), static_cast<Py_ssize_t>(s.size()));
  if (b == nullptr) detail::throw_python_error("assemble: PyBytes_FromStringAndSize");
  return b;
}

}  // namespace

Assembled assemble(const Bytecode& bc, int firstlineno) { return detail::assemble_impl(bc, firstlineno, true); }

Assembled detail::assemble_impl(const Bytecode& bc, int firstlineno, bool with_stack_depth) {
  std::unordered_map<const Instruction*, size_t> index;
  index.reserve(bc.insts.size());
  for (size_t i = 0; i < bc.insts.size(); ++i) {
    if (!bc.insts[i]) throw std::runtime_error("assemble: null instruction at index " + std::to_string(i));
    index.emplace(bc.insts[i].get(), i);
  }
  const Layout l = layout(bc, index);

  std::vector<RawExceptionEntry> raw;
  raw.reserve(bc.exception_table.size());
  for (const auto& e : bc.exception_table) {
    auto s = index.find(e.start), en = index.find(e.end), t = index.find(e.target);
    if (s == index.end() || en == index.end() || t == index.end()) {
      throw std::runtime_error("assemble: exception table entry refers to an instruction not in this Bytecode");
    }
    if (s->second > en->second) throw std::runtime_error("assemble: exception table entry with start after end");
    raw.push_back({2 * l.offsets[s->second], 2 * l.offsets[en->second + 1], 2 * l.offsets[t->second], e.depth,
                   e.lasti});
  }
  std::vector<LocationRun> runs;
  runs.reserve(bc.insts.size());
  for (size_t i = 0; i < bc.insts.size(); ++i) runs.push_back({bc.insts[i]->pos, l.units[i]});

  const int depth = with_stack_depth ? stack_depth(bc) : 0;
  // Build every byte string first so nothing leaks if one step throws: Assembled owns what it holds.
  Assembled out;
  out.code = to_bytes(emit_code(l));
  out.exceptiontable = to_bytes(encode_exception_table(raw));
  out.linetable = to_bytes(encode_location_table(runs, firstlineno));
  out.stacksize = depth;
  return out;
}

}  // namespace cdynamo::bytecode
