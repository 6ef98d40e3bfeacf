// exception_table.cpp — owns the 3.11 co_exceptiontable codec (6-bit big-endian varints, 0x80 entry marker).
#include "bytecode/detail.h"

#include <climits>
#include <stdexcept>
#include <string>

namespace cdynamo::bytecode {

namespace {

constexpr unsigned kContinue = 0x40;
constexpr unsigned kEntryStart = 0x80;

class Reader {
 public:
  explicit Reader(std::string_view t) : t_(t) {}
  bool done() const { return pos_ >= t_.size(); }
  size_t pos() const { return pos_; }
  unsigned byte() {
    if (done()) throw std::runtime_error("exception table: truncated entry at byte " + std::to_string(pos_));
    return static_cast<unsigned char>(t_[pos_++]);
  }
  int varint() {
    unsigned b = byte();
    unsigned long long v = b & 0x3F;
    while (b & kContinue) {
      b = byte();
      v = (v << 6) | (b & 0x3F);
      if (v >= (1ull << 30)) throw std::runtime_error("exception table: varint overflow");
    }
    return static_cast<int>(v);
  }

 private:
  std::string_view t_;
  size_t pos_ = 0;
};

void put_varint(std::string& out, unsigned value, unsigned msb) {
  if (value >= (1u << 30)) throw std::runtime_error("exception table: value too large to encode");
  for (int shift = 24; shift > 0; shift -= 6) {
    if (value >= (1u << shift)) {
      out.push_back(static_cast<char>(((value >> shift) & 0x3F) | kContinue | msb));
      msb = 0;
    }
  }
  out.push_back(static_cast<char>((value & 0x3F) | msb));
}

}  // namespace

std::vector<RawExceptionEntry> parse_exception_table(std::string_view table) {
  std::vector<RawExceptionEntry> out;
  Reader r(table);
  while (!r.done()) {
    if (!(static_cast<unsigned char>(table[r.pos()]) & kEntryStart)) {
      throw std::runtime_error("exception table: missing entry marker at byte " + std::to_string(r.pos()));
    }
    // Varints are < 2^30 code units; byte offsets are computed wide and must fit an int.
    const long long start = 2ll * r.varint();
    const long long end = start + 2ll * r.varint();
    const long long target = 2ll * r.varint();
    const int dl = r.varint();
    if (end > INT_MAX || target > INT_MAX) throw std::runtime_error("exception table: offset out of range");
    RawExceptionEntry e;
    e.start = static_cast<int>(start);
    e.end = static_cast<int>(end);
    e.target = static_cast<int>(target);
    e.depth = dl >> 1;
    e.lasti = (dl & 1) != 0;
    out.push_back(e);
  }
  return out;
}

std::string encode_exception_table(const std::vector<RawExceptionEntry>& entries) {
  std::string out;
  for (const auto& e : entries) {
    if (e.start < 0 || e.end <= e.start || e.target < 0 || e.depth < 0 || (e.start | e.end | e.target) & 1) {
      throw std::runtime_error("exception table: invalid entry " + std::to_string(e.start) + " to " +
                               std::to_string(e.end) + " -> " + std::to_string(e.target) + " [" +
                               std::to_string(e.depth) + "]");
    }
    put_varint(out, static_cast<unsigned>(e.start / 2), kEntryStart);
    put_varint(out, static_cast<unsigned>((e.end - e.start) / 2), 0);
    put_varint(out, static_cast<unsigned>(e.target / 2), 0);
    put_varint(out, (static_cast<unsigned>(e.depth) << 1) | (e.lasti ? 1u : 0u), 0);
  }
  return out;
}

}  // namespace cdynamo::bytecode
