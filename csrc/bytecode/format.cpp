// format.cpp — owns the dis-style listing (same columns and argument text as `dis.disassemble` of 3.11 / 3.12,
// and 3.13's labelled layout).
#include "bytecode/detail.h"
#include "compat/opargs.h"
#include "opcodes_gen.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <set>
#include <string>

namespace cdynamo::bytecode {

namespace {

constexpr size_t kOpnameWidth = 20;
constexpr size_t kOpargWidth = 5;

// UTF-8 text of a str object (borrowed); "" (error cleared) when it cannot be encoded.
std::string str_text(PyObject* s) {
  if (s == nullptr || !PyUnicode_Check(s)) return "";
  Py_ssize_t size = 0;
  const char* p = PyUnicode_AsUTF8AndSize(s, &size);  // buffer borrowed from `s`
  if (p == nullptr) {
    PyErr_Clear();
    return "";
  }
  return std::string(p, static_cast<size_t>(size));
}

// repr(obj) as text; obj is borrowed.
std::string repr_text(PyObject* obj) {
  detail::Ref r(PyObject_Repr(obj));  // new reference
  if (!r) {
    PyErr_Clear();
    return "";
  }
  return str_text(r.get());
}

// Item `i` of a tuple (borrowed), or nullptr when out of range / not a tuple.
PyObject* tuple_item(PyObject* tuple, long long i) {
  if (tuple == nullptr || !PyTuple_Check(tuple) || i < 0 || i >= PyTuple_GET_SIZE(tuple)) return nullptr;
  return PyTuple_GET_ITEM(tuple, static_cast<Py_ssize_t>(i));
}

std::string varname(PyCodeObject* code, long long arg) {
  // _varname_from_oparg returns a new reference to the localsplus name.
  detail::Ref name(PyObject_CallMethod(reinterpret_cast<PyObject*>(code), "_varname_from_oparg", "L", arg));
  if (!name) {
    PyErr_Clear();
    return "";
  }
  return str_text(name.get());
}

// A relative jump's target offset as dis computes it (3.12+: after the instruction's inline caches).
long long jrel_target(int op, long long arg, int offset) {
  long long to = offset + 2 + (is_backward_jump(op) ? -arg : arg) * 2;
  if (gen::kPyMinor >= 12) to += 2 * cache_entries(op);
  return to;
}

// `labels` (3.13): jump target offset -> label number.
std::string argrepr(PyCodeObject* code, int op, long long arg, int offset,
                    const std::map<long long, int>* labels = nullptr) {
  if (gen::kHasConst[op]) {
    if (op != gen::OP_LOAD_CONST && gen::kPyMinor < 12) return "";  // 3.12 resolves every const operand
    PyObject* c = tuple_item(code->co_consts, arg);  // borrowed
    return c ? repr_text(c) : "";
  }
  if (gen::kHasName[op]) {
    if (op == gen::OP_LOAD_GLOBAL) {
      std::string name = str_text(tuple_item(code->co_names, arg >> 1));
      if (!(arg & 1) || name.empty()) return name;
      if (gen::kPyMinor >= 13) return name += " + NULL";
      std::string s = "NULL + ";
      s += name;
      return s;
    }
    if (compat::opargs::kMinor >= 12 && (op == opcode_by_name("LOAD_ATTR") || op == opcode_by_name("LOAD_SUPER_ATTR"))) {
      const bool super_attr = op == opcode_by_name("LOAD_SUPER_ATTR");
      std::string name = str_text(tuple_item(
          code->co_names, super_attr ? compat::opargs::load_super_attr_name(static_cast<int>(arg))
                                     : compat::opargs::load_attr_name(static_cast<int>(arg))));
      if (!(arg & 1) || name.empty()) return name;
      if (gen::kPyMinor >= 13) return name += " + NULL|self";
      return "NULL|self + " + name;
    }
    return str_text(tuple_item(code->co_names, arg));
  }
  if (gen::kHasJabs[op] || gen::kHasJrel[op]) {
    const long long to = gen::kHasJabs[op] ? arg * 2 : jrel_target(op, arg, offset);
    std::string s = "to ";
    if (labels) {  // 3.13: jumps name their target's label
      auto it = labels->find(to);
      if (it == labels->end()) {
        s += std::to_string(to);
      } else {
        s += 'L';
        s += std::to_string(it->second);
      }
      return s;
    }
    s += std::to_string(to);
    return s;
  }
  if (op == opcode_by_name("LOAD_FAST_LOAD_FAST") || op == opcode_by_name("STORE_FAST_LOAD_FAST") ||
      op == opcode_by_name("STORE_FAST_STORE_FAST")) {
    std::string s = varname(code, compat::opargs::first_fast(static_cast<int>(arg)));
    s += ", ";
    s += varname(code, compat::opargs::second_fast(static_cast<int>(arg)));
    return s;
  }
  if (gen::kHasLocal[op] || gen::kHasFree[op]) return varname(code, arg);
  if (gen::kHasCompare[op]) {
    const int cmp = compat::opargs::compare_op(static_cast<int>(arg));
    if (cmp < 0 || cmp >= gen::kNumCmpOps) return "";
    if (compat::opargs::compare_op_to_bool(static_cast<int>(arg))) {
      std::string s = "bool(";
      s += gen::kCmpOp[cmp];
      s += ')';
      return s;
    }
    return gen::kCmpOp[cmp];
  }
  if (op == opcode_by_name("CONVERT_VALUE")) {
    static const char* const conv[] = {"", "str", "repr", "ascii"};
    return arg >= 0 && arg < 4 ? conv[arg] : "";
  }
  if (gen::kNumIntrinsic1 > 0 && op == opcode_by_name("CALL_INTRINSIC_1"))
    return (arg >= 0 && arg < gen::kNumIntrinsic1) ? gen::kIntrinsic1[arg] : "";
  if (gen::kNumIntrinsic2 > 0 && op == opcode_by_name("CALL_INTRINSIC_2"))
    return (arg >= 0 && arg < gen::kNumIntrinsic2) ? gen::kIntrinsic2[arg] : "";
  if (op == opcode_by_name("FORMAT_VALUE")) {  // 3.11, 3.12
    static const char* const conv[] = {"", "str", "repr", "ascii"};
    std::string s = conv[arg & 3];
    if (arg & 4) s += s.empty() ? "with format" : ", with format";
    return s;
  }
  if (op == opcode_by_name(gen::kPyMinor >= 13 ? "SET_FUNCTION_ATTRIBUTE" : "MAKE_FUNCTION")) {
    static const char* const flags[] = {"defaults", "kwdefaults", "annotations", "closure"};
    std::string s;
    for (int i = 0; i < 4; ++i) {
      if (!(arg & (1 << i))) continue;
      if (!s.empty()) s += ", ";
      s += flags[i];
    }
    return s;
  }
  if (op == gen::OP_BINARY_OP) return (arg >= 0 && arg < gen::kNumNbOps) ? gen::kNbOps[arg] : "";
  return "";
}

struct Unpacked {
  int offset;
  int op;  // as stored (dis prints the stored opcode's name)
  bool has_arg;
  long long arg;
};

// Mirrors dis._unpack_opargs: EXTENDED_ARG is its own entry, CACHE units are skipped.
std::vector<Unpacked> unpack(std::string_view code) {
  std::vector<Unpacked> out;
  long long ext = 0;
  int caches = 0;
  for (size_t i = 0; i + 1 < code.size(); i += 2) {
    if (caches > 0) {
      --caches;
      continue;
    }
    const int op = static_cast<unsigned char>(code[i]);
    const int base = deopt(op);
    caches = cache_entries(base);
    Unpacked u{static_cast<int>(i), op, gen::kHasArg[base], 0};
    if (u.has_arg) {
      u.arg = static_cast<unsigned char>(code[i + 1]) | ext;
      ext = base == gen::kExtendedArg ? (u.arg << 8) : 0;
      if (ext >= (1ll << 31)) ext -= (1ll << 32);
    } else {
      ext = 0;
    }
    out.push_back(u);
  }
  return out;
}

std::string rjust(std::string s, size_t w) { return s.size() >= w ? s : std::string(w - s.size(), ' ') + s; }
std::string ljust(std::string s, size_t w) { return s.size() >= w ? s : s + std::string(w - s.size(), ' '); }

// 3.13's dis.disassemble: labels (L1, L2, ...) on jump targets and exception-table bounds instead of offsets,
// lines that change to "no line" shown as "--".
std::string listing_313(std::string_view code, std::string_view linetable, int firstlineno, std::string_view exctable,
                        PyCodeObject* ctx) {
  const size_t units = code.size() / 2;
  const auto positions = parse_location_table(linetable, firstlineno, units);
  // dis.findlinestarts (3.13): every change of line, to "no line" included.
  std::vector<char> starts(units, 0);
  int last = -2, max_line = -1;
  bool none_start = false;
  for (size_t u = 0; u < units; ++u) {
    const int line = positions[u].line < 0 ? -1 : positions[u].line;
    if (line != last) {
      starts[u] = 1;
      last = line;
      if (line < 0) none_start = true;
      else max_line = std::max(max_line, line);
    }
  }
  size_t lineno_width = 0;
  if (max_line >= 0) {
    lineno_width = std::max<size_t>(3, std::to_string(max_line).size());
    if (lineno_width < 4 && none_start) lineno_width = 4;
  }
  const auto entries = parse_exception_table(exctable);
  const auto insts = unpack(code);
  std::set<long long> targets;
  for (const auto& u : insts) {
    const int base = deopt(u.op);
    if (!u.has_arg) continue;
    if (gen::kHasJrel[base]) targets.insert(jrel_target(base, u.arg, u.offset));
    if (gen::kHasJabs[base]) targets.insert(u.arg * 2);
  }
  for (const auto& e : entries) {
    targets.insert(e.start);
    targets.insert(e.end);
    targets.insert(e.target);
  }
  std::map<long long, int> labels;
  int next = 1;
  for (long long t : targets) labels[t] = next++;
  const size_t label_width = 4 + std::to_string(labels.size()).size();

  std::string out;
  for (const auto& u : insts) {
    const size_t unit = static_cast<size_t>(u.offset / 2);
    const bool starts_line = lineno_width && starts[unit];
    if (starts_line && u.offset > 0) out += "\n";
    std::string row;
    if (lineno_width) {
      if (starts_line) {
        const int line = positions[unit].line;
        row += rjust(line >= 0 ? std::to_string(line) : std::string("  --"), lineno_width);
      } else {
        row += std::string(lineno_width, ' ');
      }
      row += ' ';
    }
    auto lbl = labels.find(u.offset);
    std::string label;
    if (lbl != labels.end()) {
      label += 'L';
      label += std::to_string(lbl->second);
      label += ':';
    }
    row += rjust(label, label_width);
    row += " ";
    row += "   ";  // no current-instruction marker
    row += ' ';
    const std::string name = opname(u.op);
    row += ljust(name, kOpnameWidth);
    if (u.has_arg) {
      row += ' ';
      const size_t excess = name.size() > kOpnameWidth ? name.size() - kOpnameWidth : 0;
      row += rjust(std::to_string(u.arg), kOpargWidth > excess ? kOpargWidth - excess : 0);
      const std::string detail = argrepr(ctx, deopt(u.op), u.arg, u.offset, &labels);
      if (!detail.empty()) {
        row += " (";
        row += detail;
        row += ")";
      }
    }
    while (!row.empty() && row.back() == ' ') row.pop_back();
    out += row + "\n";
  }
  if (!entries.empty()) {
    out += "ExceptionTable:\n";
    for (const auto& e : entries) {
      out += "  L";
      out += std::to_string(labels[e.start]);
      out += " to L";
      out += std::to_string(labels[e.end]);
      out += " -> L";
      out += std::to_string(labels[e.target]);
      out += " [";
      out += std::to_string(e.depth);
      out += e.lasti ? "] lasti\n" : "]\n";
    }
  }
  return out;
}

std::string listing(std::string_view code, std::string_view linetable, int firstlineno, std::string_view exctable,
                    PyCodeObject* ctx) {
  if (gen::kPyMinor >= 13) return listing_313(code, linetable, firstlineno, exctable, ctx);
  const size_t units = code.size() / 2;
  const auto positions = parse_location_table(linetable, firstlineno, units);
  std::vector<int> starts(units, -1);  // line starting at each code unit (dis.findlinestarts)
  int last = -1, max_line = -1;
  bool any = false;
  for (size_t u = 0; u < units; ++u) {
    const int line = positions[u].line;
    if (line >= 0 && (!any || line != last)) {
      starts[u] = last = line;
      max_line = std::max(max_line, line);
      any = true;
    }
  }
  const size_t lineno_width = !any ? 0 : (max_line >= 1000 ? std::to_string(max_line).size() : 3);
  const int max_offset = static_cast<int>(code.size()) - 2;
  const size_t offset_width = max_offset >= 10000 ? std::to_string(max_offset).size() : 4;
  const auto entries = parse_exception_table(exctable);
  const auto insts = unpack(code);

  std::set<long long> labels;
  for (const auto& u : insts) {
    const int base = deopt(u.op);
    if (!u.has_arg) continue;
    if (gen::kHasJrel[u.op]) labels.insert(jrel_target(base, u.arg, u.offset));
    if (gen::kHasJabs[u.op]) labels.insert(u.arg * 2);
  }
  for (const auto& e : entries) {
    if (e.start < e.end) labels.insert(e.target);
  }

  std::string out;
  for (const auto& u : insts) {
    const int line = starts[static_cast<size_t>(u.offset / 2)];
    if (lineno_width && line >= 0 && u.offset > 0) out += "\n";
    std::string row;
    if (lineno_width) {
      row += line >= 0 ? rjust(std::to_string(line), lineno_width) : std::string(lineno_width, ' ');
      row += ' ';
    }
    row += "    ";  // no current-instruction marker, then the field separator
    row += labels.count(u.offset) ? ">>" : "  ";
    row += ' ';
    row += rjust(std::to_string(u.offset), offset_width);
    row += ' ';
    row += ljust(opname(u.op), kOpnameWidth);
    if (u.has_arg) {
      row += ' ';
      row += rjust(std::to_string(u.arg), kOpargWidth);
      const std::string detail = argrepr(ctx, deopt(u.op), u.arg, u.offset);
      if (!detail.empty()) {
        row += " (";
        row += detail;
        row += ")";
      }
    }
    while (!row.empty() && row.back() == ' ') row.pop_back();
    out += row + "\n";
  }
  if (!entries.empty()) {
    out += "ExceptionTable:\n";
    for (const auto& e : entries) {
      out += "  ";
      out += std::to_string(e.start);
      out += " to ";
      out += std::to_string(e.end - 2);
      out += " -> ";
      out += std::to_string(e.target);
      out += " [";
      out += std::to_string(e.depth);
      out += e.lasti ? "] lasti\n" : "]\n";
    }
  }
  return out;
}

}  // namespace

std::string format(PyCodeObject* code) {
  if (code == nullptr || !PyCode_Check(reinterpret_cast<PyObject*>(code))) {
    throw std::runtime_error("format: not a code object");
  }
  detail::Ref co_code(PyCode_GetCode(code));  // new reference: deoptimized bytes
  if (!co_code) detail::throw_python_error("format: PyCode_GetCode");
  // co_linetable / co_exceptiontable are borrowed fields.
  return listing(detail::bytes_view(co_code.get(), "co_code"), detail::bytes_view(code->co_linetable, "co_linetable"),
                 code->co_firstlineno, detail::bytes_view(code->co_exceptiontable, "co_exceptiontable"), code);
}

std::string format(const Bytecode& bc, PyCodeObject* code) {
  if (code == nullptr || !PyCode_Check(reinterpret_cast<PyObject*>(code))) {
    throw std::runtime_error("format: not a code object");
  }
  // Owns its three byte strings; no stack analysis, so programs with a depth error can still be listed.
  const Assembled a = detail::assemble_impl(bc, code->co_firstlineno, false);
  return listing(detail::bytes_view(a.code, "code"), detail::bytes_view(a.linetable, "linetable"),
                 code->co_firstlineno, detail::bytes_view(a.exceptiontable, "exceptiontable"), code);
}

std::string format_recursive(PyCodeObject* code) {
  std::string out = format(code);
  PyObject* consts = code->co_consts;  // borrowed
  for (Py_ssize_t i = 0; consts && PyTuple_Check(consts) && i < PyTuple_GET_SIZE(consts); ++i) {
    PyObject* c = PyTuple_GET_ITEM(consts, i);  // borrowed
    if (!PyCode_Check(c)) continue;
    out += "\nDisassembly of ";
    out += repr_text(c);
    out += ":\n";
    out += format_recursive(reinterpret_cast<PyCodeObject*>(c));
  }
  return out;
}

}  // namespace cdynamo::bytecode
