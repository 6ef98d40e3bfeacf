// printer.cpp — owns the text forms of a graph: target_name, format_arg, tabular() and readable().
#include <algorithm>
#include <array>
#include <string_view>

#include "graph/graph.h"

namespace cdynamo::graph {
namespace {

// getattr(obj, name) as a std::string, or "" when missing / not a str.
std::string str_attr(const py::handle& obj, const char* name) {
  PyObject* v = PyObject_GetAttrString(obj.ptr(), name);
  if (v == nullptr) {
    PyErr_Clear();
    return {};
  }
  py::object owned = py::reinterpret_steal<py::object>(v);
  if (!PyUnicode_Check(v)) return {};
  Py_ssize_t len = 0;
  const char* s = PyUnicode_AsUTF8AndSize(v, &len);
  if (s == nullptr) {
    PyErr_Clear();
    return {};
  }
  return std::string(s, static_cast<size_t>(len));
}

bool starts_with(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }

std::string py_repr(const py::handle& v) {
  if (!v) return "None";
  return py::cast<std::string>(py::repr(v));
}

// repr() of a str key, done in C++ for the common case (no quotes, backslashes or control bytes).
std::string repr_key(const std::string& k) {
  for (unsigned char c : k) {
    if (c == '\'' || c == '\\' || c < 0x20 || c >= 0x7f) return py_repr(py::str(k));
  }
  return "'" + k + "'";
}

void append_arg(std::string& out, const Arg& a);

void append_seq(std::string& out, const std::vector<Arg>& items, char open, char close, bool tuple) {
  out.push_back(open);
  for (size_t i = 0; i < items.size(); ++i) {
    if (i) out += ", ";
    append_arg(out, items[i]);
  }
  if (tuple && items.size() == 1) out.push_back(',');
  out.push_back(close);
}

void append_arg(std::string& out, const Arg& a) {
  switch (a.kind) {
    case Arg::Kind::NodeRef: out += a.node ? a.node->name : std::string("<null>"); return;
    case Arg::Kind::Const: out += py_repr(a.value); return;
    case Arg::Kind::Tuple: append_seq(out, a.items, '(', ')', true); return;
    case Arg::Kind::List: append_seq(out, a.items, '[', ']', false); return;
    case Arg::Kind::Slice:
      out += "slice";
      append_seq(out, a.items, '(', ')', false);
      return;
    case Arg::Kind::Dict:
      out.push_back('{');
      for (size_t i = 0; i < a.items.size(); ++i) {
        if (i) out += ", ";
        out += repr_key(i < a.keys.size() ? a.keys[i] : std::string());
        out += ": ";
        append_arg(out, a.items[i]);
      }
      out.push_back('}');
      return;
  }
}

std::string format_kwargs_dict(const std::vector<std::pair<std::string, Arg>>& kwargs) {
  std::string out = "{";
  for (size_t i = 0; i < kwargs.size(); ++i) {
    if (i) out += ", ";
    out += repr_key(kwargs[i].first);
    out += ": ";
    append_arg(out, kwargs[i].second);
  }
  out += "}";
  return out;
}

std::string node_target_text(const Node& n) {
  if (n.op == OpKind::CallFunction) return target_name(n.target);
  if (!n.target) return "None";
  if (py::isinstance<py::str>(n.target)) return py::cast<std::string>(n.target);
  return py_repr(n.target);
}

// Display width as tabulate counts it without wcwidth: one per code point.
size_t width(const std::string& s) {
  size_t w = 0;
  for (unsigned char c : s) {
    if ((c & 0xC0) != 0x80) ++w;
  }
  return w;
}

const char* binary_operator(const std::string& name) {
  static const std::pair<const char*, const char*> table[] = {
      {"add", "+"},   {"sub", "-"},     {"mul", "*"},     {"truediv", "/"}, {"floordiv", "//"},
      {"mod", "%"},   {"pow", "**"},    {"matmul", "@"},  {"and_", "&"},    {"or_", "|"},
      {"xor", "^"},   {"lshift", "<<"}, {"rshift", ">>"}, {"lt", "<"},      {"le", "<="},
      {"eq", "=="},   {"ne", "!="},     {"gt", ">"},      {"ge", ">="},     {"is_", "is"},
      {"is_not", "is not"}};
  for (const auto& [k, v] : table) {
    if (name == k) return v;
  }
  return nullptr;
}

const char* unary_operator(const std::string& name) {
  if (name == "neg") return "-";
  if (name == "pos") return "+";
  if (name == "invert") return "~";
  if (name == "not_") return "not ";
  return nullptr;
}

// "a, 1, k=b" from positional args starting at `first` and kwargs.
std::string call_args(const Node& n, size_t first) {
  std::string out;
  for (size_t i = first; i < n.args.size(); ++i) {
    if (!out.empty()) out += ", ";
    append_arg(out, n.args[i]);
  }
  for (const auto& [k, v] : n.kwargs) {
    if (!out.empty()) out += ", ";
    out += k;
    out += "=";
    append_arg(out, v);
  }
  return out;
}

std::string readable_rhs(const Node& n) {
  const std::string target = node_target_text(n);
  switch (n.op) {
    case OpKind::GetAttr: return "self." + target;
    case OpKind::CallModule: return "self." + target + "(" + call_args(n, 0) + ")";
    case OpKind::CallMethod: {
      if (n.args.empty()) return "<no self>." + target + "(" + call_args(n, 0) + ")";
      return format_arg(n.args[0]) + "." + target + "(" + call_args(n, 1) + ")";
    }
    case OpKind::CallFunction: {
      if (starts_with(target, "operator.") && n.kwargs.empty()) {
        std::string op = target.substr(9);
        if (n.args.size() == 2) {
          if (const char* sym = binary_operator(op)) {
            return format_arg(n.args[0]) + " " + sym + " " + format_arg(n.args[1]);
          }
          if (op == "getitem") return format_arg(n.args[0]) + "[" + format_arg(n.args[1]) + "]";
        }
        if (n.args.size() == 1) {
          if (const char* sym = unary_operator(op)) return sym + format_arg(n.args[0]);
        }
      }
      return target + "(" + call_args(n, 0) + ")";
    }
    case OpKind::Placeholder:
    case OpKind::Output: break;
  }
  return target;
}

}  // namespace

std::string target_name(const py::handle& target) {
  if (!target || target.is_none()) return "None";
  if (py::isinstance<py::str>(target)) return py::cast<std::string>(target);
  const std::string module = str_attr(target, "__module__");
  const std::string qualname = str_attr(target, "__qualname__");
  const std::string name = str_attr(target, "__name__");
  if (PyCFunction_Check(target.ptr())) {
    if (starts_with(qualname, "_VariableFunctionsClass.")) return "torch." + name;
    if (module == "builtins" && !name.empty()) return name;
  }
  if ((module == "_operator" || module == "operator") && !name.empty()) return "operator." + name;
  // Tensor methods used as functions: torch.Tensor.add (a C method descriptor on TensorBase, or a
  // Python function defined on torch._tensor.Tensor).
  if (!name.empty() && (qualname == "TensorBase." + name ||
                        (module == "torch._tensor" && qualname == "Tensor." + name))) {
    return "torch.Tensor." + name;
  }
  if (starts_with(module, "torch._ops")) return "torch.ops." + py::cast<std::string>(py::str(target));
  if (!module.empty() && !qualname.empty()) return module + "." + qualname;
  if (!qualname.empty()) return qualname;
  if (!name.empty()) return name;
  return py_repr(target);
}

std::string format_arg(const Arg& a) {
  std::string out;
  append_arg(out, a);
  return out;
}

std::string Graph::tabular() const {
  static const char* headers[5] = {"opcode", "name", "target", "args", "kwargs"};
  std::vector<std::array<std::string, 5>> rows;
  rows.reserve(nodes_.size());
  size_t widths[5];
  for (int c = 0; c < 5; ++c) widths[c] = std::string_view(headers[c]).size() + 2;  // tabulate MIN_PADDING
  for (const auto& n : nodes_) {
    std::array<std::string, 5> row;
    row[0] = op_name(n->op);
    row[1] = n->name;
    row[2] = node_target_text(*n);
    append_seq(row[3], n->args, '(', ')', true);
    row[4] = format_kwargs_dict(n->kwargs);
    for (int c = 0; c < 5; ++c) widths[c] = std::max(widths[c], width(row[c]));
    rows.push_back(std::move(row));
  }
  std::string out;
  auto emit_row = [&](auto cell) {
    std::string line;
    for (int c = 0; c < 5; ++c) {
      if (c) line += "  ";
      std::string text = cell(c);
      size_t w = width(text);
      line += text;
      if (w < widths[c]) line.append(widths[c] - w, ' ');
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();  // tabulate strips each row
    out += line;
    out += '\n';
  };
  emit_row([&](int c) { return std::string(headers[c]); });
  emit_row([&](int c) { return std::string(widths[c], '-'); });
  for (const auto& row : rows) emit_row([&](int c) { return row[c]; });
  return out;
}

std::string Graph::readable() const {
  std::string sig = "def forward(self";
  std::string body;
  for (const auto& n : nodes_) {
    switch (n->op) {
      case OpKind::Placeholder:
        sig += ", ";
        sig += n->name;
        break;
      case OpKind::Output:
        body += "    return ";
        body += n->args.empty() ? std::string("None") : format_arg(n->args[0]);
        body += "\n";
        break;
      default:
        body += "    ";
        body += n->name;
        body += " = ";
        body += readable_rhs(*n);
        body += "\n";
        break;
    }
  }
  return sig + "):\n" + body;
}

}  // namespace cdynamo::graph
