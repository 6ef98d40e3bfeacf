// naming.cpp — owns node naming with torch.fx's rules (candidate from target, snake_case, unique suffixes).
#include <cstdint>
#include <limits>
#include <string_view>
#include <unordered_set>

#include "graph/graph.h"

namespace cdynamo::graph {
namespace {

bool is_lower(char c) { return c >= 'a' && c <= 'z'; }
bool is_upper(char c) { return c >= 'A' && c <= 'Z'; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_ident_start(char c) { return is_lower(c) || is_upper(c) || c == '_'; }
bool is_ident_char(char c) { return is_ident_start(c) || is_digit(c); }

// fx's _name_regex without the split: ASCII identifier, first character not a digit.
bool is_ascii_identifier(std::string_view s) {
  if (s.empty() || !is_ident_start(s[0])) return false;
  for (char c : s) {
    if (!is_ident_char(c)) return false;
  }
  return true;
}

// fx replaces each run of characters outside [0-9a-zA-Z_] with one "_"; empty -> "_unnamed";
// a leading digit gets a "_" prefix.
std::string sanitize(std::string_view s) {
  std::string out;
  out.reserve(s.size() + 1);
  bool in_run = false;
  for (char c : s) {
    if (is_ident_char(c)) {
      out.push_back(c);
      in_run = false;
    } else if (!in_run) {
      out.push_back('_');
      in_run = true;
    }
  }
  if (out.empty()) return "_unnamed";
  if (is_digit(out[0])) out.insert(out.begin(), '_');
  return out;
}

// The split done by fx's lazy regex ^([a-zA-Z_][0-9a-zA-Z_]*?)(?:_(\d+))?$ on a valid identifier:
// a numeric suffix exists when the name ends in "_<digits>" and the "_" is not the first character.
struct Split {
  std::string_view base;
  std::string_view digits;  // empty: no numeric suffix
};

Split split_suffix(std::string_view s) {
  size_t j = s.size();
  while (j > 0 && is_digit(s[j - 1])) --j;
  if (j < s.size() && j >= 2 && s[j - 1] == '_') return {s.substr(0, j - 1), s.substr(j)};
  return {s, {}};
}

int parse_suffix(std::string_view digits) {
  int64_t v = 0;
  for (char c : digits) {
    v = v * 10 + (c - '0');
    if (v > std::numeric_limits<int>::max() / 2) return std::numeric_limits<int>::max() / 2;  // saturate
  }
  return static_cast<int>(v);
}

std::string with_suffix(std::string_view base, int num) {
  std::string s(base);
  s.push_back('_');
  s += std::to_string(num);
  return s;
}

// Keywords and builtins fx refuses as variable names. Read from torch.fx.graph._illegal_names when
// available (entries whose value is None are accepted by fx, e.g. "None"); else rebuilt from
// keyword.kwlist + builtins + fx's custom builtins. Loaded once, under the GIL.
const std::unordered_set<std::string>& illegal_names() {
  static const std::unordered_set<std::string>* names = [] {
    auto* set = new std::unordered_set<std::string>();  // immortal: plain strings, no Python refs
    try {
      py::dict d = py::module_::import("torch.fx.graph").attr("_illegal_names");
      for (auto item : d) {
        if (!item.second.is_none()) set->insert(py::cast<std::string>(item.first));
      }
    } catch (py::error_already_set&) {
      set->clear();
      for (auto k : py::module_::import("keyword").attr("kwlist")) set->insert(py::cast<std::string>(k));
      for (auto item : py::module_::import("builtins").attr("__dict__").cast<py::dict>()) {
        if (!item.second.is_none()) set->insert(py::cast<std::string>(item.first));
      }
      for (const char* k : {"inf", "nan", "NoneType", "torch", "device", "fx_pytree", "pytree"}) set->insert(k);
      set->erase("None");
    }
    return set;
  }();
  return *names;
}

}  // namespace

namespace detail {

std::string snake_case(std::string_view s) {
  std::string out;
  out.reserve(s.size() + 4);
  for (size_t i = 0; i < s.size(); ++i) {
    char c = s[i];
    if (is_upper(c)) {
      if (i > 0 && is_lower(s[i - 1])) out.push_back('_');
      out.push_back(static_cast<char>(c - 'A' + 'a'));
    } else {
      out.push_back(c);
    }
  }
  return out;
}

std::string candidate_for(OpKind op, const py::handle& target) {
  if (op != OpKind::CallFunction || py::isinstance<py::str>(target)) {
    std::string t = py::cast<std::string>(target);
    // fx strips a __magic__ name to its middle (Python slicing: "__" or "___" become empty).
    if (t.size() >= 2 && t.compare(0, 2, "__") == 0 && t.compare(t.size() - 2, 2, "__") == 0) {
      t = t.size() >= 4 ? t.substr(2, t.size() - 4) : std::string();
    }
    return snake_case(t);
  }
  // fx uses target.__name__ for callables; objects without one fall back to their type's name.
  PyObject* name = PyObject_GetAttrString(target.ptr(), "__name__");
  if (name == nullptr) {
    PyErr_Clear();
    return snake_case(Py_TYPE(target.ptr())->tp_name);
  }
  py::object owned = py::reinterpret_steal<py::object>(name);
  if (!PyUnicode_Check(name)) return snake_case(py::cast<std::string>(py::str(owned)));
  Py_ssize_t len = 0;
  const char* utf8 = PyUnicode_AsUTF8AndSize(name, &len);
  if (utf8 == nullptr) throw py::error_already_set();
  return snake_case(std::string_view(utf8, static_cast<size_t>(len)));
}

bool is_illegal_name(const std::string& name) { return illegal_names().count(name) != 0; }

}  // namespace detail

// Mirrors torch.fx.graph._Namespace.create_name(candidate, obj=None) step by step.
std::string Graph::unique_name(const std::string& raw) {
  std::string candidate = is_ascii_identifier(raw) ? raw : sanitize(raw);
  Split sp = split_suffix(candidate);
  std::string base(sp.base);
  int num = 0;
  if (sp.digits.empty() || used_names_.count(candidate)) {
    auto it = name_counts_.find(base);
    num = it == name_counts_.end() ? 0 : it->second;
    if (detail::is_illegal_name(candidate)) {
      ++num;
      candidate = with_suffix(base, num);
    }
  } else {
    num = parse_suffix(sp.digits);
  }
  while (used_names_.count(candidate)) {
    ++num;
    candidate = with_suffix(base, num);
  }
  used_names_.insert(candidate);
  name_counts_[std::move(base)] = num;
  return candidate;
}

}  // namespace cdynamo::graph
