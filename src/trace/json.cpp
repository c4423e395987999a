// Minimal JSON reader (recursive descent over RFC 8259) and two writer helpers.
#include "json.hpp"

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>

#include "tilewire/runtime/errors.hpp"

namespace tw::trace::json {

const Value* Value::find(const std::string& key) const {
  if (type != Type::kObject) return nullptr;
  auto it = o.find(key);
  return it == o.end() ? nullptr : &it->second;
}

namespace {

constexpr int kMaxDepth = 64;

class Parser {
 public:
  explicit Parser(const std::string& s) : s_(s) {}

  Value document() {
    ws();
    Value v = value(0);
    ws();
    if (i_ != s_.size()) fail("trailing characters after the JSON value");
    return v;
  }

 private:
  const std::string& s_;
  size_t i_ = 0;

  [[noreturn]] void fail(const std::string& what) const {
    throw_error(Errc::kInvalidArgument, __FILE__, __LINE__, "trace JSON: " + what + " at offset " + std::to_string(i_));
  }
  void ws() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\n' || s_[i_] == '\r' || s_[i_] == '\t')) ++i_;
  }
  void expect(char c) {
    if (i_ >= s_.size() || s_[i_] != c) fail(std::string("expected '") + c + "'");
    ++i_;
  }
  void literal(const char* w) {
    for (const char* p = w; *p; ++p, ++i_)
      if (i_ >= s_.size() || s_[i_] != *p) fail(std::string("expected '") + w + "'");
  }

  Value value(int depth) {
    if (depth > kMaxDepth) fail("nesting deeper than 64");
    if (i_ >= s_.size()) fail("unexpected end of text");
    Value v;
    switch (s_[i_]) {
      case '{': {
        v.type = Value::Type::kObject;
        ++i_;
        ws();
        if (i_ < s_.size() && s_[i_] == '}') return ++i_, v;
        while (true) {
          ws();
          if (i_ >= s_.size() || s_[i_] != '"') fail("expected a string key");
          std::string k = string();
          ws();
          expect(':');
          ws();
          v.o[k] = value(depth + 1);
          ws();
          if (i_ < s_.size() && s_[i_] == ',') {
            ++i_;
            continue;
          }
          expect('}');
          return v;
        }
      }
      case '[': {
        v.type = Value::Type::kArray;
        ++i_;
        ws();
        if (i_ < s_.size() && s_[i_] == ']') return ++i_, v;
        while (true) {
          ws();
          v.a.push_back(value(depth + 1));
          ws();
          if (i_ < s_.size() && s_[i_] == ',') {
            ++i_;
            continue;
          }
          expect(']');
          return v;
        }
      }
      case '"':
        v.type = Value::Type::kString;
        v.s = string();
        return v;
      case 't':
        literal("true");
        v.type = Value::Type::kBool;
        v.b = true;
        return v;
      case 'f':
        literal("false");
        v.type = Value::Type::kBool;
        return v;
      case 'n':
        literal("null");
        return v;
      default:
        return number();
    }
  }

  static void put_utf8(std::string& o, uint32_t cp) {
    if (cp < 0x80) {
      o += (char)cp;
    } else if (cp < 0x800) {
      o += (char)(0xC0 | (cp >> 6));
      o += (char)(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      o += (char)(0xE0 | (cp >> 12));
      o += (char)(0x80 | ((cp >> 6) & 0x3F));
      o += (char)(0x80 | (cp & 0x3F));
    } else {
      o += (char)(0xF0 | (cp >> 18));
      o += (char)(0x80 | ((cp >> 12) & 0x3F));
      o += (char)(0x80 | ((cp >> 6) & 0x3F));
      o += (char)(0x80 | (cp & 0x3F));
    }
  }
  uint32_t hex4() {
    if (i_ + 4 > s_.size()) fail("short \\u escape");
    uint32_t v = 0;
    for (int k = 0; k < 4; ++k) {
      const char c = s_[i_++];
      v <<= 4;
      if (c >= '0' && c <= '9')
        v |= (uint32_t)(c - '0');
      else if (c >= 'a' && c <= 'f')
        v |= (uint32_t)(c - 'a' + 10);
      else if (c >= 'A' && c <= 'F')
        v |= (uint32_t)(c - 'A' + 10);
      else
        fail("bad \\u escape");
    }
    return v;
  }
  std::string string() {
    expect('"');
    std::string o;
    while (true) {
      if (i_ >= s_.size()) fail("unterminated string");
      const char c = s_[i_++];
      if (c == '"') return o;
      if ((unsigned char)c < 0x20) fail("raw control character in a string");
      if (c != '\\') {
        o += c;
        continue;
      }
      if (i_ >= s_.size()) fail("dangling escape");
      const char e = s_[i_++];
      switch (e) {
        case '"':
          o += '"';
          break;
        case '\\':
          o += '\\';
          break;
        case '/':
          o += '/';
          break;
        case 'b':
          o += '\b';
          break;
        case 'f':
          o += '\f';
          break;
        case 'n':
          o += '\n';
          break;
        case 'r':
          o += '\r';
          break;
        case 't':
          o += '\t';
          break;
        case 'u': {
          uint32_t cp = hex4();
          if (cp >= 0xD800 && cp < 0xDC00 && i_ + 1 < s_.size() && s_[i_] == '\\' && s_[i_ + 1] == 'u') {
            i_ += 2;
            const uint32_t lo = hex4();
            if (lo < 0xDC00 || lo >= 0xE000) fail("bad surrogate pair");
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
          }
          put_utf8(o, cp);
          break;
        }
        default:
          fail("bad escape");
      }
    }
  }
  Value number() {
    const size_t b = i_;
    bool neg = false, integral = true;
    if (i_ < s_.size() && s_[i_] == '-') neg = true, ++i_;
    if (i_ >= s_.size() || !std::isdigit((unsigned char)s_[i_])) fail("bad number");
    if (s_[i_] == '0')
      ++i_;
    else
      while (i_ < s_.size() && std::isdigit((unsigned char)s_[i_])) ++i_;
    if (i_ < s_.size() && s_[i_] == '.') {
      integral = false;
      ++i_;
      if (i_ >= s_.size() || !std::isdigit((unsigned char)s_[i_])) fail("bad fraction");
      while (i_ < s_.size() && std::isdigit((unsigned char)s_[i_])) ++i_;
    }
    if (i_ < s_.size() && (s_[i_] == 'e' || s_[i_] == 'E')) {
      integral = false;
      ++i_;
      if (i_ < s_.size() && (s_[i_] == '+' || s_[i_] == '-')) ++i_;
      if (i_ >= s_.size() || !std::isdigit((unsigned char)s_[i_])) fail("bad exponent");
      while (i_ < s_.size() && std::isdigit((unsigned char)s_[i_])) ++i_;
    }
    const std::string t = s_.substr(b, i_ - b);
    Value v;
    v.d = std::strtod(t.c_str(), nullptr);
    v.type = Value::Type::kDouble;
    if (integral) {
      errno = 0;
      if (neg) {
        const long long x = std::strtoll(t.c_str(), nullptr, 10);
        if (errno == 0) v.type = Value::Type::kInt, v.i = x;
      } else {
        const unsigned long long x = std::strtoull(t.c_str(), nullptr, 10);
        if (errno == 0) v.type = Value::Type::kUint, v.u = x;
      }
    }
    return v;
  }
};

}  // namespace

Value parse(const std::string& text) { return Parser(text).document(); }

int64_t as_int64(const Value& v, const char* what) {
  if (v.type == Value::Type::kInt) return v.i;
  if (v.type == Value::Type::kUint && v.u <= (uint64_t)std::numeric_limits<int64_t>::max()) return (int64_t)v.u;
  throw_error(Errc::kInvalidArgument, __FILE__, __LINE__,
              std::string("trace JSON: ") + what + " is not a 64-bit integer");
}

uint64_t as_uint64(const Value& v, const char* what) {
  if (v.type == Value::Type::kUint) return v.u;
  throw_error(Errc::kInvalidArgument, __FILE__, __LINE__,
              std::string("trace JSON: ") + what + " is not a non-negative integer");
}

double as_double(const Value& v, const char* what) {
  if (v.type == Value::Type::kNull) return std::nan("");
  if (v.is_number()) return v.d;
  throw_error(Errc::kInvalidArgument, __FILE__, __LINE__, std::string("trace JSON: ") + what + " is not a number");
}

std::string quote(const std::string& s) {
  std::string o = "\"";
  for (char c : s) {
    switch (c) {
      case '"':
        o += "\\\"";
        break;
      case '\\':
        o += "\\\\";
        break;
      case '\n':
        o += "\\n";
        break;
      case '\r':
        o += "\\r";
        break;
      case '\t':
        o += "\\t";
        break;
      default:
        if ((unsigned char)c < 0x20) {
          char b[8];
          std::snprintf(b, sizeof(b), "\\u%04x", (unsigned)(unsigned char)c);
          o += b;
        } else {
          o += c;
        }
    }
  }
  return o + "\"";
}

std::string num(double v, int decimals) {
  if (!std::isfinite(v)) return "null";
  if (v == std::floor(v) && std::fabs(v) < 1e15) return std::to_string((long long)v);
  char b[64];
  std::snprintf(b, sizeof(b), "%.*f", decimals, v);
  return b;
}

}  // namespace tw::trace::json
