// line_table.cpp — owns the co_linetable (location table) codec of 3.11 and 3.12: per-code-unit Positions <-> bytes.
#include "bytecode/detail.h"
#include "opcodes_gen.h"

#include <algorithm>
#include <climits>
#include <stdexcept>
#include <string>

namespace cdynamo::bytecode {

namespace {

// Entry kinds (bits 3..6 of an entry's first byte).
constexpr int kShortMax = 9;    // 0..9: same line, column = kind*8 + hi3, end = column + lo4
constexpr int kOneLine0 = 10;   // 10..12: line delta 0..2, column and end column as bytes
constexpr int kNoColumn = 13;   // signed varint line delta, no columns
constexpr int kLong = 14;       // line delta, end line delta, column+1, end column+1
constexpr int kNone = 15;       // no location

class Reader {
 public:
  explicit Reader(std::string_view t) : t_(t) {}
  bool done() const { return pos_ >= t_.size(); }
  unsigned byte() {
    if (done()) throw std::runtime_error("location table: truncated entry at byte " + std::to_string(pos_));
    return static_cast<unsigned char>(t_[pos_++]);
  }
  unsigned varint() {
    unsigned b = byte();
    unsigned long long v = b & 0x3F;
    int shift = 0;
    while (b & 0x40) {
      b = byte();
      shift += 6;
      if (shift > 30) throw std::runtime_error("location table: varint overflow");
      v |= static_cast<unsigned long long>(b & 0x3F) << shift;
    }
    if (v > 0x7FFFFFFFull) throw std::runtime_error("location table: varint overflow");
    return static_cast<unsigned>(v);
  }
  int svarint() {
    const unsigned u = varint();
    return (u & 1) ? -static_cast<int>(u >> 1) : static_cast<int>(u >> 1);
  }

 private:
  std::string_view t_;
  size_t pos_ = 0;
};

class Writer {
 public:
  explicit Writer(int firstlineno) : line_(firstlineno) {}
  std::string take() { return std::move(out_); }

  // One instruction: split into entries of at most 8 code units, as the compiler does.
  void instruction(const Position& p, int units) {
    while (units > 8) {
      entry(p, 8);
      units -= 8;
    }
    if (units > 0) entry(p, units);
  }

 private:
  void first(int kind, int units) { out_.push_back(static_cast<char>(0x80 | (kind << 3) | (units - 1))); }
  void put(unsigned b) { out_.push_back(static_cast<char>(b)); }
  void varint(unsigned v) {
    while (v >= 64) {
      put(0x40 | (v & 63));
      v >>= 6;
    }
    put(v);
  }
  void svarint(int v) {
    if (v < 0) {
      varint(((0u - static_cast<unsigned>(v)) << 1) | 1u);
    } else {
      varint(static_cast<unsigned>(v) << 1);
    }
  }

  void entry(const Position& p, int units) {
    if (p.line < 0) {
      first(kNone, units);
      return;
    }
    const long long wide_delta = static_cast<long long>(p.line) - line_;
    if (wide_delta > INT_MAX / 2 || wide_delta < -(INT_MAX / 2)) {
      throw std::runtime_error("location table: line delta " + std::to_string(wide_delta) + " too large");
    }
    const int delta = static_cast<int>(wide_delta);
    const int col = std::max(p.col, -1);
    const int end_col = std::max(p.end_col, -1);
    if (col < 0 || end_col < 0) {
      if (p.end_line == p.line || p.end_line < 0) {
        first(kNoColumn, units);
        svarint(delta);
        line_ = p.line;
        return;
      }
    } else if (p.end_line == p.line) {
      if (delta == 0 && col < 80 && end_col - col < 16 && end_col >= col) {
        first(col >> 3, units);
        put(static_cast<unsigned>(((col & 7) << 4) | (end_col - col)));
        return;
      }
      if (delta >= 0 && delta < 3 && col < 128 && end_col < 128) {
        first(kOneLine0 + delta, units);
        put(static_cast<unsigned>(col));
        put(static_cast<unsigned>(end_col));
        line_ = p.line;
        return;
      }
    }
    first(kLong, units);
    svarint(delta);
    varint(static_cast<unsigned>(std::max(static_cast<long long>(p.end_line) - p.line, 0ll)));
    varint(static_cast<unsigned>(col) + 1u);
    varint(static_cast<unsigned>(end_col) + 1u);
    line_ = p.line;
  }

  std::string out_;
  int line_;
};

}  // namespace

std::vector<Position> parse_location_table(std::string_view table, int firstlineno, size_t code_units) {
  std::vector<Position> out(code_units);
  Reader r(table);
  long long line = firstlineno;
  size_t unit = 0;
  while (!r.done()) {
    const unsigned b = r.byte();
    if (!(b & 0x80)) throw std::runtime_error("location table: missing entry marker");
    const int kind = static_cast<int>((b >> 3) & 15);
    const size_t len = (b & 7) + 1;
    Position p;
    if (kind == kNone) {
      // no location; `line` is unchanged
    } else if (kind == kLong) {
      line += r.svarint();
      p.line = static_cast<int>(line);
      p.end_line = static_cast<int>(line + r.varint());
      p.col = static_cast<int>(r.varint()) - 1;
      p.end_col = static_cast<int>(r.varint()) - 1;
    } else if (kind == kNoColumn) {
      line += r.svarint();
      p.line = p.end_line = static_cast<int>(line);
    } else if (kind >= kOneLine0) {
      line += kind - kOneLine0;
      p.line = p.end_line = static_cast<int>(line);
      p.col = static_cast<int>(r.byte());
      p.end_col = static_cast<int>(r.byte());
    } else {
      static_assert(kShortMax == kOneLine0 - 1);
      const unsigned second = r.byte();
      p.line = p.end_line = static_cast<int>(line);
      p.col = kind * 8 + static_cast<int>((second >> 4) & 7);
      p.end_col = p.col + static_cast<int>(second & 15);
    }
    if (line < -0x7FFFFFFFll || line > 0x7FFFFFFFll) throw std::runtime_error("location table: line overflow");
    if (unit + len > code_units) {
      throw std::runtime_error("location table covers more than the " + std::to_string(code_units) + " code units");
    }
    std::fill(out.begin() + static_cast<std::ptrdiff_t>(unit), out.begin() + static_cast<std::ptrdiff_t>(unit + len), p);
    unit += len;
  }
  return out;
}

std::string encode_location_table(const std::vector<LocationRun>& runs, int firstlineno) {
  Writer w(firstlineno);
  if (gen::kPyMinor < 12) {
    for (const auto& run : runs) w.instruction(run.pos, run.units);
    return w.take();
  }
  // 3.12+: consecutive instructions at the same location share one run (split into entries of 8 units).
  size_t i = 0;
  while (i < runs.size()) {
    int units = 0;
    size_t j = i;
    for (; j < runs.size() && runs[j].pos == runs[i].pos; ++j) units += runs[j].units;
    w.instruction(runs[i].pos, units);
    i = j;
  }
  return w.take();
}

}  // namespace cdynamo::bytecode
