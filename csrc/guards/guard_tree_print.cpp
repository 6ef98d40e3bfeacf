// guard_tree_print.cpp — owns GuardTree::text: the tree printed one node per line, indented under its parent.
#include "guards/guard_tree.h"

namespace cdynamo::guards {

namespace {
// A leaf's name on its node's line: its label, with the operand where the label alone is ambiguous.
std::string leaf_text(const Guard& g) {
  std::string full = g.describe();
  std::string src = g.source ? g.source->describe() : std::string();
  if (!src.empty() && full.compare(0, src.size(), src) == 0 && full.size() > src.size() + 1) return full.substr(src.size() + 1);
  return full;
}
}  // namespace

void GuardTree::text_of(const std::vector<Guard>& guards, uint32_t id, int indent, std::string* out) const {
  const Node& n = nodes_[id];
  std::string self = n.source->describe();
  std::string step = self;
  if (n.class_of) {  // a class root: the class every x.__class__ of its TYPE_MATCHed objects reads
    step = std::string("class ") + reinterpret_cast<PyTypeObject*>(n.class_of)->tp_name + " (x.__class__ of every x " +
           "TYPE_MATCHed to it)";
  } else if (n.parent >= 0 && n.source->base) {  // the step from the base ("._modules", "['0']", "[1]")
    std::string up = n.source->base->describe();
    if (self.compare(0, up.size(), up) == 0 && self.size() > up.size()) step = self.substr(up.size());
  }
  *out += std::string(2 * static_cast<size_t>(indent), ' ') + step;
  for (uint32_t i = n.leaf_begin; i < n.leaf_end; ++i)
    *out += (i > n.leaf_begin ? ", " : ": ") + leaf_text(guards[leaves_[i].guard]);
  *out += "\n";
  for (uint32_t k = n.child_begin; k < n.child_end; ++k) text_of(guards, child_ids_[k], indent + 1, out);
}

std::string GuardTree::text(const std::vector<Guard>& guards) const {
  std::string out;
  for (uint32_t i : state_guards_) out += guards[i].describe() + "\n";
  for (uint32_t r : roots_) text_of(guards, r, 0, &out);
  for (const Relation& r : relations_) out += guards[r.guard].describe() + "\n";
  for (uint32_t i : generic_guards_) out += guards[i].describe() + "\n";
  return out;
}

}  // namespace cdynamo::guards
