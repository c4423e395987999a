// A minimal JSON reader for the trace file (src/trace/): objects, arrays, strings, numbers,
// true/false/null. Integers keep all 64 bits (globaltimer stamps exceed a double's 53).
// Internal; the writers build their text with ostringstream.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace tw::trace::json {

struct Value {
  enum class Type { kNull, kBool, kInt, kUint, kDouble, kString, kArray, kObject };
  Type type = Type::kNull;
  bool b = false;
  int64_t i = 0;   // kInt (negative integers)
  uint64_t u = 0;  // kUint (non-negative integers)
  double d = 0;    // kDouble; also set for kInt/kUint
  std::string s;
  std::vector<Value> a;
  std::map<std::string, Value> o;

  bool is_number() const { return type == Type::kInt || type == Type::kUint || type == Type::kDouble; }
  // nullptr when absent or not an object.
  const Value* find(const std::string& key) const;
};

// Throws tw::Error(kInvalidArgument) "trace JSON: <what> at offset N".
Value parse(const std::string& text);

// Accessors that throw kInvalidArgument naming `what` when the value has another type/range.
int64_t as_int64(const Value& v, const char* what);
uint64_t as_uint64(const Value& v, const char* what);
double as_double(const Value& v, const char* what);  // null -> NaN

// A JSON string literal (with quotes) for s.
std::string quote(const std::string& s);
// A number for the writers: NaN/inf -> null; integral values without a fraction.
std::string num(double v, int decimals = 3);

}  // namespace tw::trace::json
